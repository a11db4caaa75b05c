import { test } from 'node:test';
import assert from 'node:assert/strict';
import { matchRoute, safeNext } from '../routes.js';

test('paths map to pages with decoded parameters', () => {
  assert.equal(matchRoute('/ui/').page, 'workflows');
  assert.equal(matchRoute('/ui').page, 'workflows');
  assert.deepEqual(matchRoute('/ui/workflows/daily%20sales').params, { name: 'daily sales' });
  assert.equal(matchRoute('/ui/runs').page, 'runs');
  assert.equal(matchRoute('/ui/runs/').page, 'runs');
  assert.deepEqual(matchRoute('/ui/runs/r1').params, { id: 'r1' });
  const t = matchRoute('/ui/runs/r1/tasks/a.b-c');
  assert.equal(t.page, 'run');
  assert.deepEqual(t.params, { id: 'r1', task: 'a.b-c' });
  assert.equal(matchRoute('/ui/plugins/echo').page, 'plugin');
  assert.equal(matchRoute('/ui/signin').public, true);
  assert.equal(matchRoute('/ui/cluster').page, 'cluster');
});

test('unknown paths are not found', () => {
  for (const p of ['/ui/nope', '/ui/runs/a/b', '/ui/workflows//x', '/elsewhere', '/ui/runs/%E0%A4%A']) {
    assert.equal(matchRoute(p).page, 'notfound', p);
  }
});

test('after sign-in only UI paths are followed', () => {
  assert.equal(safeNext('/ui/runs/x?state=failed'), '/ui/runs/x?state=failed');
  for (const bad of ['https://evil.example', '//evil.example/ui/', '/ui/..//evil', '/v1/runs', 'javascript:alert(1)', '/ui/signin', null]) {
    assert.equal(safeNext(bad), '/ui/', String(bad));
  }
});
