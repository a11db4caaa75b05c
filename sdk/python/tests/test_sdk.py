"""The Python SDK's contract, natively: the same behaviours the Rust SDK's tests check."""

import json
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

import dagr_sdk as dagr
from dagr_sdk.testing import TestRun


@dataclass
class Row:
    city: str
    amount: float


@dataclass
class Params:
    name: str
    shout: bool = False
    times: int = 1
    mode: Literal["plain", "fancy"] = "plain"
    rows: list[Row] = field(default_factory=list)
    note: Optional[str] = None


class Greet(dagr.Task):
    name = "greet"
    version = "1.2.3"
    description = "Greets someone."
    Params = Params

    def run(self, ctx, params, inputs):
        if not params.name:
            raise dagr.Fatal("name must not be empty")
        if params.name == "busy":
            raise dagr.Retryable("the service is busy")
        dagr.info(f"greeting {params.name} (attempt {ctx.attempt})")
        dagr.progress(150, "done")
        greeting = f"Hello, {params.name}!" * params.times
        return {"greeting": greeting.upper() if params.shout else greeting, "rows": len(params.rows)}


class Raw(dagr.Task):
    name = "raw"

    def run(self, ctx, params, inputs):
        return {"params": params, "inputs": dict(inputs), "key": ctx.idempotency_key}


def test_typed_params_run_and_log():
    outcome = TestRun().attempt(2).run(Greet, {"name": "Ada", "shout": True, "rows": [{"city": "x", "amount": 1}]})
    assert outcome.ok
    assert outcome.output == {"greeting": "HELLO, ADA!", "rows": 1}
    assert outcome.logged("greeting Ada (attempt 2)")
    assert outcome.logs == [("info", "greeting Ada (attempt 2)")]
    assert outcome.progress == [(100, "done")], "progress above 100 is 100"


def test_param_mismatches_are_fatal_and_name_the_path():
    cases = {
        '{"nam": "typo"}': "invalid params at `nam`: unknown field",
        "{}": "invalid params at `name`: missing field",
        '{"name": 3}': "invalid params at `name`: expected a string, got a number",
        '{"name": "a", "rows": [{"city": "x", "amount": "1"}]}': "at `rows[0].amount`: expected a number",
        '{"name": "a", "mode": "loud"}': "at `mode`: expected one of 'plain', 'fancy'",
        '{"name": "a", "times": true}': "at `times`: expected an integer, got a boolean",
        "[1]": "expected an object, got an array",
        "not json": "params are not JSON",
    }
    for params, message in cases.items():
        outcome = TestRun().run_raw(Greet, params)
        assert outcome.error is not None, params
        assert outcome.error.is_fatal, params
        assert message in outcome.error.message, (params, outcome.error.message)


def test_retryable_and_fatal_errors():
    busy = TestRun().run(Greet, {"name": "busy"})
    assert isinstance(busy.error, dagr.Retryable) and not busy.error.is_fatal
    empty = TestRun().run(Greet, {"name": ""})
    assert isinstance(empty.error, dagr.Fatal) and empty.error.message == "name must not be empty"


def test_the_schema_comes_from_the_dataclass():
    schema = dagr.schema_of(Params)
    assert schema["type"] == "object"
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["rows"] == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "amount": {"type": "number"}},
            "additionalProperties": False,
            "required": ["city", "amount"],
        },
    }
    assert schema["properties"]["mode"] == {"enum": ["plain", "fancy"]}
    assert schema["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    json.dumps(schema)


def test_raw_params_inputs_and_context():
    outcome = TestRun().context(idempotency_key="r/t").input("up", {"n": 1}).run(Raw, [1, 2])
    assert outcome.output == {"params": [1, 2], "inputs": {"up": {"n": 1}}, "key": "r/t"}


def test_inputs_parse_names_the_task():
    @dataclass
    class Count:
        n: int

    inputs = dagr.Inputs({"up": {"n": 2}, "bad": {"n": "x"}})
    assert inputs.parse("up", Count) == Count(n=2)
    with pytest.raises(dagr.Fatal, match="no input from task `gone`"):
        inputs.parse("gone")
    with pytest.raises(dagr.Fatal, match="input from task `bad` at `n`: expected an integer"):
        inputs.parse("bad", Count)


def test_secrets_cancellation_and_scratch(tmp_path):
    class Careful(dagr.Task):
        name = "careful"

        def run(self, ctx, params, inputs):
            with open(f"{dagr.scratch_dir()}/note.txt", "w") as f:
                f.write("hi")
            checks = 0
            while not dagr.cancelled():
                checks += 1
            return {
                "token": dagr.secret("token"),
                "missing": dagr.secret("nope"),
                "grade": dagr.grade(),
                "checks": checks,
            }

    outcome = TestRun().secret("token", "s3cr3t").grade(2).cancel_after(3).scratch(tmp_path).run(Careful)
    assert outcome.output == {"token": "s3cr3t", "missing": None, "grade": 2, "checks": 3}
    assert TestRun().cancel_after(0).scratch(tmp_path).run(Careful).output["grade"] == 0
    assert (tmp_path / "note.txt").read_text() == "hi"


def test_dataclass_outputs_are_serialised():
    @dataclass
    class Out:
        total: float

    class Summ(dagr.Task):
        name = "summ"

        def run(self, ctx, params, inputs):
            return Out(total=1.5)

    assert TestRun().run(Summ).output == {"total": 1.5}


def test_unserialisable_outputs_are_fatal():
    class Bad(dagr.Task):
        name = "bad"

        def run(self, ctx, params, inputs):
            return {"x": object()}

    assert "cannot serialise the output" in TestRun().run(Bad).error.message


def test_log_levels_are_checked():
    with pytest.raises(ValueError, match="log level must be one of"):
        dagr.log("loud", "x")


def test_other_exceptions_propagate():
    class Crash(dagr.Task):
        name = "crash"

        def run(self, ctx, params, inputs):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        TestRun().run(Crash)


def test_export_is_the_class_natively():
    assert dagr.export(Greet) is Greet
