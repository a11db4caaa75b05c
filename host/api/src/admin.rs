//! Tenants, tokens, secrets and the audit log: the handlers, and the
//! runs-per-minute check the run-creating handlers call.
//!
//! Tenant management (`/v1/tenants…`) is for the admin token only; a tenant
//! token with the `admin` scope manages its own tenant's tokens under
//! `/v1/tokens`. Secrets are write-only: no response ever carries a value.

use axum::extract::State;
use axum::http::StatusCode;
use dagr_protocol::api::ApiError;
use dagr_protocol::now_ms;
use dagr_protocol::tenancy::{
    ADMIN_TENANT, AuditList, AuditView, CreateTenant, CreateToken, CreatedToken, PutSecret, SecretView, TenantLimits,
    TenantView, TokenView, UpdateTenant,
};
use dagr_store::RunKind;
use dagr_store::tenancy::{TenantRow, TokenRow};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Caller, audit, generate_token, parse_scopes, scopes_text};
use crate::error::{ApiResult, AppError};
use crate::extract::{Json, Path, Query};
use crate::views::time;
use crate::{ApiState, Tenant};

type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

/// Longest secret value, in characters (the schema's `maxLength`).
const MAX_SECRET_CHARS: usize = 64 << 10;

// Limits and names -------------------------------------------------------------------

/// A tenant's limits; `None` for a tenant that does not exist.
pub async fn tenant_limits(state: &ApiState, tenant: &str) -> ApiResult<Option<TenantLimits>> {
    match state.store.get_tenant(tenant).await? {
        Some(row) => Ok(Some(limits_of(&row)?)),
        None => Ok(None),
    }
}

/// Refuses a workflow whose tasks ask for more than the tenant's limits
/// allow (memory, timeout, hosts), naming the limit and the task.
pub async fn check_within_limits(
    state: &ApiState,
    tenant: &str,
    workflow: &dagr_core::definition::Workflow,
    code: &'static str,
) -> ApiResult<()> {
    let Some(limits) = tenant_limits(state, tenant).await? else {
        return Ok(());
    };
    for (i, task) in workflow.tasks.iter().enumerate() {
        let at = |field: &str| format!("tasks[{i}].{field}");
        if let (Some(asked), Some(max)) = (task.memory, limits.max_memory)
            && asked > max
        {
            return Err(AppError::bad_at(
                code,
                at("memory"),
                format!(
                    "task `{}` asks for {asked} bytes of memory, above tenant `{tenant}`'s limit max_memory = {max}",
                    task.name
                ),
            ));
        }
        if let (Some(asked), Some(max)) = (task.timeout, limits.max_duration_ms)
            && asked.as_millis() > u128::from(max)
        {
            return Err(AppError::bad_at(
                code,
                at("timeout"),
                format!(
                    "task `{}` asks for a timeout of {} ms, above tenant `{tenant}`'s limit max_duration_ms = {max}",
                    task.name,
                    asked.as_millis()
                ),
            ));
        }
        for (j, host) in task.allow_hosts.iter().enumerate() {
            if !limits.allow_hosts.iter().any(|by| dagr_core::definition::host_covered(host, by)) {
                return Err(AppError::bad_at(
                    code,
                    format!("tasks[{i}].allow_hosts[{j}]"),
                    format!(
                        "task `{}` may not reach `{host}`: it is outside tenant `{tenant}`'s network allowlist (limit allow_hosts: {:?})",
                        task.name, limits.allow_hosts
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn limits_of(row: &TenantRow) -> ApiResult<TenantLimits> {
    serde_json::from_str(&row.limits).map_err(|e| AppError::internal(format!("limits of tenant {}: {e}", row.name)))
}

/// Checks limits: every allowlist entry parses and every number is above 0.
fn validate_limits(limits: &TenantLimits) -> ApiResult<()> {
    for (i, host) in limits.allow_hosts.iter().enumerate() {
        if host.trim() == "*" {
            continue;
        }
        if let Some(problem) = dagr_core::definition::check_host_pattern(host) {
            return Err(AppError::bad_at("invalid_limits", format!("limits.allow_hosts[{i}]"), problem));
        }
    }
    // The largest value of each, as the OpenAPI document says (int64 and
    // int32).
    let (big, small) = (i64::MAX as u64, i32::MAX as u64);
    let numbers = [
        ("max_memory", limits.max_memory, big),
        ("max_duration_ms", limits.max_duration_ms, big),
        ("max_concurrent", limits.max_concurrent.map(u64::from), small),
        ("runs_per_minute", limits.runs_per_minute.map(u64::from), small),
        ("max_unfinished_runs", limits.max_unfinished_runs.map(u64::from), small),
        ("scratch_bytes", limits.scratch_bytes, big),
    ];
    for (field, value, max) in numbers {
        if value.is_some_and(|v| v > max) {
            return Err(AppError::bad_at("invalid_limits", format!("limits.{field}"), format!("at most {max}")));
        }
        if value == Some(0) {
            return Err(AppError::bad_at(
                "invalid_limits",
                format!("limits.{field}"),
                "must be greater than 0 (leave it out for no limit)",
            ));
        }
    }
    // The archive's durations may be 0 (at once), not above int64.
    let durations = [
        ("archive_after_ms", limits.archive_after_ms),
        ("archive_retain_ms", limits.archive_retain_ms),
        ("archive_logs_retain_ms", limits.archive_logs_retain_ms),
    ];
    for (field, value) in durations {
        if value.is_some_and(|v| v > big) {
            return Err(AppError::bad_at("invalid_limits", format!("limits.{field}"), format!("at most {big}")));
        }
    }
    Ok(())
}

/// Tenant names: lowercase letters, digits, `-` and `_`, at most 63,
/// starting with a letter or digit.
fn check_tenant_name(name: &str) -> ApiResult<()> {
    let ok = (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(AppError::bad_at(
            "invalid_tenant",
            "name",
            format!(
                "`{name}` is not a tenant name: use 1 to 63 lowercase letters, digits, `-` or `_`, starting with a letter or digit"
            ),
        ))
    }
}

/// Secret names: letters, digits, `_`, `-` and `.`, at most 128.
fn check_secret_name(name: &str) -> ApiResult<()> {
    let ok = (1..=128).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(AppError::bad(
            "invalid_secret",
            format!("`{name}` is not a secret name: use 1 to 128 letters, digits, `_`, `-` or `.`"),
        ))
    }
}

fn tenant_view(row: &TenantRow) -> ApiResult<TenantView> {
    Ok(TenantView {
        name: row.name.clone(),
        limits: limits_of(row)?,
        created_at: time(row.created_at),
        updated_at: time(row.updated_at),
    })
}

fn token_view(row: &TokenRow) -> TokenView {
    TokenView {
        id: row.id.clone(),
        tenant: row.tenant.clone(),
        scopes: parse_scopes(&row.scopes),
        label: row.label.clone(),
        created_at: time(row.created_at),
        revoked_at: row.revoked_at.map(time),
        created_by: row.created_by.clone(),
    }
}

async fn existing_tenant(state: &ApiState, name: &str) -> ApiResult<TenantRow> {
    state.store.get_tenant(name).await?.ok_or_else(|| AppError::NotFound(format!("there is no tenant `{name}`")))
}

// Runs per minute ---------------------------------------------------------------------

/// Whether a tenant with these limits caps the tasks it runs at once
/// (`max_concurrent`): its new runs are then made in one slot, so that one
/// master counts them all ([`dagr_store::together_in`]).
pub(crate) fn capped(limits: Option<&TenantLimits>) -> bool {
    limits.is_some_and(|l| l.max_concurrent.is_some())
}

/// Refuses a new manual run or job when the tenant created `runs_per_minute`
/// of them in the last minute. Counted in the store, so the limit holds
/// across API processes (two requests racing at the very edge may both pass).
/// Returns the tenant's limits it read (`None`: no such tenant).
pub(crate) async fn check_run_rate(state: &ApiState, tenant: &str) -> ApiResult<Option<TenantLimits>> {
    let limits = tenant_limits(state, tenant).await?;
    let Some(limit) = limits.as_ref().and_then(|l| l.runs_per_minute) else {
        return Ok(limits);
    };
    let now = now_ms();
    let recent = state.store.count_runs_since(tenant, &[RunKind::Manual, RunKind::Job], now - 60_000).await?;
    if recent.count < i64::from(limit) {
        return Ok(limits);
    }
    let frees_at = recent.oldest.unwrap_or(now) + 60_000;
    let retry_after = ((frees_at - now).max(0) as u64).div_ceil(1000).max(1);
    Err(AppError::RateLimited {
        message: format!(
            "tenant `{tenant}` may start {limit} runs per minute (limit runs_per_minute); try again in {retry_after}s"
        ),
        retry_after,
    })
}

/// Refuses a backfill that would take the tenant past its unfinished runs'
/// limit (`max_unfinished_runs`, else `[api] max_unfinished_runs`): every
/// unfinished run is held by a master, in memory, so a tenant's backfills
/// may not pile up without bound. Counted in the store (two backfills
/// racing at the very edge may both pass). Returns the tenant's limits it
/// read (`None`: no such tenant).
pub(crate) async fn check_unfinished_runs(
    state: &ApiState,
    tenant: &str,
    adding: usize,
) -> ApiResult<Option<TenantLimits>> {
    let limits = tenant_limits(state, tenant).await?;
    let (limit, name) = match limits.as_ref().and_then(|l| l.max_unfinished_runs) {
        Some(n) => (n as usize, "the tenant's limit max_unfinished_runs"),
        None => (state.config.max_unfinished_runs, "[api] max_unfinished_runs"),
    };
    let unfinished = usize::try_from(state.store.count_unfinished_runs(tenant).await?).unwrap_or(0);
    if unfinished.saturating_add(adding) <= limit {
        return Ok(limits);
    }
    Err(AppError::RateLimited {
        message: format!(
            "tenant `{tenant}` has {unfinished} unfinished runs; this backfill's {adding} would pass {limit} \
             ({name}): wait for runs to end, or backfill a shorter range"
        ),
        retry_after: 60,
    })
}

// Tenants -------------------------------------------------------------------------------

/// Creates a tenant (admin token only).
#[utoipa::path(
    post, path = "/v1/tenants", tag = "tenants", request_body = CreateTenant,
    responses(
        (status = 201, body = TenantView),
        (status = 400, body = ApiError),
        (status = 409, body = ApiError, description = "A tenant of that name exists"),
    )
)]
pub async fn create_tenant(
    State(state): State<ApiState>,
    caller: Caller,
    Json(req): Json<CreateTenant>,
) -> Answer<TenantView> {
    check_tenant_name(&req.name)?;
    validate_limits(&req.limits)?;
    let now = now_ms();
    let limits = serde_json::to_string(&req.limits).map_err(AppError::internal)?;
    let row = TenantRow { name: req.name.clone(), limits, created_at: now, updated_at: now };
    if !state.store.create_tenant(&row).await? {
        return Err(AppError::Conflict(format!("tenant `{}` exists", req.name)));
    }
    audit(&state, &caller, &req.name, "tenant.create", &req.name, json!({"limits": req.limits})).await;
    state.control.tenant_changed(&row.name);
    Ok((StatusCode::CREATED, axum::Json(tenant_view(&row)?)))
}

/// Every tenant (admin token only).
#[utoipa::path(get, path = "/v1/tenants", tag = "tenants", responses((status = 200, body = Vec<TenantView>)))]
pub async fn list_tenants(State(state): State<ApiState>) -> Answer<Vec<TenantView>> {
    let rows = state.store.list_tenants().await?;
    let views = rows.iter().map(tenant_view).collect::<ApiResult<Vec<_>>>()?;
    Ok((StatusCode::OK, axum::Json(views)))
}

/// A tenant and its limits (admin token only).
#[utoipa::path(
    get, path = "/v1/tenants/{name}", tag = "tenants", params(("name" = String, Path)),
    responses((status = 200, body = TenantView), (status = 404, body = ApiError))
)]
pub async fn get_tenant(State(state): State<ApiState>, Path(name): Path<String>) -> Answer<TenantView> {
    let row = existing_tenant(&state, &name).await?;
    Ok((StatusCode::OK, axum::Json(tenant_view(&row)?)))
}

/// Changes a tenant's limits (admin token only): `limits` is a JSON merge
/// patch (a field given replaces it, `null` clears it, others are kept).
#[utoipa::path(
    patch, path = "/v1/tenants/{name}", tag = "tenants", params(("name" = String, Path)),
    request_body = UpdateTenant,
    responses((status = 200, body = TenantView), (status = 400, body = ApiError), (status = 404, body = ApiError))
)]
pub async fn update_tenant(
    State(state): State<ApiState>,
    caller: Caller,
    Path(name): Path<String>,
    Json(req): Json<UpdateTenant>,
) -> Answer<TenantView> {
    let row = existing_tenant(&state, &name).await?;
    let mut merged = serde_json::to_value(limits_of(&row)?).map_err(AppError::internal)?;
    if let Value::Object(fields) = &mut merged {
        for (key, value) in &req.limits {
            if value.is_null() {
                fields.remove(key);
            } else {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
    let limits: TenantLimits = crate::extract::parse_json(merged.to_string().as_bytes()).map_err(|e| match e {
        AppError::BadRequest { message, location, .. } => AppError::BadRequest {
            code: "invalid_limits",
            location: Some(format!("limits.{}", location.unwrap_or_default()).trim_end_matches('.').to_owned()),
            message,
            details: Vec::new(),
        },
        other => other,
    })?;
    validate_limits(&limits)?;
    let now = now_ms();
    let text = serde_json::to_string(&limits).map_err(AppError::internal)?;
    if !state.store.update_tenant(&name, &text, now).await? {
        return Err(AppError::NotFound(format!("there is no tenant `{name}`")));
    }
    audit(&state, &caller, &name, "tenant.update", &name, json!({"limits": limits})).await;
    let row = existing_tenant(&state, &name).await?;
    state.control.tenant_changed(&row.name);
    Ok((StatusCode::OK, axum::Json(tenant_view(&row)?)))
}

// Tokens --------------------------------------------------------------------------------

async fn make_token(state: &ApiState, caller: &Caller, tenant: &str, req: CreateToken) -> Answer<CreatedToken> {
    if req.scopes.is_empty() {
        return Err(AppError::bad_at("invalid_token", "scopes", "give at least one scope: read, write or admin"));
    }
    if req.label.chars().count() > 200 {
        return Err(AppError::bad_at("invalid_token", "label", "at most 200 characters"));
    }
    let token = generate_token();
    let row = TokenRow {
        id: token.id.clone(),
        tenant: tenant.to_owned(),
        hash: token.hash.clone(),
        scopes: scopes_text(&req.scopes),
        label: req.label.clone(),
        created_at: now_ms(),
        revoked_at: None,
        created_by: Some(caller.token_id.clone()),
    };
    if !state.store.create_token(&row).await? {
        // 36^12 ids: a collision is as good as impossible; say so if it happens.
        return Err(AppError::Conflict("a token id collided; try again".into()));
    }
    let detail = json!({"scopes": parse_scopes(&row.scopes), "label": row.label});
    audit(state, caller, tenant, "token.create", &row.id, detail).await;
    Ok((StatusCode::CREATED, axum::Json(CreatedToken { token: token.text, view: token_view(&row) })))
}

async fn revoke(state: &ApiState, caller: &Caller, tenant: &str, id: &str) -> ApiResult<StatusCode> {
    if !state.store.revoke_token(tenant, id, now_ms()).await? {
        return Err(AppError::NotFound(format!("tenant `{tenant}` has no live token `{id}`")));
    }
    audit(state, caller, tenant, "token.revoke", id, json!({})).await;
    Ok(StatusCode::NO_CONTENT)
}

async fn tokens_of(state: &ApiState, tenant: &str) -> Answer<Vec<TokenView>> {
    let rows = state.store.list_tokens(tenant).await?;
    Ok((StatusCode::OK, axum::Json(rows.iter().map(token_view).collect())))
}

/// Creates a token of a tenant (admin token only). The answer is the only
/// time the token is shown.
#[utoipa::path(
    post, path = "/v1/tenants/{name}/tokens", tag = "tenants", params(("name" = String, Path)),
    request_body = CreateToken,
    responses((status = 201, body = CreatedToken), (status = 400, body = ApiError), (status = 404, body = ApiError))
)]
pub async fn create_tenant_token(
    State(state): State<ApiState>,
    caller: Caller,
    Path(name): Path<String>,
    Json(req): Json<CreateToken>,
) -> Answer<CreatedToken> {
    existing_tenant(&state, &name).await?;
    make_token(&state, &caller, &name, req).await
}

/// A tenant's tokens, revoked ones included; never their secrets (admin
/// token only).
#[utoipa::path(
    get, path = "/v1/tenants/{name}/tokens", tag = "tenants", params(("name" = String, Path)),
    responses((status = 200, body = Vec<TokenView>), (status = 404, body = ApiError))
)]
pub async fn list_tenant_tokens(State(state): State<ApiState>, Path(name): Path<String>) -> Answer<Vec<TokenView>> {
    existing_tenant(&state, &name).await?;
    tokens_of(&state, &name).await
}

/// Revokes a tenant's token (admin token only). Requests with it are
/// refused from now on.
#[utoipa::path(
    delete, path = "/v1/tenants/{name}/tokens/{id}", tag = "tenants",
    params(("name" = String, Path), ("id" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn revoke_tenant_token(
    State(state): State<ApiState>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    if name == ADMIN_TENANT {
        return Err(AppError::NotFound(format!("there is no tenant `{name}`")));
    }
    revoke(&state, &caller, &name, &id).await
}

/// Creates a token of the caller's tenant (needs the `admin` scope). The
/// answer is the only time the token is shown.
#[utoipa::path(
    post, path = "/v1/tokens", tag = "tokens", request_body = CreateToken,
    responses((status = 201, body = CreatedToken), (status = 400, body = ApiError), (status = 403, body = ApiError))
)]
pub async fn create_token(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Json(req): Json<CreateToken>,
) -> Answer<CreatedToken> {
    make_token(&state, &caller, &tenant.0, req).await
}

/// The caller's tenant's tokens, revoked ones included; never their secrets
/// (needs the `admin` scope).
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", responses((status = 200, body = Vec<TokenView>)))]
pub async fn list_tokens(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<TokenView>> {
    tokens_of(&state, &tenant.0).await
}

/// Revokes a token of the caller's tenant (needs the `admin` scope).
#[utoipa::path(
    delete, path = "/v1/tokens/{id}", tag = "tokens", params(("id" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn revoke_token(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    revoke(&state, &caller, &tenant.0, &id).await
}

// Secrets -------------------------------------------------------------------------------

/// Sets a secret of the tenant (write-only: no response shows its value).
/// The tenant's tasks read it with `secret(name)`; their logs and outputs
/// show it as `[REDACTED]`.
#[utoipa::path(
    put, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)), request_body = PutSecret,
    responses((status = 200, body = SecretView), (status = 400, body = ApiError))
)]
pub async fn put_secret(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
    Json(req): Json<PutSecret>,
) -> Answer<SecretView> {
    check_secret_name(&name)?;
    if req.value.is_empty() {
        return Err(AppError::bad_at("invalid_secret", "value", "a secret cannot be empty"));
    }
    if req.value.chars().count() > MAX_SECRET_CHARS {
        return Err(AppError::bad_at("invalid_secret", "value", format!("at most {MAX_SECRET_CHARS} characters")));
    }
    let now = now_ms();
    let sealed = state.config.secrets.seal(&tenant.0, &name, &req.value);
    state.store.put_secret(&tenant.0, &name, &sealed, now).await?;
    audit(&state, &caller, &tenant.0, "secret.put", &name, json!({})).await;
    Ok((StatusCode::OK, axum::Json(SecretView { name, updated_at: time(now) })))
}

/// The tenant's secrets: names and when they were set, never values.
#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", responses((status = 200, body = Vec<SecretView>)))]
pub async fn list_secrets(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<SecretView>> {
    let rows = state.store.list_secrets(&tenant.0).await?;
    let views = rows.into_iter().map(|s| SecretView { name: s.name, updated_at: time(s.updated_at) }).collect();
    Ok((StatusCode::OK, axum::Json(views)))
}

/// Deletes a secret of the tenant.
#[utoipa::path(
    delete, path = "/v1/secrets/{name}", tag = "secrets", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn delete_secret(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    if !state.store.delete_secret(&tenant.0, &name).await? {
        return Err(AppError::NotFound(format!("there is no secret `{name}`")));
    }
    audit(&state, &caller, &tenant.0, "secret.delete", &name, json!({})).await;
    Ok(StatusCode::NO_CONTENT)
}

// Audit ---------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Records after this sequence number (the `next` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The tenant's audit log, oldest first: who (token id) did what, and when.
#[utoipa::path(
    get, path = "/v1/audit", tag = "audit", params(AuditQuery),
    responses((status = 200, body = AuditList), (status = 400, body = ApiError))
)]
pub async fn list_audit(
    State(state): State<ApiState>,
    tenant: Tenant,
    Query(q): Query<AuditQuery>,
) -> Answer<AuditList> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 1000"));
    }
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(AppError::bad_at("bad_query", "?after", "must be 0 or more"));
    }
    let rows = state.store.list_audit(&tenant.0, after, limit).await?;
    let next = (rows.len() as i64 == limit).then(|| rows.last().map(|r| r.seq)).flatten();
    let records = rows
        .into_iter()
        .map(|r| AuditView {
            seq: r.seq,
            at: time(r.at),
            tenant: r.tenant,
            token_id: r.token_id,
            action: r.action,
            target: r.target,
            detail: serde_json::from_str(&r.detail).unwrap_or(Value::Null),
        })
        .collect();
    Ok((StatusCode::OK, axum::Json(AuditList { records, next })))
}

#[cfg(test)]
mod tests {
    use dagr_protocol::tenancy::Scope;

    use super::*;

    #[test]
    fn limits_are_checked_field_by_field() {
        assert!(validate_limits(&TenantLimits::default()).is_ok());
        let bad_host =
            TenantLimits { allow_hosts: vec!["ok.example.org".into(), "http://x".into()], ..Default::default() };
        match validate_limits(&bad_host) {
            Err(AppError::BadRequest { location, .. }) => {
                assert_eq!(location.as_deref(), Some("limits.allow_hosts[1]"))
            }
            other => panic!("{other:?}"),
        }
        let zero = TenantLimits { runs_per_minute: Some(0), ..Default::default() };
        match validate_limits(&zero) {
            Err(AppError::BadRequest { location, .. }) => {
                assert_eq!(location.as_deref(), Some("limits.runs_per_minute"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names() {
        assert!(check_tenant_name("team-a_1").is_ok());
        for bad in ["", "*", "Team", "-a", "a b", &"a".repeat(64)] {
            assert!(check_tenant_name(bad).is_err(), "{bad}");
        }
        assert!(check_secret_name("DB_PASSWORD.v2").is_ok());
        assert!(check_secret_name("a/b").is_err());
    }

    #[test]
    fn scopes_are_listed_not_their_secret() {
        let row = TokenRow {
            id: "abcdefghijkl".into(),
            tenant: "t".into(),
            hash: "h".repeat(64),
            scopes: "read,admin".into(),
            label: "ci".into(),
            created_at: 0,
            revoked_at: None,
            created_by: None,
        };
        let text = serde_json::to_string(&token_view(&row)).unwrap();
        assert!(!text.contains("hhhh"), "{text}");
        assert_eq!(token_view(&row).scopes, vec![Scope::Read, Scope::Admin]);
    }
}

/// The cluster: its masters, workers and API nodes, with their slots and
/// load (the admin token only). On a single node (`dagr serve`):
/// `{"mode": "node", "members": []}`.
#[utoipa::path(get, path = "/v1/cluster", tag = "tenants", responses((status = 200, body = Object)))]
pub async fn cluster(State(state): State<ApiState>) -> axum::Json<serde_json::Value> {
    axum::Json(state.control.cluster().await.unwrap_or_else(|| json!({"mode": "node", "members": []})))
}
