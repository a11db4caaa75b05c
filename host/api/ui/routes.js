// The UI's routes: a path under /ui/ → a page and its parameters. Pure.

const ROUTES = [
  { pattern: [], page: 'workflows', title: 'Workflows' },
  { pattern: ['signin'], page: 'signin', title: 'Sign in', public: true },
  { pattern: ['workflows'], page: 'workflows', title: 'Workflows' },
  { pattern: ['workflows', ':name'], page: 'workflow', title: 'Workflow' },
  { pattern: ['runs'], page: 'runs', title: 'Runs' },
  { pattern: ['runs', ':id'], page: 'run', title: 'Run' },
  { pattern: ['runs', ':id', 'tasks', ':task'], page: 'run', title: 'Run' },
  { pattern: ['jobs'], page: 'jobs', title: 'Jobs' },
  { pattern: ['plugins'], page: 'plugins', title: 'Plugins' },
  { pattern: ['plugins', ':name'], page: 'plugin', title: 'Plugin' },
  { pattern: ['admin'], page: 'admin', title: 'Admin' },
  { pattern: ['cluster'], page: 'cluster', title: 'Cluster' },
];

/** `{page, params, title, public}` for a pathname; page `notfound` when none matches. */
export function matchRoute(pathname) {
  let path = pathname;
  if (path === '/ui' || path === '/') path = '/ui/';
  if (!path.startsWith('/ui/')) return { page: 'notfound', params: {}, title: 'Not found' };
  const parts = path.slice(4).split('/').filter((p, i, all) => p !== '' || i < all.length - 1);
  if (parts.length && parts[parts.length - 1] === '') parts.pop();
  for (const route of ROUTES) {
    if (route.pattern.length !== parts.length) continue;
    const params = {};
    let ok = true;
    for (let i = 0; i < parts.length; i++) {
      const want = route.pattern[i];
      if (want.startsWith(':')) {
        if (parts[i] === '') { ok = false; break; }
        try {
          params[want.slice(1)] = decodeURIComponent(parts[i]);
        } catch {
          ok = false;
          break;
        }
      } else if (want !== parts[i]) {
        ok = false;
        break;
      }
    }
    if (ok) return { page: route.page, params, title: route.title, public: !!route.public };
  }
  return { page: 'notfound', params: {}, title: 'Not found' };
}

/** Where to go after signing in: only a path of the UI itself. */
export function safeNext(next) {
  if (typeof next !== 'string' || !next.startsWith('/ui/') || next.startsWith('/ui/signin')) return '/ui/';
  if (next.includes('//') || next.includes('\\')) return '/ui/';
  return next;
}
