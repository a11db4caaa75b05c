//! The runtime with real components: loading, the compiled-code cache,
//! limits, the hostile suite, secrets, concurrency and cancellation.
//!
//! Every hostile case ends by running `echo` on the same runtime: a guest
//! that misbehaves must not damage the runtime for the next one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dagr_builtins as builtins;
use dagr_runtime::{CodeSource, Error, FailureKind, LogSource, NetworkPolicy, Runtime, RuntimeConfig};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::support::{
    TestServer, assert_echo_works, execution, failure, load, log_from, log_text, output_json, run, runtime,
    runtime_with, serial,
};

// ---------------------------------------------------------------------------
// Files that are not dagr plugins

fn load_error(bytes: &[u8]) -> Error {
    match runtime().load(bytes) {
        Ok(plugin) => panic!("loading succeeded, but an error was expected: {plugin:?}"),
        Err(e) => e,
    }
}

#[test]
fn random_bytes_are_not_wasm() {
    let error = load_error(b"#!/bin/sh\necho this is not WebAssembly\n");
    assert!(matches!(error, Error::NotWasm(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("not a WebAssembly file") && text.contains("magic bytes"), "{text}");
}

#[test]
fn core_module_is_not_a_component() {
    let error = load_error(b"\0asm\x01\0\0\0");
    assert!(matches!(error, Error::CoreModule), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("core WebAssembly module, not a component"), "{text}");
    assert!(text.contains("wasm32-wasip2"), "the message should say how to build a component: {text}");
}

#[test]
fn component_of_another_world_is_rejected() {
    let bytes = std::fs::read(builtins::OTHERWORLD_PATH).unwrap();
    let error = load_error(&bytes);
    assert!(matches!(error, Error::WrongWorld(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("does not implement the dagr:plugin@0.1.0 world"), "{text}");
    assert!(text.contains("dagr:plugin/task"), "the message should name the missing export: {text}");
}

#[test]
fn component_with_an_unknown_import_is_rejected() {
    let bytes = std::fs::read(builtins::ALIEN_PATH).unwrap();
    let error = load_error(&bytes);
    assert!(matches!(error, Error::WrongWorld(_)), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("test:alien/clock"), "the message should name the unknown import: {text}");
    assert!(text.contains("which dagr does not provide"), "{text}");
}

// ---------------------------------------------------------------------------
// The compiled-code cache

fn runtime_with_cache(dir: &std::path::Path) -> Runtime {
    runtime_with(|config| config.cache_dir = Some(dir.to_path_buf()))
}

#[tokio::test]
async fn second_runtime_loads_compiled_code_from_the_cache() {
    let _serial = serial().await; // compiles
    let cache = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(builtins::ECHO_PATH).unwrap();

    let first = runtime_with_cache(cache.path());
    assert_eq!(first.load(&bytes).unwrap().code_source(), CodeSource::Compiled);

    let second = runtime_with_cache(cache.path());
    let plugin = second.load(&bytes).unwrap();
    assert_eq!(plugin.code_source(), CodeSource::Cached);
    let report = second.execute(&plugin, execution(json!({"cached": true}))).await;
    assert_eq!(output_json(&report)["params"], json!({"cached": true}));
}

/// The child that checks uploads compiles with a small pool (one slot) and
/// a node's other settings; the node, with many slots and another memory
/// cap, must load that machine code as it is (issue 12, item 8).
#[tokio::test]
async fn a_node_loads_what_the_upload_check_compiled() {
    let _serial = serial().await; // compiles
    let cache = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(builtins::ECHO_PATH).unwrap();
    let child = Runtime::new(RuntimeConfig {
        guest_threads: 1,
        max_concurrent_attempts: 1,
        pooling: true,
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    let node = runtime_with(|config| {
        config.cache_dir = Some(cache.path().to_path_buf());
        config.max_concurrent_attempts = 64;
        config.max_memory_bytes = 256 << 20;
    });
    assert!(!node.is_cached(&bytes));
    assert_eq!(child.load(&bytes).unwrap().code_source(), CodeSource::Compiled);
    assert!(node.is_cached(&bytes), "the node does not find the child's machine code");
    let plugin = node.load(&bytes).unwrap();
    assert_eq!(plugin.code_source(), CodeSource::Cached);
    let report = node.execute(&plugin, execution(json!({"compiled": "elsewhere"}))).await;
    assert_eq!(output_json(&report)["params"], json!({"compiled": "elsewhere"}));
}

#[tokio::test]
async fn tampered_cache_artifact_is_recompiled_not_loaded() {
    let _serial = serial().await; // compiles twice
    let cache = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(builtins::ECHO_PATH).unwrap();
    assert_eq!(runtime_with_cache(cache.path()).load(&bytes).unwrap().code_source(), CodeSource::Compiled);

    let artifacts: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .collect();
    assert_eq!(artifacts.len(), 1, "one artifact per component: {artifacts:?}");
    let mut artifact = std::fs::read(&artifacts[0]).unwrap();
    let middle = artifact.len() / 2;
    artifact[middle] ^= 0x40;
    std::fs::write(&artifacts[0], &artifact).unwrap();

    let runtime = runtime_with_cache(cache.path());
    let plugin = runtime.load(&bytes).unwrap();
    assert_eq!(plugin.code_source(), CodeSource::Compiled, "a tampered artifact must not be loaded");
    let report = runtime.execute(&plugin, execution(json!({"after": "tampering"}))).await;
    assert_eq!(output_json(&report)["params"], json!({"after": "tampering"}));

    // The recompiled artifact replaced the tampered one.
    assert_eq!(runtime_with_cache(cache.path()).load(&bytes).unwrap().code_source(), CodeSource::Cached);
}

// ---------------------------------------------------------------------------
// The hostile suite: one case per test, then `echo` on the same runtime

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_deadline() {
    let _serial = serial().await; // burns a core and measures time
    let runtime = runtime();
    let plugin = load(&runtime, builtins::ILOOP_PATH);
    let deadline = Duration::from_millis(500);
    let mut exec = execution(json!({}));
    exec.limits.deadline = deadline;

    let started = Instant::now();
    let report = runtime.execute(&plugin, exec).await;
    let took = started.elapsed();

    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Timeout, "{failure}");
    assert!(failure.message.contains("deadline"), "{failure}");
    assert!(took < 2 * deadline, "stopped after {took:?}, more than twice the deadline of {deadline:?}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn memory_bomb_hits_the_memory_cap() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::MEMBOMB_PATH);
    let mut exec = execution(json!({}));
    exec.limits.memory_bytes = 32 << 20;
    let report = runtime.execute(&plugin, exec).await;

    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::MemoryLimit, "{failure}\n{}", log_text(&report));
    assert!(failure.message.contains("memory"), "{failure}");
    assert!(failure.message.contains(&(32u64 << 20).to_string()), "the message should give the cap: {failure}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn unbounded_recursion_overflows_the_stack() {
    let runtime = runtime();
    let report = run(&runtime, builtins::RECURSE_PATH, json!({})).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::StackOverflow, "{failure}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn files_outside_the_scratch_directory_cannot_be_read() {
    let runtime = runtime();
    let scratch = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", scratch.path().join("link")).unwrap();
    std::os::unix::fs::symlink("/", scratch.path().join("up")).unwrap();
    let outside = ["../../etc/passwd", "/etc/passwd", "link", "up/etc/passwd"];

    let plugin = load(&runtime, builtins::ESCAPE_PATH);
    let mut exec = execution(json!({"paths": outside}));
    exec.scratch_dir = Some(scratch.path().to_path_buf());
    let report = runtime.execute(&plugin, exec).await;
    let output = output_json(&report);

    // The plugin's own file works, and it landed in the directory we gave.
    assert_eq!(output["own"], "mine");
    assert_eq!(std::fs::read_to_string(scratch.path().join("own-file.txt")).unwrap(), "mine");
    let attempts = output["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), outside.len());
    for (attempt, path) in attempts.iter().zip(outside) {
        assert_eq!(attempt["path"], path);
        assert_eq!(attempt["read"], false, "{path} must not be readable: {attempt}");
    }
    assert!(!output.to_string().contains("root:"), "something of /etc/passwd leaked: {output}");
    let root: Vec<&str> = output["root_listing"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!root.contains(&"etc"), "the guest can list the host's root directory: {root:?}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn files_written_by_one_attempt_are_gone_in_the_next() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::PROBE_PATH);
    let wrote = runtime
        .execute(
            &plugin,
            execution(json!({"write": {"name": "note.txt", "content": "from attempt 1"}, "read": "note.txt"})),
        )
        .await;
    assert_eq!(output_json(&wrote)["read"], "from attempt 1");
    // Several attempts, so that any scratch directory the runtime keeps
    // for reuse comes around again.
    for _ in 0..3 {
        let report = runtime.execute(&plugin, execution(json!({"read": "note.txt"}))).await;
        let read = &output_json(&report)["read"];
        assert!(read["error"].is_string(), "the next attempt could read the file: {read}");
    }
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn only_a_plugin_that_can_open_files_gets_a_scratch_directory() {
    let root = tempfile::tempdir().unwrap();
    let scratch_root = root.path().join("scratch");
    let runtime = runtime_with(|config| config.scratch_root = scratch_root.clone());
    let entries = || walk_dirs(&scratch_root);
    // `echo` does not import wasi:filesystem/preopens: no directory is
    // made or opened for it.
    for _ in 0..3 {
        assert_echo_works(&runtime).await;
    }
    assert!(entries().is_empty(), "echo got scratch directories: {:?}", entries());
    // `probe` does, and finds its directory as promised.
    let plugin = load(&runtime, builtins::PROBE_PATH);
    let report =
        runtime.execute(&plugin, execution(json!({"write": {"name": "a.txt", "content": "x"}, "read": "a.txt"}))).await;
    assert_eq!(output_json(&report)["read"], "x");
    let report = runtime.execute(&plugin, execution(json!({"read": "a.txt"}))).await;
    assert!(output_json(&report)["read"]["error"].is_string());
    assert!(!entries().is_empty(), "probe's empty directory is kept for reuse under {}", scratch_root.display());
}

/// The directories under `dir`, at any depth (none if it does not exist).
fn walk_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.push(entry.path());
            found.extend(walk_dirs(&entry.path()));
        }
    }
    found
}

#[tokio::test]
async fn memory_written_by_one_attempt_is_gone_in_the_next() {
    // Pool slots are reused, and their first pages stay resident (reset
    // with memset rather than unmapped): a value a guest left in its memory
    // must never reach a later instance.
    let runtime = runtime();
    let plugin = load(&runtime, builtins::PROBE_PATH);
    for i in 0..20 {
        let report = runtime.execute(&plugin, execution(json!({"remember": format!("secret {i}")}))).await;
        let remembered = &output_json(&report)["remembered"];
        assert_eq!(remembered, "", "attempt {i} saw what an earlier attempt left in memory: {remembered}");
    }
}

#[tokio::test]
async fn guest_sees_no_environment_variables_and_no_arguments() {
    // There is something to leak: cargo runs tests with a full environment.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some() || std::env::var_os("PATH").is_some());
    let runtime = runtime();
    let report = run(&runtime, builtins::ENV_PATH, json!({})).await;
    let output = output_json(&report);
    assert_eq!(output["vars"], json!([]), "{output}");
    assert_eq!(output["args"], json!([]), "{output}");
    assert_echo_works(&runtime).await;
}

/// Runs the `http` plugin against `url` under `policy`.
async fn http_attempt(runtime: &Runtime, url: &str, policy: NetworkPolicy) -> dagr_runtime::AttemptReport {
    let plugin = load(runtime, builtins::HTTP_PATH);
    let mut exec = execution(json!({"url": url, "timeout_ms": 5000}));
    exec.network = policy;
    runtime.execute(&plugin, exec).await
}

/// The failure of a request the network policy refused, and the reason dagr logged.
fn denied_reason(report: &dagr_runtime::AttemptReport) -> String {
    let failure = failure(report);
    assert_eq!(failure.kind, FailureKind::Fatal, "{failure}");
    assert!(failure.message.contains("denied by this task's network policy"), "{failure}");
    let dagr = log_from(report, LogSource::Dagr);
    dagr.iter()
        .find(|line| line.contains("outgoing HTTP request to") && line.contains("denied"))
        .map(|line| line.to_string())
        .unwrap_or_else(|| panic!("dagr did not log why the request was denied:\n{}", log_text(report)))
}

#[tokio::test]
async fn http_to_a_host_not_on_the_allowlist_is_denied() {
    let server = TestServer::start().await;
    let runtime = runtime();
    let policy = NetworkPolicy::allow([server.host()]).unwrap();
    let report = http_attempt(&runtime, "http://example.org/", policy).await;
    let reason = denied_reason(&report);
    assert!(reason.contains("example.org:80 is not on this task's allowlist"), "{reason}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn http_with_an_empty_allowlist_is_denied() {
    let server = TestServer::start().await;
    let runtime = runtime();
    let report = http_attempt(&runtime, &server.url("/json"), NetworkPolicy::deny_all()).await;
    let reason = denied_reason(&report);
    assert!(reason.contains("no network access"), "{reason}");
    assert_eq!(server.requests(), 0, "a denied request reached the server");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn http_to_an_allowlisted_name_that_resolves_to_loopback_is_denied() {
    let server = TestServer::start().await;
    let runtime = runtime();
    let policy = NetworkPolicy::allow([format!("localhost:{}", server.port)]).unwrap();
    let url = format!("http://localhost:{}/json", server.port);
    let report = http_attempt(&runtime, &url, policy).await;
    let reason = denied_reason(&report);
    assert!(reason.contains("loopback"), "{reason}");
    assert_eq!(server.requests(), 0, "a denied request reached the server");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn http_to_an_allowlisted_loopback_address_is_allowed() {
    let server = TestServer::start().await;
    let runtime = runtime();
    let policy = NetworkPolicy::allow([server.host()]).unwrap();
    let report = http_attempt(&runtime, &server.url("/json"), policy).await;
    let output = output_json(&report);
    assert_eq!(output["status"], 200);
    assert_eq!(output["body"]["hello"], "world");
    assert_eq!(server.requests(), 1);
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn gigantic_output_is_refused() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::BIGOUTPUT_PATH);
    let mut exec = execution(json!({"bytes": 4 << 20}));
    exec.limits.max_output_bytes = 64 << 10;
    exec.limits.memory_bytes = 128 << 20;
    let report = runtime.execute(&plugin, exec).await;

    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::OutputTooLarge, "{failure}");
    // The output is a JSON string: the bytes plus two quotes.
    let expected = format!("output of {} bytes exceeds the limit of {} bytes", (4 << 20) + 2, 64 << 10);
    assert_eq!(failure.message, expected);
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn an_output_nested_past_the_limit_is_refused() {
    let runtime = runtime_with(|c| c.max_output_depth = 64);
    let plugin = load(&runtime, builtins::BIGOUTPUT_PATH);
    // 100,000 nested arrays: 200 KB, under the size limit, valid JSON.
    let report = runtime.execute(&plugin, execution(json!({"nested": 100_000}))).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::OutputTooLarge, "{failure}");
    assert!(
        failure.message.ends_with("exceeds the nesting limit of 64 ([worker] max_output_depth)"),
        "{}",
        failure.message
    );
    // At the limit it is an output like any other.
    let report = runtime.execute(&plugin, execution(json!({"nested": 64}))).await;
    assert_eq!(output_json(&report).to_string(), format!("{}{}", "[".repeat(64), "]".repeat(64)));
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn gigantic_log_is_truncated_and_the_attempt_succeeds() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::BIGLOG_PATH);
    let cap = 64 << 10;
    let mut exec = execution(json!({"lines": 30_000, "line_bytes": 100}));
    exec.limits.max_log_bytes = cap;
    let report = runtime.execute(&plugin, exec).await;

    assert_eq!(output_json(&report), json!({"wrote_lines": 30_000}));
    assert!(report.log_truncated);
    let marker = format!("log limit of {cap} bytes reached");
    assert!(
        report.log.iter().any(|line| line.source == LogSource::Dagr && line.message.contains(&marker)),
        "no log-limit marker in:\n{}",
        log_text(&report)
    );
    // All three channels were written to before the cap was reached.
    for source in [LogSource::Plugin, LogSource::Stdout, LogSource::Stderr] {
        assert!(!log_from(&report, source).is_empty(), "nothing from {source:?}");
    }
    let total: usize = report.log.iter().map(|line| line.message.len() + 1).sum();
    assert!(total <= cap + 512, "the log holds {total} bytes, cap {cap}");
    assert_echo_works(&runtime).await;
}

async fn panic_case(mode: &str) -> dagr_runtime::AttemptReport {
    let runtime = runtime();
    let report = run(&runtime, builtins::PANIC_PATH, json!({"mode": mode})).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Trap, "{mode}: {failure}");
    assert_echo_works(&runtime).await;
    report
}

#[tokio::test]
async fn panic_is_a_trap_and_its_message_is_logged() {
    let report = panic_case("panic").await;
    let stderr = log_from(&report, LogSource::Stderr).join("\n");
    assert!(stderr.contains("the plugin panicked on purpose"), "log:\n{}", log_text(&report));
}

#[tokio::test]
async fn unreachable_is_a_trap() {
    let report = panic_case("unreachable").await;
    assert!(failure(&report).message.contains("unreachable"), "{}", failure(&report));
}

#[tokio::test]
async fn out_of_bounds_access_is_a_trap() {
    let report = panic_case("oob").await;
    let stderr = log_from(&report, LogSource::Stderr).join("\n");
    assert!(stderr.contains("index out of bounds"), "log:\n{}", log_text(&report));
}

// ---------------------------------------------------------------------------
// Secrets

#[tokio::test]
async fn secrets_are_redacted_from_log_and_output() {
    const SECRET: &str = "hunter2-correct-horse";
    let runtime = runtime();
    let plugin = load(&runtime, builtins::PROBE_PATH);
    let mut exec = execution(json!({"secret": "api_token"}));
    exec.secrets = Some(Arc::new(HashMap::from([("api_token".to_string(), SECRET.to_string())])));
    let report = runtime.execute(&plugin, exec).await;

    let output = output_json(&report);
    // The runtime redacts the output too: a secret never leaves an attempt.
    assert_eq!(output["secret"], "[REDACTED]");
    assert!(!report.result.as_ref().unwrap().contains(SECRET));
    for line in &report.log {
        assert!(!line.message.contains(SECRET), "the secret leaked into the log: {line:?}");
    }
    let plugin_log = log_from(&report, LogSource::Plugin).join("\n");
    assert!(plugin_log.contains("the secret api_token is Some(\"[REDACTED]\")"), "{plugin_log}");
    let stdout = log_from(&report, LogSource::Stdout).join("\n");
    assert!(stdout.contains("stdout also says: Some(\"[REDACTED]\")"), "{stdout}");
}

// ---------------------------------------------------------------------------
// Concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_sleeps_all_succeed() {
    let _serial = serial().await;
    let runtime = runtime_with(|config| config.max_concurrent_attempts = 1000);
    let plugin = load(&runtime, builtins::SLEEP_PATH);
    let mut attempts = JoinSet::new();
    for _ in 0..1000 {
        let (runtime, plugin) = (runtime.clone(), plugin.clone());
        attempts.spawn(async move { runtime.execute(&plugin, execution(json!({"ms": 200}))).await });
    }
    let mut succeeded = 0;
    while let Some(report) = attempts.join_next().await {
        let report = report.unwrap();
        let slept = output_json(&report)["slept_ms"].as_u64().unwrap();
        assert!(slept >= 200, "slept only {slept} ms");
        succeeded += 1;
    }
    assert_eq!(succeeded, 1000);
    assert_eq!(runtime.busy_slots(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_guests_time_out_and_do_not_starve_a_sleeping_one() {
    let _serial = serial().await;
    let runtime = runtime_with(|config| config.max_concurrent_attempts = 128);
    let iloop = load(&runtime, builtins::ILOOP_PATH);
    let sleep = load(&runtime, builtins::SLEEP_PATH);
    let deadline = Duration::from_millis(300);

    let start = Instant::now();
    let sleeper = {
        let (runtime, sleep) = (runtime.clone(), sleep.clone());
        tokio::spawn(async move {
            let report = runtime.execute(&sleep, execution(json!({"ms": 50}))).await;
            (report, start.elapsed())
        })
    };
    // The sleeper goes first into the runtime, then the spinners.
    while runtime.busy_slots() == 0 {
        tokio::task::yield_now().await;
    }
    let mut spinners = JoinSet::new();
    for _ in 0..100 {
        let (runtime, iloop) = (runtime.clone(), iloop.clone());
        let mut exec = execution(json!({}));
        exec.limits.deadline = deadline;
        spinners.spawn(async move {
            let report = runtime.execute(&iloop, exec).await;
            (report, start.elapsed())
        });
    }

    let (report, sleeper_done) = sleeper.await.unwrap();
    assert!(output_json(&report)["slept_ms"].as_u64().unwrap() >= 50);
    assert!(
        sleeper_done < deadline,
        "the 50 ms sleep finished after {sleeper_done:?}, not before the spinners' deadline of {deadline:?}"
    );
    let mut timed_out = 0;
    while let Some(spinner) = spinners.join_next().await {
        let (report, done) = spinner.unwrap();
        assert_eq!(failure(&report).kind, FailureKind::Timeout, "{}", failure(&report));
        assert!(done < 2 * deadline, "a spinner was stopped after {done:?}, deadline {deadline:?}");
        timed_out += 1;
    }
    assert_eq!(timed_out, 100);
    assert_echo_works(&runtime).await;
}

// ---------------------------------------------------------------------------
// Cancellation

#[tokio::test]
async fn cancelling_a_spinning_guest_stops_it() {
    let _serial = serial().await; // burns a core
    let runtime = runtime();
    let plugin = load(&runtime, builtins::ILOOP_PATH);
    let mut exec = execution(json!({}));
    exec.limits.deadline = Duration::from_secs(60);
    let cancel = exec.cancel.clone();
    let attempt = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.execute(&plugin, exec).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!attempt.is_finished(), "iloop returned by itself");
    cancel.cancel();
    let report = attempt.await.unwrap();
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Cancelled, "{failure}");
    assert!(failure.message.contains("did not return by itself"), "{failure}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn a_guest_that_checks_cancelled_sees_the_cancellation() {
    let runtime = runtime();
    let plugin = load(&runtime, builtins::PROBE_PATH);
    let exec = execution(json!({"wait_for_cancel_ms": 30_000}));
    let cancel = exec.cancel.clone();
    let attempt = {
        let runtime = runtime.clone();
        tokio::spawn(async move { runtime.execute(&plugin, exec).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let report = attempt.await.unwrap();
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Cancelled, "{failure}");
    assert!(
        failure.message.contains("saw the cancellation and stopped"),
        "the probe should have seen cancelled() turn true and returned by itself: {failure}"
    );
}
