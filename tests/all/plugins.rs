//! Every built-in plugin, run through the runtime: its happy path and its
//! error cases.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dagr_builtins as builtins;
use dagr_runtime::{AttemptContext, AttemptReport, Execution, FailureKind, LogSource, NetworkPolicy, Runtime};
use serde_json::{Value, json};

use crate::support::{
    TestServer, execution, failure, load, log_from, log_text, output_json, run, runtime, runtime_with,
};

/// Asserts that the attempt failed with `kind` and a message containing `needle`.
fn assert_fails(report: &AttemptReport, kind: FailureKind, needle: &str) {
    let failure = failure(report);
    assert_eq!(failure.kind, kind, "{failure}\nlog:\n{}", log_text(report));
    assert!(failure.message.contains(needle), "expected `{needle}` in: {failure}");
}

// ---------------------------------------------------------------------------
// echo

#[tokio::test]
async fn echo_returns_params_and_inputs() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::ECHO_PATH);
    let mut exec = execution(json!({"a": [1, 2], "b": "text"}));
    exec.inputs = json!({"upstream": {"n": 1}}).to_string();
    let report = runtime.execute(&plugin, exec).await;
    assert_eq!(output_json(&report), json!({"params": {"a": [1, 2], "b": "text"}, "inputs": {"upstream": {"n": 1}}}));
}

#[tokio::test]
async fn echo_rejects_params_that_are_not_json() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::ECHO_PATH);
    let exec = Execution::new(AttemptContext::adhoc("test"), "{not json");
    let report = runtime.execute(&plugin, exec).await;
    assert_fails(&report, FailureKind::Fatal, "invalid params");
}

#[tokio::test]
async fn echo_rejects_inputs_that_are_not_an_object() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::ECHO_PATH);
    let mut exec = execution(json!({}));
    exec.inputs = "[1, 2]".into();
    let report = runtime.execute(&plugin, exec).await;
    assert_fails(&report, FailureKind::Fatal, "inputs are not a JSON object");
}

// ---------------------------------------------------------------------------
// fail

async fn fail_attempt(runtime: &Runtime, params: Value, attempt: u32) -> AttemptReport {
    let plugin = load(runtime, builtins::FAIL_PATH);
    let mut exec = execution(params);
    exec.context.attempt = attempt;
    runtime.execute(&plugin, exec).await
}

#[tokio::test]
async fn fail_is_retryable_by_default() {
    let runtime = runtime();
    let report = fail_attempt(&runtime, json!({"message": "try again"}), 1).await;
    assert_fails(&report, FailureKind::Retryable, "try again (attempt 1)");
}

#[tokio::test]
async fn fail_can_be_fatal() {
    let runtime = runtime();
    let report = fail_attempt(&runtime, json!({"mode": "fatal", "message": "give up"}), 4).await;
    assert_fails(&report, FailureKind::Fatal, "give up (attempt 4)");
}

#[tokio::test]
async fn fail_fails_the_first_n_attempts_then_succeeds() {
    let runtime = runtime();
    let params = json!({"attempts": 2});
    for attempt in [1, 2] {
        let report = fail_attempt(&runtime, params.clone(), attempt).await;
        assert_fails(&report, FailureKind::Retryable, &format!("failed on purpose (attempt {attempt})"));
    }
    let third = fail_attempt(&runtime, params, 3).await;
    assert_eq!(output_json(&third), json!({"succeeded_on_attempt": 3}));
}

#[tokio::test]
async fn fail_rejects_unknown_modes() {
    let runtime = runtime();
    let report = fail_attempt(&runtime, json!({"mode": "sometimes"}), 1).await;
    assert_fails(&report, FailureKind::Fatal, "mode");
}

// ---------------------------------------------------------------------------
// sleep

#[tokio::test]
async fn sleep_sleeps() {
    let runtime = runtime();
    let report = run(&runtime, builtins::SLEEP_PATH, json!({"ms": 120})).await;
    let slept = output_json(&report)["slept_ms"].as_u64().unwrap();
    assert!(slept >= 120, "slept {slept} ms");
    assert!(report.elapsed >= Duration::from_millis(120));
}

#[tokio::test]
async fn sleep_stops_early_when_cancelled() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::SLEEP_PATH);
    let exec = execution(json!({"ms": 60_000}));
    let cancel = exec.cancel.clone();
    let attempt = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.execute(&plugin, exec).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    cancel.cancel();
    let report = attempt.await.unwrap();
    // The plugin noticed `cancelled()` and returned by itself.
    assert_fails(&report, FailureKind::Cancelled, "stopped by itself: cancelled after");
    assert!(report.elapsed < Duration::from_secs(60));
}

#[tokio::test]
async fn sleep_requires_ms() {
    let runtime = runtime();
    let report = run(&runtime, builtins::SLEEP_PATH, json!({"seconds": 1})).await;
    assert_fails(&report, FailureKind::Fatal, "invalid params");
}

// ---------------------------------------------------------------------------
// fib

#[tokio::test]
async fn fib_computes() {
    let runtime = runtime();
    let report = run(&runtime, builtins::FIB_PATH, json!({"n": 20})).await;
    assert_eq!(output_json(&report), json!({"n": 20, "value": 6765}));
}

#[tokio::test]
async fn fib_refuses_huge_n() {
    let runtime = runtime();
    let report = run(&runtime, builtins::FIB_PATH, json!({"n": 46})).await;
    assert_fails(&report, FailureKind::Fatal, "n = 46 is above the maximum of 45");
}

// ---------------------------------------------------------------------------
// http, against a local server that the allowlist names by address

const IDEMPOTENCY_KEY: &str = "run-7/fetch";

async fn http(server: &TestServer, params: Value) -> AttemptReport {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::HTTP_PATH);
    let mut exec = execution(params);
    exec.context.idempotency_key = IDEMPOTENCY_KEY.into();
    exec.network = NetworkPolicy::allow([server.host()]).unwrap();
    runtime.execute(&plugin, exec).await
}

#[tokio::test]
async fn http_get_parses_a_json_response() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": server.url("/json")})).await;
    let output = output_json(&report);
    assert_eq!(output["status"], 200);
    assert_eq!(output["body"], json!({"hello": "world", "n": 42}));
    assert_eq!(output["headers"]["x-test"], "yes");
    assert!(output["headers"]["content-type"].as_str().unwrap().contains("application/json"));
}

#[tokio::test]
async fn http_post_sends_a_json_body_and_headers() {
    let server = TestServer::start().await;
    let report = http(
        &server,
        json!({
            "method": "POST",
            "url": server.url("/echo"),
            "headers": {"x-custom": "value-1"},
            "body": {"rows": [1, 2, 3]},
            "idempotency_header": "x-idempotency-key",
        }),
    )
    .await;
    let echoed = &output_json(&report)["body"];
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["content_type"], "application/json");
    assert_eq!(echoed["body"], json!({"rows": [1, 2, 3]}));
    assert_eq!(echoed["headers"]["x-custom"], "value-1");
    assert_eq!(echoed["headers"]["x-idempotency-key"], IDEMPOTENCY_KEY);
}

#[tokio::test]
async fn http_expect_status_accepts_a_listed_status() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": server.url("/status/404"), "expect_status": [200, 404]})).await;
    let output = output_json(&report);
    assert_eq!(output["status"], 404);
    assert_eq!(output["body"], "status 404 on purpose");
}

#[tokio::test]
async fn http_server_error_is_retryable() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": server.url("/status/500")})).await;
    assert_fails(&report, FailureKind::Retryable, "returned status 500");
}

#[tokio::test]
async fn http_not_found_is_fatal() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": server.url("/status/404")})).await;
    assert_fails(&report, FailureKind::Fatal, "returned status 404");
}

#[tokio::test]
async fn http_refuses_a_body_over_max_body_bytes() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": server.url("/bytes/5000"), "max_body_bytes": 1000})).await;
    assert_fails(&report, FailureKind::Fatal, "larger than max_body_bytes (1000)");
    let small = http(&server, json!({"url": server.url("/bytes/500"), "max_body_bytes": 1000})).await;
    assert_eq!(output_json(&small)["body"], "z".repeat(500));
}

#[tokio::test]
async fn http_rejects_a_bad_url() {
    let server = TestServer::start().await;
    let report = http(&server, json!({"url": "ftp://127.0.0.1/file"})).await;
    assert_fails(&report, FailureKind::Fatal, "only http and https are supported");
    assert_eq!(server.requests(), 0);
}

/// An `https` request goes, with TLS, to the address the policy checked:
/// a listener there receives the TLS handshake (it answers none, so the
/// attempt fails with the transport error, and nothing panics).
#[tokio::test]
async fn https_connects_to_the_checked_address_and_speaks_tls() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hello = tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 3];
        stream.read_exact(&mut first).await.unwrap();
        first
    });
    let runtime = runtime();
    let plugin = load(&runtime, builtins::HTTP_PATH);
    let mut exec = execution(json!({"url": format!("https://127.0.0.1:{port}/secure")}));
    exec.network = NetworkPolicy::allow([format!("127.0.0.1:{port}")]).unwrap();
    let report = runtime.execute(&plugin, exec).await;
    let first = tokio::time::timeout(Duration::from_secs(10), hello).await.unwrap().unwrap();
    assert_eq!(first, [0x16, 0x03, 0x01], "a TLS handshake record (ClientHello) reached the listener");
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Retryable, "{failure}\nlog:\n{}", log_text(&report));
}

/// A TLS server on loopback with a certificate for 127.0.0.1 signed by
/// nobody the public roots know; it answers every request with a small JSON
/// body. Returns its port and the certificate (PEM) to trust.
async fn tls_server() -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rcgen::CertifiedKey { cert, key_pair } = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust the certificate gives up here.
                let Ok(mut tls) = acceptor.accept(stream).await else { return };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"tls":true}"#;
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, cert.pem())
}

#[tokio::test]
async fn https_trusts_the_operator_s_extra_ca_file_and_only_then() {
    let (port, pem) = tls_server().await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("internal-ca.pem");
    std::fs::write(&ca_file, pem).unwrap();
    let request = || {
        let mut exec = execution(json!({"url": format!("https://127.0.0.1:{port}/internal")}));
        exec.network = NetworkPolicy::allow([format!("127.0.0.1:{port}")]).unwrap();
        exec
    };

    let trusting = runtime_with(|c| c.extra_ca_file = Some(ca_file.clone()));
    let plugin = load(&trusting, builtins::HTTP_PATH);
    let report = trusting.execute(&plugin, request()).await;
    let output = output_json(&report);
    assert_eq!(output["status"], 200, "{output}");
    assert_eq!(output["body"], json!({"tls": true}));

    // The same server is a stranger to a runtime with the public roots only.
    let plain = runtime();
    let plugin = load(&plain, builtins::HTTP_PATH);
    let report = plain.execute(&plugin, request()).await;
    assert_eq!(failure(&report).kind, FailureKind::Retryable, "log:\n{}", log_text(&report));
}

#[test]
fn an_unusable_extra_ca_file_stops_the_runtime_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "just text, no certificate\n").unwrap();
    for (path, needle) in [(&missing, "cannot read"), (&not_pem, "holds no PEM certificate")] {
        let mut config = crate::support::test_config();
        config.extra_ca_file = Some(path.clone());
        let Err(error) = Runtime::new(config) else { panic!("{} was accepted", path.display()) };
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains(needle), "{message}");
    }
}

// ---------------------------------------------------------------------------
// transform

async fn transform(params: Value, inputs: Value) -> AttemptReport {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::TRANSFORM_PATH);
    let mut exec = execution(params);
    exec.inputs = inputs.to_string();
    runtime.execute(&plugin, exec).await
}

#[tokio::test]
async fn transform_reshapes_inputs() {
    let inputs = json!({"extract": {"rows": [{"price": 2}, {"price": 3.5}]}});
    let report = transform(json!({"filter": ".inputs.extract.rows | map(.price) | add"}), inputs).await;
    assert_eq!(output_json(&report), json!(5.5));
}

#[tokio::test]
async fn transform_returns_all_results_when_asked() {
    let report = transform(json!({"filter": ".vars[] * 2", "vars": [1, 2, 3], "all": true}), json!({})).await;
    assert_eq!(output_json(&report), json!([2, 4, 6]));
}

#[tokio::test]
async fn transform_refuses_several_results_without_all() {
    let report = transform(json!({"filter": ".vars[]", "vars": [1, 2]}), json!({})).await;
    assert_fails(&report, FailureKind::Fatal, "the filter produced 2 results");
}

#[tokio::test]
async fn transform_reports_a_filter_that_does_not_parse() {
    let report = transform(json!({"filter": ".a | ("}), json!({})).await;
    assert_fails(&report, FailureKind::Fatal, "the filter does not parse");
}

#[tokio::test]
async fn transform_reports_an_error_raised_by_the_filter() {
    let report = transform(json!({"filter": "error(\"custom problem\")"}), json!({})).await;
    assert_fails(&report, FailureKind::Fatal, "custom problem");
}

// ---------------------------------------------------------------------------
// script

async fn script(source: &str, secrets: &[(&str, &str)]) -> AttemptReport {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::SCRIPT_PATH);
    let mut exec = execution(json!({"script": source, "vars": {"extra": 1}}));
    exec.inputs = json!({"count": {"rows": 41}}).to_string();
    exec.context.attempt = 2;
    let secrets: HashMap<String, String> = secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    exec.secrets = Some(Arc::new(secrets));
    runtime.execute(&plugin, exec).await
}

#[tokio::test]
async fn script_computes_from_inputs_vars_and_context() {
    let report = script(
        "let n = inputs.count.rows + vars.extra; print(`rows: ${n}`); #{ total: n, big: n > 40, attempt: ctx.attempt }",
        &[],
    )
    .await;
    assert_eq!(output_json(&report), json!({"total": 42, "big": true, "attempt": 2}));
    assert!(log_from(&report, LogSource::Plugin).contains(&"rows: 42"), "{}", log_text(&report));
}

#[tokio::test]
async fn script_reads_secrets_and_the_log_never_shows_them() {
    let report = script(
        "let t = secret(\"token\"); info(`token is ${t}`); #{ length: t.len(), missing: secret(\"nope\") }",
        &[("token", "tok-123456789")],
    )
    .await;
    assert_eq!(output_json(&report), json!({"length": 13, "missing": null}));
    let plugin_log = log_from(&report, LogSource::Plugin);
    assert!(plugin_log.contains(&"token is [REDACTED]"), "{}", log_text(&report));
    assert!(!log_text(&report).contains("tok-123456789"));
}

#[tokio::test]
async fn script_fail_is_fatal() {
    let report = script("if inputs.count.rows < 100 { fail(\"too few rows\") }", &[]).await;
    let failure = failure(&report);
    assert_eq!((failure.kind, failure.message.as_str()), (FailureKind::Fatal, "too few rows"));
}

#[tokio::test]
async fn script_retry_is_retryable() {
    let report = script("retry(\"not ready yet\")", &[]).await;
    let failure = failure(&report);
    assert_eq!((failure.kind, failure.message.as_str()), (FailureKind::Retryable, "not ready yet"));
}

#[tokio::test]
async fn script_syntax_error_says_where() {
    let report = script("let x = ;", &[]).await;
    assert_fails(&report, FailureKind::Fatal, "the script does not parse");
    assert!(failure(&report).message.contains("line 1"), "{}", failure(&report));
}

#[tokio::test]
async fn script_runaway_hits_max_operations() {
    let runtime = runtime();
    let report = run(&runtime, builtins::SCRIPT_PATH, json!({"script": "loop {}", "max_operations": 10000})).await;
    assert_fails(&report, FailureKind::Fatal, "max_operations");
}
