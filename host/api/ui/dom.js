// DOM helpers. Everything from the API is tenant-controlled: it only ever
// reaches the page as text (textContent, attribute values), never as HTML.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, children) {
  for (const child of children) {
    if (child == null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

function setAttrs(el, attrs) {
  if (!attrs) return;
  for (const [key, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === 'class') {
      el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : value);
    } else if (key === 'dataset') {
      for (const [k, v] of Object.entries(value)) if (v != null) el.dataset[k] = v;
    } else if (key === 'text') {
      el.textContent = value;
    } else if (key === 'value' || key === 'checked' || key === 'disabled' || key === 'hidden' ||
               key === 'selected' || key === 'readOnly' || key === 'required' || key === 'multiple') {
      el[key] = value;
    } else if (key === 'style' || key === 'innerHTML' || key === 'outerHTML') {
      throw new Error(`h(): ${key} is not allowed`);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

/** `h('a', {href: '/ui/'}, 'text', child, [more])`: strings become text nodes. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

/** The same for SVG elements. */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

// States -----------------------------------------------------------------------

/** Every state with its label; the glyph and colour are in style.css. */
export const STATES = [
  'queued', 'running', 'paused', 'succeeded', 'failed', 'killed', 'pending', 'waiting',
  'retry_wait', 'upstream_failed', 'skipped', 'missing', 'satisfied',
];

export function stateLabel(state) {
  return String(state ?? 'none').replace(/_/g, ' ');
}

/** A badge whose text is exactly the state (its glyph is drawn by CSS). */
export function badge(state, attrs = {}) {
  return h('span', { class: 'badge', dataset: { state: state ?? 'none' }, ...attrs }, state ?? 'none');
}

export const TERMINAL_RUN = new Set(['succeeded', 'failed', 'killed']);

// Feedback ------------------------------------------------------------------------

export function loading(what = 'Loading') {
  return h('p', { class: 'loading', role: 'status' }, `${what}…`);
}

export function empty(text) {
  return h('p', { class: 'empty' }, text);
}

/** An API (or any) error as text. */
export function errorBox(error) {
  const message = error?.message ?? String(error);
  const box = h('div', { class: 'error', role: 'alert' }, message);
  if (error?.location) box.appendChild(h('span', { class: 'error-location' }, ` (at ${error.location})`));
  if (Array.isArray(error?.details) && error.details.length > 1) {
    box.appendChild(h('ul', null, error.details.map((d) => h('li', null, `${d.location}: ${d.message}`))));
  }
  return box;
}

export function notFound(message) {
  return h('section', { id: 'not-found', class: 'not-found' },
    h('h1', null, '404 · not found'),
    h('p', null, message || 'This page was not found.'),
    h('p', null, h('a', { href: '/ui/' }, 'Back to the workflows')));
}

/** A 403 answer: the token lacks a scope. */
export function forbidden(error, what = 'This') {
  return h('p', { class: 'error forbidden', role: 'alert' },
    `${what} needs the admin scope: ${error?.message ?? 'forbidden'}`);
}

// Times ----------------------------------------------------------------------------

const pad = (n) => String(n).padStart(2, '0');

/** `2026-01-31 02:00:00` (UTC), or '' for none. */
export function fmtTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

/** A <time> element showing UTC, with the ISO value. */
export function timeEl(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: iso, title: `${iso} (UTC)` }, fmtTime(iso));
}

export function fmtDuration(ms) {
  if (ms == null || !Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  let sec = Math.round(ms / 1000);
  if (sec < 60) return `${sec} s`;
  const h_ = Math.floor(sec / 3600);
  const m = Math.floor((sec % 3600) / 60);
  sec %= 60;
  return h_ ? `${h_} h ${pad(m)} m` : `${m} m ${pad(sec)} s`;
}

export function duration(start, end) {
  if (!start) return '';
  const a = Date.parse(start);
  const b = end ? Date.parse(end) : Date.now();
  return fmtDuration(b - a);
}

/** Pretty JSON as text. */
export function pretty(value) {
  return JSON.stringify(value, null, 2) ?? 'null';
}

// Links ------------------------------------------------------------------------------

const enc = encodeURIComponent;
export const links = {
  workflows: () => '/ui/',
  workflow: (name, tab) => `/ui/workflows/${enc(name)}${tab ? `?tab=${enc(tab)}` : ''}`,
  runs: (query) => `/ui/runs${query ? `?${query}` : ''}`,
  run: (id) => `/ui/runs/${enc(id)}`,
  task: (id, task) => `/ui/runs/${enc(id)}/tasks/${enc(task)}`,
  plugin: (name) => `/ui/plugins/${enc(name)}`,
};

export function runLink(id, attrs = {}) {
  return h('a', { href: links.run(id), class: 'mono', ...attrs }, shortId(id));
}

export function shortId(id) {
  const text = String(id);
  return text.length > 14 ? `${text.slice(0, 12)}…` : text;
}

/** A table with a header row. */
export function table(headers, rows, attrs = {}) {
  return h('div', { class: 'table-wrap' },
    h('table', attrs,
      h('thead', null, h('tr', null, headers.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, rows)));
}

/** Runs `fn` at most once per `ms`, after the last call. */
export function debounce(fn, ms, maxWait = Infinity) {
  // Calls `fn` once calls have stopped for `ms`, and at the latest
  // `maxWait` after the first call of a burst (a steady stream of calls
  // would otherwise put it off for as long as the stream lasts).
  let timer = null;
  let first = 0;
  const wrapped = (...args) => {
    const now = Date.now();
    if (!first) first = now;
    clearTimeout(timer);
    const wait = Math.min(ms, Math.max(0, first + maxWait - now));
    timer = setTimeout(() => { timer = null; first = 0; fn(...args); }, wait);
  };
  wrapped.cancel = () => { clearTimeout(timer); timer = null; first = 0; };
  return wrapped;
}

let idCounter = 0;
export function uid(prefix = 'id') {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** A label + control pair. */
export function field(label, control, hint) {
  if (!control.id) control.id = uid('f');
  return h('div', { class: 'field' },
    h('label', { for: control.id }, label),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null);
}

/** The glyph of each state (beside its colour, for who cannot tell colours apart). */
export const GLYPHS = {
  queued: '◔', running: '►', paused: '‖', succeeded: '✓', failed: '✗', killed: '■', pending: '○',
  waiting: '◷', retry_wait: '↻', upstream_failed: '⤓', skipped: '»', missing: '?', satisfied: '✓', none: '',
};
