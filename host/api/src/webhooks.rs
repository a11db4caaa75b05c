//! Webhook subscriptions: `/v1/webhooks`. Deliveries are the
//! [`dagr_notify::Deliverer`]'s.

use axum::extract::State;
use axum::http::StatusCode;
use dagr_core::events::KindFilter;
use dagr_protocol::api::{ApiError, DeliveryView, WebhookRequest, WebhookView};
use dagr_protocol::now_ms;
use dagr_store::{WebhookRow, WebhookState, webhook_secret_name};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{Json, Path, Query};
use crate::views::time;
use crate::{ApiState, Tenant};

type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

/// The most events one delivery may carry.
const MAX_BATCH: u32 = 100;

fn view(row: &WebhookRow, secret: Option<String>) -> WebhookView {
    WebhookView {
        id: row.id.clone(),
        url: row.url.clone(),
        kinds: KindFilter::parse(&row.kinds).map(|k| k.kinds().to_vec()).unwrap_or_default(),
        workflow: row.workflow.clone(),
        state: row.state.as_str().into(),
        cursor: row.cursor,
        failing_since: row.failing_since.map(time),
        disabled_reason: row.disabled_reason.clone(),
        created_at: time(row.created_at),
        batch: row.batch,
        secret,
    }
}

async fn find(state: &ApiState, tenant: &str, id: &str) -> ApiResult<WebhookRow> {
    state.store.get_webhook(tenant, id).await?.ok_or_else(|| AppError::NotFound(format!("there is no webhook `{id}`")))
}

/// Subscribes a URL to the tenant's events, from now on. The answer holds
/// the signing secret, shown only now.
#[utoipa::path(
    post, path = "/v1/webhooks", tag = "webhooks", request_body = WebhookRequest,
    responses((status = 201, body = WebhookView), (status = 400, body = ApiError), (status = 409, body = ApiError))
)]
pub async fn create_webhook(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Json(req): Json<WebhookRequest>,
) -> Answer<WebhookView> {
    let url = dagr_notify::check_url(&req.url, state.config.webhooks_allow_private)
        .map_err(|message| AppError::bad_at("invalid_webhook", "url", message))?;
    let kinds = KindFilter::parse(&req.kinds.join(","))
        .map_err(|message| AppError::bad_at("invalid_webhook", "kinds", message))?;
    if let Some(workflow) = &req.workflow
        && (workflow.is_empty() || workflow.len() > 128)
    {
        return Err(AppError::bad_at("invalid_webhook", "workflow", "a workflow name is 1 to 128 characters"));
    }
    let batch = req.batch.unwrap_or(1);
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(AppError::bad_at("invalid_webhook", "batch", format!("must be between 1 and {MAX_BATCH}")));
    }
    let max = state.config.max_webhooks;
    if state.store.list_webhooks(&tenant.0).await?.len() >= max {
        return Err(AppError::Conflict(format!(
            "the tenant has {max} webhooks, the most it may have ([webhooks] max_per_tenant); delete one first"
        )));
    }
    let id = format!("wh_{}", uuid::Uuid::new_v4().simple());
    // Stored sealed; shown once, in this answer.
    let secret = dagr_notify::new_secret();
    let row = WebhookRow {
        secret: state.config.secrets.seal(&tenant.0, &webhook_secret_name(&id), &secret),
        id,
        tenant: tenant.0.clone(),
        url: url.to_string(),
        kinds: kinds.to_list(),
        workflow: req.workflow.clone(),
        batch: i64::from(batch),
        cursor: state.store.last_event_seq().await?,
        state: WebhookState::Active,
        failing_since: None,
        disabled_reason: None,
        created_at: now_ms(),
    };
    state.store.create_webhook(&row).await?;
    audit(&state, &caller, &tenant.0, "webhook.create", &row.id, json!({"url": row.url, "kinds": row.kinds})).await;
    Ok((StatusCode::CREATED, axum::Json(view(&row, Some(secret)))))
}

/// The tenant's webhooks (without their secrets).
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", responses((status = 200, body = Vec<WebhookView>)))]
pub async fn list_webhooks(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<WebhookView>> {
    let rows = state.store.list_webhooks(&tenant.0).await?;
    Ok((StatusCode::OK, axum::Json(rows.iter().map(|r| view(r, None)).collect())))
}

/// A webhook: its state, its cursor, why it is failing or disabled.
#[utoipa::path(
    get, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 200, body = WebhookView), (status = 404, body = ApiError))
)]
pub async fn get_webhook(State(state): State<ApiState>, tenant: Tenant, Path(id): Path<String>) -> Answer<WebhookView> {
    Ok((StatusCode::OK, axum::Json(view(&find(&state, &tenant.0, &id).await?, None))))
}

/// Deletes a webhook and its delivery log.
#[utoipa::path(
    delete, path = "/v1/webhooks/{id}", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn delete_webhook(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if !state.store.delete_webhook(&tenant.0, &id).await? {
        return Err(AppError::NotFound(format!("there is no webhook `{id}`")));
    }
    audit(&state, &caller, &tenant.0, "webhook.delete", &id, json!({})).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Enables a disabled webhook again: deliveries resume where they stopped.
#[utoipa::path(
    post, path = "/v1/webhooks/{id}/enable", tag = "webhooks", params(("id" = String, Path)),
    responses((status = 200, body = WebhookView), (status = 404, body = ApiError))
)]
pub async fn enable_webhook(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(id): Path<String>,
) -> Answer<WebhookView> {
    find(&state, &tenant.0, &id).await?;
    state.store.set_webhook_disabled(&id, None).await?;
    audit(&state, &caller, &tenant.0, "webhook.enable", &id, json!({})).await;
    Ok((StatusCode::OK, axum::Json(view(&find(&state, &tenant.0, &id).await?, None))))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    /// Most attempts, newest first, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// A webhook's newest delivery attempts: event, status, error, duration.
#[utoipa::path(
    get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", params(("id" = String, Path), DeliveriesQuery),
    responses((status = 200, body = Vec<DeliveryView>), (status = 404, body = ApiError))
)]
pub async fn webhook_deliveries(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
    Query(q): Query<DeliveriesQuery>,
) -> Answer<Vec<DeliveryView>> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 1000"));
    }
    find(&state, &tenant.0, &id).await?;
    let rows = state.store.deliveries(&id, limit).await?;
    let views = rows
        .into_iter()
        .map(|d| DeliveryView {
            seq: d.seq,
            attempt: d.attempt,
            at: time(d.at),
            status: d.status,
            error: d.error,
            duration_ms: d.duration_ms,
        })
        .collect();
    Ok((StatusCode::OK, axum::Json(views)))
}
