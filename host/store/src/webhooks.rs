//! Webhook subscriptions and their delivery log; event sinks' cursors.
//!
//! The event log is the outbox: a subscription keeps the number of the
//! last event it delivered (its cursor), and a deliverer reads the events
//! after it, in order. A cursor only moves forward, so two deliverers
//! racing (a leader change) can repeat a delivery, never lose one.

use async_trait::async_trait;

use crate::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRow {
    pub id: String,
    pub tenant: String,
    pub url: String,
    /// Comma-separated kinds; empty for every kind.
    pub kinds: String,
    pub workflow: Option<String>,
    /// The signing secret, sealed with the node's secrets key (named
    /// [`webhook_secret_name`]); rows written before sealing hold it
    /// plain.
    pub secret: String,
    /// Most events one request carries (1: one per request).
    pub batch: i64,
    pub cursor: i64,
    pub state: WebhookState,
    pub failing_since: Option<i64>,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
}

/// The name a webhook's signing secret is sealed under (its tenant is the
/// webhook's).
pub fn webhook_secret_name(id: &str) -> String {
    format!("webhook:{id}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookState {
    Active,
    Disabled,
}

impl WebhookState {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookState::Active => "active",
            WebhookState::Disabled => "disabled",
        }
    }

    pub fn parse(text: &str) -> Option<WebhookState> {
        match text {
            "active" => Some(WebhookState::Active),
            "disabled" => Some(WebhookState::Disabled),
            _ => None,
        }
    }
}

/// One attempt to deliver one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    pub webhook_id: String,
    pub seq: i64,
    pub attempt: i64,
    pub at: i64,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<i64>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

#[async_trait]
pub trait WebhookStore: Send + Sync {
    async fn create_webhook(&self, row: &WebhookRow) -> Result<()>;
    async fn get_webhook(&self, tenant: &str, id: &str) -> Result<Option<WebhookRow>>;
    async fn list_webhooks(&self, tenant: &str) -> Result<Vec<WebhookRow>>;
    /// Every active subscription, of every tenant (for the deliverer).
    async fn active_webhooks(&self) -> Result<Vec<WebhookRow>>;
    /// Whether it existed.
    async fn delete_webhook(&self, tenant: &str, id: &str) -> Result<bool>;
    /// Moves the cursor forward (never back).
    async fn advance_webhook(&self, id: &str, cursor: i64) -> Result<()>;
    /// Sets when deliveries started failing (`None`: they succeed again).
    async fn set_webhook_failing(&self, id: &str, since: Option<i64>) -> Result<()>;
    /// Disables it (`reason`), or enables it again (`None`), clearing its failure.
    async fn set_webhook_disabled(&self, id: &str, reason: Option<&str>) -> Result<()>;
    /// Records attempts (of one subscription), keeping its newest `keep`.
    async fn record_deliveries(&self, rows: &[DeliveryRow], keep: i64) -> Result<()>;
    /// The newest attempts first, at most `limit`.
    async fn deliveries(&self, webhook_id: &str, limit: i64) -> Result<Vec<DeliveryRow>>;

    /// Webhooks after `after` by id, at most `limit`: (tenant, id,
    /// stored secret), for re-sealing under a new key.
    async fn webhook_secrets_page(&self, after: Option<&str>, limit: i64) -> Result<Vec<(String, String, String)>>;
    /// Replaces a webhook's stored secret if it still is `expected`;
    /// whether it did.
    async fn reseal_webhook_secret(&self, id: &str, expected: &str, value: &str) -> Result<bool>;

    /// Where an event sink is in the log; set to `start` when it has no
    /// place yet.
    async fn sink_cursor(&self, name: &str, start: i64) -> Result<i64>;
    /// Moves a sink's cursor forward (never back).
    async fn advance_sink(&self, name: &str, cursor: i64) -> Result<()>;
}
