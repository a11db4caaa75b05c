//! Checks on a component before it is loaded (its header) and on what it
//! says about itself (its plugin info), each with a named limit.

use super::*;
pub(crate) fn check_header(bytes: &[u8]) -> Result<()> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(Error::NotWasm("it does not start with the WebAssembly magic bytes `\\0asm`".into()));
    }
    match &bytes[4..8] {
        [1, 0, 0, 0] => Err(Error::CoreModule),
        [0x0d, 0, 1, 0] => Ok(()),
        other => Err(Error::InvalidComponent(format!("unsupported WebAssembly version/layer {other:02x?}"))),
    }
}

pub(crate) fn explain_link_error(error: &wasmtime::Error) -> String {
    let message = error_chain(error);
    // wasmtime says: "component imports instance `foo:bar/baz`, but a
    // matching implementation was not found in the linker".
    if let Some(start) = message.find("imports ") {
        let rest = &message[start + "imports ".len()..];
        if let Some(name) = rest.split('`').nth(1) {
            return format!(
                "it imports `{name}`, which dagr does not provide (dagr offers dagr:plugin/host, \
                 WASI 0.2 and wasi:http); full error: {message}"
            );
        }
    }
    message
}

pub(crate) fn explain_export_error(error: &wasmtime::Error) -> String {
    let message = error_chain(error);
    if message.contains("dagr:plugin/task") {
        format!(
            "it does not export `dagr:plugin/task@0.1.0` with `describe` and `run` as the WIT defines them ({message})"
        )
    } else {
        format!("{message} (a plugin must export `dagr:plugin/task@0.1.0`)")
    }
}

/// The most bytes of a plugin-info's `version` (the WIT says so).
pub(crate) const MAX_VERSION_BYTES: usize = 64;
/// The most bytes of a plugin-info's `description` (the WIT says so): it is
/// kept by every node and listed by `GET /v1/plugins`.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 4 << 10;
/// The most bytes of a plugin-info's `params-schema` (the WIT says so).
pub(crate) const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// How deeply a params schema may nest (the WIT says so).
pub(crate) const SCHEMA_LIMITS: dagr_core::document::DocumentLimits = dagr_core::document::DocumentLimits {
    max_depth: dagr_core::document::DEFAULT_MAX_DEPTH,
    depth_key: "plugin-info params-schema",
    max_bytes: MAX_SCHEMA_BYTES,
    bytes_key: "plugin-info params-schema",
};

pub(crate) fn validate_info(info: bindings::PluginInfo) -> Result<PluginInfo> {
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info.name.starts_with(|c: char| c.is_ascii_lowercase())
        && info.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        return Err(Error::BadInfo(format!(
            "name `{}` must be 1 to 64 lowercase letters, digits or `-`, starting with a letter",
            info.name
        )));
    }
    if info.version.len() > MAX_VERSION_BYTES {
        return Err(Error::BadInfo(format!(
            "version is {} bytes long, more than the {MAX_VERSION_BYTES} a plugin-info version may have",
            info.version.len()
        )));
    }
    if info.description.len() > MAX_DESCRIPTION_BYTES {
        return Err(Error::BadInfo(format!(
            "description is {} bytes long, more than the {MAX_DESCRIPTION_BYTES} a plugin-info description may have",
            info.description.len()
        )));
    }
    let core = info.version.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit())) {
        return Err(Error::BadInfo(format!("version `{}` is not a semantic version like 1.2.3", info.version)));
    }
    let params_schema = match info.params_schema {
        None => None,
        Some(text) if text.len() > MAX_SCHEMA_BYTES => {
            return Err(Error::BadInfo(format!(
                "params schema is {} bytes long, more than the {MAX_SCHEMA_BYTES} a plugin-info params-schema may have",
                text.len()
            )));
        }
        Some(text) => {
            if let Err(e) = dagr_core::document::check_json(text.as_bytes(), &SCHEMA_LIMITS) {
                return Err(Error::BadInfo(format!("params schema: {e}")));
            }
            match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(schema @ (serde_json::Value::Object(_) | serde_json::Value::Bool(_))) => Some(schema),
                Ok(_) => {
                    return Err(Error::BadInfo("params schema must be a JSON object or boolean".into()));
                }
                Err(e) => return Err(Error::BadInfo(format!("params schema is not JSON: {e}"))),
            }
        }
    };
    Ok(PluginInfo { name: info.name, version: info.version, description: info.description, params_schema })
}
