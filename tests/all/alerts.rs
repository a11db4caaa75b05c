//! Alerts against a real `dagr serve`, a real SMTP server (aiosmtpd,
//! started by scripts/test.sh: `DAGR_TEST_SMTP`, mail kept as Maildir
//! files in `DAGR_TEST_MAILDIR`) and a Slack-compatible receiver in the
//! test: a failing workflow sends one mail with the run's link and the
//! reason; a run of failures is grouped into a summary; the history says
//! what went out; a bad rule is refused, naming what is wrong.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{Api, PATIENCE};
use crate::server::DagrServer;

/// The mails that reached `to`, as text.
fn mails_to(to: &str) -> Vec<String> {
    let dir = PathBuf::from(std::env::var("DAGR_TEST_MAILDIR").expect("DAGR_TEST_MAILDIR (scripts/test.sh sets it)"));
    let mut mails = Vec::new();
    for sub in ["new", "cur"] {
        for entry in std::fs::read_dir(dir.join(sub)).into_iter().flatten().flatten() {
            // Quoted-printable bodies break long lines with a soft `=`.
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let text = text.replace("=\r\n", "").replace("=\n", "").replace("=3D", "=");
            if text.lines().any(|l| l.starts_with("To: ") && l.contains(to)) {
                mails.push(text);
            }
        }
    }
    mails
}

/// How many alerts a mail stands for: `[dagr] N x kind…` or one.
fn alerts_in(mail: &str) -> usize {
    let subject = mail.lines().find_map(|l| l.strip_prefix("Subject: ")).unwrap_or_default();
    let count = subject.strip_prefix("[dagr] ").and_then(|s| s.split(" x ").next()).and_then(|n| n.parse().ok());
    count.unwrap_or(1)
}

const FAILING: &str =
    "name: nightly\ntasks:\n- {name: load, plugin: fail, params: {mode: fatal, message: disk full}}\n";

/// A server that mails through the test SMTP server.
async fn alerting_server() -> DagrServer {
    let smtp = std::env::var("DAGR_TEST_SMTP").expect("DAGR_TEST_SMTP (scripts/test.sh starts the SMTP server)");
    let (host, port) = smtp.split_once(':').unwrap();
    let (host, port) = (host.to_owned(), port.to_owned());
    tokio::task::spawn_blocking(move || {
        DagrServer::start_with(&[
            ("DAGR_SMTP__HOST", &host),
            ("DAGR_SMTP__PORT", &port),
            ("DAGR_SMTP__SECURITY", "none"),
            ("DAGR_ALERTS__BASE_URL", "http://dagr.test"),
            ("DAGR_WEBHOOKS__ALLOW_PRIVATE", "true"),
        ])
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_sla_alerts_once_and_one_in_time_does_not() {
    let server = alerting_server().await;
    let api = Api::of(&server);
    api.apply("name: slow\nsla: {within: 2s}\ntasks:\n- {name: nap, plugin: sleep, params: {ms: 5000}}\n").await;
    api.apply("name: quick\nsla: {within: 30s}\ntasks:\n- {name: a, plugin: echo}\n").await;
    let to = format!("sla-{}@example.org", std::process::id());
    let rule = json!({"on": ["run.sla_missed"], "channel": {"email": to}});
    let (status, body) = api.post("/v1/alerts", rule).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let quick = api.trigger("quick", json!({})).await;
    api.finished(&quick).await;
    let slow = api.trigger("slow", json!({})).await;
    let start = std::time::Instant::now();
    while mails_to(&to).is_empty() {
        assert!(start.elapsed() < PATIENCE, "no SLA mail came");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let run = api.get_ok(&format!("/v1/runs/{slow}")).await;
    assert_eq!(run["state"], "running", "alerted while the run goes on: {run}");
    assert_eq!(api.finished(&slow).await["state"], "succeeded", "an SLA does not stop the run");
    let missed = api.get_ok("/v1/events?kind=run.sla_missed").await;
    let missed = missed["events"].as_array().unwrap();
    assert_eq!(missed.len(), 1, "once, for the slow run only: {missed:?}");
    assert_eq!(missed[0]["run_id"], slow.as_str());
    let mails = mails_to(&to);
    assert_eq!(mails.len(), 1, "{mails:?}");
    assert!(mails[0].contains("missed its SLA") && mails[0].contains(&slow), "{}", mails[0]);
    // A bad SLA is refused where it is written.
    let (status, body) =
        api.post_text("/v1/workflows", "name: bad\nsla: {finish_by: 6am}\ntasks:\n- {name: a, plugin: echo}\n").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "sla.finish_by", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_workflow_mails_its_reason_once_and_groups_what_follows() {
    let server = alerting_server().await;
    let api = Api::of(&server);
    api.apply(FAILING).await;
    let to = format!("ops-{}@example.org", std::process::id());
    let rule = json!({"workflow": "nightly", "on": ["run.failed"], "channel": {"email": to}, "group": "5s"});
    let (status, created) = api.post("/v1/alerts", rule).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // A Slack-compatible incoming webhook, too.
    let posted: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = posted.clone();
    let app = axum::Router::new().route(
        "/slack",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slack = format!("http://{}/slack", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let (status, body) = api.post("/v1/alerts", json!({"on": ["task.failed"], "channel": {"slack": slack}})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // One failure: one mail, at once, with the reason and the run's link.
    let first = api.trigger("nightly", json!({})).await;
    assert_eq!(api.finished(&first).await["state"], "failed");
    let start = std::time::Instant::now();
    while mails_to(&to).is_empty() {
        assert!(start.elapsed() < PATIENCE, "no mail came");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mail = &mails_to(&to)[0];
    assert!(mail.contains("Subject: [dagr] run.failed: nightly"), "{mail}");
    assert!(mail.contains("disk full"), "the reason: {mail}");
    assert!(mail.contains(&format!("http://dagr.test/ui/runs/{first}")), "the link: {mail}");

    // 24 more in a row: grouped, not 24 mails.
    let mut runs = Vec::new();
    for _ in 0..24 {
        runs.push(api.trigger("nightly", json!({})).await);
    }
    for run in &runs {
        api.finished(run).await;
    }
    let start = std::time::Instant::now();
    loop {
        let history = api.get_ok("/v1/alerts/history?limit=1000").await;
        let mine: Vec<&Value> = history.as_array().unwrap().iter().filter(|a| a["rule"] == created["id"]).collect();
        if mine.len() == 25 && mine.iter().all(|a| a["sent_at"].is_string()) {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "not all sent: {history}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mails = mails_to(&to);
    let counted: usize = mails.iter().map(|m| alerts_in(m)).sum();
    assert_eq!(counted, 25, "every failure is in some mail: {mails:?}");
    assert!(mails.len() <= 4, "grouped into a summary or two, not {} mails", mails.len());
    assert!(mails.iter().any(|m| alerts_in(m) > 1), "a summary: {mails:?}");
    let out = crate::server::output_within(server.cli_command(&["alerts", "--limit", "5"]), PATIENCE);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && printed.lines().count() == 5, "{printed}");
    assert!(printed.contains("run.failed") && printed.contains("sent "), "dagr alerts: {printed}");
    let posts = posted.lock().unwrap().clone();
    assert!(!posts.is_empty() && posts[0]["text"].as_str().unwrap().contains("task.failed"), "{posts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_alert_rule_is_refused_naming_what_is_wrong() {
    let api = Api::shared().await;
    for (rule, location) in [
        (json!({"on": [], "channel": {"email": "a@b.org"}}), "on"),
        (json!({"on": ["run.exploded"], "channel": {"email": "a@b.org"}}), "on"),
        (json!({"on": ["run.failed"], "channel": {"email": "a@b.org", "slack": "https://x.org"}}), "channel"),
        (json!({"on": ["run.failed"], "channel": {"pager": "x"}}), "channel"),
        (json!({"on": ["run.failed"], "channel": {"email": "not an address"}}), "channel.email"),
        (json!({"on": ["run.failed"], "channel": {"slack": "http://127.0.0.1:9/x"}}), "channel.slack"),
        (json!({"on": ["run.failed"], "channel": {"email": "a@b.org"}, "group": "0s"}), "group"),
    ] {
        let (status, body) = api.post("/v1/alerts", rule.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{rule}: {body}");
        assert_eq!(body["location"], location, "{rule}: {body}");
    }
    let (status, _) = api.get("/v1/alerts/al_nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_in_its_quiet_hours_keeps_its_alerts_and_says_so() {
    let server = alerting_server().await;
    let api = Api::of(&server);
    api.apply(FAILING).await;
    // Quiet from an hour ago to an hour ahead (UTC), and a rule without.
    let now = chrono::Utc::now();
    let hhmm = |t: chrono::DateTime<chrono::Utc>| t.format("%H:%M").to_string();
    let (from, to) = (hhmm(now - chrono::Duration::hours(1)), hhmm(now + chrono::Duration::hours(1)));
    let quiet_to = format!("quiet-{}@example.org", std::process::id());
    let loud_to = format!("loud-{}@example.org", std::process::id());
    let rule = json!({"workflow": "nightly", "on": ["run.failed"], "channel": {"email": quiet_to},
        "quiet_hours": {"from": from, "to": to}});
    let (status, quiet) = api.post("/v1/alerts", rule).await;
    assert_eq!(status, StatusCode::CREATED, "{quiet}");
    assert_eq!(quiet["quiet_hours"], json!({"from": from, "to": to, "timezone": "UTC"}), "{quiet}");
    let rule = json!({"workflow": "nightly", "on": ["run.failed"], "channel": {"email": loud_to}});
    assert_eq!(api.post("/v1/alerts", rule).await.0, StatusCode::CREATED);

    // A bad window is refused, naming the field.
    let bad = json!({"on": ["run.failed"], "channel": {"email": quiet_to},
        "quiet_hours": {"from": "22:00", "to": "7am", "timezone": "UTC"}});
    let (status, body) = api.post("/v1/alerts", bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "quiet_hours.to", "{body}");

    let run = api.trigger("nightly", json!({})).await;
    api.finished(&run).await;
    let start = std::time::Instant::now();
    while mails_to(&loud_to).is_empty() {
        assert!(start.elapsed() < PATIENCE, "the rule without quiet hours sent nothing");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The loud rule's mail went out; the quiet rule raised its alert and
    // keeps it unsent (several of the alerter's rounds later, still).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(mails_to(&quiet_to).is_empty(), "a rule sent in its quiet hours");
    let history = api.get_ok("/v1/alerts/history").await;
    let held: Vec<&Value> = history.as_array().unwrap().iter().filter(|a| a["rule"] == quiet["id"]).collect();
    assert_eq!(held.len(), 1, "the quiet rule raised its alert: {history}");
    assert!(held[0].get("sent_at").is_none_or(Value::is_null), "{history}");
    let until = held[0]["held_until"].as_str().unwrap_or_else(|| panic!("held, and says until when: {history}"));
    assert!(until.contains(&format!("T{to}:00")), "held until {to} UTC: {until}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_longer_than_its_rule_allows_alerts_once() {
    let server = alerting_server().await;
    let api = Api::of(&server);
    api.apply("name: feed\ntasks:\n- {name: a, plugin: echo}\n").await;
    api.apply("name: report\nupstream: [{workflow: feed, offset: -1d}]\ntasks:\n- {name: b, plugin: echo}\n").await;
    let to = format!("waiting-{}@example.org", std::process::id());
    // Without its threshold, or with one on another kind: refused.
    let (status, body) = api.post("/v1/alerts", json!({"on": ["run.waiting_long"], "channel": {"email": to}})).await;
    assert_eq!((status, body["location"].as_str()), (StatusCode::BAD_REQUEST, Some("waiting_longer_than")), "{body}");
    let body = json!({"on": ["run.failed"], "channel": {"email": to}, "waiting_longer_than": "1m"});
    assert_eq!(api.post("/v1/alerts", body).await.0, StatusCode::BAD_REQUEST);
    let rule = json!({"workflow": "report", "on": ["run.waiting_long"], "channel": {"email": to},
        "waiting_longer_than": "2s"});
    let (status, rule) = api.post("/v1/alerts", rule).await;
    assert_eq!(status, StatusCode::CREATED, "{rule}");
    assert_eq!(rule["waiting_longer_than_seconds"], 2, "{rule}");

    // Yesterday's feed never ran: today's report waits, and past 2 s alerts.
    let run = api.trigger("report", json!({"logical_time": "2026-05-02T00:00:00Z"})).await;
    let start = std::time::Instant::now();
    while mails_to(&to).is_empty() {
        assert!(start.elapsed() < PATIENCE, "no mail about the long wait");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mails = mails_to(&to);
    assert!(mails[0].contains(&run) && mails[0].contains("waited"), "{}", mails[0]);
    assert_eq!(crate::api::state(&api.run(&run).await), "waiting", "the alert does not change the run");
    // Once: later rounds of the alerter raise nothing more for it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = api.get_ok(&format!("/v1/events?run={run}&kind=run.waiting_long")).await;
    let events = events["events"].as_array().unwrap_or_else(|| panic!("{events}"));
    assert_eq!(events.len(), 1, "{events:?}");
}
