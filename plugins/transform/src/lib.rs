//! `transform`: evaluates a jq filter (through jaq) over params and inputs.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;
use serde::Deserialize;

pub struct Transform;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The jq program, e.g. `.inputs.extract.rows | map(.price) | add`.
    filter: String,
    /// Extra data for the filter, seen as `.vars`.
    #[serde(default)]
    vars: Value,
    /// Return every result as an array instead of exactly one result.
    #[serde(default)]
    all: bool,
}

/// More results than this is a runaway filter (`range(1e9)`), not a transform.
const MAX_RESULTS: usize = 100_000;

impl Task for Transform {
    type Params = Params;
    type Output = Value;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["filter"],
            "properties": {
                "filter": {"type": "string", "minLength": 1},
                "vars": {},
                "all": {"type": "boolean"}
            }
        }))
    }

    fn run(_ctx: &Context, params: Params, inputs: &Inputs) -> Result<Value, TaskError> {
        let input = json!({ "inputs": inputs.as_map(), "vars": params.vars });
        let mut results = eval(&params.filter, &input)?;
        if params.all {
            return Ok(Value::Array(results));
        }
        match results.len() {
            1 => Ok(results.remove(0)),
            0 => Err(TaskError::fatal("the filter produced no result (use `\"all\": true` to accept that)")),
            n => Err(TaskError::fatal(format!(
                "the filter produced {n} results; wrap it in [ … ] or set `\"all\": true` to return them all"
            ))),
        }
    }
}

/// Compiles and runs a jq filter over one input.
pub fn eval(filter: &str, input: &Value) -> Result<Vec<Value>, TaskError> {
    let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
    let funs = jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(&arena, File { code: filter, path: () })
        .map_err(|errors| TaskError::fatal(format!("the filter does not parse: {}", load_errors(filter, errors))))?;
    let compiled = Compiler::default().with_funs(funs).compile(modules).map_err(|errors| {
        let undefined: Vec<String> = errors
            .into_iter()
            .flat_map(|(_, errs)| errs)
            .map(|(name, what)| format!("undefined {} `{name}` at {}", what.as_str(), offset(filter, name)))
            .collect();
        TaskError::fatal(format!("the filter does not compile: {}", undefined.join("; ")))
    })?;
    let input: Val = serde_json::from_value(input.clone())
        .map_err(|e| TaskError::fatal(format!("cannot convert the input for jq: {e}")))?;
    let ctx = Ctx::<data::JustLut<Val>>::new(&compiled.lut, Vars::new([]));
    let mut results = Vec::new();
    for result in compiled.id.run((ctx, input)).map(unwrap_valr) {
        let value = result.map_err(|e| TaskError::fatal(format!("the filter failed: {e}")))?;
        let value = serde_json::from_str(&value.to_string())
            .map_err(|e| TaskError::fatal(format!("the filter produced a value that is not JSON ({value}): {e}")))?;
        results.push(value);
        if results.len() > MAX_RESULTS {
            return Err(TaskError::fatal(format!("the filter produced more than {MAX_RESULTS} results")));
        }
    }
    Ok(results)
}

fn offset(code: &str, part: &str) -> String {
    let at = (part.as_ptr() as usize).wrapping_sub(code.as_ptr() as usize);
    if at <= code.len() { format!("byte {at}") } else { "an unknown position".into() }
}

fn load_errors(code: &str, errors: jaq_core::load::Errors<&str, ()>) -> String {
    use jaq_core::load::Error;
    let mut messages = Vec::new();
    for (_, error) in errors {
        match error {
            Error::Io(errs) => messages.extend(errs.into_iter().map(|(path, e)| format!("cannot load `{path}`: {e}"))),
            Error::Lex(errs) => messages.extend(
                errs.into_iter().map(|(expect, at)| format!("expected {} at {}", expect.as_str(), offset(code, at))),
            ),
            Error::Parse(errs) => messages.extend(errs.into_iter().map(|(expect, at)| {
                let found = if at.is_empty() { "the end".to_owned() } else { format!("`{at}`") };
                format!("expected {} at {}, found {found}", expect.as_str(), offset(code, at))
            })),
        }
    }
    messages.join("; ")
}

dagr_sdk::export!(Transform);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn sums_upstream_values() {
        let outcome = TestRun::new()
            .input("extract", json!({"rows": [{"price": 2}, {"price": 3.5}]}))
            .run::<Transform>(json!({"filter": ".inputs.extract.rows | map(.price) | add"}));
        assert_eq!(outcome.output(), Some(&json!(5.5)));
    }

    #[test]
    fn vars_and_all() {
        let outcome = TestRun::new().run::<Transform>(json!({"filter": ".vars[] * 2", "vars": [1, 2], "all": true}));
        assert_eq!(outcome.output(), Some(&json!([2, 4])));
        let many = TestRun::new().run::<Transform>(json!({"filter": ".vars[]", "vars": [1, 2]}));
        assert!(many.error().is_some_and(|e| e.message().contains("2 results")));
    }

    #[test]
    fn errors_say_where() {
        let parse = TestRun::new().run::<Transform>(json!({"filter": ".a | ("}));
        assert!(parse.error().is_some_and(|e| e.message().contains("does not parse")), "{parse:?}");
        let undefined = TestRun::new().run::<Transform>(json!({"filter": "nosuchfn(1)"}));
        assert!(undefined.error().is_some_and(|e| e.message().contains("nosuchfn")), "{undefined:?}");
        let runtime = TestRun::new().run::<Transform>(json!({"filter": "error(\"custom\")"}));
        assert!(runtime.error().is_some_and(|e| e.message().contains("custom")), "{runtime:?}");
    }
}
