//! Tenancy against a real `dagr serve`: authentication and isolation on
//! every route, tokens kept only as hashes, secrets that never come back
//! out, the runs-per-minute and unfinished-runs limits, admin-only routes,
//! and the CLI verbs.
//!
//! The isolation matrix is generated from `dagr_api::routes()`, the router's
//! own route table: every route is called with no token, a malformed one,
//! an unknown one, a revoked one, another tenant's, and (on writes) a
//! read-only one. Path parameters are filled with real objects of tenant A,
//! so "another tenant's token" really aims at A's things; a route whose
//! parameters the matrix cannot fill fails the test, so a new endpoint
//! cannot slip through unchecked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Answer, Api, Auth, Body, Call, PATIENCE};
use crate::e2e::own_server;
use crate::server::{DagrServer, write_file};
use crate::support::serial;

mod isolation;
mod limits;
mod secrets;

/// The isolation matrix's calls: each names the token it sends.
impl Api {
    async fn send(&self, method: Method, path: &str, token: &str, body: Body) -> Answer {
        self.call(Call { method, path: path.into(), auth: Auth::Token(token), body, tenant_header: None }).await
    }

    /// A request that must answer `want`; returns the JSON body.
    async fn expect(&self, method: Method, path: &str, token: &str, body: Body, want: StatusCode) -> Value {
        let answer = self.send(method.clone(), path, token, body).await;
        assert_eq!(answer.status, want, "{method} {path}: {}", answer.text);
        answer.json()
    }

    async fn wait_run_as(&self, token: &str, id: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let run = self.expect(Method::GET, &format!("/v1/runs/{id}"), token, Body::None, StatusCode::OK).await;
            if matches!(run["state"].as_str(), Some("succeeded" | "failed" | "killed")) {
                return run;
            }
            assert!(Instant::now() < deadline, "run {id} did not finish: {run}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Creates a tenant (with the admin token) and a token of it with `scopes`.
pub(crate) async fn tenant_with_token(client: &Api, admin: &str, name: &str, limits: Value) -> String {
    client
        .expect(
            Method::POST,
            "/v1/tenants",
            admin,
            Body::Json(json!({"name": name, "limits": limits})),
            StatusCode::CREATED,
        )
        .await;
    token_of(client, admin, name, &["read", "write", "admin"]).await.0
}

/// A new token of `tenant`: (token, id).
async fn token_of(client: &Api, admin: &str, tenant: &str, scopes: &[&str]) -> (String, String) {
    let path = format!("/v1/tenants/{tenant}/tokens");
    let body = Body::Json(json!({"scopes": scopes, "label": "test"}));
    let created = client.expect(Method::POST, &path, admin, body, StatusCode::CREATED).await;
    (created["token"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned())
}

/// Uploads one of the test components as the tenant's plugin.
async fn upload(client: &Api, token: &str, path: &str) -> (String, String) {
    let bytes = std::fs::read(path).unwrap();
    let answer = client.send(Method::POST, "/v1/plugins", token, Body::Bytes(bytes)).await;
    assert!(answer.status == StatusCode::CREATED || answer.status == StatusCode::OK, "upload {path}: {}", answer.text);
    let plugin = answer.json();
    (plugin["name"].as_str().unwrap().to_owned(), plugin["version"].as_str().unwrap().to_owned())
}

fn probe_workflow(name: &str) -> String {
    format!("name: {name}\ntasks:\n  - name: t\n    plugin: echo\n")
}
