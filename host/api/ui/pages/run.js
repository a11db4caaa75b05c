// A run: its state (live), task counts, the graph coloured by task state,
// a timeline, the tasks table, what it waits for, the run actions, and the
// panel of one task (/ui/runs/<id>/tasks/<task>).
//
// Live: the run's events (SSE) update a task's node at once from the event
// itself; what else changed (times, counts) is re-read at most every
// ~150 ms, the changed tasks alone when they are few.

import { ApiError, api, followEvents, request, v1 } from '../api.js';
import { kv, tabs, workflowLink } from '../components.js';
import { confirmDialog } from '../dialog.js';
import {
  STATES, TERMINAL_RUN, badge, debounce, duration, empty, errorBox, h, links, loading, notFound, pretty,
  replace, runLink, stateLabel, table, timeEl,
} from '../dom.js';
import { gantt } from '../gantt.js';
import { graphView } from '../graph-view.js';
import { taskPanel } from '../task-panel.js';

const PAGE = 1000;
const TABLE_CAP = 500;

export async function render(ctx) {
  const id = ctx.params.id;
  ctx.setTitle(`Run ${id}`);
  replace(ctx.main, loading('Loading the run'));
  let run;
  try {
    run = await api.get(v1('runs', id), null, ctx.signal);
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(ctx.main, e.status === 404 ? notFound(e.message) : errorBox(e));
    return null;
  }
  const tasks = new Map();
  for (const t of run.tasks) tasks.set(t.name, t);
  try {
    let next = run.tasks_next;
    while (next !== undefined && next !== null) {
      const page = await api.get(`${v1('runs', id)}/tasks`, { after: next, limit: PAGE }, ctx.signal);
      for (const t of page.tasks) tasks.set(t.name, t);
      next = page.next;
    }
  } catch (e) {
    if (e.name === 'AbortError') return null;
    replace(ctx.main, errorBox(e));
    return null;
  }
  return new RunPage(ctx, id, run, tasks).controller();
}

class RunPage {
  constructor(ctx, id, run, tasks) {
    this.ctx = ctx;
    this.id = id;
    this.run = run;
    this.tasks = tasks;
    this.changed = new Set();
    this.refreshing = false;
    this.again = false;
    this.panel = null;
    this.graph = null;
    this.timeline = null;
    this.scheduleRefresh = debounce(() => this.refresh(), 150, 400);
    this.build();
    this.closeEvents = followEvents({ run: id }, {
      onEvent: (e) => this.onEvent(e),
      // (Re)connected: what happened before is read again, every task.
      onOpen: () => {
        this.needFull = true;
        this.scheduleRefresh();
      },
    });
    this.onKey = (e) => {
      if (e.key === 'Escape' && this.panel && !document.querySelector('dialog[open]')) this.closePanel();
    };
    document.addEventListener('keydown', this.onKey);
    // A safety net under the event stream: a run still going is read again now and then.
    this.poll = setInterval(() => {
      if (TERMINAL_RUN.has(this.run.state)) return;
      this.needFull = true;
      this.scheduleRefresh();
    }, 15000);
    if (ctx.params.task) this.openPanel(ctx.params.task);
  }

  controller() {
    return {
      update: (params) => {
        if (params.task) this.openPanel(params.task);
        else this.hidePanel();
      },
      destroy: () => {
        this.closeEvents();
        clearInterval(this.poll);
        this.scheduleRefresh.cancel();
        document.removeEventListener('keydown', this.onKey);
        this.panel?.destroy();
        document.body.classList.remove('panel-open');
        this.graph?.destroy();
      },
    };
  }

  // Building -------------------------------------------------------------------

  build() {
    const r = this.run;
    this.stateBadge = badge(r.state, { id: 'run-state', 'aria-live': 'polite' });
    this.meta = h('div', null);
    this.counts = h('div', { class: 'counts', id: 'task-counts', 'aria-label': 'Tasks by state' });
    this.result = h('div', { class: 'result', id: 'action-result', role: 'status' });
    this.upstream = h('section', { id: 'waiting-for', hidden: true });
    this.buttons = {
      kill: h('button', { type: 'button', id: 'action-kill', class: 'danger' }, '■ Kill'),
      pause: h('button', { type: 'button', id: 'action-pause', class: 'secondary' }, '‖ Pause'),
      resume: h('button', { type: 'button', id: 'action-resume', class: 'secondary' }, '► Resume'),
      rerun: h('button', { type: 'button', id: 'action-rerun', class: 'secondary' }, '↻ Rerun from failed'),
      markFailed: h('button', { type: 'button', id: 'action-mark-failed', class: 'secondary' }, '✗ Mark failed'),
    };
    this.wireActions();
    const head = h('div', null,
      h('p', { class: 'muted' }, h('a', { href: '/ui/runs' }, 'Runs'), ' / ', workflowLink(r), ' /'),
      h('div', { class: 'page-head' },
        h('h1', null, 'Run ', h('span', { class: 'mono', title: r.id }, r.id), ' ', this.stateBadge),
        h('div', { class: 'actions' }, Object.values(this.buttons))),
      this.meta, this.counts, this.result, this.upstream);

    const list = [...this.tasks.values()];
    this.tabsView = tabs([
      { id: 'graph', label: 'Graph', render: (panel) => this.renderGraph(panel, list) },
      { id: 'timeline', label: 'Timeline', render: (panel) => this.renderTimeline(panel) },
      { id: 'tasks', label: 'Tasks', render: (panel) => this.renderTable(panel) },
      { id: 'params', label: 'Params', render: (panel) => replace(panel, h('pre', { id: 'run-params' }, pretty(this.run.params ?? {}))) },
    ], this.ctx.query.get('tab') ?? 'graph', (tab) => {
      this.ctx.setQuery({ tab: tab === 'graph' ? '' : tab });
      if (tab === 'graph') requestAnimationFrame(() => this.graph?.fit());
      if (tab === 'timeline') this.timeline?.update([...this.tasks.values()]);
      if (tab === 'tasks') this.fillTable?.();
    });
    replace(this.ctx.main, head, this.tabsView.el);
    this.renderHead();
    this.loadUpstream();
  }

  renderHead() {
    const r = this.run;
    this.stateBadge.dataset.state = r.state;
    this.stateBadge.textContent = r.state;
    replace(this.meta, kv([
      ['Workflow', workflowLink(r)],
      ['Version', r.version != null ? String(r.version) : null],
      ['Kind', r.kind],
      ['Logical time', timeEl(r.logical_time)],
      ['Created', timeEl(r.created_at)],
      ['Started', r.started_at ? timeEl(r.started_at) : null],
      ['Finished', r.finished_at ? timeEl(r.finished_at) : null],
      ['Duration', r.started_at ? duration(r.started_at, r.finished_at) : null],
      ['Backfill', r.backfill_id ? h('a', { href: links.runs(`backfill=${encodeURIComponent(r.backfill_id)}`) }, r.backfill_id) : null],
      ['Storage', r.archived ? h('span', { id: 'run-archived', title: 'An action on this run restores it first' }, 'archived (cold)') : null],
    ]));
    const counts = r.task_counts ?? {};
    const order = STATES.filter((s) => counts[s]);
    for (const s of Object.keys(counts)) if (!order.includes(s) && counts[s]) order.push(s);
    replace(this.counts, order.length
      ? order.map((s) => badge(s, { 'data-count': String(counts[s]), title: `${counts[s]} ${stateLabel(s)}` }))
      : h('span', { class: 'muted' }, 'no tasks'));
    // Badge texts are the state; the count follows.
    for (const el of this.counts.querySelectorAll('.badge')) el.append(` ${el.dataset.count}`);
    const s = r.state;
    const terminal = TERMINAL_RUN.has(s);
    this.buttons.kill.disabled = terminal;
    this.buttons.pause.disabled = !(s === 'running' || s === 'queued' || s === 'waiting');
    this.buttons.resume.disabled = s !== 'paused';
    this.buttons.rerun.disabled = !terminal;
    this.buttons.rerun.textContent = s === 'succeeded' ? '↻ Rerun (re-flush)' : '↻ Rerun from failed';
    this.buttons.markFailed.disabled = terminal;
  }

  renderGraph(panel, list) {
    if (!list.length) {
      replace(panel, empty('This run has no tasks.'));
      return;
    }
    this.graph = graphView({
      tasks: list,
      label: 'The run\'s tasks, coloured by state',
      onSelect: (name) => this.ctx.navigate(links.task(this.id, name)),
    });
    replace(panel, this.graph.el, h('p', { class: 'muted' }, 'Click a task (or find it and press Enter on it) to see its attempts, output and log.'));
  }

  renderTimeline(panel) {
    this.timeline = gantt({
      onSelect: (name) => this.ctx.navigate(links.task(this.id, name)),
      taskHref: (name) => links.task(this.id, name),
    });
    replace(panel, this.timeline.el);
    this.timeline.update([...this.tasks.values()]);
  }

  renderTable(panel) {
    const filter = h('input', { type: 'search', id: 'task-filter', placeholder: 'Filter by name', 'aria-label': 'Filter tasks by name' });
    const state = h('select', { id: 'task-state-filter', 'aria-label': 'Filter tasks by state' },
      h('option', { value: '' }, 'any state'), STATES.slice(0, 11).map((s) => h('option', { value: s }, stateLabel(s))));
    const note = h('p', { class: 'muted', role: 'status' });
    const body = h('div', null);
    this.fillTable = () => {
      if (this.tabsView && this.tabsView.active() !== 'tasks') return;
      const q = filter.value.trim().toLowerCase();
      const want = state.value;
      const matching = [...this.tasks.values()].filter((t) => (!q || t.name.toLowerCase().includes(q)) && (!want || t.state === want));
      const shown = matching.slice(0, TABLE_CAP);
      note.textContent = matching.length > TABLE_CAP
        ? `Showing ${TABLE_CAP} of ${matching.length} matching tasks; narrow the filter.`
        : `${matching.length} of ${this.tasks.size} tasks`;
      replace(body, shown.length ? table(['Task', 'State', 'Plugin', 'Attempts', 'Started', 'Duration', 'Error'], shown.map((t) => h('tr', { 'data-task-row': t.name },
        h('td', null, h('a', { href: links.task(this.id, t.name) }, t.name)),
        h('td', null, badge(t.state)),
        h('td', { class: 'mono' }, t.plugin),
        h('td', { class: 'num' }, String(t.attempts)),
        h('td', null, timeEl(t.started_at)),
        h('td', { class: 'num' }, duration(t.started_at, t.finished_at)),
        h('td', { class: 'wrap' }, t.error ?? '')))) : empty('No task matches.'));
    };
    filter.addEventListener('input', debounce(this.fillTable, 120));
    state.addEventListener('change', this.fillTable);
    replace(panel, h('div', { class: 'toolbar' }, filter, state), note, body);
    this.fillTable();
  }

  async loadUpstream() {
    try {
      const up = await api.get(`${v1('runs', this.id)}/upstream`, null, this.ctx.signal);
      const deps = up.dependencies ?? [];
      this.hasUpstream = deps.length > 0;
      if (!deps.length) {
        this.upstream.hidden = true;
        return;
      }
      this.upstream.hidden = false;
      replace(this.upstream, h('h2', null, 'Waiting for ', badge(up.standing)),
        table(['Upstream workflow', 'For task', 'Offset', 'Standing', 'Instances'], deps.map((d) => h('tr', null,
          h('td', null, h('a', { href: links.workflow(d.workflow) }, d.workflow), d.upstream_task ? ` · task ${d.upstream_task}` : ''),
          h('td', null, d.task ?? 'the whole run'),
          h('td', null, `${d.offset}${d.cycles ? ` · ${d.cycles}` : ''}`),
          h('td', null, badge(d.standing)),
          h('td', null, d.waits?.length
            ? h('ul', { class: 'plain' }, d.waits.map((w) => h('li', null, badge(w.state), ' ',
              w.run_id ? runLink(w.run_id) : h('span', { class: 'muted' }, 'no run'),
              w.logical_time ? ` · ${w.logical_time}` : '')))
            : h('span', { class: 'muted' }, 'all done'))))));
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) return; // an older server, or the run is gone (the page says so)
      this.upstream.hidden = false;
      replace(this.upstream, errorBox(e));
    }
  }

  // Actions --------------------------------------------------------------------

  wireActions() {
    const b = this.buttons;
    b.kill.addEventListener('click', () => this.confirmAct('kill', 'Kill the run', 'Kill this run? Running attempts are cancelled and nothing else starts.', 'Kill', true));
    b.pause.addEventListener('click', () => this.confirmAct('pause', 'Pause the run', 'Pause this run? No new task starts; running ones finish.', 'Pause'));
    b.resume.addEventListener('click', () => this.confirmAct('resume', 'Resume the run', 'Resume this run?', 'Resume'));
    b.markFailed.addEventListener('click', () => this.confirmAct('mark-failed', 'Mark the run failed', 'Mark this run failed? Running attempts are cancelled.', 'Mark failed', true));
    b.rerun.addEventListener('click', async () => {
      const downstream = h('input', { type: 'checkbox', id: 'rerun-downstream-workflows' });
      const succeeded = this.run.state === 'succeeded';
      const ok = await confirmDialog({
        title: succeeded ? 'Rerun the run' : 'Rerun from failed',
        message: succeeded
          ? 'Run this succeeded run again from scratch (a re-flush)?'
          : 'Rerun the failed, upstream-failed and killed tasks of this run, and what depends on them?',
        confirmLabel: 'Rerun',
        extra: h('div', { class: 'field inline' }, downstream,
          h('label', { for: 'rerun-downstream-workflows' }, 'Also re-flush the runs of downstream workflows that this run released')),
      });
      if (ok) this.act('rerun', downstream.checked ? { downstream_workflows: true } : undefined);
    });
  }

  async confirmAct(action, title, message, label, danger = false) {
    if (await confirmDialog({ title, message, confirmLabel: label, danger })) this.act(action);
  }

  async act(action, query) {
    replace(this.result, h('p', { class: 'loading' }, 'Sending…'));
    try {
      const { status, data } = await request('POST', `${v1('runs', this.id)}/${action}`, { query });
      const text = status === 202 ? `accepted: ${data.message}` : `ok: ${data.message || `${action} done`}`;
      replace(this.result, h('p', { class: status === 202 ? 'warning' : 'ok' }, text));
      if (data?.run?.state) this.setRunState(data.run.state);
    } catch (e) {
      replace(this.result, e instanceof ApiError && e.status === 409
        ? h('p', { class: 'error' }, `refused: ${e.message}`)
        : errorBox(e));
    }
    this.scheduleRefresh();
  }

  // Live -------------------------------------------------------------------------

  setRunState(state) {
    if (this.run.state === state) return;
    this.run.state = state;
    this.renderHead();
  }

  onEvent(e) {
    if (e.run_id && e.run_id !== this.id) return;
    if (e.kind === 'run.state' && e.data?.to) {
      this.setRunState(e.data.to);
      // The end of the run: read every task once more.
      if (TERMINAL_RUN.has(e.data.to)) this.needFull = true;
    }
    if (e.kind === 'task.state' && e.task) {
      const t = this.tasks.get(e.task);
      if (t && e.data?.to) {
        t.state = e.data.to;
        if (typeof e.data.attempt === 'number') t.attempts = e.data.attempt;
        this.graph?.setState(e.task, e.data.to);
      }
      this.changed.add(e.task);
    }
    if (e.task && this.panel?.task() === e.task) this.panelRefresh();
    if (String(e.kind).startsWith('run.') && this.hasUpstream !== false) this.loadUpstream();
    this.scheduleRefresh();
  }

  panelRefresh = debounce(() => this.panel?.refresh(), 150);

  async refresh() {
    if (this.refreshing) {
      this.again = true;
      return;
    }
    this.refreshing = true;
    const changed = [...this.changed];
    this.changed.clear();
    const full = this.needFull;
    this.needFull = false;
    try {
      const r = await api.get(v1('runs', this.id), null, this.ctx.signal);
      const firstPage = new Set(r.tasks.map((t) => t.name));
      for (const t of r.tasks) this.applyTask(t);
      const rest = changed.filter((name) => !firstPage.has(name));
      if (!full && rest.length && rest.length <= 25) {
        const details = await Promise.all(rest.map((name) => api.get(v1('runs', this.id, 'tasks', name), null, this.ctx.signal).catch(() => null)));
        for (const d of details) if (d) this.applyTask(d);
      } else if ((full || rest.length) && r.tasks_next != null) {
        let next = r.tasks_next;
        while (next != null) {
          const page = await api.get(`${v1('runs', this.id)}/tasks`, { after: next, limit: PAGE }, this.ctx.signal);
          for (const t of page.tasks) this.applyTask(t);
          next = page.next;
        }
      }
      const { tasks: _, ...summary } = r;
      this.run = { ...this.run, ...summary };
      this.renderHead();
      if (this.tabsView?.active() === 'timeline') this.timeline?.update([...this.tasks.values()]);
      if (this.tabsView?.active() === 'tasks') this.fillTable?.();
    } catch (e) {
      if (e.name !== 'AbortError') replace(this.result, errorBox(e));
      if (full) this.needFull = true;
    } finally {
      this.refreshing = false;
      if (this.again) {
        this.again = false;
        this.scheduleRefresh();
      }
    }
  }

  applyTask(t) {
    const known = this.tasks.get(t.name);
    if (!known) return;
    for (const key of ['state', 'attempts', 'failures', 'forced', 'started_at', 'finished_at', 'retry_at', 'error']) known[key] = t[key];
    this.graph?.setState(t.name, t.state);
  }

  // The task panel -------------------------------------------------------------------

  openPanel(name) {
    if (!this.tasks.has(name)) {
      this.hidePanel();
      replace(this.result, h('div', { class: 'error', id: 'not-found' }, `Task "${name}" not found in this run.`));
      return;
    }
    if (!this.panel) {
      this.returnFocus = document.activeElement;
      this.panel = taskPanel({
        runId: this.id,
        onClose: () => this.closePanel(),
        onChanged: () => this.scheduleRefresh(),
      });
      document.body.appendChild(this.panel.el);
      // Docked beside the page (below the sticky header) on wide screens.
      const header = document.getElementById('header');
      document.documentElement.style.setProperty('--panel-top', `${header?.offsetHeight ?? 0}px`);
      document.body.classList.add('panel-open');
    }
    this.panel.show(name);
    this.graph?.select(name);
  }

  /** The user closed the panel: back to the run's URL. */
  closePanel() {
    this.ctx.navigate(links.run(this.id));
  }

  hidePanel() {
    if (!this.panel) return;
    const name = this.panel.task();
    this.panel.destroy();
    this.panel = null;
    document.body.classList.remove('panel-open');
    this.graph?.select(null);
    if (this.graph && name) this.graph.focusTask(name);
    if (this.returnFocus?.isConnected && document.activeElement === document.body) this.returnFocus.focus();
  }
}
