//! The `dagr` binary, run as a user would run it.

use std::process::{Command, Output};

use crate::support::{dagr_binary, serial_blocking};

fn dagr(args: &[&str]) -> Output {
    // The binary compiles the plugin it runs; keep that off timing tests.
    let _serial = serial_blocking();
    Command::new(dagr_binary())
        .args(args)
        .env_remove("DAGR_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", dagr_binary().display()))
}

#[test]
fn plugin_run_prints_the_output_and_exits_0() {
    let out = dagr(&["plugin", "run", "echo", "--params", r#"{"a":1}"#]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", String::from_utf8_lossy(&out.stderr));
    let output: serde_json::Value = serde_json::from_str(stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not the JSON output ({e}): {stdout}"));
    assert_eq!(output, serde_json::json!({"params": {"a": 1}, "inputs": {}}));
}

#[test]
fn plugin_run_of_a_failing_task_exits_1_with_the_reason() {
    let out = dagr(&["plugin", "run", "fail", "--params", r#"{"mode":"fatal","message":"no data"}"#]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(stderr.contains("error (fatal): no data (attempt 1)"), "stderr:\n{stderr}");
    assert!(out.stdout.is_empty(), "a failed task prints no output: {}", String::from_utf8_lossy(&out.stdout));
}
