//! Quiet hours of an alert rule: a daily window of local time (e.g.
//! `22:00`–`07:00`, which wraps past midnight) in which the rule sends
//! nothing. What it raises meanwhile is kept, and goes out as one summary
//! when the window ends.

use std::str::FromStr;

use chrono::{Duration as ChronoDuration, LocalResult, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;

/// A validated window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    from: NaiveTime,
    to: NaiveTime,
    timezone: Tz,
}

impl QuietHours {
    /// Checks a window; an error is (field, message).
    pub fn new(from: &str, to: &str, timezone: &str) -> Result<QuietHours, (&'static str, String)> {
        let time = |field: &'static str, text: &str| {
            NaiveTime::parse_from_str(text, "%H:%M")
                .map_err(|_| (field, format!("`{text}` is not a time of day like 22:00")))
        };
        let (from, to) = (time("from", from)?, time("to", to)?);
        if from == to {
            return Err(("to", "the window is empty: `from` and `to` are the same time".into()));
        }
        let timezone = Tz::from_str(timezone).map_err(|_| ("timezone", format!("`{timezone}` is not a time zone")))?;
        Ok(QuietHours { from, to, timezone })
    }

    /// If `now_ms` falls in the window: when the window ends (ms since the
    /// epoch). Local times that a clock change skips or repeats are read
    /// as the earliest instant they can mean.
    pub fn until(&self, now_ms: i64) -> Option<i64> {
        let local = self.timezone.timestamp_millis_opt(now_ms).single()?.naive_local();
        let t = local.time();
        let inside = if self.from < self.to { self.from <= t && t < self.to } else { t >= self.from || t < self.to };
        if !inside {
            return None;
        }
        let mut end_day = local.date();
        if t >= self.to {
            end_day += ChronoDuration::days(1);
        }
        Some(self.instant(NaiveDateTime::new(end_day, self.to)))
    }

    fn instant(&self, local: NaiveDateTime) -> i64 {
        match self.timezone.from_local_datetime(&local) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.timestamp_millis(),
            // Skipped by a clock change (spring forward): an hour later exists.
            LocalResult::None => self.instant(local + ChronoDuration::hours(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn at(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc).timestamp_millis()
    }

    #[test]
    fn a_window_within_a_day() {
        let q = QuietHours::new("12:00", "13:30", "UTC").unwrap();
        assert_eq!(q.until(at("2026-03-01T12:00:00Z")), Some(at("2026-03-01T13:30:00Z")));
        assert_eq!(q.until(at("2026-03-01T13:29:59Z")), Some(at("2026-03-01T13:30:00Z")));
        assert_eq!(q.until(at("2026-03-01T13:30:00Z")), None, "the end is outside");
        assert_eq!(q.until(at("2026-03-01T11:59:59Z")), None);
    }

    #[test]
    fn a_window_past_midnight_in_a_time_zone() {
        let q = QuietHours::new("22:00", "07:00", "Europe/Berlin").unwrap();
        // 22:30 in Berlin (UTC+1 in winter): ends 07:00 the next morning.
        assert_eq!(q.until(at("2026-01-10T21:30:00Z")), Some(at("2026-01-11T06:00:00Z")));
        // 03:00 in Berlin: ends the same morning.
        assert_eq!(q.until(at("2026-01-11T02:00:00Z")), Some(at("2026-01-11T06:00:00Z")));
        assert_eq!(q.until(at("2026-01-11T12:00:00Z")), None);
    }

    #[test]
    fn a_window_that_ends_in_a_skipped_hour_ends_after_it() {
        // 2026-03-29: Berlin skips 02:00–03:00.
        let q = QuietHours::new("01:00", "02:30", "Europe/Berlin").unwrap();
        assert_eq!(q.until(at("2026-03-29T00:30:00Z")), Some(at("2026-03-29T01:30:00Z")));
    }

    #[test]
    fn bad_windows_name_the_field() {
        assert_eq!(QuietHours::new("25:00", "07:00", "UTC").unwrap_err().0, "from");
        assert_eq!(QuietHours::new("22:00", "7am", "UTC").unwrap_err().0, "to");
        assert_eq!(QuietHours::new("22:00", "22:00", "UTC").unwrap_err().0, "to");
        assert_eq!(QuietHours::new("22:00", "07:00", "Mars/Olympus").unwrap_err().0, "timezone");
    }
}
