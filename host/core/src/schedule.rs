//! Cron schedules and instance-based materialisation: one run per logical
//! time (cycle), never two.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

use crate::definition::{Issue, ScheduleSpec};

/// A validated schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    pub expression: String,
    pub timezone: Tz,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    pub catch_up: bool,
}

/// The most runs one materialisation step creates; a long outage with
/// catch-up on is worked off over several steps rather than at once.
pub const MAX_RUNS_PER_STEP: usize = 1000;

impl Schedule {
    /// Validates a spec; the issue's location is relative to `schedule`.
    pub fn new(spec: &ScheduleSpec) -> Result<Schedule, Issue> {
        let issue = |location: &str, message: String| Issue { location: location.into(), message };
        let fields = spec.cron.split_whitespace().count();
        if !spec.cron.trim_start().starts_with('@') && !(5..=6).contains(&fields) {
            return Err(issue(
                "cron",
                format!("`{}` has {fields} fields; a cron expression has 5 (or 6, with seconds first)", spec.cron),
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(&spec.cron)
            .map_err(|e| issue("cron", format!("`{}` is not a valid cron expression: {e}", spec.cron)))?;
        let timezone = Tz::from_str(&spec.timezone).map_err(|_| {
            issue("timezone", format!("unknown time zone `{}` (use an IANA name such as Europe/Berlin)", spec.timezone))
        })?;
        let parse_time = |field: &str, text: &Option<String>| -> Result<Option<DateTime<Utc>>, Issue> {
            match text {
                None => Ok(None),
                Some(t) => DateTime::parse_from_rfc3339(t)
                    .map(|d| Some(d.with_timezone(&Utc)))
                    .map_err(|e| issue(field, format!("`{t}` is not an RFC 3339 timestamp: {e}"))),
            }
        };
        let start = parse_time("start", &spec.start)?;
        let end = parse_time("end", &spec.end)?;
        if let (Some(s), Some(e)) = (start, end)
            && e < s
        {
            return Err(issue("end", "must not be before start".into()));
        }
        Ok(Schedule { cron, expression: spec.cron.clone(), timezone, start, end, catch_up: spec.catch_up })
    }

    /// The first fire time strictly after `t`, within start/end.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = match self.start {
            // Start is inclusive: look from just before it.
            Some(start) if start > t => start - chrono::Duration::seconds(1),
            _ => t,
        };
        let local = from.with_timezone(&self.timezone);
        let next = self.cron.find_next_occurrence(&local, false).ok()?.with_timezone(&Utc);
        match self.end {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }

    /// The logical times due at `now`, given the last one materialised
    /// (`cursor`; `None` when the schedule is new, in which case the
    /// schedule starts at `created` or its `start`).
    ///
    /// With catch-up, every missed time is due (at most
    /// [`MAX_RUNS_PER_STEP`] per call, oldest first); without, only the
    /// latest.
    pub fn due(&self, cursor: Option<DateTime<Utc>>, created: DateTime<Utc>, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let from = match (cursor, self.start) {
            (Some(c), _) => c,
            // A new schedule with a start in the past catches up from its
            // start if asked to; otherwise it begins now.
            (None, Some(start)) if self.catch_up && start < created => start - chrono::Duration::seconds(1),
            (None, _) => created,
        };
        let mut due = Vec::new();
        let mut t = from;
        while let Some(next) = self.next_after(t) {
            if next > now {
                break;
            }
            if self.catch_up {
                due.push(next);
                if due.len() >= MAX_RUNS_PER_STEP {
                    break;
                }
            } else {
                due.clear();
                due.push(next);
            }
            t = next;
        }
        due
    }
}

/// Logical times for a backfill: every fire time in `[from, to]`. Without a
/// schedule, `interval` spaces them (daily by default).
pub fn backfill_times(
    schedule: Option<&Schedule>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: usize,
) -> Result<Vec<DateTime<Utc>>, String> {
    if to < from {
        return Err("`to` is before `from`".into());
    }
    let mut times = Vec::new();
    match schedule {
        Some(s) => {
            let mut t = from - chrono::Duration::seconds(1);
            while let Some(next) = s.next_after(t) {
                if next > to {
                    break;
                }
                times.push(next);
                if times.len() > limit {
                    return Err(format!("the range covers more than {limit} runs; split it"));
                }
                t = next;
            }
        }
        None => {
            let mut t = from;
            while t <= to {
                times.push(t);
                if times.len() > limit {
                    return Err(format!("the range covers more than {limit} runs; split it"));
                }
                t += chrono::Duration::days(1);
            }
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cron: &str, tz: &str, catch_up: bool) -> ScheduleSpec {
        ScheduleSpec { cron: cron.into(), timezone: tz.into(), start: None, end: None, catch_up }
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn validates() {
        assert!(Schedule::new(&spec("0 2 * * *", "UTC", false)).is_ok());
        assert!(Schedule::new(&spec("*/10 * * * * *", "UTC", false)).is_ok());
        assert_eq!(Schedule::new(&spec("0 2 * *", "UTC", false)).unwrap_err().location, "cron");
        assert_eq!(Schedule::new(&spec("0 25 * * *", "UTC", false)).unwrap_err().location, "cron");
        assert_eq!(Schedule::new(&spec("0 2 * * *", "Mars/Olympus", false)).unwrap_err().location, "timezone");
    }

    #[test]
    fn time_zones() {
        let s = Schedule::new(&spec("0 2 * * *", "Europe/Berlin", false)).unwrap();
        assert_eq!(s.next_after(t("2026-01-10T00:00:00Z")), Some(t("2026-01-10T01:00:00Z")));
        // Summer time: 02:00 in Berlin is 00:00 UTC.
        assert_eq!(s.next_after(t("2026-07-09T12:00:00Z")), Some(t("2026-07-10T00:00:00Z")));
    }

    #[test]
    fn catch_up_or_latest_only() {
        let daily = |catch_up| Schedule::new(&spec("0 0 * * *", "UTC", catch_up)).unwrap();
        let start = t("2026-01-01T00:00:00Z");
        let cursor = Some(start);
        let now = t("2026-01-04T12:00:00Z");
        assert_eq!(
            daily(true).due(cursor, start, now),
            vec![t("2026-01-02T00:00:00Z"), t("2026-01-03T00:00:00Z"), t("2026-01-04T00:00:00Z")]
        );
        assert_eq!(daily(false).due(cursor, start, now), vec![t("2026-01-04T00:00:00Z")]);
        assert!(daily(true).due(Some(now), now, now).is_empty());
    }

    #[test]
    fn backfill_is_inclusive() {
        let daily = Schedule::new(&spec("0 0 * * *", "UTC", false)).unwrap();
        let times = backfill_times(Some(&daily), t("2026-01-01T00:00:00Z"), t("2026-01-10T00:00:00Z"), 100).unwrap();
        assert_eq!(times.len(), 10);
        assert_eq!(times[0], t("2026-01-01T00:00:00Z"));
        assert!(backfill_times(None, t("2026-01-01T00:00:00Z"), t("2027-01-01T00:00:00Z"), 100).is_err());
    }
}
