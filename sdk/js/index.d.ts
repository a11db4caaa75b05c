// Types of @dagr/sdk. They mirror wit/plugin.wit (dagr:plugin@0.1.0); the
// test suite regenerates the WIT's own TypeScript types with `jco types`
// and checks them against contract/ (see sdk/js/README.md).

/** The WIT package this SDK implements. */
export const WIT_PACKAGE: 'dagr:plugin@0.1.0';

/** Severity of a log line (the WIT `level`). */
export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** Everything a task knows about the attempt it is running in (the WIT `task-context`). */
export interface Context {
  readonly tenant: string;
  /** The workflow's name; ad-hoc jobs carry the job's generated name. */
  readonly workflow: string;
  readonly runId: string;
  /** The task's name within the workflow. */
  readonly task: string;
  /** 1 for the first attempt, 2 for the first retry, and so on. */
  readonly attempt: number;
  /** The run's logical time, RFC 3339 in UTC. */
  readonly logicalTime: string;
  /** The same for every attempt of this task in this run: make side effects idempotent with it. */
  readonly idempotencyKey: string;
}

/** A JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The subset of JSON Schema that the SDK checks (dagr itself checks full JSON Schema at apply). */
export interface JsonSchema {
  type?: 'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object' | Array<'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object'>;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean | JsonSchema;
  items?: JsonSchema;
  enum?: Json[];
  const?: Json;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  anyOf?: JsonSchema[];
  description?: string;
  default?: Json;
  [keyword: string]: unknown;
}

/** The outputs of upstream tasks, by task name. */
export class Inputs {
  constructor(outputs?: Record<string, Json>);
  readonly outputs: Record<string, Json>;
  get(task: string): Json | undefined;
  has(task: string): boolean;
  /** The output of `task`, checked against `schema`: a missing input or a mismatch throws Fatal. */
  parse<T = Json>(task: string, schema?: JsonSchema): T;
  entries(): Array<[string, Json]>;
  readonly size: number;
}

/** A task type. `run` may be async (return a Promise), e.g. to await `fetch`. */
export interface TaskSpec<P = any, O = unknown> {
  /** Lowercase letters, digits and -, starting with a letter. */
  name: string;
  /** A semantic version; a published version is immutable. */
  version: string;
  description?: string;
  /** Checked before `run` and returned by `describe`, so dagr checks workflows against it too. */
  paramsSchema?: JsonSchema;
  run(ctx: Context, params: P, inputs: Inputs): O | Promise<O>;
}

export function defineTask<P = any, O = unknown>(spec: TaskSpec<P, O>): Readonly<Required<Omit<TaskSpec<P, O>, 'paramsSchema'>>> & TaskSpec<P, O>;

/** Why a task failed. */
export class TaskError extends Error {
  constructor(message: string, retryable?: boolean);
  readonly retryable: boolean;
  readonly isFatal: boolean;
}
/** A failure that may pass (a timeout, a 503): dagr retries if the task has retries left. */
export class Retryable extends TaskError {
  constructor(message: string);
}
/** A failure that will recur (bad params, a 404): dagr does not retry. */
export class Fatal extends TaskError {
  constructor(message: string);
}

export function log(level: Level, message: string): void;
export function trace(message: string): void;
export function debug(message: string): void;
export function info(message: string): void;
export function warn(message: string): void;
export function error(message: string): void;
/** Reports progress, 0 to 100 percent. */
export function progress(percent: number, message?: string): void;
/** Whether the attempt was cancelled; a long task should return early. */
export function cancelled(): boolean;
/** A secret of the run's tenant, or undefined; dagr redacts its value from the log. */
export function secret(name: string): string | undefined;
/** The grade of the run's workflow, 0 (the default) to 3: how urgent its work is. */
export function grade(): number;

/** Where `value` first does not fit `schema`, or null. */
export function check(schema: JsonSchema | boolean | undefined, value: unknown, path?: string): { path: string; message: string } | null;

/** The JSON-in, JSON-out path shared by `exportTask` and the test harness. */
export function runJson(spec: TaskSpec, ctx: Context, params: string, inputs: string): string | Promise<string>;

/** The WIT host imports (`import * as host from 'dagr:plugin/host@0.1.0'`). */
export interface WitHost {
  log(level: Level, message: string): void;
  progress(percent: number, message: string): void;
  cancelled(): boolean;
  secret(name: string): string | undefined;
  grade(): number;
}

/** The WIT `plugin-info`. */
export interface PluginInfo {
  name: string;
  version: string;
  description: string;
  paramsSchema?: string;
}

/** The component's `dagr:plugin/task` export: `export const task = exportTask(spec, host)`. */
export function exportTask(spec: TaskSpec, host: WitHost): {
  describe(): PluginInfo;
  run(ctx: Context, params: string, inputs: string): string | Promise<string>;
};

/** @internal */
export function setHost(host: unknown): unknown;
