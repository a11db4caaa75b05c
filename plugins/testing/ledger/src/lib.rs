//! Test component: tells a ledger (an HTTP server run by the test) when an
//! execution starts and ends, then works for a while in between.
//!
//! Params: `{"url": "http://127.0.0.1:PORT/ledger", "ms": 200}`. Every report
//! is a POST of `{"event": "start"|"end", "key": idempotency key, "run": …,
//! "task": …, "attempt": N}`. The start is reported before any work, and the
//! task fails (retryable) if the ledger does not answer, so every execution
//! that did any work is in the ledger.

use std::time::{Duration, Instant};

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};
use serde::Deserialize;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};

pub struct Ledger;

#[derive(Debug, Deserialize)]
pub struct Params {
    url: String,
    #[serde(default)]
    ms: u64,
}

fn post(url: &str, body: &Value) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or("the ledger url must be http://")?;
    let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let headers = Fields::new();
    headers.append("content-type", b"application/json").map_err(|e| format!("{e:?}"))?;
    let request = OutgoingRequest::new(headers);
    request.set_method(&Method::Post).map_err(|()| "method")?;
    request.set_scheme(Some(&Scheme::Http)).map_err(|()| "scheme")?;
    request.set_authority(Some(authority)).map_err(|()| "authority")?;
    request.set_path_with_query(Some(&path)).map_err(|()| "path")?;
    let outgoing = request.body().map_err(|()| "body")?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    {
        let stream = outgoing.write().map_err(|()| "write")?;
        stream.blocking_write_and_flush(body.to_string().as_bytes()).map_err(|e| format!("{e:?}"))?;
    }
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))?;
    let response = loop {
        match pending.get() {
            Some(Ok(Ok(r))) => break r,
            Some(Ok(Err(e))) => return Err(format!("{e:?}")),
            Some(Err(())) => return Err("response taken".into()),
            None => pending.subscribe().block(),
        }
    };
    if response.status() / 100 == 2 { Ok(()) } else { Err(format!("ledger answered {}", response.status())) }
}

impl Task for Ledger {
    type Params = Params;
    type Output = Value;

    fn run(ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Value, TaskError> {
        let record = |event: &str| json!({"event": event, "key": ctx.idempotency_key, "run": ctx.run_id, "task": ctx.task, "attempt": ctx.attempt});
        post(&params.url, &record("start")).map_err(|e| TaskError::retryable(format!("ledger: {e}")))?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(params.ms) {
            if dagr_sdk::cancelled() {
                let _ = post(&params.url, &record("cancelled"));
                return Err(TaskError::retryable("cancelled"));
            }
            std::thread::sleep(Duration::from_millis(10).min(Duration::from_millis(params.ms)));
        }
        post(&params.url, &record("end")).map_err(|e| TaskError::retryable(format!("ledger: {e}")))?;
        Ok(json!({"attempt": ctx.attempt}))
    }
}

dagr_sdk::export!(Ledger);
