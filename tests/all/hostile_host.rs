//! What a guest can make the host hold outside its memory cap, tried with
//! the hostile `deepdir` component (issue 12, items 1, 5, 6 and 7): a
//! directory chain deeper than any recursive walk survives, descriptors by
//! the thousand, HTTP header resources by the thousand, more files than the
//! scratch directory may hold, bytes hidden below paths longer than 4 KiB.
//! Each is stopped by a limit that the failure names, the scratch
//! directory is gone afterwards, and the same runtime goes on working.

use std::path::Path;

use dagr_builtins as builtins;
use dagr_runtime::{FailureKind, Runtime};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::Api;
use crate::support::{assert_echo_works, execution, failure, load, output_json, runtime_with, write_leb};

/// A runtime whose scratch directories live under `root`, with `adjust`.
fn runtime_in(root: &Path, adjust: impl FnOnce(&mut dagr_runtime::RuntimeConfig)) -> Runtime {
    let scratch = root.join("scratch");
    runtime_with(|config| {
        config.scratch_root = scratch;
        adjust(config);
    })
}

/// Everything left under the runtime's scratch root.
fn leftovers(root: &Path) -> Vec<String> {
    let mut left = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root.join("scratch")) {
        for entry in entries.flatten() {
            let nested = std::fs::read_dir(entry.path()).map(|d| d.count()).unwrap_or(0);
            if nested > 0 {
                left.push(format!("{} ({nested} entries)", entry.path().display()));
            }
        }
    }
    left
}

async fn deepdir(runtime: &Runtime, params: Value, scratch_bytes: Option<u64>) -> dagr_runtime::AttemptReport {
    let plugin = load(runtime, builtins::DEEPDIR_PATH);
    let mut exec = execution(params);
    exec.limits.scratch_bytes = scratch_bytes;
    runtime.execute(&plugin, exec).await
}

/// Item 1: a chain of 20,000 nested directories (only the newest kept open)
/// once overflowed the host's recursive walk and aborted the process, again
/// on every restart. Now the attempt fails naming the depth limit, and the
/// chain is removed without recursion.
#[tokio::test]
async fn a_directory_chain_deeper_than_any_stack_fails_the_attempt_not_the_host() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime_in(root.path(), |_| {});
    let report = deepdir(&runtime, json!({"depth": 20_000}), None).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::ScratchQuota, "{failed}");
    assert!(failed.message.contains("scratch_max_depth"), "the limit is named: {failed}");
    assert!(leftovers(root.path()).is_empty(), "left behind: {:?}", leftovers(root.path()));
    assert_echo_works(&runtime).await;
}

/// Item 5: one task opened the same file ~20,000 times (real descriptors of
/// the node) until the whole process hit EMFILE. An attempt now holds at
/// most `max_handles` resources at once.
#[tokio::test]
async fn descriptors_by_the_thousand_stop_at_max_handles() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime_in(root.path(), |c| c.max_handles = 256);
    let report = deepdir(&runtime, json!({"open": 20_000}), None).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::HandleLimit, "{failed}");
    assert!(failed.message.contains("max_handles = 256"), "the limit is named: {failed}");
    // Within the limit the same task is fine.
    let report = deepdir(&runtime, json!({"open": 200}), None).await;
    assert_eq!(output_json(&report)["open"], json!({"held": 200, "error": null}));
    assert!(leftovers(root.path()).is_empty(), "left behind: {:?}", leftovers(root.path()));
    assert_echo_works(&runtime).await;
}

/// Item 6: 6,000 HTTP `fields` of 120 KiB each, made without any network
/// permission, grew the host by ~740 MiB for a task capped at 64 MiB. One
/// `fields` holds at most `http_field_bytes`, and there are at most
/// `max_handles` of them.
#[tokio::test]
async fn http_header_resources_are_bounded_in_size_and_number() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime_in(root.path(), |c| {
        c.max_handles = 512;
        c.http_field_bytes = 16 << 10;
    });
    // Within both limits: fine.
    let report = deepdir(&runtime, json!({"fields": 100, "field_bytes": 8 << 10}), None).await;
    let out = output_json(&report);
    assert_eq!(out["fields"], json!({"made": 100, "largest": 8 << 10, "error": null}), "{out}");
    // One set of headers of 120 KiB: stopped at 16 KiB.
    let report = deepdir(&runtime, json!({"fields": 1, "field_bytes": 120 << 10}), None).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::MemoryLimit, "{failed}");
    assert!(failed.message.contains("http_field_bytes = 16384"), "the limit is named: {failed}");
    // 6,000 of them: stopped at 512 resources.
    let report = deepdir(&runtime, json!({"fields": 6_000, "field_bytes": 1 << 10}), None).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::HandleLimit, "{failed}");
    assert!(failed.message.contains("max_handles = 512"), "{failed}");
    assert_echo_works(&runtime).await;
}

/// Item 7: 100,000 empty files cost inodes, not bytes; bytes written below a
/// path longer than 4 KiB were once counted as 0. Both fail the attempt.
#[tokio::test]
async fn files_and_hidden_bytes_count_against_the_scratch_limits() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime_in(root.path(), |c| c.scratch_max_entries = 1_000);
    let report = deepdir(&runtime, json!({"files": 5_000}), Some(64 << 20)).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::ScratchQuota, "{failed}");
    assert!(failed.message.contains("scratch_max_entries"), "the limit is named: {failed}");

    // 60 levels of a 1-byte name each are short, so make the path long
    // with the depth limit raised: the bytes at the bottom still count.
    let runtime = runtime_in(root.path(), |c| c.scratch_max_depth = 3_000);
    let report = deepdir(&runtime, json!({"depth": 2_500, "bytes": 24 << 20}), Some(8 << 20)).await;
    let failed = failure(&report);
    assert_eq!(failed.kind, FailureKind::ScratchQuota, "{failed}");
    assert!(leftovers(root.path()).is_empty(), "left behind: {:?}", leftovers(root.path()));
    assert_echo_works(&runtime).await;
}

/// Item 1, on a real `dagr serve`: the attempt that once aborted the whole
/// process (and again after every restart) fails alone; the server answers
/// throughout, restarts on its data, and runs the next job.
#[tokio::test]
async fn a_deep_directory_chain_on_dagr_serve_fails_its_task_and_the_server_restarts_clean() {
    let server = crate::e2e::own_server().await;
    let api = Api::of(&server);
    // Bytes no cache has seen (a custom section of this run's own), so that
    // only the upload's check can have compiled them.
    let unique = format!("{:?}", std::time::SystemTime::now());
    let bytes = crate::support::with_custom_section(
        &std::fs::read(builtins::DEEPDIR_PATH).unwrap(),
        "dagr-test",
        unique.as_bytes(),
    );
    let (status, body) = api.upload(&bytes).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Item 8: the upload's check compiled it, in its limited child, into
    // the node's code cache; the node loads that and compiles nothing.
    let sha256 = dagr_runtime::sha256_hex(&bytes);
    let (status, answer) =
        api.post("/v1/jobs?wait=true", json!({"plugin": "deepdir", "params": {"depth": 20_000}})).await;
    let loaded = server.log().lines().find(|l| l.contains("plugin loaded") && l.contains(&sha256)).map(str::to_owned);
    let loaded = loaded.unwrap_or_else(|| panic!("no `plugin loaded` line for {sha256}:\n{}", server.log()));
    assert!(loaded.contains("Cached"), "the node compiled the component itself: {loaded}");
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["state"], "failed", "{answer}");
    let run = answer["run_id"].as_str().unwrap().to_owned();
    let task = api.task(&run, "deepdir").await;
    assert!(task["error"].as_str().unwrap_or_default().contains("scratch_max_depth"), "{task:#}");
    assert_eq!(api.get("/healthz").await.0, StatusCode::OK);

    let server = crate::e2e::restart(server).await;
    let api = Api::of(&server);
    let (status, answer) =
        api.post("/v1/jobs?wait=true", json!({"plugin": "echo", "params": {"after": "restart"}})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["state"], "succeeded", "{answer}");
    let scratch = server.data_dir().join("scratch");
    let deepest = walkdir_depth(&scratch);
    assert!(deepest < 8, "the chain is still under {} ({deepest} levels)", scratch.display());
}

/// How deep the directories under `root` go (iteratively: the tree may be
/// deep).
fn walkdir_depth(root: &Path) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
    }
    deepest
}

/// Whatever kills its node while it runs, a task is not retried forever:
/// lost with its node more than `[master] max_lost_attempts` times, it
/// fails, and the node that restarts does not run it again. Tried with
/// real `kill -9`s of `dagr serve` while the attempt runs.
#[tokio::test]
async fn a_task_lost_with_its_node_too_often_fails_instead_of_crash_looping() {
    let server = tokio::task::spawn_blocking(|| {
        crate::server::DagrServer::start_with(&[("DAGR_MASTER__MAX_LOST_ATTEMPTS", "1")])
    })
    .await
    .unwrap();
    let api = Api::of(&server);
    api.apply("name: crash-loop\ntasks:\n- {name: nap, plugin: sleep, params: {ms: 60000}}\n").await;
    let id = api.trigger("crash-loop", json!({})).await;
    api.wait_task(&id, "nap", "running").await;
    // First loss: within the limit, the task goes again.
    let server = crate::e2e::restart(server).await;
    let api = Api::of(&server);
    let run = api
        .wait_run(&id, "the second attempt to run", |r| {
            crate::api::task_of(r, "nap")["attempts"].as_i64() == Some(2)
                && crate::api::task_state(r, "nap") == "running"
        })
        .await;
    assert_eq!(run["state"], "running", "{run:#}");
    // Second loss: past the limit, the task fails when the node comes back.
    let server = crate::e2e::restart(server).await;
    let api = Api::of(&server);
    let run = api.finished(&id).await;
    assert_eq!(run["state"], "failed", "{run:#}");
    let task = api.task(&id, "nap").await;
    assert_eq!(task["attempts"], 2, "no third attempt: {task:#}");
    assert!(task["error"].as_str().unwrap_or_default().contains("max_lost_attempts = 1"), "{task:#}");
    let (status, answer) = api.post("/v1/jobs?wait=true", json!({"plugin": "echo", "params": {}})).await;
    assert_eq!((status, answer["state"].as_str()), (StatusCode::OK, Some("succeeded")), "{answer}");
}

/// Item 8: a component that compiles, and runs on an engine without a pool,
/// but whose table is larger than a node's pool holds: refused at upload
/// (it used to pass the check and then fail every job). The same surgery
/// with a table that fits is accepted: the refusal is about the size.
#[tokio::test]
async fn a_component_the_pool_cannot_hold_is_refused_at_upload() {
    let plugin = std::fs::read(builtins::DEEPDIR_PATH).unwrap();
    let server = crate::e2e::own_server().await;
    let api = Api::of(&server);
    let (status, body) = api.upload(&with_tables_of(&plugin, 150_000)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("pooling allocator") && message.contains("150000"), "{body}");
    let (status, body) = api.upload(&with_tables_of(&plugin, 500)).await;
    assert_eq!(status, StatusCode::CREATED, "a table that fits is fine: {body}");
    assert_eq!(api.get("/healthz").await.0, StatusCode::OK);
}

/// `component` with the tables of its core modules, defined or imported,
/// grown to `elements` (minimum and maximum), every size re-encoded.
fn with_tables_of(component: &[u8], elements: u32) -> Vec<u8> {
    fn leb(bytes: &[u8], at: &mut usize) -> u32 {
        let (mut value, mut shift) = (0u32, 0);
        loop {
            let byte = bytes[*at];
            *at += 1;
            value |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
    /// Sections after an 8-byte header, each rewritten by `edit`.
    fn sections(bytes: &[u8], edit: &dyn Fn(u8, &[u8]) -> Vec<u8>) -> Vec<u8> {
        let mut out = bytes[..8].to_vec();
        let mut at = 8;
        while at < bytes.len() {
            let id = bytes[at];
            at += 1;
            let len = leb(bytes, &mut at) as usize;
            let payload = edit(id, &bytes[at..at + len]);
            at += len;
            out.push(id);
            write_leb(payload.len(), &mut out);
            out.extend_from_slice(&payload);
        }
        out
    }
    // A table type: its element type byte, then limits (flags, min, max?).
    let table_type = |p: &[u8], at: &mut usize, out: &mut Vec<u8>| {
        out.push(p[*at]);
        let flags = p[*at + 1];
        *at += 2;
        out.push(flags);
        leb(p, at);
        write_leb(elements as usize, out);
        if flags & 1 == 1 {
            leb(p, at);
            write_leb(elements as usize, out);
        }
    };
    let tables = |p: &[u8]| {
        let mut at = 0;
        let count = leb(p, &mut at);
        let mut out = Vec::new();
        write_leb(count as usize, &mut out);
        for _ in 0..count {
            table_type(p, &mut at, &mut out);
        }
        out.extend_from_slice(&p[at..]);
        out
    };
    let imports = |p: &[u8]| {
        let mut at = 0;
        let count = leb(p, &mut at);
        let mut out = Vec::new();
        write_leb(count as usize, &mut out);
        for _ in 0..count {
            let start = at;
            for _ in 0..2 {
                let len = leb(p, &mut at) as usize; // module and field names
                at += len;
            }
            let kind = p[at];
            at += 1;
            out.extend_from_slice(&p[start..at]);
            let rest = at;
            match kind {
                0x01 => table_type(p, &mut at, &mut out),
                0x00 => {
                    leb(p, &mut at);
                }
                0x02 => {
                    let flags = p[at];
                    at += 1;
                    leb(p, &mut at);
                    if flags & 1 == 1 {
                        leb(p, &mut at);
                    }
                }
                0x03 => at += 2,
                other => panic!("an import of kind {other}: not handled here"),
            }
            if kind != 0x01 {
                out.extend_from_slice(&p[rest..at]);
            }
        }
        out.extend_from_slice(&p[at..]);
        out
    };
    let module = |p: &[u8]| {
        sections(p, &|id, q| match id {
            2 => imports(q),
            4 => tables(q),
            _ => q.to_vec(),
        })
    };
    // Component section 1 is a core module.
    sections(component, &|id, p| if id == 1 { module(p) } else { p.to_vec() })
}
