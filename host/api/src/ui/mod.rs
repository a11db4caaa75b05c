//! The web UI, served by the API itself at `/ui/` (and `/` redirects there).
//!
//! - The pages are static files under `host/api/ui/`, embedded in the
//!   binary at build time (`build.rs`); with `DAGR_UI_DIR` set they are read
//!   from that directory instead, for working on them without a rebuild.
//! - Every `/ui/…` path that is not an asset (`/ui/assets/…`) is the page
//!   shell, `index.html`: the page routes itself, so a link to a run can be
//!   opened, bookmarked and shared.
//! - The pages talk to the same API as everyone else, signed in with a
//!   session cookie ([`session`]). Every answer here carries a strict
//!   Content-Security-Policy: scripts and styles only from dagr itself, no
//!   inline script, no framing.

mod session;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, put};
use sha2::{Digest as _, Sha256};

pub use self::session::{CSRF_HEADER, Session, session_of};
use crate::ApiState;
use crate::error::AppError;

mod assets {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// The policy of every page: nothing but dagr's own scripts, styles and
/// connections; no inline script or style attribute; not framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'; object-src 'none'";

/// The UI's routes (outside the API's authentication: the shell and its
/// assets are public, the session routes check the token themselves).
pub fn router() -> Router<ApiState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(shell))
        .route("/ui/session", get(session::get_session).post(session::sign_in).delete(session::sign_out))
        .route("/ui/session/tenant", put(session::switch_tenant))
        .route("/ui/assets/{*path}", get(asset))
        .route("/ui/{*path}", get(shell))
}

/// The content type of an asset, by its extension.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// Where the pages are read from at run time instead of the binary, for
/// working on them (`DAGR_UI_DIR`).
fn ui_dir() -> Option<PathBuf> {
    std::env::var_os("DAGR_UI_DIR").filter(|d| !d.is_empty()).map(PathBuf::from)
}

/// An asset's bytes and its ETag.
type Asset = (Cow<'static, [u8]>, String);

fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..16])
}

/// Asset `path` (relative to `ui/`): embedded (its ETag computed once), or
/// read from `DAGR_UI_DIR`.
fn load(path: &str) -> Option<Asset> {
    if path.split('/').any(|part| part.is_empty() || part == "." || part == ".." || part.starts_with('.'))
        || path == "test"
        || path.starts_with("test/")
    {
        return None;
    }
    if let Some(dir) = ui_dir() {
        let bytes = std::fs::read(dir.join(path)).ok()?;
        let tag = etag(&bytes);
        return Some((Cow::Owned(bytes), tag));
    }
    static EMBEDDED: OnceLock<HashMap<&'static str, (&'static [u8], String)>> = OnceLock::new();
    let embedded =
        EMBEDDED.get_or_init(|| assets::ASSETS.iter().map(|(name, bytes)| (*name, (*bytes, etag(bytes)))).collect());
    embedded.get(path).map(|(bytes, tag)| (Cow::Borrowed(*bytes), tag.clone()))
}

/// An asset with the headers every UI answer carries; 304 when the
/// browser's copy is current.
fn serve(path: &str, request: &HeaderMap) -> Response {
    let Some((bytes, etag)) = load(path) else {
        return AppError::NotFound(format!("the UI has no file `{path}`")).into_response();
    };
    let fresh = request.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| v == etag);
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { bytes.into_response() };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(path)));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    // Not fingerprinted: the browser keeps a copy and asks whether it is current.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    security_headers(headers);
    response
}

/// The headers of every page and asset.
pub fn security_headers(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
}

/// Every page: the shell, which routes itself.
async fn shell(State(_): State<ApiState>, headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    serve(&path, &headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_outside_the_ui_are_not_served() {
        for path in ["../Cargo.toml", "a/../../x", "/etc/passwd", ".hidden", "test/layout.test.mjs", "x//y"] {
            assert!(load(path).is_none(), "{path}");
        }
    }

    #[test]
    fn the_shell_is_embedded_with_its_policy() {
        let response = serve("index.html", &HeaderMap::new());
        assert_eq!(response.status(), StatusCode::OK);
        let csp = response.headers().get(header::CONTENT_SECURITY_POLICY).unwrap().to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "{csp}");
        assert_eq!(response.headers().get(header::CONTENT_TYPE).unwrap(), "text/html; charset=utf-8");
    }
}
