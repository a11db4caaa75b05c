// Pieces shared by several pages: tabs, the runs table, a pager, JSON blocks.

import { badge, duration, empty, h, links, replace, runLink, table, timeEl } from './dom.js';

/**
 * Tabs (WAI-ARIA tabs pattern). `defs`: [{id, label, render(panel)}]; each
 * panel is rendered the first time it is shown. `onChange(id)` after a switch.
 */
export function tabs(defs, initial, onChange) {
  const list = h('div', { class: 'tabs', role: 'tablist' });
  const panels = h('div', null);
  const entries = defs.map((def) => {
    const tab = h('button', {
      type: 'button', role: 'tab', id: `tab-${def.id}`, 'aria-controls': `panel-${def.id}`,
      'aria-selected': 'false', tabindex: '-1',
    }, def.label);
    const panel = h('section', { role: 'tabpanel', id: `panel-${def.id}`, 'aria-labelledby': tab.id, hidden: true });
    list.appendChild(tab);
    panels.appendChild(panel);
    return { def, tab, panel, rendered: false };
  });
  let active = null;
  const show = (id, { focus = false } = {}) => {
    const entry = entries.find((e) => e.def.id === id) ?? entries[0];
    for (const e of entries) {
      const on = e === entry;
      e.tab.setAttribute('aria-selected', String(on));
      e.tab.tabIndex = on ? 0 : -1;
      e.panel.hidden = !on;
    }
    if (!entry.rendered) {
      entry.rendered = true;
      entry.def.render(entry.panel);
    }
    if (focus) entry.tab.focus();
    const changed = active !== entry.def.id;
    active = entry.def.id;
    if (changed) onChange?.(active);
  };
  list.addEventListener('click', (e) => {
    const tab = e.target.closest('[role="tab"]');
    if (tab) show(tab.id.slice(4));
  });
  list.addEventListener('keydown', (e) => {
    const i = entries.findIndex((x) => x.def.id === active);
    let j = null;
    if (e.key === 'ArrowRight') j = (i + 1) % entries.length;
    if (e.key === 'ArrowLeft') j = (i - 1 + entries.length) % entries.length;
    if (e.key === 'Home') j = 0;
    if (e.key === 'End') j = entries.length - 1;
    if (j === null) return;
    e.preventDefault();
    show(entries[j].def.id, { focus: true });
  });
  show(initial);
  return { el: h('div', null, list, panels), show, active: () => active };
}

/** A run's workflow: a link, except for ad-hoc jobs (no registered workflow). */
export function workflowLink(run) {
  return run.kind === 'job' ? h('span', { title: 'an ad-hoc job' }, run.workflow) : h('a', { href: links.workflow(run.workflow) }, run.workflow);
}

/** Runs as a table; each row `<tr data-run="ID">`. */
export function runsTable(runs, { workflow = true } = {}) {
  if (!runs.length) return empty('No runs.');
  const headers = ['Run', workflow ? 'Workflow' : null, 'State', 'Kind', 'Logical time (UTC)',
    h('span', { class: 'hide-narrow' }, 'Started'), h('span', { class: 'hide-narrow' }, 'Duration')].filter(Boolean);
  const rows = runs.map((r) => h('tr', { 'data-run': r.id },
    h('td', null, runLink(r.id, { title: r.id })),
    workflow ? h('td', null, workflowLink(r)) : null,
    h('td', null, badge(r.state), r.archived ? h('span', { class: 'muted', title: 'In cold storage' }, ' archived') : null),
    h('td', null, r.kind),
    h('td', null, timeEl(r.logical_time)),
    h('td', { class: 'hide-narrow' }, timeEl(r.started_at)),
    h('td', { class: 'hide-narrow num' }, duration(r.started_at, r.finished_at))));
  return table(headers, rows, { class: 'runs' });
}

/**
 * A cursor pager: `load(before)` answers `{runs, next}`. Keeps a stack of
 * the cursors of newer pages. `onPage(before)` reports the current cursor.
 */
export function pager({ load, render, idPrefix = 'runs', initial = null, onPage }) {
  const stack = [];
  let current = initial;
  const newer = h('button', { type: 'button', class: 'secondary', id: `${idPrefix}-prev` }, '← Newer');
  const older = h('button', { type: 'button', class: 'secondary', id: `${idPrefix}-next` }, 'Older →');
  const status = h('span', { class: 'muted', role: 'status' });
  const body = h('div', null);
  let next = null;
  const go = async (before) => {
    status.textContent = 'Loading…';
    newer.disabled = true;
    older.disabled = true;
    try {
      const page = await load(before);
      current = before;
      next = page.next ?? null;
      replace(body, render(page));
      status.textContent = '';
      onPage?.(current);
    } catch (e) {
      if (e.name === 'AbortError') return;
      status.textContent = '';
      replace(body, h('div', { class: 'error', role: 'alert' }, e.message));
    }
    newer.disabled = !current;
    older.disabled = !next;
  };
  newer.addEventListener('click', () => go(stack.length ? stack.pop() : null));
  older.addEventListener('click', () => {
    if (!next) return;
    stack.push(current);
    go(next);
  });
  const ready = go(initial);
  return { el: h('div', null, body, h('div', { class: 'pager' }, newer, older, status)), reload: () => go(current), ready };
}

/** Key/value pairs as a <dl> (pairs with no value are left out). */
export function kv(pairs) {
  const dl = h('dl', { class: 'kv' });
  for (const [k, v] of pairs) {
    if (v == null || v === '') continue;
    dl.appendChild(h('div', null, h('dt', null, k), h('dd', null, v)));
  }
  return dl;
}
