//! Limits on the documents dagr takes from tenants — workflow definitions,
//! request bodies, task params, plugins' outputs: how deeply they nest, and
//! how large a YAML document grows once its aliases are expanded.
//!
//! A document is checked *before* a parser builds anything from it, in one
//! pass that does not recurse and stops at the first excess:
//!
//! - [`check_json`] scans JSON text for its nesting depth (a byte scan, no
//!   allocation). JSON has no aliases, so its expanded size is its length,
//!   which the caller bounds when it reads the body.
//! - [`check_yaml`] walks the YAML parser's events (saphyr), counting the
//!   depth and the bytes the document stands for: an alias adds what its
//!   anchor holds, so one anchor repeated by many aliases (the "billion
//!   laughs") is refused after a few hundred events instead of being
//!   expanded. The same pass reports YAML syntax errors with their location;
//!   only a document it accepted is handed to serde_yaml, whose own scanner
//!   takes quadratic time on deep flow nesting.
//!
//! Every error names the limit and the configuration key that sets it
//! ([`DocumentLimits::depth_key`], [`DocumentLimits::bytes_key`]).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScanError};

/// The deepest nesting any limit may allow: serde_json refuses a 128th
/// level of its own, and a task's output is nested once more as its
/// dependents' `inputs`; past this the parsers' own errors would show
/// instead of dagr's.
pub const MAX_DEPTH_CAP: usize = 120;

/// The default nesting limit of tenants' documents.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// How deep and how large a document may be, and the configuration keys
/// that say so (named in every error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocumentLimits {
    /// Most levels of nested sequences and mappings (arrays and objects);
    /// a scalar at the top is level 0, `[1]` is 1, `{"a": [1]}` is 2.
    pub max_depth: usize,
    /// The configuration key of `max_depth`, e.g. `[api] max_depth`.
    pub depth_key: &'static str,
    /// Most bytes the document may stand for once aliases are expanded
    /// (roughly the size of its JSON form).
    pub max_bytes: usize,
    /// The configuration key of `max_bytes`, e.g. `[api] max_body`.
    pub bytes_key: &'static str,
}

impl Default for DocumentLimits {
    fn default() -> Self {
        DocumentLimits {
            max_depth: DEFAULT_MAX_DEPTH,
            depth_key: "[api] max_depth",
            max_bytes: 4 << 20,
            bytes_key: "[api] max_body",
        }
    }
}

/// Why a document was refused before it was parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// It nests deeper than allowed.
    #[error(
        "the document nests more than {limit} levels deep (at line {line} column {column}), which exceeds the \
         nesting limit of {limit} ({key})"
    )]
    TooDeep {
        /// Where the excess starts (`tasks[0].params.v`), as far as known.
        location: String,
        line: usize,
        column: usize,
        limit: usize,
        key: &'static str,
    },
    /// Expanded, it would be larger than allowed.
    #[error(
        "the document expands to more than {limit} bytes (an alias repeats everything its anchor holds), which \
         exceeds the size limit of {limit} bytes ({key})"
    )]
    TooLarge {
        /// Where the excess was reached, as far as known.
        location: String,
        limit: usize,
        key: &'static str,
    },
    /// It is not YAML (found by the same pass, with where).
    #[error("{message}")]
    Syntax { location: String, message: String },
}

impl DocumentError {
    /// Where in the document the problem is; empty for the document itself.
    pub fn location(&self) -> &str {
        match self {
            DocumentError::TooDeep { location, .. }
            | DocumentError::TooLarge { location, .. }
            | DocumentError::Syntax { location, .. } => location,
        }
    }

    /// Whether this is a size limit (answered with 413 by the API), rather
    /// than a malformed or too deeply nested document (400).
    pub fn is_size(&self) -> bool {
        matches!(self, DocumentError::TooLarge { .. })
    }
}

/// Checks the nesting depth of JSON text. Brackets inside strings do not
/// count; malformed JSON is left for the parser to report.
pub fn check_json(text: &[u8], limits: &DocumentLimits) -> Result<(), DocumentError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limits.max_depth {
                    let (line, column) = line_and_column(text, at);
                    return Err(DocumentError::TooDeep {
                        location: String::new(),
                        line,
                        column,
                        limit: limits.max_depth,
                        key: limits.depth_key,
                    });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// 1-based line and column (in bytes) of byte `at`.
fn line_and_column(text: &[u8], at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = at - before.iter().rposition(|&b| b == b'\n').map_or(0, |nl| nl + 1) + 1;
    (line, column)
}

/// What the check keeps per open sequence or mapping.
struct Frame {
    /// The anchor of this node (0: none).
    anchor: usize,
    /// The expanded size when the node started.
    start: usize,
    /// Levels of nesting from this node down (1 for an empty one).
    height: usize,
    /// Where the next child goes, for error locations.
    slot: Slot,
}

enum Slot {
    /// The index of the next element.
    Sequence(usize),
    /// A mapping: the last key seen, and whether the next node is a key.
    Mapping { key: String, at_key: bool },
}

/// What an anchor stands for: its expanded size and its height.
#[derive(Clone, Copy)]
struct Anchored {
    size: usize,
    height: usize,
}

/// Bytes a scalar stands for: its text, quotes and a separator.
fn scalar_size(text: &str) -> usize {
    text.len() + 3
}

/// Bytes a sequence or mapping stands for, besides its children.
const COLLECTION_SIZE: usize = 2;

struct YamlCheck<'l> {
    limits: &'l DocumentLimits,
    stack: Vec<Frame>,
    anchors: HashMap<usize, Anchored>,
    size: usize,
}

impl YamlCheck<'_> {
    /// The location of the node being read, in serde_path_to_error's form
    /// (`tasks[0].params.list`).
    fn location(&self) -> String {
        let mut out = String::new();
        let last = self.stack.len().saturating_sub(1);
        for (i, frame) in self.stack.iter().enumerate() {
            match &frame.slot {
                // The element being read, unless the error is in the
                // sequence itself (between its elements).
                Slot::Sequence(index) if i < last => out.push_str(&format!("[{index}]")),
                Slot::Sequence(_) => {}
                Slot::Mapping { key, at_key: false } => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
                Slot::Mapping { at_key: true, .. } => break,
            }
        }
        out
    }

    fn grow(&mut self, by: usize) -> Result<(), DocumentError> {
        self.size = self.size.saturating_add(by);
        if self.size > self.limits.max_bytes {
            return Err(DocumentError::TooLarge {
                location: self.location(),
                limit: self.limits.max_bytes,
                key: self.limits.bytes_key,
            });
        }
        Ok(())
    }

    fn too_deep(&self, line: usize, column: usize) -> DocumentError {
        DocumentError::TooDeep {
            location: self.location(),
            line,
            column,
            limit: self.limits.max_depth,
            key: self.limits.depth_key,
        }
    }

    /// A node of `height` levels was read where the innermost open
    /// collection expects its next child; `key` is its text if a scalar.
    fn finished(&mut self, height: usize, key: Option<&str>) {
        if let Some(parent) = self.stack.last_mut() {
            parent.height = parent.height.max(height + 1);
            match &mut parent.slot {
                Slot::Sequence(index) => *index += 1,
                Slot::Mapping { key: last, at_key } => {
                    if *at_key {
                        *last = key.unwrap_or("?").to_owned();
                    }
                    *at_key = !*at_key;
                }
            }
        }
    }

    fn open(&mut self, anchor: usize, mapping: bool, line: usize, column: usize) -> Result<(), DocumentError> {
        if self.stack.len() + 1 > self.limits.max_depth {
            return Err(self.too_deep(line, column));
        }
        let start = self.size;
        self.grow(COLLECTION_SIZE)?;
        let slot = if mapping { Slot::Mapping { key: String::new(), at_key: true } } else { Slot::Sequence(0) };
        self.stack.push(Frame { anchor, start, height: 1, slot });
        Ok(())
    }

    fn close(&mut self) {
        if let Some(frame) = self.stack.pop() {
            if frame.anchor != 0 {
                let size = self.size - frame.start;
                self.anchors.insert(frame.anchor, Anchored { size, height: frame.height });
            }
            self.finished(frame.height, None);
        }
    }

    fn alias(&mut self, anchor: usize, line: usize, column: usize) -> Result<(), DocumentError> {
        if self.stack.iter().any(|f| f.anchor == anchor) {
            return Err(DocumentError::Syntax {
                location: self.location(),
                message: format!(
                    "an alias refers to an anchor that contains it (a recursive alias) at line {line} column {column}"
                ),
            });
        }
        let Some(anchored) = self.anchors.get(&anchor).copied() else {
            return Err(DocumentError::Syntax {
                location: self.location(),
                message: format!("an alias refers to an unknown anchor at line {line} column {column}"),
            });
        };
        if self.stack.len() + anchored.height > self.limits.max_depth {
            return Err(self.too_deep(line, column));
        }
        self.grow(anchored.size)?;
        self.finished(anchored.height, None);
        Ok(())
    }

    fn syntax(&self, error: &ScanError) -> DocumentError {
        let mark = error.marker();
        if error.info() == "recursion limit exceeded" {
            // The scanner's own bound on flow nesting (255), above any of
            // ours: it reads ahead, so it may see it before we do.
            return self.too_deep(mark.line(), mark.col() + 1);
        }
        DocumentError::Syntax {
            location: self.location(),
            message: format!("{} at line {} column {}", error.info(), mark.line(), mark.col() + 1),
        }
    }
}

/// Checks a YAML document (or stream) for depth, expanded size and syntax.
pub fn check_yaml(text: &str, limits: &DocumentLimits) -> Result<(), DocumentError> {
    let mut check = YamlCheck { limits, stack: Vec::new(), anchors: HashMap::new(), size: 0 };
    for event in Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(event) => event,
            Err(error) => return Err(check.syntax(&error)),
        };
        let (line, column) = (span.start.line(), span.start.col() + 1);
        match event {
            Event::Scalar(value, _, anchor, _) => {
                let size = scalar_size(&value);
                check.grow(size)?;
                if anchor != 0 {
                    check.anchors.insert(anchor, Anchored { size, height: 0 });
                }
                check.finished(0, Some(&value));
            }
            Event::SequenceStart(anchor, _) => check.open(anchor, false, line, column)?,
            Event::MappingStart(anchor, _) => check.open(anchor, true, line, column)?,
            Event::SequenceEnd | Event::MappingEnd => check.close(),
            Event::Alias(anchor) => check.alias(anchor, line, column)?,
            Event::DocumentStart(_) => check.stack.clear(),
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(depth: usize, bytes: usize) -> DocumentLimits {
        DocumentLimits { max_depth: depth, max_bytes: bytes, ..DocumentLimits::default() }
    }

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        let l = limits(3, 1 << 20);
        assert!(check_json(br#"{"a": [[1]]}"#, &l).is_ok());
        assert!(check_json(br#"{"a": "[[[[[[[[", "b": "\"[[[[["}"#, &l).is_ok());
        let err = check_json(b"{\n  \"a\": [[[1]]]}", &l).unwrap_err();
        assert!(matches!(err, DocumentError::TooDeep { line: 2, column: 10, limit: 3, .. }), "{err:?}");
        assert!(err.to_string().ends_with("exceeds the nesting limit of 3 ([api] max_depth)"), "{err}");
        // 100,000 levels: refused at the 4th, not parsed.
        assert!(check_json(nested(100_000).as_bytes(), &l).is_err());
    }

    #[test]
    fn yaml_depth_is_checked_in_flow_and_block_style() {
        let l = limits(5, 1 << 20);
        assert!(check_yaml("a:\n  b:\n    c: [1, {d: 2}]\n", &l).is_ok());
        let err = check_yaml("a:\n  b:\n    c: [1, {d: [2]}]\n", &l).unwrap_err();
        match &err {
            DocumentError::TooDeep { location, line, .. } => {
                assert_eq!(location, "a.b.c[1].d");
                assert_eq!(*line, 3);
            }
            other => panic!("{other:?}"),
        }
        let deep = format!("name: x\ntasks:\n- params: {{v: {}}}\n", nested(100_000));
        assert!(matches!(check_yaml(&deep, &l), Err(DocumentError::TooDeep { .. })));
    }

    #[test]
    fn aliases_count_what_their_anchor_holds() {
        // Nine aliases of nine aliases of …: 9^8 "lol"s from a few hundred bytes.
        let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..9 {
            let aliases = vec![format!("*a{}", i - 1); 9].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{aliases}]\n"));
        }
        let err = check_yaml(&bomb, &limits(64, 1 << 20)).unwrap_err();
        assert!(err.is_size(), "{err:?}");
        assert!(err.to_string().contains("exceeds the size limit of 1048576 bytes ([api] max_body)"), "{err}");
        // A few aliases of a small anchor are fine.
        assert!(check_yaml("base: &b {x: 1}\none: *b\ntwo: *b\n", &limits(64, 1 << 20)).is_ok());
    }

    #[test]
    fn an_alias_adds_its_anchor_s_depth() {
        let l = limits(3, 1 << 20);
        assert!(check_yaml("a: &x [[1]]\nb: *x\n", &l).is_ok());
        assert!(matches!(check_yaml("a: &x [[1]]\nb: [*x]\n", &l), Err(DocumentError::TooDeep { .. })));
    }

    #[test]
    fn syntax_errors_say_where() {
        let err = check_yaml("name: x\ntasks:\n- {name: a, plugin: echo\n", &limits(64, 1 << 20)).unwrap_err();
        match err {
            DocumentError::Syntax { location, message } => {
                assert_eq!(location, "tasks[0]");
                assert!(message.contains("line 4 column 1"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let err = check_yaml("params: {list: [1, 2}\n", &limits(64, 1 << 20)).unwrap_err();
        assert_eq!(err.location(), "params.list");
    }
}
