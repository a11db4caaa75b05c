"""The hostile cases of plugins/testing, in Python: a task that misbehaves
the way its `case` param says. The test suite (tests/all/polyglot.rs) checks
that dagr contains each one exactly as it contains the Rust components."""

import os

import dagr_sdk as dagr
from dagr_sdk import http


def escape(params):
    """Tries to read and list outside the scratch directory."""
    read, refused = [], []
    for path in ["/etc/passwd", "../../../../etc/passwd", "/proc/self/environ", params.get("host_file", "/etc/hostname")]:
        try:
            with open(path) as f:
                f.read(16)
            read.append(path)
        except OSError as e:
            refused.append(f"{path}: {type(e).__name__}")
    try:
        listed = os.listdir("/")
    except OSError as e:
        listed = f"{type(e).__name__}"
    with open(os.path.join(dagr.scratch_dir(), "mine.txt"), "w") as f:
        f.write("inside")
    return {"read": read, "refused": refused, "root": listed, "env": dict(os.environ)}


def network(params):
    """Tries to reach a server with no allowlist, through every door Python
    has: `dagr_sdk.http` (wasi:http, which dagr's allowlist guards) and raw
    sockets (componentize-py's CPython has no `socket` module, so no
    urllib or DNS either; were there one, dagr refuses wasi:sockets)."""
    outcome = {}
    try:
        response = http.get(params["url"], timeout=5)
        outcome["http"] = {"ok": True, "status": response.status}
    except http.HttpError as e:
        outcome["http"] = {"ok": False, "code": e.code, "error": str(e)}
    try:
        import socket
    except ImportError as e:
        outcome["connected"] = False
        outcome["error"] = f"{type(e).__name__}: {e}"
        return outcome
    try:
        socket.create_connection((params["host"], params["port"]), timeout=2).close()
        outcome["connected"] = True
    except Exception as e:  # noqa: BLE001 - any refusal will do, it is reported
        outcome["connected"] = False
        outcome["error"] = f"{type(e).__name__}: {e}"
    return outcome


def fetch(params):
    """A well-behaved request, to a host on the allowlist: GET a JSON
    document, POST a JSON body, and a body larger than `max_bytes`."""
    got = http.get(params["url"] + "/json", headers={"accept": "application/json"})
    echoed = http.post(params["url"] + "/echo", body={"from": "python"}, headers={"x-sdk": "dagr-python"})
    try:
        http.get(params["url"] + "/bytes/5000", max_bytes=1000)
        too_big = None
    except http.HttpError as e:
        too_big = e.code
    return {
        "status": got.status,
        "header": got.headers.get("x-test"),
        "json": got.json(),
        "echo": echoed.json(),
        "too_big": too_big,
    }


def recurse(n):
    return recurse(n + 1) + 1


class Hostile(dagr.Task):
    name = "hostile-py"
    version = "0.1.0"
    description = "Misbehaves on purpose (tests only)."

    def run(self, ctx, params, inputs):
        case = params["case"]
        if case == "iloop":
            while True:
                pass
        if case == "membomb":
            hoard = []
            while True:
                hoard.append(bytearray(8 << 20))
        if case == "escape":
            return escape(params)
        if case == "network":
            return network(params)
        if case == "fetch":
            return fetch(params)
        if case == "bigoutput":
            return {"data": "x" * (4 << 20)}
        if case == "biglog":
            for i in range(20_000):
                dagr.info(f"log line {i} " + "y" * 64)
                print(f"stdout line {i}")
            return {"done": True}
        if case == "raise":
            raise ValueError("hostile on purpose")
        if case == "recurse":
            return recurse(0)
        if case == "secret":
            value = dagr.secret("token")
            print(f"the token is {value}")
            return {"token": value}
        raise dagr.Fatal(f"unknown case {case!r}")


Task = dagr.export(Hostile)
