// Write dagr task types in JavaScript (or TypeScript).
//
// A dagr plugin is a WebAssembly component; `jco componentize` builds one
// from a JavaScript module (`dagr plugin build` runs it for you). With this
// package a task is an object made by `defineTask`, and the component's
// entry module is three lines:
//
//   // src/main.js — the component's entry; dagr calls `task`
//   import * as host from 'dagr:plugin/host@0.1.0';
//   import { exportTask } from '@dagr/sdk';
//   import greet from './task.js';
//   export const task = exportTask(greet, host);
//
// The task itself (src/task.js) imports only '@dagr/sdk', so `node --test`
// runs it natively with `@dagr/sdk/testing`. See index.d.ts for the types.

import { check } from './schema.js';

export { check } from './schema.js';

/** The WIT package this SDK implements. */
export const WIT_PACKAGE = 'dagr:plugin@0.1.0';

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

/** Why a task failed; throw `Retryable` or `Fatal`. */
export class TaskError extends Error {
  constructor(message, retryable = false) {
    super(String(message));
    this.name = retryable ? 'Retryable' : 'Fatal';
    this.retryable = retryable;
  }
  get isFatal() {
    return !this.retryable;
  }
}

/** A failure that may pass (a timeout, a 503): dagr retries if the task has retries left. */
export class Retryable extends TaskError {
  constructor(message) {
    super(message, true);
  }
}

/** A failure that will recur (bad params, a 404): dagr does not retry. */
export class Fatal extends TaskError {
  constructor(message) {
    super(message, false);
  }
}

// The host: dagr's imports inside the component (set by `exportTask`), the
// test host of `@dagr/sdk/testing` natively. Outside both, logs go to the
// console, nothing is cancelled and there are no secrets.
const consoleHost = {
  log: (level, message) => console.error(`[${level}] ${message}`),
  progress: () => {},
  cancelled: () => false,
  secret: () => undefined,
  grade: () => 0,
};
let host = consoleHost;

/** @internal Used by `exportTask` and `@dagr/sdk/testing`. */
export function setHost(next) {
  const previous = host;
  host = next || consoleHost;
  return previous;
}

/** Appends a line to the attempt's log. */
export function log(level, message) {
  if (!LEVELS.includes(level)) {
    throw new TypeError(`log level must be one of ${LEVELS.join(', ')}, not ${JSON.stringify(level)}`);
  }
  host.log(level, String(message));
}
export const trace = (message) => log('trace', message);
export const debug = (message) => log('debug', message);
export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);

/** Reports progress, 0 to 100 percent, with a short note. */
export function progress(percent, message = '') {
  const clamped = Math.max(0, Math.min(100, Math.round(Number(percent) || 0)));
  host.progress(clamped, String(message));
}

/** Whether the attempt was cancelled; a long task should return early. */
export function cancelled() {
  return Boolean(host.cancelled());
}

/** A secret of the run's tenant, or undefined. dagr redacts its value from the log. */
export function secret(name) {
  const value = host.secret(String(name));
  return value === null ? undefined : value;
}

/**
 * The grade of the run's workflow, 0 (the default) to 3: how urgent its work
 * is. A task may pass it on to the systems it calls.
 */
export function grade() {
  return Number(host.grade()) || 0;
}

const NAME = /^[a-z][a-z0-9-]{0,63}$/;
const VERSION = /^\d+\.\d+\.\d+([-+].*)?$/;

/** Checks a task's definition and returns it. */
export function defineTask(spec) {
  if (!spec || typeof spec !== 'object') throw new TypeError('defineTask needs an object');
  if (!NAME.test(spec.name || '')) {
    throw new TypeError(`task name ${JSON.stringify(spec.name)} must be 1 to 64 lowercase letters, digits or -, starting with a letter`);
  }
  if (!VERSION.test(spec.version || '')) {
    throw new TypeError(`task version ${JSON.stringify(spec.version)} is not a semantic version like 1.2.3`);
  }
  if (typeof spec.run !== 'function') throw new TypeError(`task ${spec.name} has no run(ctx, params, inputs) function`);
  return Object.freeze({ description: '', paramsSchema: undefined, ...spec });
}

/** The outputs of upstream tasks, by task name. */
export class Inputs {
  constructor(outputs = {}) {
    this.outputs = outputs;
  }
  /** The output of upstream task `task`, or undefined. */
  get(task) {
    return this.outputs[task];
  }
  has(task) {
    return Object.prototype.hasOwnProperty.call(this.outputs, task);
  }
  /** The output of `task`, checked against a JSON Schema: a missing input or a mismatch is Fatal. */
  parse(task, schema) {
    if (!this.has(task)) throw new Fatal(`no input from task \`${task}\``);
    const value = this.outputs[task];
    const problem = check(schema, value);
    if (problem) {
      throw new Fatal(`input from task \`${task}\`${problem.path ? ` at \`${problem.path}\`` : ''}: ${problem.message}`);
    }
    return value;
  }
  entries() {
    return Object.entries(this.outputs);
  }
  get size() {
    return Object.keys(this.outputs).length;
  }
}

/**
 * The whole JSON-in, JSON-out path, shared by `exportTask` and the test
 * harness, so that tests exercise what dagr calls.
 */
export function runJson(spec, ctx, paramsText, inputsText) {
  let params;
  try {
    params = JSON.parse(paramsText);
  } catch (e) {
    throw new Fatal(`params are not JSON: ${e.message}`);
  }
  if (spec.paramsSchema !== undefined) {
    const problem = check(spec.paramsSchema, params);
    if (problem) {
      throw new Fatal(problem.path ? `invalid params at \`${problem.path}\`: ${problem.message}` : `invalid params: ${problem.message}`);
    }
  }
  let upstream;
  try {
    upstream = JSON.parse(inputsText);
  } catch (e) {
    throw new Fatal(`inputs are not JSON: ${e.message}`);
  }
  if (!upstream || typeof upstream !== 'object' || Array.isArray(upstream)) throw new Fatal('inputs are not a JSON object');
  const output = spec.run(Object.freeze({ ...ctx }), params, new Inputs(upstream));
  // An async `run` (say, one that awaits `fetch`): StarlingMonkey runs its
  // event loop until the promise that the export returns settles.
  if (output && typeof output.then === 'function') return output.then(serialise);
  return serialise(output);
}

function serialise(output) {
  try {
    return JSON.stringify(output === undefined ? null : output);
  } catch (e) {
    throw new Fatal(`cannot serialise the output: ${e.message}`);
  }
}

/**
 * A thrown `Retryable` or `Fatal` as the WIT task-error; anything else is
 * said in JavaScript's words on stderr and rethrown, which traps.
 */
function witError(e) {
  if (e instanceof TaskError) {
    throw { tag: e.retryable ? 'retryable' : 'fatal', val: e.message };
  }
  // SpiderMonkey's stack has no message line.
  const what = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  const stack = e instanceof Error && e.stack ? `\n${e.stack.trimEnd().replace(/^/gm, '    at ')}` : '';
  console.error(`Uncaught ${what}${stack}`);
  throw e;
}

/**
 * The component's `dagr:plugin/task` export for `spec`, given the WIT host
 * imports (`import * as host from 'dagr:plugin/host@0.1.0'`). A thrown
 * `Retryable` or `Fatal` becomes the WIT task-error; anything else traps the
 * attempt, with its message and stack in the attempt's log.
 */
export function exportTask(spec, witHost) {
  const task = defineTask(spec);
  setHost({
    log: (level, message) => witHost.log(level, message),
    progress: (percent, message) => witHost.progress(percent, message),
    cancelled: () => witHost.cancelled(),
    secret: (name) => witHost.secret(name),
    grade: () => witHost.grade(),
  });
  return {
    describe() {
      return {
        name: task.name,
        version: task.version,
        description: task.description || '',
        paramsSchema: task.paramsSchema === undefined ? undefined : JSON.stringify(task.paramsSchema),
      };
    },
    run(ctx, params, inputs) {
      try {
        const output = runJson(task, ctx, params, inputs);
        return output && typeof output.then === 'function' ? output.catch(witError) : output;
      } catch (e) {
        return witError(e);
      }
    },
  };
}
