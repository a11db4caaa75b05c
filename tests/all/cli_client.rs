//! The client verbs of the `dagr` binary against a real `dagr serve`, and
//! `dagr bench`.

use std::io::Write as _;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

use crate::server::{DagrServer, output_within, write_file};
use crate::support::{dagr_binary, serial_blocking};

/// A task that logs, and one downstream of it.
const GREETING: &str = r#"
name: greeting
description: logs hello
tasks:
  - name: greet
    plugin: script
    params:
      script: 'info("hello"); 42'
  - name: after
    plugin: echo
    depends_on: [greet]
"#;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts the command exited with `code`, showing its output if not.
fn expect_code(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn apply_run_wait_status_and_logs() {
    // A server and its CLI processes keep both cores busy.
    let _serial = serial_blocking();
    let server = DagrServer::start();
    let file = write_file(server.data_dir(), "greeting.yaml", GREETING);
    let file = file.to_str().unwrap();

    let out = server.cli(&["apply", "-f", file]);
    expect_code(&out, 0, "dagr apply");
    assert_eq!(text(&out.stdout).trim(), "workflow greeting version 1 (created)");
    let out = server.cli(&["apply", "-f", file]);
    assert_eq!(text(&out.stdout).trim(), "workflow greeting version 1 (unchanged)");

    let out = server.cli(&["run", "greeting", "--wait"]);
    expect_code(&out, 0, "dagr run --wait");
    let stdout = text(&out.stdout);
    let run_id = stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("run "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id in:\n{stdout}"))
        .to_owned();
    // Not a terminal: one line per change, then the final state.
    assert!(stdout.contains("greet succeeded"), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with(&format!("run {run_id} succeeded in ")), "{stdout}");

    let out = server.cli(&["status", &run_id]);
    expect_code(&out, 0, "dagr status");
    let status = text(&out.stdout);
    assert!(status.contains("state         succeeded"), "{status}");
    let greet_row = status.lines().find(|l| l.starts_with("greet ")).unwrap_or_else(|| panic!("{status}"));
    let cells: Vec<&str> = greet_row.split_whitespace().collect();
    assert_eq!(&cells[..4], ["greet", "script", "succeeded", "1"], "{status}");

    let out = server.cli(&["runs", "--workflow", "greeting"]);
    expect_code(&out, 0, "dagr runs");
    assert!(text(&out.stdout).lines().any(|l| l.starts_with(&run_id) && l.contains("succeeded")));

    for follow in [false, true] {
        let mut args = vec!["logs", &run_id, "greet"];
        if follow {
            args.push("-f");
        }
        let out = server.cli(&args);
        expect_code(&out, 0, "dagr logs");
        let logs = text(&out.stdout);
        let line = logs.lines().find(|l| l.ends_with("│ hello")).unwrap_or_else(|| panic!("follow={follow}:\n{logs}"));
        assert!(line.contains(" info ") && line.contains(" plugin "), "{line}");
    }
}

#[test]
fn errors_name_their_location_and_exit_1() {
    let _serial = serial_blocking();
    let server = DagrServer::start();

    // From stdin, with a dependency on a task that does not exist.
    let mut child = server
        .cli_command(&["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"name: broken\ntasks:\n  - name: a\n    plugin: echo\n    depends_on: [lod]\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    expect_code(&out, 1, "applying an invalid definition");
    assert_eq!(text(&out.stderr).trim(), "error: unknown task `lod` (at tasks[0].depends_on[0])");

    let out = server.cli(&["status", "no-such-run"]);
    expect_code(&out, 1, "status of an unknown run");
    assert_eq!(text(&out.stderr).trim(), "error: there is no run `no-such-run`");

    // A failing run: --wait exits 1 and says why.
    let file = write_file(
        server.data_dir(),
        "failing.yaml",
        "name: failing\ntasks:\n  - name: boom\n    plugin: fail\n    params: {mode: fatal, message: no data}\n",
    );
    expect_code(&server.cli(&["apply", "-f", file.to_str().unwrap()]), 0, "apply");
    let out = server.cli(&["run", "failing", "--wait"]);
    expect_code(&out, 1, "a failed run");
    assert!(text(&out.stdout).contains("boom failed: fatal: no data"), "{}", text(&out.stdout));
}

#[test]
fn a_job_prints_its_output() {
    let _serial = serial_blocking();
    let server = DagrServer::start();
    let out = server.cli(&["job", "echo", "--params", r#"{"a":1}"#]);
    expect_code(&out, 0, "dagr job echo");
    let output: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(output, json!({"params": {"a": 1}, "inputs": {}}));

    let out = server.cli(&["job", "fail", "--params", r#"{"mode":"fatal","message":"no data"}"#]);
    expect_code(&out, 1, "a failing job");
    assert!(text(&out.stderr).contains("error: fail: fatal: no data"), "{}", text(&out.stderr));
}

#[test]
fn a_missing_server_is_reported_with_a_hint() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let mut command = std::process::Command::new(dagr_binary());
    command.args(["--server", &url, "runs"]);
    let out = output_within(command, std::time::Duration::from_secs(60));
    expect_code(&out, 1, "no server");
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("not reachable at {url}")) && stderr.contains("dagr serve"), "{stderr}");
}

#[test]
fn bench_prints_one_json_line_per_run() {
    let _serial = serial_blocking();
    let mut command = std::process::Command::new(dagr_binary());
    command.args(["bench", "--dag", "chain:5", "--json"]).env("DAGR_LOG", "warn");
    let out = output_within(command, std::time::Duration::from_secs(300));
    expect_code(&out, 0, "dagr bench");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let run: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["tasks"], 5);
    assert_eq!(run["edges"], 4);
    assert!(run["wall_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{run}");
    assert!(run["peak_rss_mib"].as_f64().is_some_and(|mib| mib > 1.0), "{run}");
}
