//! A native test harness: run a [`Task`] with `cargo test`, no wasm needed.
//!
//! [`TestRun`] plays the host. It goes through the same JSON path as the
//! real glue (params text → your `Params` → `run` → output text), records
//! logs and progress, and serves secrets and cancellation.
//!
//! ```
//! use dagr_sdk::testing::TestRun;
//! # use dagr_sdk::{Context, Inputs, Task, TaskError};
//! # struct Token;
//! # impl Task for Token {
//! #     type Params = serde_json::Value;
//! #     type Output = bool;
//! #     fn run(_: &Context, _: serde_json::Value, _: &Inputs) -> Result<bool, TaskError> {
//! #         Ok(dagr_sdk::secret("api-token").is_some())
//! #     }
//! # }
//! let outcome = TestRun::new().secret("api-token", "s3cr3t").run::<Token>(serde_json::json!({}));
//! assert_eq!(outcome.output().unwrap(), &serde_json::json!(true));
//! ```

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::Value;

use crate::{Context, Level, Task, TaskError};

/// One simulated attempt.
#[derive(Debug, Clone, Default)]
pub struct TestRun {
    context: Context,
    inputs: serde_json::Map<String, Value>,
    secrets: HashMap<String, String>,
    cancel_after: Option<usize>,
}

/// What a [`TestRun`] produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub result: Result<Value, TaskError>,
    pub logs: Vec<(Level, String)>,
    pub progress: Vec<(u8, String)>,
}

impl Outcome {
    /// The output, if the task succeeded.
    pub fn output(&self) -> Option<&Value> {
        self.result.as_ref().ok()
    }

    /// The error, if the task failed.
    pub fn error(&self) -> Option<&TaskError> {
        self.result.as_ref().err()
    }

    /// Whether any log line contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.logs.iter().any(|(_, line)| line.contains(needle))
    }
}

impl TestRun {
    pub fn new() -> Self {
        TestRun::default()
    }

    /// Replaces the whole context.
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Sets the attempt number (1 = first try).
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.context.attempt = attempt;
        self
    }

    /// Adds the output of an upstream task.
    pub fn input(mut self, task: &str, output: Value) -> Self {
        self.inputs.insert(task.to_owned(), output);
        self
    }

    /// Makes a secret available to `secret(name)`.
    pub fn secret(mut self, name: &str, value: &str) -> Self {
        self.secrets.insert(name.to_owned(), value.to_owned());
        self
    }

    /// `cancelled()` returns true from the start.
    pub fn cancelled(self) -> Self {
        self.cancel_after(0)
    }

    /// `cancelled()` returns false `calls` times, then true.
    pub fn cancel_after(mut self, calls: usize) -> Self {
        self.cancel_after = Some(calls);
        self
    }

    /// Runs the task with these params (any serializable value, usually `json!`).
    pub fn run<T: Task>(self, params: impl serde::Serialize) -> Outcome {
        let params = match serde_json::to_string(&params) {
            Ok(text) => text,
            Err(e) => {
                return Outcome {
                    result: Err(TaskError::fatal(format!("test params do not serialize: {e}"))),
                    logs: Vec::new(),
                    progress: Vec::new(),
                };
            }
        };
        self.run_raw::<T>(&params)
    }

    /// Runs the task with params given as JSON text, exactly as dagr passes them.
    pub fn run_raw<T: Task>(self, params: &str) -> Outcome {
        let inputs = Value::Object(self.inputs.clone()).to_string();
        HOST.with(|h| {
            *h.borrow_mut() = Some(TestHost {
                secrets: self.secrets.clone(),
                cancel_after: self.cancel_after,
                cancel_checks: 0,
                logs: Vec::new(),
                progress: Vec::new(),
            })
        });
        let result = crate::__private::run_json::<T>(&self.context, params, &inputs).and_then(|text| {
            serde_json::from_str(&text).map_err(|e| TaskError::fatal(format!("output is not JSON: {e}")))
        });
        let host = HOST.with(|h| h.borrow_mut().take()).unwrap_or_default();
        Outcome { result, logs: host.logs, progress: host.progress }
    }
}

#[derive(Debug, Default)]
struct TestHost {
    secrets: HashMap<String, String>,
    cancel_after: Option<usize>,
    cancel_checks: usize,
    logs: Vec<(Level, String)>,
    progress: Vec<(u8, String)>,
}

thread_local! {
    static HOST: RefCell<Option<TestHost>> = const { RefCell::new(None) };
}

/// The native stand-ins for the host imports. Outside a [`TestRun`], logs go
/// to stderr, nothing is cancelled and there are no secrets.
pub(crate) mod host {
    use super::HOST;
    use crate::Level;

    pub fn log(level: Level, message: &str) {
        HOST.with(|h| match h.borrow_mut().as_mut() {
            Some(host) => host.logs.push((level, message.to_owned())),
            None => eprintln!("[{level:?}] {message}"),
        })
    }

    pub fn progress(percent: u8, message: &str) {
        HOST.with(|h| {
            if let Some(host) = h.borrow_mut().as_mut() {
                host.progress.push((percent, message.to_owned()));
            }
        })
    }

    pub fn cancelled() -> bool {
        HOST.with(|h| match h.borrow_mut().as_mut() {
            Some(host) => {
                let checks = host.cancel_checks;
                host.cancel_checks += 1;
                host.cancel_after.is_some_and(|after| checks >= after)
            }
            None => false,
        })
    }

    pub fn secret(name: &str) -> Option<String> {
        HOST.with(|h| h.borrow().as_ref().and_then(|host| host.secrets.get(name).cloned()))
    }
}
