//! Every route against every wrong token (the matrix), admin-only routes,
//! and plugins that cannot reach another tenant's files.

use super::*;

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
