"""A native test harness: run a task with pytest, no wasm needed.

`TestRun` plays the host. It goes through the same JSON path as the
component's glue (params text -> your `Params` -> `run` -> output text),
records logs and progress, and serves secrets, cancellation and a scratch
directory::

    from dagr_sdk.testing import TestRun

    def test_greets():
        outcome = TestRun().run(Greet, {"name": "Ada", "shout": True})
        assert outcome.output == {"greeting": "HELLO, ADA!"}
        assert outcome.logged("greeting Ada")
"""

import dataclasses
import json
from typing import Any, Optional

from . import Context, Fatal, TaskError, _host, run_json


@dataclasses.dataclass
class Outcome:
    """What a `TestRun` produced."""

    output: Any = None
    error: Optional[TaskError] = None
    logs: list = dataclasses.field(default_factory=list)  # [(level, message)]
    progress: list = dataclasses.field(default_factory=list)  # [(percent, message)]

    @property
    def ok(self) -> bool:
        return self.error is None

    def logged(self, needle: str) -> bool:
        """Whether any log line contains `needle`."""
        return any(needle in message for _, message in self.logs)


class TestRun:
    """One simulated attempt."""

    __test__ = False  # not a pytest test class

    def __init__(self):
        self._context = Context()
        self._inputs = {}
        self._secrets = {}
        self._cancel_after = None
        self._scratch = None
        self._grade = 0
        self._http = None

    def context(self, **fields) -> "TestRun":
        """Changes fields of the context (tenant, workflow, run_id, task, …)."""
        self._context = dataclasses.replace(self._context, **fields)
        return self

    def attempt(self, attempt: int) -> "TestRun":
        return self.context(attempt=attempt)

    def input(self, task: str, output) -> "TestRun":
        """Adds the output of an upstream task."""
        self._inputs[task] = output
        return self

    def secret(self, name: str, value: str) -> "TestRun":
        self._secrets[name] = value
        return self

    def cancelled(self) -> "TestRun":
        """`cancelled()` is true from the start."""
        return self.cancel_after(0)

    def cancel_after(self, calls: int) -> "TestRun":
        """`cancelled()` is false `calls` times, then true."""
        self._cancel_after = calls
        return self

    def grade(self, grade: int) -> "TestRun":
        """The grade `grade()` returns (default 0)."""
        self._grade = grade
        return self

    def scratch(self, path) -> "TestRun":
        """The directory `scratch_dir()` returns (e.g. pytest's `tmp_path`)."""
        self._scratch = path
        return self

    def http(self, handler) -> "TestRun":
        """Answers the task's `dagr_sdk.http` requests with `handler`, a
        callable taking an `http.Request` and returning an `http.Response`
        (or raising `http.HttpError`). Without one, requests go out for real."""
        self._http = handler
        return self

    def run(self, task_cls, params=None) -> Outcome:
        """Runs the task with these params (any JSON-serialisable value)."""
        return self.run_raw(task_cls, json.dumps({} if params is None else params))

    def run_raw(self, task_cls, params: str) -> Outcome:
        """Runs the task with params given as JSON text, exactly as dagr passes them."""
        host = _host.TestHost(self._secrets, self._cancel_after, self._scratch, self._grade, self._http)
        previous, _host.current = _host.current, host
        outcome = Outcome()
        try:
            text = run_json(task_cls, self._context, params, json.dumps(self._inputs))
            outcome.output = json.loads(text)
        except TaskError as e:
            outcome.error = e
        finally:
            _host.current = previous
        outcome.logs = host.logs
        outcome.progress = host.progress
        return outcome


__all__ = ["Outcome", "TestRun", "Fatal"]
