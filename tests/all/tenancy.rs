//! Tenancy against a real `dagr serve`: authentication and isolation on
//! every route, tokens kept only as hashes, secrets that never come back
//! out, the runs-per-minute limit, admin-only routes, and the CLI verbs.
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

// The isolation matrix ---------------------------------------------------------------

/// Tenant A's objects, which fill the routes' path parameters.
struct TenantA {
    workflow: String,
    run: String,
    task: String,
    backfill: String,
    secret_name: String,
    secret_value: String,
    /// A's read-only token, whose id stands for "a token of A".
    read_token: String,
    read_token_id: String,
    revoked_token: String,
    admin_token: String,
    plugin: Option<(String, String)>,
    webhook: String,
    alert_rule: String,
}

impl TenantA {
    /// Strings only A's data contains: none may appear in what another
    /// tenant is shown.
    fn markers(&self) -> Vec<&str> {
        let mut markers = vec![
            self.workflow.as_str(),
            &self.run,
            &self.backfill,
            &self.secret_value,
            &self.read_token_id,
            &self.webhook,
            &self.alert_rule,
        ];
        markers.push(self.admin_token.split('_').nth(1).unwrap_or("?"));
        markers
    }
}

/// The value of path parameter `param` of `route`, as an object of A.
fn fill(a: &TenantA, route: &str, param: &str) -> Option<String> {
    let section = route.trim_start_matches("/v1/").split('/').next().unwrap_or("");
    let value = match (section, param) {
        ("workflows", "name") => a.workflow.clone(),
        ("runs", "id") => a.run.clone(),
        ("runs", "task") => a.task.clone(),
        ("backfills", "id") => a.backfill.clone(),
        ("secrets", "name") => a.secret_name.clone(),
        ("tokens", "id") => a.read_token_id.clone(),
        ("tenants", "name") => "iso-a".into(),
        ("tenants", "id") => a.read_token_id.clone(),
        ("plugins", "name") => a.plugin.as_ref()?.0.clone(),
        ("plugins", "version") => a.plugin.as_ref()?.1.clone(),
        ("webhooks", "id") => a.webhook.clone(),
        ("alerts", "id") => a.alert_rule.clone(),
        _ => return None,
    };
    Some(value)
}

/// The path of `route` with A's objects in it; panics for a parameter the
/// matrix does not know.
fn concrete(a: &TenantA, method: &str, route: &str) -> String {
    let mut path = String::new();
    for segment in route.split('/').skip(1) {
        path.push('/');
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(param) => path.push_str(&fill(a, route, param).unwrap_or_else(|| {
                panic!(
                    "the isolation matrix does not know how to fill `{{{param}}}` of {method} {route}: give tenant A \
                     such an object in `isolation_matrix_covers_every_route` and map it in `fill`"
                )
            })),
            None => path.push_str(segment),
        }
    }
    path
}

/// A valid body for the route, so that only authentication can refuse it.
fn body_for(method: &str, route: &str, a: &TenantA, plugin_bytes: &[u8]) -> Body {
    match (method, route) {
        ("GET" | "DELETE", _) => Body::None,
        ("POST", "/v1/workflows") => Body::Text(probe_workflow("iso-probe")),
        ("POST", "/v1/plugins") => Body::Bytes(plugin_bytes.to_vec()),
        ("POST", "/v1/backfills") => {
            Body::Json(json!({"workflow": a.workflow, "from": "2024-01-01", "to": "2024-01-01"}))
        }
        ("POST", "/v1/jobs") => Body::Json(json!({"plugin": "echo"})),
        ("POST", "/v1/webhooks") => Body::Json(json!({"url": "https://hooks.example.org/iso"})),
        ("POST", "/v1/alerts") => Body::Json(json!({"on": ["run.failed"], "channel": {"email": "iso@example.org"}})),
        ("POST", "/v1/tenants") => Body::Json(json!({"name": "iso-new"})),
        ("PATCH", _) => Body::Json(json!({"limits": {"max_concurrent": 3}})),
        ("PUT", "/v1/secrets/{name}") => Body::Json(json!({"value": "someone else's value"})),
        ("POST", r) if r.ends_with("/tasks/{task}/rerun") => Body::Json(json!({"downstream": false})),
        _ => Body::Json(json!({})),
    }
}

fn probe_workflow(name: &str) -> String {
    format!("name: {name}\ntasks:\n  - name: t\n    plugin: echo\n")
}

fn is_admin_only(route: &str) -> bool {
    route == "/v1/tenants" || route.starts_with("/v1/tenants/") || route == "/v1/cluster"
}

/// Routes a read-only token may not call.
fn needs_more_than_read(method: &str, route: &str) -> bool {
    method != "GET" || is_admin_only(route) || route == "/v1/tokens" || route.starts_with("/v1/tokens/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_matrix_covers_every_route() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();

    // Without a token, only the health check answers.
    let health = client
        .call(Call {
            method: Method::GET,
            path: "/healthz".into(),
            auth: Auth::None,
            body: Body::None,
            tenant_header: None,
        })
        .await;
    assert_eq!(health.status, StatusCode::OK, "{}", health.text);

    // Two tenants; A gets an object of every kind.
    let a_token = tenant_with_token(&client, &admin, "iso-a", json!({})).await;
    let b_token = tenant_with_token(&client, &admin, "iso-b", json!({})).await;
    let (read_token, read_token_id) = token_of(&client, &admin, "iso-a", &["read"]).await;
    let (revoked_token, revoked_id) = token_of(&client, &admin, "iso-a", &["read", "write", "admin"]).await;
    let path = format!("/v1/tenants/iso-a/tokens/{revoked_id}");
    client.expect(Method::DELETE, &path, &admin, Body::None, StatusCode::NO_CONTENT).await;

    let workflow = "iso-a-flow".to_owned();
    let definition = format!("name: {workflow}\ntasks:\n  - name: first\n    plugin: echo\n");
    client.expect(Method::POST, "/v1/workflows", &a_token, Body::Text(definition), StatusCode::CREATED).await;
    let path = format!("/v1/workflows/{workflow}/runs");
    let run = client.expect(Method::POST, &path, &a_token, Body::Json(json!({})), StatusCode::CREATED).await;
    let run = run["id"].as_str().unwrap().to_owned();
    let run_before = client.wait_run_as(&a_token, &run).await;
    assert_eq!(run_before["state"], "succeeded", "{run_before}");
    let body = Body::Json(json!({"workflow": workflow, "from": "2024-01-01", "to": "2024-01-02"}));
    let backfill = client.expect(Method::POST, "/v1/backfills", &a_token, body, StatusCode::CREATED).await;
    let backfill = backfill["id"].as_str().unwrap().to_owned();
    let secret_value = format!("a-only-{}", std::process::id());
    let body = Body::Json(json!({"value": secret_value}));
    client.expect(Method::PUT, "/v1/secrets/api-key", &a_token, body, StatusCode::OK).await;

    let routes = dagr_api::routes();
    // A plugin of A's own, where the server takes uploads. The `ledger` test
    // component is not a built-in of `dagr serve`, so A may publish it.
    let plugin_bytes = std::fs::read(dagr_builtins::LEDGER_PATH).unwrap();
    let mut plugin = None;
    if routes.iter().any(|(m, r)| m == "POST" && r == "/v1/plugins") {
        let published = client
            .expect(Method::POST, "/v1/plugins", &a_token, Body::Bytes(plugin_bytes.clone()), StatusCode::CREATED)
            .await;
        plugin =
            Some((published["name"].as_str().unwrap().to_owned(), published["version"].as_str().unwrap().to_owned()));
    }

    let body = Body::Json(json!({"url": "https://hooks.example.org/a-only", "kinds": ["run.*"]}));
    let webhook = client.expect(Method::POST, "/v1/webhooks", &a_token, body, StatusCode::CREATED).await;
    let webhook = webhook["id"].as_str().unwrap().to_owned();
    let body = Body::Json(json!({"on": ["run.failed"], "channel": {"email": "a-only@example.org"}}));
    let alert_rule = client.expect(Method::POST, "/v1/alerts", &a_token, body, StatusCode::CREATED).await;
    let alert_rule = alert_rule["id"].as_str().unwrap().to_owned();

    let a = TenantA {
        workflow,
        run,
        task: "first".into(),
        backfill,
        secret_name: "api-key".into(),
        secret_value,
        read_token,
        read_token_id,
        revoked_token,
        admin_token: a_token.clone(),
        plugin,
        webhook,
        alert_rule,
    };
    let secrets_before = client.expect(Method::GET, "/v1/secrets", &a.admin_token, Body::None, StatusCode::OK).await;
    let webhooks_before = client.expect(Method::GET, "/v1/webhooks", &a.admin_token, Body::None, StatusCode::OK).await;

    let unknown = format!("dagr_zzzzzzzzzzzz_{}", "0".repeat(64));
    let mut checked = BTreeMap::new();
    for (method, route) in &routes {
        if route == "/healthz" {
            continue;
        }
        let path = concrete(&a, method, route);
        let verb = Method::from_bytes(method.as_bytes()).unwrap();
        let body = body_for(method, route, &a, &plugin_bytes);
        let what = format!("{method} {route} ({path})");
        let call =
            |auth| Call { method: verb.clone(), path: path.clone(), auth, body: body.clone(), tenant_header: None };

        let denied = [
            (Auth::None, "missing"),
            (Auth::Raw("Bearer not-a-token"), "malformed"),
            (Auth::Raw("Basic dXNlcjpwYXNz"), "malformed"),
            (Auth::Token(&unknown), "unknown"),
            (Auth::Token(&a.revoked_token), "revoked"),
        ];
        for (auth, word) in denied {
            let answer = client.call(call(auth)).await;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{what} with a {word} token: {}", answer.text);
            let body = answer.json();
            assert_eq!(body["code"], "unauthorized", "{what}: {body}");
            assert!(
                body["message"].as_str().unwrap_or("").contains(word),
                "{what}: the message should say {word}: {body}"
            );
        }

        // Another tenant's token: A's objects do not exist for it.
        let answer = client.call(call(Auth::Token(&b_token))).await;
        if is_admin_only(route) {
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{what} with a tenant token: {}", answer.text);
        } else if answer.status != StatusCode::NOT_FOUND {
            assert!(
                answer.status.is_success(),
                "{what} with another tenant's token: {} {}",
                answer.status,
                answer.text
            );
            for marker in a.markers() {
                assert!(
                    !answer.text.contains(marker),
                    "{what} showed tenant A's `{marker}` to tenant B: {}",
                    answer.text
                );
            }
        }

        // A read-only token on anything more than reading.
        if needs_more_than_read(method, route) {
            let answer = client.call(call(Auth::Token(&a.read_token))).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{what} with a read-only token: {}", answer.text);
            let body = answer.json();
            assert_eq!(body["code"], "forbidden", "{what}: {body}");
            let message = body["message"].as_str().unwrap_or("");
            assert!(message.contains("admin") || message.contains("write"), "{what}: name the scope needed: {body}");
        }
        checked.insert(format!("{method} {route}"), path);
    }
    assert_eq!(checked.len() + 1, routes.len(), "every route but /healthz is in the matrix");

    // A's things are as they were.
    let path = format!("/v1/runs/{}", a.run);
    let run_after = client.expect(Method::GET, &path, &a.admin_token, Body::None, StatusCode::OK).await;
    assert_eq!(run_after["state"], run_before["state"]);
    let path = format!("/v1/workflows/{}", a.workflow);
    client.expect(Method::GET, &path, &a.admin_token, Body::None, StatusCode::OK).await;
    let path = format!("/v1/backfills/{}", a.backfill);
    client.expect(Method::GET, &path, &a.admin_token, Body::None, StatusCode::OK).await;
    let secrets_after = client.expect(Method::GET, "/v1/secrets", &a.admin_token, Body::None, StatusCode::OK).await;
    assert_eq!(secrets_after, secrets_before, "another tenant changed A's secrets");
    let webhooks_after = client.expect(Method::GET, "/v1/webhooks", &a.admin_token, Body::None, StatusCode::OK).await;
    let hooks = |list: &Value| -> Vec<(String, String)> {
        let list = list.as_array().unwrap().iter();
        list.map(|w| (w["id"].as_str().unwrap().to_owned(), w["url"].as_str().unwrap().to_owned())).collect()
    };
    assert_eq!(hooks(&webhooks_after), hooks(&webhooks_before), "another tenant changed A's webhooks");
    let tokens = client.expect(Method::GET, "/v1/tokens", &a.admin_token, Body::None, StatusCode::OK).await;
    let read = tokens.as_array().unwrap().iter().find(|t| t["id"] == a.read_token_id.as_str()).unwrap();
    assert!(read.get("revoked_at").is_none(), "another tenant revoked A's token: {read}");
    let workflows = client.expect(Method::GET, "/v1/workflows", &a.admin_token, Body::None, StatusCode::OK).await;
    let names: Vec<&str> = workflows.as_array().unwrap().iter().filter_map(|w| w["name"].as_str()).collect();
    assert_eq!(names, vec![a.workflow.as_str()], "tenant B's workflows are not A's");
    if let Some((name, _)) = &a.plugin {
        let path = format!("/v1/plugins/{name}");
        client.expect(Method::GET, &path, &a.admin_token, Body::None, StatusCode::OK).await;
    }

    // Tokens are kept as hashes: no token's secret is in the database.
    let mut database = Vec::new();
    for file in ["dagr.db", "dagr.db-wal"] {
        if let Ok(bytes) = std::fs::read(server.data_dir().join(file)) {
            database.extend(bytes);
        }
    }
    let contains = |needle: &str| database.windows(needle.len()).any(|w| w == needle.as_bytes());
    for token in [&admin, &server.token(), &a.admin_token, &b_token, &a.read_token, &a.revoked_token] {
        let (id, secret) = token.strip_prefix("dagr_").and_then(|t| t.split_once('_')).unwrap();
        assert!(contains(id), "token id {id} should be in the database (is this the right file?)");
        assert!(contains(&dagr_api::auth::hash_secret(secret)), "the hash of token {id} should be stored");
        assert!(!contains(secret), "the secret of token {id} is stored in plain text");
    }
}

// Admin-only routes and the admin token acting for a tenant ------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_refuse_tenant_tokens_and_the_admin_token_names_its_tenant() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let own = server.token();

    // The default tenant's token has every scope, and still may not manage tenants.
    for (method, path) in [(Method::GET, "/v1/tenants"), (Method::GET, "/v1/tenants/default")] {
        let answer = client.send(method, path, &own, Body::None).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{path}: {}", answer.text);
        assert!(answer.json()["message"].as_str().unwrap().contains("admin token"), "{}", answer.text);
    }
    let body = Body::Json(json!({"name": "sneaky"}));
    let answer = client.send(Method::POST, "/v1/tenants", &own, body).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.text);

    // The admin token: tenants yes; tenant resources only for a named tenant.
    let tenants = client.expect(Method::GET, "/v1/tenants", &admin, Body::None, StatusCode::OK).await;
    assert!(tenants.as_array().unwrap().iter().any(|t| t["name"] == "default"), "{tenants}");
    let answer = client.send(Method::GET, "/v1/workflows", &admin, Body::None).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
    assert!(answer.text.contains("x-dagr-tenant"), "{}", answer.text);
    let for_default = |method: Method, path: &str, body: Body, tenant: &'static str| Call {
        method,
        path: path.to_owned(),
        auth: Auth::Token(&admin),
        body,
        tenant_header: Some(tenant),
    };
    let answer = client
        .call(for_default(Method::POST, "/v1/workflows", Body::Text(probe_workflow("by-admin")), "default"))
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.text);
    let listed = client.expect(Method::GET, "/v1/workflows", &own, Body::None, StatusCode::OK).await;
    assert!(listed.to_string().contains("by-admin"), "the admin applied for `default`: {listed}");
    let answer = client.call(for_default(Method::GET, "/v1/workflows", Body::None, "nobody")).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
    // A tenant token cannot pick another tenant with the header.
    let answer = client
        .call(Call {
            method: Method::GET,
            path: "/v1/workflows".into(),
            auth: Auth::Token(&own),
            body: Body::None,
            tenant_header: Some("other"),
        })
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{}", answer.text);

    // Limits are checked, and say which field is wrong.
    let body = Body::Json(json!({"name": "bad", "limits": {"allow_hosts": ["http://x/"]}}));
    let error = client.expect(Method::POST, "/v1/tenants", &admin, body, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["location"], "limits.allow_hosts[0]", "{error}");
    let body = Body::Json(json!({"limits": {"runs_per_minute": 0}}));
    let error = client.expect(Method::PATCH, "/v1/tenants/default", &admin, body, StatusCode::BAD_REQUEST).await;
    assert_eq!(error["location"], "limits.runs_per_minute", "{error}");
    let body = Body::Json(json!({"limits": {"max_memory": 1048576, "bogus": 1}}));
    let error = client.expect(Method::PATCH, "/v1/tenants/default", &admin, body, StatusCode::BAD_REQUEST).await;
    assert!(error["message"].as_str().unwrap().contains("bogus"), "{error}");
    // A merge patch: given fields change, null clears, others stay.
    let body = Body::Json(json!({"limits": {"max_memory": 1048576, "max_concurrent": 4}}));
    client.expect(Method::PATCH, "/v1/tenants/default", &admin, body, StatusCode::OK).await;
    let body = Body::Json(json!({"limits": {"max_memory": null}}));
    let tenant = client.expect(Method::PATCH, "/v1/tenants/default", &admin, body, StatusCode::OK).await;
    assert_eq!(tenant["limits"]["max_concurrent"], 4, "{tenant}");
    assert!(tenant["limits"]["max_memory"].is_null(), "{tenant}");

    // Every change is in the tenant's audit, with the token that made it.
    let audit = client.expect(Method::GET, "/v1/audit", &own, Body::None, StatusCode::OK).await;
    let records = audit["records"].as_array().unwrap();
    let admin_id = admin.split('_').nth(1).unwrap();
    let actions: Vec<(&str, &str)> =
        records.iter().map(|r| (r["action"].as_str().unwrap(), r["token_id"].as_str().unwrap())).collect();
    assert!(actions.contains(&("workflow.apply", admin_id)), "{audit:#}");
    assert!(actions.contains(&("tenant.update", admin_id)), "{audit:#}");
}

// Secrets ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_never_comes_back_out_even_when_a_plugin_logs_it() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let token = server.token();
    let value = format!("hunter2-{}-{}", std::process::id(), dagr_api::auth::generate_token().id);

    let set =
        client.expect(Method::PUT, "/v1/secrets/k", &token, Body::Json(json!({"value": value})), StatusCode::OK).await;
    assert_eq!(set["name"], "k");
    let definition = "name: leaky\ntasks:\n  - name: leak\n    plugin: script\n    params:\n      script: 'info(\"the value is \" + secret(\"k\")); secret(\"k\")'\n";
    client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition.into()), StatusCode::CREATED).await;
    let run = client
        .expect(Method::POST, "/v1/workflows/leaky/runs", &token, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let run = run["id"].as_str().unwrap().to_owned();
    let finished = client.wait_run_as(&token, &run).await;
    assert_eq!(finished["state"], "succeeded", "{finished}");

    let logs = client
        .expect(Method::GET, &format!("/v1/runs/{run}/tasks/leak/logs"), &token, Body::None, StatusCode::OK)
        .await;
    assert!(
        logs.as_array().unwrap().iter().any(|l| l["message"] == "the value is [REDACTED]"),
        "the plugin read the secret and its log shows it redacted: {logs:#}"
    );
    let task =
        client.expect(Method::GET, &format!("/v1/runs/{run}/tasks/leak"), &token, Body::None, StatusCode::OK).await;
    assert_eq!(task["output"], "[REDACTED]", "{task:#}");
    let job = client
        .expect(
            Method::POST,
            "/v1/jobs?wait=true",
            &token,
            Body::Json(json!({"plugin": "script", "params": {"script": "info(secret(\"k\")); secret(\"k\")"}})),
            StatusCode::OK,
        )
        .await;
    assert_eq!(job["output"], "[REDACTED]", "{job:#}");
    let job_run = job["run_id"].as_str().unwrap();

    let mut seen = Vec::new();
    for path in [
        "/v1/secrets".to_owned(),
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/tasks/leak"),
        format!("/v1/runs/{run}/tasks/leak/logs"),
        format!("/v1/runs/{run}/tasks/leak/logs?follow=true"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{job_run}"),
        format!("/v1/runs/{job_run}/tasks/script/logs"),
        "/v1/runs".into(),
        "/v1/audit".into(),
    ] {
        let answer = client.send(Method::GET, &path, &token, Body::None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text);
        assert!(!answer.text.contains(&value), "{path} shows the secret: {}", answer.text);
        seen.push(answer.text);
    }
    assert!(seen[0].contains("\"k\""), "the secret is listed by name: {}", seen[0]);
    assert!(seen.last().unwrap().contains("secret.put"), "setting the secret is audited: {}", seen.last().unwrap());
    assert!(!server.log().contains(&value), "the server's own log shows the secret");

    // Another tenant's plugin does not get it.
    let admin = server.admin_token();
    let other = tenant_with_token(&client, &admin, "stranger", json!({})).await;
    let job = client
        .expect(
            Method::POST,
            "/v1/jobs?wait=true",
            &other,
            Body::Json(json!({"plugin": "script", "params": {"script": "let s = secret(\"k\"); if type_of(s) == \"()\" { \"none\" } else { s }"}})),
            StatusCode::OK,
        )
        .await;
    assert_eq!(job["output"], "none", "tenant `stranger` read default's secret: {job:#}");

    let answer = client.send(Method::DELETE, "/v1/secrets/k", &token, Body::None).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.text);
    let answer = client.send(Method::DELETE, "/v1/secrets/k", &token, Body::None).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
}

// Runs per minute -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_per_minute_answers_429_with_retry_after() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let token = tenant_with_token(&client, &admin, "busy", json!({"runs_per_minute": 2})).await;
    client
        .expect(Method::POST, "/v1/workflows", &token, Body::Text(probe_workflow("quick")), StatusCode::CREATED)
        .await;
    client.expect(Method::POST, "/v1/workflows/quick/runs", &token, Body::Json(json!({})), StatusCode::CREATED).await;
    client.expect(Method::POST, "/v1/jobs", &token, Body::Json(json!({"plugin": "echo"})), StatusCode::CREATED).await;

    for (path, body) in [("/v1/workflows/quick/runs", json!({})), ("/v1/jobs", json!({"plugin": "echo"}))] {
        let answer = client.send(Method::POST, path, &token, Body::Json(body)).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{path}: {}", answer.text);
        let body = answer.json();
        assert_eq!(body["code"], "rate_limited", "{body}");
        assert!(body["message"].as_str().unwrap().contains("runs_per_minute"), "{body}");
        let retry: u64 = answer
            .retry_after
            .as_deref()
            .unwrap_or("")
            .parse()
            .unwrap_or_else(|_| panic!("{path}: Retry-After should be seconds: {:?}", answer.retry_after));
        assert!((1..=60).contains(&retry), "{path}: Retry-After {retry}");
    }
    // The limit is the tenant's: another tenant is not held back.
    let own = server.token();
    client.expect(Method::POST, "/v1/jobs", &own, Body::Json(json!({"plugin": "echo"})), StatusCode::CREATED).await;
    // Lifting the limit lets the tenant go on at once.
    let body = Body::Json(json!({"limits": {"runs_per_minute": null}}));
    client.expect(Method::PATCH, "/v1/tenants/busy", &admin, body, StatusCode::OK).await;
    client.expect(Method::POST, "/v1/workflows/quick/runs", &token, Body::Json(json!({})), StatusCode::CREATED).await;
}

// The CLI -----------------------------------------------------------------------------------

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn expect_ok(out: &std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn cli_manages_tenants_tokens_secrets_and_reads_the_audit() {
    let _serial = crate::support::serial_blocking();
    let server = DagrServer::start();
    let admin = server.admin_token();
    let as_admin = |args: &[&str]| {
        let mut command = server.cli_command(args);
        command.env("DAGR_TOKEN", &admin);
        crate::server::output_within(command, crate::server::CLI_TIMEOUT)
    };

    let out = as_admin(&[
        "tenant",
        "create",
        "team",
        "--allow-host",
        "api.example.org",
        "--runs-per-minute",
        "5",
        "--max-memory",
        "256MiB",
        "--max-duration",
        "10m",
    ]);
    let stdout = expect_ok(&out, "dagr tenant create");
    assert!(stdout.contains("tenant team created"), "{stdout}");
    let out = as_admin(&["tenant", "set", "team", "--max-concurrent", "3", "--clear", "max-memory"]);
    expect_ok(&out, "dagr tenant set");
    let list = expect_ok(&as_admin(&["tenant", "list"]), "dagr tenant list");
    let row = list.lines().find(|l| l.starts_with("team ")).unwrap_or_else(|| panic!("{list}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["team", "-", "10m", "3", "5", "-", "api.example.org"], "{list}");
    // A tenant token may not manage tenants.
    let out = server.cli(&["tenant", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("admin token"), "{}", text(&out.stderr));

    let out = as_admin(&["token", "create", "--tenant", "team", "--scope", "write", "--label", "ci"]);
    let team_token = expect_ok(&out, "dagr token create").trim().to_owned();
    assert!(team_token.starts_with("dagr_"), "{team_token}");
    let team = |args: &[&str], stdin: Option<&str>| {
        let mut command = server.cli_command(args);
        command.env("DAGR_TOKEN", &team_token);
        match stdin {
            None => crate::server::output_within(command, crate::server::CLI_TIMEOUT),
            Some(input) => {
                use std::io::Write as _;
                let mut child = command
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
                child.wait_with_output().unwrap()
            }
        }
    };
    expect_ok(&team(&["secret", "set", "db-password"], Some("from stdin\n")), "dagr secret set (stdin)");
    expect_ok(&team(&["secret", "set", "other", "--value", "v"], None), "dagr secret set --value");
    let secrets = expect_ok(&team(&["secret", "list"], None), "dagr secret list");
    assert!(secrets.contains("db-password") && secrets.contains("other"), "{secrets}");
    assert!(!secrets.contains("from stdin"), "{secrets}");
    expect_ok(&team(&["secret", "delete", "other"], None), "dagr secret delete");
    let audit = expect_ok(&team(&["audit"], None), "dagr audit");
    let team_id = team_token.split('_').nth(1).unwrap();
    assert!(audit.lines().any(|l| l.contains("secret.put") && l.contains(team_id)), "{audit}");
    assert!(audit.lines().any(|l| l.contains("secret.delete")), "{audit}");
    assert!(audit.lines().any(|l| l.contains("token.create")), "{audit}");
    // Its own tokens need the admin scope.
    let out = team(&["token", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("admin"), "{}", text(&out.stderr));
    let tokens = expect_ok(&as_admin(&["token", "list", "--tenant", "team"]), "dagr token list --tenant");
    assert!(tokens.contains(team_id) && tokens.contains("read,write") && !tokens.contains(&team_token), "{tokens}");

    // A profile gives the server and the token.
    let config = server.data_dir().join("client-config").join("dagr");
    std::fs::create_dir_all(&config).unwrap();
    write_file(
        &config,
        "config.toml",
        &format!("[profiles.team]\nserver = \"{}\"\ntoken = \"{team_token}\"\n", server.base_url()),
    );
    let mut command = server.cli_command(&["--profile", "team", "secret", "list"]);
    command.env_remove("DAGR_TOKEN").env_remove("DAGR_SERVER");
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert!(expect_ok(&out, "dagr --profile team secret list").contains("db-password"));
    let mut command = server.cli_command(&["--profile", "nope", "secret", "list"]);
    command.env_remove("DAGR_TOKEN");
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert!(text(&out.stderr).contains("no profile `nope`"), "{}", text(&out.stderr));

    // Revoked: refused, and the CLI says so.
    expect_ok(&as_admin(&["token", "revoke", team_id, "--tenant", "team"]), "dagr token revoke");
    let out = team(&["secret", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("revoked"), "{}", text(&out.stderr));
    // No token at all: the CLI says how to give one.
    let mut command = server.cli_command(&["workflows"]);
    command.env_remove("DAGR_TOKEN").current_dir(server.data_dir());
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("missing token") && text(&out.stderr).contains("DAGR_TOKEN"),
        "{}",
        text(&out.stderr)
    );
}

// Tokens at rest --------------------------------------------------------------------------

/// The database files (the SQLite file and its write-ahead log), as bytes.
fn database_bytes(server: &DagrServer) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["dagr.db", "dagr.db-wal"] {
        if let Ok(mut more) = std::fs::read(server.data_dir().join(name)) {
            bytes.append(&mut more);
        }
    }
    assert!(!bytes.is_empty(), "no database in {}", server.data_dir().display());
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_secrets_are_not_stored_in_plain_text() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let team = tenant_with_token(&client, &admin, "hashed", json!({})).await;
    let (read, _) = token_of(&client, &admin, "hashed", &["read"]).await;
    client.expect(Method::GET, "/v1/workflows", &team, Body::None, StatusCode::OK).await;
    let value = "the-password-is-swordfish-7f3a9c";
    let path = "/v1/secrets/db_password";
    client.expect(Method::PUT, path, &team, Body::Json(json!({ "value": value })), StatusCode::OK).await;

    let database = database_bytes(&server);
    assert!(!contains(&database, value), "a secret's value is in the database in plain text");
    assert!(contains(&database, "sealed:v1:"), "no sealed secret in the database");
    // The key that seals them is in the data directory, readable by its
    // owner only, and not in the database.
    let key = std::fs::read_to_string(server.data_dir().join("secrets.key")).unwrap();
    assert_eq!(key.trim().len(), 64, "{key}");
    assert!(!contains(&database, key.trim()), "the sealing key is in the database");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(server.data_dir().join("secrets.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "secrets.key has mode {mode:o}");

    for token in [server.token(), admin, team, read] {
        let (id, secret) = token.trim_start_matches("dagr_").split_once('_').unwrap();
        assert!(!contains(&database, secret), "the secret of token {id} is in the database in plain text");
        assert!(
            contains(&database, &dagr_api::auth::hash_secret(secret)),
            "the hash of token {id} is not in the database"
        );
        assert!(contains(&database, id), "token {id} is not in the database");
    }
}

// Quotas ----------------------------------------------------------------------------------

/// Uploads one of the test components as the tenant's plugin.
async fn upload(client: &Api, token: &str, path: &str) -> (String, String) {
    let bytes = std::fs::read(path).unwrap();
    let answer = client.send(Method::POST, "/v1/plugins", token, Body::Bytes(bytes)).await;
    assert!(answer.status == StatusCode::CREATED || answer.status == StatusCode::OK, "upload {path}: {}", answer.text);
    let plugin = answer.json();
    (plugin["name"].as_str().unwrap().to_owned(), plugin["version"].as_str().unwrap().to_owned())
}

/// Runs a one-plugin job to its end; returns its single task's last
/// attempt (`failure_kind`, `message`) and the job's answer.
async fn job_failure(client: &Api, token: &str, job: Value) -> (String, String, Value) {
    let answer = client.expect(Method::POST, "/v1/jobs?wait=true", token, Body::Json(job), StatusCode::OK).await;
    let run = answer["run_id"].as_str().unwrap();
    let detail = client.expect(Method::GET, &format!("/v1/runs/{run}"), token, Body::None, StatusCode::OK).await;
    let task = detail["tasks"][0]["name"].as_str().unwrap().to_owned();
    let task =
        client.expect(Method::GET, &format!("/v1/runs/{run}/tasks/{task}"), token, Body::None, StatusCode::OK).await;
    let last = task["attempts_detail"].as_array().unwrap().last().cloned().unwrap_or(Value::Null);
    (last["failure_kind"].as_str().unwrap_or("").to_owned(), last["message"].as_str().unwrap_or("").to_owned(), answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_limit_fails_with_an_error_that_names_it() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let web = crate::support::TestServer::start().await;
    let allowed = web.host();
    let limits = json!({
        "max_memory": 32 << 20,
        "max_duration_ms": 1500,
        "scratch_bytes": 64 << 10,
        "allow_hosts": [allowed],
    });
    let token = tenant_with_token(&client, &admin, "capped", limits).await;

    // At apply: a task that asks for more than the tenant may have.
    for (task, location, limit) in [
        ("memory: 64MiB", "tasks[0].memory", "max_memory"),
        ("timeout: 10s", "tasks[0].timeout", "max_duration_ms"),
        ("allow_hosts: [example.org]", "tasks[0].allow_hosts[0]", "allow_hosts"),
    ] {
        let definition = format!("name: greedy\ntasks:\n  - name: t\n    plugin: echo\n    {task}\n");
        let error =
            client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition), StatusCode::BAD_REQUEST).await;
        assert_eq!(error["location"], location, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(limit) && message.contains("capped"), "{task}: {message}");
        let job = json!({"tasks": [{"name": "t", "plugin": "echo", "memory": "64MiB"}]});
        let error = client.expect(Method::POST, "/v1/jobs", &token, Body::Json(job), StatusCode::BAD_REQUEST).await;
        assert!(error["message"].as_str().unwrap().contains("max_memory"), "{error}");
    }

    // At run time: memory. The tenant's own hostile plugin meets the cap.
    let (membomb, _) = upload(&client, &token, dagr_builtins::MEMBOMB_PATH).await;
    let (kind, message, _) = job_failure(&client, &token, json!({"plugin": membomb})).await;
    assert_eq!(kind, "memory-limit", "{message}");
    assert!(message.contains("memory"), "{message}");

    // Duration: the tenant's cap shortens the default deadline.
    let (kind, message, _) = job_failure(&client, &token, json!({"plugin": "sleep", "params": {"ms": 10_000}})).await;
    assert_eq!(kind, "timeout", "{message}");

    // Scratch disk.
    let (probe, _) = upload(&client, &token, dagr_builtins::PROBE_PATH).await;
    let big = "x".repeat(256 << 10);
    let job = json!({"plugin": probe, "params": {"write": {"name": "big", "content": big}}});
    let (kind, message, answer) = job_failure(&client, &token, job).await;
    assert_eq!(answer["state"], "failed", "{answer}");
    assert!(message.contains("scratch"), "{kind}: {message}");

    // Network: the allowlisted host answers; any other is refused.
    let job = json!({"tasks": [{"name": "ok", "plugin": "http", "params": {"url": web.url("/json")}, "allow_hosts": [allowed]}]});
    let answer = client.expect(Method::POST, "/v1/jobs?wait=true", &token, Body::Json(job), StatusCode::OK).await;
    assert_eq!(answer["state"], "succeeded", "{answer}");
    let elsewhere = format!("http://127.0.0.2:{}/json", allowed.rsplit(':').next().unwrap());
    let job = json!({"tasks": [{"name": "no", "plugin": "http", "params": {"url": elsewhere}, "allow_hosts": [allowed], "retries": 0}]});
    let (kind, message, _) = job_failure(&client, &token, job).await;
    assert!(!kind.is_empty() && message.contains("network policy"), "{kind}: {message}");

    // A tenant with no allowlist has no network at all, whatever a task lists.
    let closed = tenant_with_token(&client, &admin, "closed", json!({})).await;
    let job =
        json!({"tasks": [{"name": "t", "plugin": "http", "params": {"url": web.url("/")}, "allow_hosts": [allowed]}]});
    let error = client.expect(Method::POST, "/v1/jobs", &closed, Body::Json(job), StatusCode::BAD_REQUEST).await;
    assert!(error["message"].as_str().unwrap().contains("network allowlist"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_attempts_stay_within_the_tenants_cap() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let token = tenant_with_token(&client, &admin, "narrow", json!({"max_concurrent": 2})).await;
    let mut definition = String::from("name: wide\ntasks:\n");
    for i in 0..8 {
        definition.push_str(&format!("  - name: t{i}\n    plugin: sleep\n    params: {{ms: 300}}\n"));
    }
    client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition), StatusCode::CREATED).await;
    let run = client
        .expect(Method::POST, "/v1/workflows/wide/runs", &token, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let finished = client.wait_run_as(&token, run["id"].as_str().unwrap()).await;
    assert_eq!(finished["state"], "succeeded", "{finished}");

    // The attempts' intervals: at no instant more than two overlap.
    let mut edges = Vec::new();
    for task in finished["tasks"].as_array().unwrap() {
        let start = chrono::DateTime::parse_from_rfc3339(task["started_at"].as_str().unwrap()).unwrap();
        let end = chrono::DateTime::parse_from_rfc3339(task["finished_at"].as_str().unwrap()).unwrap();
        edges.push((start.timestamp_millis(), 1));
        edges.push((end.timestamp_millis(), -1));
    }
    edges.sort();
    let (mut running, mut most) = (0, 0);
    for (_, delta) in edges {
        running += delta;
        most = most.max(running);
    }
    assert!(most <= 2, "{most} attempts of tenant `narrow` overlapped; its limit is 2: {finished:#}");
    assert_eq!(most, 2, "the two allowed slots were used: {finished:#}");
}

// Isolation of plugins ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_plugin_cannot_read_another_tenants_scratch_files() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let a = tenant_with_token(&client, &admin, "scratch-a", json!({})).await;
    let b = tenant_with_token(&client, &admin, "scratch-b", json!({})).await;
    let (probe_a, _) = upload(&client, &a, dagr_builtins::PROBE_PATH).await;
    let (probe_b, _) = upload(&client, &b, dagr_builtins::PROBE_PATH).await;

    // A writes a file and keeps running (waiting to be cancelled) so that
    // its scratch directory exists while B looks for it.
    let job = json!({"plugin": probe_a, "params": {"write": {"name": "mine.txt", "content": "A's data"}, "wait_for_cancel_ms": 5000}});
    let started = client.expect(Method::POST, "/v1/jobs", &a, Body::Json(job), StatusCode::CREATED).await;
    let run_a = started["run_id"].as_str().unwrap().to_owned();
    let scratch = server.data_dir().join("scratch");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let on_disk = loop {
        let found: Vec<_> = walk(&scratch).into_iter().filter(|p| p.ends_with("mine.txt")).collect();
        if !found.is_empty() || std::time::Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(on_disk.len(), 1, "A's file is in its own scratch dir under {}: {on_disk:?}", scratch.display());

    let absolute = on_disk[0].display().to_string();
    for path in ["mine.txt".to_owned(), "../mine.txt".into(), format!("../../scratch-a/{run_a}/mine.txt"), absolute] {
        let job = json!({"plugin": probe_b, "params": {"read": path}});
        let answer = client.expect(Method::POST, "/v1/jobs?wait=true", &b, Body::Json(job), StatusCode::OK).await;
        assert_eq!(answer["state"], "succeeded", "{answer}");
        let read = &answer["output"]["read"];
        assert!(read.get("error").is_some(), "B read {path}: {answer}");
        assert!(!answer.to_string().contains("A's data"), "B read {path}: {answer}");
    }
    let run = client.wait_run_as(&a, &run_a).await;
    assert_eq!(run["state"], "succeeded", "{run}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walk(&path));
            } else {
                found.push(path);
            }
        }
    }
    found
}

// Fairness ---------------------------------------------------------------------------------

/// One tenant queues 10,000 tasks on a worker with 4 slots; another
/// tenant's single task must not wait behind them. The bound, measured: how
/// many of the noisy tenant's tasks started between the quiet tenant's
/// submission and its task's start (the fair queue alternates tenants, so
/// only the slots already being refilled can go first), and the quiet
/// task's latency, printed for docs/BENCHMARKS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_tenant_does_not_delay_another_tenants_task() {
    let _serial = serial().await;
    let server = tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_WORKER__SLOTS", "4")])).await.unwrap();
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let noisy = tenant_with_token(&client, &admin, "noisy", json!({})).await;
    let quiet = tenant_with_token(&client, &admin, "quiet", json!({})).await;

    let mut definition = String::from("name: flood\ntasks:\n");
    for i in 0..10_000 {
        definition.push_str(&format!("  - {{name: t{i}, plugin: sleep, params: {{ms: 5}}}}\n"));
    }
    client.expect(Method::POST, "/v1/workflows", &noisy, Body::Text(definition), StatusCode::CREATED).await;
    let flood = client
        .expect(Method::POST, "/v1/workflows/flood/runs", &noisy, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let flood = flood["id"].as_str().unwrap().to_owned();
    // Let the flood fill every slot and the queue.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let run = client.expect(Method::GET, &format!("/v1/runs/{flood}"), &noisy, Body::None, StatusCode::OK).await;
        let done = run["task_counts"]["succeeded"].as_u64().unwrap_or(0);
        if done >= 100 {
            break;
        }
        assert!(Instant::now() < deadline, "the flood does not progress: {}", run["state"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut latencies = Vec::new();
    let mut ahead = Vec::new();
    for _ in 0..5 {
        let submitted = chrono::Utc::now().timestamp_millis();
        let clock = Instant::now();
        let job = json!({"plugin": "echo", "params": {"hello": "quiet"}});
        let answer = client.expect(Method::POST, "/v1/jobs?wait=true", &quiet, Body::Json(job), StatusCode::OK).await;
        latencies.push(clock.elapsed());
        assert_eq!(answer["state"], "succeeded", "{answer}");
        let run = answer["run_id"].as_str().unwrap();
        let detail = client.expect(Method::GET, &format!("/v1/runs/{run}"), &quiet, Body::None, StatusCode::OK).await;
        let started = millis(&detail["tasks"][0]["started_at"]);
        let flood = client.expect(Method::GET, &format!("/v1/runs/{flood}"), &noisy, Body::None, StatusCode::OK).await;
        let jumped = flood["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["started_at"].is_string() && (submitted..started).contains(&millis(&t["started_at"])))
            .count();
        ahead.push(jumped);
    }
    println!("fairness: quiet tenant's job (wait=true) latencies {latencies:?}; noisy tasks started first {ahead:?}");
    // 4 slots: at most the 4 in flight are replaced before the quiet task
    // gets one, plus one more per slot that was being refilled at that
    // instant.
    assert!(ahead.iter().all(|&n| n <= 8), "the noisy tenant's tasks went first: {ahead:?}");
    client.expect(Method::POST, &format!("/v1/runs/{flood}/kill"), &noisy, Body::Json(json!({})), StatusCode::OK).await;
}

fn millis(value: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap().timestamp_millis()
}
