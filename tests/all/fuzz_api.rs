//! Hostile requests on every route of a real `dagr serve`: path segments,
//! query strings and bodies made by mutating valid ones (the mutator of
//! `dagr-props`), with and without the admin token. The property: a
//! caller's request, however malformed, is answered with a 2xx or a 4xx
//! in dagr's error shape (`{code, message}`), never a 5xx, and the server
//! lives on. `DAGR_FUZZ_API_CASES` (default 600) requests from
//! `DAGR_PROPS_SEED`; a failure prints the request and the seed.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{Value, json};

use crate::server::DagrServer;

/// Query parameters each route declares, from the OpenAPI document.
fn query_params() -> BTreeMap<(String, String), Vec<String>> {
    let doc = serde_json::to_value(dagr_api::openapi()).unwrap();
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let names = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect();
            out.insert((method.to_uppercase(), path.clone()), names);
        }
    }
    out
}

const VALUES: &[&str] = &[
    "",
    "0",
    "-1",
    "1",
    "1000",
    "1001",
    "99999999999999999999",
    "-9223372036854775808",
    "1e3",
    "0x10",
    "true",
    "false",
    "yes",
    "null",
    "[]",
    "{}",
    "%00",
    "%FF%FE",
    "%",
    "a%2Fb",
    "..",
    "../..",
    "é",
    "\u{1F600}",
    "succeeded",
    "running",
    "scheduled",
    "2026-01-01",
    "2026-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "1s",
    "-5s",
    "10h",
];

/// Valid bodies to mutate, by path template.
fn bodies(run: &str) -> Vec<(&'static str, Value)> {
    let _ = run;
    vec![
        (
            "/v1/workflows",
            json!({"name": "fz", "params": {"p": 1}, "tasks": [{"name": "a", "plugin": "echo", "params": {"x": "{{ params.p }}"}}]}),
        ),
        ("/v1/workflows/{name}/runs", json!({"params": {"p": 2}, "logical_time": "2026-01-01T00:00:00Z"})),
        ("/v1/jobs", json!({"plugin": "echo", "params": {"a": [1, 2]}, "timeout": "10s"})),
        ("/v1/backfills", json!({"workflow": "w", "from": "2026-01-01", "to": "2026-01-03", "parallel": 1})),
        ("/v1/tenants", json!({"name": "fz-tenant", "limits": {"max_concurrent": 2}})),
        ("/v1/tenants/{name}", json!({"limits": {"allow_hosts": ["*.example.org"], "max_memory": 1048576}})),
        ("/v1/tokens", json!({"scopes": ["read"], "label": "fz"})),
        ("/v1/secrets/{name}", json!({"value": "s3cr3t"})),
        ("/v1/runs/{id}/tasks/{task}/rerun", json!({"downstream": true})),
    ]
}

fn fill_path(rng: &mut StdRng, template: &str, known: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map(|c| c + open).unwrap_or(rest.len() - 1);
        let name = &rest[open + 1..close];
        let value = match rng.random_range(0..4) {
            0 | 1 => known.get(name).cloned().unwrap_or_else(|| "w".into()),
            2 => VALUES[rng.random_range(0..VALUES.len())].to_owned(),
            _ => (0..rng.random_range(1..300)).map(|_| rng.random_range(b'!'..=b'~') as char).collect(),
        };
        out.push_str(&urlencode(&value, rng.random_bool(0.2)));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Percent-encodes what a URL cannot hold (or, with `raw`, only `/`, `?`
/// and `#`, leaving `%` sequences as they are).
fn urlencode(text: &str, raw: bool) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        let keep = if raw {
            !matches!(b, b'/' | b'?' | b'#' | b' ') && b.is_ascii_graphic()
        } else {
            b.is_ascii_alphanumeric() || b"-_.~".contains(&b)
        };
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(rng: &mut StdRng, names: &[String]) -> String {
    let mut pairs = Vec::new();
    for _ in 0..rng.random_range(0..4) {
        let name = if !names.is_empty() && rng.random_bool(0.8) {
            names[rng.random_range(0..names.len())].clone()
        } else {
            ["nope", "limit", "after", "", "%ZZ", "a[b]"][rng.random_range(0..6)].to_owned()
        };
        if name == "follow" {
            continue; // a followed log waits for its run: not a request that ends
        }
        let value = VALUES[rng.random_range(0..VALUES.len())];
        pairs.push(format!("{}={}", urlencode(&name, rng.random_bool(0.3)), urlencode(value, rng.random_bool(0.3))));
    }
    pairs.join("&")
}

fn body(rng: &mut StdRng, template: &str) -> Option<(Vec<u8>, &'static str)> {
    let seeds = bodies("");
    let seed = seeds.iter().find(|(t, _)| *t == template).map(|(_, v)| v.clone()).unwrap_or(json!({}));
    let content_type = ["application/json", "application/yaml", "text/plain", "application/x-www-form-urlencoded"]
        [rng.random_range(0..4)];
    match rng.random_range(0..6) {
        0 => None,
        1 => Some((seed.to_string().into_bytes(), "application/json")),
        2 => Some((Vec::new(), content_type)),
        3 => {
            let deep = "[".repeat(rng.random_range(1..200)) + &"]".repeat(rng.random_range(0..200));
            Some((deep.into_bytes(), content_type))
        }
        _ => {
            let base = seed.to_string().into_bytes();
            let other = serde_yaml::to_string(&seed).unwrap_or_default().into_bytes();
            let mut input = base.clone();
            for _ in 0..rng.random_range(1..5) {
                input = dagr_props::bounded::mutate(rng, &input, &other, dagr_props::definition::DICTIONARY);
            }
            Some((input, content_type))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_on_every_route_get_a_4xx_never_a_5xx() {
    let server = DagrServer::start();
    let client = server.client();
    let admin = crate::server::client_with_token(&server.admin_token());
    let cases: usize = std::env::var("DAGR_FUZZ_API_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    let seed = dagr_props::bounded::seed();

    // Something for the routes to find.
    let apply = client
        .post(server.url("/v1/workflows"))
        .json(&json!({"name": "w", "tasks": [{"name": "a", "plugin": "echo"}]}))
        .send()
        .await
        .unwrap();
    assert!(apply.status().is_success(), "{}", apply.text().await.unwrap());
    let run: Value =
        client.post(server.url("/v1/workflows/w/runs")).json(&json!({})).send().await.unwrap().json().await.unwrap();
    let run_id = run["id"].as_str().unwrap().to_owned();
    let known: BTreeMap<&str, String> = [
        ("name", "w".to_owned()),
        ("id", run_id.clone()),
        ("task", "a".to_owned()),
        ("version", "1".to_owned()),
        ("tenant", "default".to_owned()),
        ("plugin", "echo".to_owned()),
    ]
    .into();

    let routes = dagr_api::routes();
    let params = query_params();
    let mut rng = StdRng::seed_from_u64(seed ^ 0xa91);
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for case in 0..cases {
        let (method, template) = &routes[rng.random_range(0..routes.len())];
        let path = fill_path(&mut rng, template, &known);
        let names = params.get(&(method.clone(), template.clone())).cloned().unwrap_or_default();
        let query = query(&mut rng, &names);
        let url = if query.is_empty() { server.url(&path) } else { server.url(&format!("{path}?{query}")) };
        let as_admin = rng.random_bool(0.15);
        let http = if as_admin { &admin } else { &client };
        let mut request =
            http.request(Method::from_bytes(method.as_bytes()).unwrap(), &url).timeout(Duration::from_secs(60));
        if as_admin && rng.random_bool(0.7) {
            request = request.header("x-dagr-tenant", if rng.random_bool(0.8) { "default" } else { "no-such-tenant" });
        }
        let sent = matches!(method.as_str(), "POST" | "PUT" | "PATCH").then(|| body(&mut rng, template)).flatten();
        let shown_body =
            sent.as_ref().map(|(b, t)| format!("{t}: {:?}", String::from_utf8_lossy(&b[..b.len().min(300)])));
        if let Some((bytes, content_type)) = sent {
            request = request.header("content-type", content_type).body(bytes);
        }
        let what = format!("case {case} (seed {seed}): {method} {url} {}", shown_body.unwrap_or_default());
        let answer = request.send().await.unwrap_or_else(|e| panic!("{what}: no answer: {e}\n{}", server.log()));
        let status = answer.status();
        *statuses.entry(status.as_u16()).or_default() += 1;
        let text = answer.text().await.unwrap_or_default();
        assert!(!status.is_server_error(), "{what}: {status} {text}");
        if status.is_client_error() {
            let error: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {status} is not JSON ({e}): {text}"));
            assert!(error["code"].is_string() && error["message"].is_string(), "{what}: {status} {text}");
        }
    }
    eprintln!("statuses: {statuses:?}");
    let ok = statuses.iter().filter(|(s, _)| **s < 300).map(|(_, n)| n).sum::<usize>();
    let refused = statuses.iter().filter(|(s, _)| (400..500).contains(*s)).map(|(_, n)| n).sum::<usize>();
    assert!(ok > 0 && refused > 0, "the requests reach handlers and get refused: {statuses:?}");
    assert!(client.get(server.url("/healthz")).send().await.unwrap().status().is_success(), "the server lives on");
}
