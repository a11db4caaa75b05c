//! `script`: runs an inline Rhai script over params and inputs.
//!
//! The sandboxed successor of DolphinScheduler's shell task: the small glue
//! that people used to write in bash (look at upstream results, compute a
//! value, decide to fail) is written in Rhai and runs inside the task's
//! WebAssembly sandbox.

use dagr_sdk::{Context, Inputs, Level, Task, TaskError, Value, json};
use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope};
use serde::Deserialize;

pub struct Script;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The Rhai source. Its last expression is the task's output.
    script: String,
    /// Extra data, seen by the script as `vars`.
    #[serde(default)]
    vars: Value,
    /// Stop a runaway script after this many operations.
    #[serde(default = "default_max_operations")]
    max_operations: u64,
}

fn default_max_operations() -> u64 {
    100_000_000
}

const FATAL: &str = "\u{0}dagr-fatal:";
const RETRY: &str = "\u{0}dagr-retry:";

impl Task for Script {
    type Params = Params;
    type Output = Value;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["script"],
            "properties": {
                "script": {"type": "string", "minLength": 1},
                "vars": {},
                "max_operations": {"type": "integer", "minimum": 1}
            }
        }))
    }

    fn run(ctx: &Context, params: Params, inputs: &Inputs) -> Result<Value, TaskError> {
        let engine = engine(params.max_operations);
        let ast =
            engine.compile(&params.script).map_err(|e| TaskError::fatal(format!("the script does not parse: {e}")))?;
        let mut scope = Scope::new();
        scope.push_constant("inputs", to_dynamic(&Value::Object(inputs.as_map().clone()))?);
        scope.push_constant("vars", to_dynamic(&params.vars)?);
        scope.push_constant(
            "ctx",
            to_dynamic(&json!({
                "tenant": ctx.tenant,
                "workflow": ctx.workflow,
                "run_id": ctx.run_id,
                "task": ctx.task,
                "attempt": ctx.attempt,
                "logical_time": ctx.logical_time,
                "idempotency_key": ctx.idempotency_key,
            }))?,
        );
        let result: Dynamic = engine.eval_ast_with_scope(&mut scope, &ast).map_err(|e| script_error(&e))?;
        rhai::serde::from_dynamic::<Value>(&result)
            .map_err(|e| TaskError::fatal(format!("the script's result cannot be turned into JSON: {e}")))
    }
}

fn engine(max_operations: u64) -> Engine {
    let mut engine = Engine::new();
    engine.set_max_operations(max_operations);
    engine.set_max_expr_depths(256, 256);
    engine.set_max_call_levels(256);
    engine.on_print(|text| dagr_sdk::log(Level::Info, text));
    engine.on_debug(|text, _source, pos| dagr_sdk::log(Level::Debug, &format!("{text} ({pos})")));
    // Give a kill a chance to land between statements of a long script.
    engine.on_progress(|ops| {
        if ops % 10_000 == 0 && dagr_sdk::cancelled() { Some(Dynamic::from("cancelled")) } else { None }
    });
    for (name, level) in
        [("debug", Level::Debug), ("info", Level::Info), ("warn", Level::Warn), ("error", Level::Error)]
    {
        engine.register_fn(name, move |message: &str| dagr_sdk::log(level, message));
    }
    engine.register_fn("progress", |percent: i64, message: &str| {
        dagr_sdk::progress(percent.clamp(0, 100) as u8, message)
    });
    engine.register_fn("secret", |name: &str| -> Dynamic {
        dagr_sdk::secret(name).map(Dynamic::from).unwrap_or(Dynamic::UNIT)
    });
    engine.register_fn("fail", |message: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        Err(EvalAltResult::ErrorRuntime(format!("{FATAL}{message}").into(), Position::NONE).into())
    });
    engine.register_fn("retry", |message: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        Err(EvalAltResult::ErrorRuntime(format!("{RETRY}{message}").into(), Position::NONE).into())
    });
    engine.register_fn("to_json", |value: Dynamic| -> Result<String, Box<EvalAltResult>> {
        let value: Value = rhai::serde::from_dynamic(&value)?;
        Ok(value.to_string())
    });
    engine.register_fn("from_json", |text: &str| -> Result<Dynamic, Box<EvalAltResult>> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| EvalAltResult::ErrorRuntime(format!("from_json: {e}").into(), Position::NONE))?;
        rhai::serde::to_dynamic(value)
    });
    engine
}

fn to_dynamic(value: &Value) -> Result<Dynamic, TaskError> {
    rhai::serde::to_dynamic(value).map_err(|e| TaskError::fatal(format!("cannot pass data to the script: {e}")))
}

fn script_error(error: &EvalAltResult) -> TaskError {
    match error {
        EvalAltResult::ErrorRuntime(value, position) => {
            let text = value.to_string();
            if let Some(message) = text.strip_prefix(FATAL) {
                TaskError::fatal(message)
            } else if let Some(message) = text.strip_prefix(RETRY) {
                TaskError::retryable(message)
            } else {
                TaskError::fatal(format!("the script threw {text} ({position})"))
            }
        }
        EvalAltResult::ErrorTerminated(_, _) => {
            TaskError::retryable("the script was stopped: the attempt was cancelled")
        }
        EvalAltResult::ErrorTooManyOperations(position) => {
            TaskError::fatal(format!("the script ran too long: it hit its max_operations limit ({position})"))
        }
        other => TaskError::fatal(format!("the script failed: {other}")),
    }
}

dagr_sdk::export!(Script);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn computes_from_inputs_and_vars() {
        let outcome = TestRun::new().input("count", json!({"rows": 41})).run::<Script>(json!({
            "script": "let n = inputs.count.rows + vars.extra; info(`rows: ${n}`); #{ total: n, ok: n > 40 }",
            "vars": {"extra": 1}
        }));
        assert_eq!(outcome.output(), Some(&json!({"total": 42, "ok": true})));
        assert!(outcome.logged("rows: 42"));
    }

    #[test]
    fn fail_and_retry() {
        let fatal = TestRun::new().run::<Script>(json!({"script": "if true { fail(\"bad data\") }"}));
        assert_eq!(fatal.error().map(|e| (e.is_fatal(), e.message())), Some((true, "bad data")));
        let retry = TestRun::new().run::<Script>(json!({"script": "retry(\"not yet\")"}));
        assert_eq!(retry.error().map(|e| (e.is_fatal(), e.message())), Some((false, "not yet")));
    }

    #[test]
    fn errors_say_where() {
        let syntax = TestRun::new().run::<Script>(json!({"script": "let x = ;"}));
        assert!(syntax.error().is_some_and(|e| e.message().contains("line 1")), "{syntax:?}");
        let runaway = TestRun::new().run::<Script>(json!({"script": "loop {}", "max_operations": 1000}));
        assert!(runaway.error().is_some_and(|e| e.message().contains("max_operations")), "{runaway:?}");
        let secret = TestRun::new().secret("token", "abc").run::<Script>(json!({"script": "secret(\"token\")"}));
        assert_eq!(secret.output(), Some(&json!("abc")));
    }
}
