"""Write dagr task types in Python.

A dagr plugin is a WebAssembly component; `componentize-py` builds one from
a Python module (`dagr plugin build` runs it for you). With this package it
is a class with a `run` method and one call to `export`; you never touch the
WIT bindings::

    from dataclasses import dataclass
    import dagr_sdk as dagr

    @dataclass
    class Params:
        name: str
        shout: bool = False

    class Greet(dagr.Task):
        name = "greet"              # lowercase letters, digits and -
        version = "0.1.0"           # a published version is immutable: bump it
        description = "Greets someone."
        Params = Params             # a dataclass: the params' schema and type

        def run(self, ctx, params, inputs):
            if not params.name:
                raise dagr.Fatal("name must not be empty")
            dagr.info(f"greeting {params.name} (attempt {ctx.attempt})")
            greeting = f"Hello, {params.name}!"
            return {"greeting": greeting.upper() if params.shout else greeting}

    Task = dagr.export(Greet)       # componentize-py looks for `Task`

What a task can do, as in the Rust SDK:

- typed params (a dataclass; a mismatch is a fatal error naming the field,
  and the same dataclass is the JSON Schema dagr checks workflows against),
  upstream outputs (`inputs`, an `Inputs` mapping);
- log at levels (`trace` … `error`; `print` reaches the log too), report
  `progress`, check `cancelled()`, read a tenant `secret`;
- fail with `Retryable` (dagr retries) or `Fatal` (it does not); any other
  exception traps the attempt, and its traceback is in the attempt's log;
- files in the scratch directory (`/scratch`, also the working directory,
  `scratch_dir()`), clocks, random numbers;
- outgoing HTTP through wasi:http, to the hosts on the task's allowlist
  (`from dagr_sdk import http`; `http.get(url).json()`); componentize-py's
  CPython has no `socket` module, and dagr's sandbox refuses sockets anyway.
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Optional

from . import _host
from . import http  # `dagr.http`, imported with the SDK (see http.py: a component imports nothing later)
from ._params import ParamsError, convert, schema_of

__all__ = [
    "Context",
    "Fatal",
    "Inputs",
    "ParamsError",
    "Retryable",
    "Task",
    "TaskError",
    "cancelled",
    "debug",
    "error",
    "export",
    "grade",
    "http",
    "info",
    "log",
    "progress",
    "run_json",
    "schema_of",
    "scratch_dir",
    "secret",
    "trace",
    "warn",
]

WIT_PACKAGE = "dagr:plugin@0.1.0"


class TaskError(Exception):
    """Why a task failed; raise `Retryable` or `Fatal`."""

    retryable = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = str(message)

    @property
    def is_fatal(self) -> bool:
        return not self.retryable


class Retryable(TaskError):
    """A failure that may pass (a timeout, a 503): dagr retries if the task has retries left."""

    retryable = True


class Fatal(TaskError):
    """A failure that will recur (bad params, a 404): dagr does not retry."""


@dataclasses.dataclass(frozen=True)
class Context:
    """The attempt a task runs in."""

    tenant: str = "default"
    workflow: str = "test"
    run_id: str = "run-1"
    task: str = "task"
    attempt: int = 1  # 1 for the first attempt, 2 for the first retry …
    logical_time: str = "2026-01-01T00:00:00Z"  # RFC 3339, UTC
    idempotency_key: str = "run-1/task"  # the same for every attempt of this task in this run


class Inputs(Mapping):
    """The outputs of upstream tasks, by task name."""

    def __init__(self, outputs: Optional[dict] = None):
        self._outputs = dict(outputs or {})

    def __getitem__(self, task: str):
        return self._outputs[task]

    def __iter__(self):
        return iter(self._outputs)

    def __len__(self):
        return len(self._outputs)

    def parse(self, task: str, tp=Any):
        """The output of upstream task `task` as `tp` (a dataclass, list[...] …).
        A missing input or a mismatched shape is a `Fatal` error naming the task."""
        if task not in self._outputs:
            raise Fatal(f"no input from task `{task}`")
        try:
            return convert(self._outputs[task], tp)
        except ParamsError as e:
            raise Fatal(f"input from task `{task}` {e}") from None


def log(level: str, message: str) -> None:
    """Appends a line to the attempt's log (`level`: trace, debug, info, warn, error)."""
    if level not in _host.LEVELS:
        raise ValueError(f"log level must be one of {', '.join(_host.LEVELS)}, not {level!r}")
    _host.log(level, str(message))


def trace(message: str) -> None:
    log("trace", message)


def debug(message: str) -> None:
    log("debug", message)


def info(message: str) -> None:
    log("info", message)


def warn(message: str) -> None:
    log("warn", message)


def error(message: str) -> None:
    log("error", message)


def progress(percent: int, message: str = "") -> None:
    """Reports progress, 0 to 100 percent, with a short note."""
    _host.progress(max(0, min(100, int(percent))), str(message))


def cancelled() -> bool:
    """Whether the attempt was cancelled; a long task should return early."""
    return _host.cancelled()


def secret(name: str) -> Optional[str]:
    """A secret of the run's tenant, or None. dagr redacts its value from the log."""
    return _host.secret(name)


def grade() -> int:
    """The grade of the run's workflow, 0 (the default) to 3: how urgent its
    work is. A task may pass it on to the systems it calls."""
    return _host.grade()


def scratch_dir() -> str:
    """The attempt's scratch directory (`/scratch` in dagr; empty at the start of every attempt)."""
    return _host.scratch_dir()


class Task:
    """A task type: subclass it, set `name`, `version`, `description` and
    `Params`, and implement `run`."""

    name: str = ""
    version: str = "0.1.0"
    description: str = ""
    # A dataclass: its fields are the params (schema and conversion). None
    # passes the params' JSON value through as it is.
    Params: Any = None
    # Overrides the schema derived from `Params` (a dict), if set.
    params_schema: Optional[dict] = None

    def run(self, ctx: Context, params, inputs: Inputs):
        raise NotImplementedError("a dagr task implements run(self, ctx, params, inputs)")


def _schema(task_cls) -> Optional[dict]:
    if task_cls.params_schema is not None:
        return task_cls.params_schema
    if task_cls.Params is None:
        return None
    return schema_of(task_cls.Params)


def _to_json(value) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def run_json(task_cls, ctx: Context, params: str, inputs: str) -> str:
    """The whole JSON-in, JSON-out path, shared by the component's glue and
    `dagr_sdk.testing`, so that tests exercise what dagr calls."""
    try:
        value = json.loads(params)
    except ValueError as e:
        raise Fatal(f"params are not JSON: {e}") from None
    if task_cls.Params is not None:
        try:
            value = convert(value, task_cls.Params)
        except ParamsError as e:
            raise Fatal(f"invalid params {e}" if e.path else f"invalid params: {e}") from None
    try:
        upstream = json.loads(inputs)
    except ValueError as e:
        raise Fatal(f"inputs are not JSON: {e}") from None
    if not isinstance(upstream, dict):
        raise Fatal("inputs are not a JSON object")
    output = task_cls().run(ctx, value, Inputs(upstream))
    try:
        return json.dumps(output, default=_to_json, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise Fatal(f"cannot serialise the output: {e}") from None


def export(task_cls):
    """The class componentize-py exports as `dagr:plugin/task`: assign it to
    `Task` in the app module. Natively it returns `task_cls` unchanged."""
    if not _host.IN_WASM:
        return task_cls
    from componentize_py_types import Err
    from wit_world import exports
    from wit_world.imports import dagr_plugin_types as wit

    class _Export(exports.Task):
        def describe(self):
            schema = _schema(task_cls)
            return wit.PluginInfo(
                name=task_cls.name,
                version=task_cls.version,
                description=task_cls.description,
                params_schema=None if schema is None else json.dumps(schema),
            )

        def run(self, ctx, params, inputs):
            context = Context(
                tenant=ctx.tenant,
                workflow=ctx.workflow,
                run_id=ctx.run_id,
                task=ctx.task,
                attempt=ctx.attempt,
                logical_time=ctx.logical_time,
                idempotency_key=ctx.idempotency_key,
            )
            try:
                return run_json(task_cls, context, params, inputs)
            except Retryable as e:
                raise Err(wit.TaskError_Retryable(e.message)) from None
            except Fatal as e:
                raise Err(wit.TaskError_Fatal(e.message)) from None

    return _Export
