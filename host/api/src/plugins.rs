//! The plugin registry's endpoints: list, upload, show and delete a tenant's
//! plugins. Built-ins are listed beside them, global and read-only.
//!
//! An upload is checked by an [`Inspector`] (a limited child process), then
//! its bytes are stored once under their sha256 and its `name@version` is
//! published for the caller's tenant. A published version never changes:
//! the same bytes again are a no-op (200), other bytes a conflict (409).

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use dagr_protocol::api::ApiError;
use dagr_protocol::now_ms;
use dagr_protocol::plugins::{InspectOutcome, PluginDescriptor};
use dagr_store::{PluginInsert, PluginRow};
use futures::StreamExt as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::Path;
use crate::inspect::{InspectError, Inspector};
use crate::{ApiState, Tenant};

type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

/// How the API takes plugin uploads.
#[derive(Debug, Clone)]
pub struct UploadConfig {
    /// The largest component accepted; larger uploads get 413.
    pub max_bytes: usize,
    /// Checks uploads in a limited child process. `None`: this server
    /// takes no uploads (400).
    pub inspector: Option<Inspector>,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig { max_bytes: 20 << 20, inspector: None }
    }
}

/// The plugins the tenant may use: the built-ins and its own versions, with
/// what each describes about itself.
#[utoipa::path(get, path = "/v1/plugins", tag = "plugins", responses((status = 200, body = Vec<PluginDescriptor>)))]
pub async fn list_plugins(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<PluginDescriptor>> {
    Ok((StatusCode::OK, axum::Json(state.plugins.list(&tenant.0))))
}

/// The versions of one plugin the tenant may use.
#[utoipa::path(
    get, path = "/v1/plugins/{name}", tag = "plugins", params(("name" = String, Path)),
    responses((status = 200, body = Vec<PluginDescriptor>), (status = 404, body = ApiError))
)]
pub async fn get_plugin(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(name): Path<String>,
) -> Answer<Vec<PluginDescriptor>> {
    let mut versions = versions_of(&state, &tenant.0, &name);
    if versions.is_empty() {
        // Published through another node a moment ago?
        state.plugins.refresh().await;
        versions = versions_of(&state, &tenant.0, &name);
    }
    if versions.is_empty() {
        return Err(AppError::NotFound(format!("there is no plugin `{name}`")));
    }
    Ok((StatusCode::OK, axum::Json(versions)))
}

fn versions_of(state: &ApiState, tenant: &str, name: &str) -> Vec<PluginDescriptor> {
    state.plugins.list(tenant).into_iter().filter(|d| d.name == name).collect()
}

/// Publishes a plugin version for the tenant. The body is the component
/// (`.wasm`); its name and version are what its `describe()` says.
#[utoipa::path(
    post, path = "/v1/plugins", tag = "plugins",
    request_body(content = Vec<u8>, description = "The component", content_type = "application/wasm"),
    responses(
        (status = 201, body = PluginDescriptor, description = "A new version"),
        (status = 200, body = PluginDescriptor, description = "This version was published with these very bytes"),
        (status = 400, body = ApiError, description = "Not a plugin component, a built-in's name, or a limit hit while compiling it"),
        (status = 409, body = ApiError, description = "This version is published with other bytes"),
        (status = 413, body = ApiError, description = "Larger than plugins.max_upload"),
    )
)]
pub async fn upload_plugin(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    request: Request,
) -> Answer<PluginDescriptor> {
    let uploads = &state.config.uploads;
    let Some(inspector) = uploads.inspector.as_ref() else {
        return Err(AppError::bad("uploads_disabled", "this server does not take plugin uploads"));
    };
    let bytes = read_limited(request, uploads.max_bytes).await?;
    let info = match inspector.inspect(bytes.clone()).await {
        Ok(InspectOutcome::Valid { name, version, description, params_schema }) => {
            (name, version, description, params_schema)
        }
        Ok(InspectOutcome::Invalid { message }) | Err(InspectError::Invalid(message)) => {
            return Err(AppError::bad("invalid_plugin", message));
        }
        Err(InspectError::Limit(message)) => return Err(AppError::bad("plugin_limit", message)),
        Err(InspectError::Failed(message)) => return Err(AppError::internal(format!("plugin inspection: {message}"))),
    };
    let (name, version, description, params_schema) = info;
    // PostgreSQL's text cannot hold NUL; a description is for people.
    if description.contains('\0') {
        return Err(AppError::bad(
            "invalid_plugin",
            "the plugin's description (from describe()) contains a NUL character",
        ));
    }
    if state.plugins.list(&tenant.0).iter().any(|d| d.builtin && d.name == name) {
        return Err(AppError::bad(
            "builtin_name",
            format!("`{name}` is the name of a built-in plugin; publish yours under another name"),
        ));
    }
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let now = now_ms();
    let row = PluginRow {
        tenant: tenant.0.clone(),
        name: name.clone(),
        version: version.clone(),
        sha256: sha256.clone(),
        description: description.clone(),
        params_schema: params_schema.as_ref().map(Value::to_string),
        size: bytes.len() as i64,
        created_at: now,
    };
    let mut inserted = PluginInsert::MissingBlob;
    // A delete of the last version using these bytes may remove the blob
    // between the two calls; storing it again once settles that.
    for _ in 0..2 {
        state.store.put_plugin_blob(&sha256, &bytes, now).await?;
        inserted = state.store.insert_plugin(&row).await?;
        if inserted != PluginInsert::MissingBlob {
            break;
        }
    }
    let descriptor = PluginDescriptor {
        name,
        version,
        description,
        params_schema,
        sha256: sha256.clone(),
        size: bytes.len() as u64,
        builtin: false,
    };
    let status = match inserted {
        PluginInsert::Created => StatusCode::CREATED,
        PluginInsert::Unchanged => StatusCode::OK,
        PluginInsert::Conflict { sha256: published } => {
            return Err(AppError::Conflict(format!(
                "{}@{} is already published with other content (sha256 {published}); published versions are \
                 immutable: give this one a new version",
                descriptor.name, descriptor.version
            )));
        }
        PluginInsert::MissingBlob => {
            return Err(AppError::internal(format!("the blob {sha256} vanished twice while publishing")));
        }
    };
    if status == StatusCode::CREATED {
        state.plugins.refresh().await;
        let target = format!("{}@{}", descriptor.name, descriptor.version);
        audit(&state, &caller, &tenant.0, "plugin.upload", &target, json!({"sha256": sha256, "size": descriptor.size}))
            .await;
    }
    Ok((status, axum::Json(descriptor)))
}

/// Reads the body, refusing more than `max` bytes (413).
///
/// A body a little too large is read to its end before the answer, so that
/// the client, still sending, does not see the connection reset instead of
/// the 413; one far too large is refused at once.
async fn read_limited(request: Request, max: usize) -> ApiResult<bytes::Bytes> {
    let too_large =
        || AppError::TooLarge(format!("the component is larger than the limit of {max} bytes (plugins.max_upload)"));
    let drain_up_to = max.saturating_mul(4);
    let declared =
        request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > drain_up_to as u64) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(declared.map_or(0, |n| (n as usize).min(max)));
    let mut seen = 0usize;
    let mut stream = request.into_body().into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| AppError::bad("bad_body", format!("cannot read the request body: {e}")))?;
        seen += chunk.len();
        if seen > drain_up_to {
            return Err(too_large());
        }
        if seen <= max {
            body.extend_from_slice(&chunk);
        }
    }
    if seen > max {
        return Err(too_large());
    }
    if body.is_empty() {
        return Err(AppError::bad("bad_body", "the body must be the component (.wasm)"));
    }
    Ok(body.into())
}

/// Deletes one of the tenant's plugin versions. Refused while a workflow's
/// latest version uses it: pinned as `name@version`, or as `name` when it is
/// the latest version.
#[utoipa::path(
    delete, path = "/v1/plugins/{name}/{version}", tag = "plugins",
    params(("name" = String, Path), ("version" = String, Path)),
    responses(
        (status = 200, body = PluginDescriptor, description = "The deleted version"),
        (status = 404, body = ApiError),
        (status = 409, body = ApiError, description = "A built-in plugin, or workflows use it; the message says which"),
    )
)]
pub async fn delete_plugin(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path((name, version)): Path<(String, String)>,
) -> Answer<PluginDescriptor> {
    state.plugins.refresh().await;
    let versions = versions_of(&state, &tenant.0, &name);
    let Some(found) = versions.iter().find(|d| d.version == version).cloned() else {
        return Err(AppError::NotFound(format!("there is no plugin {name}@{version}")));
    };
    if found.builtin {
        return Err(AppError::Conflict(format!(
            "{name}@{version} is built into dagr; built-in plugins cannot be deleted"
        )));
    }
    let is_latest = state.plugins.resolve(&tenant.0, &name, None).is_ok_and(|latest| latest.version == version);
    let users = workflows_using(&state, &tenant.0, &name, &version, is_latest).await?;
    if !users.is_empty() {
        return Err(AppError::Conflict(format!(
            "{name}@{version} is in use by {}: point those tasks at another version, or delete the workflow, first",
            users.join(", ")
        )));
    }
    if !state.store.delete_plugin(&tenant.0, &name, &version).await? {
        return Err(AppError::NotFound(format!("there is no plugin {name}@{version}")));
    }
    state.plugins.refresh().await;
    audit(&state, &caller, &tenant.0, "plugin.delete", &format!("{name}@{version}"), json!({"sha256": found.sha256}))
        .await;
    Ok((StatusCode::OK, axum::Json(found)))
}

/// The tenant's workflows whose latest version has a task on `name@version`
/// (or on `name` alone, when `version` is the latest), as
/// `workflow "w" (tasks a, b)`.
async fn workflows_using(
    state: &ApiState,
    tenant: &str,
    name: &str,
    version: &str,
    is_latest: bool,
) -> ApiResult<Vec<String>> {
    let mut users = Vec::new();
    for workflow in state.store.list_workflows(tenant).await? {
        let Some(latest) = state.store.get_version(tenant, &workflow.name, workflow.latest_version).await? else {
            continue;
        };
        let spec: Value = serde_json::from_str(&latest.spec).unwrap_or(Value::Null);
        let tasks: Vec<&str> = spec["tasks"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|task| {
                let reference = task["plugin"].as_str().unwrap_or_default();
                match reference.split_once('@') {
                    Some((n, v)) => n == name && v == version,
                    None => reference == name && is_latest,
                }
            })
            .filter_map(|task| task["name"].as_str())
            .collect();
        if !tasks.is_empty() {
            let label = if tasks.len() == 1 { "task" } else { "tasks" };
            users.push(format!("workflow `{}` ({label} {})", workflow.name, tasks.join(", ")));
        }
    }
    Ok(users)
}
