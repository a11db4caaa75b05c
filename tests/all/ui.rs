//! The web UI in a real headless Chromium (chromedriver), against a real
//! `dagr serve`: sign in, follow a run live, read a task's streamed log,
//! act on runs, another tenant's run, hostile content shown as text, and no
//! console error or CSP violation on any page. Screenshots of every page
//! go to `target/tmp/ui-screenshots/`.
//!
//! The session's security (HttpOnly cookie, CSRF, the policy header) is
//! checked over plain HTTP first, where a failure is easiest to read.

use std::path::PathBuf;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, SET_COOKIE};
use serde_json::{Value, json};

use crate::api::{Api, state};
use crate::browser::Browser;
use crate::e2e::own_server;
use crate::server::DagrServer;
use crate::support::serial;
use crate::tenancy::tenant_with_token;

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots")
}

/// A task that logs a line every few hundred milliseconds, reports
/// progress, and outputs markup: its log and output are tenant content.
const HOSTILE_AND_SLOW: &str = r#"name: ui-demo
description: "demo <img src=x onerror=alert('desc')>"
tasks:
- name: extract
  plugin: script
  params:
    script: |
      let x = 0;
      for i in 0..8 {
        info("line " + i + " <script>alert('log')</script> <img src=x onerror=alert('img')>");
        progress(i * 12, "step " + i + " <b>bold</b>");
        for j in 0..1200000 { x += 1; }
      }
      #{ html: "<script>alert('out')</script>", img: "<img src=x onerror=alert('out')>", link: "javascript:alert('out')" }
- name: load
  plugin: echo
  depends_on: [extract]
  params: {note: "<a href=\"javascript:alert('param')\">click</a>"}
"#;

const SLEEPER: &str = "name: ui-sleeper\ntasks:\n- {name: nap, plugin: sleep, params: {ms: 600000}}\n";

const FAILING: &str =
    "name: ui-failing\ntasks:\n- {name: broken, plugin: fail, params: {message: \"broken on purpose\"}}\n";

/// The montage DAG (2,122 tasks) as a workflow `name` whose tasks sleep
/// `ms` (not `echo`: an echo of a thousand upstream outputs is more than a
/// task may output): its definition and its number of tasks.
pub(crate) fn montage(name: &str, ms: u64) -> (String, usize) {
    let path = crate::support::workspace_root().join("tests/datasets/dags/pegasus-montage-dss-15d.json");
    let (definition, expected) = crate::e2e::dag_workflow(name, &path, 15);
    let mut definition: Value = serde_json::from_str(&definition).unwrap();
    for task in definition["tasks"].as_array_mut().unwrap() {
        task["plugin"] = json!("sleep");
        task["params"] = json!({"ms": ms});
    }
    (definition.to_string(), expected.len())
}

/// Signs in over HTTP: the session cookie (`name=value`) and the answer.
async fn sign_in(server: &DagrServer, body: Value) -> (String, Value) {
    let http = reqwest::Client::new();
    let response = http.post(server.url("/ui/session")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let set = response.headers().get(SET_COOKIE).unwrap().to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "the session cookie lacks {attribute}: {set}");
    }
    assert!(!set.contains(body["token"].as_str().unwrap()), "the cookie shows the token: {set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    (cookie, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_session_is_an_http_only_cookie_with_csrf_and_a_strict_policy() {
    let _serial = serial().await;
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: csrf-probe\ntasks:\n- {name: t, plugin: echo}\n").await;
    let http = reqwest::Client::new();

    // The shell and its assets carry the policy; `/` leads to the UI.
    let shell = http.get(server.url("/ui/runs/whatever")).send().await.unwrap();
    assert_eq!(shell.status(), StatusCode::OK);
    let csp = shell.headers().get(CONTENT_SECURITY_POLICY).unwrap().to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'") && !csp.contains("unsafe"));
    let root = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let root = root.get(server.url("/")).send().await.unwrap();
    assert!(root.status().is_redirection(), "{}", root.status());
    let missing = http.get(server.url("/ui/assets/no-such.js")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // Not signed in: the page asks, and learns it.
    let nobody: Value = http.get(server.url("/ui/session")).send().await.unwrap().json().await.unwrap();
    assert_eq!(nobody, json!({"signed_in": false}));

    // A bad token: 401, as the API would say.
    let bad = http.post(server.url("/ui/session")).json(&json!({"token": "dagr_nope"})).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
    let bad = http.post(server.url("/ui/session")).body("not json").send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    let (cookie, session) = sign_in(&server, json!({"token": server.token()})).await;
    assert_eq!(session["tenant"], "default", "{session}");
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    assert!(!session.to_string().contains(&server.token()), "the session answer shows the token");

    // Reading needs only the cookie.
    let list = http.get(server.url("/v1/workflows")).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    // A change without the CSRF value is refused, and nothing is created.
    let trigger = server.url("/v1/workflows/csrf-probe/runs");
    let forged = http.post(&trigger).header(COOKIE, &cookie).json(&json!({})).send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let wrong = http.post(&trigger).header(COOKIE, &cookie).header("x-dagr-csrf", "0".repeat(32)).json(&json!({}));
    assert_eq!(wrong.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let runs = api.get_ok("/v1/runs?workflow=csrf-probe").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "a forged request made a run: {runs}");
    let real = http.post(&trigger).header(COOKIE, &cookie).header("x-dagr-csrf", &csrf).json(&json!({}));
    assert_eq!(real.send().await.unwrap().status(), StatusCode::CREATED);

    // A forged or tampered cookie is no session.
    let tampered = format!("{}00", cookie);
    let answer = http.get(server.url("/v1/workflows")).header(COOKIE, tampered).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);

    // The admin signs in for a tenant and may switch; a tenant token may not.
    let (admin_cookie, admin) = sign_in(&server, json!({"token": server.admin_token()})).await;
    assert_eq!(admin["admin"], true);
    assert_eq!(admin["tenant"], "default");
    let client = Api::anonymous(&server.base_url());
    tenant_with_token(&client, &server.admin_token(), "ui-other", json!({})).await;
    let switch = http
        .put(server.url("/ui/session/tenant"))
        .header(COOKIE, &admin_cookie)
        .header("x-dagr-csrf", admin["csrf"].as_str().unwrap())
        .json(&json!({"tenant": "ui-other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(switch.status(), StatusCode::OK);
    let switched = switch.headers().get(SET_COOKIE).unwrap().to_str().unwrap().split(';').next().unwrap().to_owned();
    let listed = http.get(server.url("/v1/workflows")).header(COOKIE, &switched).send().await.unwrap();
    let listed: Value = listed.json().await.unwrap();
    assert_eq!(listed, json!([]), "the admin now sees tenant ui-other's (no) workflows");
    let refused = http
        .put(server.url("/ui/session/tenant"))
        .header(COOKIE, &cookie)
        .header("x-dagr-csrf", &csrf)
        .json(&json!({"tenant": "ui-other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // Signing out clears the cookie.
    let out = http.delete(server.url("/ui/session")).header(COOKIE, &cookie).header("x-dagr-csrf", &csrf);
    let out = out.send().await.unwrap();
    assert_eq!(out.status(), StatusCode::NO_CONTENT);
    assert!(out.headers().get(SET_COOKIE).unwrap().to_str().unwrap().contains("Max-Age=0"));
}

/// Fails on any console error or CSP violation so far, naming the page.
async fn no_console_errors(browser: &mut Browser, page: &str) {
    let errors = browser.console_errors().await;
    assert!(
        errors.is_empty(),
        "console errors on {page}: {errors:#?}\nall console lines: {:#?}",
        browser.console_seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_in_a_real_browser_follows_runs_live_and_acts_on_them() {
    let _serial = serial().await;
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply(HOSTILE_AND_SLOW).await;
    api.apply(SLEEPER).await;
    api.apply(FAILING).await;
    // Another tenant's run, for the "not found" check.
    let client = Api::anonymous(&server.base_url());
    let other_token = tenant_with_token(&client, &server.admin_token(), "ui-foreign", json!({})).await;
    let other = Api::at(&server.base_url(), &other_token);
    other.apply("name: secret-work\ntasks:\n- {name: t, plugin: echo}\n").await;
    let foreign_run = other.trigger("secret-work", json!({})).await;

    let mut browser = Browser::start(&screenshots()).await;
    let base = server.base_url();

    // Signing in: the page never holds the token.
    browser.goto(&format!("{base}/")).await;
    browser.find("#token").await;
    browser.screenshot("signin").await;
    browser.fill("#token", &server.token()).await;
    browser.click("#sign-in").await;
    browser.find("tr[data-workflow='ui-demo']").await;
    let cookies = browser.script("return document.cookie", vec![]).await;
    assert!(!cookies.as_str().unwrap_or("").contains("dagr_session"), "page scripts see the session: {cookies}");
    let stored = browser.script("return JSON.stringify(localStorage) + JSON.stringify(sessionStorage)", vec![]).await;
    assert!(!stored.as_str().unwrap_or("").contains("dagr_"), "the token is in web storage: {stored}");
    browser.screenshot("workflows").await;
    no_console_errors(&mut browser, "the workflows list").await;

    // Trigger from the workflow page; the run page turns green by itself.
    browser.goto(&format!("{base}/ui/workflows/ui-demo")).await;
    browser.find("[data-task='extract']").await;
    browser.screenshot("workflow").await;
    browser.click("#trigger").await;
    browser.click("#trigger-submit").await;
    browser.find("#run-state").await;
    browser.script("window.__dagrNoReload = 'still here'", vec![]).await;
    let run_url = browser.url().await;
    let run_id = run_url.rsplit("/runs/").next().unwrap().split('/').next().unwrap().to_owned();
    assert!(!run_id.is_empty() && run_url.contains("/ui/runs/"), "the trigger did not lead to the run: {run_url}");

    // The task's log streams in while it runs.
    browser.click("[data-task='extract']").await;
    browser.find("#task-panel").await;
    let log = browser.wait_text("#task-log", "the first log lines", |t| t.contains("line 0")).await;
    assert!(!log.contains("line 7"), "the whole log was there at once, not streamed: {log}");
    browser.wait_text("#task-log", "the last log line", |t| t.contains("line 7")).await;
    browser.wait_text("#run-state", "the run to succeed", |t| t.contains("succeeded")).await;
    let same_page = browser.script("return window.__dagrNoReload", vec![]).await;
    assert_eq!(same_page, json!("still here"), "the page reloaded to show the new state");
    let green = browser.attribute("[data-task='load']", "data-state").await;
    assert_eq!(green.as_deref(), Some("succeeded"));
    browser.screenshot("run").await;

    // Hostile content is text: no alert, no injected element, no live link.
    browser.click("[data-task='extract']").await;
    let output = browser.wait_text("#task-output", "the task's output", |t| t.contains("<script>")).await;
    assert!(output.contains("javascript:alert('out')") && output.contains("onerror"), "{output}");
    let log = browser.text("#task-log").await;
    assert!(log.contains("<script>alert('log')</script>"), "the log is not shown as text: {log}");
    let injected = browser
        .script(
            "return document.querySelectorAll('#task-panel script, #task-panel img, main img[src=\"x\"], \
             a[href^=\"javascript:\"]').length",
            vec![],
        )
        .await;
    assert_eq!(injected, json!(0), "tenant markup became elements");
    browser.screenshot("task").await;
    no_console_errors(&mut browser, "the run page").await;
    let progress = api.get_ok(&format!("/v1/runs/{run_id}/tasks/extract")).await;
    assert_eq!(progress["progress"]["percent"], 84, "the last progress report: {progress}");

    // Kill a running run from its page.
    let sleeper = api.trigger("ui-sleeper", json!({})).await;
    api.wait_task(&sleeper, "nap", "running").await;
    browser.goto(&format!("{base}/ui/runs/{sleeper}")).await;
    browser.wait_text("#run-state", "the run to be running", |t| t.contains("running")).await;
    browser.click("#action-kill").await;
    browser.confirm().await;
    browser.wait_text("#run-state", "the run to be killed", |t| t.contains("killed")).await;
    assert_eq!(state(&api.run(&sleeper).await), "killed");

    // Rerun a failed run from its failed task.
    let failing = api.trigger("ui-failing", json!({})).await;
    api.wait_run(&failing, "the failing run", |r| state(r) == "failed").await;
    browser.goto(&format!("{base}/ui/runs/{failing}")).await;
    browser.wait_text("#run-state", "the failed state", |t| t.contains("failed")).await;
    browser.click("#action-rerun").await;
    browser.confirm().await;
    api.wait_run(&failing, "the rerun", |r| {
        state(r) == "failed" && r["tasks"][0]["attempts"].as_i64().unwrap_or(0) >= 2
    })
    .await;
    browser.wait_text("#run-state", "the rerun to fail again", |t| t.contains("failed")).await;
    no_console_errors(&mut browser, "the actions").await;

    // Another tenant's run is "not found", exactly like the API's 404.
    browser.goto(&format!("{base}/ui/runs/{foreign_run}")).await;
    let text = browser.text("#not-found").await;
    assert!(text.to_lowercase().contains("not found"), "{text}");
    // The browser logs the API's 404 itself; nothing else may be there.
    let errors = browser.console_errors().await;
    assert!(errors.iter().all(|e| e.contains("404")), "console errors on the foreign run: {errors:#?}");
    let page = browser.script("return document.body.innerText", vec![]).await;
    assert!(!page.as_str().unwrap_or("").contains("secret-work"), "the foreign run's workflow is shown");

    // The 2,122-task montage DAG: drawn whole, fitted, and followed live.
    let (definition, tasks) = montage("ui-montage", 1);
    api.apply(&definition).await;
    browser.goto(&format!("{base}/ui/workflows/ui-montage")).await;
    let drawn = browser
        .wait_for(
            "the montage graph",
            "const n = document.querySelectorAll('[data-task]').length; return n >= 2122 && n",
        )
        .await;
    assert_eq!(drawn, json!(tasks), "every task is a node");
    browser.click("#graph-fit").await;
    browser.screenshot("montage").await;
    let montage_run = api.trigger("ui-montage", json!({})).await;
    browser.goto(&format!("{base}/ui/runs/{montage_run}")).await;
    browser.wait_text("#run-state", "the montage run to succeed", |t| t.contains("succeeded")).await;
    browser
        .wait_for(
            "every montage node to turn green",
            "return document.querySelectorAll('[data-task][data-state=\"succeeded\"]').length === 2122",
        )
        .await;
    browser.screenshot("montage-run").await;
    no_console_errors(&mut browser, "the montage pages").await;

    // Every other page loads without an error, at desktop and phone width.
    for (name, path) in [
        ("runs", "/ui/runs"),
        ("jobs", "/ui/jobs"),
        ("plugins", "/ui/plugins"),
        ("plugin", "/ui/plugins/script"),
        ("admin", "/ui/admin"),
        ("cluster", "/ui/cluster"),
    ] {
        browser.goto(&format!("{base}{path}")).await;
        browser.find("main").await;
        browser.wait_for("the page to finish loading", "return !document.querySelector('.loading')").await;
        browser.screenshot(name).await;
        no_console_errors(&mut browser, path).await;
    }
    browser.window(390, 844).await;
    browser.goto(&format!("{base}/ui/runs/{run_id}")).await;
    browser.wait_text("#run-state", "the run page on a phone", |t| t.contains("succeeded")).await;
    browser.screenshot("run-phone").await;
    no_console_errors(&mut browser, "the run page at phone width").await;

    // Signing out ends the session for the browser (after a last look at
    // the workflows, now with runs).
    browser.window(1280, 800).await;
    browser.goto(&format!("{base}/ui/")).await;
    browser.find("tr[data-workflow='ui-demo'] a[href*='/ui/runs/']").await;
    browser.screenshot("workflows-with-runs").await;
    browser.click("#sign-out").await;
    browser.find("#token").await;
    let answer = browser.script("return fetch('/v1/workflows').then(r => r.status)", vec![]).await;
    assert_eq!(answer, json!(401), "the API still answers after signing out");
}
