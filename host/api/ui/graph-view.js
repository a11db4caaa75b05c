// A DAG drawn as SVG, from graph-layout.js: zoom (wheel, buttons, keys),
// pan (drag, arrows), fit, find a task. Each task is a
// `<g data-task="NAME" data-state="STATE">`; all edges are one <path>.

import { GLYPHS, h, s, stateLabel } from './dom.js';
import { edgePath, layout } from './graph-layout.js';

const MIN_ZOOM = 0.02;
const MAX_ZOOM = 3;

/**
 * `tasks`: [{name, depends_on, state?}]. `onSelect(name)` is called when a
 * task is clicked (or Enter on it). `idPrefix` names the controls' ids.
 */
export function graphView({ tasks, onSelect, idPrefix = 'graph', label = 'Task graph' }) {
  const ids = tasks.map((t) => t.name);
  const edges = [];
  for (const t of tasks) for (const d of t.depends_on ?? []) edges.push([d, t.name]);
  const result = layout(ids, edges);
  const { nodes } = result;

  const succ = Array.from({ length: nodes.length }, () => []);
  const pred = Array.from({ length: nodes.length }, () => []);
  for (const [a, b] of result.edges) {
    succ[a].push(b);
    pred[b].push(a);
  }

  const edgePathEl = s('path', { class: 'edges', d: edgePath(result) });
  const highlightEl = s('path', { class: 'edges-hl', d: '' });
  const nodeLayer = s('g', { class: 'nodes' });
  const viewport = s('g', { class: 'viewport' }, edgePathEl, highlightEl, nodeLayer);
  const svg = s('svg', {
    class: 'graph-svg', id: `${idPrefix}-svg`, tabindex: '0', role: 'group',
    'aria-label': `${label}: ${nodes.length} tasks, ${result.edges.length} dependencies. Drag or use the arrow keys to move, + and − to zoom.`,
  }, viewport);

  const focusable = nodes.length <= 300;
  const elements = new Array(nodes.length);
  const glyphs = new Array(nodes.length);
  const titles = new Array(nodes.length);
  const fragment = document.createDocumentFragment();
  nodes.forEach((node, i) => {
    const state = tasks[i].state ?? 'none';
    const glyph = s('text', { class: 'glyph', x: 9, y: node.height / 2 + 4 }, GLYPHS[state] ?? '');
    const title = s('title', null, `${node.id} · ${stateLabel(state)}`);
    const g = s('g', {
      class: 'node', transform: `translate(${node.x} ${node.y})`,
      'data-task': node.id, 'data-state': state,
      tabindex: focusable ? '0' : null, role: focusable ? 'button' : null,
    },
    title,
    s('rect', { width: node.width, height: node.height, rx: 6, ry: 6 }),
    glyph,
    s('text', { class: 'label', x: 24, y: node.height / 2 + 4 }, node.label));
    elements[i] = g;
    glyphs[i] = glyph;
    titles[i] = title;
    fragment.appendChild(g);
  });
  nodeLayer.appendChild(fragment);

  // Zoom and pan ---------------------------------------------------------------
  let k = 1;
  let tx = 0;
  let ty = 0;
  let moved = false; // by the user: then a resize does not fit again
  let frame = 0;
  const apply = () => {
    frame = 0;
    viewport.setAttribute('transform', `translate(${tx.toFixed(1)} ${ty.toFixed(1)}) scale(${k.toFixed(4)})`);
    svg.classList.toggle('lod-low', k < 0.45);
    svg.classList.toggle('lod-min', k < 0.15);
  };
  const schedule = () => {
    if (!frame) frame = requestAnimationFrame(apply);
  };
  const size = () => {
    const rect = svg.getBoundingClientRect();
    return { w: rect.width, h: rect.height, left: rect.left, top: rect.top };
  };
  const zoomAt = (factor, px, py) => {
    const next = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, k * factor));
    tx = px - ((px - tx) * next) / k;
    ty = py - ((py - ty) * next) / k;
    k = next;
    moved = true;
    schedule();
  };
  const fit = () => {
    const { w, h: height } = size();
    if (!w || !height) return false;
    const pad = 16;
    const scale = Math.min((w - 2 * pad) / Math.max(1, result.width), (height - 2 * pad) / Math.max(1, result.height));
    k = Math.min(1.2, Math.max(MIN_ZOOM, scale));
    tx = (w - result.width * k) / 2;
    ty = (height - result.height * k) / 2;
    moved = false;
    schedule();
    return true;
  };
  const center = (i) => {
    const { w, h: height } = size();
    const node = nodes[i];
    k = Math.max(k, 0.9);
    tx = w / 2 - (node.x + node.width / 2) * k;
    ty = height / 2 - (node.y + node.height / 2) * k;
    moved = true;
    schedule();
  };

  svg.addEventListener('wheel', (e) => {
    e.preventDefault();
    const { left, top } = size();
    const delta = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
    zoomAt(Math.exp(-delta * 0.0015), e.clientX - left, e.clientY - top);
  }, { passive: false });

  let drag = null;
  let suppressClick = false;
  svg.addEventListener('pointerdown', (e) => {
    if (e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, tx, ty, id: e.pointerId, active: false };
  });
  svg.addEventListener('pointermove', (e) => {
    if (!drag || e.pointerId !== drag.id) return;
    const dx = e.clientX - drag.x;
    const dy = e.clientY - drag.y;
    if (!drag.active && Math.hypot(dx, dy) > 4) {
      drag.active = true;
      svg.setPointerCapture(e.pointerId);
      svg.classList.add('dragging');
    }
    if (drag.active) {
      tx = drag.tx + dx;
      ty = drag.ty + dy;
      moved = true;
      schedule();
    }
  });
  const endDrag = (e) => {
    if (!drag || e.pointerId !== drag.id) return;
    if (drag.active) {
      suppressClick = true;
      setTimeout(() => { suppressClick = false; }, 0);
      svg.classList.remove('dragging');
    }
    drag = null;
  };
  svg.addEventListener('pointerup', endDrag);
  svg.addEventListener('pointercancel', endDrag);

  // Selection -------------------------------------------------------------------
  let selected = -1;
  const select = (i) => {
    if (selected >= 0) elements[selected].classList.remove('selected');
    selected = i;
    if (i < 0) {
      highlightEl.setAttribute('d', '');
      return;
    }
    elements[i].classList.add('selected');
    const list = [...pred[i].map((p) => [p, i]), ...succ[i].map((q) => [i, q])];
    highlightEl.setAttribute('d', edgePath(result, list));
  };
  const nodeOf = (target) => target?.closest?.('[data-task]');
  svg.addEventListener('click', (e) => {
    if (suppressClick) return;
    const g = nodeOf(e.target);
    if (!g) return;
    const i = result.index.get(g.getAttribute('data-task'));
    select(i);
    onSelect?.(nodes[i].id);
  });
  svg.addEventListener('keydown', (e) => {
    const g = nodeOf(e.target);
    if (g && (e.key === 'Enter' || e.key === ' ')) {
      e.preventDefault();
      const i = result.index.get(g.getAttribute('data-task'));
      select(i);
      onSelect?.(nodes[i].id);
      return;
    }
    const step = 60;
    const { w, h: height } = size();
    const keys = {
      ArrowLeft: () => { tx += step; }, ArrowRight: () => { tx -= step; },
      ArrowUp: () => { ty += step; }, ArrowDown: () => { ty -= step; },
      '+': () => zoomAt(1.25, w / 2, height / 2), '=': () => zoomAt(1.25, w / 2, height / 2),
      '-': () => zoomAt(0.8, w / 2, height / 2), 0: () => fit(),
    };
    const action = keys[e.key];
    if (!action) return;
    e.preventDefault();
    action();
    moved = true;
    schedule();
  });

  // Toolbar ------------------------------------------------------------------------
  const listId = `${idPrefix}-tasks`;
  const datalist = h('datalist', { id: listId }, nodes.length <= 5000 ? nodes.map((n) => h('option', { value: n.id })) : null);
  const search = h('input', {
    type: 'search', id: `${idPrefix}-search`, class: 'graph-search', list: listId,
    placeholder: 'Find a task', 'aria-label': 'Find a task in the graph', autocomplete: 'off',
  });
  const found = h('span', { class: 'graph-found', role: 'status' });
  const find = () => {
    const q = search.value.trim();
    if (!q) return;
    let i = result.index.get(q);
    if (i === undefined) {
      const lower = q.toLowerCase();
      i = nodes.findIndex((n) => n.id.toLowerCase().includes(lower));
    }
    if (i < 0) {
      found.textContent = 'no such task';
      return;
    }
    found.textContent = '';
    center(i);
    select(i);
  };
  search.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      find();
    }
  });
  search.addEventListener('change', find);
  const button = (id, text, title, fn) => h('button', { type: 'button', id, class: 'secondary small', title, 'aria-label': title, onclick: fn }, text);
  const toolbar = h('div', { class: 'graph-tools', role: 'toolbar', 'aria-label': 'Graph controls' },
    search, datalist, found,
    button(`${idPrefix}-zoom-in`, '+', 'Zoom in', () => { const { w, h: height } = size(); zoomAt(1.25, w / 2, height / 2); }),
    button(`${idPrefix}-zoom-out`, '−', 'Zoom out', () => { const { w, h: height } = size(); zoomAt(0.8, w / 2, height / 2); }),
    button(`${idPrefix}-fit`, 'Fit', 'Fit the graph to the view', fit),
    h('span', { class: 'graph-info muted' }, `${nodes.length} tasks · ${result.edges.length} edges`));

  const el = h('div', { class: 'graph' }, toolbar, h('div', { class: 'graph-canvas' }, svg));

  // Fit when it first gets a size (it may be built in a hidden tab).
  const observer = new ResizeObserver(() => {
    if (!moved) fit();
  });
  observer.observe(svg);

  return {
    el,
    result,
    fit,
    has: (name) => result.index.has(name),
    setState(name, state) {
      const i = result.index.get(name);
      if (i === undefined) return;
      const g = elements[i];
      if (g.getAttribute('data-state') === state) return;
      g.setAttribute('data-state', state);
      glyphs[i].textContent = GLYPHS[state] ?? '';
      titles[i].textContent = `${name} · ${stateLabel(state)}`;
    },
    select(name) {
      const i = result.index.get(name);
      select(i === undefined ? -1 : i);
    },
    focusTask(name) {
      const i = result.index.get(name);
      if (i !== undefined && focusable) elements[i].focus();
    },
    center(name) {
      const i = result.index.get(name);
      if (i !== undefined) center(i);
    },
    destroy() {
      observer.disconnect();
      if (frame) cancelAnimationFrame(frame);
    },
  };
}
