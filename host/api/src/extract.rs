//! Extractors whose rejections are [`AppError`]s: a malformed body or query
//! is a 400 that says where, in the same JSON shape as every other error.
//!
//! A JSON body is checked against the API's [`DocumentLimits`] (its
//! nesting depth) before it is parsed, and a large one is checked and
//! parsed on a blocking thread ([`off_runtime`]), so that a hostile body
//! never holds up the requests that share the async runtime's threads.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use bytes::Bytes;
use dagr_core::document::{DocumentError, DocumentLimits, check_json};
use serde::de::DeserializeOwned;

use crate::ApiState;
use crate::error::AppError;

/// Bodies up to this size are parsed where they arrive: parsing them takes
/// microseconds, less than handing them to another thread.
pub const INLINE_PARSE_BYTES: usize = 16 << 10;

/// A JSON body; errors name the offending field.
pub struct Json<T>(pub T);

impl<T> FromRequest<ApiState> for Json<T>
where
    T: DeserializeOwned + Send + 'static,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.is_empty() {
            return Err(AppError::bad("bad_body", "a JSON body is required"));
        }
        let limits = state.config.document_limits();
        off_runtime(bytes.len(), move || parse_json_limited(&bytes, &limits)).await.map(Json)
    }
}

/// A JSON body that may be left out: no body means `T::default()` (every
/// field at its default). Declared as an optional request body.
pub struct OptionalJson<T>(pub T);

impl<T> FromRequest<ApiState> for OptionalJson<T>
where
    T: DeserializeOwned + Default + Send + 'static,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.is_empty() {
            return Ok(OptionalJson(T::default()));
        }
        let limits = state.config.document_limits();
        off_runtime(bytes.len(), move || parse_json_limited(&bytes, &limits)).await.map(OptionalJson)
    }
}

/// Runs `work` (parsing or validating `size` bytes of a tenant's document)
/// on a blocking thread unless the document is small.
pub async fn off_runtime<T, F>(size: usize, work: F) -> Result<T, AppError>
where
    F: FnOnce() -> Result<T, AppError> + Send + 'static,
    T: Send + 'static,
{
    if size <= INLINE_PARSE_BYTES {
        return work();
    }
    tokio::task::spawn_blocking(work).await.map_err(|e| AppError::internal(format!("parsing a body: {e}")))?
}

/// Checks JSON against `limits`, then parses it.
pub fn parse_json_limited<T: DeserializeOwned>(bytes: &[u8], limits: &DocumentLimits) -> Result<T, AppError> {
    check_json(bytes, limits).map_err(document_error)?;
    parse_json(bytes)
}

/// A document refused by its limits: 413 for its size, 400 otherwise.
pub fn document_error(error: DocumentError) -> AppError {
    if error.is_size() {
        return AppError::TooLarge(error.to_string());
    }
    let code = match error {
        DocumentError::TooDeep { .. } => "too_deep",
        _ => "bad_body",
    };
    let location = error.location().to_owned();
    if location.is_empty() {
        AppError::bad(code, error.to_string())
    } else {
        AppError::bad_at(code, location, error.to_string())
    }
}

pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        if path == "." { AppError::bad("bad_body", message) } else { AppError::bad_at("bad_body", path, message) }
    })
}

pub async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, AppError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            AppError::TooLarge(format!("the request body is too large: {} ([api] max_body)", e.body_text()))
        } else {
            AppError::bad("bad_body", format!("cannot read the request body: {}", e.body_text()))
        }
    })
}

/// Query parameters; an unknown or malformed one is a 400 naming it.
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let de = serde_urlencoded::Deserializer::new(form_urlencoded_parse(query));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| AppError::bad_at("bad_query", format!("?{}", e.path()), e.inner().to_string()))
    }
}

fn form_urlencoded_parse(query: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(query.as_bytes())
}

/// Path parameters; a malformed one (not UTF-8 once decoded, not of the
/// type) is a 400 in the API's JSON shape, not axum's plain text.
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(e) => Err(AppError::bad("bad_path", e.body_text())),
        }
    }
}
