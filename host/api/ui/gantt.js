// A timeline (Gantt chart) of a run's tasks: one bar per task from its
// start to its end (or now), coloured by state. Rows are virtualized: only
// those in view are in the page, so a run of thousands of tasks scrolls
// smoothly.

import { GLYPHS, fmtDuration, fmtTime, h, replace, stateLabel } from './dom.js';

const ROW = 24;

/** `onSelect(name)` when a row is clicked. Answers `{el, update(tasks)}`. */
export function gantt({ onSelect, taskHref }) {
  const axis = h('div', { class: 'gantt-axis', 'aria-hidden': 'true' });
  const body = h('div', { class: 'gantt-body', role: 'list', 'aria-label': 'Tasks by start time' });
  const scroll = h('div', { class: 'gantt-scroll', tabindex: '0' }, body);
  const note = h('p', { class: 'muted' });
  const el = h('div', { class: 'gantt', id: 'gantt' }, note, axis, scroll);
  let rows = [];
  let t0 = 0;
  let t1 = 1;
  let drawn = '';

  const draw = () => {
    const top = scroll.scrollTop;
    const height = scroll.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW) - 10);
    const last = Math.min(rows.length, Math.ceil((top + height) / ROW) + 10);
    const key = `${first}:${last}:${rows.length}:${t0}:${t1}`;
    if (key === drawn) return;
    drawn = key;
    const span = Math.max(1, t1 - t0);
    const children = [];
    for (let i = first; i < last; i++) {
      const t = rows[i];
      const start = Date.parse(t.started_at);
      const end = t.finished_at ? Date.parse(t.finished_at) : Date.now();
      const bar = h('div', { class: 'gantt-bar', 'data-state': t.state });
      bar.style.left = `${((start - t0) / span) * 100}%`;
      bar.style.width = `${Math.max(0.2, ((end - start) / span) * 100)}%`;
      const label = `${t.name} · ${stateLabel(t.state)} · ${fmtTime(t.started_at)} → ${t.finished_at ? fmtTime(t.finished_at) : 'now'} (${fmtDuration(end - start)})`;
      const name = h('a', { class: 'gantt-name', href: taskHref(t.name), title: label }, `${GLYPHS[t.state] ?? ''} ${t.name}`);
      const row = h('div', { class: 'gantt-row', role: 'listitem', 'data-gantt-task': t.name }, name, h('div', { class: 'gantt-track', title: label }, bar));
      row.style.top = `${i * ROW}px`;
      children.push(row);
    }
    replace(body, children);
  };

  scroll.addEventListener('scroll', () => requestAnimationFrame(draw));
  body.addEventListener('click', (e) => {
    const row = e.target.closest('[data-gantt-task]');
    if (!row) return;
    if (e.target.closest('a') && (e.ctrlKey || e.metaKey || e.shiftKey)) return;
    e.preventDefault();
    onSelect(row.dataset.ganttTask);
  });

  return {
    el,
    update(tasks) {
      rows = tasks.filter((t) => t.started_at).sort((a, b) => Date.parse(a.started_at) - Date.parse(b.started_at) || a.name.localeCompare(b.name));
      if (!rows.length) {
        note.textContent = 'No task has started yet.';
        replace(axis);
        replace(body);
        body.style.height = '0px';
        drawn = '';
        return;
      }
      t0 = Date.parse(rows[0].started_at);
      t1 = Math.max(...rows.map((t) => (t.finished_at ? Date.parse(t.finished_at) : Date.now())));
      note.textContent = `${rows.length} task${rows.length === 1 ? '' : 's'} started, from ${fmtTime(rows[0].started_at)} UTC over ${fmtDuration(t1 - t0)}.`;
      replace(axis, [0, 0.25, 0.5, 0.75, 1].map((f) => h('span', null, `+${fmtDuration((t1 - t0) * f) || '0 s'}`)));
      body.style.height = `${rows.length * ROW}px`;
      drawn = '';
      draw();
    },
    redraw() {
      drawn = '';
      draw();
    },
  };
}
