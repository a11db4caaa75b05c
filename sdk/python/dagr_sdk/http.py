"""Outgoing HTTP: `wasi:http` inside dagr, `urllib` (or a test's stand-in) natively.

dagr lets a task reach only the hosts on its allowlist (`allow_hosts`, empty
by default: no network at all). A request to any other host fails with
`HttpError` (code `HTTP-request-denied`) and dagr logs why::

    from dagr_sdk import http

    response = http.get("https://api.example.org/v1/items", headers={"accept": "application/json"})
    if response.status == 503:
        raise dagr.Retryable("the API is busy")
    items = response.json()

Requests are synchronous: `request` returns once the whole body has arrived
(at most `max_bytes`). Timeouts are in seconds and cover connecting, the
first byte of the response, and any pause between two bytes of it.
"""

import json as _json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

from . import _host

if _host.IN_WASM:
    # At the top, not where they are used: a component can import only what
    # componentize-py's pre-initialisation imported (its files are not
    # there at run time).
    from componentize_py_types import Err
    from wit_world.imports import outgoing_handler, streams
    from wit_world.imports import wasi_http_types as t

__all__ = ["HttpError", "Request", "Response", "delete", "get", "post", "put", "request"]

# The largest response body `request` reads unless told otherwise.
DEFAULT_MAX_BYTES = 16 << 20
DEFAULT_TIMEOUT = 30.0
_CHUNK = 4096  # wasi:io's blocking write takes at most 4096 bytes at a time


class HttpError(Exception):
    """A request that got no response: denied by the allowlist, a refused
    connection, a timeout, a malformed URL, a body over `max_bytes`. `code`
    names the case (wasi:http's error code, e.g. `HTTP-request-denied`,
    `connection-refused`, `connection-timeout`)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message


@dataclass
class Request:
    """What a task asked for (handed to a native test's stand-in)."""

    method: str
    url: str
    headers: dict = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Response:
    """A response, with its whole body. Header names are lowercase."""

    status: int
    headers: dict = field(default_factory=dict)
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def text(self, encoding: str = "utf-8") -> str:
        return self.body.decode(encoding, errors="replace")

    def json(self) -> Any:
        return _json.loads(self.body)


def request(
    method: str,
    url: str,
    headers: Optional[Mapping[str, str]] = None,
    body: Any = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Response:
    """Sends a request and reads the whole response. `body` is bytes, text,
    or any other JSON-serialisable value (sent as JSON, with a
    `content-type: application/json` unless `headers` names one)."""
    headers = {str(k).lower(): str(v) for k, v in (headers or {}).items()}
    if body is None:
        data = b""
    elif isinstance(body, (bytes, bytearray)):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = _json.dumps(body).encode()
        headers.setdefault("content-type", "application/json")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError("HTTP-request-URI-invalid", f"cannot request {url!r}: not an absolute http(s) URL")
    req = Request(method.upper(), url, headers, data)
    if _host.IN_WASM:
        return _send_wasi(req, parts, timeout, max_bytes)
    return _send_native(req, timeout, max_bytes)


def get(url: str, **kwargs) -> Response:
    return request("GET", url, **kwargs)


def post(url: str, body: Any = None, **kwargs) -> Response:
    return request("POST", url, body=body, **kwargs)


def put(url: str, body: Any = None, **kwargs) -> Response:
    return request("PUT", url, body=body, **kwargs)


def delete(url: str, **kwargs) -> Response:
    return request("DELETE", url, **kwargs)


def _too_big(max_bytes: int) -> HttpError:
    return HttpError("HTTP-response-body-size", f"the response body is larger than max_bytes ({max_bytes} bytes)")


def _send_native(req: Request, timeout: float, max_bytes: int) -> Response:
    current = _host.current
    if current is not None and current.http is not None:
        response = current.http(req)
        if not isinstance(response, Response):
            raise TypeError(f"the test's HTTP stand-in returned {type(response).__name__}, not http.Response")
        return response
    import urllib.error
    import urllib.request

    native = urllib.request.Request(req.url, data=req.body or None, headers=req.headers, method=req.method)
    try:
        with urllib.request.urlopen(native, timeout=timeout) as answer:
            status, headers = answer.status, answer.headers
            body = answer.read(max_bytes + 1)
    except urllib.error.HTTPError as answer:
        status, headers = answer.code, answer.headers
        body = answer.read(max_bytes + 1)
    except (urllib.error.URLError, OSError) as e:
        raise HttpError("connection-refused", f"cannot reach {req.url}: {e}") from None
    if len(body) > max_bytes:
        raise _too_big(max_bytes)
    return Response(status, {k.lower(): v for k, v in headers.items()}, body)


def _error_code(code) -> str:
    # wasi:http's error-code variant: `ErrorCode_HttpRequestDenied` -> `HTTP-request-denied`.
    name = type(code).__name__.removeprefix("ErrorCode_")
    words, word = [], ""
    for ch in name:
        if ch.isupper() and word:
            words.append(word)
            word = ""
        word += ch
    words.append(word)
    text = "-".join(w.lower() for w in words if w)
    return text.replace("http-", "HTTP-", 1).replace("-uri-", "-URI-").replace("dns-", "DNS-").replace("tls-", "TLS-")


def _send_wasi(req: Request, parts, timeout: float, max_bytes: int) -> Response:
    methods = {
        "GET": t.Method_Get(),
        "HEAD": t.Method_Head(),
        "POST": t.Method_Post(),
        "PUT": t.Method_Put(),
        "DELETE": t.Method_Delete(),
        "PATCH": t.Method_Patch(),
        "OPTIONS": t.Method_Options(),
    }
    try:
        fields = t.Fields.from_list([(k, v.encode()) for k, v in req.headers.items()])
    except Err as e:
        why = type(e.value).__name__.removeprefix("HeaderError_")
        raise HttpError("header-error", f"the request headers are refused ({why}): {sorted(req.headers)}") from None
    outgoing = t.OutgoingRequest(fields)
    outgoing.set_method(methods.get(req.method, t.Method_Other(req.method)))
    outgoing.set_scheme(t.Scheme_Https() if parts.scheme == "https" else t.Scheme_Http())
    outgoing.set_authority(parts.netloc)
    outgoing.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    options = t.RequestOptions()
    nanos = int(timeout * 1e9)
    for set_timeout in (options.set_connect_timeout, options.set_first_byte_timeout, options.set_between_bytes_timeout):
        try:
            set_timeout(nanos)
        except Err:
            pass  # the host does not support this timeout: its own applies

    body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, options)
    except Err as e:
        raise HttpError(_error_code(e.value), f"cannot send {req.method} {req.url}") from None
    with body.write() as out:
        for start in range(0, len(req.body), _CHUNK):
            try:
                out.blocking_write_and_flush(req.body[start : start + _CHUNK])
            except Err:
                break  # the request failed; the future says why
    try:
        t.OutgoingBody.finish(body, None)
    except Err:
        pass  # as above

    with future:
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
    if answer is None or isinstance(answer, Err):
        raise HttpError("internal-error", f"{req.method} {req.url}: the response was lost")
    if isinstance(answer.value, Err):
        raise HttpError(_error_code(answer.value.value), f"{req.method} {req.url} failed")
    with answer.value.value as response:
        status = response.status()
        with response.headers() as fields:
            headers = {}
            for name, value in fields.entries():
                text = value.decode(errors="replace")
                headers[name] = f"{headers[name]}, {text}" if name in headers else text
        incoming = response.consume()
        chunks, size = [], 0
        with incoming.stream() as stream:
            while True:
                try:
                    chunk = stream.blocking_read(65536)
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break
                    raise HttpError("HTTP-response-incomplete", f"{req.method} {req.url}: the body broke off") from None
                size += len(chunk)
                if size > max_bytes:
                    raise _too_big(max_bytes)
                chunks.append(chunk)
        with t.IncomingBody.finish(incoming):
            pass  # the trailers, unread
    return Response(status, headers, b"".join(chunks))
