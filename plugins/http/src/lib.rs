//! `http`: one HTTP request through `wasi:http`.
//!
//! The host decides where a task may connect (its allowlist); this plugin
//! only builds the request, sends it and turns the response into JSON.

use std::collections::BTreeMap;

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, debug, json};
use serde::{Deserialize, Serialize};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme};
use wasip2::io::streams::StreamError;

pub struct Http;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default = "default_method")]
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// A string is sent as is; any other JSON value is sent as JSON.
    #[serde(default)]
    body: Option<Value>,
    /// Acceptable statuses; absent means any 2xx.
    #[serde(default)]
    expect_status: Option<StatusSpec>,
    /// Connect, first-byte and between-bytes timeout, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    /// The largest response body accepted.
    #[serde(default = "default_max_body_bytes")]
    max_body_bytes: usize,
    /// If set, this header carries the attempt's idempotency key, which is
    /// the same for every retry of this task in this run.
    #[serde(default)]
    idempotency_header: Option<String>,
    /// Makes the request a readiness check, for a sensor task: a response
    /// with one of these statuses answers `"ready": true`, any other
    /// `"ready": false` (checked again later) instead of failing.
    #[serde(default)]
    ready_status: Option<StatusSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StatusSpec {
    One(u16),
    Many(Vec<u16>),
}

fn default_method() -> String {
    "GET".into()
}

fn default_timeout_ms() -> u64 {
    30_000
}

fn default_max_body_bytes() -> usize {
    512 * 1024
}

#[derive(Debug, Serialize)]
pub struct Output {
    /// With `ready_status`: whether the status was one of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
}

impl Task for Http {
    type Params = Params;
    type Output = Output;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["url"],
            "properties": {
                "method": {"type": "string"},
                "url": {"type": "string", "pattern": "^https?://"},
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                "body": {},
                "expect_status": {"anyOf": [
                    {"type": "integer", "minimum": 100, "maximum": 599},
                    {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}}
                ]},
                "timeout_ms": {"type": "integer", "minimum": 1},
                "max_body_bytes": {"type": "integer", "minimum": 0},
                "idempotency_header": {"type": "string"},
                "ready_status": {"anyOf": [
                    {"type": "integer", "minimum": 100, "maximum": 599},
                    {"type": "array", "items": {"type": "integer", "minimum": 100, "maximum": 599}}
                ]}
            }
        }))
    }

    fn run(ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Output, TaskError> {
        let url = Url::parse(&params.url)?;
        let headers = Fields::new();
        let mut body = match &params.body {
            None => None,
            Some(Value::String(text)) => Some(text.clone().into_bytes()),
            Some(other) => {
                if !params.headers.keys().any(|k| k.eq_ignore_ascii_case("content-type")) {
                    append(&headers, "content-type", "application/json")?;
                }
                Some(other.to_string().into_bytes())
            }
        };
        for (name, value) in &params.headers {
            append(&headers, name, value)?;
        }
        if let Some(name) = &params.idempotency_header {
            append(&headers, name, &ctx.idempotency_key)?;
        }
        let request = OutgoingRequest::new(headers);
        request
            .set_method(&method(&params.method))
            .map_err(|()| TaskError::fatal(format!("bad method `{}`", params.method)))?;
        request.set_scheme(Some(&url.scheme)).map_err(|()| TaskError::fatal("bad URL scheme"))?;
        request
            .set_authority(Some(&url.authority))
            .map_err(|()| TaskError::fatal(format!("bad host in URL `{}`", params.url)))?;
        request
            .set_path_with_query(Some(&url.path_and_query))
            .map_err(|()| TaskError::fatal(format!("bad path in URL `{}`", params.url)))?;

        let options = RequestOptions::new();
        let timeout = Some(params.timeout_ms.saturating_mul(1_000_000));
        // The host may refuse to honour timeouts; that is not an error.
        let _ = options.set_connect_timeout(timeout);
        let _ = options.set_first_byte_timeout(timeout);
        let _ = options.set_between_bytes_timeout(timeout);

        let outgoing_body = request.body().map_err(|()| TaskError::fatal("cannot open the request body"))?;
        debug!("{} {}", params.method, params.url);
        let pending = outgoing_handler::handle(request, Some(options)).map_err(request_error)?;
        {
            let stream = outgoing_body.write().map_err(|()| TaskError::fatal("cannot write the request body"))?;
            if let Some(bytes) = body.take() {
                for chunk in bytes.chunks(4096) {
                    stream.blocking_write_and_flush(chunk).map_err(|e| stream_error("sending the body", e))?;
                }
            }
        }
        OutgoingBody::finish(outgoing_body, None).map_err(request_error)?;

        let response = loop {
            match pending.get() {
                Some(Ok(Ok(response))) => break response,
                Some(Ok(Err(code))) => return Err(request_error(code)),
                Some(Err(())) => return Err(TaskError::retryable("the response was already taken")),
                None => pending.subscribe().block(),
            }
        };
        let status = response.status();
        let mut headers = BTreeMap::new();
        for (name, value) in response.headers().entries() {
            let value = String::from_utf8_lossy(&value).into_owned();
            headers
                .entry(name)
                .and_modify(|v: &mut String| {
                    v.push_str(", ");
                    v.push_str(&value);
                })
                .or_insert(value);
        }
        let incoming = response.consume().map_err(|()| TaskError::retryable("cannot read the response body"))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming.stream().map_err(|()| TaskError::retryable("cannot read the response body"))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => {
                        bytes.extend_from_slice(&chunk);
                        if bytes.len() > params.max_body_bytes {
                            return Err(TaskError::fatal(format!(
                                "the response body is larger than max_body_bytes ({})",
                                params.max_body_bytes
                            )));
                        }
                    }
                    Err(StreamError::Closed) => break,
                    Err(e) => return Err(stream_error("reading the response", e)),
                }
            }
        }
        let is_json = headers.get("content-type").is_some_and(|t| t.contains("json"));
        let body = match is_json.then(|| serde_json::from_slice::<Value>(&bytes)) {
            Some(Ok(value)) => value,
            _ => Value::String(String::from_utf8_lossy(&bytes).into_owned()),
        };
        let matches = |spec: &StatusSpec| match spec {
            StatusSpec::One(s) => *s == status,
            StatusSpec::Many(list) => list.contains(&status),
        };
        if let Some(ready) = &params.ready_status {
            let ready = matches(ready);
            debug!("{} {} answered {status}: ready {ready}", params.method, params.url);
            return Ok(Output { ready: Some(ready), status, headers, body });
        }
        let expected = match &params.expect_status {
            None => (200..300).contains(&status),
            Some(spec) => matches(spec),
        };
        if !expected {
            let mut snippet = body.to_string();
            if snippet.len() > 200 {
                let mut cut = 200;
                while !snippet.is_char_boundary(cut) {
                    cut -= 1;
                }
                snippet.truncate(cut);
                snippet.push('…');
            }
            let message = format!("{} {} returned status {status}: {snippet}", params.method, params.url);
            // Server trouble and throttling may pass; anything else will not.
            return Err(if status >= 500 || status == 429 || status == 408 {
                TaskError::retryable(message)
            } else {
                TaskError::fatal(message)
            });
        }
        Ok(Output { ready: None, status, headers, body })
    }
}

fn append(headers: &Fields, name: &str, value: &str) -> Result<(), TaskError> {
    headers
        .append(name, value.as_bytes())
        .map_err(|e| TaskError::fatal(format!("header `{name}` is not allowed or invalid: {e:?}")))
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "CONNECT" => Method::Connect,
        "OPTIONS" => Method::Options,
        "TRACE" => Method::Trace,
        "PATCH" => Method::Patch,
        other => Method::Other(other.to_owned()),
    }
}

fn request_error(code: ErrorCode) -> TaskError {
    match code {
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => TaskError::fatal(format!(
            "the request was denied by this task's network policy ({code:?}); the attempt's log says why"
        )),
        ErrorCode::HttpRequestUriInvalid | ErrorCode::HttpRequestMethodInvalid | ErrorCode::HttpProtocolError => {
            TaskError::fatal(format!("the request is invalid: {code:?}"))
        }
        other => TaskError::retryable(format!("the request failed: {other:?}")),
    }
}

fn stream_error(doing: &str, error: StreamError) -> TaskError {
    match error {
        StreamError::Closed => TaskError::retryable(format!("connection closed while {doing}")),
        StreamError::LastOperationFailed(e) => {
            TaskError::retryable(format!("error while {doing}: {}", e.to_debug_string()))
        }
    }
}

/// The parts of an `http(s)://` URL that `wasi:http` wants.
#[derive(Debug)]
struct Url {
    scheme: Scheme,
    authority: String,
    path_and_query: String,
}

impl Url {
    fn parse(url: &str) -> Result<Url, TaskError> {
        let bad = |why: &str| TaskError::fatal(format!("bad url `{url}`: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("it has no scheme (http:// or https://)"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(bad("only http and https are supported")),
        };
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        if authority.is_empty() {
            return Err(bad("it has no host"));
        }
        if authority.contains('@') {
            return Err(bad("credentials in URLs are not supported; use an Authorization header"));
        }
        let tail = tail.split('#').next().unwrap_or("");
        let path_and_query =
            if tail.is_empty() || tail.starts_with('?') { format!("/{tail}") } else { tail.to_owned() };
        Ok(Url { scheme, authority: authority.to_owned(), path_and_query })
    }
}

dagr_sdk::export!(Http);
