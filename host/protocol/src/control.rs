//! How the API reaches the engine.
//!
//! The API writes durable things (runs, commands) to the store itself and
//! then nudges the engine. In `dagr serve` the nudge is a channel send and
//! waiting is a subscription; in a cluster the API is another process and
//! falls back to polling the store. Both implement [`Control`].

use std::time::Duration;

use async_trait::async_trait;

/// The result of a command, as the engine recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommandOutcome {
    pub ok: bool,
    pub message: String,
}

#[async_trait]
pub trait Control: Send + Sync {
    /// New commands or runs are in the store.
    fn wake(&self);

    /// A workflow was applied or deleted: its schedule may have changed.
    fn workflow_changed(&self, tenant: &str, name: &str);

    /// A tenant was created or its limits changed.
    fn tenant_changed(&self, tenant: &str);

    /// Waits until the engine has processed command `id`; `None` on timeout.
    async fn wait_command(&self, id: i64, timeout: Duration) -> Option<CommandOutcome>;

    /// Waits until run `run_id` is finished (or paused with nothing running);
    /// returns its state, or `None` on timeout.
    async fn wait_run(&self, run_id: &str, timeout: Duration) -> Option<String>;

    /// The cluster as this API sees it: its members with their role,
    /// address, slots and load. `None` on a single node (`dagr serve`).
    async fn cluster(&self) -> Option<serde_json::Value> {
        None
    }
}
