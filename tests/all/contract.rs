//! The API's contract against a real `dagr serve`: Schemathesis (pinned,
//! installed by `scripts/test.sh`) generates requests from `/openapi.json`
//! and runs every check with a tenant's token, with the admin token (acting
//! for a tenant) and with no token. `tests/contract/schemathesis.toml`
//! lists the few answers no schema can predict, each explained; anything
//! else it finds fails the test. A fixed seed and 10 examples per
//! operation keep a run short and repeatable.
//!
//! Beside it, the parts of the contract checked directly: 405 with
//! `Allow`, a required body, the document readable with the admin token,
//! and the security scheme.

use std::path::PathBuf;
use std::process::Command;

use reqwest::StatusCode;
use serde_json::Value;

use crate::server::{DagrServer, client_with_token, output_within};
use crate::support::workspace_root;

/// The `st` executable: `DAGR_SCHEMATHESIS`, or the venv `scripts/test.sh`
/// makes under the target directory; `None` outside CI when neither is
/// there.
fn schemathesis() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("DAGR_SCHEMATHESIS") {
        return Some(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../schemathesis/bin/st");
    if venv.exists() {
        return Some(venv);
    }
    assert!(std::env::var("CI").is_err(), "CI must install Schemathesis (scripts/test.sh sets DAGR_SCHEMATHESIS)");
    eprintln!("Schemathesis is not installed (scripts/test.sh installs it); skipping");
    None
}

#[tokio::test]
async fn schemathesis_finds_nothing_with_any_token() {
    let Some(st) = schemathesis() else {
        return;
    };
    let server = tokio::task::spawn_blocking(DagrServer::start).await.unwrap();
    let (tenant, admin) = (server.token(), server.admin_token());
    let document = client_with_token(&admin).get(server.url("/openapi.json")).send().await.unwrap();
    assert_eq!(document.status(), StatusCode::OK);
    let path = server.data_dir().join("openapi.json");
    std::fs::write(&path, document.bytes().await.unwrap()).unwrap();
    let config = workspace_root().join("tests/contract/schemathesis.toml");
    let runs: [(&str, Vec<String>); 3] = [
        ("a tenant's token", vec![format!("Authorization: Bearer {tenant}")]),
        ("the admin token", vec![format!("Authorization: Bearer {admin}"), "X-Dagr-Tenant: default".into()]),
        ("no token", vec![]),
    ];
    for (who, headers) in runs {
        let mut command = Command::new(&st);
        command
            .arg("--config-file")
            .arg(&config)
            .arg("run")
            .arg(&path)
            .args(["--url", &server.base_url()])
            .args(["--checks", "all", "--max-examples", "10", "--seed", "1", "--workers", "1"])
            .args(["--phases", "examples,coverage,fuzzing", "--no-color"])
            .current_dir(server.data_dir());
        for header in &headers {
            command.args(["--header", header]);
        }
        let out = tokio::task::spawn_blocking(move || output_within(command, std::time::Duration::from_secs(300)))
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "Schemathesis with {who} found problems:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(" passed"), "Schemathesis with {who} ran nothing:\n{text}");
    }
}

#[tokio::test]
async fn the_contract_s_own_promises() {
    let server = tokio::task::spawn_blocking(DagrServer::start).await.unwrap();
    let client = server.client();

    // The document: readable with the admin token, with the bearer scheme,
    // the paged tasks, and the NDJSON log stream.
    let admin = client_with_token(&server.admin_token());
    let doc: Value = admin.get(server.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    assert_eq!(doc["paths"]["/healthz"]["get"]["security"], serde_json::json!([]));
    assert!(doc["paths"]["/v1/runs/{id}/tasks"]["get"].is_object());
    let logs = &doc["paths"]["/v1/runs/{id}/tasks/{task}/logs"]["get"]["responses"]["200"]["content"];
    assert!(logs["application/x-ndjson"].is_object(), "{logs}");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let parameters = op.get("parameters");
            assert!(parameters.is_none_or(Value::is_array), "{method} {path}: parameters {parameters:?}");
        }
    }
    let jobs = &doc["paths"]["/v1/jobs"]["post"]["responses"];
    for code in ["400", "401", "403", "413", "429"] {
        assert!(jobs[code].is_object(), "POST /v1/jobs documents no {code}: {jobs}");
    }

    // An undeclared method: 405 with Allow, with or without a token.
    for http in [client.clone(), reqwest::Client::new()] {
        let answer = http.put(server.url("/v1/runs")).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(answer.headers()["allow"], "GET,HEAD");
    }

    // A required body is required: no token made from nothing.
    let answer = client.post(server.url("/v1/tokens")).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let tokens: Value = client.get(server.url("/v1/tokens")).send().await.unwrap().json().await.unwrap();
    assert_eq!(tokens.as_array().unwrap().len(), 1, "only the first token: {tokens}");

    // A documented parameter is never ignored.
    let answer = client.post(server.url("/v1/jobs?wait_timeout=5s")).json(&serde_json::json!({"plugin": "echo"}));
    assert_eq!(answer.send().await.unwrap().status(), StatusCode::BAD_REQUEST);
    let answer = client.get(server.url("/v1/workflows/x/runs?workflow=y")).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "`workflow` is the path's on this route");
}
