//! The small parsers inside a definition: durations, sizes, cycle
//! offsets, plugin references, allowed hosts.
//!
//! Input: one string (lossily decoded), given to each.
//!
//! Properties: none panics; a parsed duration formats back to text that
//! parses to the same duration; a parsed plugin reference displays as text
//! that parses to the same reference; an allowed host pattern covers
//! itself.

use dagr_core::definition::{PluginRef, check_host_pattern, host_covered};
use dagr_core::outer::CycleOffset;
use dagr_core::units::{format_duration, parse_bytes, parse_duration};

pub const DICTIONARY: &[&str] = &[
    "ms",
    "s",
    "m",
    "h",
    "d",
    "mo",
    "w",
    "KiB",
    "MiB",
    "GiB",
    "KB",
    "MB",
    "GB",
    "B",
    ".",
    "-",
    "+",
    "@",
    "*.",
    ":",
    "[",
    "]",
    "::",
    "1e308",
    "18446744073709551615",
    "9999999999999",
    " ",
    "0",
];

pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();

    if let Ok(d) = parse_duration(text) {
        let shown = format_duration(d);
        let again =
            parse_duration(&shown).unwrap_or_else(|e| panic!("{text:?} → {d:?} → {shown:?} does not parse: {e}"));
        // Formatting keeps milliseconds.
        assert_eq!(again.as_millis(), d.as_millis(), "{text:?} → {shown:?}");
    }
    let _ = parse_bytes(text);
    if let Ok(offset) = CycleOffset::parse(text) {
        assert!(offset.amount <= 0, "an offset is zero or negative: {text:?} → {offset:?}");
    }
    if let Ok(reference) = PluginRef::parse(text) {
        assert_eq!(PluginRef::parse(&reference.to_string()), Ok(reference.clone()), "{text:?}");
    }
    if check_host_pattern(text).is_none() {
        assert!(host_covered(text, text), "an allowed host {text:?} covers itself");
        assert!(host_covered(text, "*"));
    }
}
