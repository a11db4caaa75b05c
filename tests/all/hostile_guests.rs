//! The hostile suite of `runtime.rs` (infinite loop, memory bomb, file
//! escape, network without an allowlist, giant output and log, a crash)
//! written in Python and JavaScript (`plugins/testing/hostile-py`,
//! `hostile-js`): each is contained the same way, and the runtime still
//! works after it. A crash is reported in the guest language's words.

use std::time::{Duration, Instant};

use dagr_runtime::{FailureKind, GuestLanguage, LogSource, NetworkPolicy, Plugin, Runtime};
use serde_json::{Value, json};

use crate::projects::component;
use crate::support::{TestServer, assert_echo_works, execution, failure, log_from, log_text, output_json, runtime};

#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    Js,
}

fn hostile(runtime: &Runtime, lang: Lang) -> Plugin {
    let project = match lang {
        Lang::Python => "testing/hostile-py",
        Lang::Js => "testing/hostile-js",
    };
    let (path, _) = component(project);
    let plugin = runtime.load(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("cannot load {project}: {e}"));
    let expected = match lang {
        Lang::Python => GuestLanguage::Python,
        Lang::Js => GuestLanguage::JavaScript,
    };
    assert_eq!(plugin.language(), expected);
    plugin
}

async fn infinite_loop(lang: Lang) {
    let runtime = runtime();
    let plugin = hostile(&runtime, lang);
    let mut exec = execution(json!({"case": "iloop"}));
    let deadline = Duration::from_millis(500);
    exec.limits.deadline = deadline;
    let started = Instant::now();
    let report = runtime.execute(&plugin, exec).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Timeout, "{lang:?}: {failure}");
    assert!(started.elapsed() < Duration::from_secs(30), "{lang:?}: stopped only after {:?}", started.elapsed());
    assert_echo_works(&runtime).await;
}

async fn memory_bomb(lang: Lang) {
    let runtime = runtime();
    let plugin = hostile(&runtime, lang);
    let mut exec = execution(json!({"case": "membomb"}));
    exec.limits.memory_bytes = 64 << 20;
    let report = runtime.execute(&plugin, exec).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::MemoryLimit, "{lang:?}: {failure}\n{}", log_text(&report));
    assert_echo_works(&runtime).await;
}

async fn giant_output(lang: Lang) {
    let runtime = runtime();
    let plugin = hostile(&runtime, lang);
    let mut exec = execution(json!({"case": "bigoutput"}));
    exec.limits.max_output_bytes = 64 << 10;
    let report = runtime.execute(&plugin, exec).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::OutputTooLarge, "{lang:?}: {failure}");
    assert!(failure.message.contains("exceeds the limit of 65536 bytes"), "{failure}");
    assert_echo_works(&runtime).await;
}

async fn giant_log(lang: Lang) {
    let runtime = runtime();
    let plugin = hostile(&runtime, lang);
    let cap = 64 << 10;
    let mut exec = execution(json!({"case": "biglog"}));
    exec.limits.max_log_bytes = cap;
    let report = runtime.execute(&plugin, exec).await;
    assert_eq!(output_json(&report), json!({"done": true}), "{lang:?}");
    assert!(report.log_truncated, "{lang:?}");
    let total: usize = report.log.iter().map(|line| line.message.len() + 1).sum();
    assert!(total <= cap + 512, "{lang:?}: the log holds {total} bytes, cap {cap}");
    for source in [LogSource::Plugin, LogSource::Stdout] {
        assert!(!log_from(&report, source).is_empty(), "{lang:?}: nothing from {source:?}");
    }
    assert_echo_works(&runtime).await;
}

async fn network_without_allowlist(lang: Lang) {
    let server = TestServer::start().await;
    let runtime = runtime();
    let plugin = hostile(&runtime, lang);
    let mut exec = execution(json!({
        "case": "network", "host": "127.0.0.1", "port": server.port, "url": server.url("/json"),
    }));
    exec.network = NetworkPolicy::deny_all();
    let report = runtime.execute(&plugin, exec).await;
    let output = output_json(&report);
    // `dagr_sdk.http` and `fetch` go through wasi:http and dagr's allowlist.
    let dagr = log_from(&report, LogSource::Dagr).join("\n");
    assert!(dagr.contains("its allowlist is empty"), "{lang:?}: {}", log_text(&report));
    match lang {
        Lang::Python => {
            assert_eq!(output["http"]["ok"], false, "{output}");
            assert_eq!(output["http"]["code"], "HTTP-request-denied", "{output}");
            // componentize-py's CPython has no `socket` module (so no urllib
            // either); were there one, wasi:sockets is refused by dagr.
            assert_eq!(output["connected"], false, "{output}");
            assert!(output["error"].as_str().is_some_and(|e| !e.is_empty()), "{output}");
        }
        Lang::Js => assert_eq!(output["fetch"]["ok"], false, "{output}"),
    }
    assert_eq!(server.requests(), 0, "{lang:?}: a request reached the server");
    assert_echo_works(&runtime).await;
}

/// The other side of the allowlist: `dagr_sdk.http` reaches a host that is on it.
#[tokio::test]
async fn python_http_reaches_a_host_on_the_allowlist() {
    let server = TestServer::start().await;
    let runtime = runtime();
    let plugin = hostile(&runtime, Lang::Python);
    let mut exec = execution(json!({"case": "fetch", "url": server.url("")}));
    exec.network = NetworkPolicy::allow([server.host()]).unwrap();
    let report = runtime.execute(&plugin, exec).await;
    let output = output_json(&report);
    assert_eq!(output["status"], 200, "{output}\n{}", log_text(&report));
    assert_eq!(output["header"], "yes", "{output}");
    assert_eq!(output["json"], json!({"hello": "world", "n": 42}), "{output}");
    let echo = &output["echo"];
    assert_eq!(echo["content_type"], "application/json", "{output}");
    assert_eq!(echo["headers"]["x-sdk"], "dagr-python", "{output}");
    assert_eq!(echo["body"], json!({"from": "python"}), "{output}");
    assert_eq!(output["too_big"], "HTTP-response-body-size", "{output}");
    assert_eq!(server.requests(), 3);
}

#[tokio::test]
async fn python_infinite_loop_is_stopped_by_the_deadline() {
    infinite_loop(Lang::Python).await;
}

#[tokio::test]
async fn javascript_infinite_loop_is_stopped_by_the_deadline() {
    infinite_loop(Lang::Js).await;
}

#[tokio::test]
async fn python_memory_bomb_hits_the_memory_cap() {
    memory_bomb(Lang::Python).await;
}

#[tokio::test]
async fn javascript_memory_bomb_hits_the_memory_cap() {
    memory_bomb(Lang::Js).await;
}

#[tokio::test]
async fn python_giant_output_is_refused() {
    giant_output(Lang::Python).await;
}

#[tokio::test]
async fn javascript_giant_output_is_refused() {
    giant_output(Lang::Js).await;
}

#[tokio::test]
async fn python_giant_log_is_truncated_and_the_attempt_succeeds() {
    giant_log(Lang::Python).await;
}

#[tokio::test]
async fn javascript_giant_log_is_truncated_and_the_attempt_succeeds() {
    giant_log(Lang::Js).await;
}

#[tokio::test]
async fn python_network_without_an_allowlist_reaches_nothing() {
    network_without_allowlist(Lang::Python).await;
}

#[tokio::test]
async fn javascript_network_without_an_allowlist_reaches_nothing() {
    network_without_allowlist(Lang::Js).await;
}

#[tokio::test]
async fn python_files_outside_the_scratch_directory_cannot_be_read() {
    let runtime = runtime();
    let plugin = hostile(&runtime, Lang::Python);
    let scratch = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc/passwd", scratch.path().join("link")).unwrap();
    let mut exec = execution(json!({"case": "escape", "host_file": "link"}));
    exec.scratch_dir = Some(scratch.path().to_path_buf());
    let report = runtime.execute(&plugin, exec).await;
    let output = output_json(&report);
    assert_eq!(output["read"], json!([]), "{output}");
    assert_eq!(output["refused"].as_array().map(Vec::len), Some(4), "{output}");
    assert_eq!(output["env"], json!({}), "no environment variables: {output}");
    let root: Vec<&str> =
        output["root"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    assert!(!root.contains(&"etc"), "the guest can list the host's root directory: {root:?}");
    assert!(!output.to_string().contains("root:"), "something of /etc/passwd leaked: {output}");
    // Its own file landed in the scratch directory it was given.
    assert_eq!(std::fs::read_to_string(scratch.path().join("mine.txt")).unwrap(), "inside");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn javascript_has_no_way_to_files() {
    let runtime = runtime();
    let plugin = hostile(&runtime, Lang::Js);
    let report = runtime.execute(&plugin, execution(json!({"case": "escape"}))).await;
    let output = output_json(&report);
    assert_eq!(output["globals"], json!({"require": "undefined", "process": "undefined", "Deno": "undefined"}));
    assert_eq!(output["file"]["ok"], false, "fetch of a file: URL must fail: {output}");
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn an_uncaught_python_exception_is_reported_in_pythons_words() {
    let runtime = runtime();
    let plugin = hostile(&runtime, Lang::Python);
    let report = runtime.execute(&plugin, execution(json!({"case": "raise"}))).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Trap, "{failure}");
    assert_eq!(
        failure.message,
        "the Python task raised an uncaught exception: ValueError: hostile on purpose (its traceback is in the log)"
    );
    let stderr = log_from(&report, LogSource::Stderr).join("\n");
    assert!(stderr.contains("Traceback (most recent call last):"), "{}", log_text(&report));
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn an_uncaught_javascript_exception_is_reported_in_javascripts_words() {
    let runtime = runtime();
    let plugin = hostile(&runtime, Lang::Js);
    let report = runtime.execute(&plugin, execution(json!({"case": "raise"}))).await;
    let failure = failure(&report);
    assert_eq!(failure.kind, FailureKind::Trap, "{failure}");
    assert_eq!(
        failure.message,
        "the JavaScript task threw an uncaught exception: TypeError: hostile on purpose (its stack is in the log)"
    );
    assert_echo_works(&runtime).await;
}

#[tokio::test]
async fn runaway_recursion_fails_the_attempt_only() {
    for lang in [Lang::Python, Lang::Js] {
        let runtime = runtime();
        let plugin = hostile(&runtime, lang);
        let report = runtime.execute(&plugin, execution(json!({"case": "recurse"}))).await;
        let failure = failure(&report);
        // Python stops at its recursion limit (an uncaught RecursionError),
        // SpiderMonkey at its own ("too much recursion") or the wasm stack.
        assert!(matches!(failure.kind, FailureKind::Trap | FailureKind::StackOverflow), "{lang:?}: {failure}");
        if let Lang::Python = lang {
            assert!(failure.message.contains("RecursionError"), "{failure}");
        }
        assert_echo_works(&runtime).await;
    }
}

#[tokio::test]
async fn secrets_are_redacted_in_python_and_javascript_too() {
    for lang in [Lang::Python, Lang::Js] {
        let runtime = runtime();
        let plugin = hostile(&runtime, lang);
        let mut exec = execution(json!({"case": "secret"}));
        let secrets: std::collections::HashMap<String, String> =
            [("token".to_owned(), "hunter2-s3cr3t".to_owned())].into();
        exec.secrets = Some(std::sync::Arc::new(secrets));
        let report = runtime.execute(&plugin, exec).await;
        let output = output_json(&report);
        assert_eq!(output["token"], "[REDACTED]", "{lang:?}: {output}");
        let log = log_text(&report);
        assert!(!log.contains("hunter2"), "{lang:?}: {log}");
        assert!(log.contains("the token is [REDACTED]"), "{lang:?}: {log}");
    }
}
