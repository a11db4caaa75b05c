//! The JSON that crosses the WIT boundary: a plugin's output, checked and
//! redacted before its dependents, templates and the API parse it.
//!
//! Input: UTF-8 lines `max depth`, `secrets` (tab-separated), then the
//! output (the rest).
//!
//! Properties: accepting never panics and is deterministic; an accepted
//! output is within the size limit, nests within the depth limit, parses
//! as JSON into a value, and shows no secret in any string, key or scalar;
//! an output that is JSON within the limits is accepted (redaction never
//! turns it into something else), unless redacting grew it past the size
//! limit; the depth pre-check agrees with the parser: it accepts every
//! valid JSON text within the depth limit, and whatever it accepts that
//! parses is within the limit.

use dagr_core::document::{DocumentLimits, check_json};
use dagr_core::output::{OutputError, OutputLimits, REDACTED, accept};
use serde_json::Value;

pub const DICTIONARY: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    "\"",
    "\\\"",
    "\\\\",
    "\\u0000",
    "\\ud800",
    ":",
    ",",
    "true",
    "null",
    "1234",
    "1e999",
    "-0",
    "\t",
    "\n",
    "[REDACTED]",
    "hunter2",
    "\"a\":",
];

/// The most an output may be, here (the worker's is `[limits] max_output`).
pub const MAX_BYTES: usize = 16 << 10;

pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.splitn(3, '\n');
    let depth: usize = parts.next().and_then(|d| d.trim().parse().ok()).unwrap_or(64).clamp(1, 120);
    let secrets: Vec<String> =
        parts.next().unwrap_or_default().split('\t').filter(|s| s.len() >= 4).map(str::to_owned).collect();
    let output = parts.next().unwrap_or_default().to_owned();

    // The pre-check against the parser.
    let limits = DocumentLimits { max_depth: depth, ..Default::default() };
    let checked = check_json(output.as_bytes(), &limits);
    let parsed = serde_json::from_str::<Value>(&output).ok();
    if let Some(value) = &parsed {
        let actual = nesting(value);
        assert_eq!(checked.is_ok(), actual <= depth, "the pre-check says {checked:?} of JSON nesting {actual} deep");
    }

    let limits = OutputLimits { max_bytes: MAX_BYTES, max_depth: depth };
    let accepted = accept(output.clone(), &secrets, &limits);
    assert_eq!(accepted, accept(output.clone(), &secrets, &limits), "accepting is deterministic");
    if parsed.is_some() && checked.is_ok() && output.len() <= MAX_BYTES {
        assert!(
            matches!(accepted, Ok(_) | Err(OutputError::TooLargeRedacted { .. })),
            "a JSON output within the limits is refused: {accepted:?}"
        );
    }
    let Ok(accepted) = accepted else { return };
    assert!(accepted.len() <= MAX_BYTES, "accepted {} bytes, above the limit of {MAX_BYTES}", accepted.len());
    let value: Value = serde_json::from_str(&accepted)
        .unwrap_or_else(|e| panic!("an accepted output does not parse into a value: {e}: {accepted:?}"));
    assert!(nesting(&value) <= depth, "an accepted output nests {} deep, above {depth}", nesting(&value));
    // The mark becomes a character no secret here holds, so that what is
    // left around two marks does not spell a secret by accident.
    let decoded = strings(&value).replace(REDACTED, "\u{1}");
    for secret in secrets.iter().filter(|s| !s.contains('\u{1}') && !REDACTED.contains(s.as_str())) {
        assert!(
            !decoded.contains(secret.as_str()),
            "the secret {secret:?} is left in the accepted output {accepted:?}"
        );
    }
}

/// Levels of nested arrays and objects (a scalar is 0).
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => deepest = deepest.max(d),
        }
        if matches!(v, Value::Array(_) | Value::Object(_)) {
            deepest = deepest.max(d + 1);
        }
    }
    deepest
}

/// Every string, key, number and boolean of a value, decoded, one per line.
fn strings(value: &Value) -> String {
    let mut out = String::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (k, v) in map {
                    out.push_str(k);
                    out.push('\n');
                    stack.push(v);
                }
            }
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            // `null` holds nothing (a secret spelled `null` is not redacted there).
            Value::Null => {}
            other => {
                out.push_str(&other.to_string());
                out.push('\n');
            }
        }
    }
    out
}
