// Splits a stream of text chunks into lines (NDJSON, SSE): a chunk may end
// in the middle of a line, and a line may span many chunks. Pure.

export class LineSplitter {
  constructor() {
    this.rest = '';
  }

  /** The complete lines in `chunk` (with what was left before), without their ends. */
  push(chunk) {
    let text = this.rest + chunk;
    // A chunk that ends with '\r' may be the first half of '\r\n'.
    let hold = '';
    if (text.endsWith('\r')) {
      text = text.slice(0, -1);
      hold = '\r';
    }
    const parts = text.split(/\r\n|\n|\r/);
    this.rest = parts.pop() + hold;
    return parts;
  }

  /** What is left at the end of the stream, as a last line (if any). */
  flush() {
    const rest = this.rest.replace(/\r$/, '');
    this.rest = '';
    return rest === '' ? [] : [rest];
  }
}

/** Parses NDJSON lines, skipping blank ones; a bad line becomes `{error, text}`. */
export function parseNdjson(lines) {
  const out = [];
  for (const line of lines) {
    if (line.trim() === '') continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      out.push({ error: 'not JSON', text: line });
    }
  }
  return out;
}

/** One log line as text: `time level [source] message`. */
export function formatLogLine(line) {
  const at = typeof line.at === 'string' ? line.at.replace('T', ' ').replace(/\.\d+Z$|Z$/, '') : '';
  const level = String(line.level ?? '').toUpperCase().padEnd(5);
  const source = line.source && line.source !== 'plugin' ? `[${line.source}] ` : '';
  return `${at} ${level} ${source}${line.message ?? line.text ?? ''}`;
}

/** A progress log line as `{percent, message}`: JSON, or `42% text`, or just text. */
export function progressFromLine(line) {
  if (!line) return null;
  const text = String(line.message ?? '');
  try {
    const v = JSON.parse(text);
    if (v && typeof v === 'object' && 'percent' in v) return { percent: v.percent, message: v.message ?? '' };
  } catch {
    // not JSON
  }
  const m = /^\s*(\d{1,3}(?:\.\d+)?)\s*%\s*[:\-·]?\s*(.*)$/s.exec(text);
  if (m) return { percent: Number(m[1]), message: m[2] };
  return { percent: 0, message: text };
}
