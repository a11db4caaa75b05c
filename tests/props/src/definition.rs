//! Workflow definitions, YAML and JSON, as the API takes them: checked
//! against its limits, parsed, validated.
//!
//! Input: a selector byte (`% 3`: 0 guess the format as the API does, 1
//! YAML, 2 JSON), then the document.
//!
//! Properties: parsing never panics and is deterministic; an error has at
//! least one issue; an accepted spec's canonical JSON parses back to the
//! same spec, is its own canonical form, and passes the limits it came in
//! under; validation never panics, is deterministic, and says the same of
//! a spec and of its canonical form (what is stored is what was checked).

use std::collections::BTreeMap;

use dagr_core::definition::{DefinitionError, Format, PluginCatalog, ResolvedPlugin, Workflow, WorkflowSpec};
use dagr_core::document::DocumentLimits;
use serde_json::json;

pub const DICTIONARY: &[&str] = &[
    "name: ",
    "tasks:",
    "\n- ",
    "- {name: t, plugin: echo}",
    "depends_on: [",
    "plugin: ",
    "params: ",
    "schedule: ",
    "cron: ",
    "timezone: ",
    "upstream:",
    "workflow: ",
    "switch: ",
    "when: ",
    "sensor: ",
    "offset: -1d",
    "cycles: day",
    "retries: ",
    "timeout: ",
    "memory: ",
    "grade: ",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!binary ",
    "? ",
    "---\n",
    "...\n",
    "{{ params.p }}",
    "{{ inputs.t.x }}",
    "\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    ": ",
    ", ",
    "\n  ",
    "null",
    "~",
    "1e400",
    "-0",
    "0x1F",
    ".inf",
    "\\u0000",
    "\\ud800",
    "\t",
    "#",
    "|\n  ",
    ">-\n  ",
    "\"name\":",
    "\"tasks\":",
    "\"plugin\":\"echo\"",
    "\"depends_on\":[",
    "allow_hosts: [",
    "worker_group: ",
    "max_active_runs: ",
];

/// Plugins as the validator sees them: the built-ins, one with a params
/// schema.
struct Catalog;

impl PluginCatalog for Catalog {
    fn resolve(&self, name: &str, version: Option<&str>) -> Result<ResolvedPlugin, String> {
        let schema = match name {
            "fib" => Some(json!({"type": "object", "properties": {"n": {"type": "integer", "maximum": 90}}})),
            "echo" | "fail" | "sleep" | "http" | "transform" | "script" => None,
            other => return Err(format!("unknown plugin `{other}`")),
        };
        match version {
            None | Some("1.0.0") => {
                Ok(ResolvedPlugin { name: name.into(), version: "1.0.0".into(), params_schema: schema })
            }
            Some(v) => Err(format!("plugin `{name}` has no version {v}")),
        }
    }
}

/// The API's limits, smaller so that the fuzzer reaches them.
pub fn limits() -> DocumentLimits {
    DocumentLimits { max_depth: 32, max_bytes: 256 << 10, ..Default::default() }
}

pub fn check(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let format = match selector % 3 {
        0 => None,
        1 => Some(Format::Yaml),
        _ => Some(Format::Json),
    };
    let limits = limits();
    let parsed = WorkflowSpec::parse_limited(text, format, &limits);
    assert_eq!(parsed, WorkflowSpec::parse_limited(text, format, &limits), "parsing is deterministic");
    let spec = match parsed {
        Ok(spec) => spec,
        Err(DefinitionError::Invalid(invalid)) => {
            assert!(!invalid.issues.is_empty(), "an invalid definition names at least one issue");
            return;
        }
        Err(DefinitionError::Limit(_)) => return,
    };

    let canonical = spec.canonical_json();
    let back = WorkflowSpec::parse(&canonical, Format::Json)
        .unwrap_or_else(|e| panic!("the canonical JSON does not parse: {e}\n{canonical}"));
    assert_eq!(back, spec, "the canonical JSON parses back to the same spec:\n{canonical}");
    assert_eq!(back.canonical_json(), canonical, "the canonical JSON is its own canonical form");
    assert_eq!(back.content_hash(), spec.content_hash());
    if let Err(e) = WorkflowSpec::parse_limited(&canonical, None, &limits) {
        panic!("the canonical JSON of an accepted definition is refused: {e}\n{canonical}");
    }

    let first = validate(&spec);
    assert_eq!(first, validate(&spec), "validation is deterministic");
    assert_eq!(first, validate(&back), "a spec and its canonical form validate alike");
}

/// What validation says, in a form that compares: the issues, or the
/// shape of the workflow.
#[derive(Debug, PartialEq)]
enum Verdict {
    Valid {
        edges: Vec<(usize, usize)>,
        roots: Vec<usize>,
        scheduled: bool,
        params: BTreeMap<String, serde_json::Value>,
    },
    Invalid(Vec<String>),
}

fn validate(spec: &WorkflowSpec) -> Verdict {
    match Workflow::validate(spec.clone(), &Catalog) {
        Ok(workflow) => {
            let edges = workflow.tasks.iter().enumerate().flat_map(|(i, t)| t.deps.iter().map(move |&d| (d, i)));
            let params = workflow.resolve_params(&Default::default()).expect("no overrides resolve");
            Verdict::Valid {
                edges: edges.collect(),
                roots: workflow.roots().collect(),
                scheduled: workflow.schedule.is_some(),
                params,
            }
        }
        Err(invalid) => {
            assert!(!invalid.issues.is_empty(), "an invalid workflow names at least one issue");
            for issue in &invalid.issues {
                assert!(!issue.message.is_empty(), "an issue says what is wrong: {issue:?}");
            }
            Verdict::Invalid(invalid.issues.iter().map(|i| i.to_string()).collect())
        }
    }
}
