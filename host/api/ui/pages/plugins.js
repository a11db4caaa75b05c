// Plugins: the built-ins and the tenant's own; one plugin's params schema
// as documentation, its versions; uploading a component.

import { api, request, v1 } from '../api.js';
import { kv } from '../components.js';
import { empty, errorBox, field, h, links, loading, notFound, pretty, replace, table } from '../dom.js';
import { schemaRows } from '../schema-doc.js';

export function render(ctx) {
  return ctx.page === 'plugin' ? renderPlugin(ctx) : renderList(ctx);
}

async function renderList(ctx) {
  ctx.setTitle('Plugins');
  const body = h('div', null, loading('Loading plugins'));
  const filter = h('input', { type: 'search', id: 'plugin-search', placeholder: 'Search plugins', 'aria-label': 'Search plugins', autocomplete: 'off' });
  replace(ctx.main, h('div', { class: 'page-head' }, h('h1', null, 'Plugins')),
    h('div', { class: 'toolbar' }, filter), body, uploadForm(ctx));
  let plugins;
  try {
    plugins = await api.get('/v1/plugins', null, ctx.signal);
  } catch (e) {
    if (e.name !== 'AbortError') replace(body, errorBox(e));
    return null;
  }
  const byName = new Map();
  for (const p of plugins) {
    if (!byName.has(p.name)) byName.set(p.name, []);
    byName.get(p.name).push(p);
  }
  if (!byName.size) {
    replace(body, empty('No plugins.'));
    return null;
  }
  const section = (title, entries, id) => h('section', { id },
    h('h2', null, title),
    entries.length ? table(['Name', 'Latest version', 'Versions', 'Description'], entries.map(([name, versions]) => {
      const latest = versions[versions.length - 1];
      return h('tr', { 'data-plugin': name },
        h('td', null, h('a', { href: links.plugin(name) }, name)),
        h('td', { class: 'mono' }, latest.version),
        h('td', { class: 'num' }, String(versions.length)),
        h('td', { class: 'wrap' }, latest.description ?? ''));
    })) : empty('None yet: upload one below.'));
  const entries = [...byName.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  const builtins = entries.filter(([, v]) => v.some((p) => p.builtin));
  const own = entries.filter(([, v]) => !v.some((p) => p.builtin));
  replace(body, section('The tenant\'s plugins', own, 'tenant-plugins'), section('Built in', builtins, 'builtin-plugins'));
  const rows = [...body.querySelectorAll('tr[data-plugin]')];
  filter.addEventListener('input', () => {
    const q = filter.value.trim().toLowerCase();
    for (const row of rows) row.hidden = q !== '' && !row.dataset.plugin.toLowerCase().includes(q) && !row.textContent.toLowerCase().includes(q);
  });
  return null;
}

function uploadForm(ctx) {
  const file = h('input', { type: 'file', id: 'plugin-file', accept: '.wasm,application/wasm', required: true });
  const submit = h('button', { type: 'submit', id: 'plugin-upload' }, 'Upload');
  const result = h('div', { id: 'plugin-upload-result', role: 'status' });
  const form = h('form', { class: 'card', novalidate: true },
    h('h2', null, 'Upload a plugin'),
    h('p', { class: 'muted' }, 'A WebAssembly component (.wasm) implementing the dagr plugin world; its name and version are what it describes itself as. A published version never changes.'),
    field('Component', file), submit, result);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const chosen = file.files?.[0];
    if (!chosen) {
      replace(result, errorBox({ message: 'Choose a .wasm file.' }));
      return;
    }
    submit.disabled = true;
    replace(result, h('p', { class: 'loading' }, `Uploading ${chosen.name} (${chosen.size} bytes); dagr checks and compiles it…`));
    try {
      const { status, data } = await request('POST', '/v1/plugins', { body: chosen, contentType: 'application/wasm' });
      replace(result, h('p', { class: 'ok' }, status === 201 ? 'Published ' : 'Already published with these bytes: ',
        h('a', { href: links.plugin(data.name) }, `${data.name}@${data.version}`)));
    } catch (err) {
      replace(result, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

async function renderPlugin(ctx) {
  const name = ctx.params.name;
  ctx.setTitle(`Plugin ${name}`);
  replace(ctx.main, loading('Loading the plugin'));
  let versions;
  try {
    versions = await api.get(v1('plugins', name), null, ctx.signal);
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(ctx.main, e.status === 404 ? notFound(e.message) : errorBox(e));
    return null;
  }
  const picker = h('select', { id: 'plugin-version', 'aria-label': 'Version' },
    versions.map((v, i) => h('option', { value: String(i), selected: i === versions.length - 1 }, v.version)));
  const doc = h('div', { id: 'plugin-doc' });
  const show = () => {
    const p = versions[Number(picker.value)];
    replace(doc,
      p.description ? h('p', null, p.description) : null,
      kv([
        ['Version', p.version],
        ['Kind', p.builtin ? 'built in (global, read-only)' : 'the tenant\'s own'],
        ['Size', p.size ? `${p.size} bytes` : null],
        ['sha256', p.sha256 ? h('span', { class: 'mono' }, p.sha256) : null],
      ]),
      h('h2', null, 'Params'),
      schemaTable(p.params_schema),
      p.params_schema ? h('details', null, h('summary', null, 'The JSON Schema'), h('pre', null, pretty(p.params_schema))) : null,
      h('p', null, h('a', { href: `/ui/jobs?plugin=${encodeURIComponent(p.name)}` }, `Run ${p.name} as a job`)));
  };
  picker.addEventListener('change', show);
  replace(ctx.main,
    h('p', { class: 'muted' }, h('a', { href: '/ui/plugins' }, 'Plugins'), ' /'),
    h('div', { class: 'page-head' }, h('h1', null, name), h('div', { class: 'actions' }, h('label', { for: 'plugin-version' }, 'Version '), picker)),
    doc,
    h('h2', null, 'Versions'),
    table(['Version', 'sha256', 'Size'], versions.slice().reverse().map((v) => h('tr', null,
      h('td', { class: 'mono' }, v.version), h('td', { class: 'mono' }, (v.sha256 ?? '').slice(0, 16)), h('td', { class: 'num' }, v.size ? String(v.size) : '')))));
  show();
  return null;
}

function schemaTable(schema) {
  if (!schema) return empty('This plugin declares no params schema: it takes any params.');
  const rows = schemaRows(schema);
  if (!rows.length) return empty('No params.');
  return table(['Name', 'Type', 'Required', 'Default', 'Description'], rows.map((r) => {
    const name = h('td', { class: 'mono' }, r.path);
    if (r.depth) name.classList.add(`depth-${Math.min(r.depth, 4)}`);
    return h('tr', { 'data-param': r.path },
      name,
      h('td', { class: 'mono' }, r.type),
      h('td', null, r.required ? 'required' : 'optional'),
      h('td', { class: 'mono wrap' }, r.default !== undefined ? JSON.stringify(r.default) : ''),
      h('td', { class: 'wrap' }, r.description,
        r.enum ? h('div', { class: 'muted' }, `one of: ${r.enum.map((v) => JSON.stringify(v)).join(', ')}`) : null,
        r.limits ? h('div', { class: 'muted' }, r.limits) : null));
  }), { id: 'plugin-params' });
}
