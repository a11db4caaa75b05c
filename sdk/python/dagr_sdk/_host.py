"""The host functions: dagr's imports inside the component, a stand-in natively.

Inside the component (CPython built for WASI, `sys.platform == "wasi"`) the
calls go to the `dagr:plugin/host` imports that componentize-py generates
(`wit_world`). Natively (pytest) they go to the `TestHost` that
`dagr_sdk.testing.TestRun` installs; outside a test run logs go to stderr,
nothing is cancelled and there are no secrets.
"""

import sys

IN_WASM = sys.platform == "wasi"

LEVELS = ("trace", "debug", "info", "warn", "error")


class TestHost:
    """What a native test run records and serves."""

    def __init__(self, secrets=None, cancel_after=None, scratch=None, grade=0, http=None):
        self.http = http  # a callable(http.Request) -> http.Response, or None for real requests
        self.secrets = dict(secrets or {})
        self.grade = grade
        self.cancel_after = cancel_after
        self.cancel_checks = 0
        self.scratch = scratch
        self.logs = []
        self.progress = []


current = None  # the TestHost of the running native test, if any


if IN_WASM:
    from wit_world.imports import host as _wit
    from wit_world.imports.dagr_plugin_types import Level as _WitLevel

    _WIT_LEVELS = {
        "trace": _WitLevel.TRACE,
        "debug": _WitLevel.DEBUG,
        "info": _WitLevel.INFO,
        "warn": _WitLevel.WARN,
        "error": _WitLevel.ERROR,
    }

    def log(level: str, message: str) -> None:
        _wit.log(_WIT_LEVELS[level], message)

    def progress(percent: int, message: str) -> None:
        _wit.progress(percent, message)

    def cancelled() -> bool:
        return _wit.cancelled()

    def secret(name: str):
        return _wit.secret(name)

    def grade() -> int:
        return _wit.grade()

    def scratch_dir() -> str:
        return "/scratch"

else:

    def log(level: str, message: str) -> None:
        if current is None:
            print(f"[{level}] {message}", file=sys.stderr)
        else:
            current.logs.append((level, message))

    def progress(percent: int, message: str) -> None:
        if current is not None:
            current.progress.append((percent, message))

    def cancelled() -> bool:
        if current is None or current.cancel_after is None:
            return False
        checks = current.cancel_checks
        current.cancel_checks += 1
        return checks >= current.cancel_after

    def secret(name: str):
        return None if current is None else current.secrets.get(name)

    def grade() -> int:
        return 0 if current is None else current.grade

    def scratch_dir() -> str:
        if current is not None and current.scratch is not None:
            return str(current.scratch)
        return "."
