//! Hostile: floods the log through `host.log`, stdout and stderr, then
//! succeeds. Params: `{"lines": N, "line_bytes": M}`.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, info, json};

pub struct BigLog;

impl Task for BigLog {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, params: Value, _: &Inputs) -> Result<Value, TaskError> {
        let lines = params["lines"].as_u64().unwrap_or(100_000);
        let line = "y".repeat(params["line_bytes"].as_u64().unwrap_or(100) as usize);
        for i in 0..lines {
            match i % 3 {
                0 => info!("{i} {line}"),
                1 => println!("{i} {line}"),
                _ => eprintln!("{i} {line}"),
            }
        }
        Ok(json!({"wrote_lines": lines}))
    }
}

dagr_sdk::export!(BigLog);
