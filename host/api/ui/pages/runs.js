// Runs across workflows: filters (workflow, state, kind, backfill) in the
// URL's query string, pages read from the server with its cursor.

import { api } from '../api.js';
import { pager, runsTable } from '../components.js';
import { field, h, replace } from '../dom.js';

const RUN_STATES = ['', 'waiting', 'queued', 'running', 'paused', 'succeeded', 'failed', 'killed'];
const KINDS = ['', 'manual', 'schedule', 'backfill', 'job', 'child'];
const LIMITS = ['25', '50', '100', '200'];

export async function render(ctx) {
  ctx.setTitle('Runs');
  const q = ctx.query;
  const workflow = h('input', { type: 'search', id: 'runs-workflow', value: q.get('workflow') ?? '', placeholder: 'any', autocomplete: 'off', spellcheck: 'false' });
  const state = h('select', { id: 'runs-state' }, RUN_STATES.map((s) => h('option', { value: s, selected: s === (q.get('state') ?? '') }, s || 'any')));
  const kind = h('select', { id: 'runs-kind' }, KINDS.map((k) => h('option', { value: k, selected: k === (q.get('kind') ?? '') }, k || 'any')));
  const limit = h('select', { id: 'runs-limit' }, LIMITS.map((l) => h('option', { value: l, selected: l === (q.get('limit') ?? '50') }, l)));
  const backfill = q.get('backfill');
  const apply = h('button', { type: 'submit', id: 'runs-apply' }, 'Filter');
  const form = h('form', { class: 'row toolbar', role: 'search', 'aria-label': 'Filter runs' },
    field('Workflow', workflow), field('State', state), field('Kind', kind), field('Per page', limit), apply,
    backfill ? h('span', { class: 'muted' }, `backfill ${backfill} `, h('a', { href: '/ui/runs' }, '(clear)')) : null);
  const list = h('div', { id: 'runs-list' });
  replace(ctx.main, h('h1', null, 'Runs'), form, list);

  const filters = () => ({
    workflow: workflow.value.trim(),
    state: state.value,
    kind: kind.value,
    backfill: backfill ?? '',
    limit: limit.value === '50' ? '' : limit.value,
  });
  const show = (before) => {
    const f = filters();
    const p = pager({
      idPrefix: 'runs',
      initial: before,
      load: (cursor) => api.get('/v1/runs', { ...f, limit: f.limit || 50, before: cursor }, ctx.signal),
      render: (page) => runsTable(page.runs),
      onPage: (cursor) => ctx.setQuery({ ...f, before: cursor ?? '' }),
    });
    replace(list, p.el);
    return p.ready;
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    ctx.setQuery(filters(), { push: true });
    show(null);
  });
  for (const control of [state, kind, limit]) control.addEventListener('change', () => form.requestSubmit());
  await show(q.get('before'));
  return null;
}
