// Unit tests: `node --test` runs the task natively, with @dagr/sdk/testing playing dagr.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TestRun } from '@dagr/sdk/testing';
import task from '../src/task.js';

test('summarises by group', () => {
  const csv = 'city,amount\nBerlin,10\nParis,5\n\nBerlin,2.5\n';
  const outcome = new TestRun().run(task, { csv, column: 'amount', group_by: 'city' });
  assert.equal(outcome.output.rows, 3);
  assert.equal(outcome.output.sum, 17.5);
  assert.deepEqual(outcome.output.groups.Berlin, { count: 2, sum: 12.5 });
  assert.ok(outcome.logged('summarised 3 rows'));
});

test('names the bad line', () => {
  const outcome = new TestRun().run(task, { csv: 'a,b\n1,2\n3,x', column: 'b' });
  assert.equal(outcome.error.message, 'line 3: `b` is not a number: "x"');
});
