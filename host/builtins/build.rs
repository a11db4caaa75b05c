#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Builds the `plugins/` workspace for wasm32-wasip2 and exposes every
//! component: built-ins as embedded bytes, test components as paths.
//!
//! The nested cargo uses its own target directory (`plugins/target`), so it
//! does not contend with the outer build's lock; it shares the outer
//! build's jobserver.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The task types shipped with dagr, in the order `dagr plugin list` shows them.
const BUILTINS: &[&str] = &["echo", "fail", "sleep", "fib", "http", "transform", "script"];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.join("../..").canonicalize().expect("the workspace root exists");
    let plugins = root.join("plugins");
    let target_dir = plugins.join("target");

    watch(&root.join("wit"));
    watch(&root.join("sdk/src"));
    println!("cargo:rerun-if-changed={}", root.join("sdk/Cargo.toml").display());
    for file in ["Cargo.toml", "Cargo.lock", ".cargo/config.toml"] {
        println!("cargo:rerun-if-changed={}", plugins.join(file).display());
    }
    let members = members(&plugins);
    for dir in members.values() {
        println!("cargo:rerun-if-changed={}", dir.join("Cargo.toml").display());
        watch(&dir.join("src"));
    }

    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&plugins)
        .args(["build", "--release", "--workspace", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target_dir);
    // Settings meant for the outer (native) build must not leak into this one.
    for (key, _) in env::vars() {
        let keep = key == "CARGO_HOME"
            || key == "CARGO_MAKEFLAGS"
            || key.starts_with("CARGO_NET_")
            || key.starts_with("CARGO_HTTP_")
            || key.starts_with("CARGO_REGISTRIES_");
        let outer = key.starts_with("CARGO_")
            || matches!(key.as_str(), "RUSTFLAGS" | "RUSTC_WRAPPER" | "RUSTC_WORKSPACE_WRAPPER" | "RUSTDOCFLAGS");
        if outer && !keep {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().expect("cannot run cargo to build plugins/");
    if !status.success() {
        panic!(
            "building plugins/ for wasm32-wasip2 failed (is the target installed? `rustup target add wasm32-wasip2`)"
        );
    }

    let artifacts = target_dir.join("wasm32-wasip2/release");
    let mut code = String::new();
    let mut listed = Vec::new();
    for name in members.keys() {
        // cargo names a cdylib after its crate: `-` becomes `_`.
        let wasm = artifacts.join(format!("{}.wasm", name.replace('-', "_")));
        assert!(wasm.exists(), "plugins/ built, but {} is missing", wasm.display());
        let konst = name.to_uppercase().replace('-', "_");
        let path = wasm.display().to_string();
        if BUILTINS.contains(&name.as_str()) {
            writeln!(code, "/// The `{name}` built-in plugin's component.").unwrap();
            writeln!(code, "pub const {konst}: &[u8] = include_bytes!({path:?});").unwrap();
            listed.push((name.clone(), konst.clone()));
        }
        writeln!(code, "/// Path of the `{name}` component built from plugins/.").unwrap();
        writeln!(code, "pub const {konst}_PATH: &str = {path:?};").unwrap();
    }
    for builtin in BUILTINS {
        assert!(members.contains_key(*builtin), "built-in plugin {builtin} is not a member of plugins/");
    }
    writeln!(code, "/// Every built-in plugin: name and component bytes.").unwrap();
    writeln!(code, "pub const BUILTINS: &[(&str, &[u8])] = &[").unwrap();
    for builtin in BUILTINS {
        let konst = &listed.iter().find(|(n, _)| n == builtin).expect("listed above").1;
        writeln!(code, "    ({builtin:?}, {konst}),").unwrap();
    }
    writeln!(code, "];").unwrap();
    // Their hashes, so that a node can find what it knows of a built-in
    // (its description, its machine code) without reading the component.
    writeln!(code, "/// Every built-in plugin: name, component bytes and their SHA-256 (hex).").unwrap();
    writeln!(code, "pub const BUILTINS_HASHED: &[(&str, &[u8], &str)] = &[").unwrap();
    for builtin in BUILTINS {
        let konst = &listed.iter().find(|(n, _)| n == builtin).expect("listed above").1;
        let wasm = artifacts.join(format!("{}.wasm", builtin.replace('-', "_")));
        let bytes = std::fs::read(&wasm).unwrap_or_else(|e| panic!("cannot read {}: {e}", wasm.display()));
        let sha256: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        writeln!(code, "    ({builtin:?}, {konst}, {sha256:?}),").unwrap();
    }
    writeln!(code, "];").unwrap();
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("plugins.rs");
    std::fs::write(out, code).expect("cannot write plugins.rs");
}

/// Member crates of plugins/: package name → directory.
fn members(plugins: &Path) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![plugins.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && entry.file_name() != "target" && !entry.file_name().to_string_lossy().starts_with('.') {
                if path.join("Cargo.toml").exists() && path.join("src").exists() {
                    let manifest = std::fs::read_to_string(path.join("Cargo.toml")).unwrap_or_default();
                    let name = manifest
                        .lines()
                        .find_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')))
                        .map(str::to_owned);
                    if let Some(name) = name {
                        found.insert(name, path.clone());
                    }
                }
                stack.push(path);
            }
        }
    }
    found
}

fn watch(dir: &Path) {
    println!("cargo:rerun-if-changed={}", dir.display());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                watch(&path);
            } else {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
