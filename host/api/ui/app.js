// The shell: header and navigation, the router (History API under /ui/),
// the session gate. Pages live in pages/*.js and are loaded when first shown.

import { api, getSession, loadSession, onUnauthorized, setSession, signOut, switchTenant } from './api.js';
import { errorBox, h, notFound, replace } from './dom.js';
import { matchRoute, safeNext } from './routes.js';

document.addEventListener('securitypolicyviolation', (e) => console.error('CSP violation', e.violatedDirective));

const header = document.getElementById('header');
const main = document.getElementById('main');

const NAV = [
  ['Workflows', '/ui/', ['workflows', 'workflow']],
  ['Runs', '/ui/runs', ['runs', 'run']],
  ['Jobs', '/ui/jobs', ['jobs']],
  ['Plugins', '/ui/plugins', ['plugins', 'plugin']],
  ['Admin', '/ui/admin', ['admin']],
  ['Cluster', '/ui/cluster', ['cluster']],
];

const PAGES = {
  signin: () => import('./pages/signin.js'),
  workflows: () => import('./pages/workflows.js'),
  workflow: () => import('./pages/workflow.js'),
  runs: () => import('./pages/runs.js'),
  run: () => import('./pages/run.js'),
  jobs: () => import('./pages/jobs.js'),
  plugins: () => import('./pages/plugins.js'),
  plugin: () => import('./pages/plugins.js'),
  admin: () => import('./pages/admin.js'),
  cluster: () => import('./pages/cluster.js'),
};

/** The page on screen: its route, its controller and what ends it. */
let current = null;
let routeSeq = 0;

export function navigate(url, { replace: replaceState = false } = {}) {
  const here = location.pathname + location.search + location.hash;
  if (url !== here) {
    if (replaceState) history.replaceState(null, '', url);
    else history.pushState(null, '', url);
  }
  route();
}

/** Changes the query string of the current page without routing again. */
export function setQuery(params, { push = false } = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const text = q.toString();
  const url = location.pathname + (text ? `?${text}` : '');
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
}

function renderHeader(page) {
  const session = getSession();
  const brand = h('a', { href: '/ui/', class: 'brand' }, h('img', { src: '/ui/assets/icon.svg', alt: '', width: 24, height: 24 }), 'dagr');
  if (!session) {
    replace(header, brand);
    return;
  }
  const nav = h('nav', { 'aria-label': 'Main' }, h('ul', null, NAV.map(([label, href, pages]) =>
    h('li', null, h('a', { href, 'aria-current': pages.includes(page) ? 'page' : null }, label)))));
  const who = h('div', { class: 'who' });
  if (session.admin) {
    who.appendChild(tenantSwitcher(session));
  } else {
    who.appendChild(h('span', { class: 'tenant', id: 'header-tenant', title: `token ${session.token_id} · scope ${session.scope}` },
      'tenant ', h('strong', null, session.tenant ?? '—')));
  }
  who.appendChild(h('button', { type: 'button', id: 'sign-out', class: 'secondary', onclick: doSignOut }, 'Sign out'));
  replace(header, brand, nav, who);
}

/** The tenants' names, read once (for the admin's switcher). */
let tenantNames = null;

function tenantSwitcher(session) {
  const select = h('select', { id: 'tenant-switch', 'aria-label': 'Tenant' },
    h('option', { value: session.tenant ?? '' }, session.tenant ?? '(no tenant)'));
  const box = h('label', { class: 'tenant', id: 'header-tenant', title: 'The admin token: acting for this tenant' },
    'admin · tenant ', select);
  tenantNames ??= api.get('/v1/tenants').then((tenants) => tenants.map((t) => t.name));
  tenantNames.then((list) => {
    const names = list.slice();
    if (session.tenant && !names.includes(session.tenant)) names.unshift(session.tenant);
    replace(select, names.map((n) => h('option', { value: n, selected: n === session.tenant }, n)));
  }).catch(() => {
    // The list is a convenience; the current tenant stays shown.
    tenantNames = null;
  });
  select.addEventListener('change', async () => {
    try {
      await switchTenant(select.value);
      renderHeader(current?.route.page);
      route({ force: true });
    } catch (e) {
      main.prepend(errorBox(e));
    }
  });
  return box;
}

async function doSignOut() {
  try {
    await signOut();
  } catch {
    // Signed out locally either way.
  }
  setSession(null);
  tenantNames = null;
  navigate('/ui/signin');
}

function endCurrent() {
  if (!current) return;
  current.abort.abort();
  try {
    current.controller?.destroy?.();
  } catch (e) {
    console.error(e);
  }
  current = null;
}

async function route({ force = false } = {}) {
  const seq = ++routeSeq;
  const match = matchRoute(location.pathname);
  const query = new URLSearchParams(location.search);
  if (!match.public && !getSession()) {
    const next = location.pathname + location.search;
    history.replaceState(null, '', `/ui/signin?next=${encodeURIComponent(next)}`);
    return route();
  }
  // The same page of the same object (a run and one of its tasks): let it update itself.
  if (!force && current && current.route.page === match.page && current.controller?.update &&
      current.key === keyOf(match)) {
    current.controller.update(match.params, query);
    return;
  }
  endCurrent();
  renderHeader(match.page);
  document.title = `${match.title} · dagr`;
  const abort = new AbortController();
  current = { route: match, key: keyOf(match), abort, controller: null };
  if (match.page === 'notfound') {
    replace(main, notFound(`There is no page at ${location.pathname}.`));
    performance.mark('dagr:ready', { detail: match.page });
    return;
  }
  let module;
  try {
    module = await PAGES[match.page]();
  } catch (e) {
    replace(main, errorBox({ message: `cannot load the page: ${e.message}` }));
    console.error(e);
    return;
  }
  if (seq !== routeSeq) return;
  replace(main);
  const ctx = {
    main,
    params: match.params,
    query,
    page: match.page,
    signal: abort.signal,
    session: getSession(),
    navigate,
    setQuery,
    setTitle: (t) => { document.title = `${t} · dagr`; },
    refreshHeader: () => renderHeader(match.page),
  };
  try {
    current.controller = (await module.render(ctx)) ?? null;
  } catch (e) {
    if (e.name === 'AbortError') return;
    replace(main, errorBox(e));
    console.error(e);
  }
  // The page's main content is shown (for the benchmarks: scripts/bench-ui.sh).
  if (seq === routeSeq) performance.mark('dagr:ready', { detail: match.page });
  const active = document.activeElement;
  if (seq === routeSeq && match.page !== 'signin' && (!active || active === document.body || header.contains(active))) {
    main.focus({ preventScroll: true });
  }
}

function keyOf(match) {
  return match.page === 'run' ? match.params.id : JSON.stringify(match.params);
}

// Same-origin links under /ui/ route without a page load.
document.addEventListener('click', (event) => {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const a = event.target.closest?.('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || url.pathname.startsWith('/ui/assets/')) return;
  if (url.pathname === location.pathname && url.search === location.search && url.hash) return;
  event.preventDefault();
  navigate(url.pathname + url.search + url.hash);
});

window.addEventListener('popstate', () => route());

onUnauthorized(() => {
  if (!getSession()) return;
  setSession(null);
  const next = location.pathname + location.search;
  navigate(`/ui/signin?next=${encodeURIComponent(next)}`, { replace: true });
});

/** After signing in: where the user was going. */
export function afterSignIn() {
  const next = safeNext(new URLSearchParams(location.search).get('next'));
  navigate(next, { replace: true });
}

async function boot() {
  // Fetch the page's code while the session is asked for.
  PAGES[matchRoute(location.pathname).page]?.().catch(() => {});
  try {
    await loadSession();
  } catch (e) {
    replace(main, errorBox(e));
    return;
  }
  route();
}

boot();
