//! Plugin projects in Python and JavaScript for the tests: their toolchains,
//! and their components built once per change.
//!
//! - [`toolchain_path`]: `PATH` with the pinned toolchains that
//!   `scripts/toolchains.sh` installs under `target/toolchains`
//!   (componentize-py and pytest in a venv, jco and componentize-js from
//!   npm), so that `dagr plugin build` finds them as a user's shell would.
//! - [`dagr_in`]: the `dagr` binary as a plugin author runs it, in a
//!   project directory.
//! - [`component`]: a project under `plugins/` (an example, a hostile
//!   component) built with `dagr plugin build` into the target directory,
//!   once per suite run and again only when its sources, its SDK or the WIT
//!   change (a Python build takes ~20 s, its compilation as long again).

#![allow(dead_code)]

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::server::output_within;
use crate::support::{dagr_binary, shared_cache_dir, workspace_root};

/// How long a build may take on a busy two-core machine.
pub const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// Where `scripts/toolchains.sh` installs the pinned toolchains.
pub fn toolchains_dir() -> PathBuf {
    std::env::var_os("DAGR_TOOLCHAINS").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target/toolchains"))
}

/// `PATH` with the toolchains first; panics, saying how to install them,
/// if they are missing.
pub fn toolchain_path() -> std::ffi::OsString {
    let dir = toolchains_dir();
    let bins = [dir.join("py/bin"), dir.join("js/node_modules/.bin")];
    for tool in [bins[0].join("componentize-py"), bins[0].join("pytest"), bins[1].join("jco")] {
        assert!(
            tool.is_file(),
            "{} is missing: install the pinned Python and JavaScript toolchains with scripts/toolchains.sh \
             (scripts/test.sh does it)",
            tool.display()
        );
    }
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(bins.iter().cloned().chain(std::env::split_paths(&rest))).unwrap()
}

/// `dagr ARGS` in `dir`, with the toolchains on `PATH` and the suite's
/// shared code cache.
pub fn dagr_in(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(dagr_binary());
    command
        .args(args)
        .current_dir(dir)
        .env("PATH", toolchain_path())
        .env("DAGR_CODE_CACHE", shared_cache_dir())
        // The servers' cache too: the CLI must not prune their artifacts.
        .env("DAGR_CODE_CACHE_KEEP", "0")
        .env_remove("DAGR_LOG");
    command
}

/// Runs a command to its end (at most [`BUILD_TIMEOUT`]) and returns its
/// output, panicking with both streams if it did not exit with `code`.
pub fn expect(command: Command, code: i32, what: &str) -> Output {
    let out = output_within(command, BUILD_TIMEOUT);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The component of the project at `plugins/<project>` (e.g.
/// `examples/python`), and the directory it was built in (a copy of the
/// project, where `dagr plugin test` can run its cases).
pub fn component(project: &str) -> (PathBuf, PathBuf) {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let slot = {
        let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        built.entry(project.to_owned()).or_default().clone()
    };
    let dir = slot.get_or_init(|| build(project)).clone();
    (dir.join("build/plugin.wasm"), dir)
}

fn build(project: &str) -> PathBuf {
    let source = workspace_root().join("plugins").join(project);
    let sdk = if source.join("app.py").exists() { "sdk/python" } else { "sdk/js" };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for root in [source.clone(), workspace_root().join(sdk), workspace_root().join("wit")] {
        for file in files(&root) {
            file.strip_prefix(&root).unwrap().hash(&mut hasher);
            std::fs::read(&file).unwrap().hash(&mut hasher);
        }
    }
    let name = project.replace('/', "-");
    let parent = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-components");
    let dir = parent.join(format!("{name}-{:016x}", hasher.finish()));
    if dir.join("build/plugin.wasm").is_file() {
        return dir;
    }
    // Earlier builds of this project are stale.
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&format!("{name}-")) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let staging = parent.join(format!("{name}.building"));
    let _ = std::fs::remove_dir_all(&staging);
    for file in files(&source) {
        let to = staging.join(file.strip_prefix(&source).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    expect(dagr_in(&staging, &["plugin", "build"]), 0, &format!("dagr plugin build of plugins/{project}"));
    std::fs::rename(&staging, &dir).unwrap_or_else(|e| panic!("cannot move {} into place: {e}", staging.display()));
    dir
}

/// The files of a project, without what builds and tools leave behind.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if path.is_dir() {
                if ![".dagr", "build", "node_modules", "__pycache__", ".pytest_cache", ".venv", "target"]
                    .contains(&name.as_str())
                {
                    stack.push(path);
                }
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A command's stdout and stderr, lossily.
pub fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}
