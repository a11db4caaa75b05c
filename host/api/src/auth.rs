//! Who is calling, and what they may do.
//!
//! - Tokens are `dagr_<id>_<secret>`: `id` (12 lowercase letters and digits)
//!   is the lookup key; only `sha256(secret)` is stored, and it is compared
//!   in constant time.
//! - [`authenticate`] is the middleware every route but `/healthz` goes
//!   through. It answers 401 for a missing, malformed, unknown or revoked
//!   token and 403 for a token whose scope is too small; otherwise it sets
//!   the [`Tenant`] the request acts for and the [`Caller`] (for the audit).
//! - The admin token belongs to [`ADMIN_TENANT`]: it manages tenants and
//!   tokens, and acts for the tenant named in the `X-Dagr-Tenant` header on
//!   everything else.
//! - [`bootstrap`] runs at startup (`dagr serve`, `dagr api`): it makes sure
//!   an admin token exists and, where asked, the `default` tenant with a
//!   first token of its own.
//! - [`audit`] records who (token id) did what, for the handlers.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use dagr_protocol::now_ms;
use dagr_protocol::tenancy::{ADMIN_TENANT, DEFAULT_TENANT, Scope, TENANT_HEADER};
use dagr_store::Store;
use dagr_store::tenancy::{NewAudit, TenantRow, TokenRow};
use rand::Rng as _;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::error::AppError;
use crate::{ApiState, Tenant};

/// The limits the `default` tenant starts with: its tasks may reach the
/// hosts they list themselves (the runtime still refuses private addresses
/// that a task does not name); no other caps. An admin can narrow them
/// with `PATCH /v1/tenants/default`.
pub const DEFAULT_TENANT_LIMITS: &str = r#"{"allow_hosts":["*"]}"#;

/// Length of a token's id.
pub const TOKEN_ID_LEN: usize = 12;

/// Shortest secret accepted in a configured admin token.
pub const MIN_SECRET_LEN: usize = 32;

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The id of the token the request came with (recorded in the audit).
    pub token_id: String,
    /// The token's own tenant ([`ADMIN_TENANT`] for the admin token).
    pub tenant: String,
    /// The largest of the token's scopes.
    pub scope: Scope,
}

impl Caller {
    /// Whether this is the installation's admin token.
    pub fn is_admin_token(&self) -> bool {
        self.tenant == ADMIN_TENANT
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Only `authenticate` sets it; a handler reached without it is a bug
        // in the router, and must not act for anybody.
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| AppError::internal("a request reached a handler without authentication"))
    }
}

// Tokens -------------------------------------------------------------------------

/// A freshly generated token.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub id: String,
    /// sha256 of the secret, hex: what is stored.
    pub hash: String,
    /// `dagr_<id>_<secret>`: what the caller gets, once.
    pub text: String,
}

/// Generates a token: a random id and 32 random bytes of secret.
pub fn generate_token() -> NewToken {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let id: String = (0..TOKEN_ID_LEN).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    let secret_bytes: [u8; 32] = rng.random();
    let secret = hex::encode(secret_bytes);
    NewToken { hash: hash_secret(&secret), text: format!("dagr_{id}_{secret}"), id }
}

/// Splits `dagr_<id>_<secret>` into id and secret.
pub fn parse_token(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("dagr_")?;
    let (id, secret) = rest.split_once('_')?;
    let id_ok = id.len() == TOKEN_ID_LEN && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (id_ok && !secret.is_empty()).then_some((id, secret))
}

/// sha256 of a token's secret, hex.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Equality that takes the same time wherever the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Scopes as stored: `read,write`.
pub fn scopes_text(scopes: &[Scope]) -> String {
    let mut sorted = scopes.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

/// Scopes as stored, parsed (unknown words are ignored).
pub fn parse_scopes(text: &str) -> Vec<Scope> {
    text.split(',').filter_map(|s| Scope::parse(s.trim())).collect()
}

// The middleware ---------------------------------------------------------------------

fn unauthorized(message: impl Into<String>) -> Response {
    AppError::Unauthorized(message.into()).into_response()
}

fn forbidden(message: impl Into<String>) -> Response {
    AppError::Forbidden(message.into()).into_response()
}

/// What a route needs.
pub(crate) enum Needs {
    /// Tenant management: the admin token only.
    AdminToken,
    /// A tenant resource with at least this scope.
    Scope(Scope),
    /// Any valid token, acting for no tenant (the OpenAPI document).
    AnyToken,
}

/// The one route where the admin token may act for every tenant at once
/// (without a tenant header): following the event stream.
const EVERY_TENANT_ROUTE: &str = "/v1/events";

/// The route of the Prometheus metrics: the admin token's, or anyone's
/// with `[metrics] public`.
pub const METRICS_ROUTE: &str = "/metrics";

/// The route of the OpenAPI document.
pub const OPENAPI_ROUTE: &str = "/openapi.json";

/// What the route of a request needs, from its route template.
pub(crate) fn needs(method: &Method, route: Option<&str>) -> Needs {
    let route = route.unwrap_or("");
    if route == OPENAPI_ROUTE {
        return Needs::AnyToken;
    }
    if route == METRICS_ROUTE {
        return Needs::AdminToken;
    }
    if route == "/v1/tenants" || route.starts_with("/v1/tenants/") || route == "/v1/cluster" {
        return Needs::AdminToken;
    }
    if route == "/v1/tokens" || route.starts_with("/v1/tokens/") {
        return Needs::Scope(Scope::Admin);
    }
    if method == Method::GET || method == Method::HEAD { Needs::Scope(Scope::Read) } else { Needs::Scope(Scope::Write) }
}

/// Whether the API declares `method` on `route` (HEAD with GET).
fn declared(method: &Method, route: &str) -> bool {
    static ROUTES: std::sync::OnceLock<std::collections::HashSet<(String, String)>> = std::sync::OnceLock::new();
    let routes = ROUTES.get_or_init(|| crate::routes().into_iter().collect());
    let method = if method == Method::HEAD { "GET" } else { method.as_str() };
    (route == OPENAPI_ROUTE || route == METRICS_ROUTE) && method == "GET"
        || routes.contains(&(method.to_owned(), route.to_owned()))
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &header::HeaderMap) -> Result<&str, Response> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized("missing token: send `Authorization: Bearer <token>`"));
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| unauthorized("malformed Authorization header: it must be `Bearer <token>`"))
}

/// Who a token belongs to: 401 for a malformed, unknown or revoked token,
/// 403 for one without a scope.
pub(crate) async fn caller_of(state: &ApiState, text: &str) -> Result<Caller, Response> {
    let Some((id, secret)) = parse_token(text) else {
        return Err(unauthorized("malformed token: a dagr token looks like dagr_<id>_<secret>"));
    };
    let token = state.store.get_token(id).await.map_err(|e| AppError::from(e).into_response())?;
    let Some(token) = token.filter(|t| constant_time_eq(hash_secret(secret).as_bytes(), t.hash.as_bytes())) else {
        return Err(unauthorized("unknown token"));
    };
    if token.revoked_at.is_some() {
        return Err(unauthorized(format!("token {} was revoked", token.id)));
    }
    let Some(scope) = parse_scopes(&token.scopes).into_iter().max() else {
        return Err(forbidden(format!("token {} has no scope", token.id)));
    };
    Ok(Caller { token_id: token.id.clone(), tenant: token.tenant.clone(), scope })
}

/// Checks the bearer token of every request but `/healthz`; sets the
/// [`Tenant`] and the [`Caller`].
pub async fn authenticate(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    if route.as_deref() == Some("/healthz") || route.as_deref() == Some(METRICS_ROUTE) && state.config.metrics_public {
        return next.run(request).await;
    }
    // A method the route does not take: the router answers 405 with
    // `Allow`, whoever asks (the routes are no secret: see /openapi.json).
    if let Some(route) = route.as_deref()
        && !declared(request.method(), route)
    {
        return next.run(request).await;
    }
    // A bearer token, or the web UI's session cookie (which holds one).
    let session = match request.headers().get(header::AUTHORIZATION) {
        Some(_) => None,
        None => match crate::ui::session_of(&state, request.headers()) {
            Ok(session) => session,
            Err(response) => return response,
        },
    };
    let caller = match &session {
        Some(session) => caller_of(&state, &session.token).await,
        None => match bearer(request.headers()) {
            Ok(text) => caller_of(&state, text).await,
            Err(response) => Err(response),
        },
    };
    let caller = match caller {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let scope = caller.scope;
    let asked = match &session {
        // A page's state-changing request must prove it came from dagr's
        // own pages (the cookie alone would come with a forged one too).
        Some(session)
            if !matches!(*request.method(), Method::GET | Method::HEAD) && !session.csrf_matches(request.headers()) =>
        {
            return forbidden(format!(
                "missing or wrong `{}` header: a signed-in page sends the value `GET /ui/session` answers",
                crate::ui::CSRF_HEADER
            ));
        }
        Some(session) => session.tenant.clone(),
        None => request.headers().get(TENANT_HEADER).map(|v| v.to_str().unwrap_or("").trim().to_owned()),
    };
    let tenant = match needs(request.method(), route.as_deref()) {
        Needs::AnyToken => caller.tenant.clone(),
        Needs::AdminToken => {
            if !caller.is_admin_token() {
                if route.as_deref() == Some(METRICS_ROUTE) {
                    return forbidden("the metrics need the admin token (or [metrics] public = true)");
                }
                return forbidden("managing tenants needs the admin token");
            }
            ADMIN_TENANT.to_owned()
        }
        Needs::Scope(needed) => {
            if !scope.allows(needed) {
                return forbidden(format!("this needs the `{needed}` scope; the token has `{scope}`"));
            }
            if caller.is_admin_token() {
                let every_tenant = route.as_deref() == Some(EVERY_TENANT_ROUTE);
                let asked = asked.or_else(|| every_tenant.then(String::new));
                let Some(asked) = asked.filter(|a| !a.is_empty() || every_tenant) else {
                    return AppError::bad(
                        "tenant_required",
                        format!("the admin token acts for a tenant: name it in the `{TENANT_HEADER}` header"),
                    )
                    .into_response();
                };
                if asked.is_empty() {
                    // The admin's view of every tenant.
                    request.extensions_mut().insert(Tenant(ADMIN_TENANT.to_owned()));
                    request.extensions_mut().insert(caller);
                    return next.run(request).await;
                }
                match state.store.get_tenant(&asked).await {
                    Ok(Some(_)) => asked,
                    Ok(None) => return AppError::NotFound(format!("there is no tenant `{asked}`")).into_response(),
                    Err(e) => return AppError::from(e).into_response(),
                }
            } else {
                if let Some(asked) = asked.filter(|a| *a != caller.tenant) {
                    return forbidden(format!("this token acts only for tenant `{}`, not `{asked}`", caller.tenant));
                }
                caller.tenant.clone()
            }
        }
    };
    request.extensions_mut().insert(Tenant(tenant));
    request.extensions_mut().insert(caller);
    next.run(request).await
}

// The audit ------------------------------------------------------------------------------

/// Records that `caller` did `action` to `target` in `tenant`, with a small
/// `detail` (never a secret value). A failure to record is logged; it does
/// not undo or fail the action, which has happened.
pub async fn audit(state: &ApiState, caller: &Caller, tenant: &str, action: &str, target: &str, detail: Value) {
    let entry = audit_entry(caller, tenant, action, target, &detail);
    if let Err(e) = state.store.append_audit(entry).await {
        tracing::error!(error = %e, tenant, action, target, token = %caller.token_id, "cannot record an audit entry");
    }
    // A change of a definition, schedule, backfill, plugin or webhook is
    // also an event of the tenant's stream.
    if let Some(kind) = event_kind(action) {
        let workflow = match action.split('.').next() {
            Some("workflow" | "schedule") => Some(target.to_owned()),
            _ => detail.get("workflow").and_then(Value::as_str).map(str::to_owned),
        };
        let mut data = serde_json::json!({"target": target, "by": caller.token_id});
        if let (Some(data), Value::Object(detail)) = (data.as_object_mut(), detail) {
            data.extend(detail);
        }
        let event = dagr_store::NewEvent {
            tenant: tenant.to_owned(),
            at: now_ms(),
            kind: kind.to_owned(),
            workflow,
            run_id: None,
            task: None,
            data: data.to_string(),
        };
        let batch = dagr_store::WriteBatch { events: vec![event], ..Default::default() };
        if let Err(e) = state.store.commit(batch).await {
            tracing::error!(error = %e, tenant, action, target, "cannot record an event");
        }
    }
}

/// The audit entry of `caller`'s `action`, for an action that creates runs
/// and records it in the same transaction
/// ([`dagr_store::Store::create_runs_audited`]) instead of after it with
/// [`audit`]. Only for actions without an event of their own in the
/// tenant's stream (runs are the engine's events), which [`audit`] would
/// also record.
pub fn run_audit(caller: &Caller, tenant: &str, action: &str, target: &str, detail: &Value) -> NewAudit {
    debug_assert!(event_kind(action).is_none(), "{action} has an event: record it with `audit`");
    audit_entry(caller, tenant, action, target, detail)
}

fn audit_entry(caller: &Caller, tenant: &str, action: &str, target: &str, detail: &Value) -> NewAudit {
    NewAudit {
        tenant: tenant.to_owned(),
        at: now_ms(),
        token_id: caller.token_id.clone(),
        action: action.to_owned(),
        target: target.to_owned(),
        detail: detail.to_string(),
    }
}

/// The event kind of an audited action that changes what the tenant's
/// stream reports (runs and tasks are the engine's events).
fn event_kind(action: &str) -> Option<&'static str> {
    Some(match action {
        "workflow.apply" => "workflow.applied",
        "workflow.delete" => "workflow.deleted",
        "schedule.pause" => "schedule.paused",
        "schedule.resume" => "schedule.resumed",
        "backfill.create" => "backfill.created",
        "plugin.upload" => "plugin.published",
        "plugin.delete" => "plugin.deleted",
        "webhook.create" => "webhook.created",
        "webhook.delete" => "webhook.deleted",
        "webhook.enable" => "webhook.enabled",
        "alert.create" => "alert.rule_created",
        "alert.delete" => "alert.rule_deleted",
        _ => return None,
    })
}

// Startup ------------------------------------------------------------------------------------

/// A failure of [`bootstrap`].
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Store(#[from] dagr_store::Error),
    #[error("cannot write {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error("auth.admin_token: {0}")]
    AdminToken(String),
}

/// Tokens [`bootstrap`] created: shown once, and written to the data
/// directory.
#[derive(Debug, Clone, Default)]
pub struct Bootstrapped {
    /// A generated admin token, and the file it was written to.
    pub admin_token: Option<(String, PathBuf)>,
    /// The first token of the `default` tenant, and its file.
    pub default_token: Option<(String, PathBuf)>,
}

/// The file a generated admin token is written to.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// The file the `default` tenant's first token is written to.
pub const DEFAULT_TOKEN_FILE: &str = "token";

/// Makes sure the admin token exists: the configured one (`admin_token`),
/// or, when none is configured and none exists yet, a generated one. With
/// `default_tenant`, also makes sure the tenant `default` exists; when it is
/// created, it gets a read+write+admin token. New tokens are written to
/// `data_dir` (mode 0600).
pub async fn bootstrap(
    store: &dyn Store,
    data_dir: &Path,
    admin_token: Option<&str>,
    default_tenant: bool,
) -> Result<Bootstrapped, BootstrapError> {
    let mut out = Bootstrapped::default();
    let now = now_ms();
    match admin_token {
        Some(text) => {
            let (id, secret) =
                parse_token(text).ok_or_else(|| BootstrapError::AdminToken(ADMIN_TOKEN_FORMAT.into()))?;
            if secret.len() < MIN_SECRET_LEN {
                return Err(BootstrapError::AdminToken(ADMIN_TOKEN_FORMAT.into()));
            }
            let hash = hash_secret(secret);
            let row = admin_row(id, &hash, "auth.admin_token", now);
            if !store.create_token(&row).await? {
                match store.get_token(id).await? {
                    Some(t) if t.tenant == ADMIN_TENANT && constant_time_eq(t.hash.as_bytes(), hash.as_bytes()) => {
                        if t.revoked_at.is_some() {
                            return Err(BootstrapError::AdminToken(format!(
                                "token {id} was revoked; configure a new one"
                            )));
                        }
                    }
                    _ => {
                        return Err(BootstrapError::AdminToken(format!(
                            "the id {id} belongs to another token; choose another id"
                        )));
                    }
                }
            }
        }
        None => {
            let live = store.list_tokens(ADMIN_TENANT).await?.into_iter().any(|t| t.revoked_at.is_none());
            if !live {
                let token = generate_token();
                store.create_token(&admin_row(&token.id, &token.hash, "generated at first start", now)).await?;
                let path = data_dir.join(ADMIN_TOKEN_FILE);
                write_private(&path, &token.text)?;
                out.admin_token = Some((token.text, path));
            }
        }
    }
    if default_tenant {
        let tenant = TenantRow {
            name: DEFAULT_TENANT.into(),
            limits: DEFAULT_TENANT_LIMITS.into(),
            created_at: now,
            updated_at: now,
        };
        if store.create_tenant(&tenant).await? {
            let token = generate_token();
            let row = TokenRow {
                id: token.id.clone(),
                tenant: DEFAULT_TENANT.into(),
                hash: token.hash.clone(),
                scopes: scopes_text(&[Scope::Read, Scope::Write, Scope::Admin]),
                label: "generated at first start".into(),
                created_at: now,
                revoked_at: None,
                created_by: None,
            };
            store.create_token(&row).await?;
            let path = data_dir.join(DEFAULT_TOKEN_FILE);
            write_private(&path, &token.text)?;
            out.default_token = Some((token.text, path));
        }
    }
    Ok(out)
}

const ADMIN_TOKEN_FORMAT: &str = "must look like dagr_<id>_<secret>: an id of 12 lowercase letters or digits, and a secret of at least 32 characters";

fn admin_row(id: &str, hash: &str, label: &str, now: i64) -> TokenRow {
    TokenRow {
        id: id.to_owned(),
        tenant: ADMIN_TENANT.into(),
        hash: hash.to_owned(),
        scopes: Scope::Admin.as_str().into(),
        label: label.to_owned(),
        created_at: now,
        revoked_at: None,
        created_by: None,
    }
}

/// Writes `text` to a file only its owner may read.
fn write_private(path: &Path, text: &str) -> Result<(), BootstrapError> {
    let fail = |source| BootstrapError::File { path: path.to_owned(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        options.mode(0o600);
        // An older file keeps its mode through `open`; tighten it first.
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
        }
    }
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(format!("{text}\n").as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_hash() {
        let token = generate_token();
        let (id, secret) = parse_token(&token.text).unwrap();
        assert_eq!(id, token.id);
        assert_eq!(secret.len(), 64);
        assert_eq!(hash_secret(secret), token.hash);
        assert_ne!(generate_token().text, token.text);
        assert!(parse_token("dagr_short_x").is_none());
        assert!(parse_token("dagr_ABCDEFGHIJKL_x").is_none());
        assert!(parse_token("dagr_abcdefghijkl_").is_none());
        assert!(parse_token("token abcdefghijkl_x").is_none());
        assert_eq!(parse_token("dagr_abcdefghijk1_with_underscore"), Some(("abcdefghijk1", "with_underscore")));
    }

    #[test]
    fn scopes_round_trip_and_compare() {
        assert_eq!(scopes_text(&[Scope::Admin, Scope::Read, Scope::Read]), "read,admin");
        assert_eq!(parse_scopes("read,admin,bogus"), vec![Scope::Read, Scope::Admin]);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn routes_need_their_scope() {
        assert!(matches!(needs(&Method::GET, Some("/v1/runs")), Needs::Scope(Scope::Read)));
        assert!(matches!(needs(&Method::POST, Some("/v1/jobs")), Needs::Scope(Scope::Write)));
        assert!(matches!(needs(&Method::DELETE, Some("/v1/secrets/{name}")), Needs::Scope(Scope::Write)));
        assert!(matches!(needs(&Method::GET, Some("/v1/tokens")), Needs::Scope(Scope::Admin)));
        assert!(matches!(needs(&Method::GET, Some("/v1/tenants/{name}")), Needs::AdminToken));
        assert!(matches!(needs(&Method::GET, Some("/v1/tenantsx")), Needs::Scope(Scope::Read)));
    }
}
