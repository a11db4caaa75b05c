//! The one HTTP error type. It owns the mapping to status codes and never
//! leaks internals: user mistakes say what and where; internal failures say
//! "internal error" with a request id, and are logged in full.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use dagr_protocol::api::{ApiError, ErrorDetail};

#[derive(Debug)]
pub enum AppError {
    /// The request itself is malformed or invalid (400).
    BadRequest { code: &'static str, message: String, location: Option<String>, details: Vec<ErrorDetail> },
    /// No token, or one that is malformed, unknown or revoked (401).
    Unauthorized(String),
    /// The token may not do this: its scope is too small (403).
    Forbidden(String),
    /// No such thing, or not the caller's (404).
    NotFound(String),
    /// The request is fine but conflicts with the current state (409).
    Conflict(String),
    /// The route exists, but not with this method (405; axum adds `Allow`).
    MethodNotAllowed,
    /// The body is larger than allowed (413).
    TooLarge(String),
    /// A tenant's quota is used up for now (429); `retry_after` is in seconds.
    RateLimited { message: String, retry_after: u64 },
    /// A failure of dagr itself (500). The message is logged, not returned.
    Internal(String),
}

pub type ApiResult<T> = Result<T, AppError>;

impl AppError {
    pub fn bad(code: &'static str, message: impl Into<String>) -> Self {
        AppError::BadRequest { code, message: message.into(), location: None, details: Vec::new() }
    }

    pub fn bad_at(code: &'static str, location: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::BadRequest { code, message: message.into(), location: Some(location.into()), details: Vec::new() }
    }

    pub fn invalid(code: &'static str, invalid: &dagr_core::Invalid) -> Self {
        let first = invalid.first();
        let details = invalid
            .issues
            .iter()
            .map(|i| ErrorDetail { location: i.location.clone(), message: i.message.clone() })
            .collect();
        AppError::BadRequest {
            code,
            message: first.message.clone(),
            location: (!first.location.is_empty()).then(|| first.location.clone()),
            details,
        }
    }

    pub fn internal(error: impl std::fmt::Display) -> Self {
        AppError::Internal(error.to_string())
    }
}

impl From<dagr_store::Error> for AppError {
    fn from(e: dagr_store::Error) -> Self {
        AppError::Internal(format!("store: {e}"))
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            AppError::BadRequest { code, message, location, details } => {
                (StatusCode::BAD_REQUEST, ApiError { code: code.into(), message, location, details })
            }
            AppError::Unauthorized(message) => {
                let body = axum::Json(error("unauthorized", message));
                return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response();
            }
            AppError::Forbidden(message) => (StatusCode::FORBIDDEN, error("forbidden", message)),
            AppError::RateLimited { message, retry_after } => {
                let body = axum::Json(error("rate_limited", message));
                let retry_after = retry_after.to_string();
                return (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, retry_after)], body).into_response();
            }
            AppError::NotFound(message) => (StatusCode::NOT_FOUND, error("not_found", message)),
            AppError::Conflict(message) => (StatusCode::CONFLICT, error("conflict", message)),
            AppError::TooLarge(message) => (StatusCode::PAYLOAD_TOO_LARGE, error("too_large", message)),
            AppError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                error(
                    "method_not_allowed",
                    "this endpoint does not take that method; the Allow header lists those it takes".into(),
                ),
            ),
            AppError::Internal(message) => {
                let request = uuid::Uuid::new_v4();
                tracing::error!(%request, %message, "internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, error("internal", format!("internal error (request {request})")))
            }
        };
        (status, axum::Json(body)).into_response()
    }
}

fn error(code: &str, message: String) -> ApiError {
    ApiError { code: code.into(), message, location: None, details: Vec::new() }
}
