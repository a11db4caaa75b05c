//! What a log line is stored as, and which store errors are the data's.
//!
//! PostgreSQL's `text` cannot hold U+0000 (NUL): a line with one is refused
//! with "invalid byte sequence for encoding UTF8: 0x00". A plugin may log
//! any string, so [`storable`] writes each NUL as [`NUL_STORED_AS`] (␀,
//! the symbol for null), on SQLite too, so that both backends show the
//! same log. The rest of the line is stored as it was sent.

use crate::Error;

/// What a NUL character in a log line is stored as: U+2400 SYMBOL FOR NULL.
pub const NUL_STORED_AS: char = '\u{2400}';

/// A log message as it can be stored: NUL characters replaced.
pub fn storable(message: String) -> String {
    if message.contains('\0') { message.replace('\0', &NUL_STORED_AS.to_string()) } else { message }
}

impl Error {
    /// Whether the database refused the data itself, so that the same
    /// write fails again however often it is retried: PostgreSQL's data
    /// exceptions and integrity violations (SQLSTATE classes 22 and 23),
    /// SQLite's constraint, mismatch and too-big errors. A connection that
    /// failed or timed out, or a busy database, is not.
    pub fn is_refused_data(&self) -> bool {
        let Error::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        let code = db.code().unwrap_or_default();
        // PostgreSQL's SQLSTATEs are five characters; SQLite's codes are
        // numbers of at most four digits (an extended code keeps the
        // primary one in its low byte).
        if code.len() == 5 {
            return code.starts_with("22") || code.starts_with("23");
        }
        // 18 TOOBIG, 19 CONSTRAINT, 20 MISMATCH.
        matches!(code.parse::<i64>().map(|c| c & 0xff), Ok(18..=20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_characters_are_replaced_and_nothing_else() {
        assert_eq!(storable("a\0b\0".into()), "a\u{2400}b\u{2400}");
        assert_eq!(storable("tab\tline é".into()), "tab\tline é");
    }
}
