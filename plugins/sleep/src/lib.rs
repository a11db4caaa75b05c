//! `sleep`: waits, returning early (with a retryable error) when cancelled.

use std::time::{Duration, Instant};

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};
use serde::{Deserialize, Serialize};

pub struct Sleep;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// How long to sleep, in milliseconds.
    ms: u64,
}

#[derive(Debug, Serialize)]
pub struct Output {
    slept_ms: u64,
}

/// How often a sleeping task checks whether it was cancelled.
const CHECK_EVERY: Duration = Duration::from_millis(50);

impl Task for Sleep {
    type Params = Params;
    type Output = Output;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["ms"],
            "properties": { "ms": {"type": "integer", "minimum": 0} }
        }))
    }

    fn run(_ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Output, TaskError> {
        let start = Instant::now();
        let total = Duration::from_millis(params.ms);
        loop {
            let elapsed = start.elapsed();
            if elapsed >= total {
                break;
            }
            if dagr_sdk::cancelled() {
                return Err(TaskError::retryable(format!("cancelled after {} ms", elapsed.as_millis())));
            }
            std::thread::sleep((total - elapsed).min(CHECK_EVERY));
        }
        Ok(Output { slept_ms: start.elapsed().as_millis() as u64 })
    }
}

dagr_sdk::export!(Sleep);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn sleeps() {
        let outcome = TestRun::new().run::<Sleep>(json!({"ms": 20}));
        let slept = outcome.output().and_then(|o| o["slept_ms"].as_u64()).unwrap_or(0);
        assert!(slept >= 20, "{outcome:?}");
    }

    #[test]
    fn stops_when_cancelled() {
        let outcome = TestRun::new().cancel_after(1).run::<Sleep>(json!({"ms": 60_000}));
        assert!(outcome.error().is_some_and(|e| e.message().starts_with("cancelled")));
    }
}
