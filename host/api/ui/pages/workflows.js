// The workflows list: schedule, next run, the last runs as coloured squares
// (Airflow's grid), a search box and a filter by the last run's state. Rows
// are built once; searching only toggles `hidden` (fast with 1,000).

import { api } from '../api.js';
import { empty, errorBox, fmtTime, h, links, loading, replace, stateLabel, table, timeEl } from '../dom.js';

const FILTERS = ['', 'succeeded', 'failed', 'running', 'queued', 'paused', 'killed', 'never'];

export async function render(ctx) {
  ctx.setTitle('Workflows');
  const search = h('input', {
    type: 'search', id: 'workflow-search', placeholder: 'Search by name', 'aria-label': 'Search workflows by name',
    value: ctx.query.get('q') ?? '', autocomplete: 'off',
  });
  const stateFilter = h('select', { id: 'workflow-state', 'aria-label': 'Filter by the last run\'s state' },
    FILTERS.map((f) => h('option', { value: f, selected: f === (ctx.query.get('state') ?? '') },
      f === '' ? 'any last run' : f === 'never' ? 'never ran' : `last run ${stateLabel(f)}`)));
  const count = h('span', { class: 'muted', role: 'status', id: 'workflow-count' });
  const body = h('div', null, loading('Loading workflows'));
  replace(ctx.main,
    h('div', { class: 'page-head' }, h('h1', null, 'Workflows')),
    h('div', { class: 'toolbar' }, search, stateFilter, count),
    body);

  let workflows;
  try {
    workflows = await api.get('/v1/workflows', { runs: 10 }, ctx.signal);
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(body, errorBox(e));
    return null;
  }
  if (!workflows.length) {
    replace(body, empty('No workflows yet. Apply one with `dagr apply workflow.yaml` or POST /v1/workflows.'));
    search.disabled = true;
    stateFilter.disabled = true;
    return null;
  }
  workflows.sort((a, b) => a.name.localeCompare(b.name));
  const rows = workflows.map((w) => {
    // Asked for with ?runs=: absent means none yet.
    const last = Array.isArray(w.last_runs) ? w.last_runs : [];
    const row = h('tr', { 'data-workflow': w.name },
      h('td', null, h('a', { href: links.workflow(w.name) }, w.name)),
      h('td', { class: 'wrap hide-narrow' }, w.description || ''),
      h('td', { class: 'mono' }, w.schedule ?? h('span', { class: 'muted' }, 'manual'),
        w.schedule && w.schedule_paused ? h('span', { class: 'paused-note', title: 'The schedule is paused' }, ' ‖ paused') : null),
      h('td', { class: 'hide-narrow' }, timeEl(w.next_run)),
      h('td', { class: 'num hide-narrow' }, String(w.tasks)),
      h('td', null, squares(last)));
    return { row, name: w.name.toLowerCase(), lastState: last?.length ? last[0].state : 'never' };
  });
  const tbody = table(
    ['Name', h('span', { class: 'hide-narrow' }, 'Description'), 'Schedule', h('span', { class: 'hide-narrow' }, 'Next run (UTC)'),
      h('span', { class: 'hide-narrow' }, 'Tasks'),
      h('span', { title: 'Oldest on the left, newest on the right' }, 'Last runs (newest right)')],
    rows.map((r) => r.row), { id: 'workflows' });
  const none = h('p', { class: 'empty', hidden: true }, 'No workflow matches.');
  replace(body, tbody, none);

  const apply = () => {
    const q = search.value.trim().toLowerCase();
    const state = stateFilter.value;
    let shown = 0;
    for (const r of rows) {
      const visible = (!q || r.name.includes(q)) && (!state || r.lastState === state);
      if (r.row.hidden === visible) r.row.hidden = !visible;
      if (visible) shown++;
    }
    none.hidden = shown > 0;
    count.textContent = `${shown} of ${rows.length} workflows`;
    ctx.setQuery({ q: search.value.trim(), state });
  };
  search.addEventListener('input', apply);
  stateFilter.addEventListener('change', apply);
  apply();
  return null;
}

/** The last runs, oldest left, newest right; each a link to its run. */
function squares(lastRuns) {
  if (!lastRuns) return h('span', { class: 'muted' }, '');
  if (!lastRuns.length) return h('span', { class: 'muted' }, 'no runs');
  const ordered = lastRuns.slice(0, 10).reverse();
  return h('div', { class: 'squares', role: 'list', 'aria-label': 'Last runs, oldest first' },
    ordered.map((run) => {
      const text = `${stateLabel(run.state)} · ${fmtTime(run.logical_time)}`;
      return h('a', {
        href: links.run(run.id), class: 'square', role: 'listitem', 'data-state': run.state,
        title: text, 'aria-label': text,
      });
    }));
}

