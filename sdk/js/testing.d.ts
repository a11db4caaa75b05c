import type { Context, Json, Level, TaskError, TaskSpec } from './index.js';

export class Outcome {
  output: Json | undefined;
  error: TaskError | undefined;
  logs: Array<[Level, string]>;
  progress: Array<[number, string]>;
  readonly ok: boolean;
  logged(needle: string): boolean;
}

export class TestRun {
  context(fields: Partial<Context>): this;
  attempt(n: number): this;
  input(task: string, output: Json): this;
  secret(name: string, value: string): this;
  grade(grade: number): this;
  cancelled(): this;
  cancelAfterCalls(calls: number): this;
  /** An Outcome, or for an async task a Promise of one. */
  run(task: TaskSpec, params?: Json): Outcome | Promise<Outcome>;
  runRaw(task: TaskSpec, params: string): Outcome | Promise<Outcome>;
}
