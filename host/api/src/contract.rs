//! What the OpenAPI document says besides each handler's own annotation:
//! the parts that hold for many routes at once and follow from the router
//! itself, so that they cannot drift from it.
//!
//! - The bearer security scheme, required everywhere but `/healthz`.
//! - 401 and 403 on every authenticated route; on tenant routes the
//!   optional `X-Dagr-Tenant` header (with which the admin token names the
//!   tenant it acts for), the 400 `tenant_required` the admin token gets
//!   without it, and the 404 for a tenant that does not exist — derived
//!   from [`auth::needs`], the very function the middleware asks.
//! - 400 where a body or a query can be malformed, 413 where there is a
//!   body, 429 (with `Retry-After`) where runs are created by hand.
//! - Bodies that may be left out are not required; the plugin upload is
//!   binary; a definition may be sent as YAML or JSON.

use axum::http::Method;
use serde_json::{Map, Value, json};

use crate::auth::{self, Needs, OPENAPI_ROUTE};

const ERROR: &str = "#/components/schemas/ApiError";

/// Workflow and task names (`dagr_core::definition::valid_name`).
const NAME_PATTERN: &str = "^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$";

/// Routes that create runs by hand, and so answer 429 past the tenant's
/// `runs_per_minute`.
const RATE_LIMITED: [(&str, &str); 2] = [("post", "/v1/workflows/{name}/runs"), ("post", "/v1/jobs")];

/// Routes whose JSON body may be left out (every field has a default).
const OPTIONAL_BODIES: [(&str, &str); 2] =
    [("post", "/v1/workflows/{name}/runs"), ("post", "/v1/runs/{id}/tasks/{task}/rerun")];

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": ERROR}}}})
}

/// Adds `code` to `responses` unless the handler documents it; otherwise
/// appends `also` to the handler's description.
fn respond(responses: &mut Map<String, Value>, code: &str, description: &str, also: Option<&str>) {
    match responses.get_mut(code) {
        None => {
            responses.insert(code.into(), error_response(description));
        }
        Some(existing) => {
            if let Some(also) = also {
                let text = existing["description"].as_str().unwrap_or_default().to_owned();
                let joined = if text.is_empty() { also.to_owned() } else { format!("{text}; {also}") };
                existing["description"] = Value::String(joined);
            }
        }
    }
}

/// Completes the generated document (see the module's doc).
pub fn complete(doc: &mut Value) {
    doc["components"]["securitySchemes"]["bearer"] = json!({
        "type": "http",
        "scheme": "bearer",
        "description": "An API token, `dagr_<id>_<secret>`: a tenant's, or the admin token (which names the \
                        tenant it acts for in `X-Dagr-Tenant` on tenant routes)."
    });
    doc["security"] = json!([{"bearer": []}]);

    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let Ok(http_method) = method.to_uppercase().parse::<Method>() else {
                continue;
            };
            complete_operation(path, method, &http_method, op);
        }
    }
    paths.insert(
        OPENAPI_ROUTE.into(),
        json!({"get": {
            "tags": ["system"],
            "summary": "This document. Any valid token may read it.",
            "operationId": "openapi",
            "responses": {
                "200": {"description": "The OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}},
                "401": error_response("No token, or one that is malformed, unknown or revoked"),
                "403": error_response("The token has no scope"),
            }
        }}),
    );
}

fn complete_operation(path: &str, method: &str, http_method: &Method, op: &mut Value) {
    if path == "/healthz" {
        op["security"] = json!([]);
        return;
    }
    let has_body = op.get("requestBody").is_some();
    let has_query = op["parameters"].as_array().is_some_and(|p| p.iter().any(|p| p["in"] == "query"));
    let tenant_route = matches!(auth::needs(http_method, Some(path)), Needs::Scope(_));
    if tenant_route {
        let header = json!({
            "name": "X-Dagr-Tenant",
            "in": "header",
            "required": false,
            "description": "With the admin token: the tenant to act for (required then). With a tenant's token: \
                            its own tenant, if given.",
            "schema": {"type": "string"}
        });
        match op.get_mut("parameters").and_then(Value::as_array_mut) {
            Some(parameters) => parameters.push(header),
            None => op["parameters"] = json!([header]),
        }
    }
    if (method, path) == ("post", "/v1/plugins") {
        // The body is the component's bytes, whatever its content type.
        let binary = json!({"schema": {"type": "string", "format": "binary"}});
        op["requestBody"]["content"] = json!({"application/octet-stream": binary, "application/wasm": binary});
    }
    if (method, path) == ("post", "/v1/workflows") {
        op["requestBody"]["content"] = json!({
            "application/yaml": {"schema": {"type": "string", "description": "The definition as YAML"}},
            "application/json": {"schema": {"type": "object", "description": "The definition as JSON; see docs/workflow.schema.json"}}
        });
    }
    if path == "/v1/secrets/{name}"
        && let Some(parameters) = op.get_mut("parameters").and_then(Value::as_array_mut)
    {
        for p in parameters.iter_mut().filter(|p| p["in"] == "path" && p["name"] == "name") {
            p["schema"] = json!({"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"});
            p["description"] = json!("Letters, digits, `_`, `-` and `.`, at most 128");
        }
    }
    // Workflow and task names follow the definitions' name rule.
    if let Some(parameters) = op.get_mut("parameters").and_then(Value::as_array_mut) {
        for p in parameters.iter_mut().filter(|p| p["in"] == "path") {
            let named = (path.starts_with("/v1/workflows/{name}") && p["name"] == "name") || p["name"] == "task";
            if named {
                p["schema"] = json!({"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 128});
            }
        }
    }
    if OPTIONAL_BODIES.contains(&(method, path)) {
        op["requestBody"]["required"] = json!(false);
    }
    let Some(responses) = op["responses"].as_object_mut() else {
        return;
    };
    let www = json!({"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}});
    let mut unauthorized = error_response("No token, or one that is malformed, unknown or revoked");
    unauthorized["headers"] = www;
    responses.entry("401").or_insert(unauthorized);
    let forbidden = if tenant_route {
        "The token's scope is too small, or it names another tenant in X-Dagr-Tenant"
    } else {
        "Not the admin token (tenants) or not the admin scope (tokens)"
    };
    respond(responses, "403", forbidden, None);
    if tenant_route {
        respond(
            responses,
            "400",
            "`tenant_required`: the admin token did not name a tenant in X-Dagr-Tenant",
            Some("or `tenant_required`: the admin token did not name a tenant in X-Dagr-Tenant"),
        );
        respond(
            responses,
            "404",
            "The tenant named in X-Dagr-Tenant does not exist",
            Some("or the tenant named in X-Dagr-Tenant does not exist"),
        );
    }
    if has_body || has_query {
        respond(responses, "400", "The body or a query parameter is malformed; `location` says where", None);
    }
    if has_body {
        respond(responses, "413", "The body is larger than its limit ([api] max_body, [plugins] max_upload)", None);
    }
    if RATE_LIMITED.contains(&(method, path)) {
        let mut limited = error_response("The tenant's runs_per_minute is used up; try again after Retry-After");
        limited["headers"] = json!({"Retry-After": {
            "description": "Seconds until a run may be created again",
            "schema": {"type": "integer"}
        }});
        responses.entry("429").or_insert(limited);
    }
}
