//! An attempt's inputs and outputs: what a task is given to run with, and
//! the report of how it went.

use super::*;

/// What a task sees of the attempt it runs in (the WIT `task-context`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptContext {
    pub tenant: String,
    pub workflow: String,
    pub run_id: String,
    pub task: String,
    pub attempt: u32,
    /// RFC 3339, UTC.
    pub logical_time: String,
    pub idempotency_key: String,
    /// The run's workflow's grade (0–3), for `host.grade()`.
    #[serde(default)]
    pub grade: u8,
}

impl AttemptContext {
    /// A context for a one-off execution outside any workflow (the CLI's
    /// `plugin run`, tests).
    pub fn adhoc(task: &str) -> Self {
        let run_id = format!("adhoc-{}", uuid_like());
        AttemptContext {
            tenant: "default".into(),
            workflow: "adhoc".into(),
            idempotency_key: format!("{run_id}/{task}"),
            run_id,
            task: task.into(),
            attempt: 1,
            logical_time: "1970-01-01T00:00:00Z".into(),
            grade: 0,
        }
    }
}

fn uuid_like() -> String {
    let bytes: [u8; 8] = rand::random();
    hex::encode(bytes)
}

/// Secrets a plugin may read through `host.secret`.
pub trait SecretSource: Send + Sync {
    fn secret(&self, name: &str) -> Option<String>;
}

impl SecretSource for HashMap<String, String> {
    fn secret(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// Watches an attempt while it runs (to let people follow its log).
/// Lines arrive capped and redacted.
pub trait AttemptObserver: Send + Sync {
    fn log(&self, line: &LogLine);
    fn progress(&self, _percent: u8, _message: &str) {}
}

/// Everything needed to run one attempt.
pub struct Execution {
    pub context: AttemptContext,
    /// The task's params, JSON text.
    pub params: String,
    /// Upstream outputs keyed by task name, a JSON object as text.
    pub inputs: String,
    pub limits: Limits,
    pub network: NetworkPolicy,
    pub secrets: Option<Arc<dyn SecretSource>>,
    /// The directory the guest sees as `/scratch` (and `.`). `None` gives the
    /// attempt an empty directory of the runtime's: it is removed afterwards,
    /// or, if the attempt left it empty, kept for a later attempt. A plugin
    /// that does not import `wasi:filesystem/preopens` cannot reach any
    /// directory and is given none.
    pub scratch_dir: Option<PathBuf>,
    /// Cancelling it stops the attempt, which then fails with
    /// [`FailureKind::Cancelled`]. The task first sees `cancelled()` turn
    /// true and gets a short grace period to return by itself.
    pub cancel: CancellationToken,
    pub observer: Option<Arc<dyn AttemptObserver>>,
    /// Checked on every epoch tick and before every outgoing request: once
    /// it returns false the attempt stops at once, with no grace. A worker
    /// passes "my lease is still safe", so that a worker resuming from a
    /// freeze (SIGSTOP, a long GC pause of the host) stops its guests before
    /// they can act, instead of waiting for its coordinator to notice.
    pub keep_going: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl Execution {
    pub fn new(context: AttemptContext, params: impl Into<String>) -> Self {
        Execution {
            context,
            params: params.into(),
            inputs: "{}".into(),
            limits: Limits::default(),
            network: NetworkPolicy::deny_all(),
            secrets: None,
            scratch_dir: None,
            cancel: CancellationToken::new(),
            observer: None,
            keep_going: None,
        }
    }
}

impl fmt::Debug for Execution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Execution")
            .field("context", &self.context)
            .field("limits", &self.limits)
            .field("network", &self.network)
            .field("scratch_dir", &self.scratch_dir)
            .finish_non_exhaustive()
    }
}

/// Why an attempt did not produce an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The task returned `task-error::retryable`.
    Retryable,
    /// The task returned `task-error::fatal`.
    Fatal,
    /// The guest trapped: a panic, `unreachable`, an out-of-bounds access.
    Trap,
    /// The wall-clock deadline passed.
    Timeout,
    /// The guest tried to grow its memory past the cap.
    MemoryLimit,
    /// The guest's call stack overflowed.
    StackOverflow,
    /// The attempt ran out of fuel.
    FuelExhausted,
    /// The output is larger than the cap.
    OutputTooLarge,
    /// The output is not JSON.
    InvalidOutput,
    /// The attempt was cancelled from outside.
    Cancelled,
    /// The scratch directory grew past [`Limits::scratch_bytes`].
    ScratchQuota,
    /// The guest held more resources at once than
    /// [`RuntimeConfig::max_handles`] allows.
    HandleLimit,
    /// Something went wrong in dagr (e.g. no pool slot, a scratch directory
    /// that could not be created). Not the plugin's fault.
    Internal,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Retryable => "retryable",
            FailureKind::Fatal => "fatal",
            FailureKind::Trap => "trap",
            FailureKind::Timeout => "timeout",
            FailureKind::MemoryLimit => "memory-limit",
            FailureKind::StackOverflow => "stack-overflow",
            FailureKind::FuelExhausted => "fuel-exhausted",
            FailureKind::OutputTooLarge => "output-too-large",
            FailureKind::InvalidOutput => "invalid-output",
            FailureKind::Cancelled => "cancelled",
            FailureKind::ScratchQuota => "scratch-quota",
            FailureKind::HandleLimit => "handle-limit",
            FailureKind::Internal => "internal",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed attempt: what kind of failure, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure { kind, message: message.into() }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// The result of one attempt.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    /// The output (JSON text), or why there is none.
    pub result: std::result::Result<String, Failure>,
    pub log: Vec<LogLine>,
    /// Whether the log hit its cap.
    pub log_truncated: bool,
    /// The last progress the task reported.
    pub progress: Option<(u8, String)>,
    /// From the start of the attempt (after it got a slot) to its end.
    pub elapsed: Duration,
    /// Fuel burnt, when fuel metering is on.
    pub fuel_consumed: Option<u64>,
    /// How long making the instance took (`None`: it was not made).
    pub instantiate: Option<Duration>,
    /// The most linear memory the guest had (bytes).
    pub memory_bytes: u64,
}

/// What a plugin says about itself (the WIT `plugin-info`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub description: String,
    pub params_schema: Option<serde_json::Value>,
}
