//! What an attempt's row says about it: its state and, when it failed, why.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The state of one attempt of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    Running,
    Succeeded,
    Failed,
}

impl AttemptState {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Running => "running",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<AttemptState> {
        [AttemptState::Running, AttemptState::Succeeded, AttemptState::Failed].into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for AttemptState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt failed. The runtime's kinds plus what the control plane
/// adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    Retryable,
    Fatal,
    Trap,
    Timeout,
    MemoryLimit,
    StackOverflow,
    FuelExhausted,
    OutputTooLarge,
    InvalidOutput,
    Cancelled,
    Internal,
    /// The worker running it died or lost contact.
    WorkerLost,
    /// No worker took it (unreachable, or it refused): it never ran.
    DispatchFailed,
    /// The plugin could not be found or loaded.
    PluginUnavailable,
    /// The task's params could not be rendered (a template failed).
    BadParams,
    /// The task asks for more than its tenant may use (memory, duration,
    /// network); the message names the limit.
    TenantLimit,
    /// The task held more open files, streams or HTTP resources at once
    /// than a node allows (`[worker] max_handles`).
    HandleLimit,
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
            FailureKind::Internal => "internal",
            FailureKind::WorkerLost => "worker-lost",
            FailureKind::DispatchFailed => "dispatch-failed",
            FailureKind::PluginUnavailable => "plugin-unavailable",
            FailureKind::BadParams => "bad-params",
            FailureKind::TenantLimit => "tenant-limit",
            FailureKind::HandleLimit => "handle-limit",
        }
    }

    /// Whether another attempt may succeed. Failures that will recur
    /// (a fatal error, bad output, bad params) are not retried.
    pub fn retryable(self) -> bool {
        !matches!(
            self,
            FailureKind::Fatal
                | FailureKind::InvalidOutput
                | FailureKind::OutputTooLarge
                | FailureKind::Cancelled
                | FailureKind::BadParams
                | FailureKind::PluginUnavailable
                | FailureKind::TenantLimit
                | FailureKind::HandleLimit
        )
    }

    /// Whether the failure counts against the task's retry budget. A lost
    /// worker, an internal error or a cancellation is not the task's fault.
    pub fn charged(self) -> bool {
        !matches!(
            self,
            FailureKind::WorkerLost | FailureKind::DispatchFailed | FailureKind::Internal | FailureKind::Cancelled
        )
    }

    pub fn parse(text: &str) -> Option<FailureKind> {
        use FailureKind::*;
        [
            Retryable,
            Fatal,
            Trap,
            Timeout,
            MemoryLimit,
            StackOverflow,
            FuelExhausted,
            OutputTooLarge,
            InvalidOutput,
            Cancelled,
            Internal,
            WorkerLost,
            DispatchFailed,
            PluginUnavailable,
            BadParams,
            TenantLimit,
            HandleLimit,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_kinds_read_back_what_they_write() {
        for state in [AttemptState::Running, AttemptState::Succeeded, AttemptState::Failed] {
            assert_eq!(AttemptState::parse(state.as_str()), Some(state));
            assert_eq!(serde_json::to_value(state).unwrap(), serde_json::json!(state.as_str()));
        }
        assert_eq!(AttemptState::parse("done"), None);
        for text in ["retryable", "memory-limit", "worker-lost", "tenant-limit"] {
            let kind = FailureKind::parse(text).unwrap();
            assert_eq!(kind.as_str(), text);
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(text));
        }
        assert_eq!(FailureKind::parse("Retryable"), None);
    }
}
