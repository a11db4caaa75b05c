//! Hostile: returns a JSON string of `{"bytes": N}` x's (default 64 MiB), or
//! with `{"nested": N}` an output of N nested arrays (`[[[…]]]`), which is
//! valid JSON that no recursive parser can read.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value};
use serde_json::value::RawValue;

pub struct BigOutput;

impl Task for BigOutput {
    type Params = Value;
    type Output = Box<RawValue>;

    fn run(_: &Context, params: Value, _: &Inputs) -> Result<Box<RawValue>, TaskError> {
        let text = match params["nested"].as_u64() {
            Some(levels) => format!("{}{}", "[".repeat(levels as usize), "]".repeat(levels as usize)),
            None => {
                let bytes = params["bytes"].as_u64().unwrap_or(64 << 20) as usize;
                format!("\"{}\"", "x".repeat(bytes))
            }
        };
        RawValue::from_string(text).map_err(|e| TaskError::fatal(e.to_string()))
    }
}

dagr_sdk::export!(BigOutput);
