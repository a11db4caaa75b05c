// Talking to dagr: the session (cookie + CSRF value), JSON requests, the
// event stream (SSE) and streamed logs (NDJSON). The token itself is never
// kept by the page: the HttpOnly cookie carries it.

import { LineSplitter, parseNdjson } from './lines.js';

let session = null;
let onSignedOut = () => {};

export function getSession() {
  return session;
}

export function setSession(value) {
  session = value;
}

/** Called when the API answers 401: the session ended. */
export function onUnauthorized(fn) {
  onSignedOut = fn;
}

/** An error answer of the API: `{code, message, location?, details?}`. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.code ?? 'http_error';
    this.location = body?.location;
    this.details = body?.details;
  }
}

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** `path` with a query string of the defined values of `query`. */
export function withQuery(path, query) {
  if (!query) return path;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const text = q.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * A request; answers `{status, data}`. `body` is sent as JSON unless it is
 * a Blob/File/string (then `contentType` says what it is).
 */
export async function request(method, path, { body, query, signal, contentType, headers = {} } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, signal, credentials: 'same-origin' };
  if (UNSAFE.has(method) && session?.csrf) init.headers['X-Dagr-CSRF'] = session.csrf;
  if (body !== undefined) {
    if (body instanceof Blob || typeof body === 'string') {
      init.body = body;
      init.headers['Content-Type'] = contentType || 'application/octet-stream';
    } else {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
  }
  let response;
  try {
    response = await fetch(withQuery(path, query), init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { code: 'network', message: `cannot reach dagr: ${e.message}` });
  }
  const type = response.headers.get('content-type') || '';
  let data = null;
  if (response.status !== 204 && response.status !== 304) {
    const text = await response.text();
    if (type.includes('json') && text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = text;
      }
    } else {
      data = text;
    }
  }
  if (!response.ok) {
    const body_ = data && typeof data === 'object' ? data : { message: `HTTP ${response.status} ${response.statusText}` };
    const error = new ApiError(response.status, body_);
    if (response.status === 401 && !path.startsWith('/ui/session')) onSignedOut(error);
    throw error;
  }
  return { status: response.status, data };
}

export const api = {
  get: (path, query, signal) => request('GET', path, { query, signal }).then((r) => r.data),
  post: (path, body, opts = {}) => request('POST', path, { body, ...opts }).then((r) => r.data),
  put: (path, body, opts = {}) => request('PUT', path, { body, ...opts }).then((r) => r.data),
  patch: (path, body, opts = {}) => request('PATCH', path, { body, ...opts }).then((r) => r.data),
  del: (path, opts = {}) => request('DELETE', path, opts).then((r) => r.data),
};

/** `/v1/...` with each segment encoded. */
export function v1(...segments) {
  return `/v1/${segments.map((p) => encodeURIComponent(p)).join('/')}`;
}

// Session -----------------------------------------------------------------------

export async function loadSession() {
  try {
    const { data } = await request('GET', '/ui/session');
    // Not signed in may also be answered without an error status.
    session = data && typeof data === 'object' && data.csrf ? data : null;
  } catch (e) {
    if (e.status === 401) session = null;
    else throw e;
  }
  return session;
}

export async function signIn(token, tenant) {
  const body = { token };
  if (tenant) body.tenant = tenant;
  session = (await request('POST', '/ui/session', { body })).data;
  return session;
}

export async function signOut() {
  try {
    await request('DELETE', '/ui/session');
  } finally {
    session = null;
  }
}

export async function switchTenant(tenant) {
  session = (await request('PUT', '/ui/session/tenant', { body: { tenant } })).data;
  return session;
}

// Events (SSE) ---------------------------------------------------------------------

/** The kinds of events the engine writes (the SSE event names). */
export const EVENT_KINDS = [
  'run.state', 'task.state', 'task.waiting', 'task.child', 'task.timeout_warn', 'task.progress',
  'run.released', 'run.waiting', 'run.upstream_failed', 'run.timeout', 'run.sla_missed', 'run.reflush',
  'schedule.skipped', 'message',
];

/**
 * Follows `/v1/events` with `query` (e.g. `{run: id}`). `onEvent` gets each
 * parsed event; `onOpen` is called on every (re)connection, so that the page
 * can re-read what it may have missed. When the stream cannot be opened at
 * all (the server refused it), falls back to calling `onOpen` every few
 * seconds (polling). Answers a function that closes it.
 */
export function followEvents(query, { onEvent, onOpen }) {
  let source = null;
  let poll = null;
  let closed = false;
  const url = withQuery('/v1/events', query);
  const handle = (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (event && typeof event === 'object') onEvent(event);
  };
  const open = () => {
    source = new EventSource(url, { withCredentials: true });
    for (const kind of EVENT_KINDS) source.addEventListener(kind, handle);
    source.onopen = () => onOpen?.();
    source.onerror = () => {
      // EventSource reconnects by itself unless the answer was not a stream.
      if (source.readyState === EventSource.CLOSED && !closed && !poll) {
        poll = setInterval(() => onOpen?.(), 3000);
        // Try the stream again later.
        setTimeout(() => {
          if (closed) return;
          clearInterval(poll);
          poll = null;
          open();
        }, 30000);
      }
    };
  };
  open();
  return () => {
    closed = true;
    source?.close();
    clearInterval(poll);
  };
}

// Streamed logs (NDJSON) --------------------------------------------------------------

/**
 * Reads an NDJSON stream, calling `onLines` with each batch of parsed lines.
 * Resolves when the stream ends; rejects with an ApiError on an error answer.
 */
export async function streamNdjson(path, query, { signal, onLines }) {
  const response = await fetch(withQuery(path, query), {
    headers: { Accept: 'application/x-ndjson' },
    credentials: 'same-origin',
    signal,
  });
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    const error = new ApiError(response.status, body);
    if (response.status === 401) onSignedOut(error);
    throw error;
  }
  const type = response.headers.get('content-type') || '';
  if (!type.includes('ndjson') || !response.body) {
    // A plain JSON array (the server did not stream).
    const lines = await response.json();
    if (Array.isArray(lines)) onLines(lines);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const splitter = new LineSplitter();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const lines = parseNdjson(splitter.push(decoder.decode(value, { stream: true })));
    if (lines.length) onLines(lines);
  }
  const rest = parseNdjson(splitter.flush());
  if (rest.length) onLines(rest);
}
