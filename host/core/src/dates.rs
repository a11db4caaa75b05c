//! Date arithmetic for templates: `{{ ds | add_days(-1) }}`,
//! `{{ ts | add_hours(6) }}`, `{{ ds | start_of_month }}`,
//! `{{ logical_time | end_of_week }}`.
//!
//! A value keeps its form: a date (`2026-01-31`, or `20260131` as
//! `ds_nodash` writes it) stays a date, a local timestamp
//! (`2026-01-31T02:00:00`) stays one, an RFC 3339 timestamp stays RFC 3339
//! (in the workflow's time zone). Days, weeks and months are calendar
//! units in that zone; a month from January 31st is the end of February.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;

/// A date operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DateOp {
    AddHours(i64),
    AddDays(i64),
    AddWeeks(i64),
    AddMonths(i64),
    StartOfWeek,
    EndOfWeek,
    StartOfMonth,
    EndOfMonth,
}

/// The filters' names, for error messages.
pub(crate) const DATE_FILTERS: &str =
    "add_hours(n), add_days(n), add_weeks(n), add_months(n), start_of_week, end_of_week, start_of_month, end_of_month";

impl DateOp {
    /// The operation a filter names; `arg` is its numeric argument.
    pub(crate) fn parse(name: &str, arg: Option<i64>) -> Option<Result<DateOp, String>> {
        let needs = |make: fn(i64) -> DateOp| {
            Some(arg.map(make).ok_or_else(|| format!("filter `{name}` needs a whole number, e.g. {name}(-1)")))
        };
        let plain =
            |op: DateOp| Some(if arg.is_some() { Err(format!("filter `{name}` takes no argument")) } else { Ok(op) });
        match name {
            "add_hours" => needs(DateOp::AddHours),
            "add_days" => needs(DateOp::AddDays),
            "add_weeks" => needs(DateOp::AddWeeks),
            "add_months" => needs(DateOp::AddMonths),
            "start_of_week" => plain(DateOp::StartOfWeek),
            "end_of_week" => plain(DateOp::EndOfWeek),
            "start_of_month" => plain(DateOp::StartOfMonth),
            "end_of_month" => plain(DateOp::EndOfMonth),
            _ => None,
        }
    }

    fn apply_date(self, d: NaiveDate) -> Option<NaiveDate> {
        match self {
            DateOp::AddHours(_) => Some(d),
            DateOp::AddDays(n) => d.checked_add_signed(Duration::try_days(n)?),
            DateOp::AddWeeks(n) => d.checked_add_signed(Duration::try_weeks(n)?),
            DateOp::AddMonths(n) => {
                let months = chrono::Months::new(u32::try_from(n.unsigned_abs()).ok()?);
                if n < 0 { d.checked_sub_months(months) } else { d.checked_add_months(months) }
            }
            DateOp::StartOfWeek => Some(d - Duration::days(d.weekday().num_days_from_monday() as i64)),
            DateOp::EndOfWeek => Some(d + Duration::days(6 - d.weekday().num_days_from_monday() as i64)),
            DateOp::StartOfMonth => d.with_day(1),
            DateOp::EndOfMonth => d.with_day(1)?.checked_add_months(chrono::Months::new(1))?.pred_opt(),
        }
    }

    fn apply_local(self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        match self {
            DateOp::AddHours(n) => t.checked_add_signed(Duration::try_hours(n)?),
            DateOp::StartOfWeek | DateOp::StartOfMonth => Some(self.apply_date(t.date())?.and_time(NaiveTime::MIN)),
            DateOp::EndOfWeek | DateOp::EndOfMonth => self.apply_date(t.date())?.and_hms_opt(23, 59, 59),
            _ => Some(self.apply_date(t.date())?.and_time(t.time())),
        }
    }

    /// Applies the operation to a date or timestamp written as text.
    pub(crate) fn apply(self, text: &str, tz: Tz) -> Result<String, String> {
        let out_of_range = || format!("`{text}` shifted is out of range");
        if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
            if matches!(self, DateOp::AddHours(_)) {
                return Err(format!("add_hours needs a timestamp, `{text}` is a date"));
            }
            return Ok(self.apply_date(d).ok_or_else(out_of_range)?.format("%Y-%m-%d").to_string());
        }
        if text.len() == 8
            && let Ok(d) = NaiveDate::parse_from_str(text, "%Y%m%d")
        {
            if matches!(self, DateOp::AddHours(_)) {
                return Err(format!("add_hours needs a timestamp, `{text}` is a date"));
            }
            return Ok(self.apply_date(d).ok_or_else(out_of_range)?.format("%Y%m%d").to_string());
        }
        if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
            return Ok(self.apply_local(t).ok_or_else(out_of_range)?.format("%Y-%m-%dT%H:%M:%S").to_string());
        }
        if let Ok(t) = DateTime::parse_from_rfc3339(text) {
            let local = t.with_timezone(&tz).naive_local();
            let shifted = match self {
                // Hours are absolute: no local clock involved.
                DateOp::AddHours(n) => {
                    let t = t
                        .checked_add_signed(Duration::try_hours(n).ok_or_else(out_of_range)?)
                        .ok_or_else(out_of_range)?;
                    return Ok(t.with_timezone(&tz).to_rfc3339());
                }
                _ => self.apply_local(local).ok_or_else(out_of_range)?,
            };
            let instant = tz
                .from_local_datetime(&shifted)
                .earliest()
                .or_else(|| tz.from_local_datetime(&(shifted + Duration::hours(1))).earliest())
                .ok_or_else(out_of_range)?;
            return Ok(instant.to_rfc3339());
        }
        Err(format!("`{text}` is not a date (2026-01-31) or timestamp (RFC 3339, or 2026-01-31T02:00:00)"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn op(name: &str, arg: Option<i64>) -> DateOp {
        DateOp::parse(name, arg).unwrap().unwrap()
    }

    #[test]
    fn dates_and_timestamps_keep_their_form() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(op("add_days", Some(-1)).apply("2026-03-01", tz).unwrap(), "2026-02-28");
        assert_eq!(op("add_days", Some(-1)).apply("20260301", tz).unwrap(), "20260228");
        assert_eq!(op("add_months", Some(1)).apply("2026-01-31", tz).unwrap(), "2026-02-28");
        assert_eq!(op("start_of_week", None).apply("2026-01-08", tz).unwrap(), "2026-01-05");
        assert_eq!(op("end_of_week", None).apply("2026-01-08", tz).unwrap(), "2026-01-11");
        assert_eq!(op("start_of_month", None).apply("2026-02-14", tz).unwrap(), "2026-02-01");
        assert_eq!(op("end_of_month", None).apply("2024-02-14", tz).unwrap(), "2024-02-29");
        assert_eq!(op("add_hours", Some(6)).apply("2026-01-31T20:00:00", tz).unwrap(), "2026-02-01T02:00:00");
        assert_eq!(op("end_of_month", None).apply("2026-01-31T20:00:00", tz).unwrap(), "2026-01-31T23:59:59");
        // RFC 3339: the calendar is the workflow's zone's.
        assert_eq!(op("add_days", Some(-1)).apply("2026-03-01T23:30:00Z", tz).unwrap(), "2026-03-01T00:30:00+01:00");
        assert_eq!(op("add_hours", Some(1)).apply("2026-03-01T23:30:00Z", tz).unwrap(), "2026-03-02T01:30:00+01:00");
        assert!(op("add_hours", Some(1)).apply("2026-03-01", tz).unwrap_err().contains("needs a timestamp"));
        assert!(op("add_days", Some(1)).apply("soon", tz).is_err());
        assert!(DateOp::parse("add_days", None).unwrap().is_err());
        assert!(DateOp::parse("start_of_week", Some(1)).unwrap().is_err());
        assert!(DateOp::parse("upper", None).is_none());
    }
}
