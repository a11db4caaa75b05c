//! What an attempt's end becomes: its report, and a trap or an error
//! classified into a failure that names what the guest did.

use super::*;
pub(crate) fn failed_before_start(failure: Failure) -> AttemptReport {
    AttemptReport {
        result: Err(failure),
        log: Vec::new(),
        log_truncated: false,
        progress: None,
        elapsed: Duration::ZERO,
        fuel_consumed: None,
        instantiate: None,
        memory_bytes: 0,
    }
}

pub(crate) fn finish(
    log: &AttemptLog,
    result: std::result::Result<String, Failure>,
    started: Instant,
    progress: Option<(u8, String)>,
    fuel_consumed: Option<u64>,
) -> AttemptReport {
    if let Err(failure) = &result {
        let level = match failure.kind {
            FailureKind::Retryable | FailureKind::Cancelled => LogLevel::Warn,
            _ => LogLevel::Error,
        };
        log.push(LogSource::Dagr, level, &format!("attempt failed ({}): {}", failure.kind, failure.message));
    }
    let (lines, log_truncated) = log.finish();
    AttemptReport {
        result,
        log: lines,
        log_truncated,
        progress,
        elapsed: started.elapsed(),
        fuel_consumed,
        instantiate: None,
        memory_bytes: 0,
    }
}

/// What a cancelled attempt reports, given how its call ended: always
/// [`FailureKind::Cancelled`], saying whether the task stopped by itself.
pub(crate) fn cancelled_failure(result: std::result::Result<String, Failure>) -> Failure {
    match result {
        Ok(_) => Failure::new(
            FailureKind::Cancelled,
            "the attempt was cancelled; the task finished anyway, and its output was discarded",
        ),
        Err(failure) if matches!(failure.kind, FailureKind::Cancelled | FailureKind::Timeout) => Failure::new(
            FailureKind::Cancelled,
            format!("the attempt was cancelled and stopped (it did not return by itself within {CANCEL_GRACE:?})"),
        ),
        Err(failure) if matches!(failure.kind, FailureKind::Retryable | FailureKind::Fatal) => Failure::new(
            FailureKind::Cancelled,
            format!("the attempt was cancelled; the task stopped by itself: {}", failure.message),
        ),
        Err(failure) => Failure::new(FailureKind::Cancelled, format!("the attempt was cancelled; then {failure}")),
    }
}

pub(crate) fn check_output(
    log: &AttemptLog,
    output: String,
    limits: &Limits,
    max_depth: usize,
) -> std::result::Result<String, Failure> {
    let output_limits = dagr_core::output::OutputLimits { max_bytes: limits.max_output_bytes, max_depth };
    dagr_core::output::accept(output, &log.redactions(), &output_limits).map_err(|e| {
        let kind = if e.is_limit() { FailureKind::OutputTooLarge } else { FailureKind::InvalidOutput };
        Failure::new(kind, e.to_string())
    })
}

pub(crate) fn classify_error(
    error: &wasmtime::Error,
    limits: &Limits,
    log: &AttemptLog,
    language: GuestLanguage,
    config: &RuntimeConfig,
) -> Failure {
    for cause in error.chain() {
        if let Some(interrupted) = cause.downcast_ref::<Interrupted>() {
            return match interrupted {
                Interrupted::Deadline => Failure::new(
                    FailureKind::Timeout,
                    format!("the attempt did not finish within its deadline of {:?}", limits.deadline),
                ),
                Interrupted::Cancelled => Failure::new(FailureKind::Cancelled, "the attempt was cancelled"),
                Interrupted::Fenced => Failure::new(
                    FailureKind::Cancelled,
                    "the attempt was stopped: its worker may no longer act (its lease was lost)",
                ),
            };
        }
        if let Some(exceeded) = cause.downcast_ref::<MemoryLimitExceeded>() {
            return Failure::new(FailureKind::MemoryLimit, exceeded.to_string());
        }
        if let Some(ResourceTableError::Full) = cause.downcast_ref::<ResourceTableError>() {
            return Failure::new(
                FailureKind::HandleLimit,
                format!(
                    "the task held too many open files, streams or HTTP resources at once \
                     (limit [worker] max_handles = {})",
                    config.max_handles
                ),
            );
        }
        if let Some(wasmtime_wasi_http::FieldMapError::TotalSizeTooBig) =
            cause.downcast_ref::<wasmtime_wasi_http::FieldMapError>()
        {
            return Failure::new(
                FailureKind::MemoryLimit,
                format!(
                    "a set of HTTP headers (fields) grew past what the host holds for one \
                     (limit [worker] http_field_bytes = {} bytes)",
                    config.http_field_bytes
                ),
            );
        }
        if let Some(trap) = cause.downcast_ref::<Trap>() {
            // The wasm backtrace helps plugin authors; it goes to the log only.
            log.push(LogSource::Dagr, LogLevel::Debug, &format!("{error:?}"));
            return match trap {
                Trap::StackOverflow => Failure::new(FailureKind::StackOverflow, "the guest's call stack overflowed"),
                Trap::OutOfFuel => Failure::new(FailureKind::FuelExhausted, "the attempt ran out of fuel"),
                Trap::UnreachableCodeReached => {
                    Failure::new(FailureKind::Trap, language.unreachable_message(&log.snapshot()))
                }
                Trap::AllocationTooLarge => Failure::new(
                    FailureKind::MemoryLimit,
                    format!("memory limit of {} bytes exceeded", limits.memory_bytes),
                ),
                other => Failure::new(FailureKind::Trap, format!("the guest trapped: {other}")),
            };
        }
    }
    let message = error_chain(error);
    if message.contains("pool") && message.contains("concurrent") {
        return Failure::new(FailureKind::Internal, format!("no instance slot available: {message}"));
    }
    Failure::new(FailureKind::Trap, format!("the guest failed: {message}"))
}

pub(crate) fn error_chain(error: &wasmtime::Error) -> String {
    error.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ")
}

/// `future`'s output, or the message of a panic while it was polled.
pub(crate) async fn caught<F: std::future::Future>(future: F) -> std::result::Result<F::Output, String> {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(output)) => std::task::Poll::Ready(Ok(output)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(panic) => std::task::Poll::Ready(Err(panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()))),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::caught;

    #[tokio::test]
    async fn a_panic_while_polled_is_caught_with_its_message() {
        assert_eq!(caught(async { 7 }).await, Ok(7));
        let after_a_yield = caught(async {
            tokio::task::yield_now().await;
            if std::hint::black_box(true) {
                panic!("the host code failed at {}", 42);
            }
            7
        });
        assert_eq!(after_a_yield.await, Err("the host code failed at 42".to_owned()));
        assert_eq!(caught(async { std::panic::panic_any(5u8) }).await, Err("a panic without a message".to_owned()));
        let literal: Result<(), String> = caught(async { panic!("literal") }).await;
        assert_eq!(literal, Err("literal".to_owned()));
    }
}
