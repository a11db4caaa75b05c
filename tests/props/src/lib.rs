//! Properties of everything dagr parses from a user or a plugin, checked
//! on any input.
//!
//! # Brief overview
//!
//! Each target is a function from bytes to nothing that panics when a
//! property does not hold:
//!
//! - [`definition`]: workflow definitions (YAML and JSON) under the API's
//!   limits, and their validation: parsing never panics and is
//!   deterministic, the canonical form round-trips, validation is
//!   deterministic and the same for a definition and its canonical form.
//! - [`template`]: `{{ … }}` templates and date arithmetic: they parse and
//!   render or say why, never panic, and render within their size limit.
//! - [`schedule`]: cron expressions and time zones: fire times strictly
//!   increase, match the expression in the zone's wall-clock time (or are
//!   the first instant after a DST gap), and the forward and backward
//!   searches agree; catch-up and backfill stay in their windows.
//! - [`output`]: the JSON crossing the WIT boundary: a plugin's output is
//!   refused or accepted within its limits, parseable by its dependents,
//!   with no secret left in it; the depth pre-check agrees with the parser.
//! - [`fields`]: the small parsers inside definitions (durations, sizes,
//!   cycle offsets, plugin references, allowed hosts).
//!
//! The same functions run twice over: `cargo test -p dagr-props` ([`bounded`]:
//! every seed, every regression case, then a bounded number of mutations
//! from a fixed seed), and libFuzzer (`fuzz/`, coverage-guided, for long
//! runs: `scripts/fuzz.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bounded;
pub mod definition;
pub mod fields;
pub mod output;
pub mod schedule;
pub mod seeds;
pub mod template;

/// A fuzz target: its name (as in `fuzz/fuzz_targets/<name>.rs`), its
/// property check, and where its seeds come from.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub check: fn(&[u8]),
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Byte strings the mutator splices in (the target's grammar).
    pub dictionary: &'static [&'static str],
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "definition",
        check: definition::check,
        seeds: seeds::definitions,
        dictionary: definition::DICTIONARY,
    },
    Target { name: "template", check: template::check, seeds: seeds::templates, dictionary: template::DICTIONARY },
    Target { name: "schedule", check: schedule::check, seeds: seeds::schedules, dictionary: schedule::DICTIONARY },
    Target { name: "output", check: output::check, seeds: seeds::outputs, dictionary: output::DICTIONARY },
    Target { name: "fields", check: fields::check, seeds: seeds::fields, dictionary: fields::DICTIONARY },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
