//! Open events on NATS: the event log published, every tenant's, on
//! subjects `<prefix>.<tenant>.<kind>` (Buffalo's asynchronous "open
//! events", on a broker others already run).
//!
//! At least once, in order, resuming after a restart: the publisher's
//! cursor is in the store and moves after the server confirmed a batch
//! (a flush); each message carries `Nats-Msg-Id: evt_<number>`, which
//! JetStream streams use to drop a repeat.

use std::sync::Arc;
use std::time::Duration;

use dagr_store::{EventScope, Store};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::deliver::event_view;

/// Events published at once, then confirmed.
const PAGE: i64 = 500;
/// The cursor's name in the store.
const SINK: &str = "nats";

/// `[nats]`.
#[derive(Debug, Clone)]
pub struct NatsConfig {
    /// `nats://host:port`.
    pub url: String,
    /// Subjects are `<prefix>.<tenant>.<kind>`.
    pub prefix: String,
    /// How often to look for new events.
    pub poll: Duration,
}

/// The subject of an event.
pub fn subject(prefix: &str, tenant: &str, kind: &str) -> String {
    // A subject's tokens are separated by dots and may not hold spaces or
    // wildcards; tenant names and kinds have none of those but dots.
    let clean = |s: &str| s.replace([' ', '*', '>', '\t', '\r', '\n'], "_");
    format!("{}.{}.{}", clean(prefix), clean(tenant).replace('.', "_"), clean(kind))
}

/// Publishes while `active` is true (the leader, in a cluster).
pub fn start(store: Arc<dyn Store>, config: NatsConfig, active: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(200);
        loop {
            if *active.borrow() {
                match publish(&store, &config, &active).await {
                    Ok(()) => delay = Duration::from_millis(200),
                    Err(e) => {
                        tracing::warn!(error = %e, url = %config.url, "the NATS sink stopped; will reconnect");
                        delay = (delay * 2).min(Duration::from_secs(10));
                    }
                }
            }
            tokio::time::sleep(delay.max(config.poll)).await;
        }
    })
}

async fn publish(store: &Arc<dyn Store>, config: &NatsConfig, active: &watch::Receiver<bool>) -> Result<(), String> {
    let client = async_nats::connect(config.url.as_str()).await.map_err(|e| format!("cannot connect: {e}"))?;
    let head = store.last_event_seq().await.map_err(|e| e.to_string())?;
    let mut cursor = store.sink_cursor(SINK, head).await.map_err(|e| e.to_string())?;
    tracing::info!(url = %config.url, cursor, "publishing events to NATS");
    let scope = EventScope::default();
    while *active.borrow() {
        let events = store.event_page(&scope, cursor, PAGE).await.map_err(|e| e.to_string())?;
        let Some(last) = events.last().map(|e| e.seq) else {
            tokio::time::sleep(config.poll).await;
            continue;
        };
        for event in &events {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, format!("evt_{}", event.seq).as_str());
            let body = serde_json::to_vec(&event_view(event)).map_err(|e| e.to_string())?;
            client
                .publish_with_headers(subject(&config.prefix, &event.tenant, &event.kind), headers, body.into())
                .await
                .map_err(|e| format!("cannot publish: {e}"))?;
        }
        // The server has them all before the cursor moves past them.
        client.flush().await.map_err(|e| format!("cannot flush: {e}"))?;
        store.advance_sink(SINK, last).await.map_err(|e| e.to_string())?;
        cursor = last;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_prefix_tenant_kind_with_no_stray_tokens() {
        assert_eq!(subject("dagr", "acme", "run.state"), "dagr.acme.run.state");
        assert_eq!(subject("dagr", "a.b c", "x>y"), "dagr.a_b_c.x_y");
    }
}
