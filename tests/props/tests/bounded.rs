//! The bounded run of every target (see `dagr_props::bounded`):
//! `DAGR_PROPS_CASES` mutants each (default 2000), from `DAGR_PROPS_SEED`.

use dagr_props::{TARGETS, bounded, target};

fn run(name: &str) {
    let target = target(name).unwrap_or_else(|| panic!("no target {name}"));
    bounded::run(target, bounded::cases(), bounded::seed());
}

#[test]
fn definition() {
    run("definition");
}

#[test]
fn template() {
    run("template");
}

#[test]
fn schedule() {
    run("schedule");
}

#[test]
fn output() {
    run("output");
}

#[test]
fn fields() {
    run("fields");
}

#[test]
fn every_target_has_a_test_and_a_fuzz_target() {
    let root = dagr_props::seeds::workspace_root();
    for t in TARGETS {
        let fuzz = root.join("fuzz/fuzz_targets").join(format!("{}.rs", t.name));
        assert!(fuzz.exists(), "{} has no libFuzzer target {}", t.name, fuzz.display());
    }
}
