//! Hostile: reports the environment variables and arguments it can see.

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, json};

pub struct Env;

impl Task for Env {
    type Params = Value;
    type Output = Value;

    fn run(_: &Context, _: Value, _: &Inputs) -> Result<Value, TaskError> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let args: Vec<String> = std::env::args().collect();
        let cwd = std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_else(|e| format!("error: {e}"));
        Ok(json!({"vars": vars, "args": args, "cwd": cwd}))
    }
}

dagr_sdk::export!(Env);
