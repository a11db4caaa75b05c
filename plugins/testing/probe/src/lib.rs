//! Test component that exercises the host interface on request.
//!
//! Params (all optional, applied in this order):
//! - `"secret": "name"`: reads the secret, logs it and returns it;
//! - `"write": {"name": "f", "content": "…"}`: writes a file in the scratch dir;
//! - `"read": "f"`: reads a file from the scratch dir (null if absent);
//! - `"progress": 40`: reports progress;
//! - `"wait_for_cancel_ms": N`: checks `cancelled()` until it turns true or N ms pass;
//! - `"remember": "text"`: keeps the text in a static variable and returns
//!   what an earlier call kept there as `remembered` (in a fresh instance:
//!   nothing, ever);
//! - `"output": <json>`: returned as `output`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use dagr_sdk::{Context, Inputs, Task, TaskError, Value, info, json};

pub struct Probe;

/// What `remember` kept (see the module docs).
static REMEMBERED: Mutex<String> = Mutex::new(String::new());

impl Task for Probe {
    type Params = Value;
    type Output = Value;

    fn run(ctx: &Context, params: Value, inputs: &Inputs) -> Result<Value, TaskError> {
        let mut out = json!({"context": {
            "tenant": ctx.tenant, "workflow": ctx.workflow, "run_id": ctx.run_id, "task": ctx.task,
            "attempt": ctx.attempt, "logical_time": ctx.logical_time, "idempotency_key": ctx.idempotency_key,
        }, "grade": dagr_sdk::grade(), "inputs": inputs.as_map()});
        if let Some(name) = params["secret"].as_str() {
            let value = dagr_sdk::secret(name);
            info!("the secret {name} is {value:?}");
            println!("stdout also says: {value:?}");
            out["secret"] = json!(value);
        }
        if let Some(file) = params.get("write") {
            let name = file["name"].as_str().unwrap_or("file.txt");
            let content = file["content"].as_str().unwrap_or("");
            std::fs::write(name, content).map_err(|e| TaskError::fatal(format!("write {name}: {e}")))?;
            out["wrote"] = json!(name);
        }
        if let Some(name) = params["read"].as_str() {
            out["read"] = match std::fs::read_to_string(name) {
                Ok(text) => json!(text),
                Err(e) => json!({"error": e.to_string()}),
            };
        }
        if let Some(percent) = params["progress"].as_u64() {
            dagr_sdk::progress(percent as u8, "probing");
        }
        if let Some(ms) = params["wait_for_cancel_ms"].as_u64() {
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(ms) {
                if dagr_sdk::cancelled() {
                    return Err(TaskError::retryable("saw the cancellation and stopped"));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            out["cancel_seen"] = json!(false);
        }
        if let Some(text) = params["remember"].as_str() {
            let mut kept = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
            out["remembered"] = json!(std::mem::replace(&mut *kept, text.to_owned()));
        }
        if let Some(output) = params.get("output") {
            out["output"] = output.clone();
        }
        Ok(out)
    }
}

dagr_sdk::export!(Probe);
