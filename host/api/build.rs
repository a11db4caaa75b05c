//! Embeds the web UI in the binary: writes `$OUT_DIR/ui_assets.rs`, a table
//! of every file under `ui/` (but its `test/` directory) with its bytes.

use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("ui");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if root.is_dir() {
        walk(&root, &root, &mut files);
    }
    files.sort();
    let mut out = String::from(
        "/// Every file of the web UI: (path under `ui/`, bytes).\npub static ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for (rel, abs) in &files {
        out.push_str(&format!("    ({rel:?}, include_bytes!({abs:?})),\n"));
    }
    out.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    if let Err(e) = std::fs::write(out_dir.join("ui_assets.rs"), out) {
        panic!("cannot write the UI's asset table: {e}");
    }
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else { continue };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if rel == "test" || rel.starts_with('.') || rel.ends_with('~') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, files);
        } else {
            files.push((rel, path.to_string_lossy().into_owned()));
        }
    }
}
