//! Plugins in Rust, Python and JavaScript, the way their authors make them:
//! `dagr plugin new` → `build` → `test` → `push` → a run in a workflow on a
//! real `dagr serve`; the three examples of `plugins/examples` (one task in
//! three languages) passing their cases and agreeing; and Python and
//! JavaScript plugins beside Rust ones in one DAG, passing outputs on.

use std::path::Path;

use serde_json::{Value, json};

use crate::projects::{component, dagr_in, expect, files, text, toolchain_path};
use crate::server::DagrServer;
use crate::support::{busy_blocking, workspace_root};

/// Server settings for these tests: compiling an 18 MB Python component
/// takes 13-16 s of CPU, much longer on a machine busy with the rest of the
/// suite; the defaults' wall-clock limit is not what these tests check.
const SERVER_ENV: &[(&str, &str)] = &[("DAGR_PLUGINS__COMPILE_TIMEOUT", "600s"), ("DAGR_PLUGINS__COMPILE_CPU", "300s")];

fn lifecycle(lang: &str, unit_test: &[&str]) {
    let _busy = busy_blocking();
    let home = tempfile::tempdir().unwrap();
    let name = format!("greet-{lang}");
    expect(dagr_in(home.path(), &["plugin", "new", &name, "--lang", lang]), 0, "dagr plugin new");
    let project = home.path().join(&name);
    for file in ["README.md", ".gitignore", "cases/greets.json", "cases/empty-name.json"] {
        assert!(project.join(file).is_file(), "plugin new made no {file}");
    }

    // The native unit test passes as generated.
    let mut unit = std::process::Command::new(unit_test[0]);
    unit.args(&unit_test[1..]).current_dir(&project).env("PATH", toolchain_path());
    if lang == "rust" {
        unit.env("CARGO_TARGET_DIR", rust_target_dir());
    }
    expect(unit, 0, &format!("{} in a new project", unit_test.join(" ")));

    let mut build = dagr_in(&project, &["plugin", "build"]);
    build.env("CARGO_TARGET_DIR", rust_target_dir());
    let (stdout, _) = text(&expect(build, 0, "dagr plugin build"));
    assert!(stdout.contains(&format!("{name} 0.1.0")), "{stdout}");
    assert!(stdout.contains(&format!("The {name} task type.")), "{stdout}");
    assert!(stdout.contains("params: {\"additionalProperties\":false"), "the params schema is printed: {stdout}");

    let test = |code| {
        let mut command = dagr_in(&project, &["plugin", "test"]);
        command.env("CARGO_TARGET_DIR", rust_target_dir());
        text(&expect(command, code, "dagr plugin test")).1
    };
    let stderr = test(0);
    assert!(stderr.contains("3 cases: 3 passed, 0 failed"), "{stderr}");
    // `plugin build` compiled it: the test loads the machine code.
    assert!(stderr.contains("machine code from the cache"), "{stderr}");

    // A wrong expectation fails with a diff.
    let case = project.join("cases/greets.json");
    let original = std::fs::read_to_string(&case).unwrap();
    std::fs::write(&case, original.replace("HELLO, ADA!", "HELLO, BOB!")).unwrap();
    let stderr = test(1);
    assert!(stderr.contains("FAIL  greets"), "{stderr}");
    assert!(stderr.contains("-   \"greeting\": \"HELLO, BOB!\""), "{stderr}");
    assert!(stderr.contains("+   \"greeting\": \"HELLO, ADA!\""), "{stderr}");
    assert!(stderr.contains("3 cases: 2 passed, 1 failed"), "{stderr}");
    std::fs::write(&case, original).unwrap();

    // Published from the project directory, then run in a workflow.
    let server = DagrServer::start_with(SERVER_ENV);
    let mut push = dagr_in(&project, &["plugin", "push"]);
    push.env("DAGR_SERVER", server.base_url()).env("DAGR_TOKEN", server.token());
    let (stdout, _) = text(&expect(push, 0, "dagr plugin push"));
    assert!(stdout.starts_with(&format!("published {name}@0.1.0 sha256:")), "{stdout}");

    let workflow = format!(
        "name: hello-{lang}\ntasks:\n  - name: hello\n    plugin: {name}@0.1.0\n    params: {{name: Ada}}\n  \
         - name: after\n    plugin: echo\n    depends_on: [hello]\n"
    );
    let output = run_workflow(&server, &format!("hello-{lang}"), &workflow);
    assert_eq!(output["hello"], json!({"greeting": "Hello, Ada!"}));
    assert_eq!(output["after"]["inputs"]["hello"], json!({"greeting": "Hello, Ada!"}), "the output went downstream");
}

/// The target directory of the Rust projects `plugin new` makes in tests:
/// shared, so that the SDK's dependencies compile once per machine.
fn rust_target_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plugin-projects-rust")
}

/// Applies `definition`, runs it to its end with `dagr run --wait`, and
/// returns every task's output by task name (all must have succeeded).
fn run_workflow(server: &DagrServer, workflow: &str, definition: &str) -> Value {
    let file = crate::server::write_file(server.data_dir(), &format!("{workflow}.yaml"), definition);
    let out = server.cli(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.status.success(), "apply: {}", String::from_utf8_lossy(&out.stderr));
    let mut run = server.cli_command(&["run", workflow, "--wait"]);
    run.env("PATH", toolchain_path());
    let out = crate::server::output_within(run, crate::projects::BUILD_TIMEOUT);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "the run of {workflow} failed:\n{stdout}\n{stderr}\n{}", server.log());
    let run_id = stdout.lines().next().and_then(|l| l.strip_prefix("run ")).and_then(|l| l.split_whitespace().next());
    let run_id = run_id.unwrap_or_else(|| panic!("no run id in:\n{stdout}")).to_owned();
    let client = server.client();
    let base = server.base_url();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async move {
        let run: Value = client.get(format!("{base}/v1/runs/{run_id}")).send().await.unwrap().json().await.unwrap();
        let mut outputs = serde_json::Map::new();
        for task in run["tasks"].as_array().unwrap_or_else(|| panic!("no tasks in {run:#}")) {
            let name = task["name"].as_str().unwrap();
            let detail: Value =
                client.get(format!("{base}/v1/runs/{run_id}/tasks/{name}")).send().await.unwrap().json().await.unwrap();
            assert_eq!(detail["state"], "succeeded", "{detail:#}");
            outputs.insert(name.to_owned(), detail["output"].clone());
        }
        Value::Object(outputs)
    })
}

#[test]
fn a_python_plugin_goes_from_new_to_a_workflow() {
    let pytest = crate::projects::toolchains_dir().join("py/bin/pytest");
    lifecycle("python", &[pytest.to_str().unwrap(), "-q"]);
}

#[test]
fn a_javascript_plugin_goes_from_new_to_a_workflow() {
    lifecycle("js", &["node", "--test"]);
}

#[test]
fn a_rust_plugin_goes_from_new_to_a_workflow() {
    lifecycle("rust", &["cargo", "test", "--quiet"]);
}

/// Numbers compared as numbers (`10` and `10.0`), as `dagr plugin test` does.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn the_examples_pass_the_same_cases_in_three_languages() {
    let _busy = busy_blocking();
    let examples = workspace_root().join("plugins/examples");
    // The same cases, word for word.
    let cases = |lang: &str| -> Vec<(String, String)> {
        files(&examples.join(lang).join("cases"))
            .iter()
            .map(|f| (f.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(f).unwrap()))
            .collect()
    };
    assert_eq!(cases("rust"), cases("python"));
    assert_eq!(cases("rust"), cases("js"));
    assert_eq!(cases("rust").len(), 3);

    let (_, python) = component("examples/python");
    let (_, js) = component("examples/js");
    for dir in [python.as_path(), js.as_path(), examples.join("rust").as_path()] {
        let (_, stderr) = text(&expect(dagr_in(dir, &["plugin", "test"]), 0, "dagr plugin test of an example"));
        assert!(stderr.contains("3 cases: 3 passed, 0 failed"), "{}: {stderr}", dir.display());
    }
}

#[test]
fn python_and_javascript_plugins_run_beside_rust_ones_in_one_dag() {
    let _busy = busy_blocking();
    let (python, _) = component("examples/python");
    let (js, _) = component("examples/js");
    let rust = Path::new(dagr_builtins::CSV_SUMMARY_RS_PATH);
    let server = DagrServer::start_with(SERVER_ENV);
    for file in [&python, &js, &rust.to_path_buf()] {
        // The upload check compiles it: long for Python on a busy machine.
        let push = server.cli_command(&["plugin", "push", file.to_str().unwrap()]);
        let out = crate::server::output_within(push, crate::projects::BUILD_TIMEOUT);
        assert!(out.status.success(), "push {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    }
    // Rust (script) -> Python -> Rust (script) -> JavaScript -> Rust
    // (transform), with a Rust csv-summary beside the Python one.
    let definition = r#"name: polyglot
tasks:
  - name: data
    plugin: script
    params:
      script: |
        #{ csv: "city,amount\nBerlin,10\nParis,5\nBerlin,2.5" }
  - name: py
    plugin: csv-summary-py@0.1.0
    depends_on: [data]
    params: { csv: "{{ inputs.data.csv }}", column: amount, group_by: city }
  - name: rs
    plugin: csv-summary-rs@0.1.0
    depends_on: [data]
    params: { csv: "{{ inputs.data.csv }}", column: amount, group_by: city }
  - name: tocsv
    plugin: script
    depends_on: [py]
    params:
      script: |
        let out = "city,sum";
        for city in inputs.py.groups.keys() { out += "\n" + city + "," + inputs.py.groups[city].sum; }
        #{ csv: out }
  - name: js
    plugin: csv-summary-js@0.1.0
    depends_on: [tocsv]
    params: { csv: "{{ inputs.tocsv.csv }}", column: sum }
  - name: compare
    plugin: transform
    depends_on: [py, rs, js]
    params:
      filter: "{py: .inputs.py.sum, rs: .inputs.rs.sum, js: .inputs.js.sum, cities: .inputs.js.rows}"
"#;
    let outputs = run_workflow(&server, "polyglot", definition);
    assert!(
        same_json(&outputs["py"], &outputs["rs"]),
        "Python and Rust disagree:\n{:#}\n{:#}",
        outputs["py"],
        outputs["rs"]
    );
    assert!(same_json(
        &outputs["py"]["groups"],
        &json!({"Berlin": {"count": 2, "sum": 12.5}, "Paris": {"count": 1, "sum": 5}})
    ));
    assert!(
        same_json(&outputs["compare"], &json!({"py": 17.5, "rs": 17.5, "js": 17.5, "cities": 2})),
        "{:#}",
        outputs["compare"]
    );
    assert_eq!(outputs["js"]["columns"], json!(["city", "sum"]));
}
