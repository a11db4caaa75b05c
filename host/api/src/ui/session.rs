//! The web UI's session: a cookie that carries the token, sealed.
//!
//! - `POST /ui/session` takes a token (and, for the admin token, the tenant
//!   to act for), checks it like any API request would, and answers with a
//!   `dagr_session` cookie: `HttpOnly` (page scripts never see the token),
//!   `SameSite=Strict`, sealed with the installation's secrets key
//!   (ChaCha20-Poly1305), so that any API process of the installation opens
//!   it and nobody can forge or read one. Nothing is kept server-side.
//! - The token is checked again on every request (a revoked token ends its
//!   sessions at once); a session also ends after `[api] ui_session`.
//! - Each session has a random CSRF value, answered by `GET /ui/session`:
//!   every state-changing request that comes with the cookie must send it in
//!   `X-Dagr-CSRF` (a page of another site can make the browser send the
//!   cookie, not read the value).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dagr_protocol::now_ms;
use dagr_protocol::tenancy::{ADMIN_TENANT, DEFAULT_TENANT};
use rand::Rng as _;
use serde::{Deserialize, Serialize};

use crate::ApiState;
use crate::auth::{Caller, caller_of};
use crate::error::AppError;

/// The session cookie's name.
pub const COOKIE: &str = "dagr_session";

/// The header that carries a session's CSRF value.
pub const CSRF_HEADER: &str = "x-dagr-csrf";

/// What the cookie holds, sealed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    /// The token the user signed in with.
    pub token: String,
    /// The tenant the admin token acts for (none for a tenant's token).
    #[serde(default)]
    pub tenant: Option<String>,
    /// The value state-changing requests must send in [`CSRF_HEADER`].
    pub csrf: String,
    /// When the session ends (ms since the epoch).
    pub expires: i64,
}

/// The associated data the cookie is sealed under (it is not a secret of
/// any tenant's).
const SEAL_TENANT: &str = "";
const SEAL_NAME: &str = "ui-session";

impl Session {
    fn new(token: String, tenant: Option<String>, ttl_ms: i64) -> Session {
        let csrf: [u8; 16] = rand::rng().random();
        Session { token, tenant, csrf: hex::encode(csrf), expires: now_ms().saturating_add(ttl_ms) }
    }

    /// Whether the request carries this session's CSRF value.
    pub fn csrf_matches(&self, headers: &HeaderMap) -> bool {
        let sent = headers.get(CSRF_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
        sent.len() == self.csrf.len()
            && sent.iter().zip(self.csrf.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    fn seal(&self, state: &ApiState) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        state.config.secrets.seal(SEAL_TENANT, SEAL_NAME, &json)
    }

    fn cookie(&self, state: &ApiState) -> HeaderValue {
        let max_age = (self.expires - now_ms()).max(0) / 1000;
        set_cookie(state, &self.seal(state), max_age)
    }
}

fn set_cookie(state: &ApiState, value: &str, max_age: i64) -> HeaderValue {
    let secure = if state.config.ui_secure_cookie { "; Secure" } else { "" };
    let text = format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    // Sealed text is hex after an ASCII prefix: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The session of a request, if it has the cookie: 401 for a cookie that
/// does not open (forged, from another installation, sealed under a key
/// since retired) or has expired.
pub fn session_of(state: &ApiState, headers: &HeaderMap) -> Result<Option<Session>, Response> {
    let Some(value) = cookie_value(headers, COOKIE) else { return Ok(None) };
    let expired =
        || AppError::Unauthorized("the session has ended or is not valid here: sign in again".into()).into_response();
    let json = state.config.secrets.open(SEAL_TENANT, SEAL_NAME, value).map_err(|_| expired())?;
    let session: Session = serde_json::from_str(&json).map_err(|_| expired())?;
    if session.expires <= now_ms() {
        return Err(expired());
    }
    Ok(Some(session))
}

/// Signing in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// A dagr token (`dagr_<id>_<secret>`).
    pub token: String,
    /// For the admin token: the tenant to act for (default `default`, or
    /// the first tenant).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// Switching the admin's tenant.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchTenant {
    pub tenant: String,
}

/// What the page knows of its session (never the token).
#[derive(Debug, Serialize)]
pub struct SessionView {
    /// Always true (a page that is not signed in gets `{"signed_in": false}`).
    pub signed_in: bool,
    /// The tenant the session acts for (none: the admin token before any
    /// tenant exists).
    pub tenant: Option<String>,
    pub token_id: String,
    /// Whether this is the installation's admin token.
    pub admin: bool,
    pub scope: String,
    pub csrf: String,
    /// When the session ends (RFC 3339).
    pub expires_at: String,
}

fn view(session: &Session, caller: &Caller) -> SessionView {
    SessionView {
        signed_in: true,
        tenant: if caller.is_admin_token() { session.tenant.clone() } else { Some(caller.tenant.clone()) },
        token_id: caller.token_id.clone(),
        admin: caller.is_admin_token(),
        scope: caller.scope.to_string(),
        csrf: session.csrf.clone(),
        expires_at: crate::views::time(session.expires),
    }
}

/// The tenant an admin session acts for: the one asked for (which must
/// exist), else `default`, else the first.
async fn admin_tenant(state: &ApiState, asked: Option<String>) -> Result<Option<String>, AppError> {
    let asked = asked.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    if let Some(asked) = asked {
        if asked == ADMIN_TENANT || state.store.get_tenant(&asked).await?.is_none() {
            return Err(AppError::NotFound(format!("there is no tenant `{asked}`")));
        }
        return Ok(Some(asked));
    }
    let tenants = state.store.list_tenants().await?;
    let default = tenants.iter().find(|t| t.name == DEFAULT_TENANT).or_else(|| tenants.first());
    Ok(default.map(|t| t.name.clone()))
}

/// `POST /ui/session`: signs in.
pub async fn sign_in(State(state): State<ApiState>, body: axum::body::Bytes) -> Response {
    let body: SignIn = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return AppError::bad("bad_body", format!("the body must be {{\"token\": \"dagr_…\"}}: {e}"))
                .into_response();
        }
    };
    let token = body.token.trim().to_owned();
    let caller = match caller_of(&state, &token).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let tenant = if caller.is_admin_token() {
        match admin_tenant(&state, body.tenant).await {
            Ok(tenant) => tenant,
            Err(e) => return e.into_response(),
        }
    } else {
        if let Some(asked) = body.tenant.filter(|t| !t.trim().is_empty() && t.trim() != caller.tenant) {
            return AppError::Forbidden(format!("this token acts only for tenant `{}`, not `{asked}`", caller.tenant))
                .into_response();
        }
        None
    };
    let ttl = state.config.ui_session.as_millis() as i64;
    let session = Session::new(token, tenant, ttl);
    let mut response = Json(view(&session, &caller)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session.cookie(&state));
    response
}

/// The session of a request and its caller, or the answer that there is
/// none (401).
async fn current(state: &ApiState, headers: &HeaderMap) -> Result<(Session, Caller), Response> {
    let session =
        session_of(state, headers)?.ok_or_else(|| AppError::Unauthorized("not signed in".into()).into_response())?;
    let caller = caller_of(state, &session.token).await?;
    Ok((session, caller))
}

/// `GET /ui/session`: who is signed in, and the CSRF value; or
/// `{"signed_in": false}` (a 200: asking is not a mistake, and the sign-in
/// page asks on every first visit).
pub async fn get_session(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    match current(&state, &headers).await {
        Ok((session, caller)) => Json(view(&session, &caller)).into_response(),
        Err(_) => Json(serde_json::json!({"signed_in": false})).into_response(),
    }
}

/// `DELETE /ui/session`: signs out (the cookie is cleared).
pub async fn sign_out(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    if let Ok(Some(session)) = session_of(&state, &headers)
        && !session.csrf_matches(&headers)
    {
        return AppError::Forbidden(format!("missing or wrong `{CSRF_HEADER}` header")).into_response();
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, set_cookie(&state, "", 0));
    response
}

/// `PUT /ui/session/tenant`: the admin token acts for another tenant.
pub async fn switch_tenant(State(state): State<ApiState>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let (session, caller) = match current(&state, &headers).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    if !session.csrf_matches(&headers) {
        return AppError::Forbidden(format!("missing or wrong `{CSRF_HEADER}` header")).into_response();
    }
    if !caller.is_admin_token() {
        return AppError::Forbidden(format!("this token acts only for tenant `{}`", caller.tenant)).into_response();
    }
    let body: SwitchTenant = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return AppError::bad("bad_body", format!("the body must be {{\"tenant\": \"…\"}}: {e}")).into_response();
        }
    };
    let tenant = match admin_tenant(&state, Some(body.tenant)).await {
        Ok(tenant) => tenant,
        Err(e) => return e.into_response(),
    };
    let session = Session { tenant, ..session };
    let mut response = Json(view(&session, &caller)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session.cookie(&state));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; dagr_session=xyz ; b=2"));
        assert_eq!(cookie_value(&headers, COOKIE), Some("xyz"));
        assert_eq!(cookie_value(&headers, "a"), Some("1"));
        assert_eq!(cookie_value(&headers, "dagr"), None);
    }

    #[test]
    fn the_csrf_value_must_match_exactly() {
        let session = Session::new("t".into(), None, 1000);
        let mut headers = HeaderMap::new();
        assert!(!session.csrf_matches(&headers));
        headers.insert(CSRF_HEADER, HeaderValue::from_str(&session.csrf).unwrap());
        assert!(session.csrf_matches(&headers));
        headers.insert(CSRF_HEADER, HeaderValue::from_str(&session.csrf[1..]).unwrap());
        assert!(!session.csrf_matches(&headers));
    }
}
