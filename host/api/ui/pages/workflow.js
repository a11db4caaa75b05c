// A workflow: its DAG, runs, definition, versions (with a diff), lineage,
// and the trigger, backfill and schedule actions.

import { api, request, v1 } from '../api.js';
import { kv, pager, runsTable, tabs } from '../components.js';
import { openDialog } from '../dialog.js';
import { diffLines, hunks } from '../diff.js';
import {
  empty, errorBox, field, h, links, loading, notFound, pretty, replace, runLink, table, timeEl,
} from '../dom.js';
import { graphView } from '../graph-view.js';

export async function render(ctx) {
  const name = ctx.params.name;
  ctx.setTitle(name);
  replace(ctx.main, loading('Loading the workflow'));
  let detail;
  try {
    detail = await api.get(v1('workflows', name), null, ctx.signal);
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(ctx.main, e.status === 404 ? notFound(e.message) : errorBox(e));
    return null;
  }
  const def = detail.definition ?? {};
  const cleanups = [];
  const result = h('div', { class: 'result', id: 'workflow-result', role: 'status' });
  const backfillResult = h('div', { id: 'backfill-result' });

  const actions = h('div', { class: 'actions' },
    h('button', { type: 'button', id: 'trigger', onclick: () => triggerDialog(ctx, name, def) }, '► Trigger'),
    h('button', { type: 'button', id: 'backfill', class: 'secondary', onclick: () => backfillDialog(name, backfillResult) }, 'Backfill…'),
    def.schedule ? h('button', { type: 'button', id: 'schedule-pause', class: 'secondary', onclick: () => setSchedule(name, true, result) }, '‖ Pause schedule') : null,
    def.schedule ? h('button', { type: 'button', id: 'schedule-resume', class: 'secondary', onclick: () => setSchedule(name, false, result) }, '► Resume schedule') : null);

  const schedule = def.schedule
    ? `${def.schedule.cron}${def.schedule.timezone ? ` (${def.schedule.timezone})` : ''}${detail.schedule_paused ? ' · ‖ paused' : ''}`
    : 'none (manual)';
  const head = h('div', null,
    h('div', { class: 'page-head' },
      h('div', null, h('p', { class: 'muted' }, h('a', { href: '/ui/' }, 'Workflows'), ' / '), h('h1', { id: 'workflow-name' }, name)),
      actions),
    def.description ? h('p', null, def.description) : null,
    kv([
      ['Version', `${detail.version} (latest ${detail.latest_version})`],
      ['Schedule', schedule],
      ['Tasks', String(def.tasks?.length ?? 0)],
      ['Updated', timeEl(detail.created_at)],
      ['Params', def.params && Object.keys(def.params).length ? Object.keys(def.params).join(', ') : null],
    ]),
    result, backfillResult);

  let graph = null;
  const t = tabs([
    { id: 'graph', label: 'Graph', render: (panel) => { graph = renderGraph(panel, def); cleanups.push(() => graph?.destroy()); } },
    { id: 'runs', label: 'Runs', render: (panel) => renderRuns(panel, name, ctx.signal) },
    { id: 'definition', label: 'Definition', render: (panel) => replace(panel, h('pre', { id: 'definition' }, pretty(def))) },
    { id: 'versions', label: 'Versions', render: (panel) => renderVersions(panel, name, detail, ctx.signal) },
    { id: 'lineage', label: 'Lineage', render: (panel) => renderLineage(panel, name, ctx.signal) },
  ], ctx.query.get('tab') ?? 'graph', (id) => {
    ctx.setQuery({ tab: id === 'graph' ? '' : id });
    if (id === 'graph') requestAnimationFrame(() => graph?.fit());
  });
  replace(ctx.main, head, t.el);
  return { destroy: () => cleanups.forEach((f) => f()) };
}

function renderGraph(panel, def) {
  const tasks = (def.tasks ?? []).map((task) => ({ name: task.name, depends_on: task.depends_on ?? [], state: 'none' }));
  if (!tasks.length) {
    replace(panel, empty('This workflow has no tasks.'));
    return null;
  }
  const byName = new Map((def.tasks ?? []).map((task) => [task.name, task]));
  const info = h('div', { id: 'task-definition' });
  const graph = graphView({
    tasks,
    label: 'The workflow\'s tasks',
    onSelect: (taskName) => {
      const task = byName.get(taskName);
      replace(info, h('h3', null, `Task ${taskName}`), h('pre', null, pretty(task)));
    },
  });
  replace(panel, graph.el, info);
  return graph;
}

function renderRuns(panel, name, signal) {
  const p = pager({
    idPrefix: 'workflow-runs',
    load: (before) => api.get(`${v1('workflows', name)}/runs`, { limit: 25, before }, signal),
    render: (page) => runsTable(page.runs, { workflow: false }),
  });
  replace(panel, h('p', null, h('a', { href: links.runs(`workflow=${encodeURIComponent(name)}`) }, 'All runs of this workflow, with filters')), p.el);
}

async function renderVersions(panel, name, detail, signal) {
  replace(panel, loading('Loading versions'));
  let versions;
  try {
    versions = await api.get(`${v1('workflows', name)}/versions`, null, signal);
  } catch (e) {
    if (e.name !== 'AbortError') replace(panel, errorBox(e));
    return;
  }
  const list = table(['Version', 'Hash', 'Created (UTC)'], versions.slice().reverse().map((v) => h('tr', { 'data-version': String(v.version) },
    h('td', { class: 'num' }, String(v.version)), h('td', { class: 'mono' }, v.hash.slice(0, 12)), h('td', null, timeEl(v.created_at)))));
  if (versions.length < 2) {
    replace(panel, list, h('p', { class: 'empty' }, 'Only one version: nothing to compare.'));
    return;
  }
  const options = (selected) => versions.map((v) => h('option', { value: String(v.version), selected: v.version === selected }, `version ${v.version}`));
  const latest = versions[versions.length - 1].version;
  const before = versions[versions.length - 2].version;
  const from = h('select', { id: 'diff-from' }, options(before));
  const to = h('select', { id: 'diff-to' }, options(latest));
  const out = h('div', { id: 'version-diff' });
  const cache = new Map([[detail.version, detail.definition]]);
  const definition = async (v) => {
    if (!cache.has(v)) cache.set(v, (await api.get(v1('workflows', name), { version: v }, signal)).definition);
    return cache.get(v);
  };
  const show = async () => {
    replace(out, loading('Comparing'));
    try {
      const [a, b] = await Promise.all([definition(Number(from.value)), definition(Number(to.value))]);
      replace(out, renderDiff(pretty(a).split('\n'), pretty(b).split('\n')));
    } catch (e) {
      if (e.name !== 'AbortError') replace(out, errorBox(e));
    }
  };
  const button = h('button', { type: 'button', id: 'diff-show', onclick: show }, 'Compare');
  replace(panel, list, h('h3', null, 'Compare two versions'),
    h('div', { class: 'row' }, field('From', from), field('To', to), button), out);
  show();
}

function renderDiff(a, b) {
  const edits = diffLines(a, b);
  const added = edits.filter((e) => e.op === '+').length;
  const removed = edits.filter((e) => e.op === '-').length;
  if (!added && !removed) return h('p', { class: 'empty' }, 'The two versions are the same.');
  const lines = hunks(edits, 3).map((e) => {
    if (e.gap) return h('div', { class: 'gap' }, `  … ${e.gap} unchanged lines`);
    const cls = e.op === '+' ? 'add' : e.op === '-' ? 'del' : 'same';
    return h('div', { class: cls }, `${e.op} ${e.text}`);
  });
  return h('div', null,
    h('p', { class: 'muted' }, `${added} lines added (+), ${removed} removed (−)`),
    h('div', { class: 'diff', role: 'region', 'aria-label': 'Differences between the versions' }, lines));
}

async function renderLineage(panel, name, signal) {
  replace(panel, loading('Loading the lineage'));
  let lineage;
  try {
    lineage = await api.get(`${v1('workflows', name)}/lineage`, { depth: 3 }, signal);
  } catch (e) {
    if (e.name !== 'AbortError') replace(panel, errorBox(e));
    return;
  }
  const others = (lineage.nodes ?? []).filter((n) => n.name !== name);
  if (!others.length) {
    replace(panel, empty('No other workflow waits for this one, and it waits for none.'));
    return;
  }
  const section = (title, nodes) => h('div', null, h('h3', null, title), nodes.length
    ? h('ul', { class: 'lineage' }, nodes.map((n) => h('li', { 'data-workflow': n.name },
      h('a', { href: links.workflow(n.name) }, n.name),
      h('span', { class: 'muted' }, ` · ${Math.abs(n.level)} step${Math.abs(n.level) === 1 ? '' : 's'} away${n.schedule ? ` · ${n.schedule}` : ''}`))))
    : empty('None.'));
  const up = others.filter((n) => n.level < 0).sort((a, b) => b.level - a.level);
  const down = others.filter((n) => n.level > 0).sort((a, b) => a.level - b.level);
  const edges = table(['Workflow', 'needs', 'Kind', 'Task', 'Earlier cycles only'], (lineage.edges ?? []).map((e) => h('tr', null,
    h('td', null, h('a', { href: links.workflow(e.from) }, e.from)), h('td', { class: 'muted' }, '→'),
    h('td', null, h('a', { href: links.workflow(e.to) }, e.to), ` (${e.kind})`),
    h('td', null, e.task ?? ''), h('td', null, e.past ? 'yes' : 'no'))));
  replace(panel, section('Upstream (this workflow waits for them)', up), section('Downstream (they wait for this workflow)', down),
    h('h3', null, 'Dependencies'), edges);
}

async function setSchedule(name, paused, result) {
  try {
    const answer = await api.post(`${v1('workflows', name)}/schedule/${paused ? 'pause' : 'resume'}`);
    replace(result, h('p', { class: 'ok' }, `The schedule is ${answer.paused ? 'paused' : 'running'}.`));
  } catch (e) {
    replace(result, errorBox(e));
  }
}

// Trigger -------------------------------------------------------------------------

/** A form control for a param, from its default value's type. */
function paramControl(key, value, i) {
  const id = `trigger-param-${i}`;
  let control;
  let read;
  if (typeof value === 'boolean') {
    control = h('input', { type: 'checkbox', id, checked: value });
    read = () => control.checked;
  } else if (typeof value === 'number') {
    control = h('input', { type: 'number', id, step: 'any', value: String(value) });
    read = () => {
      const n = Number(control.value);
      if (control.value.trim() === '' || !Number.isFinite(n)) throw new Error(`param ${key}: not a number`);
      return n;
    };
  } else if (typeof value === 'string') {
    control = h('input', { type: 'text', id, value, spellcheck: 'false' });
    read = () => control.value;
  } else {
    control = h('textarea', { id, rows: 3, spellcheck: 'false' }, JSON.stringify(value));
    read = () => {
      try {
        return JSON.parse(control.value);
      } catch (e) {
        throw new Error(`param ${key}: not JSON (${e.message})`);
      }
    };
  }
  control.dataset.param = key;
  const kind = value === null ? 'JSON' : Array.isArray(value) ? 'JSON list' : typeof value === 'object' ? 'JSON object' : typeof value;
  return { key, value, read, el: field(key, control, `${kind}; default ${JSON.stringify(value)}`) };
}

function triggerDialog(ctx, name, def) {
  const params = Object.entries(def.params ?? {}).map(([k, v], i) => paramControl(k, v, i));
  const time = h('input', { type: 'text', id: 'trigger-logical-time', placeholder: '2026-01-31 or 2026-01-31T02:00:00Z', spellcheck: 'false', autocomplete: 'off' });
  const error = h('div', { id: 'trigger-error' });
  const submit = h('button', { type: 'submit', id: 'trigger-submit' }, 'Trigger run');
  const cancel = h('button', { type: 'button', class: 'secondary', id: 'trigger-cancel' }, 'Cancel');
  const form = h('form', { novalidate: true },
    params.length ? h('fieldset', null, h('legend', null, 'Params'), params.map((p) => p.el)) : h('p', { class: 'muted' }, 'This workflow has no params.'),
    field('Logical time (UTC; empty: now)', time, 'A date (midnight UTC), YYYY-MM-DDTHH:MM:SS (UTC) or RFC 3339.'),
    error,
    h('div', { class: 'buttons' }, cancel, submit));
  const dlg = openDialog({ title: `Trigger ${name}`, content: form, id: 'trigger-dialog' });
  cancel.addEventListener('click', () => dlg.close());
  (params[0]?.el.querySelector('input,textarea') ?? time).focus();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    replace(error);
    const body = { params: {} };
    try {
      for (const p of params) {
        const value = p.read();
        if (JSON.stringify(value) !== JSON.stringify(p.value)) body.params[p.key] = value;
      }
    } catch (err) {
      replace(error, errorBox(err));
      return;
    }
    const lt = time.value.trim().replace(/^(\d{4}-\d\d-\d\d) (\d)/, '$1T$2');
    if (lt) body.logical_time = lt;
    submit.disabled = true;
    try {
      const run = await api.post(`${v1('workflows', name)}/runs`, body);
      dlg.close('ok');
      ctx.navigate(links.run(run.id));
    } catch (err) {
      replace(error, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
}

// Backfill --------------------------------------------------------------------------

function backfillDialog(name, resultBox) {
  const from = h('input', { type: 'text', id: 'backfill-from', placeholder: '2026-01-01', required: true, spellcheck: 'false', autocomplete: 'off' });
  const to = h('input', { type: 'text', id: 'backfill-to', placeholder: '2026-01-07', required: true, spellcheck: 'false', autocomplete: 'off' });
  const parallel = h('input', { type: 'number', id: 'backfill-parallel', min: 1, step: 1, value: '1' });
  const downstream = h('input', { type: 'checkbox', id: 'backfill-downstream' });
  const error = h('div', { id: 'backfill-error' });
  const submit = h('button', { type: 'submit', id: 'backfill-submit' }, 'Start backfill');
  const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
  const form = h('form', { novalidate: true },
    h('p', { class: 'muted' }, 'One run per scheduled cycle between the two logical times (inclusive), in the workflow\'s time zone.'),
    h('div', { class: 'row' }, field('From', from, 'A date or a time'), field('To', to, 'A date includes its whole day')),
    field('Runs at once', parallel),
    h('div', { class: 'field inline' }, downstream, h('label', { for: 'backfill-downstream' }, 'Also the workflows downstream of this one')),
    error,
    h('div', { class: 'buttons' }, cancel, submit));
  const dlg = openDialog({ title: `Backfill ${name}`, content: form, id: 'backfill-dialog' });
  cancel.addEventListener('click', () => dlg.close());
  from.focus();
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    replace(error);
    const n = Number(parallel.value || '1');
    if (!from.value.trim() || !to.value.trim() || !Number.isInteger(n) || n < 1) {
      replace(error, errorBox({ message: 'Give both times and a whole number of runs at once (1 or more).' }));
      return;
    }
    submit.disabled = true;
    try {
      const body = { workflow: name, from: from.value.trim(), to: to.value.trim(), parallel: n, include_downstream: downstream.checked };
      const { data } = await request('POST', '/v1/backfills', { body });
      dlg.close('ok');
      replace(resultBox, backfillSummary(data));
    } catch (err) {
      replace(error, errorBox(err));
    } finally {
      submit.disabled = false;
    }
  });
}

function backfillSummary(b) {
  const runs = b.runs ?? [];
  return h('div', { class: 'ok', role: 'status' },
    h('p', null, `Backfill ${b.id}: ${runs.length} run${runs.length === 1 ? '' : 's'} created for ${b.total} logical times` +
      `${b.skipped?.length ? `, ${b.skipped.length} skipped (a run existed)` : ''}.`),
    runs.length ? h('p', null, 'Runs: ', runs.slice(0, 20).flatMap((r, i) => [i ? ', ' : '', runLink(r.id)]),
      runs.length > 20 ? ` and ${runs.length - 20} more` : '') : null,
    h('p', null, h('a', { href: links.runs(`kind=backfill&workflow=${encodeURIComponent(b.workflow)}`) }, 'See the backfill\'s runs')));
}
