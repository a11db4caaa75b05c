//! Templates in task params: `{{ … }}` expressions rendered when a task is
//! dispatched.
//!
//! ```text
//! {{ params.region }}                 a workflow param (after overrides)
//! {{ inputs.extract.rows[0].id }}     an upstream task's output (direct deps only)
//! {{ inputs["my.task"].count }}       bracket form for unusual names
//! {{ logical_time }}                  RFC 3339, UTC
//! {{ ds }} {{ ds_nodash }}            the logical date in the schedule's time zone
//! {{ ts }} {{ ts_nodash }}            the logical timestamp in the schedule's time zone
//! {{ run_id }} {{ workflow }} {{ task }} {{ tenant }}
//! {{ logical_time | date("%Y/%m") }}  filters: date(fmt), json, upper, lower, default(value)
//! {{ ds | add_days(-1) }}             date arithmetic: add_hours/days/weeks/months(n),
//!                                     start_of_week, end_of_week, start_of_month, end_of_month
//! ```
//!
//! A string that is exactly one expression renders to the expression's JSON
//! value (so `"{{ inputs.count.n }}"` stays a number); expressions inside
//! longer strings are spliced in as text.
//!
//! What a template renders to is at most [`RenderContext::max_bytes`] of
//! JSON (`[limits] max_params`): a definition of a few kilobytes that
//! splices a large input many times must fail its task, not fill the
//! master's memory. The limit is checked as the value is built.

use std::collections::{BTreeMap, HashSet};

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use crate::definition::{Issue, pointer_to_location};

/// Parsed params: JSON with templates in some strings.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    root: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Literal(Value),
    /// A template without expressions, as its compact JSON text: kept
    /// like this, the params of a large workflow's tasks (a `Value` object
    /// of one key takes ~650 bytes) cost what their text does, and a
    /// dispatch copies the text instead of serializing a value. Only ever
    /// the root.
    Json(Box<str>),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
    Text(Vec<Segment>),
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Text(String),
    Expr(Expr),
}

#[derive(Debug, Clone, PartialEq)]
struct Expr {
    source: String,
    root: Root,
    path: Vec<Step>,
    filters: Vec<Filter>,
}

#[derive(Debug, Clone, PartialEq)]
enum Root {
    Params,
    Inputs,
    Var(Var),
    Literal(Value),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Var {
    LogicalTime,
    Ds,
    DsNodash,
    Ts,
    TsNodash,
    RunId,
    Workflow,
    Task,
    Tenant,
}

const VARS: &[(&str, Var)] = &[
    ("logical_time", Var::LogicalTime),
    ("ds", Var::Ds),
    ("ds_nodash", Var::DsNodash),
    ("ts", Var::Ts),
    ("ts_nodash", Var::TsNodash),
    ("run_id", Var::RunId),
    ("workflow", Var::Workflow),
    ("task", Var::Task),
    ("tenant", Var::Tenant),
];

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Date(String),
    Json,
    Upper,
    Lower,
    Default(Value),
    Shift(crate::dates::DateOp),
}

/// What a template may refer to, for checking at apply time.
pub struct TemplateScope<'a> {
    pub params: &'a BTreeMap<String, Value>,
    /// Names of the task's direct upstream tasks.
    pub upstream: &'a HashSet<&'a str>,
}

/// Everything a template may read when it is rendered.
pub struct RenderContext<'a> {
    pub params: &'a BTreeMap<String, Value>,
    pub inputs: &'a Map<String, Value>,
    pub logical_time: DateTime<Utc>,
    pub timezone: Tz,
    pub run_id: &'a str,
    pub workflow: &'a str,
    pub task: &'a str,
    pub tenant: &'a str,
    /// The most bytes the rendered value may take as (compact) JSON.
    pub max_bytes: usize,
}

/// The configuration key of [`RenderContext::max_bytes`], named in errors.
pub const MAX_BYTES_KEY: &str = "[limits] max_params";

/// A template problem; `location` is relative to the params (`.url`).
pub type Problem = Issue;

impl Template {
    /// A template without expressions.
    pub fn literal(value: Value) -> Self {
        Template { root: Node::Json(value.to_string().into_boxed_str()) }
    }

    pub fn parse(value: &Value) -> Result<Template, Problem> {
        Ok(match parse_node(value, "")? {
            Node::Literal(value) => Template::literal(value),
            root => Template { root },
        })
    }

    /// Whether any string contains an expression.
    pub fn is_literal(&self) -> bool {
        matches!(self.root, Node::Literal(_) | Node::Json(_))
    }

    /// Checks references against what will exist at run time.
    pub fn check(&self, scope: &TemplateScope<'_>) -> Vec<Problem> {
        let mut problems = Vec::new();
        walk_exprs(&self.root, &mut String::new(), &mut |location, expr| {
            let problem = match &expr.root {
                Root::Params => match expr.path.first() {
                    Some(Step::Key(name)) if scope.params.contains_key(name) => None,
                    Some(Step::Key(name)) => Some(format!(
                        "`{{{{ {} }}}}`: the workflow has no param `{name}`{}",
                        expr.source,
                        declared(scope.params.keys())
                    )),
                    _ => Some(format!("`{{{{ {} }}}}`: name a param, e.g. params.region", expr.source)),
                },
                Root::Inputs => match expr.path.first() {
                    Some(Step::Key(task)) if scope.upstream.contains(task.as_str()) => None,
                    Some(Step::Key(task)) => Some(format!(
                        "`{{{{ {} }}}}`: `{task}` is not an upstream task of this task (add it to depends_on)",
                        expr.source
                    )),
                    _ => Some(format!("`{{{{ {} }}}}`: name an upstream task, e.g. inputs.extract", expr.source)),
                },
                Root::Var(_) | Root::Literal(_) => None,
            };
            if let Some(message) = problem {
                problems.push(Issue { location: location.to_owned(), message });
            }
        });
        problems
    }

    /// JSON pointers (`/a/0`) of every value that holds an expression.
    pub fn templated_pointers(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_templated(&self.root, &mut String::new(), &mut out);
        out
    }

    /// Renders to plain JSON, at most `ctx.max_bytes` of it.
    pub fn render(&self, ctx: &RenderContext<'_>) -> Result<Value, Problem> {
        let mut budget = Budget { left: ctx.max_bytes };
        render_node(&self.root, ctx, &mut String::new(), &mut budget)
    }

    /// Renders to compact JSON text, at most `ctx.max_bytes` of it: what
    /// [`Template::render`] gives, serialized (a template without
    /// expressions is its text already).
    pub fn render_json(&self, ctx: &RenderContext<'_>) -> Result<String, Problem> {
        match &self.root {
            Node::Json(text) if text.len() <= ctx.max_bytes => Ok(text.to_string()),
            // Too large (the render says so), or with expressions.
            _ => self.render(ctx).map(|value| value.to_string()),
        }
    }
}

fn declared<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() { " (it declares none)".into() } else { format!(" (it declares: {})", names.join(", ")) }
}

fn parse_node(value: &Value, pointer: &str) -> Result<Node, Problem> {
    Ok(match value {
        Value::String(s) if s.contains("{{") => {
            Node::Text(parse_text(s).map_err(|message| Issue { location: pointer_to_location(pointer), message })?)
        }
        Value::Array(items) => {
            let nodes: Vec<Node> = items
                .iter()
                .enumerate()
                .map(|(i, v)| parse_node(v, &format!("{pointer}/{i}")))
                .collect::<Result<_, _>>()?;
            if nodes.iter().all(|n| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Array(nodes)
            }
        }
        Value::Object(map) => {
            let nodes: Vec<(String, Node)> = map
                .iter()
                .map(|(k, v)| Ok((k.clone(), parse_node(v, &format!("{pointer}/{}", escape_pointer(k)))?)))
                .collect::<Result<_, Problem>>()?;
            if nodes.iter().all(|(_, n)| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Object(nodes)
            }
        }
        other => Node::Literal(other.clone()),
    })
}

fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn parse_text(text: &str) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            segments.push(Segment::Text(rest[..start].to_owned()));
        }
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| format!("unclosed `{{{{` in `{text}`"))?;
        segments.push(Segment::Expr(parse_expr(after[..end].trim())?));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Text(rest.to_owned()));
    }
    Ok(segments)
}

fn parse_expr(source: &str) -> Result<Expr, String> {
    let bad = |why: String| format!("bad template `{{{{ {source} }}}}`: {why}");
    let mut parts = split_top_level(source, '|').into_iter();
    let head = parts.next().unwrap_or_default();
    let head = head.trim();
    if head.is_empty() {
        return Err(bad("empty expression".into()));
    }
    let (root, path) = if head.starts_with('"') || head.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        let literal: Value = serde_json::from_str(head).map_err(|e| bad(format!("bad literal: {e}")))?;
        (Root::Literal(literal), Vec::new())
    } else {
        let mut steps = parse_path(head).map_err(bad)?;
        let first = match steps.first() {
            Some(Step::Key(k)) => k.clone(),
            _ => return Err(bad("an expression starts with a name".into())),
        };
        steps.remove(0);
        let root = match first.as_str() {
            "params" => Root::Params,
            "inputs" => Root::Inputs,
            name => match VARS.iter().find(|(n, _)| *n == name) {
                Some((_, var)) if steps.is_empty() => Root::Var(*var),
                Some(_) => return Err(bad(format!("`{name}` has no fields"))),
                None => {
                    let known: Vec<&str> = VARS.iter().map(|(n, _)| *n).collect();
                    return Err(bad(format!(
                        "unknown name `{name}`; use params.…, inputs.…, or one of {}",
                        known.join(", ")
                    )));
                }
            },
        };
        (root, steps)
    };
    let mut filters = Vec::new();
    for part in parts {
        filters.push(parse_filter(part.trim()).map_err(bad)?);
    }
    Ok(Expr { source: source.to_owned(), root, path, filters })
}

/// Splits on `sep` outside of quotes, brackets and parentheses.
fn split_top_level(text: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut depth = 0i32;
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else {
            match c {
                '"' => in_string = true,
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                c if c == sep && depth == 0 => {
                    parts.push(String::new());
                    continue;
                }
                _ => {}
            }
        }
        if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

fn parse_path(text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    while i < chars.len() {
        match chars[i] {
            '.' if !steps.is_empty() => {
                i += 1;
                let start = i;
                while i < chars.len() && ident(chars[i]) {
                    i += 1;
                }
                if start == i {
                    return Err("expected a name after `.`".into());
                }
                steps.push(Step::Key(chars[start..i].iter().collect()));
            }
            '[' => {
                let close = chars[i..].iter().position(|&c| c == ']').ok_or("unclosed `[`")? + i;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else {
                    let key: String = serde_json::from_str(inner)
                        .map_err(|_| format!("`[{inner}]` must be a number or a \"quoted\" key"))?;
                    steps.push(Step::Key(key));
                }
                i = close + 1;
            }
            c if ident(c) && steps.is_empty() => {
                let start = i;
                while i < chars.len() && ident(chars[i]) {
                    i += 1;
                }
                steps.push(Step::Key(chars[start..i].iter().collect()));
            }
            c => return Err(format!("unexpected `{c}`")),
        }
    }
    Ok(steps)
}

fn parse_filter(text: &str) -> Result<Filter, String> {
    let (name, arg) = match text.find('(') {
        Some(open) => {
            let close =
                text.rfind(')').filter(|&c| c > open).ok_or_else(|| format!("unclosed `(` in filter `{text}`"))?;
            (text[..open].trim(), Some(text[open + 1..close].trim()))
        }
        None => (text, None),
    };
    let arg_value = |what: &str| -> Result<Value, String> {
        let raw = arg.filter(|a| !a.is_empty()).ok_or_else(|| format!("filter `{name}` needs {what}"))?;
        serde_json::from_str(raw).map_err(|e| format!("filter `{name}`: bad argument `{raw}`: {e}"))
    };
    match name {
        "date" => {
            let Value::String(format) = arg_value("a format string, e.g. date(\"%Y-%m-%d\")")? else {
                return Err("filter `date` takes a string".into());
            };
            if StrftimeItems::new(&format).any(|item| matches!(item, Item::Error)) {
                return Err(format!("filter `date`: bad format `{format}`"));
            }
            Ok(Filter::Date(format))
        }
        "json" => Ok(Filter::Json),
        "upper" => Ok(Filter::Upper),
        "lower" => Ok(Filter::Lower),
        "default" => Ok(Filter::Default(arg_value("a value, e.g. default(0)")?)),
        other => {
            let number = match arg.filter(|a| !a.is_empty()) {
                None => None,
                Some(raw) => {
                    Some(raw.parse::<i64>().map_err(|_| format!("filter `{other}`: `{raw}` is not a whole number"))?)
                }
            };
            match crate::dates::DateOp::parse(other, number) {
                Some(op) => op.map(Filter::Shift),
                None => Err(format!(
                    "unknown filter `{other}`; filters are date, json, upper, lower, default, {}",
                    crate::dates::DATE_FILTERS
                )),
            }
        }
    }
}

fn walk_exprs(node: &Node, pointer: &mut String, f: &mut impl FnMut(&str, &Expr)) {
    match node {
        Node::Literal(_) | Node::Json(_) => {}
        Node::Array(items) => {
            for (i, n) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                walk_exprs(n, pointer, f);
                pointer.truncate(len);
            }
        }
        Node::Object(entries) => {
            for (k, n) in entries {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer(k));
                walk_exprs(n, pointer, f);
                pointer.truncate(len);
            }
        }
        Node::Text(segments) => {
            let location = pointer_to_location(pointer);
            for s in segments {
                if let Segment::Expr(e) = s {
                    f(&location, e);
                }
            }
        }
    }
}

fn collect_templated(node: &Node, pointer: &mut String, out: &mut Vec<String>) {
    match node {
        Node::Literal(_) | Node::Json(_) => {}
        Node::Text(_) => out.push(pointer.clone()),
        Node::Array(items) => {
            for (i, n) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                collect_templated(n, pointer, out);
                pointer.truncate(len);
            }
        }
        Node::Object(entries) => {
            for (k, n) in entries {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer(k));
                collect_templated(n, pointer, out);
                pointer.truncate(len);
            }
        }
    }
}

/// What is left of the size limit while a value is rendered.
struct Budget {
    left: usize,
}

impl Budget {
    /// Takes `n` bytes, or says that they are not there.
    fn take(&mut self, n: usize) -> bool {
        match self.left.checked_sub(n) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }

    /// Takes what `value` takes as compact JSON.
    fn take_value(&mut self, value: &Value) -> bool {
        /// Counts bytes, and stops the serializer past `cap`.
        struct Counter {
            bytes: usize,
            cap: usize,
        }
        impl std::io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.bytes += buf.len();
                if self.bytes > self.cap { Err(std::io::Error::other("over the limit")) } else { Ok(buf.len()) }
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter { bytes: 0, cap: self.left };
        serde_json::to_writer(&mut counter, value).is_ok() && self.take(counter.bytes)
    }

    /// Takes a string's JSON form (quotes and escapes included).
    fn take_str(&mut self, text: &str) -> bool {
        // Most strings need no escapes: count them without building a value.
        if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            return self.take(text.len() + 2);
        }
        self.take_value(&Value::String(text.to_owned()))
    }
}

fn too_large(pointer: &str, ctx: &RenderContext<'_>) -> Problem {
    Issue {
        location: pointer_to_location(pointer),
        message: format!(
            "the rendered value is larger than {} bytes, the limit of rendered params ({MAX_BYTES_KEY})",
            ctx.max_bytes
        ),
    }
}

fn render_node(
    node: &Node,
    ctx: &RenderContext<'_>,
    pointer: &mut String,
    budget: &mut Budget,
) -> Result<Value, Problem> {
    match node {
        Node::Literal(v) => {
            if !budget.take_value(v) {
                return Err(too_large(pointer, ctx));
            }
            Ok(v.clone())
        }
        Node::Json(text) => {
            if !budget.take(text.len()) {
                return Err(too_large(pointer, ctx));
            }
            // The text was written from a value, so it reads back as one
            // (within serde_json's nesting limit, which `[api] max_depth`
            // keeps definitions under).
            Ok(serde_json::from_str(text).unwrap_or(Value::Null))
        }
        Node::Array(items) => {
            // Brackets and commas.
            if !budget.take(items.len().max(1) + 1) {
                return Err(too_large(pointer, ctx));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, n) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                out.push(render_node(n, ctx, pointer, budget)?);
                pointer.truncate(len);
            }
            Ok(Value::Array(out))
        }
        Node::Object(entries) => {
            // Braces, commas and colons, then the keys.
            if !budget.take((2 * entries.len()).max(1) + 1) || !entries.iter().all(|(k, _)| budget.take_str(k)) {
                return Err(too_large(pointer, ctx));
            }
            let mut out = Map::new();
            for (k, n) in entries {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&escape_pointer(k));
                out.insert(k.clone(), render_node(n, ctx, pointer, budget)?);
                pointer.truncate(len);
            }
            Ok(Value::Object(out))
        }
        Node::Text(segments) => {
            let fail = |message: String| Issue { location: pointer_to_location(pointer), message };
            if let [Segment::Expr(expr)] = segments.as_slice() {
                let value = eval(expr, ctx).map_err(fail)?;
                if !budget.take_value(&value) {
                    return Err(too_large(pointer, ctx));
                }
                return Ok(value);
            }
            let mut out = String::new();
            for s in segments {
                let piece = match s {
                    Segment::Text(t) => std::borrow::Cow::Borrowed(t.as_str()),
                    Segment::Expr(expr) => match eval(expr, ctx).map_err(fail)? {
                        Value::String(s) => std::borrow::Cow::Owned(s),
                        other => std::borrow::Cow::Owned(other.to_string()),
                    },
                };
                // The text alone is never more than its JSON form.
                if out.len() + piece.len() > budget.left {
                    return Err(too_large(pointer, ctx));
                }
                out.push_str(&piece);
            }
            if !budget.take_str(&out) {
                return Err(too_large(pointer, ctx));
            }
            Ok(Value::String(out))
        }
    }
}

fn eval(expr: &Expr, ctx: &RenderContext<'_>) -> Result<Value, String> {
    let at = |why: String| format!("`{{{{ {} }}}}`: {why}", expr.source);
    let local = ctx.logical_time.with_timezone(&ctx.timezone);
    let mut value: Option<Value> = match &expr.root {
        Root::Literal(v) => Some(v.clone()),
        Root::Var(var) => Some(Value::String(match var {
            Var::LogicalTime => ctx.logical_time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Var::Ds => local.format("%Y-%m-%d").to_string(),
            Var::DsNodash => local.format("%Y%m%d").to_string(),
            Var::Ts => local.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            Var::TsNodash => local.format("%Y%m%dT%H%M%S").to_string(),
            Var::RunId => ctx.run_id.to_owned(),
            Var::Workflow => ctx.workflow.to_owned(),
            Var::Task => ctx.task.to_owned(),
            Var::Tenant => ctx.tenant.to_owned(),
        })),
        Root::Params | Root::Inputs => {
            let (top, what): (Option<&Value>, &str) = match (&expr.root, expr.path.first()) {
                (Root::Params, Some(Step::Key(k))) => (ctx.params.get(k), "param"),
                (Root::Inputs, Some(Step::Key(k))) => (ctx.inputs.get(k), "input"),
                _ => (None, "value"),
            };
            let mut current = top.cloned();
            if current.is_none() {
                if expr.filters.iter().any(|f| matches!(f, Filter::Default(_))) {
                    None
                } else {
                    return Err(at(format!("no such {what}")));
                }
            } else {
                for (i, step) in expr.path.iter().enumerate().skip(1) {
                    let next = match (&current, step) {
                        (Some(Value::Object(m)), Step::Key(k)) => m.get(k).cloned(),
                        (Some(Value::Array(a)), Step::Index(n)) => a.get(*n).cloned(),
                        _ => None,
                    };
                    if next.is_none() && !expr.filters.iter().any(|f| matches!(f, Filter::Default(_))) {
                        let shown: Vec<String> = expr.path[..=i]
                            .iter()
                            .map(|s| match s {
                                Step::Key(k) => k.clone(),
                                Step::Index(n) => format!("[{n}]"),
                            })
                            .collect();
                        return Err(at(format!("the {what} has no `{}`", shown.join("."))));
                    }
                    current = next;
                    if current.is_none() {
                        break;
                    }
                }
                current
            }
        }
    };
    for filter in &expr.filters {
        value = Some(match (filter, value) {
            (Filter::Default(d), None | Some(Value::Null)) => d.clone(),
            (Filter::Default(_), Some(v)) => v,
            (_, None) => return Err(at("no value".into())),
            (Filter::Json, Some(v)) => Value::String(v.to_string()),
            (Filter::Upper, Some(Value::String(s))) => Value::String(s.to_uppercase()),
            (Filter::Lower, Some(Value::String(s))) => Value::String(s.to_lowercase()),
            (Filter::Upper | Filter::Lower, Some(v)) => {
                return Err(at(format!("upper/lower need a string, got {v}")));
            }
            (Filter::Date(format), Some(Value::String(s))) => {
                let t = DateTime::parse_from_rfc3339(&s)
                    .map_err(|e| at(format!("date needs an RFC 3339 timestamp, got `{s}`: {e}")))?;
                Value::String(t.with_timezone(&ctx.timezone).format(format).to_string())
            }
            (Filter::Date(_), Some(v)) => {
                return Err(at(format!("date needs a timestamp string, got {v}")));
            }
            (Filter::Shift(op), Some(Value::String(s))) => Value::String(op.apply(&s, ctx.timezone).map_err(at)?),
            (Filter::Shift(_), Some(v)) => {
                return Err(at(format!("date arithmetic needs a date or timestamp string, got {v}")));
            }
        });
    }
    value.ok_or_else(|| at("no value".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx<'a>(params: &'a BTreeMap<String, Value>, inputs: &'a Map<String, Value>) -> RenderContext<'a> {
        RenderContext {
            params,
            inputs,
            logical_time: "2026-03-01T23:30:00Z".parse().unwrap(),
            timezone: "Europe/Berlin".parse().unwrap(),
            run_id: "r1",
            workflow: "wf",
            task: "t",
            tenant: "acme",
            max_bytes: 1 << 20,
        }
    }

    #[test]
    fn renders_values_and_text() {
        let mut params = BTreeMap::new();
        params.insert("region".to_owned(), json!("eu"));
        let inputs = json!({"count": {"n": 41, "rows": [{"id": "x"}]}}).as_object().unwrap().clone();
        let tpl = Template::parse(&json!({
            "n": "{{ inputs.count.n }}",
            "url": "https://x/{{ params.region | upper }}/{{ ds }}?id={{ inputs.count.rows[0].id }}",
            "when": "{{ logical_time | date(\"%Y/%m/%d %H:%M\") }}",
            "fixed": [1, 2],
            "missing": "{{ inputs.count.nope | default(0) }}",
            "obj": "{{ inputs.count | json }}"
        }))
        .unwrap();
        let out = tpl.render(&ctx(&params, &inputs)).unwrap();
        assert_eq!(out["n"], json!(41));
        // 23:30 UTC on March 1st is already March 2nd in Berlin.
        assert_eq!(out["url"], json!("https://x/EU/2026-03-02?id=x"));
        assert_eq!(out["when"], json!("2026/03/02 00:30"));
        assert_eq!(out["missing"], json!(0));
        assert_eq!(out["fixed"], json!([1, 2]));
        assert!(out["obj"].as_str().unwrap().contains("\"n\":41"));
    }

    #[test]
    fn rendering_stops_at_the_size_limit() {
        // A few bytes of template that splice a large input many times:
        // found by the template property (rendered size within the limit).
        let params = BTreeMap::new();
        let inputs = json!({"big": "x".repeat(4096)}).as_object().unwrap().clone();
        let many = "{{ inputs.big }}".repeat(300);
        let tpl = Template::parse(&json!({"a": {"b": many}})).unwrap();
        let err = tpl.render(&ctx(&params, &inputs)).unwrap_err();
        assert_eq!(err.location, ".a.b");
        assert!(err.message.contains("larger than 1048576 bytes") && err.message.contains("[limits] max_params"));
        // Exactly at the limit is fine; a byte less is not.
        let tpl = Template::parse(&json!({"v": "{{ inputs.big }}"})).unwrap();
        let size = tpl.render(&ctx(&params, &inputs)).unwrap().to_string().len();
        let at = RenderContext { max_bytes: size, ..ctx(&params, &inputs) };
        assert!(tpl.render(&at).is_ok());
        let below = RenderContext { max_bytes: size - 1, ..ctx(&params, &inputs) };
        assert!(tpl.render(&below).is_err());
        // Escapes count: a string of quotes takes twice its length.
        let quotes = Template::parse(&json!("{{ params.q }}-")).unwrap();
        let params = BTreeMap::from([("q".to_owned(), json!("\"".repeat(100)))]);
        let exact = json!(format!("{}-", "\"".repeat(100))).to_string().len();
        assert!(quotes.render(&RenderContext { max_bytes: exact, ..ctx(&params, &inputs) }).is_ok());
        assert!(quotes.render(&RenderContext { max_bytes: exact - 1, ..ctx(&params, &inputs) }).is_err());
    }

    #[test]
    fn a_template_without_expressions_renders_as_its_text() {
        let params = BTreeMap::from([("p".to_owned(), json!("v"))]);
        let inputs = Map::new();
        for value in [json!({"n": 1, "s": "x", "a": [1, {"b": null}]}), json!("plain"), json!([]), json!(3.5)] {
            let tpl = Template::parse(&value).unwrap();
            assert!(tpl.is_literal());
            assert_eq!(tpl, Template::literal(value.clone()));
            assert_eq!(tpl.render(&ctx(&params, &inputs)).unwrap(), value);
            let text = tpl.render_json(&ctx(&params, &inputs)).unwrap();
            assert_eq!(text, value.to_string());
            // Its size limit holds as for any other template.
            let exact = RenderContext { max_bytes: text.len(), ..ctx(&params, &inputs) };
            assert!(tpl.render_json(&exact).is_ok() && tpl.render(&exact).is_ok());
            let below = RenderContext { max_bytes: text.len() - 1, ..ctx(&params, &inputs) };
            let err = tpl.render_json(&below).unwrap_err();
            assert!(err.message.contains("[limits] max_params"), "{}", err.message);
            assert!(tpl.render(&below).is_err());
        }
        // With expressions, the text is the rendered value's.
        let tpl = Template::parse(&json!({"x": "{{ params.p }}", "k": [1]})).unwrap();
        assert!(!tpl.is_literal());
        let text = tpl.render_json(&ctx(&params, &inputs)).unwrap();
        assert_eq!(text, tpl.render(&ctx(&params, &inputs)).unwrap().to_string());
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"x": "v", "k": [1]}));
    }

    #[test]
    fn render_errors_say_where() {
        let params = BTreeMap::new();
        let inputs = json!({"a": {"x": 1}}).as_object().unwrap().clone();
        let tpl = Template::parse(&json!({"deep": {"v": "{{ inputs.a.y.z }}"}})).unwrap();
        let err = tpl.render(&ctx(&params, &inputs)).unwrap_err();
        assert_eq!(err.location, ".deep.v");
        assert!(err.message.contains("has no `a.y`"), "{}", err.message);
    }

    #[test]
    fn parse_and_check_errors() {
        assert!(Template::parse(&json!("{{ nope }}")).unwrap_err().message.contains("unknown name `nope`"));
        assert!(Template::parse(&json!("{{ ds | date(\"%Q\") }}")).unwrap_err().message.contains("bad format"));
        assert!(Template::parse(&json!({"a": ["{{ params.x"]})).unwrap_err().location == ".a[0]");
        let tpl = Template::parse(&json!({"a": "{{ params.x }}", "b": "{{ inputs.z.v }}"})).unwrap();
        let params = BTreeMap::new();
        let upstream = HashSet::from(["y"]);
        let problems = tpl.check(&TemplateScope { params: &params, upstream: &upstream });
        assert_eq!(problems.len(), 2);
        assert_eq!(problems[0].location, ".a");
        assert!(problems[1].message.contains("not an upstream task"));
        assert_eq!(tpl.templated_pointers(), vec!["/a".to_owned(), "/b".to_owned()]);
    }
}
