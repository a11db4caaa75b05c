//! dagr's HTTP API.
//!
//! # Brief overview
//!
//! - [`router`] builds the axum [`Router`](axum::Router) from an
//!   [`ApiState`]: the [`Store`](dagr_store::Store), a
//!   [`Control`](dagr_protocol::control::Control) to reach the engine, and the
//!   [`PluginDirectory`](dagr_protocol::plugins::PluginDirectory).
//! - Every route is declared with `#[utoipa::path]` and registered through
//!   utoipa-axum, so `/openapi.json` is generated from the code and the route
//!   table ([`routes`]) can be enumerated by tests.
//! - The API writes durable things itself (definitions, runs, commands) and
//!   then wakes the engine; it never changes run state directly.
//! - Errors are [`AppError`](error::AppError): JSON `{code, message,
//!   location?}`, 4xx for the caller's mistakes, 500 only for dagr's own.
//! - Plugin uploads (`POST /v1/plugins`) are validated and compiled by an
//!   [`Inspector`]: a separate process under CPU, memory and time limits.
//! - Every route but `/healthz` needs a bearer token: [`auth::authenticate`]
//!   checks it and sets the caller's [`Tenant`] and [`auth::Caller`] request
//!   extensions; handlers scope everything by that tenant, and another
//!   tenant's object answers 404. Tenants, tokens, secrets and the audit log
//!   have their endpoints in `admin`; [`auth::audit`] records who did what.

mod admin;
mod alerts;
pub mod auth;
mod backfills;
mod contract;
pub mod error;
mod events;
pub mod extract;
pub mod gate;
mod handlers;
pub mod inspect;
mod jobs;
mod outer;
mod plugins;
mod tasks;
pub mod ui;
mod unread;
mod views;
mod webhooks;
mod workflows;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use dagr_protocol::control::Control;
use dagr_protocol::plugins::PluginDirectory;
use dagr_store::Store;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::AppError;
pub use crate::events::EventHub;
pub use crate::inspect::{InspectLimits, Inspector};
pub use crate::plugins::UploadConfig;
pub use crate::unread::close_if_unread;

/// The tenant a request acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Set by `auth::authenticate` only: a handler reached without it
        // must not act for any tenant.
        parts
            .extensions
            .get::<Tenant>()
            .cloned()
            .ok_or_else(|| AppError::internal("a request reached a handler without a tenant"))
    }
}

/// The tenant of a single-tenant installation (`dagr serve` without auth).
pub const DEFAULT_TENANT: &str = "default";

/// Limits the API enforces.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Largest request body; also the most a YAML definition may expand to
    /// with its aliases (`[api] max_body`).
    pub max_body_bytes: usize,
    /// Deepest nesting of a request body or definition (`[api] max_depth`).
    pub max_depth: usize,
    /// How long an action waits for the engine before answering 202.
    pub action_wait: Duration,
    /// Longest a `wait=true` job request may wait.
    pub max_job_wait: Duration,
    /// Most runs one backfill may create (`[api] max_backfill_runs`).
    pub max_backfill_runs: usize,
    /// A tenant's unfinished runs past which a backfill is refused, unless
    /// the tenant has its own limit (`[api] max_unfinished_runs`).
    pub max_unfinished_runs: usize,
    /// Most tasks an ad-hoc job may have.
    pub max_job_tasks: usize,
    /// Plugin uploads (their own size limit; `max_body_bytes` does not apply).
    pub uploads: UploadConfig,
    /// Seals tenants' secrets before they are stored.
    pub secrets: dagr_protocol::sealed::SecretKey,
    /// How often the event streams' reader looks for new events.
    pub event_poll: Duration,
    /// Event streams open at once.
    pub max_event_streams: usize,
    /// Bytes of the newest events kept in memory for the event streams.
    pub event_buffer: usize,
    /// `/metrics` without a token (`[metrics] public`); else the admin token.
    pub metrics_public: bool,
    /// Whether webhooks may go to loopback or private addresses.
    pub webhooks_allow_private: bool,
    /// Webhooks a tenant may have.
    pub max_webhooks: usize,
    /// How long a web UI session lasts (`[api] ui_session`).
    pub ui_session: Duration,
    /// Whether the UI's session cookie is `Secure` (`[api] ui_secure_cookie`:
    /// set it when users reach dagr over HTTPS).
    pub ui_secure_cookie: bool,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body_bytes: 4 << 20,
            max_depth: dagr_core::document::DEFAULT_MAX_DEPTH,
            action_wait: Duration::from_secs(10),
            max_job_wait: Duration::from_secs(600),
            max_backfill_runs: 10_000,
            max_unfinished_runs: 100_000,
            max_job_tasks: 100,
            uploads: UploadConfig::default(),
            // A key that lives as long as the process: only for an API whose
            // secrets nobody will read after it (tests); nodes configure one.
            secrets: dagr_protocol::sealed::SecretKey::generate(),
            event_poll: Duration::from_millis(50),
            max_event_streams: 1000,
            event_buffer: 32 << 20,
            metrics_public: false,
            webhooks_allow_private: false,
            max_webhooks: 20,
            ui_session: Duration::from_secs(12 * 3600),
            ui_secure_cookie: false,
        }
    }
}

impl ApiConfig {
    /// The limits of tenants' documents: bodies, definitions, params.
    pub fn document_limits(&self) -> dagr_core::document::DocumentLimits {
        dagr_core::document::DocumentLimits {
            max_depth: self.max_depth,
            depth_key: "[api] max_depth",
            max_bytes: self.max_body_bytes,
            bytes_key: "[api] max_body",
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    pub control: Arc<dyn Control>,
    pub plugins: Arc<dyn PluginDirectory>,
    pub config: Arc<ApiConfig>,
    /// Validated workflow versions, so that a trigger does not parse and
    /// validate its definition again.
    pub versions: Arc<dagr_core::versions::VersionCache>,
    /// Reads new events for the event streams of this process.
    pub events: Arc<EventHub>,
}

impl ApiState {
    /// The state of an API on `store`, reaching the engine through `control`.
    pub fn new(
        store: Arc<dyn Store>,
        control: Arc<dyn Control>,
        plugins: Arc<dyn PluginDirectory>,
        config: ApiConfig,
    ) -> ApiState {
        let events = EventHub::new(store.clone(), config.event_poll, config.max_event_streams, config.event_buffer);
        let hub = events.clone();
        events::register_metrics();
        dagr_metrics::global()
            .gauge_fn("dagr_event_streams", "Event streams (SSE) open on this API.", move || hub.streams() as f64);
        ApiState { store, control, plugins, config: Arc::new(config), versions: Default::default(), events }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "dagr", description = "DAG workflows whose tasks are sandboxed WebAssembly components."),
    tags(
        (name = "workflows", description = "Workflow definitions and their versions"),
        (name = "runs", description = "Runs (workflow instances), their tasks and logs"),
        (name = "backfills", description = "Runs over a range of logical times"),
        (name = "jobs", description = "Ad-hoc jobs: a plugin or a small DAG, no registered workflow"),
        (name = "plugins", description = "Task types"),
        (name = "tenants", description = "Tenants, their limits and tokens (the admin token only)"),
        (name = "tokens", description = "The caller's tenant's API tokens (the admin scope)"),
        (name = "secrets", description = "The tenant's secrets: write-only"),
        (name = "audit", description = "Who did what, per tenant"),
        (name = "events", description = "The tenant's event stream (Server-Sent Events or pages)"),
        (name = "alerts", description = "Alert rules (email, Slack, Teams, webhook) and the alerts raised"),
        (name = "webhooks", description = "The tenant's events delivered to URLs, signed (Standard Webhooks)"),
        (name = "system", description = "Health")
    )
)]
struct ApiDoc;

/// The routes with their OpenAPI description.
fn api_router() -> OpenApiRouter<ApiState> {
    use backfills::*;
    use handlers::*;
    use jobs::*;
    use workflows::*;
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(apply_workflow, list_workflows))
        .routes(routes!(get_workflow, delete_workflow))
        .routes(routes!(list_versions))
        .routes(routes!(trigger_run, list_workflow_runs))
        .routes(routes!(list_runs))
        .routes(routes!(tasks::get_run))
        .routes(routes!(tasks::list_run_tasks))
        .routes(routes!(kill_run))
        .routes(routes!(pause_run))
        .routes(routes!(resume_run))
        .routes(routes!(rerun_run))
        .routes(routes!(mark_run_failed))
        .routes(routes!(run_events))
        .routes(routes!(events::events))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(webhooks::get_webhook, webhooks::delete_webhook))
        .routes(routes!(webhooks::enable_webhook))
        .routes(routes!(webhooks::webhook_deliveries))
        .routes(routes!(alerts::create_alert_rule, alerts::list_alert_rules))
        .routes(routes!(alerts::get_alert_rule, alerts::delete_alert_rule))
        .routes(routes!(alerts::alert_history))
        .routes(routes!(tasks::get_task))
        .routes(routes!(rerun_task))
        .routes(routes!(force_success))
        .routes(routes!(task_logs))
        .routes(routes!(create_backfill, list_backfills))
        .routes(routes!(get_backfill))
        .routes(routes!(create_job))
        .routes(routes!(admin::create_tenant, admin::list_tenants))
        .routes(routes!(admin::get_tenant, admin::update_tenant))
        .routes(routes!(admin::create_tenant_token, admin::list_tenant_tokens))
        .routes(routes!(admin::revoke_tenant_token))
        .routes(routes!(admin::create_token, admin::list_tokens))
        .routes(routes!(admin::revoke_token))
        .routes(routes!(admin::put_secret, admin::delete_secret))
        .routes(routes!(admin::list_secrets))
        .routes(routes!(admin::list_audit))
        .routes(routes!(admin::cluster))
        .routes(routes!(plugins::list_plugins, plugins::upload_plugin))
        .routes(routes!(plugins::get_plugin))
        .routes(routes!(plugins::delete_plugin))
        .routes(routes!(outer::lineage))
        .routes(routes!(outer::run_upstream))
        .routes(routes!(outer::pause_schedule))
        .routes(routes!(outer::resume_schedule))
}

/// The OpenAPI document as the routes declare themselves.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}

/// The OpenAPI document served at `/openapi.json`: the routes' own
/// declarations completed with what holds for many of them (security,
/// the answers of authentication, limits and rates; see `contract`).
pub fn openapi_document() -> serde_json::Value {
    let mut doc = serde_json::to_value(openapi()).unwrap_or_default();
    contract::complete(&mut doc);
    doc
}

/// Every route as (method, path template), from the OpenAPI document.
pub fn routes() -> Vec<(String, String)> {
    let doc = openapi();
    let mut out = Vec::new();
    for (path, item) in doc.paths.paths {
        let methods = [
            ("GET", item.get.is_some()),
            ("POST", item.post.is_some()),
            ("PUT", item.put.is_some()),
            ("DELETE", item.delete.is_some()),
            ("PATCH", item.patch.is_some()),
        ];
        for (method, present) in methods {
            if present {
                out.push((method.to_owned(), path.clone()));
            }
        }
    }
    out.sort();
    out
}

/// The HTTP API.
pub fn router(state: ApiState) -> axum::Router {
    let max_body = state.config.max_body_bytes;
    let (router, _) = api_router().split_for_parts();
    let doc = Arc::new(openapi_document());
    router
        .route(
            auth::METRICS_ROUTE,
            axum::routing::get(|| async {
                let headers = [(axum::http::header::CONTENT_TYPE, dagr_metrics::CONTENT_TYPE)];
                (headers, dagr_metrics::global().render())
            }),
        )
        .route(
            auth::OPENAPI_ROUTE,
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .fallback(|| async { AppError::NotFound("no such endpoint; see /openapi.json".into()) })
        // axum adds the `Allow` header to this answer.
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(axum::middleware::from_fn(unread::close_if_unread))
        .merge(ui::router())
        .with_state(state)
}
