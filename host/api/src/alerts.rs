//! Alert rules and the alerts they raised: `/v1/alerts`. Raising and
//! sending are the [`dagr_notify::alerts::Alerter`]'s.

use axum::extract::State;
use axum::http::StatusCode;
use dagr_notify::alerts::KINDS;
use dagr_protocol::api::{AlertRuleRequest, AlertRuleView, AlertView, ApiError};
use dagr_protocol::now_ms;
use dagr_store::{AlertRow, AlertRuleRow};
use serde::Deserialize;
use serde_json::json;

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{Json, Path, Query};
use crate::views::time;
use crate::{ApiState, Tenant};

type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

/// Rules a tenant may have.
const MAX_RULES: usize = 100;

fn view(row: &AlertRuleRow) -> AlertRuleView {
    AlertRuleView {
        id: row.id.clone(),
        workflow: row.workflow.clone(),
        on: row.kinds.split(',').map(str::to_owned).collect(),
        channel: row.channel.clone(),
        target: row.target.clone(),
        group_seconds: row.group_ms / 1000,
        quiet_hours: row.quiet.as_deref().and_then(|q| serde_json::from_str(q).ok()),
        waiting_longer_than_seconds: row.wait_ms.map(|ms| ms / 1000),
        created_at: time(row.created_at),
    }
}

fn alert_view(row: AlertRow) -> AlertView {
    AlertView {
        id: row.id,
        rule: row.alert.rule_id,
        kind: row.alert.kind,
        workflow: row.alert.workflow,
        run_id: row.alert.run_id,
        message: row.alert.message,
        at: time(row.alert.at),
        sent_at: row.sent_at.map(time),
        error: row.error,
        held_until: None,
    }
}

fn invalid(location: &str, message: impl Into<String>) -> AppError {
    AppError::bad_at("invalid_alert", location, message)
}

/// Longest `waiting_longer_than`.
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(90 * 24 * 3600);

/// A rule's `waiting_longer_than`, in ms: required with `run.waiting_long`,
/// refused without it.
fn wait_limit(req: &AlertRuleRequest) -> ApiResult<Option<i64>> {
    let wants = req.on.iter().any(|k| k == "run.waiting_long");
    match (&req.waiting_longer_than, wants) {
        (None, false) => Ok(None),
        (None, true) => Err(invalid("waiting_longer_than", "`run.waiting_long` needs it: how long, e.g. `2h`")),
        (Some(_), false) => Err(invalid("waiting_longer_than", "only a rule on `run.waiting_long` takes it")),
        (Some(text), true) => match dagr_core::units::parse_duration(text) {
            Ok(d) if d.as_secs() >= 1 && d <= MAX_WAIT => Ok(Some(d.as_millis() as i64)),
            Ok(_) => Err(invalid("waiting_longer_than", "between 1s and 90 days")),
            Err(e) => Err(invalid("waiting_longer_than", e)),
        },
    }
}

/// Checks a rule: its kinds, its one channel and target, its window.
fn check(state: &ApiState, req: &AlertRuleRequest) -> ApiResult<(String, String, i64)> {
    if req.on.is_empty() {
        return Err(invalid("on", format!("name at least one of: {}", KINDS.join(", "))));
    }
    if let Some(bad) = req.on.iter().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(invalid("on", format!("`{bad}` is not an alert kind; one of: {}", KINDS.join(", "))));
    }
    let [(channel, target)] = req.channel.iter().collect::<Vec<_>>()[..] else {
        return Err(invalid("channel", "give exactly one of: email, slack, teams, webhook"));
    };
    match channel.as_str() {
        "email" => {
            if target.len() > 254 || target.parse::<lettre::Address>().is_err() {
                return Err(invalid("channel.email", format!("`{target}` is not an email address")));
            }
        }
        "slack" | "teams" | "webhook" => {
            dagr_notify::check_url(target, state.config.webhooks_allow_private)
                .map_err(|message| invalid(&format!("channel.{channel}"), message))?;
        }
        other => return Err(invalid("channel", format!("`{other}` is not a channel: email, slack, teams or webhook"))),
    }
    let group = match &req.group {
        None => 3_600_000,
        Some(text) => match dagr_core::units::parse_duration(text) {
            Ok(d) if d.as_millis() >= 1000 && d.as_secs() <= 7 * 24 * 3600 => d.as_millis() as i64,
            Ok(_) => return Err(invalid("group", "between 1s and 7 days")),
            Err(e) => return Err(invalid("group", e)),
        },
    };
    if let Some(q) = &req.quiet_hours {
        dagr_core::quiet::QuietHours::new(&q.from, &q.to, &q.timezone)
            .map_err(|(field, message)| invalid(&format!("quiet_hours.{field}"), message))?;
    }
    Ok((channel.clone(), target.clone(), group))
}

/// Makes an alert rule.
#[utoipa::path(
    post, path = "/v1/alerts", tag = "alerts", request_body = AlertRuleRequest,
    responses((status = 201, body = AlertRuleView), (status = 400, body = ApiError), (status = 409, body = ApiError))
)]
pub async fn create_alert_rule(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Json(req): Json<AlertRuleRequest>,
) -> Answer<AlertRuleView> {
    let (channel, target, group_ms) = check(&state, &req)?;
    let wait_ms = wait_limit(&req)?;
    if let Some(workflow) = &req.workflow
        && (workflow.is_empty() || workflow.len() > 128)
    {
        return Err(invalid("workflow", "a workflow name is 1 to 128 characters"));
    }
    if state.store.list_alert_rules(&tenant.0).await?.len() >= MAX_RULES {
        return Err(AppError::Conflict(format!("the tenant has {MAX_RULES} alert rules, the most it may have")));
    }
    let mut kinds = req.on.clone();
    kinds.sort();
    kinds.dedup();
    let row = AlertRuleRow {
        id: format!("al_{}", uuid::Uuid::new_v4().simple()),
        tenant: tenant.0.clone(),
        workflow: req.workflow.clone(),
        kinds: kinds.join(","),
        channel,
        target,
        group_ms,
        quiet: req.quiet_hours.as_ref().map(|q| serde_json::to_string(q).unwrap_or_default()),
        wait_ms,
        created_at: now_ms(),
    };
    state.store.create_alert_rule(&row).await?;
    audit(&state, &caller, &tenant.0, "alert.create", &row.id, json!({"on": kinds, "channel": row.channel})).await;
    Ok((StatusCode::CREATED, axum::Json(view(&row))))
}

/// The tenant's alert rules.
#[utoipa::path(get, path = "/v1/alerts", tag = "alerts", responses((status = 200, body = Vec<AlertRuleView>)))]
pub async fn list_alert_rules(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<AlertRuleView>> {
    let rows = state.store.list_alert_rules(&tenant.0).await?;
    Ok((StatusCode::OK, axum::Json(rows.iter().map(view).collect())))
}

/// An alert rule.
#[utoipa::path(
    get, path = "/v1/alerts/{id}", tag = "alerts", params(("id" = String, Path)),
    responses((status = 200, body = AlertRuleView), (status = 404, body = ApiError))
)]
pub async fn get_alert_rule(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Answer<AlertRuleView> {
    let row = state.store.get_alert_rule(&tenant.0, &id).await?;
    let row = row.ok_or_else(|| AppError::NotFound(format!("there is no alert rule `{id}`")))?;
    Ok((StatusCode::OK, axum::Json(view(&row))))
}

/// Deletes an alert rule (what it raised stays in the history).
#[utoipa::path(
    delete, path = "/v1/alerts/{id}", tag = "alerts", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn delete_alert_rule(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if !state.store.delete_alert_rule(&tenant.0, &id).await? {
        return Err(AppError::NotFound(format!("there is no alert rule `{id}`")));
    }
    audit(&state, &caller, &tenant.0, "alert.delete", &id, json!({})).await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    /// Alerts older than this one (its id): the next page.
    #[param(minimum = 1)]
    pub before: Option<i64>,
    /// Most alerts, newest first, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The alerts raised for the tenant, newest first: what, when, and when
/// (or why not) they went out.
#[utoipa::path(
    get, path = "/v1/alerts/history", tag = "alerts", params(HistoryQuery),
    responses((status = 200, body = Vec<AlertView>), (status = 400, body = ApiError))
)]
pub async fn alert_history(
    State(state): State<ApiState>,
    tenant: Tenant,
    Query(q): Query<HistoryQuery>,
) -> Answer<Vec<AlertView>> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 1000"));
    }
    if q.before.is_some_and(|b| b < 1) {
        return Err(AppError::bad_at("bad_query", "?before", "must be 1 or more"));
    }
    let rows = state.store.alert_history(&tenant.0, q.before, limit).await?;
    // Unsent alerts of a rule in its quiet hours say until when they wait.
    let now = now_ms();
    let held: std::collections::HashMap<String, i64> = state
        .store
        .list_alert_rules(&tenant.0)
        .await?
        .iter()
        .filter_map(|r| Some((r.id.clone(), dagr_notify::alerts::quiet_hours(r)?.until(now)?)))
        .collect();
    let views = rows
        .into_iter()
        .map(|row| {
            let until = if row.sent_at.is_none() { held.get(&row.alert.rule_id).copied() } else { None };
            AlertView { held_until: until.map(time), ..alert_view(row) }
        })
        .collect();
    Ok((StatusCode::OK, axum::Json(views)))
}
