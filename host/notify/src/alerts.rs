//! Alerts: rules that turn a tenant's events into messages — email over
//! SMTP, Slack- or Teams-compatible incoming webhooks, or a plain JSON
//! webhook — grouped so that a workflow failing every hour sends one
//! message and then a summary per window, not one message per failure.
//!
//! Two loops on the event log, both restart-safe. Raising: the alerter
//! follows the log (a durable cursor, `alerts`) and records one alert per
//! matching rule and event (recording twice is a no-op). Sending: each
//! group (rule, workflow, kind) sends what it has at once when it has sent
//! nothing for the rule's window, else waits for the window to pass and
//! sends the rest as one summary. A failed send is kept, and retried with
//! backoff.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use dagr_metrics::{Counter, Family, global};
use dagr_store::{AlertRow, AlertRuleRow, EventRow, EventScope, NewAlert, Store, TaskState};
use lettre::AsyncTransport as _;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Every kind an alert rule may name.
pub const KINDS: &[&str] = &[
    "run.failed",
    "run.succeeded",
    "task.failed",
    "run.upstream_failed",
    "run.waiting",
    "run.waiting_long",
    "run.sla_missed",
    "task.timeout_warn",
    "webhook.disabled",
];

/// Events read at once.
const PAGE: i64 = 500;
/// The cursor's name in the store.
const SINK: &str = "alerts";

/// Where mail goes out: `[smtp]` as the configuration checked it.
pub use dagr_config::SmtpConfig;

/// `[alerts]`.
#[derive(Debug, Clone)]
pub struct AlertConfig {
    pub smtp: SmtpConfig,
    /// The start of links in messages (e.g. `https://dagr.example.org`).
    pub base_url: String,
    /// Whether webhook-like channels may go to private addresses.
    pub allow_private: bool,
    pub poll: Duration,
}

/// The alert an event raises, if any.
pub fn alert_kind(event: &EventRow) -> Option<&'static str> {
    let to = || serde_json::from_str::<Value>(&event.data).ok().and_then(|d| d["to"].as_str().map(str::to_owned));
    match event.kind.as_str() {
        "run.state" => match to()?.as_str() {
            "failed" => Some("run.failed"),
            "succeeded" => Some("run.succeeded"),
            _ => None,
        },
        // A task fails for good only once its retries are spent.
        "task.state" => (to()?.as_str() == "failed").then_some("task.failed"),
        "run.upstream_failed" => Some("run.upstream_failed"),
        "run.waiting" => Some("run.waiting"),
        "run.waiting_long" => Some("run.waiting_long"),
        "run.sla_missed" => Some("run.sla_missed"),
        "task.timeout_warn" => Some("task.timeout_warn"),
        "webhook.disabled" => Some("webhook.disabled"),
        _ => None,
    }
}

/// Whether `rule` wants an alert of `kind` for `event`. A
/// `run.waiting_long` event is raised for one rule (its threshold) and
/// names it.
pub fn wants(rule: &AlertRuleRow, kind: &str, event: &EventRow) -> bool {
    rule.tenant == event.tenant
        && rule.workflow.as_ref().is_none_or(|w| event.workflow.as_ref() == Some(w))
        && rule.kinds.split(',').any(|k| k == kind)
        && (kind != "run.waiting_long"
            || serde_json::from_str::<Value>(&event.data).is_ok_and(|d| d["rule"].as_str() == Some(&rule.id)))
}

/// A rule's quiet hours, if it has (valid) ones.
pub fn quiet_hours(rule: &AlertRuleRow) -> Option<dagr_core::quiet::QuietHours> {
    let quiet: Value = serde_json::from_str(rule.quiet.as_deref()?).ok()?;
    let field = |name: &str| quiet[name].as_str().unwrap_or("").to_owned();
    let timezone = quiet["timezone"].as_str().unwrap_or("UTC");
    dagr_core::quiet::QuietHours::new(&field("from"), &field("to"), timezone).ok()
}

/// One line saying what happened.
fn line(kind: &str, event: &EventRow, reason: Option<&str>) -> String {
    let workflow = event.workflow.as_deref().unwrap_or("-");
    let run = event.run_id.as_deref().unwrap_or("-");
    let what = match kind {
        "run.failed" => format!("run {run} of {workflow} failed"),
        "run.succeeded" => format!("run {run} of {workflow} succeeded"),
        "task.failed" => {
            format!("task {} of run {run} ({workflow}) failed, its retries spent", event.task.as_deref().unwrap_or("?"))
        }
        "run.upstream_failed" => format!("run {run} of {workflow}: an upstream instance failed"),
        "run.waiting" => format!("run {run} of {workflow} waits for its upstream"),
        "run.waiting_long" => {
            let waited = serde_json::from_str::<Value>(&event.data).ok().and_then(|d| d["waited_s"].as_i64());
            format!("run {run} of {workflow} has waited {}s for its upstream", waited.unwrap_or(0))
        }
        "run.sla_missed" => format!("run {run} of {workflow} missed its SLA: unfinished at its deadline"),
        "task.timeout_warn" => format!(
            "task {} of run {run} ({workflow}) runs longer than its timeout_warn",
            event.task.as_deref().unwrap_or("?")
        ),
        other => format!("{other}: {}", event.data),
    };
    match reason {
        Some(reason) => format!("{what}: {reason}"),
        None => what,
    }
}

fn time(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A message: its subject and its text.
pub fn compose(rule: &AlertRuleRow, alerts: &[AlertRow], base_url: &str) -> (String, String) {
    let link = |a: &AlertRow| match &a.alert.run_id {
        Some(run) if !base_url.is_empty() => format!("\n  {}/ui/runs/{run}", base_url.trim_end_matches('/')),
        _ => String::new(),
    };
    let first = &alerts[0].alert;
    let workflow = first.workflow.as_deref().unwrap_or("(any workflow)");
    if alerts.len() == 1 {
        let subject = format!("[dagr] {}: {}", first.kind, workflow);
        let text = format!("{} at {}{}\n\n(alert rule {})\n", first.message, time(first.at), link(&alerts[0]), rule.id);
        return (subject, text);
    }
    let subject = format!("[dagr] {} x {}: {}", alerts.len(), first.kind, workflow);
    let mut text = format!(
        "{} alerts of rule {} between {} and {}:\n\n",
        alerts.len(),
        rule.id,
        time(first.at),
        time(alerts[alerts.len() - 1].alert.at)
    );
    for a in alerts {
        text.push_str(&format!("- {} at {}{}\n", a.alert.message, time(a.alert.at), link(a)));
    }
    (subject, text)
}

struct Metrics {
    raised: Arc<Family<Counter>>,
    messages: Arc<Family<Counter>>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics {
        raised: global().family("dagr_alerts_raised_total", "Alerts raised, by kind.", &["kind"], 16, Counter::default),
        messages: global().family(
            "dagr_alert_messages_total",
            "Alert messages sent, by channel and outcome (sent, failed).",
            &["channel", "outcome"],
            16,
            Counter::default,
        ),
    })
}

pub struct Alerter {
    store: Arc<dyn Store>,
    config: AlertConfig,
    http: crate::dest::Destinations,
}

impl Alerter {
    /// Raises and sends alerts while `active` is true (the leader, in a
    /// cluster).
    pub fn start(store: Arc<dyn Store>, config: AlertConfig, active: watch::Receiver<bool>) -> JoinHandle<()> {
        metrics();
        let http = crate::dest::Destinations::new(Duration::from_secs(10), config.allow_private);
        let alerter = Alerter { store, config, http };
        tokio::spawn(async move { alerter.run(active).await })
    }

    async fn run(self, active: watch::Receiver<bool>) {
        let mut cursor: Option<i64> = None;
        let mut retry_at: HashMap<(String, String), Instant> = HashMap::new();
        loop {
            if !*active.borrow() {
                cursor = None;
                tokio::time::sleep(self.config.poll).await;
                continue;
            }
            if let Err(e) = self.judge_deadlines().await {
                tracing::warn!(error = %e, "cannot judge SLA deadlines; will retry");
            }
            if let Err(e) = self.judge_waits().await {
                tracing::warn!(error = %e, "cannot judge long waits; will retry");
            }
            if let Err(e) = self.raise(&mut cursor).await {
                tracing::warn!(error = %e, "cannot raise alerts; will retry");
            }
            if let Err(e) = self.send(&mut retry_at).await {
                tracing::warn!(error = %e, "cannot send alerts; will retry");
            }
            tokio::time::sleep(self.config.poll).await;
        }
    }

    /// Runs past their deadline: an unfinished one raises a
    /// `run.sla_missed` event (once); a finished one met it.
    async fn judge_deadlines(&self) -> Result<(), String> {
        let now = Utc::now().timestamp_millis();
        let due = self.store.due_slas(now, 500).await.map_err(|e| e.to_string())?;
        for sla in due {
            if sla.finished_at.is_some_and(|f| f <= sla.due_at) {
                self.store.sla_judged(&sla.run_id, 0).await.map_err(|e| e.to_string())?;
                continue;
            }
            let event = dagr_store::NewEvent {
                tenant: sla.tenant.clone(),
                at: now,
                kind: "run.sla_missed".into(),
                workflow: Some(sla.workflow.clone()),
                run_id: Some(sla.run_id.clone()),
                task: None,
                data: json!({"deadline": time(sla.due_at), "finished_at": sla.finished_at.map(time)}).to_string(),
            };
            tracing::warn!(run = %sla.run_id, workflow = %sla.workflow, "a run missed its SLA");
            let batch = dagr_store::WriteBatch { events: vec![event], ..Default::default() };
            self.store.commit(batch).await.map_err(|e| e.to_string())?;
            self.store.sla_judged(&sla.run_id, now).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Runs that have waited for their upstream longer than a
    /// `run.waiting_long` rule allows: each raises one event naming the
    /// rule. A cursor per rule (the creation time of the runs judged so
    /// far) keeps this from reading the same waiting runs again; a crash
    /// between the event and the cursor may raise it twice (at least once).
    async fn judge_waits(&self) -> Result<(), String> {
        let now = Utc::now().timestamp_millis();
        let rules = self.store.all_alert_rules().await.map_err(|e| e.to_string())?;
        for rule in rules.iter().filter(|r| r.kinds.split(',').any(|k| k == "run.waiting_long")) {
            let Some(wait_ms) = rule.wait_ms else { continue };
            let sink = format!("waiting:{}", rule.id);
            let after = self.store.sink_cursor(&sink, 0).await.map_err(|e| e.to_string())?;
            let until = now - wait_ms;
            if until <= after {
                continue;
            }
            let limit = 500;
            let runs = self
                .store
                .long_waiting_runs(&rule.tenant, rule.workflow.as_deref(), after, until, limit)
                .await
                .map_err(|e| e.to_string())?;
            let events: Vec<dagr_store::NewEvent> = runs
                .iter()
                .map(|(run, workflow, created_at)| dagr_store::NewEvent {
                    tenant: rule.tenant.clone(),
                    at: now,
                    kind: "run.waiting_long".into(),
                    workflow: Some(workflow.clone()),
                    run_id: Some(run.clone()),
                    task: None,
                    data: json!({"rule": rule.id, "waited_s": (now - created_at) / 1000, "limit_s": wait_ms / 1000})
                        .to_string(),
                })
                .collect();
            // A full page: carry on from its last run next round.
            let judged = match runs.last() {
                Some((_, _, created_at)) if runs.len() as i64 == limit => *created_at,
                _ => until,
            };
            if !events.is_empty() {
                let batch = dagr_store::WriteBatch { events, ..Default::default() };
                self.store.commit(batch).await.map_err(|e| e.to_string())?;
            }
            self.store.advance_sink(&sink, judged).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Records the alerts the new events raise, then moves the cursor.
    async fn raise(&self, cursor: &mut Option<i64>) -> Result<(), String> {
        let store = &self.store;
        // The log's head: where a new sink starts, and where the cursor
        // jumps with no rule anywhere (nothing can be raised, so the events
        // are not read: a fan-out writes tens of thousands, each page of
        // which was read and its cursor written beside the engine's
        // commits). It is read before the rules: an event up to it happened
        // before the rules were read, and a rule made before that event
        // would be among them.
        let head = store.last_event_seq().await.map_err(|e| e.to_string())?;
        let at = match *cursor {
            Some(at) => at,
            None => store.sink_cursor(SINK, head).await.map_err(|e| e.to_string())?,
        };
        let rules = store.all_alert_rules().await.map_err(|e| e.to_string())?;
        if rules.is_empty() {
            if head > at {
                store.advance_sink(SINK, head).await.map_err(|e| e.to_string())?;
            }
            *cursor = Some(at.max(head));
            return Ok(());
        }
        let events = store.event_page(&EventScope::default(), at, PAGE).await.map_err(|e| e.to_string())?;
        let Some(last) = events.last().map(|e| e.seq) else {
            *cursor = Some(at);
            return Ok(());
        };
        let mut raised = Vec::new();
        for event in &events {
            let Some(kind) = alert_kind(event) else { continue };
            let matching: Vec<&AlertRuleRow> = rules.iter().filter(|r| wants(r, kind, event)).collect();
            if matching.is_empty() {
                continue;
            }
            let reason = self.reason(kind, event).await;
            for rule in matching {
                metrics().raised.with(&[kind]).inc();
                raised.push(NewAlert {
                    rule_id: rule.id.clone(),
                    tenant: event.tenant.clone(),
                    seq: event.seq,
                    kind: kind.to_owned(),
                    grp: format!("{}|{kind}", event.workflow.as_deref().unwrap_or("")),
                    workflow: event.workflow.clone(),
                    run_id: event.run_id.clone(),
                    message: line(kind, event, reason.as_deref()),
                    at: event.at,
                });
            }
        }
        store.raise_alerts(&raised).await.map_err(|e| e.to_string())?;
        store.advance_sink(SINK, last).await.map_err(|e| e.to_string())?;
        *cursor = Some(last);
        Ok(())
    }

    /// Why a run or task failed: its failed tasks' errors.
    async fn reason(&self, kind: &str, event: &EventRow) -> Option<String> {
        if !matches!(kind, "run.failed" | "task.failed") {
            return None;
        }
        let tasks = self.store.run_tasks(event.run_id.as_deref()?).await.ok()?;
        let failed: Vec<String> = tasks
            .iter()
            .filter(|t| t.state == TaskState::Failed && (kind == "run.failed" || event.task.as_ref() == Some(&t.name)))
            .map(|t| match &t.error {
                Some(error) => format!("{}: {}", t.name, error.chars().take(500).collect::<String>()),
                None => t.name.clone(),
            })
            .take(5)
            .collect();
        (!failed.is_empty()).then(|| failed.join("; "))
    }

    /// Sends each group whose window allows it.
    async fn send(&self, retry_at: &mut HashMap<(String, String), Instant>) -> Result<(), String> {
        let store = &self.store;
        let unsent = store.unsent_alerts(1000).await.map_err(|e| e.to_string())?;
        if unsent.is_empty() {
            return Ok(());
        }
        let rules: HashMap<String, AlertRuleRow> =
            store.all_alert_rules().await.map_err(|e| e.to_string())?.into_iter().map(|r| (r.id.clone(), r)).collect();
        let mut groups: BTreeMap<(String, String), Vec<AlertRow>> = BTreeMap::new();
        for alert in unsent {
            groups.entry((alert.alert.rule_id.clone(), alert.alert.grp.clone())).or_default().push(alert);
        }
        let now = Utc::now().timestamp_millis();
        for (key, alerts) in groups {
            let ids: Vec<i64> = alerts.iter().map(|a| a.id).collect();
            let Some(rule) = rules.get(&key.0) else {
                // Its rule was deleted: nothing to send it to.
                store.alerts_sent(&ids, now, None).await.map_err(|e| e.to_string())?;
                continue;
            };
            if retry_at.get(&key).is_some_and(|at| Instant::now() < *at) {
                continue;
            }
            // In its quiet hours a rule keeps what it raised; the lot goes
            // out as one summary when they end.
            if quiet_hours(rule).is_some_and(|q| q.until(now).is_some()) {
                continue;
            }
            let last = store.last_sent(&key.0, &key.1).await.map_err(|e| e.to_string())?;
            if last.is_some_and(|last| now - last < rule.group_ms) {
                continue;
            }
            let (subject, text) = compose(rule, &alerts, &self.config.base_url);
            match self.deliver(rule, &subject, &text).await {
                Ok(()) => {
                    metrics().messages.with(&[&rule.channel, "sent"]).inc();
                    retry_at.remove(&key);
                    store.alerts_sent(&ids, now, None).await.map_err(|e| e.to_string())?;
                }
                Err(error) => {
                    metrics().messages.with(&[&rule.channel, "failed"]).inc();
                    tracing::warn!(rule = %rule.id, %error, "cannot send an alert; will retry");
                    retry_at.insert(key, Instant::now() + Duration::from_secs(30));
                    store.alerts_sent(&ids, now, Some(&error)).await.map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }

    async fn deliver(&self, rule: &AlertRuleRow, subject: &str, text: &str) -> Result<(), String> {
        match rule.channel.as_str() {
            "email" => self.mail(&rule.target, subject, text).await,
            "slack" | "teams" => self.post(&rule.target, json!({"text": format!("*{subject}*\n{text}")})).await,
            "webhook" => self.post(&rule.target, json!({"subject": subject, "text": text, "rule": rule.id})).await,
            other => Err(format!("unknown channel `{other}`")),
        }
    }

    async fn post(&self, url: &str, body: Value) -> Result<(), String> {
        let url = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
        let response = self.http.post(url).await?.json(&body).send().await.map_err(|e| crate::dest::with_causes(&e))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("the receiver answered {}", response.status()))
        }
    }

    async fn mail(&self, to: &str, subject: &str, text: &str) -> Result<(), String> {
        let smtp = &self.config.smtp;
        if smtp.host.is_empty() {
            return Err("no SMTP server is configured ([smtp] host)".into());
        }
        let message = lettre::Message::builder()
            .from(smtp.from.parse().map_err(|e| format!("[smtp] from: {e}"))?)
            .to(to.parse().map_err(|e| format!("`{to}`: {e}"))?)
            .subject(subject)
            .body(text.to_owned())
            .map_err(|e| e.to_string())?;
        type Transport = lettre::AsyncSmtpTransport<lettre::Tokio1Executor>;
        let mut builder = match smtp.security.as_str() {
            "tls" => Transport::relay(&smtp.host).map_err(|e| e.to_string())?,
            "none" => Transport::builder_dangerous(&smtp.host),
            _ => Transport::starttls_relay(&smtp.host).map_err(|e| e.to_string())?,
        }
        .port(smtp.port)
        .timeout(Some(Duration::from_secs(20)));
        if !smtp.username.is_empty() {
            builder = builder.credentials(lettre::transport::smtp::authentication::Credentials::new(
                smtp.username.clone(),
                smtp.password.clone(),
            ));
        }
        builder.build().send(message).await.map(|_| ()).map_err(|e| format!("SMTP: {e}"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn event(kind: &str, data: &str) -> EventRow {
        EventRow {
            seq: 7,
            tenant: "acme".into(),
            at: 1_767_225_600_000,
            kind: kind.into(),
            workflow: Some("nightly".into()),
            run_id: Some("r1".into()),
            task: Some("load".into()),
            data: data.into(),
        }
    }

    fn rule(kinds: &str, workflow: Option<&str>) -> AlertRuleRow {
        AlertRuleRow {
            id: "al_1".into(),
            tenant: "acme".into(),
            workflow: workflow.map(str::to_owned),
            kinds: kinds.into(),
            channel: "email".into(),
            target: "ops@example.org".into(),
            group_ms: 3_600_000,
            quiet: None,
            wait_ms: None,
            created_at: 0,
        }
    }

    #[test]
    fn a_long_wait_alerts_only_the_rule_it_names() {
        let event = event("run.waiting_long", r#"{"rule": "al_1", "waited_s": 7200, "limit_s": 3600}"#);
        assert_eq!(alert_kind(&event), Some("run.waiting_long"));
        assert!(wants(&rule("run.waiting_long", Some("nightly")), "run.waiting_long", &event));
        let mut other = rule("run.waiting_long", None);
        other.id = "al_2".into();
        assert!(!wants(&other, "run.waiting_long", &event), "another rule's threshold");
        assert!(line("run.waiting_long", &event, None).contains("waited 7200s"));
    }

    #[test]
    fn events_raise_the_alerts_their_rules_name() {
        let failed = event("run.state", r#"{"from":"running","to":"failed"}"#);
        assert_eq!(alert_kind(&failed), Some("run.failed"));
        assert_eq!(alert_kind(&event("run.state", r#"{"from":"queued","to":"running"}"#)), None);
        assert_eq!(alert_kind(&event("task.state", r#"{"from":"running","to":"failed"}"#)), Some("task.failed"));
        assert!(wants(&rule("run.failed,task.failed", None), "run.failed", &failed));
        assert!(wants(&rule("run.failed", Some("nightly")), "run.failed", &failed));
        assert!(!wants(&rule("run.failed", Some("hourly")), "run.failed", &failed), "another workflow's");
        assert!(!wants(&rule("run.succeeded", None), "run.failed", &failed));
        let mut other = failed.clone();
        other.tenant = "globex".into();
        assert!(!wants(&rule("run.failed", None), "run.failed", &other), "another tenant's");
    }

    #[test]
    fn one_alert_is_a_message_and_many_a_summary_with_links() {
        let alert = |seq: i64| AlertRow {
            id: seq,
            alert: NewAlert {
                rule_id: "al_1".into(),
                tenant: "acme".into(),
                seq,
                kind: "run.failed".into(),
                grp: "nightly|run.failed".into(),
                workflow: Some("nightly".into()),
                run_id: Some(format!("r{seq}")),
                message: format!("run r{seq} of nightly failed: load: boom"),
                at: 1_767_225_600_000 + seq * 3_600_000,
            },
            sent_at: None,
            error: None,
        };
        let (subject, text) = compose(&rule("run.failed", None), &[alert(1)], "https://dagr.example.org/");
        assert_eq!(subject, "[dagr] run.failed: nightly");
        assert!(text.contains("load: boom") && text.contains("https://dagr.example.org/ui/runs/r1"), "{text}");
        let many: Vec<AlertRow> = (1..=23).map(alert).collect();
        let (subject, text) = compose(&rule("run.failed", None), &many, "");
        assert_eq!(subject, "[dagr] 23 x run.failed: nightly");
        assert_eq!(text.lines().filter(|l| l.starts_with("- ")).count(), 23, "{text}");
    }
}
