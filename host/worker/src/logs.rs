//! Writing a batch of log lines so that one line the database refuses
//! cannot block the lines of every other attempt behind it.
//!
//! The [`LogWriter`](crate::LogWriter) is shared by every attempt of a
//! worker. [`write_all`] retries a batch that failed for a passing reason
//! (the database unreachable, busy) with backoff, as before; a batch the
//! database *refused* (its data) is split in halves, again and again, until
//! the refused line is alone. That line is stored in a safe form (control
//! characters escaped, cut to [`SAFE_MESSAGE_BYTES`]); if even that is
//! refused, it is replaced by a note saying a line was dropped, and if the
//! note is refused too, the line is dropped and the worker's own log says
//! so. Everything else in the batch goes through.

use std::future::Future;
use std::time::Duration;

use dagr_store::LogRow;

/// The most bytes of a refused line kept in its safe form.
pub const SAFE_MESSAGE_BYTES: usize = 16 << 10;

/// Writes every line, splitting around the ones the store refuses.
/// `refused` tells a refusal of the data from a passing failure.
pub async fn write_all<A, F, E>(lines: Vec<LogRow>, append: A, refused: fn(&E) -> bool)
where
    A: Fn(Vec<LogRow>) -> F,
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    // Batches still to write, the next one last: no recursion.
    let mut pending = vec![lines];
    while let Some(batch) = pending.pop() {
        if batch.is_empty() {
            continue;
        }
        let mut delay = Duration::from_millis(50);
        loop {
            match append(batch.clone()).await {
                Ok(()) => break,
                Err(e) if refused(&e) => {
                    if batch.len() > 1 {
                        let mut first = batch;
                        let second = first.split_off(first.len() / 2);
                        pending.push(second);
                        pending.push(first);
                    } else if let Some(line) = batch.into_iter().next() {
                        write_refused(line, &append, refused, &e).await;
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write logs; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// One line the store refused: its safe form, else a note, else nothing.
async fn write_refused<A, F, E>(line: LogRow, append: &A, refused: fn(&E) -> bool, error: &E)
where
    A: Fn(Vec<LogRow>) -> F,
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let (run, task, attempt, seq) = (line.run_id.clone(), line.task_idx, line.attempt, line.seq);
    let safe = LogRow { message: safe_message(&line.message), ..line.clone() };
    let note = LogRow {
        source: "dagr".into(),
        level: "warn".into(),
        // Not the error's text: it may quote the very data refused.
        message: format!(
            "a log line of {} bytes could not be stored (the database refused it) and was dropped",
            line.message.len()
        ),
        ..line
    };
    tracing::warn!(%error, %run, task, attempt, seq, "the database refused a log line; storing it in a safe form");
    for candidate in [safe, note] {
        // A passing failure here is retried by the next flush's lines
        // anyway; this line gets one try per form.
        match append(vec![candidate]).await {
            Ok(()) => return,
            Err(e) if refused(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, %run, task, attempt, seq, "cannot write a refused log line's safe form");
                return;
            }
        }
    }
    tracing::warn!(%error, %run, task, attempt, seq, "a log line was refused by the database and dropped");
}

/// A message with its control characters (but tab) escaped as `\u{…}`,
/// cut to [`SAFE_MESSAGE_BYTES`].
pub fn safe_message(message: &str) -> String {
    let mut out = String::new();
    for c in message.chars() {
        if out.len() >= SAFE_MESSAGE_BYTES {
            out.push_str(" [cut]");
            break;
        }
        if c.is_control() && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn line(seq: i64, message: &str) -> LogRow {
        LogRow {
            run_id: "r".into(),
            task_idx: 0,
            attempt: 1,
            seq,
            at: 0,
            source: "plugin".into(),
            level: "info".into(),
            message: message.into(),
        }
    }

    /// A store that refuses any batch holding a message with `bad`, and
    /// keeps the rest (pure logic: a list behind a lock).
    struct Picky {
        stored: Mutex<Vec<LogRow>>,
        calls: Mutex<usize>,
        bad: &'static str,
    }

    impl Picky {
        fn append(&self, lines: Vec<LogRow>) -> std::future::Ready<Result<(), String>> {
            *self.calls.lock().unwrap() += 1;
            if lines.iter().any(|l| l.message.contains(self.bad)) {
                return std::future::ready(Err(format!("refused: {}", self.bad)));
            }
            self.stored.lock().unwrap().extend(lines);
            std::future::ready(Ok(()))
        }
    }

    fn always(_: &String) -> bool {
        true
    }

    #[tokio::test]
    async fn a_refused_line_is_stored_safely_and_the_rest_goes_through() {
        let store = Picky { stored: Mutex::default(), calls: Mutex::default(), bad: "\u{7}" };
        let lines: Vec<LogRow> =
            (1..=1000).map(|i| line(i, if i == 637 { "bell \u{7} here" } else { "fine" })).collect();
        write_all(lines, |l| store.append(l), always).await;
        let stored = store.stored.lock().unwrap();
        assert_eq!(stored.len(), 1000, "every line, the refused one in its safe form");
        let refused = stored.iter().find(|l| l.seq == 637).unwrap();
        assert_eq!(refused.message, "bell \\u{7} here");
        // Halving finds one line among 1000 in about 2 × log2(1000) tries.
        assert!(*store.calls.lock().unwrap() < 40, "{} calls", store.calls.lock().unwrap());
    }

    #[tokio::test]
    async fn a_line_whose_safe_form_is_refused_too_becomes_a_note() {
        let store = Picky { stored: Mutex::default(), calls: Mutex::default(), bad: "poison" };
        write_all(vec![line(1, "ok"), line(2, "poison"), line(3, "ok too")], |l| store.append(l), always).await;
        let stored = store.stored.lock().unwrap();
        let messages: Vec<&str> = stored.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        let note = stored.iter().find(|l| l.seq == 2).unwrap();
        assert_eq!(note.source, "dagr");
        assert!(note.message.starts_with("a log line of 6 bytes could not be stored"), "{}", note.message);
    }

    #[test]
    fn safe_messages_are_cut() {
        let long = "é".repeat(SAFE_MESSAGE_BYTES);
        assert!(safe_message(&long).len() <= SAFE_MESSAGE_BYTES + 8);
        assert_eq!(safe_message("a\0b\tc"), "a\\u{0}b\tc");
    }
}
