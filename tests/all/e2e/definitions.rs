//! What a definition may say: golden errors, versions, real DAGs, the
//! published JSON Schema.

use super::*;

// 13. Errors ------------------------------------------------------------------------------------

/// The part of an error answer a golden file pins down.
fn error_essentials(body: &Value) -> Value {
    json!({
        "code": body["code"],
        "location": body["location"],
        "message": body["message"],
    })
}

#[tokio::test]
async fn invalid_definitions_answer_their_golden_errors() {
    let api = Api::shared().await;
    let cases = workspace_root().join("tests").join("cases");
    let bless = std::env::var_os("DAGR_BLESS").is_some();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&cases)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", cases.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("workflow.yaml").exists())
        .collect();
    names.sort();
    assert!(names.len() >= 12, "golden cases missing in {}", cases.display());
    let mut mismatches = Vec::new();
    for dir in &names {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let yaml = std::fs::read_to_string(dir.join("workflow.yaml")).unwrap();
        let (status, body) = api.post_text("/v1/workflows", &yaml).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let location = body["location"].as_str().unwrap_or_default();
        assert!(!location.is_empty(), "{name}: no location in {body}");
        let got = error_essentials(&body);
        let expected_path = dir.join("error.json");
        if bless {
            let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
            std::fs::write(&expected_path, text).unwrap();
            continue;
        }
        let expected: Value = match std::fs::read_to_string(&expected_path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", expected_path.display())),
            Err(_) => {
                mismatches.push(format!("{name}: no error.json; got {got:#}"));
                continue;
            }
        };
        if got != expected {
            mismatches.push(format!("{name}:\n  expected {expected}\n  got      {got}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} golden case(s) differ (DAGR_BLESS=1 rewrites them):\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn requests_that_are_not_definitions_fail_with_4xx_too() {
    let api = Api::shared().await;
    api.apply(
        "name: e2e-errors\nparams: {region: eu}\ntasks:\n- {name: a, plugin: echo, params: {r: '{{ params.region }}'}}\n",
    )
    .await;
    // A trigger with a param the workflow does not declare.
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"params": {"x": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_params");
    assert_eq!(body["location"], "params.x");
    assert!(body["message"].as_str().unwrap().contains("unknown param `x`"), "{body}");
    // An unknown run.
    let (status, body) = api.get("/v1/runs/00000000-0000-0000-0000-000000000000").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    assert!(body["message"].as_str().unwrap().contains("no run"), "{body}");
    // An unknown workflow.
    let (status, body) = api.post("/v1/workflows/e2e-nope/runs", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    // A body that is not JSON.
    let (status, body) = api.post_text("/v1/workflows/e2e-errors/runs", "{\"params\": ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "bad_body");
    // JSON of the wrong shape names the field.
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"params": 5})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "params");
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"logical_time": "yesterday"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "logical_time");
    // Nothing was created by any of these.
    assert_eq!(api.runs_of("e2e-errors", "manual").await.len(), 0);
}

// 14. Versions ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_keeps_the_version_it_started_with() {
    let api = Api::shared().await;
    let v1 = r#"
name: e2e-versions
tasks:
- {name: wait, plugin: sleep, params: {ms: 2000}}
- {name: report, plugin: echo, depends_on: [wait], params: {version: 1}}
"#;
    let v2 = r#"
name: e2e-versions
tasks:
- {name: wait, plugin: sleep, params: {ms: 10}}
- {name: report, plugin: echo, depends_on: [wait], params: {version: 2}}
- {name: extra, plugin: echo, depends_on: [report]}
"#;
    let applied = api.apply(v1).await;
    assert_eq!(applied["version"], 1);
    assert_eq!(applied["created"], true);
    let old = api.trigger("e2e-versions", json!({})).await;
    api.wait_task(&old, "wait", "running").await;

    let (status, applied) = api.post_text("/v1/workflows", v2).await;
    assert_eq!(status, StatusCode::CREATED, "{applied}");
    assert_eq!(applied["version"], 2);
    assert_eq!(applied["created"], true);
    // The same definition again, written differently: nothing new.
    let (status, applied) = api.post_text("/v1/workflows", &v2.replace("{ms: 10}", "{ms: 10}, retries: 0")).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied, json!({"name": "e2e-versions", "version": 2, "created": false}));

    let run = api.finished(&old).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(run["version"], 1);
    let names: Vec<&str> = run["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["wait", "report"]);
    let report = api.task(&old, "report").await;
    assert_eq!(report["output"]["params"], json!({"version": 1}));

    let new = api.trigger("e2e-versions", json!({})).await;
    let run = api.finished(&new).await;
    assert_eq!(run["version"], 2);
    assert_eq!(run["tasks"].as_array().unwrap().len(), 3);
    let report = api.task(&new, "report").await;
    assert_eq!(report["output"]["params"], json!({"version": 2}));

    let versions = api.get_ok("/v1/workflows/e2e-versions/versions").await;
    let numbers: Vec<i64> = versions.as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(numbers, [1, 2]);
    let first = api.get_ok("/v1/workflows/e2e-versions?version=1").await;
    assert_eq!(first["definition"]["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(first["latest_version"], 2);
}

// 15. Real DAGs ------------------------------------------------------------------------------

/// A task name dagr accepts: `[A-Za-z0-9._-]`, at most 100 characters.
fn sanitize(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(100)
        .collect();
    if name.is_empty() { "_".into() } else { name }
}

/// A small deterministic generator, so that a failing order can be replayed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A dataset DAG as a workflow of `echo` tasks, in shuffled order; with the
/// dependencies each task should end up with, by dagr name.
pub(crate) fn dag_workflow(name: &str, file: &Path, seed: u64) -> (String, BTreeMap<String, Vec<String>>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let dag: Value = serde_json::from_str(&text).unwrap();
    let tasks = dag["tasks"].as_array().unwrap();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for t in tasks {
        let id = t["id"].as_str().unwrap();
        let base = sanitize(id);
        let mut candidate = base.clone();
        let mut n = 2;
        while taken.contains(&candidate) {
            candidate = format!("{base}-{n}");
            n += 1;
        }
        taken.insert(candidate.clone());
        names.insert(id.to_owned(), candidate);
    }
    let mut expected = BTreeMap::new();
    let mut specs: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let name = names[t["id"].as_str().unwrap()].clone();
            let mut deps: Vec<String> =
                t["deps"].as_array().unwrap().iter().map(|d| names[d.as_str().unwrap()].clone()).collect();
            let spec = json!({"name": name, "plugin": "echo", "depends_on": deps});
            deps.sort();
            expected.insert(name, deps);
            spec
        })
        .collect();
    let mut rng = XorShift(seed | 1);
    for i in (1..specs.len()).rev() {
        specs.swap(i, rng.below(i + 1));
    }
    let definition = json!({"name": name, "tasks": specs}).to_string();
    (definition, expected)
}

#[tokio::test]
async fn dataset_dags_run_to_completion() {
    let api = Api::shared().await;
    let root = workspace_root().join("tests/datasets/dags");
    let files = [
        "pegasus-srasearch-10a.json",
        "nextflow-rnaseq.json",
        "alibaba-v2018/j_2865455.json",
        "alibaba-v2018/j_1010856.json",
        "alibaba-v2018/j_1711085.json",
        "alibaba-v2018/j_3583533.json",
        "alibaba-v2018/j_10058.json",
    ];
    let mut started = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let path = root.join(file);
        let stem = path.file_stem().unwrap().to_string_lossy().to_lowercase();
        let name = format!("e2e-dag-{}", sanitize(&stem));
        let (definition, expected) = dag_workflow(&name, &path, 2018 + i as u64);
        let count = serde_json::from_str::<Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()["tasks"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(expected.len(), count);
        api.apply(&definition).await;
        let id = api.trigger(&name, json!({})).await;
        started.push((file, id, expected));
    }
    // Known sizes from the dataset's README.
    assert_eq!(started[0].2.len(), 22);
    assert_eq!(started[1].2.len(), 197);
    for (file, id, expected) in started {
        let run = api.finished(&id).await;
        assert_eq!(state(&run), "succeeded", "{file}");
        assert_eq!(run["task_counts"]["succeeded"], expected.len(), "{file}: {}", run["task_counts"]);
        let tasks = &all_tasks(&api, &id).await;
        assert_eq!(tasks.len(), expected.len(), "{file}");
        let mut got = BTreeMap::new();
        for t in tasks {
            assert_eq!(t["state"], "succeeded", "{file}: {t:#}");
            assert_eq!(t["attempts"], 1, "{file}: {t:#}");
            let mut deps: Vec<String> =
                t["depends_on"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()).collect();
            deps.sort();
            got.insert(t["name"].as_str().unwrap().to_owned(), deps);
        }
        assert_eq!(got, expected, "{file}: the dependencies");
        // Every task started after all of its upstream tasks finished.
        let by_name: HashMap<&str, &Value> = tasks.iter().map(|t| (t["name"].as_str().unwrap(), t)).collect();
        for t in tasks {
            for dep in t["depends_on"].as_array().unwrap() {
                let up = by_name[dep.as_str().unwrap()];
                assert!(
                    time_of(&t["started_at"]) >= time_of(&up["finished_at"]),
                    "{file}: {} started before {dep} finished",
                    t["name"]
                );
            }
        }
    }
}

// The published JSON Schema ------------------------------------------------------------

/// `docs/workflow.schema.json` is what the code generates (bless with
/// `DAGR_BLESS=1`), and it agrees with dagr's own parser on the shape of
/// definitions: the golden cases that fail on shape fail the schema too,
/// those that fail on meaning (cycles, plugins, cron) pass it.
#[test]
fn the_published_json_schema_is_current_and_agrees_with_the_parser() {
    let path = crate::support::workspace_root().join("docs/workflow.schema.json");
    let generated = serde_json::to_string_pretty(&dagr_core::definition::json_schema()).unwrap() + "\n";
    if std::env::var_os("DAGR_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let published = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        published == generated,
        "{} is out of date; regenerate it with DAGR_BLESS=1 cargo test -p dagr-tests -- json_schema",
        path.display()
    );

    let schema: Value = serde_json::from_str(&published).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let shape_errors = [
        "unknown-field",
        "wrong-type",
        "empty-task-list",
        "grade-out-of-range",
        "upstream-bad-cycles",
        "upstream-bad-require",
        "upstream-bad-missing",
        "bad-on-failure",
        "bad-on-upstream-failure",
        "bad-run-timeout",
    ];
    let cases = crate::support::workspace_root().join("tests/cases");
    let mut checked = 0;
    for entry in std::fs::read_dir(&cases).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(text) = std::fs::read_to_string(dir.join("workflow.yaml")) else { continue };
        let Ok(document) = serde_yaml::from_str::<Value>(&text) else { continue };
        let valid = validator.is_valid(&document);
        if shape_errors.contains(&name.as_str()) {
            assert!(!valid, "the schema accepts case {name}, which dagr refuses for its shape");
        } else {
            assert!(valid, "the schema refuses case {name}: {:?}", validator.iter_errors(&document).next());
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} cases in {}", cases.display());

    let full = json!({
        "name": "nightly",
        "description": "every option once",
        "params": {"day": "{{ ds }}"},
        "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin", "catch_up": true, "start": "2026-01-01T00:00:00Z"},
        "max_active_runs": 1,
        "concurrency": 4,
        "tasks": [
            {"name": "a", "plugin": "echo@0.1.0", "params": {"x": 1}, "retries": 3,
             "retry_backoff": {"kind": "exponential", "delay": "1s", "max": "1m"}, "timeout": "30s",
             "priority": 5, "allow_hosts": ["api.example.org:443"], "memory": "64MiB", "worker_group": "gpu"},
            {"name": "b", "plugin": "echo", "depends_on": ["a"], "trigger_rule": "all_done", "timeout": 90, "memory": 1048576}
        ]
    });
    assert!(validator.is_valid(&full), "{:?}", validator.iter_errors(&full).next());
    let definition = serde_yaml::to_string(&full).unwrap();
    dagr_core::definition::WorkflowSpec::parse(&definition, dagr_core::definition::Format::Yaml).unwrap();
}
