//! Extractors whose rejections are [`AppError`]s: a malformed body or query
//! is a 400 that says where, in the same JSON shape as every other error.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::AppError;

/// A JSON body; errors name the offending field.
pub struct Json<T>(pub T);

impl<S, T> FromRequest<S> for Json<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.is_empty() {
            // An empty body means "all defaults" for optional request bodies.
            return serde_json::from_str("{}")
                .map(Json)
                .map_err(|_| AppError::bad("bad_body", "a JSON body is required"));
        }
        parse_json(&bytes).map(Json)
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
            AppError::TooLarge(format!("the request body is too large: {}", e.body_text()))
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
