//! `fib`: computes a Fibonacci number by naive recursion, to burn CPU.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};
use serde::{Deserialize, Serialize};

pub struct Fib;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Which Fibonacci number; the work grows by ×1.6 per step.
    n: u32,
}

#[derive(Debug, Serialize)]
pub struct Output {
    n: u32,
    value: u64,
}

/// fib(45) already takes many seconds; beyond that is a mistake, not a benchmark.
const MAX_N: u32 = 45;

fn fib(n: u32) -> u64 {
    if n < 2 { n as u64 } else { fib(n - 1).wrapping_add(fib(n - 2)) }
}

impl Task for Fib {
    type Params = Params;
    type Output = Output;

    fn params_schema() -> Option<Value> {
        Some(json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["n"],
            "properties": { "n": {"type": "integer", "minimum": 0, "maximum": MAX_N} }
        }))
    }

    fn run(_ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Output, TaskError> {
        if params.n > MAX_N {
            return Err(TaskError::fatal(format!("n = {} is above the maximum of {MAX_N}", params.n)));
        }
        // `black_box` keeps the optimiser from folding the recursion.
        let value = fib(std::hint::black_box(params.n));
        Ok(Output { n: params.n, value })
    }
}

dagr_sdk::export!(Fib);

#[cfg(test)]
mod tests {
    use super::*;
    use dagr_sdk::testing::TestRun;

    #[test]
    fn computes() {
        assert_eq!(TestRun::new().run::<Fib>(json!({"n": 20})).output(), Some(&json!({"n": 20, "value": 6765})));
        assert!(TestRun::new().run::<Fib>(json!({"n": 99})).error().is_some_and(|e| e.is_fatal()));
    }
}
