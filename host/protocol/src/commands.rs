//! Commands: durable requests the API writes for the engine (kill a run,
//! rerun a task, …), consumed once by the master that owns the run.
//!
//! One enum for both sides: the API encodes a [`Command`] into the store's
//! `kind` and `payload` columns, the engine decodes it back. No command
//! name or JSON key is spelled anywhere else.

use serde::{Deserialize, Serialize};

/// What a command asks of the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// A run was created: admit it (or queue it behind its workflow's
    /// `max_active_runs`).
    Admit,
    Kill,
    Pause,
    Resume,
    MarkFailed,
    /// Rerun the failed, upstream-failed and killed tasks.
    RerunFailed {
        /// Re-flush the runs this one released too (transitively), each
        /// once this one's new state is durable: see [`Command::Reflush`].
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        downstream: bool,
    },
    /// Rerun one task, and everything downstream of it if asked.
    RerunTask {
        task: String,
        #[serde(default)]
        downstream: bool,
    },
    /// Mark a failed task succeeded so that its downstream proceeds.
    ForceSuccess {
        task: String,
    },
    /// An upstream instance the run (or one of its tasks) waits for changed
    /// state: look again.
    Wake,
    /// Run a finished run again from scratch, waiting for its upstream
    /// instances again (a re-flush after an upstream rerun).
    Reflush {
        /// Re-flush the runs this one released too (transitively). The
        /// engine writes their commands in the transaction that takes this
        /// run out of its end state, so that none of them can judge its
        /// upstream while this run still reads as finished.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        downstream: bool,
    },
    /// The child run of the run's task (by index) ended.
    ChildEnded {
        task: i64,
        child: String,
        succeeded: bool,
    },
}

/// A stored command that does not decode (written by a newer or broken
/// writer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command `{kind}` with payload {payload} is not one this engine knows: {reason}")]
pub struct UnknownCommand {
    pub kind: String,
    pub payload: String,
    pub reason: String,
}

impl Command {
    /// The store's `kind` column.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Admit => "admit",
            Command::Kill => "kill",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::MarkFailed => "mark_failed",
            Command::RerunFailed { .. } => "rerun_failed",
            Command::RerunTask { .. } => "rerun_task",
            Command::ForceSuccess { .. } => "force_success",
            Command::Wake => "wake",
            Command::Reflush { .. } => "reflush",
            Command::ChildEnded { .. } => "child_ended",
        }
    }

    /// The store's `payload` column: the command's fields as a JSON object
    /// (`{}` for those without).
    pub fn payload(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.remove("kind");
        }
        value.to_string()
    }

    /// The command stored as `kind` and `payload`.
    pub fn decode(kind: &str, payload: &str) -> Result<Command, UnknownCommand> {
        let unknown = |reason: String| UnknownCommand { kind: kind.into(), payload: payload.into(), reason };
        let mut value: serde_json::Value = match payload.trim() {
            "" => serde_json::json!({}),
            text => serde_json::from_str(text).map_err(|e| unknown(e.to_string()))?,
        };
        let map = value.as_object_mut().ok_or_else(|| unknown("the payload is not a JSON object".into()))?;
        map.insert("kind".into(), serde_json::Value::String(kind.into()));
        serde_json::from_value(value).map_err(|e| unknown(e.to_string()))
    }

    /// The audit log's name for the command.
    pub fn audit_action(&self) -> &'static str {
        match self {
            Command::Admit => "run.admit",
            Command::Kill => "run.kill",
            Command::Pause => "run.pause",
            Command::Resume => "run.resume",
            Command::MarkFailed => "run.mark_failed",
            Command::RerunFailed { .. } => "run.rerun",
            Command::RerunTask { .. } => "task.rerun",
            Command::ForceSuccess { .. } => "task.force_success",
            Command::Wake => "run.wake",
            Command::Reflush { .. } => "run.reflush",
            Command::ChildEnded { .. } => "task.child_ended",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_command_round_trips_through_kind_and_payload() {
        let all = [
            Command::Admit,
            Command::Kill,
            Command::Pause,
            Command::Resume,
            Command::MarkFailed,
            Command::RerunFailed { downstream: false },
            Command::RerunFailed { downstream: true },
            Command::RerunTask { task: "load".into(), downstream: true },
            Command::ForceSuccess { task: "load".into() },
            Command::Wake,
            Command::Reflush { downstream: false },
            Command::Reflush { downstream: true },
            Command::ChildEnded { task: 3, child: "r2".into(), succeeded: true },
        ];
        for command in all {
            let (kind, payload) = (command.kind(), command.payload());
            assert_eq!(Command::decode(kind, &payload).unwrap(), command, "{kind} {payload}");
        }
        assert_eq!(Command::Kill.payload(), "{}");
        // Rows written before commands were typed: `admit` with '{}', a
        // rerun with `downstream` left out.
        assert_eq!(Command::decode("admit", "{}").unwrap(), Command::Admit);
        assert_eq!(
            Command::decode("rerun_task", r#"{"task":"a"}"#).unwrap(),
            Command::RerunTask { task: "a".into(), downstream: false }
        );
        assert_eq!(Command::decode("reflush", "{}").unwrap(), Command::Reflush { downstream: false });
        assert_eq!(Command::Reflush { downstream: false }.payload(), "{}");
    }

    #[test]
    fn unknown_commands_say_what_they_are() {
        let e = Command::decode("explode", "{}").unwrap_err();
        assert!(e.to_string().contains("explode"), "{e}");
        assert!(Command::decode("force_success", "{}").is_err(), "a task is required");
        assert!(Command::decode("kill", "[1]").is_err());
    }
}
