#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Embeds the migrations (`migrations/sqlite`, `migrations/postgres`) in the
//! crate: `$OUT_DIR/migrations.rs` lists each folder's files, by name, with
//! their text (see `src/migrations.rs`).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // The variable cargo sets when it runs this script, not the one it set
    // when it compiled it: a moved checkout (or a target directory built
    // from another one) must read its own migrations.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir).join("migrations");
    let mut code = String::new();
    for dialect in ["sqlite", "postgres"] {
        let dir = root.join(dialect);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|entry| entry.unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display())))
            .filter(|entry| entry.path().is_file())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        writeln!(code, "pub(crate) const {}: &[(&str, &str)] = &[", dialect.to_uppercase()).unwrap();
        for name in files {
            let path = dir.join(&name);
            writeln!(code, "    ({name:?}, include_str!({:?})),", path.display().to_string()).unwrap();
        }
        writeln!(code, "];").unwrap();
    }
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("migrations.rs");
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
}
