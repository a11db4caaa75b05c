//! The Python and JavaScript SDKs: their own tests (pytest, node --test),
//! the examples' unit tests, and the contract check — the bindings that
//! componentize-py and jco generate from `wit/plugin.wit` must be the ones
//! the SDKs were written against (`sdk/*/contract.txt`), so that a change
//! of the WIT that breaks a language fails here, naming the language.

use std::path::Path;
use std::process::Command;

use crate::projects::{component, expect, text, toolchain_path, toolchains_dir};
use crate::support::workspace_root;

fn pytest(dir: &Path, what: &str) {
    let mut command = Command::new(toolchains_dir().join("py/bin/pytest"));
    command.arg("-q").arg("-p").arg("no:cacheprovider").current_dir(dir).env("PATH", toolchain_path());
    let (stdout, _) = text(&expect(command, 0, what));
    assert!(stdout.contains(" passed"), "{what}: {stdout}");
}

fn node_test(dir: &Path, what: &str) {
    let mut command = Command::new("node");
    command.arg("--test").current_dir(dir).env("PATH", toolchain_path());
    let (stdout, _) = text(&expect(command, 0, what));
    assert!(stdout.contains("# fail 0"), "{what}: {stdout}");
}

#[test]
fn the_python_sdks_own_tests_pass() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&workspace_root().join("sdk/python"), dir.path());
    pytest(dir.path(), "pytest in sdk/python");
}

#[test]
fn the_javascript_sdks_own_tests_pass() {
    node_test(&workspace_root().join("sdk/js"), "node --test in sdk/js");
}

#[test]
fn the_examples_unit_tests_pass() {
    // The built copies hold .dagr/sdk, which the unit tests import.
    let (_, python) = component("examples/python");
    pytest(&python, "pytest in plugins/examples/python");
    let (_, js) = component("examples/js");
    node_test(&js, "node --test in plugins/examples/js");
}

/// Generated bindings without their doc comments: the shape of the contract
/// as each language sees it.
fn shape(files: &[(String, String)], comment: (&str, &str)) -> String {
    let mut out = String::new();
    for (name, text) in files {
        out.push_str(&format!("=== {name}\n"));
        let stripped = strip(text, comment);
        for line in
            stripped.lines().map(str::trim_end).filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `text` without everything from `open` to the next `close`.
fn strip(mut text: &str, (open, close): (&str, &str)) -> String {
    let mut kept = String::new();
    while let Some(start) = text.find(open) {
        kept.push_str(&text[..start]);
        let rest = &text[start + open.len()..];
        text = rest.find(close).map_or("", |end| &rest[end + close.len()..]);
    }
    kept.push_str(text);
    kept
}

fn generated(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = crate::projects::files(dir)
        .into_iter()
        .map(|f| (f.strip_prefix(dir).unwrap().display().to_string(), std::fs::read_to_string(&f).unwrap()))
        .collect();
    files.sort();
    files
}

/// Where the bindings are generated from: `wit/plugin.wit` alone, or (for
/// Python, which needs wasi:http in its world) the SDK's world with the
/// contract as a dependency, laid out as `dagr plugin build` lays it out.
enum World {
    Contract,
    PythonSdk,
}

fn check_contract(
    lang: &str,
    world: World,
    generate: impl FnOnce(&Path, &Path) -> Command,
    kept: &str,
    comment: (&str, &str),
) {
    let work = tempfile::tempdir().unwrap();
    let wit = work.path().join("wit");
    let contract = match world {
        World::Contract => wit.join("plugin.wit"),
        World::PythonSdk => {
            copy_tree(&workspace_root().join("sdk/python/wit"), &wit);
            wit.join("deps/dagr-plugin.wit")
        }
    };
    std::fs::create_dir_all(contract.parent().unwrap()).unwrap();
    std::fs::copy(workspace_root().join("wit/plugin.wit"), contract).unwrap();
    let out = work.path().join("out");
    expect(generate(&wit, &out), 0, &format!("generating the {lang} bindings"));
    let shape = shape(&generated(&out.join(kept)), comment);
    let snapshot = workspace_root().join(format!("sdk/{lang}/contract.txt"));
    if std::env::var_os("DAGR_BLESS").is_some() {
        std::fs::write(&snapshot, &shape).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot).unwrap_or_default();
    assert!(
        expected == shape,
        "wit/plugin.wit changed the {lang} bindings: the SDK in sdk/{lang} was written against {} \
         (bring the SDK, its types and its tests along, then refresh the file with DAGR_BLESS=1). \
         Generated now:\n{shape}",
        snapshot.display()
    );
}

#[test]
fn the_python_sdk_matches_the_wit_contract() {
    check_contract(
        "python",
        World::PythonSdk,
        |wit, out| {
            let mut command = Command::new(toolchains_dir().join("py/bin/componentize-py"));
            command.arg("-d").arg(wit).args(["-w", "plugin", "bindings"]).arg(out);
            command
        },
        "wit_world",
        ("\"\"\"", "\"\"\""),
    );
}

#[test]
fn the_javascript_sdk_matches_the_wit_contract() {
    check_contract(
        "js",
        World::Contract,
        |wit, out| {
            let mut command = Command::new(toolchains_dir().join("js/node_modules/.bin/jco"));
            command.arg("types").arg(wit).args(["--world-name", "plugin", "-o"]).arg(out).env("PATH", toolchain_path());
            command
        },
        "",
        ("/**", "*/"),
    );
}

fn copy_tree(from: &Path, to: &Path) {
    for file in crate::projects::files(from) {
        let target = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&file, &target).unwrap();
    }
}
