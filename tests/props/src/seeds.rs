//! Seed inputs: the golden cases (`tests/cases`), the README's examples,
//! workflows made from the real DAGs in `tests/datasets`, and hand-written
//! seeds per target. libFuzzer starts from the same seeds
//! (`scripts/fuzz.sh` writes them out).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The repository's root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files(&path, name));
        } else if path.file_name().is_some_and(|n| n == name || name.is_empty()) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Regression cases of a target: `tests/props/regressions/<target>/*`,
/// each an input that once failed.
pub fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = workspace_root().join("tests/props/regressions").join(target);
    files(&dir, "").into_iter().filter_map(|p| Some((p.clone(), std::fs::read(&p).ok()?))).collect()
}

/// ```yaml blocks of the README that are workflows.
fn readme_workflows() -> Vec<String> {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap_or_default();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in readme.lines() {
        match &mut block {
            None if line.trim_start() == "```yaml" => block = Some(String::new()),
            Some(text) if line.trim_start() == "```" => {
                if text.contains("tasks:") {
                    out.push(std::mem::take(text));
                }
                block = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    out
}

/// A workflow of `echo` tasks with the shape of a dataset's DAG (names
/// made valid, as the end-to-end tests do).
fn dataset_workflow(path: &Path, limit: usize) -> Option<Value> {
    let dag: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let tasks = dag["tasks"].as_array()?;
    let clean = |id: &str| -> String {
        id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).take(100).collect()
    };
    let kept: Vec<&Value> = tasks.iter().take(limit).collect();
    let names: std::collections::HashSet<String> = kept.iter().filter_map(|t| t["id"].as_str()).map(clean).collect();
    let tasks: Vec<Value> = kept
        .iter()
        .map(|t| {
            let deps: Vec<String> = t["deps"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d.as_str())
                .map(clean)
                .filter(|d| names.contains(d))
                .collect();
            json!({"name": clean(t["id"].as_str().unwrap_or("t")), "plugin": "echo", "depends_on": deps})
        })
        .collect();
    Some(json!({"name": clean(dag["name"].as_str().unwrap_or("dataset")), "tasks": tasks}))
}

fn with_selector(selector: u8, text: &str) -> Vec<u8> {
    let mut out = vec![selector];
    out.extend_from_slice(text.as_bytes());
    out
}

/// Definitions: the selector byte picks the format (see [`crate::definition`]).
pub fn definitions() -> Vec<Vec<u8>> {
    let root = workspace_root();
    let mut out = Vec::new();
    for path in files(&root.join("tests/cases"), "workflow.yaml") {
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.push(with_selector(0, &text));
        }
    }
    for text in readme_workflows() {
        out.push(with_selector(1, &text));
    }
    let datasets = root.join("tests/datasets/dags");
    let mut dags = files(&datasets, "");
    dags.retain(|p| p.extension().is_some_and(|e| e == "json"));
    for path in dags.iter().take(6) {
        if let Some(workflow) = dataset_workflow(path, 40) {
            out.push(with_selector(2, &workflow.to_string()));
            if let Ok(yaml) = serde_yaml::to_string(&workflow) {
                out.push(with_selector(1, &yaml));
            }
        }
    }
    for text in HAND_DEFINITIONS {
        out.push(with_selector(0, text));
    }
    out
}

const HAND_DEFINITIONS: &[&str] = &[
    "name: a\ntasks:\n- {name: t, plugin: echo}\n",
    "{\"name\":\"j\",\"tasks\":[{\"name\":\"t\",\"plugin\":\"fib\",\"params\":{\"n\":3}}]}",
    "name: x\nparams: {p: &a [1, 2]}\ntasks:\n- name: t\n  plugin: echo\n  params: {a: *a, b: *a}\n",
    "name: s\nschedule: {cron: \"0 30 2 * * *\", timezone: Europe/Berlin, catch_up: true, start: \"2026-03-29T00:00:00Z\"}\n\
     tasks: [{name: t, plugin: echo, timeout: 1h30m, memory: 64MiB, retries: 2,\n\
     retry_backoff: {kind: exponential, delay: 5s, max: 1m}}]\n",
    "name: c\ntasks:\n- {name: s, plugin: echo}\n- name: sw\n  switch: {on: \"{{ inputs.s.k }}\", cases: {a: [x]}, default: [y]}\n  depends_on: [s]\n\
     - {name: x, plugin: echo, depends_on: [sw]}\n- {name: y, plugin: echo, depends_on: [sw], when: \"{{ params.p | default(1) }}\"}\n",
    "name: o\nupstream:\n- {workflow: other, cycles: day}\n- {workflow: o, offset: -1d}\non_upstream_failure: fail\n\
     tasks:\n- {name: t, plugin: echo, sensor: {interval: 10s, timeout: 1h}, allow_hosts: [\"*.example.org:443\", \"[::1]:8080\"]}\n",
    "name: w\ntasks:\n- {name: child, workflow: other, params: {x: \"{{ ds | add_days(-1) }}\"}}\n",
];

/// Templates: the selector byte picks the time zone and logical time.
pub fn templates() -> Vec<Vec<u8>> {
    [
        "{{ params.region }}",
        "{{ inputs.a.rows[0].id }}",
        "{{ inputs[\"a\"].x | default(0) }}",
        "https://x/{{ params.region | upper }}/{{ ds }}?id={{ inputs.a.rows[0].id }}",
        "{{ logical_time | date(\"%Y/%m/%d %H:%M\") }}",
        "{{ ds | add_days(-1) }}",
        "{{ ts | add_hours(6) }}",
        "{{ ds | start_of_month }} {{ ds_nodash | end_of_month }}",
        "{{ logical_time | end_of_week }}",
        "{{ \"2026-01-31\" | add_months(1) }}",
        "{{ \"2026-03-29T02:30:00\" | add_hours(1) }}",
        "{{ inputs.a | json }}",
        "{\"a\": [\"{{ params.n }}\", {\"b\": \"{{ run_id }}-{{ task }}\"}], \"c\": 1}",
        "{{ inputs.big }}{{ inputs.big }}{{ inputs.big }}",
        "{{ 12 }}",
        "{{ \"x\" | lower | upper }}",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| with_selector(i as u8, t))
    .collect()
}

/// Schedules: lines `cron`, `time zone`, `now`, `start`, `end`, `catch-up`.
pub fn schedules() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        "0 2 * * *\nEurope/Berlin\n2026-03-28T00:00:00Z\n\n\n1",
        "30 2 * * *\nEurope/Berlin\n2026-03-29T00:00:00Z",
        "30 1 * * *\nAmerica/New_York\n2026-11-01T00:00:00Z",
        "*/15 * * * *\nAustralia/Lord_Howe\n2026-04-05T00:00:00Z",
        "0 0 29 2 *\nUTC\n2027-01-01T00:00:00Z",
        "0 0 * * MON#2\nAsia/Kolkata\n2026-01-01T00:00:00Z",
        "0 0 L * *\nPacific/Apia\n2011-12-01T00:00:00Z",
        "0 0 15W * *\nAmerica/Sao_Paulo\n2018-11-01T00:00:00Z",
        "@daily\nEurope/London\n2026-10-24T00:00:00Z\n2026-10-01T00:00:00Z\n2026-12-01T00:00:00Z\n1",
        "*/7 */3 * JAN-MAR SUN-SAT\nAmerica/Havana\n2026-03-08T00:00:00Z",
        "0 30 2 * * *\nEurope/Dublin\n2026-03-29T00:00:00Z",
        "0 0 30 2 *\nUTC\n2026-01-01T00:00:00Z",
        "59 23 31 12 *\nEtc/GMT-14\n4999-12-01T00:00:00Z",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect();
    // Non-UTF-8 inputs take the structured path.
    out.push(vec![0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    out
}

/// Outputs: lines `max depth`, `secrets` (tab-separated), then the output.
pub fn outputs() -> Vec<Vec<u8>> {
    [
        "64\n\n{\"ok\": true, \"n\": [1, 2, {\"a\": \"b\"}]}",
        "3\n\n[[[1]]]",
        "3\n\n[[[[1]]]]",
        "64\nhunter2\n{\"password\": \"hunter2\", \"hint\": \"hunter2!\"}",
        "64\n1234\t5678\n{\"pin\": 1234, \"code\": \"5678\"}",
        "64\ntrue\n{\"ok\": true}",
        "64\na\\\"b\n{\"s\": \"a\\\"b\"}",
        "64\nx\"yz\n{\"s\": \"x\\\"yz\", \"x\\\"yz\": 1}",
        "64\nabcd\n[\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\",\"abcd\"]",
        "8\n\n\"[[[[[[[[[[\"",
        "64\n\nnot json",
        "64\n\n{\"a\": 1}{\"b\": 2}",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect()
}

/// Fields: one string, given to every small parser.
pub fn fields() -> Vec<Vec<u8>> {
    [
        "30s",
        "1h30m",
        "250ms",
        "1.5d",
        "0",
        "1e12",
        "64MiB",
        "1GiB",
        "10MB",
        "512",
        "-1d",
        "-6h",
        "-1mo",
        "-1w",
        "0",
        "echo",
        "fib@1.2.3",
        "http@1.0.0-rc.1+build",
        "api.example.org:443",
        "*.example.org",
        "[::1]:8080",
        "10.0.0.1",
        "*",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect()
}
