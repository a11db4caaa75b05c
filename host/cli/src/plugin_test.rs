//! `dagr plugin test`: runs a project's test cases (`cases/*.json`) against
//! its component in the real sandbox, with the limits a tenant gets by
//! default, and prints a diff for every mismatch.
//!
//! The component is built first if a source changed (see
//! [`plugin_project::build`]), and its machine code comes from the code
//! cache: a Python component (~18 MB) loads in well under a second once
//! `plugin build` has compiled it, instead of 10–15 s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use dagr_runtime::{AttemptContext, AttemptReport, CodeSource, Execution, LogLine, NetworkPolicy};
use serde::Deserialize;
use serde_json::Value;

use crate::plugin_project::{self, Project, megabytes};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The project directory.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Run only the cases whose file name (without .json) contains this
    /// (repeatable).
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
}

/// One test case, `cases/NAME.json`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default = "empty_object")]
    pub params: Value,
    #[serde(default)]
    pub inputs: serde_json::Map<String, Value>,
    #[serde(default)]
    pub secrets: HashMap<String, String>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Wall-clock deadline, e.g. `5s` [default: 60s].
    #[serde(default)]
    pub timeout: Option<String>,
    /// Memory cap, e.g. `64MiB` [default: the tenant default, 128MiB].
    #[serde(default)]
    pub memory: Option<String>,
    /// The exact output expected.
    #[serde(default)]
    pub output: Option<Value>,
    /// The failure expected.
    #[serde(default)]
    pub error: Option<ExpectedError>,
    /// Text each of which some log line must contain.
    #[serde(default)]
    pub log: Vec<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedError {
    /// retryable, fatal, trap, timeout, memory-limit, …
    #[serde(default)]
    pub kind: Option<String>,
    /// Text the failure's message must contain.
    #[serde(default)]
    pub message: Option<String>,
}

/// The deadline of a case that names none: long enough for any test,
/// short enough that a hung one ends.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let project = Project::open(&args.dir)?;
    let cases = read_cases(&project.dir.join("cases"), &args.cases)?;
    let built = plugin_project::build(&project, false)?;
    if built.rebuilt {
        eprintln!("built {} in {:.1?}", built.path.display(), built.took);
    }
    let started = Instant::now();
    let (plugin, runtime) = plugin_project::load(&built.path)?;
    let loaded = started.elapsed();
    let info = plugin.info();
    let code = match plugin.code_source() {
        CodeSource::Compiled => "compiled",
        CodeSource::Cached => "machine code from the cache",
    };
    eprintln!(
        "── {} {} ({}, {}, {}; {code} in {loaded:.1?})",
        info.name,
        info.version,
        plugin.language().as_str(),
        built.path.display(),
        megabytes(plugin.size() as u64),
    );
    let defaults = dagr_config::Config::default()
        .validate()
        .map_err(|e| anyhow::anyhow!("dagr's default configuration is invalid: {e}"))?;
    let host = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (mut passed, mut failed) = (0, 0);
    for (name, case) in &cases {
        let exec = execution(name, case, &defaults).with_context(|| format!("cases/{name}.json"))?;
        let report = host.block_on(runtime.execute(&plugin, exec));
        let problems = check(case, &report);
        if problems.is_empty() {
            passed += 1;
            eprintln!("  ok    {name:<24} {:>9.1?}", report.elapsed);
        } else {
            failed += 1;
            eprintln!("  FAIL  {name:<24} {:>9.1?}", report.elapsed);
            if let Some(description) = &case.description {
                eprintln!("        ({description})");
            }
            for problem in problems {
                for line in problem.lines() {
                    eprintln!("        {line}");
                }
            }
            eprintln!("        log:");
            for line in &report.log {
                eprintln!("          {}", format_log_line(line));
            }
        }
    }
    eprintln!("{} cases: {passed} passed, {failed} failed", cases.len());
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn read_cases(dir: &Path, only: &[String]) -> anyhow::Result<Vec<(String, Case)>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!("cannot read {} (a project keeps its test cases there as NAME.json)", dir.display())
    })?;
    let mut cases = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let case: Case =
            serde_json::from_str(&text).with_context(|| format!("{} is not a valid case", path.display()))?;
        if case.output.is_some() && case.error.is_some() {
            bail!("{}: a case expects an `output` or an `error`, not both", path.display());
        }
        cases.push((name, case));
    }
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    if cases.is_empty() {
        bail!("no test cases in {}{}", dir.display(), if only.is_empty() { "" } else { " match --case" });
    }
    Ok(cases)
}

fn execution(name: &str, case: &Case, limits: &dagr_config::Settings) -> anyhow::Result<Execution> {
    let mut exec = Execution::new(AttemptContext::adhoc(name), case.params.to_string());
    exec.inputs = Value::Object(case.inputs.clone()).to_string();
    exec.limits.deadline = match &case.timeout {
        Some(text) => dagr_core::units::parse_duration(text).map_err(|e| anyhow::anyhow!("timeout: {e}"))?,
        None => DEFAULT_TIMEOUT,
    };
    exec.limits.memory_bytes = match &case.memory {
        Some(text) => dagr_core::units::parse_bytes(text).map_err(|e| anyhow::anyhow!("memory: {e}"))?,
        None => limits.default_memory,
    };
    exec.limits.max_output_bytes = limits.max_output as usize;
    exec.limits.max_log_bytes = limits.max_log as usize;
    exec.network = NetworkPolicy::allow(&case.allow_hosts).map_err(|e| anyhow::anyhow!("allow_hosts: {e}"))?;
    exec.secrets = Some(Arc::new(case.secrets.clone()));
    Ok(exec)
}

/// What is wrong with the report, for people; empty when the case passed.
pub fn check(case: &Case, report: &AttemptReport) -> Vec<String> {
    let mut problems = Vec::new();
    match (&report.result, &case.error) {
        (Ok(output), None) => {
            if let Some(expected) = &case.output {
                let got: Value = serde_json::from_str(output).unwrap_or(Value::String(output.clone()));
                if !json_eq(expected, &got) {
                    problems.push(format!("output differs (- expected, + got):\n{}", json_diff(expected, &got)));
                }
            }
        }
        (Ok(output), Some(expected)) => {
            problems
                .push(format!("expected it to fail ({}), but it succeeded with {output}", describe_error(expected)));
        }
        (Err(failure), None) => problems.push(format!("expected it to succeed, but it failed: {failure}")),
        (Err(failure), Some(expected)) => {
            let kind_ok = expected.kind.as_deref().is_none_or(|k| k == failure.kind.as_str());
            let message_ok = expected.message.as_deref().is_none_or(|m| failure.message.contains(m));
            if !kind_ok || !message_ok {
                problems.push(format!("expected a failure {}\n     got {failure}", describe_error(expected)));
            }
        }
    }
    for needle in &case.log {
        if !report.log.iter().any(|line| line.message.contains(needle.as_str())) {
            problems.push(format!("no log line contains {needle:?}"));
        }
    }
    problems
}

fn describe_error(expected: &ExpectedError) -> String {
    match (&expected.kind, &expected.message) {
        (Some(kind), Some(message)) => format!("{kind}: …{message}…"),
        (Some(kind), None) => kind.clone(),
        (None, Some(message)) => format!("containing {message:?}"),
        (None, None) => "of any kind".into(),
    }
}

fn format_log_line(line: &LogLine) -> String {
    let source = match line.source {
        dagr_runtime::LogSource::Plugin => "plugin",
        dagr_runtime::LogSource::Stdout => "stdout",
        dagr_runtime::LogSource::Stderr => "stderr",
        dagr_runtime::LogSource::Dagr => "dagr",
    };
    format!("{:>5} {source:>6} │ {}", line.level.as_str(), line.message)
}

/// JSON equality where numbers are compared by value: `10`, `10.0` and
/// `1e1` are the same number (languages print floats differently).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// A line diff of two JSON values, pretty-printed with sorted keys.
pub fn json_diff(expected: &Value, got: &Value) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let (a, b) = (pretty(expected), pretty(got));
    line_diff(&a.lines().collect::<Vec<_>>(), &b.lines().collect::<Vec<_>>())
}

/// The longest-common-subsequence diff: ` ` kept, `-` only in `a`, `+` only
/// in `b`. Quadratic, so very long outputs are shown whole instead.
fn line_diff(a: &[&str], b: &[&str]) -> String {
    if a.len() * b.len() > 4_000_000 {
        return format!("- {}\n+ {}", a.join("\n- "), b.join("\n+ "));
    }
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        }
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use dagr_runtime::{Failure, FailureKind, LogLevel, LogSource};
    use serde_json::json;

    use super::*;

    fn report(result: Result<&str, Failure>, log: &[&str]) -> AttemptReport {
        AttemptReport {
            result: result.map(str::to_owned),
            log: log.iter().map(|l| LogLine::new(LogSource::Plugin, LogLevel::Info, *l)).collect(),
            log_truncated: false,
            progress: None,
            elapsed: Duration::ZERO,
            fuel_consumed: None,
            instantiate: None,
            memory_bytes: 0,
        }
    }

    #[test]
    fn a_changed_field_is_shown_as_a_diff() {
        let diff = json_diff(&json!({"a": 1, "b": "x"}), &json!({"a": 2, "b": "x"}));
        assert_eq!(diff, "  {\n-   \"a\": 1,\n+   \"a\": 2,\n    \"b\": \"x\"\n  }");
    }

    #[test]
    fn cases_check_output_errors_and_log() {
        let case: Case = serde_json::from_value(json!({"output": {"n": 1}, "log": ["hello"]})).unwrap();
        assert!(check(&case, &report(Ok(r#"{"n":1}"#), &["well hello"])).is_empty());
        let problems = check(&case, &report(Ok(r#"{"n":2}"#), &[]));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("-   \"n\": 1") && problems[0].contains("+   \"n\": 2"), "{}", problems[0]);
        assert!(problems[1].contains("no log line contains \"hello\""));

        let case: Case = serde_json::from_value(json!({"error": {"kind": "fatal", "message": "empty"}})).unwrap();
        let fatal = |m: &str| Err(Failure { kind: FailureKind::Fatal, message: m.into() });
        assert!(check(&case, &report(fatal("name must not be empty"), &[])).is_empty());
        assert!(check(&case, &report(fatal("other"), &[]))[0].contains("expected a failure fatal: …empty…"));
        assert!(check(&case, &report(Ok("1"), &[]))[0].contains("but it succeeded with 1"));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_eq(&json!({"a": [10, 2.5]}), &json!({"a": [10.0, 2.5]})));
        assert!(!json_eq(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!json_eq(&json!([1]), &json!(["1"])));
    }

    #[test]
    fn unknown_case_keys_are_refused() {
        let err = serde_json::from_value::<Case>(json!({"paramz": {}})).unwrap_err().to_string();
        assert!(err.contains("unknown field `paramz`"), "{err}");
    }
}
