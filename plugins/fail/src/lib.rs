//! `fail`: fails on demand. For testing retries and trigger rules.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, info, json};
use serde::{Deserialize, Serialize};

pub struct Fail;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Retryable,
    Fatal,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// How to fail.
    #[serde(default = "default_mode")]
    mode: Mode,
    /// The error message.
    #[serde(default = "default_message")]
    message: String,
    /// Fail only in the first N attempts, then succeed. Absent: always fail.
    attempts: Option<u32>,
}

fn default_mode() -> Mode {
    Mode::Retryable
}

fn default_message() -> String {
    "failed on purpose".into()
}

#[derive(Debug, Serialize)]
pub struct Output {
    succeeded_on_attempt: u32,
}

impl Task for Fail {
    type Params = Params;
    type Output = Output;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "mode": {"enum": ["retryable", "fatal"]},
                "message": {"type": "string"},
                "attempts": {"type": "integer", "minimum": 0}
            }
        }))
    }

    fn run(ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Output, TaskError> {
        let fails = params.attempts.is_none_or(|n| ctx.attempt <= n);
        if !fails {
            info!("attempt {} succeeds", ctx.attempt);
            return Ok(Output { succeeded_on_attempt: ctx.attempt });
        }
        let message = format!("{} (attempt {})", params.message, ctx.attempt);
        Err(match params.mode {
            Mode::Retryable => TaskError::retryable(message),
            Mode::Fatal => TaskError::fatal(message),
        })
    }
}

dagr_sdk::export!(Fail);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::ErrorKind;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn fails_then_succeeds() {
        let params = json!({"attempts": 2, "message": "boom"});
        let first = TestRun::new().attempt(1).run::<Fail>(&params);
        assert_eq!(first.error().map(|e| e.kind()), Some(ErrorKind::Retryable));
        assert_eq!(first.error().map(|e| e.message()), Some("boom (attempt 1)"));
        assert!(TestRun::new().attempt(2).run::<Fail>(&params).error().is_some());
        let third = TestRun::new().attempt(3).run::<Fail>(&params);
        assert_eq!(third.output(), Some(&json!({"succeeded_on_attempt": 3})));
    }

    #[test]
    fn fatal_and_bad_params() {
        let fatal = TestRun::new().run::<Fail>(json!({"mode": "fatal"}));
        assert!(fatal.error().is_some_and(|e| e.is_fatal()));
        let bad = TestRun::new().run::<Fail>(json!({"mode": "sometimes"}));
        assert!(bad.error().is_some_and(|e| e.is_fatal() && e.message().contains("mode")));
    }
}
