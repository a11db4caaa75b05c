"""The hostile cases of plugins/testing, in Python: a task that misbehaves
the way its `case` param says. The test suite (tests/all/polyglot.rs) checks
that dagr contains each one exactly as it contains the Rust components."""

import os

import dagr_sdk as dagr


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
    """Tries to reach a server with no allowlist. componentize-py's CPython
    has no `socket` module (and so no urllib, http.client or DNS); if a
    later one has, the connection must still fail: dagr refuses
    wasi:sockets."""
    outcome = {}
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
