//! Write dagr task types in Rust.
//!
//! A dagr plugin is a WebAssembly component. With this crate, it is a struct
//! that implements [`Task`] and one call to [`export!`]; you never touch
//! WIT bindings.
//!
//! ```
//! use dagr_sdk::{Context, Inputs, Task, TaskError, info};
//! use serde::{Deserialize, Serialize};
//!
//! /// Greets someone, optionally shouting.
//! pub struct Greet;
//!
//! #[derive(Deserialize)]
//! #[serde(deny_unknown_fields)]
//! pub struct Params {
//!     name: String,
//!     #[serde(default)]
//!     shout: bool,
//! }
//!
//! #[derive(Serialize)]
//! pub struct Output {
//!     greeting: String,
//! }
//!
//! impl Task for Greet {
//!     type Params = Params;
//!     type Output = Output;
//!
//!     fn params_schema() -> Option<serde_json::Value> {
//!         Some(serde_json::json!({
//!             "type": "object",
//!             "required": ["name"],
//!             "properties": { "name": {"type": "string"}, "shout": {"type": "boolean"} }
//!         }))
//!     }
//!
//!     fn run(ctx: &Context, params: Params, _inputs: &Inputs) -> Result<Output, TaskError> {
//!         if params.name.is_empty() {
//!             return Err(TaskError::fatal("name must not be empty"));
//!         }
//!         info!("greeting {} (attempt {})", params.name, ctx.attempt);
//!         let mut greeting = format!("Hello, {}!", params.name);
//!         if params.shout {
//!             greeting = greeting.to_uppercase();
//!         }
//!         Ok(Output { greeting })
//!     }
//! }
//!
//! // Writes the component's exports. The plugin's name, version and
//! // description come from its Cargo.toml.
//! dagr_sdk::export!(Greet);
//!
//! // A native unit test: no wasm, no dagr, just `cargo test`.
//! use dagr_sdk::testing::TestRun;
//! let outcome = TestRun::new().run::<Greet>(serde_json::json!({"name": "Ada", "shout": true}));
//! assert_eq!(outcome.output().unwrap()["greeting"], "HELLO, ADA!");
//! assert!(outcome.logged("greeting Ada"));
//!
//! let bad = TestRun::new().run::<Greet>(serde_json::json!({"nam": "typo"}));
//! assert!(bad.error().unwrap().is_fatal());
//! ```
//!
//! Build the component with `cargo build --target wasm32-wasip2 --release`
//! and try it with `dagr plugin run target/wasm32-wasip2/release/<name>.wasm`.
//!
//! # What a task can do
//!
//! - Read its typed params ([`Task::Params`], deserialized with serde; a
//!   mismatch is a fatal error that names the offending field) and the
//!   outputs of upstream tasks ([`Inputs`]).
//! - Log with [`trace!`], [`debug!`], [`info!`], [`warn!`], [`error!`];
//!   stdout and stderr are captured too.
//! - Report [`progress`], check [`cancelled`], read a tenant [`secret`].
//! - Fail with [`TaskError::retryable`] (dagr retries) or
//!   [`TaskError::fatal`] (dagr does not).
//! - Use the scratch directory (`/scratch`, also the working directory),
//!   clocks, random numbers, and `wasi:http` to the hosts it was allowed.

// Lets the macro-generated code name this crate as `dagr_sdk` from inside too.
extern crate self as dagr_sdk;

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
pub use serde_json::{Map, Value, json};

#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

#[doc(hidden)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_world",
        default_bindings_module: "dagr_sdk::__bindings",
        runtime_path: "dagr_sdk::__wit_bindgen::rt",
    });
}

/// A task type. Implement it on a unit struct and [`export!`] that struct.
pub trait Task {
    /// The params, deserialized from the task's (rendered) `params`.
    type Params: DeserializeOwned;
    /// The output, serialized to JSON for downstream tasks.
    type Output: Serialize;

    /// A JSON Schema for the params. dagr validates a workflow's params
    /// against it when the workflow is applied, before anything runs.
    fn params_schema() -> Option<Value> {
        None
    }

    /// Runs one attempt.
    fn run(ctx: &Context, params: Self::Params, inputs: &Inputs) -> Result<Self::Output, TaskError>;
}

/// The attempt a task runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub tenant: String,
    pub workflow: String,
    pub run_id: String,
    pub task: String,
    /// 1 for the first attempt, 2 for the first retry, and so on.
    pub attempt: u32,
    /// The run's logical time, RFC 3339 in UTC.
    pub logical_time: String,
    /// The same for every attempt of this task in this run: use it to make
    /// side effects idempotent.
    pub idempotency_key: String,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            tenant: "default".into(),
            workflow: "test".into(),
            run_id: "run-1".into(),
            task: "task".into(),
            attempt: 1,
            logical_time: "2026-01-01T00:00:00Z".into(),
            idempotency_key: "run-1/task".into(),
        }
    }
}

/// The outputs of upstream tasks, by task name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs(Map<String, Value>);

impl Inputs {
    pub fn new(map: Map<String, Value>) -> Self {
        Inputs(map)
    }

    /// The output of upstream task `task`, if it is an input of this task.
    pub fn get(&self, task: &str) -> Option<&Value> {
        self.0.get(task)
    }

    /// The output of upstream task `task`, deserialized. A missing input or
    /// a mismatched shape is a fatal error naming the task.
    pub fn parse<T: DeserializeOwned>(&self, task: &str) -> Result<T, TaskError> {
        let value = self.get(task).ok_or_else(|| TaskError::fatal(format!("no input from task `{task}`")))?;
        serde_path_to_error::deserialize(value)
            .map_err(|e| TaskError::fatal(format!("input from task `{task}` at `{}`: {}", e.path(), e.inner())))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// All inputs as one JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }
}

/// Whether dagr may retry a failed task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Retryable,
    Fatal,
}

/// Why a task failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    kind: ErrorKind,
    message: String,
}

impl TaskError {
    /// A failure that may pass (a timeout, a 503): dagr retries if the task
    /// has retries left.
    pub fn retryable(message: impl fmt::Display) -> Self {
        TaskError { kind: ErrorKind::Retryable, message: message.to_string() }
    }

    /// A failure that will recur (bad params, a 404): dagr does not retry.
    pub fn fatal(message: impl fmt::Display) -> Self {
        TaskError { kind: ErrorKind::Fatal, message: message.to_string() }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn is_fatal(&self) -> bool {
        self.kind == ErrorKind::Fatal
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Retryable => "retryable",
            ErrorKind::Fatal => "fatal",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for TaskError {}

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Appends a line to the attempt's log. Prefer the [`info!`]-style macros.
pub fn log(level: Level, message: &str) {
    host::log(level, message)
}

/// Reports progress (0–100) with a short note.
pub fn progress(percent: u8, message: &str) {
    host::progress(percent.min(100), message)
}

/// Whether the attempt was cancelled; a long task should return early.
pub fn cancelled() -> bool {
    host::cancelled()
}

/// Reads a secret of the run's tenant. dagr redacts its value from the log.
pub fn secret(name: &str) -> Option<String> {
    host::secret(name)
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

/// Logs at trace level, `format!`-style.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::__log!($crate::Level::Trace, $($arg)+) }; }
/// Logs at debug level, `format!`-style.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::__log!($crate::Level::Debug, $($arg)+) }; }
/// Logs at info level, `format!`-style.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::__log!($crate::Level::Info, $($arg)+) }; }
/// Logs at warn level, `format!`-style.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::__log!($crate::Level::Warn, $($arg)+) }; }
/// Logs at error level, `format!`-style.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::__log!($crate::Level::Error, $($arg)+) }; }

/// Exports a [`Task`] as the component's `dagr:plugin/task` interface.
///
/// The plugin's name, version and description are the crate's
/// `CARGO_PKG_NAME`, `CARGO_PKG_VERSION` and `CARGO_PKG_DESCRIPTION`.
/// When the crate is compiled natively (for unit tests) this expands to
/// nothing.
#[macro_export]
macro_rules! export {
    ($task:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::__bindings::dagr::plugin::types as __types;

            struct __DagrPlugin;

            impl $crate::__bindings::exports::dagr::plugin::task::Guest for __DagrPlugin {
                fn describe() -> __types::PluginInfo {
                    $crate::__private::describe::<$task>(
                        ::core::env!("CARGO_PKG_NAME"),
                        ::core::env!("CARGO_PKG_VERSION"),
                        ::core::env!("CARGO_PKG_DESCRIPTION"),
                    )
                }

                fn run(
                    ctx: __types::TaskContext,
                    params: ::std::string::String,
                    inputs: ::std::string::String,
                ) -> ::core::result::Result<::std::string::String, __types::TaskError> {
                    $crate::__private::run::<$task>(ctx, params, inputs)
                }
            }

            $crate::__bindings::__export_world!(__DagrPlugin);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    use super::*;
    use crate::__bindings::dagr::plugin::types as wit;

    pub fn describe<T: Task>(name: &str, version: &str, description: &str) -> wit::PluginInfo {
        wit::PluginInfo {
            name: name.to_owned(),
            version: version.to_owned(),
            description: description.to_owned(),
            params_schema: T::params_schema().map(|s| s.to_string()),
        }
    }

    pub fn run<T: Task>(ctx: wit::TaskContext, params: String, inputs: String) -> Result<String, wit::TaskError> {
        let ctx = Context {
            tenant: ctx.tenant,
            workflow: ctx.workflow,
            run_id: ctx.run_id,
            task: ctx.task,
            attempt: ctx.attempt,
            logical_time: ctx.logical_time,
            idempotency_key: ctx.idempotency_key,
        };
        run_json::<T>(&ctx, &params, &inputs).map_err(|e| match e.kind {
            ErrorKind::Retryable => wit::TaskError::Retryable(e.message),
            ErrorKind::Fatal => wit::TaskError::Fatal(e.message),
        })
    }

    /// The whole JSON-in, JSON-out path, shared by the wasm glue and the
    /// native test harness so that tests exercise what dagr calls.
    pub fn run_json<T: Task>(ctx: &Context, params: &str, inputs: &str) -> Result<String, TaskError> {
        let mut de = serde_json::Deserializer::from_str(params);
        let params: T::Params = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            if path == "." {
                TaskError::fatal(format!("invalid params: {}", e.inner()))
            } else {
                TaskError::fatal(format!("invalid params at `{path}`: {}", e.inner()))
            }
        })?;
        let inputs: Map<String, Value> =
            serde_json::from_str(inputs).map_err(|e| TaskError::fatal(format!("inputs are not a JSON object: {e}")))?;
        let output = T::run(ctx, params, &Inputs(inputs))?;
        serde_json::to_string(&output).map_err(|e| TaskError::fatal(format!("cannot serialize the output: {e}")))
    }
}

/// The host functions: the real imports inside wasm, the test harness natively.
#[cfg(target_arch = "wasm32")]
mod host {
    use super::Level;
    use crate::__bindings::dagr::plugin::host as imports;
    use crate::__bindings::dagr::plugin::types::Level as WitLevel;

    pub fn log(level: Level, message: &str) {
        let level = match level {
            Level::Trace => WitLevel::Trace,
            Level::Debug => WitLevel::Debug,
            Level::Info => WitLevel::Info,
            Level::Warn => WitLevel::Warn,
            Level::Error => WitLevel::Error,
        };
        imports::log(level, message)
    }

    pub fn progress(percent: u8, message: &str) {
        imports::progress(percent, message)
    }

    pub fn cancelled() -> bool {
        imports::cancelled()
    }

    pub fn secret(name: &str) -> Option<String> {
        imports::secret(name)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    pub use crate::testing::host::*;
}
