import { test } from 'node:test';
import assert from 'node:assert/strict';
import { diffLines, hunks } from '../diff.js';

function lcsLength(a, b) {
  const dp = Array.from({ length: a.length + 1 }, () => new Array(b.length + 1).fill(0));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      dp[i][j] = a[i - 1] === b[j - 1] ? dp[i - 1][j - 1] + 1 : Math.max(dp[i - 1][j], dp[i][j - 1]);
    }
  }
  return dp[a.length][b.length];
}

function check(a, b) {
  const edits = diffLines(a, b);
  assert.deepEqual(edits.filter((e) => e.op !== '+').map((e) => e.text), a, 'the old side');
  assert.deepEqual(edits.filter((e) => e.op !== '-').map((e) => e.text), b, 'the new side');
  const changes = edits.filter((e) => e.op !== ' ').length;
  assert.equal(changes, a.length + b.length - 2 * lcsLength(a, b), 'a shortest edit script');
  return edits;
}

test('identical, empty and disjoint inputs', () => {
  assert.deepEqual(check([], []), []);
  assert.deepEqual(check(['a'], ['a']), [{ op: ' ', text: 'a' }]);
  assert.deepEqual(check([], ['x']), [{ op: '+', text: 'x' }]);
  assert.deepEqual(check(['x'], []), [{ op: '-', text: 'x' }]);
  check(['a', 'b'], ['c', 'd']);
});

test('a changed line in the middle of a definition', () => {
  const a = ['{', '  "name": "x",', '  "retries": 1,', '  "tasks": []', '}'];
  const b = ['{', '  "name": "x",', '  "retries": 3,', '  "tasks": []', '}'];
  const edits = check(a, b);
  assert.deepEqual(edits.filter((e) => e.op !== ' '), [
    { op: '-', text: '  "retries": 1,' },
    { op: '+', text: '  "retries": 3,' },
  ]);
});

test('random sequences: both sides rebuilt and the script is shortest', () => {
  let seed = 42;
  const rand = (n) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  for (let round = 0; round < 300; round++) {
    const a = Array.from({ length: rand(12) }, () => 'abcd'[rand(4)]);
    const b = Array.from({ length: rand(12) }, () => 'abcd'[rand(4)]);
    check(a, b);
  }
});

test('hunks fold long unchanged stretches and keep context', () => {
  const a = Array.from({ length: 20 }, (_, i) => `l${i}`);
  const b = a.slice();
  b[10] = 'changed';
  const out = hunks(diffLines(a, b), 2);
  assert.deepEqual(out[0], { gap: 8 });
  assert.deepEqual(out.slice(1, 3).map((e) => e.text), ['l8', 'l9']);
  assert.deepEqual(out.slice(3, 5).map((e) => e.op), ['-', '+']);
  assert.deepEqual(out.slice(5, 7).map((e) => e.text), ['l11', 'l12']);
  assert.deepEqual(out[7], { gap: 7 });
  assert.equal(out.length, 8);
});
