//! Alert rules and the alerts they raise.
//!
//! An alert is raised once per rule and event (`(rule_id, seq)` is
//! unique, so reading an event twice raises nothing twice) and goes out
//! later, alone or in a summary with the other alerts of its group.

use async_trait::async_trait;

use crate::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertRuleRow {
    pub id: String,
    pub tenant: String,
    pub workflow: Option<String>,
    /// Comma-separated alert kinds.
    pub kinds: String,
    /// `email`, `slack`, `teams` or `webhook`.
    pub channel: String,
    pub target: String,
    pub group_ms: i64,
    /// Quiet hours, JSON (`{"from", "to", "timezone"}`).
    pub quiet: Option<String>,
    /// For `run.waiting_long`: the wait that alerts.
    pub wait_ms: Option<i64>,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAlert {
    pub rule_id: String,
    pub tenant: String,
    pub seq: i64,
    pub kind: String,
    pub grp: String,
    pub workflow: Option<String>,
    pub run_id: Option<String>,
    pub message: String,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertRow {
    pub id: i64,
    pub alert: NewAlert,
    pub sent_at: Option<i64>,
    pub error: Option<String>,
}

/// A run whose deadline has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueSla {
    pub run_id: String,
    pub tenant: String,
    pub workflow: String,
    pub due_at: i64,
    /// When the run finished, if it has.
    pub finished_at: Option<i64>,
}

#[async_trait]
pub trait AlertStore: Send + Sync {
    async fn create_alert_rule(&self, row: &AlertRuleRow) -> Result<()>;
    async fn list_alert_rules(&self, tenant: &str) -> Result<Vec<AlertRuleRow>>;
    async fn get_alert_rule(&self, tenant: &str, id: &str) -> Result<Option<AlertRuleRow>>;
    /// Whether it existed.
    async fn delete_alert_rule(&self, tenant: &str, id: &str) -> Result<bool>;
    /// Every rule of every tenant (for the alerter).
    async fn all_alert_rules(&self) -> Result<Vec<AlertRuleRow>>;
    /// Raises alerts; one already raised for its rule and event is left.
    async fn raise_alerts(&self, alerts: &[NewAlert]) -> Result<()>;
    /// Alerts not sent yet, oldest first, at most `limit`.
    async fn unsent_alerts(&self, limit: i64) -> Result<Vec<AlertRow>>;
    /// When the group's last message went out.
    async fn last_sent(&self, rule_id: &str, grp: &str) -> Result<Option<i64>>;
    /// Marks alerts sent at `at` (`error`: their sending failed; they stay unsent).
    async fn alerts_sent(&self, ids: &[i64], at: i64, error: Option<&str>) -> Result<()>;
    /// A tenant's alerts, newest first, before `before` (an alert id).
    async fn alert_history(&self, tenant: &str, before: Option<i64>, limit: i64) -> Result<Vec<AlertRow>>;
    /// A tenant's runs (of `workflow`, if given) waiting for their upstream
    /// that were created in (`after`, `until`]: (id, workflow, created_at),
    /// oldest first, at most `limit`.
    async fn long_waiting_runs(
        &self,
        tenant: &str,
        workflow: Option<&str>,
        after: i64,
        until: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, i64)>>;
    /// Runs whose deadline has passed and that were not judged yet, at
    /// most `limit`, the most overdue first.
    async fn due_slas(&self, now: i64, limit: i64) -> Result<Vec<DueSla>>;
    /// Records a run's deadline as judged: missed (reported `at`) or met
    /// (`at` = 0).
    async fn sla_judged(&self, run_id: &str, at: i64) -> Result<()>;
}
