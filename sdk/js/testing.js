// A native test harness: run a task with `node --test`, no wasm needed.
//
//   import { test } from 'node:test';
//   import assert from 'node:assert/strict';
//   import { TestRun } from '@dagr/sdk/testing';
//   import greet from '../src/task.js';
//
//   test('greets', () => {
//     const outcome = new TestRun().run(greet, { name: 'Ada' });
//     assert.deepEqual(outcome.output, { greeting: 'Hello, Ada!' });
//     assert.ok(outcome.logged('greeting Ada'));
//   });

import { TaskError, runJson, setHost } from './index.js';

/** What a TestRun produced. */
export class Outcome {
  constructor() {
    this.output = undefined;
    this.error = undefined;
    this.logs = [];
    this.progress = [];
  }
  get ok() {
    return this.error === undefined;
  }
  /** Whether any log line contains `needle`. */
  logged(needle) {
    return this.logs.some(([, message]) => message.includes(needle));
  }
}

/** One simulated attempt: plays the host, through the same JSON path as dagr. */
export class TestRun {
  constructor() {
    this.ctx = {
      tenant: 'default',
      workflow: 'test',
      runId: 'run-1',
      task: 'task',
      attempt: 1,
      logicalTime: '2026-01-01T00:00:00Z',
      idempotencyKey: 'run-1/task',
    };
    this.inputs = {};
    this.secrets = {};
    this.cancelAfter = undefined;
    this.gradeValue = 0;
  }
  /** Changes fields of the context (tenant, workflow, runId, task, attempt, logicalTime, idempotencyKey). */
  context(fields) {
    Object.assign(this.ctx, fields);
    return this;
  }
  attempt(n) {
    return this.context({ attempt: n });
  }
  /** Adds the output of an upstream task. */
  input(task, output) {
    this.inputs[task] = output;
    return this;
  }
  secret(name, value) {
    this.secrets[name] = value;
    return this;
  }
  /** The grade `grade()` returns (default 0). */
  grade(grade) {
    this.gradeValue = grade;
    return this;
  }
  /** `cancelled()` is true from the start. */
  cancelled() {
    return this.cancelAfterCalls(0);
  }
  /** `cancelled()` is false `calls` times, then true. */
  cancelAfterCalls(calls) {
    this.cancelAfter = calls;
    return this;
  }
  /** Runs the task with these params (any JSON value). */
  run(task, params = {}) {
    return this.runRaw(task, JSON.stringify(params));
  }
  /**
   * Runs the task with params given as JSON text, exactly as dagr passes
   * them. An async task gives a Promise of the Outcome: `await` it.
   */
  runRaw(task, paramsText) {
    const outcome = new Outcome();
    let checks = 0;
    const host = {
      log: (level, message) => outcome.logs.push([level, message]),
      progress: (percent, message) => outcome.progress.push([percent, message]),
      cancelled: () => this.cancelAfter !== undefined && checks++ >= this.cancelAfter,
      secret: (name) => this.secrets[name],
      grade: () => this.gradeValue,
    };
    const settle = (text) => {
      outcome.output = JSON.parse(text);
      return outcome;
    };
    const fail = (e) => {
      if (!(e instanceof TaskError)) throw e;
      outcome.error = e;
      return outcome;
    };
    const previous = setHost(host);
    try {
      const text = runJson(task, this.ctx, paramsText, JSON.stringify(this.inputs));
      if (text && typeof text.then === 'function') {
        // The host stays in place until the task settles.
        return text.then(settle, fail).finally(() => setHost(previous));
      }
      setHost(previous);
      return settle(text);
    } catch (e) {
      setHost(previous);
      return fail(e);
    }
  }
}
