//! Per-attempt limits and the resource limiter that enforces the memory cap.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Hard limits for one attempt. Every attempt gets its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Wall-clock time from the start of the attempt to its end.
    #[serde(with = "duration_ms")]
    pub deadline: Duration,
    /// Linear memory, in bytes, summed over all memories of the instance.
    pub memory_bytes: u64,
    /// Fuel (roughly: wasm instructions) the attempt may burn. Only honoured
    /// when the runtime was built with fuel metering on.
    pub fuel: Option<u64>,
    /// The largest output (JSON text) a task may return.
    pub max_output_bytes: usize,
    /// The largest log an attempt may write; past it, lines are dropped.
    pub max_log_bytes: usize,
    /// The most bytes the attempt's scratch directory may hold. Measured
    /// every [`crate::SCRATCH_CHECK`] while the attempt runs (past it, the
    /// attempt is stopped) and once more at its end (so an attempt over it
    /// never succeeds). `None`: no quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(60),
            memory_bytes: 128 << 20,
            fuel: None,
            max_output_bytes: 1 << 20,
            max_log_bytes: 1 << 20,
            scratch_bytes: None,
        }
    }
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// Raised (as a trap) when a guest grows its memory past the attempt's cap.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (the guest asked for {desired} bytes)")]
pub(crate) struct MemoryLimitExceeded {
    pub limit: u64,
    pub desired: u64,
}

/// Caps linear memory and table growth for one store.
pub(crate) struct AttemptLimiter {
    memory_limit: u64,
    memory_used: u64,
}

/// Tables are small (function references); this only stops absurd growth.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl AttemptLimiter {
    pub(crate) fn new(memory_limit: u64) -> Self {
        AttemptLimiter { memory_limit, memory_used: 0 }
    }

    /// The linear memory the guest has now (memories only grow, so also
    /// the most it had).
    pub(crate) fn memory_used(&self) -> u64 {
        self.memory_used
    }
}

impl wasmtime::ResourceLimiter for AttemptLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let grow_by = (desired - current.min(desired)) as u64;
        let total = self.memory_used + grow_by;
        if total > self.memory_limit {
            // An error (rather than `Ok(false)`) traps at once, so the reason
            // is unambiguous instead of an allocator abort later on.
            return Err(MemoryLimitExceeded { limit: self.memory_limit, desired: total }.into());
        }
        self.memory_used = total;
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
