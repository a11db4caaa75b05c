// The JS SDK's contract, natively: the same behaviours the Rust SDK's tests check.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import * as dagr from '../index.js';
import { TestRun } from '../testing.js';

const greet = dagr.defineTask({
  name: 'greet',
  version: '1.2.3',
  description: 'Greets someone.',
  paramsSchema: {
    type: 'object',
    required: ['name'],
    additionalProperties: false,
    properties: {
      name: { type: 'string' },
      shout: { type: 'boolean' },
      mode: { enum: ['plain', 'fancy'] },
      rows: { type: 'array', items: { type: 'object', properties: { amount: { type: 'number' } } } },
      times: { type: 'integer', minimum: 1 },
    },
  },
  run(ctx, params) {
    if (!params.name) throw new dagr.Fatal('name must not be empty');
    if (params.name === 'busy') throw new dagr.Retryable('the service is busy');
    dagr.info(`greeting ${params.name} (attempt ${ctx.attempt})`);
    dagr.progress(150, 'done');
    const greeting = `Hello, ${params.name}!`;
    return { greeting: params.shout ? greeting.toUpperCase() : greeting };
  },
});

test('typed params, output and log', () => {
  const outcome = new TestRun().attempt(2).run(greet, { name: 'Ada', shout: true });
  assert.ok(outcome.ok);
  assert.deepEqual(outcome.output, { greeting: 'HELLO, ADA!' });
  assert.deepEqual(outcome.logs, [['info', 'greeting Ada (attempt 2)']]);
  assert.deepEqual(outcome.progress, [[100, 'done']], 'progress above 100 is 100');
});

test('param mismatches are fatal and name the path', () => {
  const cases = {
    '{"nam": "typo"}': 'invalid params at `name`: missing field',
    '{"name": "a", "nam": 1}': 'invalid params at `nam`: unknown field (known fields: mode, name, rows, shout, times)',
    '{"name": 3}': 'invalid params at `name`: expected a string, got a number',
    '{"name": "a", "rows": [{"amount": "1"}]}': 'invalid params at `rows[0].amount`: expected a number, got a string',
    '{"name": "a", "mode": "loud"}': 'invalid params at `mode`: expected one of "plain", "fancy", got "loud"',
    '{"name": "a", "times": 1.5}': 'invalid params at `times`: expected an integer, got a number',
    '{"name": "a", "times": 0}': 'invalid params at `times`: must be at least 1',
    '[1]': 'invalid params: expected an object, got an array',
    'not json': 'params are not JSON',
  };
  for (const [params, message] of Object.entries(cases)) {
    const outcome = new TestRun().runRaw(greet, params);
    assert.ok(outcome.error, params);
    assert.ok(outcome.error.isFatal, params);
    assert.ok(outcome.error.message.includes(message), `${params}: ${outcome.error.message}`);
  }
});

test('retryable and fatal errors', () => {
  const busy = new TestRun().run(greet, { name: 'busy' });
  assert.ok(busy.error instanceof dagr.Retryable);
  assert.equal(busy.error.isFatal, false);
  const empty = new TestRun().run(greet, { name: '' });
  assert.ok(empty.error instanceof dagr.Fatal);
  assert.equal(empty.error.message, 'name must not be empty');
});

test('inputs, context, secrets and cancellation', () => {
  const careful = dagr.defineTask({
    name: 'careful',
    version: '0.1.0',
    run(ctx, params, inputs) {
      let checks = 0;
      while (!dagr.cancelled()) checks++;
      return {
        key: ctx.idempotencyKey,
        up: inputs.get('up'),
        n: inputs.parse('up', { type: 'object', properties: { n: { type: 'integer' } } }).n,
        token: dagr.secret('token'),
        missing: dagr.secret('nope') ?? null,
        grade: dagr.grade(),
        checks,
      };
    },
  });
  const outcome = new TestRun()
    .context({ idempotencyKey: 'r/t' })
    .input('up', { n: 1 })
    .secret('token', 's3cr3t')
    .grade(2)
    .cancelAfterCalls(3)
    .run(careful);
  assert.deepEqual(outcome.output, { key: 'r/t', up: { n: 1 }, n: 1, token: 's3cr3t', missing: null, grade: 2, checks: 3 });
  assert.equal(new TestRun().input('up', { n: 1 }).cancelled().run(careful).output.grade, 0);
});

test('inputs.parse names the task', () => {
  const inputs = new dagr.Inputs({ bad: { n: 'x' } });
  assert.throws(() => inputs.parse('gone'), /no input from task `gone`/);
  assert.throws(() => inputs.parse('bad', { type: 'object', properties: { n: { type: 'integer' } } }), /input from task `bad` at `n`: expected an integer/);
});

test('definitions are checked', () => {
  assert.throws(() => dagr.defineTask({ name: 'Bad', version: '1.0.0', run() {} }), /must be 1 to 64 lowercase/);
  assert.throws(() => dagr.defineTask({ name: 'ok', version: '1.0', run() {} }), /not a semantic version/);
  assert.throws(() => dagr.defineTask({ name: 'ok', version: '1.0.0' }), /has no run/);
  assert.throws(() => dagr.log('loud', 'x'), /log level must be one of/);
});

test('an async task is awaited; other exceptions propagate', async () => {
  const later = dagr.defineTask({
    name: 'later',
    version: '0.1.0',
    async run(ctx, params) {
      await new Promise((resolve) => setTimeout(resolve, 1));
      dagr.info('awaited');
      if (params.fail) throw new dagr.Retryable('try again');
      return { n: 1 };
    },
  });
  const ok = await new TestRun().run(later, {});
  assert.deepEqual(ok.output, { n: 1 });
  assert.ok(ok.logged('awaited'));
  const failed = await new TestRun().run(later, { fail: true });
  assert.ok(failed.error instanceof dagr.Retryable);
  const crash = dagr.defineTask({ name: 'crash', version: '0.1.0', run() { throw new RangeError('boom'); } });
  assert.throws(() => new TestRun().run(crash), RangeError);
});

test('exportTask speaks the WIT: describe and task-error variants', async () => {
  const calls = [];
  const host = { log: (l, m) => calls.push([l, m]), progress() {}, cancelled: () => false, secret: () => undefined, grade: () => 3 };
  const exported = dagr.exportTask(greet, host);
  const info = exported.describe();
  assert.equal(info.name, 'greet');
  assert.equal(info.version, '1.2.3');
  assert.equal(JSON.parse(info.paramsSchema).required[0], 'name');
  const ctx = { tenant: 't', workflow: 'w', runId: 'r', task: 'x', attempt: 1, logicalTime: '', idempotencyKey: 'k' };
  assert.equal(exported.run(ctx, '{"name":"Ada"}', '{}'), '{"greeting":"Hello, Ada!"}');
  assert.deepEqual(calls, [['info', 'greeting Ada (attempt 1)']]);
  assert.throws(() => exported.run(ctx, '{"name":"busy"}', '{}'), (e) => e.tag === 'retryable' && e.val === 'the service is busy');
  assert.throws(() => exported.run(ctx, '{}', '{}'), (e) => e.tag === 'fatal' && e.val.includes('missing field'));
  const slow = dagr.exportTask(dagr.defineTask({ name: 'slow', version: '0.1.0', run: async () => { throw new dagr.Fatal('no'); } }), host);
  await assert.rejects(slow.run(ctx, '{}', '{}'), (e) => e.tag === 'fatal' && e.val === 'no');
  dagr.setHost(undefined);
});
