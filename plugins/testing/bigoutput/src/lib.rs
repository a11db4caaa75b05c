//! Hostile: returns an output of `{"bytes": N}` bytes (default 64 MiB).

use dagr_sdk::{Context, Inputs, Task, TaskError, Value};

pub struct BigOutput;

impl Task for BigOutput {
    type Params = Value;
    type Output = String;

    fn run(_: &Context, params: Value, _: &Inputs) -> Result<String, TaskError> {
        let bytes = params["bytes"].as_u64().unwrap_or(64 << 20) as usize;
        Ok("x".repeat(bytes))
    }
}

dagr_sdk::export!(BigOutput);
