//! The attempt log: host `log` calls and captured stdout/stderr, size-capped.
//!
//! A guest that writes more than the cap is not killed: further lines are
//! dropped, one marker line says how much was dropped, and the guest goes on.
//! Values of secrets the guest read are replaced by `[REDACTED]` before a line
//! is stored or forwarded.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWrite;

use crate::AttemptObserver;

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// `host.log` from the plugin.
    Plugin,
    /// The guest's stdout.
    Stdout,
    /// The guest's stderr.
    Stderr,
    /// dagr itself (limits hit, denied requests, the failure reason).
    Dagr,
}

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// One line of an attempt's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub source: LogSource,
    pub level: LogLevel,
    pub message: String,
}

impl LogLine {
    pub fn new(source: LogSource, level: LogLevel, message: impl Into<String>) -> Self {
        let at_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        LogLine { at_ms, source, level, message: message.into() }
    }
}

/// The capped, redacting log of one attempt. Cheap to clone; clones share.
#[derive(Clone)]
pub(crate) struct AttemptLog {
    inner: Arc<Mutex<LogState>>,
    sink: Option<Arc<dyn AttemptObserver>>,
}

struct LogState {
    lines: Vec<LogLine>,
    bytes: usize,
    cap: usize,
    dropped_bytes: usize,
    dropped_lines: usize,
    truncated_marker: bool,
    redactions: Vec<String>,
}

/// A line longer than this is cut; keeps one huge write from taking the whole log.
const MAX_LINE: usize = 16 * 1024;

impl AttemptLog {
    pub(crate) fn new(cap: usize, sink: Option<Arc<dyn AttemptObserver>>) -> Self {
        AttemptLog {
            inner: Arc::new(Mutex::new(LogState {
                lines: Vec::new(),
                bytes: 0,
                cap,
                dropped_bytes: 0,
                dropped_lines: 0,
                truncated_marker: false,
                redactions: Vec::new(),
            })),
            sink,
        }
    }

    /// Values added here never appear in the log from now on.
    pub(crate) fn redact(&self, secret: &str) {
        // Very short values would redact ordinary words; a secret that short
        // is not worth protecting this way.
        if secret.len() < 4 {
            return;
        }
        let mut state = self.lock();
        if !state.redactions.iter().any(|s| s == secret) {
            state.redactions.push(secret.to_owned());
            // Longest first, so that a secret containing another is replaced whole.
            state.redactions.sort_by_key(|s| std::cmp::Reverse(s.len()));
        }
    }

    pub(crate) fn push(&self, source: LogSource, level: LogLevel, message: &str) {
        let mut message = message.trim_end_matches(['\n', '\r']).to_owned();
        let mut state = self.lock();
        for secret in &state.redactions {
            if message.contains(secret.as_str()) {
                message = message.replace(secret.as_str(), "[REDACTED]");
            }
        }
        if message.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            let dropped = message.len() - cut;
            message.truncate(cut);
            message.push_str(&format!(" …[{dropped} bytes cut]"));
        }
        let size = message.len() + 1;
        if source != LogSource::Dagr && (state.truncated_marker || state.bytes + size > state.cap) {
            state.dropped_bytes += size;
            state.dropped_lines += 1;
            if !state.truncated_marker {
                state.truncated_marker = true;
                let marker = LogLine::new(
                    LogSource::Dagr,
                    LogLevel::Warn,
                    format!("log limit of {} bytes reached; further output is dropped", state.cap),
                );
                self.emit(&mut state, marker);
            }
            return;
        }
        state.bytes += size;
        let line = LogLine::new(source, level, message);
        self.emit(&mut state, line);
    }

    fn emit(&self, state: &mut LogState, line: LogLine) {
        if let Some(sink) = &self.sink {
            sink.log(&line);
        }
        state.lines.push(line);
    }

    /// Takes the lines, appending a summary if output was dropped.
    /// The lines so far (for reading what a guest said before it trapped).
    pub(crate) fn snapshot(&self) -> Vec<LogLine> {
        self.lock().lines.clone()
    }

    pub(crate) fn finish(&self) -> (Vec<LogLine>, bool) {
        let mut state = self.lock();
        let truncated = state.truncated_marker;
        if truncated {
            let summary = LogLine::new(
                LogSource::Dagr,
                LogLevel::Warn,
                format!(
                    "{} lines ({} bytes) of output were dropped by the log limit",
                    state.dropped_lines, state.dropped_bytes
                ),
            );
            self.emit(&mut state, summary);
        }
        (std::mem::take(&mut state.lines), truncated)
    }

    pub(crate) fn redact_text(&self, text: &str) -> String {
        let state = self.lock();
        let mut out = text.to_owned();
        for secret in &state.redactions {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), dagr_core::output::REDACTED);
            }
        }
        out
    }

    /// The values redacted so far, longest first.
    pub(crate) fn redactions(&self) -> Vec<String> {
        self.lock().redactions.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        // A panic while holding this lock cannot leave the state inconsistent
        // (every update is a push or an add), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Guest stdout or stderr: splits writes into lines and appends them to the
/// attempt log. Writes always succeed, so a chatty guest is truncated, never
/// killed.
pub(crate) struct CapturedOutput {
    log: AttemptLog,
    source: LogSource,
}

impl CapturedOutput {
    pub(crate) fn new(log: AttemptLog, source: LogSource) -> Self {
        CapturedOutput { log, source }
    }
}

impl wasmtime_wasi::cli::IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter { log: self.log.clone(), source: self.source, pending: Vec::new() })
    }
}

struct LineWriter {
    log: AttemptLog,
    source: LogSource,
    pending: Vec<u8>,
}

impl LineWriter {
    fn flush_lines(&mut self, all: bool) {
        let level = if self.source == LogSource::Stderr { LogLevel::Warn } else { LogLevel::Info };
        while let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=pos).collect();
            self.log.push(self.source, level, &String::from_utf8_lossy(&line));
        }
        if (all && !self.pending.is_empty()) || self.pending.len() > MAX_LINE {
            let line = std::mem::take(&mut self.pending);
            self.log.push(self.source, level, &String::from_utf8_lossy(&line));
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.pending.extend_from_slice(buf);
        self.flush_lines(false);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.flush_lines(true);
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.flush_lines(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncates_instead_of_failing() {
        let log = AttemptLog::new(20, None);
        log.push(LogSource::Plugin, LogLevel::Info, "0123456789");
        log.push(LogSource::Plugin, LogLevel::Info, "0123456789");
        log.push(LogSource::Plugin, LogLevel::Info, "more");
        let (lines, truncated) = log.finish();
        assert!(truncated);
        assert_eq!(lines[0].message, "0123456789");
        assert!(lines[1].message.contains("log limit of 20 bytes"));
        assert!(lines.last().is_some_and(|l| l.message.contains("2 lines")));
    }

    #[test]
    fn redacts_secrets_longest_first() {
        let log = AttemptLog::new(1000, None);
        log.redact("hunter2");
        log.redact("hunter2-extended");
        log.push(LogSource::Stdout, LogLevel::Info, "pw=hunter2-extended and hunter2");
        let (lines, _) = log.finish();
        assert_eq!(lines[0].message, "pw=[REDACTED] and [REDACTED]");
    }
}
