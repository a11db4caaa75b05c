import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LineSplitter, parseNdjson, formatLogLine } from '../lines.js';

test('lines split across chunks are joined', () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push('{"a":1}\n{"b"'), ['{"a":1}']);
  assert.deepEqual(s.push(':2}\n'), ['{"b":2}']);
  assert.deepEqual(s.push('{"c":3}'), []);
  assert.deepEqual(s.flush(), ['{"c":3}']);
  assert.deepEqual(s.flush(), []);
});

test('CRLF and a CR at the end of a chunk make one line end', () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push('a\r'), []);
  assert.deepEqual(s.push('\nb\r\nc'), ['a', 'b']);
  assert.deepEqual(s.push('\rd\n'), ['c', 'd']);
  assert.deepEqual(s.flush(), []);
});

test('many lines in one chunk, and empty lines', () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push('x\n\ny\n'), ['x', '', 'y']);
});

test('NDJSON: blank lines skipped, a bad line kept as text', () => {
  const out = parseNdjson(['{"seq":1}', '', 'oops<script>']);
  assert.deepEqual(out, [{ seq: 1 }, { error: 'not JSON', text: 'oops<script>' }]);
});

test('a log line formats as time, level, source and message', () => {
  const text = formatLogLine({ at: '2026-01-31T02:00:00.123Z', level: 'info', source: 'stderr', message: '<b>hi</b>' });
  assert.equal(text, '2026-01-31 02:00:00 INFO  [stderr] <b>hi</b>');
});

test('a progress line: JSON, "42% text", or plain text', async () => {
  const { progressFromLine } = await import('../lines.js');
  assert.deepEqual(progressFromLine({ message: '{"percent": 84, "message": "step 7"}' }), { percent: 84, message: 'step 7' });
  assert.deepEqual(progressFromLine({ message: '42% halfway' }), { percent: 42, message: 'halfway' });
  assert.deepEqual(progressFromLine({ message: 'warming up' }), { percent: 0, message: 'warming up' });
  assert.equal(progressFromLine(null), null);
});
