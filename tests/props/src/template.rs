//! Templates in task params (`{{ … }}`), with the date filters.
//!
//! Input: a selector byte (the time zone and logical time to render at),
//! then the template: JSON params if the rest parses as JSON, else one
//! string.
//!
//! Properties: parsing and checking never panic and are deterministic; a
//! template without expressions renders to itself; rendering never
//! panics, is deterministic, and its result is within the size limit, or
//! it fails saying where and naming the limit.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use dagr_core::template::{RenderContext, Template, TemplateScope};
use serde_json::{Map, Value, json};

pub const DICTIONARY: &[&str] = &[
    "{{",
    "}}",
    "{{ ",
    " }}",
    "params.",
    "inputs.",
    "inputs[\"",
    "\"]",
    "[0]",
    "[18446744073709551616]",
    ".rows",
    " | ",
    "date(\"",
    "%Y-%m-%d",
    "%s",
    "%+",
    "%Z",
    "%.3f",
    "\")",
    "json",
    "upper",
    "lower",
    "default(",
    "default(null)",
    "add_days(",
    "add_hours(",
    "add_weeks(",
    "add_months(",
    "-9223372036854775808",
    "9223372036854775807",
    ")",
    "start_of_week",
    "end_of_week",
    "start_of_month",
    "end_of_month",
    "logical_time",
    "ds",
    "ds_nodash",
    "ts",
    "ts_nodash",
    "run_id",
    "workflow",
    "task",
    "tenant",
    "\"2026-01-31\"",
    "\"+262142-12-31\"",
    "\"-262143-01-01\"",
    "\"9999-12-31T23:59:59Z\"",
    "\"0000-01-01T00:00:00+14:00\"",
    "\"20260131\"",
    "\"2026-03-29T02:30:00\"",
    "big",
];

/// What rendering may produce at most, here (the engine's is `[limits]
/// max_params`).
pub const LIMIT: usize = 64 << 10;

const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Asia/Kolkata",
    "America/Havana",
    "Pacific/Kiritimati",
];

const TIMES: &[&str] = &[
    "2026-03-01T23:30:00Z",
    "2026-03-29T01:30:00Z",
    "2026-10-25T00:30:00Z",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "2024-02-29T12:00:00Z",
    "2011-12-30T10:00:00Z",
];

pub fn check(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let value = match serde_json::from_str::<Value>(&text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
        _ => json!({ "p": text }),
    };
    let parsed = Template::parse(&value);
    assert_eq!(parsed, Template::parse(&value), "parsing is deterministic");
    let template = match parsed {
        Ok(template) => template,
        Err(problem) => {
            assert!(!problem.message.is_empty(), "a parse error says what is wrong");
            return;
        }
    };

    let params: BTreeMap<String, Value> = [
        ("region".to_owned(), json!("eu")),
        ("n".to_owned(), json!(3)),
        ("day".to_owned(), json!("2026-01-31")),
        ("nothing".to_owned(), Value::Null),
    ]
    .into();
    let upstream: HashSet<&str> = ["a", "big"].into();
    let problems = template.check(&TemplateScope { params: &params, upstream: &upstream });
    assert_eq!(problems, template.check(&TemplateScope { params: &params, upstream: &upstream }));

    let big = "x".repeat(4096);
    let inputs: Map<String, Value> = json!({
        "a": {"x": 1, "rows": [{"id": "r1"}, {"id": 2}], "when": "2026-03-29T02:30:00+01:00", "s": "MiXeD"},
        "big": big,
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    let zone: Tz = ZONES[selector as usize % ZONES.len()].parse().unwrap();
    let logical_time: DateTime<Utc> = TIMES[(selector as usize / ZONES.len()) % TIMES.len()].parse().unwrap();
    let ctx = RenderContext {
        params: &params,
        inputs: &inputs,
        logical_time,
        timezone: zone,
        run_id: "r-1",
        workflow: "wf",
        task: "t",
        tenant: "acme",
        max_bytes: LIMIT,
    };
    let rendered = template.render(&ctx);
    assert_eq!(rendered, template.render(&ctx), "rendering is deterministic");
    match rendered {
        Ok(out) => {
            if template.is_literal() {
                assert_eq!(out, value, "a template without expressions renders to itself");
            }
            let size = out.to_string().len();
            assert!(size <= LIMIT, "rendered {size} bytes, above the limit of {LIMIT}");
        }
        Err(problem) => {
            assert!(!problem.message.is_empty(), "a render error says what is wrong");
            if problem.message.contains("max_params") {
                // Only a value that would have been too large is refused.
                let unlimited = RenderContext { max_bytes: usize::MAX, ..ctx };
                if let Ok(out) = template.render(&unlimited) {
                    assert!(out.to_string().len() > LIMIT, "refused a value of {} bytes", out.to_string().len());
                }
            }
        }
    }
}
