//! Hostile: builds in its scratch directory what a recursive walk of the
//! host cannot survive, or what a quota that joins paths cannot count.
//!
//! Params (every field optional):
//! - `depth`: nest this many directories, keeping only the newest one open
//!   (so neither a path length nor a descriptor limit stops it);
//! - `bytes`: then write a file of this many bytes at the bottom;
//! - `files`: create this many empty files in the scratch directory;
//! - `open`: open the same file this many times and keep every descriptor;
//! - `fields`: make this many HTTP `fields` resources (no network needed)
//!   and keep them, appending headers of 1 KiB to each until it holds
//!   `field_bytes` (the host traps a guest whose fields grow too large);
//! - `hold_ms`: then wait this long before returning (holding what it made).
//!
//! Output: how far each step got, and the error that stopped it, if any.

use dagr_sdk::{Context, Inputs, Task, TaskError, json};
use serde::Deserialize;
use serde_json::Value;
use wasip2::filesystem::preopens::get_directories;
use wasip2::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};
use wasip2::http::types::Fields;

pub struct DeepDir;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Params {
    depth: u64,
    bytes: u64,
    files: u64,
    open: u64,
    fields: u64,
    field_bytes: u64,
    hold_ms: u64,
}

fn scratch() -> Result<Descriptor, TaskError> {
    get_directories()
        .into_iter()
        .find(|(_, path)| path == "/scratch")
        .map(|(dir, _)| dir)
        .ok_or_else(|| TaskError::fatal("no /scratch preopen"))
}

/// A directory is opened for reading and changing its entries (never
/// `WRITE`: that is refused as `EISDIR`).
fn dir_flags() -> DescriptorFlags {
    DescriptorFlags::READ | DescriptorFlags::MUTATE_DIRECTORY
}

fn rw() -> DescriptorFlags {
    DescriptorFlags::READ | DescriptorFlags::WRITE | DescriptorFlags::MUTATE_DIRECTORY
}

impl Task for DeepDir {
    type Params = Params;
    type Output = Value;

    fn run(_: &Context, params: Params, _: &Inputs) -> Result<Value, TaskError> {
        let root = scratch()?;
        let mut out = serde_json::Map::new();

        let mut files = 0;
        let mut files_error = None;
        for i in 0..params.files {
            match root.open_at(PathFlags::empty(), &format!("f{i}"), OpenFlags::CREATE, rw()) {
                Ok(_) => files += 1,
                Err(e) => {
                    files_error = Some(format!("{e:?}"));
                    break;
                }
            }
        }
        out.insert("files".into(), json!({"made": files, "error": files_error}));

        let mut held = Vec::new();
        let mut open_error = None;
        if params.open > 0 {
            let _ = root.open_at(PathFlags::empty(), "held", OpenFlags::CREATE, rw());
            for _ in 0..params.open {
                match root.open_at(PathFlags::empty(), "held", OpenFlags::empty(), DescriptorFlags::READ) {
                    Ok(fd) => held.push(fd),
                    Err(e) => {
                        open_error = Some(format!("{e:?}"));
                        break;
                    }
                }
            }
        }
        out.insert("open".into(), json!({"held": held.len(), "error": open_error}));

        let mut fields = Vec::new();
        let mut largest = 0u64;
        let mut fields_error = None;
        let value = vec![b'v'; 1024];
        for _ in 0..params.fields {
            let headers = Fields::new();
            let mut bytes = 0u64;
            while bytes < params.field_bytes {
                match headers.append(&format!("x-h{bytes}"), &value) {
                    Ok(()) => bytes += value.len() as u64,
                    Err(e) => {
                        fields_error = Some(format!("{e:?}"));
                        break;
                    }
                }
            }
            largest = largest.max(bytes);
            fields.push(headers);
        }
        out.insert("fields".into(), json!({"made": fields.len(), "largest": largest, "error": fields_error}));

        let mut current: Option<Descriptor> = None;
        let mut depth = 0;
        let mut depth_error = None;
        for _ in 0..params.depth {
            let parent = current.as_ref().unwrap_or(&root);
            let step = parent
                .create_directory_at("d")
                .and_then(|()| parent.open_at(PathFlags::empty(), "d", OpenFlags::DIRECTORY, dir_flags()));
            match step {
                Ok(child) => {
                    current = Some(child);
                    depth += 1;
                }
                Err(e) => {
                    depth_error = Some(format!("{e:?}"));
                    break;
                }
            }
        }
        let mut written = 0u64;
        let mut write_error = None;
        if params.bytes > 0 {
            let bottom = current.as_ref().unwrap_or(&root);
            match bottom.open_at(PathFlags::empty(), "data", OpenFlags::CREATE, rw()) {
                Ok(file) => {
                    let chunk = vec![7u8; 64 * 1024];
                    while written < params.bytes {
                        let n = (params.bytes - written).min(chunk.len() as u64) as usize;
                        match file.write(&chunk[..n], written) {
                            Ok(w) => written += w,
                            Err(e) => {
                                write_error = Some(format!("{e:?}"));
                                break;
                            }
                        }
                    }
                }
                Err(e) => write_error = Some(format!("{e:?}")),
            }
        }
        out.insert("depth".into(), json!({"reached": depth, "error": depth_error}));
        out.insert("bytes".into(), json!({"written": written, "error": write_error}));
        if params.hold_ms > 0 {
            let pollable = wasip2::clocks::monotonic_clock::subscribe_duration(params.hold_ms * 1_000_000);
            pollable.block();
        }
        drop(held);
        drop(fields);
        Ok(Value::Object(out))
    }
}

dagr_sdk::export!(DeepDir);
