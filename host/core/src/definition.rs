//! Workflow definitions: the YAML/JSON schema people write, and its
//! validation into the [`Workflow`] model the engine runs.
//!
//! Parsing is strict (`deny_unknown_fields`) and every problem is reported
//! with the location it was found at, e.g.
//! `tasks[3].depends_on[0]: unknown task "lod"`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::control::{
    FailureStrategy, Sensor, SensorSpec, Switch, SwitchSpec, TaskKind, UpstreamFailure, validate_switch,
};
use crate::document::{self, DocumentError, DocumentLimits};
use crate::outer::{Edge, Upstream, UpstreamSpec};
use crate::schedule::Schedule;
use crate::template::{Template, TemplateScope};
use crate::units;

mod spec;
mod validate;

pub use spec::*;
pub(crate) use validate::pointer_to_location;
pub use validate::{check_host_pattern, host_covered};

/// One problem in a definition: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// A path into the document, e.g. `tasks[3].depends_on[0]`; empty for
    /// the document as a whole.
    pub location: String,
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.location, self.message)
        }
    }
}

/// Every problem found in a definition; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    pub issues: Vec<Issue>,
}

impl Invalid {
    fn one(location: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid { issues: vec![Issue { location: location.into(), message: message.into() }] }
    }

    /// The first problem (the one to show when there is room for only one).
    pub fn first(&self) -> &Issue {
        &self.issues[0]
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

/// The format of a definition document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// JSON if the text starts like a JSON object, else YAML.
    pub fn guess(text: &str) -> Format {
        if text.trim_start().starts_with('{') { Format::Json } else { Format::Yaml }
    }
}

/// Why a tenant's definition was refused: over a limit, or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    #[error(transparent)]
    Limit(#[from] DocumentError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl WorkflowSpec {
    /// Parses a YAML or JSON document. Unknown fields and wrong types are
    /// reported with their path (and, for YAML, line and column).
    pub fn parse(text: &str, format: Format) -> Result<WorkflowSpec, Invalid> {
        match format {
            Format::Json => {
                let mut de = serde_json::Deserializer::from_str(text);
                serde_path_to_error::deserialize(&mut de).map_err(|e| path_error(e.path().to_string(), e.inner()))
            }
            Format::Yaml => {
                let de = serde_yaml::Deserializer::from_str(text);
                serde_path_to_error::deserialize(de).map_err(|e| path_error(e.path().to_string(), e.inner()))
            }
        }
    }

    /// Parses YAML (a superset of JSON, so JSON documents parse too).
    pub fn parse_any(text: &str) -> Result<WorkflowSpec, Invalid> {
        Self::parse(text, Format::guess(text))
    }

    /// Parses a tenant's document (`format: None`: JSON if it looks like
    /// it, else YAML), checking it against `limits` first: a document that
    /// nests too deeply, or whose aliases expand past the size limit, is
    /// refused before a parser recurses into it or expands it.
    pub fn parse_limited(
        text: &str,
        format: Option<Format>,
        limits: &DocumentLimits,
    ) -> Result<WorkflowSpec, DefinitionError> {
        let format = format.unwrap_or_else(|| Format::guess(text));
        match format {
            Format::Json => document::check_json(text.as_bytes(), limits)?,
            Format::Yaml => document::check_yaml(text, limits)?,
        }
        Ok(Self::parse(text, format)?)
    }

    /// The canonical JSON of this spec (sorted keys, defaults omitted):
    /// what is stored, and what identifies a version.
    pub fn canonical_json(&self) -> String {
        // `Value`'s map is ordered, so going through it sorts the keys.
        match serde_json::to_value(self) {
            Ok(value) => value.to_string(),
            Err(_) => unreachable!("a WorkflowSpec always serializes"),
        }
    }

    /// sha256 of the canonical JSON: equal for definitions that mean the same.
    pub fn content_hash(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
    }
}

fn path_error(path: String, error: &dyn fmt::Display) -> Invalid {
    // serde_path_to_error writes `?` for a segment it could not name (a
    // syntax error inside a mapping): the location stops where it is known.
    let mut location = path.as_str();
    while let Some(known) = location.strip_suffix(".?") {
        location = known;
    }
    let location = if matches!(location, "." | "?") { String::new() } else { location.to_owned() };
    // serde_yaml starts its messages with its own idea of the path; the
    // location already says where, so say it once.
    let mut message = error.to_string();
    if let Some((prefix, rest)) = message.split_once(": ")
        && !prefix.is_empty()
        && (location == prefix
            || location.starts_with(&format!("{prefix}."))
            || location.starts_with(&format!("{prefix}[")))
    {
        message = rest.to_owned();
    }
    Invalid::one(location, message)
}

/// A plugin as the validator needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPlugin {
    pub name: String,
    pub version: String,
    pub params_schema: Option<Value>,
}

/// Looks plugins up while validating. Implemented by the registry.
pub trait PluginCatalog {
    /// `version: None` means the latest. The error says what is missing.
    fn resolve(&self, name: &str, version: Option<&str>) -> Result<ResolvedPlugin, String>;
}

/// What a task refers to: a plugin name, and a version or "the latest".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PluginRef {
    pub name: String,
    pub version: Option<String>,
}

impl PluginRef {
    pub fn parse(text: &str) -> Result<PluginRef, String> {
        let (name, version) = match text.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        if !valid_plugin_name(name) {
            return Err(format!(
                "`{text}` is not a plugin reference: expected `name` or `name@version` with a lowercase name"
            ));
        }
        if let Some(v) = version
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
        {
            return Err(format!("`{text}`: bad version `{v}`"));
        }
        Ok(PluginRef { name: name.to_owned(), version: version.map(str::to_owned) })
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}@{v}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// What [`valid_name`] allows, as its errors say it.
pub const NAME_RULE: &str = "use 1 to 128 letters, digits, `-`, `_` or `.` (not only dots)";

/// A valid name for workflows, tasks, params and worker groups (the rule
/// the schema's `pattern` and [`NAME_RULE`] state).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        // `.` and `..` would vanish from URL paths.
        && name.chars().any(|c| c != '.')
}

/// How long to wait before retry number `failures` (1 = first retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub kind: BackoffKind,
    pub delay: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { kind: BackoffKind::Exponential, delay: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

impl Backoff {
    pub fn delay_for(&self, failures: u32) -> Duration {
        match self.kind {
            BackoffKind::Fixed => self.delay,
            BackoffKind::Exponential => {
                let exp = failures.saturating_sub(1).min(32);
                self.delay.saturating_mul(1u32 << exp.min(31)).min(self.max)
            }
        }
    }
}

/// A validated task, with its dependencies as indices.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub plugin: PluginRef,
    pub params: Template,
    pub deps: Vec<usize>,
    pub dependents: Vec<usize>,
    pub retries: u32,
    pub backoff: Backoff,
    pub timeout: Option<Duration>,
    pub timeout_warn: Option<Duration>,
    pub priority: i32,
    pub trigger_rule: TriggerRule,
    pub allow_hosts: Vec<String>,
    pub memory: Option<u64>,
    pub worker_group: Option<String>,
    /// A plugin task, a child workflow or a switch. For the latter two
    /// `plugin` is empty.
    pub kind: TaskKind,
    /// The condition that must hold for the task to run (boxed, like the
    /// sensor: few tasks have one, and every task would pay for it).
    pub when: Option<Box<Template>>,
    pub enabled: bool,
    /// Instances of other workflows the task waits for.
    pub upstream: Vec<Upstream>,
    pub sensor: Option<Box<Sensor>>,
}

/// A validated workflow, ready to run. Built only by [`Workflow::validate`].
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The definition's settings. Its `tasks` are empty: the validated
    /// tasks are [`Workflow::tasks`] (and what is stored is the
    /// definition's canonical JSON, taken before validation).
    pub spec: WorkflowSpec,
    pub tasks: Vec<Task>,
    pub schedule: Option<Schedule>,
    /// Instances of other workflows each run waits for.
    pub upstream: Vec<Upstream>,
    /// A run still unfinished this long after it started fails.
    pub timeout: Option<Duration>,
    /// Each run's deadline.
    pub sla: Option<crate::sla::Sla>,
    index: HashMap<String, usize>,
}

impl Workflow {
    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The workflows this one needs, as edges of the workflow graph (its
    /// upstream dependencies, its tasks' and its child workflows), for the
    /// loop check at apply time and for lineage.
    pub fn edges(&self) -> Vec<Edge> {
        let from = self.name().to_owned();
        let mut edges: Vec<Edge> = self
            .upstream
            .iter()
            .chain(self.tasks.iter().flat_map(|t| &t.upstream))
            .map(|u| Edge { from: from.clone(), to: u.workflow.clone(), past: u.strictly_past() })
            .collect();
        for task in &self.tasks {
            if let TaskKind::Workflow { name } = &task.kind {
                edges.push(Edge { from: from.clone(), to: name.clone(), past: false });
            }
        }
        edges.sort();
        edges.dedup();
        edges
    }

    /// Whether a run of this workflow starts by waiting on upstream instances.
    pub fn waits_upstream(&self) -> bool {
        !self.upstream.is_empty()
    }

    /// Tasks with no dependencies.
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        self.tasks.iter().enumerate().filter(|(_, t)| t.deps.is_empty()).map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) struct Catalog;

    impl PluginCatalog for Catalog {
        fn resolve(&self, name: &str, version: Option<&str>) -> Result<ResolvedPlugin, String> {
            match (name, version) {
                ("echo", None | Some("0.1.0")) => {
                    Ok(ResolvedPlugin { name: "echo".into(), version: "0.1.0".into(), params_schema: None })
                }
                ("sleep", _) => Ok(ResolvedPlugin {
                    name: "sleep".into(),
                    version: "0.1.0".into(),
                    params_schema: Some(serde_json::json!({
                        "type": "object", "required": ["ms"], "additionalProperties": false,
                        "properties": {"ms": {"type": "integer"}}
                    })),
                }),
                (n, Some(v)) => Err(format!("plugin `{n}` has no version {v}")),
                (n, None) => Err(format!("unknown plugin `{n}`")),
            }
        }
    }

    fn validate(yaml: &str) -> Result<Workflow, Invalid> {
        Workflow::validate(WorkflowSpec::parse(yaml, Format::Yaml)?, &Catalog)
    }

    fn first(yaml: &str) -> String {
        validate(yaml).err().map(|e| e.first().to_string()).unwrap_or_default()
    }

    #[test]
    fn a_diamond_validates() {
        let wf = validate(
            "name: d\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n\
             - {name: c, plugin: echo, depends_on: [a]}\n- {name: d, plugin: echo, depends_on: [b, c]}\n",
        )
        .unwrap();
        assert_eq!(wf.tasks[3].deps, vec![1, 2]);
        assert_eq!(wf.tasks[0].dependents, vec![1, 2]);
        assert_eq!(wf.roots().collect::<Vec<_>>(), vec![0]);
        // The tasks are kept once, validated; the spec keeps the rest.
        assert!(wf.spec.tasks.is_empty());
        assert_eq!(wf.spec.name, "d");
    }

    #[test]
    fn errors_name_their_location() {
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n").contains("unknown field `dependz`"));
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n").starts_with("tasks[0]"));
        assert_eq!(
            first("name: x\ntasks:\n- {name: a, plugin: echo}\n- {name: a, plugin: echo}\n"),
            "tasks[1].name: duplicate task name `a` (first used by tasks[0])"
        );
        assert_eq!(
            first("name: x\ntasks:\n- {name: a, plugin: echo, depends_on: [lod]}\n"),
            "tasks[0].depends_on[0]: unknown task `lod`"
        );
        assert_eq!(first("name: x\ntasks:\n- {name: a, plugin: nope}\n"), "tasks[0].plugin: unknown plugin `nope`");
        assert!(
            first("name: x\ntasks:\n- {name: a, plugin: sleep, params: {ms: soon}}\n")
                .starts_with("tasks[0].params.ms:")
        );
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, timeout: 5 parsecs}\n").contains("tasks[0].timeout"));
    }

    #[test]
    fn parse_errors_name_their_location_once() {
        let issue = |yaml: &str| validate(yaml).unwrap_err().first().clone();
        let unknown = issue("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n");
        assert_eq!(unknown.location, "tasks[0].dependz");
        assert!(unknown.message.starts_with("unknown field `dependz`"), "{}", unknown.message);
        let wrong = issue("name: x\ntasks:\n- {name: a, plugin: echo, retries: -1}\n");
        assert_eq!(wrong.location, "tasks[0].retries");
        assert!(wrong.message.starts_with("invalid type: integer `-1`"), "{}", wrong.message);
        let syntax = issue("name: x\ntasks:\n- {name: a, plugin: echo\n");
        assert_eq!(syntax.location, "tasks[0]");
        assert!(syntax.message.contains("line 4 column 1"), "{}", syntax.message);
    }

    #[test]
    fn cycles_print_their_path() {
        let err = first(
            "name: x\ntasks:\n- {name: a, plugin: echo, depends_on: [c]}\n- {name: b, plugin: echo, depends_on: [a]}\n\
             - {name: c, plugin: echo, depends_on: [b]}\n",
        );
        assert!(err.contains("dependency cycle: "), "{err}");
        let path = err.split("cycle: ").nth(1).unwrap();
        let names: Vec<&str> = path.split(" -> ").collect();
        assert_eq!(names.len(), 4);
        assert_eq!(names.first(), names.last());
    }

    #[test]
    fn templated_params_skip_the_schema_check() {
        let wf =
            validate("name: x\nparams: {ms: 5}\ntasks:\n- {name: a, plugin: sleep, params: {ms: '{{ params.ms }}'}}\n");
        assert!(wf.is_ok(), "{wf:?}");
    }

    #[test]
    fn canonical_form_ignores_layout() {
        let a = WorkflowSpec::parse("name: x\ntasks:\n- {name: a, plugin: echo, retries: 0}\n", Format::Yaml).unwrap();
        let b = WorkflowSpec::parse(r#"{"tasks":[{"plugin":"echo","name":"a"}],"name":"x"}"#, Format::Json).unwrap();
        assert_eq!(a.content_hash(), b.content_hash());
    }

    #[test]
    fn host_coverage() {
        assert!(host_covered("api.example.org", "api.example.org"));
        assert!(host_covered("api.example.org:443", "api.example.org"));
        assert!(!host_covered("api.example.org", "api.example.org:443"));
        assert!(host_covered("a.b.example.org", "*.example.org"));
        assert!(host_covered("*.b.example.org", "*.example.org"));
        assert!(!host_covered("example.org", "*.example.org"));
        assert!(!host_covered("evil.org", "*.example.org"));
        assert!(host_covered("127.0.0.1:8080", "127.0.0.1"));
        assert!(!host_covered("127.0.0.2", "127.0.0.1"));
    }

    #[test]
    fn backoff() {
        let b = Backoff { kind: BackoffKind::Exponential, delay: Duration::from_secs(2), max: Duration::from_secs(10) };
        assert_eq!(b.delay_for(1), Duration::from_secs(2));
        assert_eq!(b.delay_for(2), Duration::from_secs(4));
        assert_eq!(b.delay_for(5), Duration::from_secs(10));
    }

    #[test]
    fn the_name_rule_is_the_schema_s_pattern() {
        let schema = json_schema();
        let pattern = schema["properties"]["name"]["pattern"].as_str().unwrap();
        let pattern =
            jsonschema::validator_for(&serde_json::json!({"type": "string", "pattern": pattern, "maxLength": 128}))
                .unwrap();
        let long = "a".repeat(129);
        for name in [
            "daily-sales",
            "Hello",
            "a.b",
            "-x",
            "_",
            "v1.2",
            "..a",
            "ok",
            long.as_str(),
            "",
            ".",
            "..",
            "a b",
            "é",
            "a/b",
        ] {
            let value = serde_json::Value::String(name.into());
            assert_eq!(valid_name(name), pattern.is_valid(&value), "`{name}`");
        }
        assert!(first("name: '..'\ntasks:\n- {name: a, plugin: echo}\n").ends_with(NAME_RULE));
    }

    #[test]
    fn overrides_must_be_declared() {
        let wf = validate("name: x\nparams: {region: eu}\ntasks:\n- {name: a, plugin: echo}\n").unwrap();
        let mut o = serde_json::Map::new();
        o.insert("regoin".into(), "us".into());
        assert!(wf.resolve_params(&o).unwrap_err().first().message.contains("unknown param `regoin`"));
    }
}
