//! What language a component was written in, and how to report its traps in
//! that language's words.
//!
//! Toolchains record themselves in the `producers` custom sections of the
//! core modules inside a component (`processed-by: ComponentizeJS`,
//! `language: Rust`); componentize-py records nothing, but its modules are
//! named `libpython3.x.so` and `componentize_py_runtime.wasm`. A trap is `unreachable` in every one
//! of them: a Rust panic, an uncaught Python exception, an uncaught
//! JavaScript exception. What the guest said before trapping is in its
//! stderr lines, so the failure quotes that, and names the language.

use crate::log::{LogLine, LogSource};

/// The language a component's toolchain says it was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestLanguage {
    Rust,
    Python,
    JavaScript,
    /// Something else, or a component without producers sections.
    Other,
}

impl GuestLanguage {
    /// Reads the component's producers sections.
    pub fn detect(component: &[u8]) -> GuestLanguage {
        let mut producers = Vec::new();
        walk(component, 0, &mut producers);
        let said = |name: &str| producers.iter().any(|p| p.eq_ignore_ascii_case(name));
        let python = |p: &String| p.starts_with("libpython") || p.starts_with("componentize_py_runtime");
        if said("componentize-py") || producers.iter().any(python) {
            GuestLanguage::Python
        } else if said("JavaScript") || said("ComponentizeJS") || said("StarlingMonkey") {
            GuestLanguage::JavaScript
        } else if said("Rust") {
            GuestLanguage::Rust
        } else {
            GuestLanguage::Other
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GuestLanguage::Rust => "Rust",
            GuestLanguage::Python => "Python",
            GuestLanguage::JavaScript => "JavaScript",
            GuestLanguage::Other => "other",
        }
    }

    /// The message of a failure for an `unreachable` trap, given the
    /// attempt's log so far.
    pub(crate) fn unreachable_message(self, log: &[LogLine]) -> String {
        let stderr = log.iter().filter(|l| l.source == LogSource::Stderr).map(|l| l.message.as_str());
        match self {
            GuestLanguage::Python => match python_exception(stderr) {
                Some(exception) => {
                    format!("the Python task raised an uncaught exception: {exception} (its traceback is in the log)")
                }
                None => "the Python runtime aborted (an uncaught exception or a fatal error; see the log)".into(),
            },
            GuestLanguage::JavaScript => match javascript_exception(stderr) {
                Some(exception) => {
                    format!("the JavaScript task threw an uncaught exception: {exception} (its stack is in the log)")
                }
                None => "the JavaScript engine aborted (an uncaught exception or a fatal error; see the log)".into(),
            },
            GuestLanguage::Rust => match rust_panic(stderr) {
                Some(panic) => format!("the Rust plugin panicked: {panic}"),
                None => "the guest trapped: unreachable code reached (a Rust plugin panicked; see the log)".into(),
            },
            GuestLanguage::Other => "the guest trapped: unreachable code reached (see the log for what it said)".into(),
        }
    }
}

/// The last line of the last traceback: `ValueError: boom`.
fn python_exception<'a>(stderr: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut in_traceback = false;
    let mut last = None;
    for line in stderr {
        if line.starts_with("Traceback (most recent call last):") {
            in_traceback = true;
        } else if in_traceback && !line.is_empty() && !line.starts_with(' ') {
            last = Some(line.to_owned());
            in_traceback = false;
        }
    }
    last
}

/// What the JS SDK (or the engine) printed: `Uncaught TypeError: boom`.
fn javascript_exception<'a>(stderr: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut found = None;
    for line in stderr {
        if let Some(rest) = line.strip_prefix("Uncaught ") {
            found = Some(rest.to_owned());
        } else if found.is_none()
            && let Some(start) = line.find("(received `")
        {
            // componentize-js's own words for a thrown value that is not a
            // task-error: "invalid variant tag value `undefined` (received
            // `Error: boom`) specified for `TaskError`".
            let rest = &line[start + "(received `".len()..];
            found = rest.split('`').next().map(str::to_owned);
        }
    }
    found
}

/// The panic message of Rust's default hook: the line after
/// "panicked at file:line:col:".
fn rust_panic<'a>(stderr: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut next_is_message = false;
    for line in stderr {
        if next_is_message {
            return Some(line.to_owned());
        }
        next_is_message = line.contains(" panicked at ");
    }
    None
}

/// Collects the names in every producers section of a component or module,
/// recursing into nested modules and components.
fn walk(bytes: &[u8], depth: u32, producers: &mut Vec<String>) {
    if depth > 8 || bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return;
    }
    let component = bytes[4..8] == [0x0d, 0, 1, 0];
    let mut at = 8;
    while at < bytes.len() {
        let id = bytes[at];
        at += 1;
        let Some((size, used)) = leb_u32(&bytes[at..]) else { return };
        at += used;
        let Some(body) = bytes.get(at..at + size as usize) else { return };
        at += size as usize;
        match id {
            0 => match name(body) {
                Some(("producers", rest)) => read_producers(rest, producers),
                Some(("name", rest)) => producers.extend(module_name(rest).map(str::to_owned)),
                _ => {}
            },
            // A core module (1) or a nested component (4) inside a component.
            1 | 4 if component => walk(body, depth + 1, producers),
            _ => {}
        }
    }
}

/// The producers section: fields, each a name and (name, version) pairs.
fn read_producers(mut body: &[u8], producers: &mut Vec<String>) {
    let Some((fields, used)) = leb_u32(body) else { return };
    body = &body[used..];
    for _ in 0..fields {
        let Some((_field, rest)) = name(body) else { return };
        body = rest;
        let Some((values, used)) = leb_u32(body) else { return };
        body = &body[used..];
        for _ in 0..values {
            let Some((value, rest)) = name(body) else { return };
            let Some((_version, rest)) = name(rest) else { return };
            producers.push(value.to_owned());
            body = rest;
        }
    }
}

/// The module's own name, from the `name` section's first subsection:
/// componentize-py links `libpython3.x.so` and `componentize_py_runtime.wasm`
/// but records no producers of its own.
fn module_name(body: &[u8]) -> Option<&str> {
    let (&id, rest) = body.split_first()?;
    if id != 0 {
        return None;
    }
    let (size, used) = leb_u32(rest)?;
    let (module, _) = name(rest.get(used..used + size as usize)?)?;
    Some(module)
}

fn name(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let (len, used) = leb_u32(bytes)?;
    let text = bytes.get(used..used + len as usize)?;
    Some((std::str::from_utf8(text).ok()?, &bytes[used + len as usize..]))
}

fn leb_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u32 = 0;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::LogLevel;

    fn stderr(lines: &[&str]) -> Vec<LogLine> {
        lines.iter().map(|l| LogLine::new(LogSource::Stderr, LogLevel::Warn, *l)).collect()
    }

    #[test]
    fn python_tracebacks_give_their_exception() {
        let log = stderr(&[
            "Traceback (most recent call last):",
            "  File \"/0/app.py\", line 16, in run",
            "ValueError: boom requested",
            "",
            "thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:",
            "Python function threw an unexpected exception",
        ]);
        assert_eq!(
            GuestLanguage::Python.unreachable_message(&log),
            "the Python task raised an uncaught exception: ValueError: boom requested (its traceback is in the log)"
        );
    }

    #[test]
    fn javascript_exceptions_are_quoted() {
        let sdk = stderr(&["Uncaught TypeError: boom", "    at run@main.js:1:1"]);
        assert!(GuestLanguage::JavaScript.unreachable_message(&sdk).contains("uncaught exception: TypeError: boom"));
        let bare = stderr(&["invalid variant tag value `undefined` (received `Error: x`) specified for `TaskError`"]);
        assert!(GuestLanguage::JavaScript.unreachable_message(&bare).contains("uncaught exception: Error: x"));
    }

    #[test]
    fn rust_panics_give_their_message() {
        let log = stderr(&["thread '<unnamed>' panicked at src/lib.rs:3:5:", "boom", "note: run with …"]);
        assert_eq!(GuestLanguage::Rust.unreachable_message(&log), "the Rust plugin panicked: boom");
    }

    #[test]
    fn garbage_has_no_producers() {
        assert_eq!(GuestLanguage::detect(b"\0asm\x0d\0\x01\0\xff\xff"), GuestLanguage::Other);
        assert_eq!(GuestLanguage::detect(b""), GuestLanguage::Other);
    }
}
