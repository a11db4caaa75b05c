// Administration: tenants and their limits (the admin token), the tenant's
// tokens (create: shown once; revoke), secrets (names only) and the audit log.

import { api, v1 } from '../api.js';
import { confirmDialog, openDialog } from '../dialog.js';
import { empty, errorBox, field, forbidden, h, loading, pretty, replace, table, timeEl } from '../dom.js';

export function render(ctx) {
  ctx.setTitle('Admin');
  const s = ctx.session;
  const parts = [h('h1', null, 'Admin'),
    h('p', { class: 'muted' }, `Signed in with token ${s.token_id} (scope ${s.scope})${s.admin ? ', the installation\'s admin token' : ''}; tenant ${s.tenant ?? '—'}.`)];
  if (s.admin) parts.push(tenantsSection(ctx));
  if (s.admin || s.scope === 'admin') {
    parts.push(tokensSection(ctx, {
      title: `Tokens of tenant ${s.tenant ?? ''}`, id: 'tokens', list: '/v1/tokens', create: '/v1/tokens', revoke: (tid) => v1('tokens', tid),
    }));
  } else {
    // Asking would only be refused (403).
    parts.push(h('section', { id: 'tokens' }, h('h2', null, 'Tokens'),
      h('p', { class: 'error forbidden' }, `Managing tokens needs the admin scope; this token has the ${s.scope} scope.`)));
  }
  parts.push(secretsSection(ctx), auditSection(ctx));
  replace(ctx.main, ...parts);
  return null;
}

/** Loads `load()` into `body`; a 403 says the admin scope is needed. */
async function fill(body, load, draw, what) {
  replace(body, loading());
  try {
    replace(body, draw(await load()));
  } catch (e) {
    if (e.name === 'AbortError') return;
    replace(body, e.status === 403 ? forbidden(e, what) : errorBox(e));
  }
}

// Tenants (admin token) -------------------------------------------------------------

function limitsText(limits) {
  const parts = Object.entries(limits ?? {}).filter(([, v]) => v !== null && v !== undefined && !(Array.isArray(v) && !v.length))
    .map(([k, v]) => `${k}: ${Array.isArray(v) ? v.join(', ') : v}`);
  return parts.length ? parts.join(' · ') : 'defaults';
}

function tenantsSection(ctx) {
  const body = h('div', null);
  const name = h('input', { type: 'text', id: 'tenant-name', pattern: '[a-z0-9][a-z0-9_-]{0,62}', spellcheck: 'false', autocomplete: 'off' });
  const limits = h('textarea', { id: 'tenant-limits', rows: 3, spellcheck: 'false' }, '{}');
  const result = h('div', { role: 'status' });
  const form = h('form', { class: 'card', novalidate: true }, h('h3', null, 'Create a tenant'),
    field('Name', name, 'lowercase letters, digits, - and _'), field('Limits (JSON)', limits, 'e.g. {"max_concurrent": 10, "allow_hosts": ["api.example.org"]}'),
    h('button', { type: 'submit', id: 'tenant-create' }, 'Create tenant'), result);
  const load = () => fill(body, () => api.get('/v1/tenants', null, ctx.signal), (tenants) => tenants.length
    ? table(['Tenant', 'Limits', 'Created', ''], tenants.map((t) => tenantRow(ctx, t, load)), { id: 'tenants' })
    : empty('No tenants.'), 'Managing tenants');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const body_ = { name: name.value.trim(), limits: JSON.parse(limits.value || '{}') };
      await api.post('/v1/tenants', body_);
      replace(result, h('p', { class: 'ok' }, `Tenant ${body_.name} created.`));
      name.value = '';
      load();
    } catch (err) {
      replace(result, errorBox(err));
    }
  });
  load();
  return h('section', { id: 'tenants-section' }, h('h2', null, 'Tenants'), body, form);
}

function tenantRow(ctx, t, reload) {
  const tokens = h('div', { hidden: true });
  const showTokens = h('button', { type: 'button', class: 'secondary small', 'aria-expanded': 'false' }, 'Tokens');
  showTokens.addEventListener('click', () => {
    const open = tokens.hidden;
    tokens.hidden = !open;
    showTokens.setAttribute('aria-expanded', String(open));
    if (open && !tokens.firstChild) {
      replace(tokens, tokensSection(ctx, {
        title: `Tokens of ${t.name}`, id: `tokens-${t.name}`, list: `${v1('tenants', t.name)}/tokens`,
        create: `${v1('tenants', t.name)}/tokens`, revoke: (tid) => v1('tenants', t.name, 'tokens', tid), nested: true,
      }));
    }
  });
  const edit = h('button', { type: 'button', class: 'secondary small' }, 'Limits…');
  edit.addEventListener('click', () => editLimits(t, reload));
  return [
    h('tr', { 'data-tenant': t.name },
      h('td', null, h('strong', null, t.name)), h('td', { class: 'wrap' }, limitsText(t.limits)), h('td', null, timeEl(t.created_at)),
      h('td', null, showTokens, ' ', edit)),
    h('tr', null, h('td', { colspan: '4' }, tokens)),
  ];
}

function editLimits(t, reload) {
  const text = h('textarea', { id: 'limits-patch', rows: 10, spellcheck: 'false' }, pretty(t.limits ?? {}));
  const error = h('div', null);
  const save = h('button', { type: 'submit', id: 'limits-save' }, 'Save');
  const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
  const form = h('form', { novalidate: true },
    field('Limits (a JSON merge patch: a field given replaces it, null clears it)', text), error,
    h('div', { class: 'buttons' }, cancel, save));
  const dlg = openDialog({ title: `Limits of ${t.name}`, content: form, id: 'limits-dialog' });
  cancel.addEventListener('click', () => dlg.close());
  text.focus();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api.patch(v1('tenants', t.name), { limits: JSON.parse(text.value) });
      dlg.close('ok');
      reload();
    } catch (err) {
      replace(error, errorBox(err));
    }
  });
}

// Tokens -------------------------------------------------------------------------------

function tokensSection(ctx, { title, id, list, create, revoke, nested = false }) {
  const body = h('div', null);
  const label = h('input', { type: 'text', id: `${id}-label`, maxlength: '200', autocomplete: 'off' });
  const scopes = ['read', 'write', 'admin'].map((scope) => h('input', { type: 'checkbox', value: scope, id: `${id}-scope-${scope}`, checked: scope !== 'admin' }));
  const created = h('div', { id: `${id}-created` });
  const form = h('form', { class: 'row toolbar', novalidate: true },
    field('Label', label),
    h('fieldset', null, h('legend', null, 'Scopes'), scopes.map((c) => h('span', { class: 'field inline' }, c, h('label', { for: c.id }, c.value)))),
    h('button', { type: 'submit', id: `${id}-create` }, 'Create token'));
  const load = () => fill(body, () => api.get(list, null, ctx.signal), (tokens) => tokens.length
    ? table(['Id', 'Label', 'Scopes', 'Created', 'Created by', 'State', ''], tokens.map((t) => {
      const button = h('button', { type: 'button', class: 'secondary small', 'data-revoke': t.id, disabled: !!t.revoked_at }, 'Revoke');
      button.addEventListener('click', async () => {
        const ok = await confirmDialog({ title: 'Revoke token', message: `Revoke token ${t.id}${t.label ? ` (${t.label})` : ''}? Requests with it are refused from now on, and its sessions end.`, confirmLabel: 'Revoke', danger: true });
        if (!ok) return;
        try {
          await api.del(revoke(t.id));
          load();
        } catch (err) {
          replace(created, err.status === 403 ? forbidden(err, 'Revoking tokens') : errorBox(err));
        }
      });
      return h('tr', { 'data-token': t.id },
        h('td', { class: 'mono' }, t.id), h('td', { class: 'wrap' }, t.label), h('td', null, (t.scopes ?? []).join(', ')),
        h('td', null, timeEl(t.created_at)), h('td', { class: 'mono' }, t.created_by ?? 'dagr'),
        h('td', null, t.revoked_at ? ['revoked ', timeEl(t.revoked_at)] : 'active'), h('td', null, button));
    }), { id: `${id}-table` })
    : empty('No tokens.'), 'Managing tokens');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const chosen = scopes.filter((c) => c.checked).map((c) => c.value);
    if (!chosen.length) {
      replace(created, errorBox({ message: 'Choose at least one scope.' }));
      return;
    }
    try {
      const token = await api.post(create, { label: label.value, scopes: chosen });
      label.value = '';
      replace(created, shownOnce(token));
      load();
    } catch (err) {
      replace(created, err.status === 403 ? forbidden(err, 'Creating tokens') : errorBox(err));
    }
  });
  load();
  const Heading = nested ? 'h3' : 'h2';
  return h('section', { id }, h(Heading, null, title), body, form, created);
}

function shownOnce(token) {
  const input = h('input', { type: 'text', readOnly: true, value: token.token, id: 'new-token', class: 'token-once', 'aria-label': 'The new token', spellcheck: 'false' });
  const status = h('span', { role: 'status', class: 'muted' });
  const copy = h('button', { type: 'button', id: 'copy-token', class: 'secondary' }, 'Copy');
  copy.addEventListener('click', async () => {
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      status.textContent = 'Copied.';
    } catch {
      status.textContent = 'Select the text and copy it (Ctrl+C).';
    }
  });
  input.addEventListener('focus', () => input.select());
  return h('div', { class: 'card' },
    h('p', { class: 'warning', role: 'alert' }, `Token ${token.id} created. Copy it now: dagr does not keep it and cannot show it again.`),
    h('div', { class: 'row' }, input, copy, status));
}

// Secrets ------------------------------------------------------------------------------

function secretsSection(ctx) {
  const body = h('div', null);
  const name = h('input', { type: 'text', id: 'secret-name', pattern: '[A-Za-z0-9_.-]{1,128}', autocomplete: 'off', spellcheck: 'false' });
  const value = h('input', { type: 'password', id: 'secret-value', autocomplete: 'new-password' });
  const result = h('div', { role: 'status' });
  const form = h('form', { class: 'row toolbar', novalidate: true }, field('Name', name), field('Value', value),
    h('button', { type: 'submit', id: 'secret-put' }, 'Save secret'));
  const load = () => fill(body, () => api.get('/v1/secrets', null, ctx.signal), (secrets) => secrets.length
    ? table(['Name', 'Updated', ''], secrets.map((sec) => {
      const del = h('button', { type: 'button', class: 'secondary small', 'data-delete-secret': sec.name }, 'Delete');
      del.addEventListener('click', async () => {
        if (!await confirmDialog({ title: 'Delete secret', message: `Delete secret ${sec.name}? Tasks that use it will fail.`, confirmLabel: 'Delete', danger: true })) return;
        try {
          await api.del(v1('secrets', sec.name));
          load();
        } catch (err) {
          replace(result, errorBox(err));
        }
      });
      return h('tr', { 'data-secret': sec.name }, h('td', { class: 'mono' }, sec.name), h('td', null, timeEl(sec.updated_at)), h('td', null, del));
    }), { id: 'secrets' })
    : empty('No secrets.'), 'Secrets');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api.put(v1('secrets', name.value.trim()), { value: value.value });
      replace(result, h('p', { class: 'ok' }, `Secret ${name.value.trim()} saved.`));
      name.value = '';
      value.value = '';
      load();
    } catch (err) {
      replace(result, errorBox(err));
    }
  });
  load();
  return h('section', { id: 'secrets-section' }, h('h2', null, 'Secrets'),
    h('p', { class: 'muted' }, 'Write-only: dagr never shows a secret\'s value again; tasks read them.'), body, form, result);
}

// Audit ----------------------------------------------------------------------------------

function auditSection(ctx) {
  const body = h('div', null);
  const stack = [];
  let after = 0;
  let next = null;
  const earlier = h('button', { type: 'button', class: 'secondary', id: 'audit-prev' }, '← Earlier');
  const later = h('button', { type: 'button', class: 'secondary', id: 'audit-next' }, 'Later →');
  const load = async (cursor) => {
    earlier.disabled = true;
    later.disabled = true;
    await fill(body, () => api.get('/v1/audit', { after: cursor || undefined, limit: 50 }, ctx.signal), (page) => {
      after = cursor;
      next = page.next ?? null;
      return page.records.length
        ? table(['#', 'When', 'Token', 'Action', 'Target', 'Detail'], page.records.map((r) => h('tr', { 'data-audit': String(r.seq) },
          h('td', { class: 'num' }, String(r.seq)), h('td', null, timeEl(r.at)), h('td', { class: 'mono' }, r.token_id),
          h('td', { class: 'mono' }, r.action), h('td', { class: 'mono wrap' }, r.target),
          h('td', { class: 'mono wrap' }, r.detail && Object.keys(r.detail).length ? JSON.stringify(r.detail) : ''))), { id: 'audit' })
        : empty('No records.');
    }, 'The audit log');
    earlier.disabled = stack.length === 0;
    later.disabled = !next;
  };
  earlier.addEventListener('click', () => load(stack.pop() ?? 0));
  later.addEventListener('click', () => {
    if (next === null) return;
    stack.push(after);
    load(next);
  });
  load(0);
  return h('section', { id: 'audit-section' }, h('h2', null, 'Audit log'), h('p', { class: 'muted' }, 'Oldest first.'), body, h('div', { class: 'pager' }, earlier, later));
}
