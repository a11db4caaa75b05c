"""`dagr_sdk.http` natively: a test's stand-in, real requests to a local
server (urllib), and the errors a task sees."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import dagr_sdk as dagr
from dagr_sdk import http
from dagr_sdk.testing import TestRun


class Fetch(dagr.Task):
    name = "fetch"

    def run(self, ctx, params, inputs):
        response = http.request(params.get("method", "GET"), params["url"], body=params.get("body"),
                                max_bytes=params.get("max_bytes", http.DEFAULT_MAX_BYTES))
        if response.status >= 500:
            raise dagr.Retryable(f"the server said {response.status}")
        return {"status": response.status, "type": response.headers.get("content-type"), "body": response.text()}


def test_a_stand_in_answers_and_sees_the_request():
    seen = []

    def answer(request):
        seen.append(request)
        return http.Response(201, {"content-type": "text/plain"}, b"made")

    outcome = TestRun().http(answer).run(Fetch, {"method": "post", "url": "https://api.example.org/items", "body": {"a": 1}})
    assert outcome.ok, outcome.error
    assert outcome.output == {"status": 201, "type": "text/plain", "body": "made"}
    assert seen[0].method == "POST"
    assert seen[0].headers["content-type"] == "application/json"
    assert json.loads(seen[0].body) == {"a": 1}


def test_a_server_error_becomes_what_the_task_makes_of_it():
    outcome = TestRun().http(lambda _: http.Response(503)).run(Fetch, {"url": "http://example.org/"})
    assert isinstance(outcome.error, dagr.Retryable)


def test_a_url_that_is_not_http_is_refused_before_anything_is_sent():
    with pytest.raises(http.HttpError) as refused:
        http.get("file:///etc/passwd")
    assert refused.value.code == "HTTP-request-URI-invalid"
    assert "file:///etc/passwd" in str(refused.value)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"z" * int(self.path.rsplit("/", 1)[-1]) if self.path.startswith("/bytes/") else b'{"hello": "world"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_without_a_stand_in_requests_go_out_for_real(server):
    outcome = TestRun().run(Fetch, {"url": server + "/json"})
    assert outcome.ok, outcome.error
    assert outcome.output["status"] == 200
    assert json.loads(outcome.output["body"]) == {"hello": "world"}


def test_a_body_over_max_bytes_is_an_error_naming_the_limit(server):
    with pytest.raises(http.HttpError) as too_big:
        http.get(server + "/bytes/5000", max_bytes=1000)
    assert too_big.value.code == "HTTP-response-body-size"
    assert "1000 bytes" in str(too_big.value)


def test_an_unreachable_host_is_an_error_not_a_crash():
    with pytest.raises(http.HttpError) as refused:
        http.get("http://127.0.0.1:9/", timeout=2)
    assert refused.value.code == "connection-refused"


def test_wasi_error_codes_are_named_as_the_wit_names_them():
    class ErrorCode_HttpRequestDenied:
        pass

    class ErrorCode_ConnectionRefused:
        pass

    class ErrorCode_HttpRequestUriInvalid:
        pass

    assert http._error_code(ErrorCode_HttpRequestDenied()) == "HTTP-request-denied"
    assert http._error_code(ErrorCode_ConnectionRefused()) == "connection-refused"
    assert http._error_code(ErrorCode_HttpRequestUriInvalid()) == "HTTP-request-URI-invalid"
