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

/// The most runs one materialisation step creates for one schedule by
/// default (`[master] catch_up_per_second`); the rest of a catch-up follows
/// a second later, and so on (a fast schedule's backlog arrives at a
/// bounded rate, never all at once).
pub const MAX_RUNS_PER_STEP: usize = 100;

/// The cycles a schedule owes at some moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    /// Logical times to create runs for now, oldest first (at most the
    /// `per_step` asked for).
    pub times: Vec<DateTime<Utc>>,
    /// With catch-up: the first and last of the missed cycles given up
    /// because they are more than `max_catch_up` cycles old.
    pub skipped: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// More cycles are due than `times` holds: create them in a later step.
    pub more: bool,
}
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
        // An expression no date matches (the 30th of February) would make
        // every search for its next cycle walk thousands of years.
        let epoch = DateTime::<Utc>::UNIX_EPOCH.with_timezone(&timezone);
        if cron.find_next_occurrence(&epoch, false).is_err() {
            return Err(issue("cron", format!("`{}` never fires: no date matches it", spec.cron)));
        }
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

    /// The last fire time at or before `t`, within start/end.
    pub fn previous_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = match self.end {
            Some(end) if end < t => end,
            _ => t,
        };
        let local = t.with_timezone(&self.timezone);
        let prev = self.cron.find_previous_occurrence(&local, true).ok()?.with_timezone(&Utc);
        match self.start {
            Some(start) if prev < start => None,
            _ => Some(prev),
        }
    }

    /// The cycles due at `now`, given the last one materialised (`cursor`;
    /// `None` when the schedule is new, in which case the schedule starts at
    /// `created`, or at its `start` when it catches up from there).
    ///
    /// Without catch-up only the latest missed cycle is due. With it, the
    /// missed cycles are, but never more than the `max_catch_up` newest:
    /// older ones are skipped (and said so in [`Due::skipped`]). Of those,
    /// at most `per_step` are returned, oldest first. The work is bounded
    /// by `max_catch_up`, whatever the gap (a per-second cron whose cursor
    /// is in 1970 costs as much as one an hour behind): cycles are found by
    /// walking back from `now`, not forward from the cursor.
    pub fn due(
        &self,
        cursor: Option<DateTime<Utc>>,
        created: DateTime<Utc>,
        now: DateTime<Utc>,
        max_catch_up: usize,
        per_step: usize,
    ) -> Due {
        let from = match (cursor, self.start) {
            (Some(c), _) => c,
            (None, Some(start)) if self.catch_up && start < created => start - chrono::Duration::seconds(1),
            (None, _) => created,
        };
        let window = if self.catch_up { max_catch_up.max(1) } else { 1 };
        let mut newest_first = Vec::new();
        let mut at = now;
        let mut older = None;
        while let Some(prev) = self.previous_at_or_before(at) {
            if prev <= from {
                break;
            }
            if newest_first.len() == window {
                older = Some(prev);
                break;
            }
            newest_first.push(prev);
            at = prev - chrono::Duration::seconds(1);
        }
        let skipped = match older {
            Some(last) if self.catch_up => self.next_after(from).map(|first| (first, last)),
            _ => None,
        };
        newest_first.reverse();
        let more = newest_first.len() > per_step.max(1);
        newest_first.truncate(per_step.max(1));
        Due { times: newest_first, skipped, more }
    }
}

/// One end of a backfill range as people write it: an instant (RFC 3339,
/// `2026-01-10T02:00:00+01:00`), a local date-time in the workflow's time
/// zone (`2026-01-10T02:00:00`), or a bare date, which means the whole day
/// in that zone — its first instant as a start, its last as an end (the
/// range is inclusive: `--to 2026-01-10` includes every cycle of Jan 10).
pub fn range_bound(text: &str, timezone: Tz, end: bool) -> Result<DateTime<Utc>, String> {
    use chrono::{NaiveDate, NaiveDateTime, TimeZone};
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let local = |naive: NaiveDateTime| -> Result<DateTime<Utc>, String> {
        // Ambiguous (a clock going back): the earlier; skipped (going
        // forward): the first valid instant after it.
        let mut probe = naive;
        for _ in 0..180 {
            if let Some(t) = timezone.from_local_datetime(&probe).earliest() {
                return Ok(t.with_timezone(&Utc));
            }
            probe += chrono::Duration::minutes(1);
        }
        Err(format!("`{text}` does not exist in {timezone}"))
    };
    if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        return local(t);
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let start_of = |d: NaiveDate| d.and_hms_opt(0, 0, 0).ok_or_else(|| format!("`{text}` is not a day"));
        return if end {
            let next = day.succ_opt().ok_or_else(|| format!("`{text}` is the last day there is"))?;
            Ok(local(start_of(next)?)? - chrono::Duration::milliseconds(1))
        } else {
            local(start_of(day)?)
        };
    }
    Err(format!(
        "`{text}` is not a time: use RFC 3339 (2026-01-31T00:00:00Z), a local time (2026-01-31T02:00:00) or a date (2026-01-31)"
    ))
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
                    return Err(format!(
                        "the range covers more than {limit} runs (the limit `[api] max_backfill_runs`); split it"
                    ));
                }
                t = next;
            }
        }
        None => {
            let mut t = from;
            while t <= to {
                times.push(t);
                if times.len() > limit {
                    return Err(format!(
                        "the range covers more than {limit} runs (the limit `[api] max_backfill_runs`); split it"
                    ));
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
            daily(true).due(cursor, start, now, 100, 100).times,
            vec![t("2026-01-02T00:00:00Z"), t("2026-01-03T00:00:00Z"), t("2026-01-04T00:00:00Z")]
        );
        assert_eq!(daily(false).due(cursor, start, now, 100, 100).times, vec![t("2026-01-04T00:00:00Z")]);
        assert_eq!(daily(false).due(cursor, start, now, 100, 100).skipped, None, "skipping is what no catch-up means");
        assert!(daily(true).due(Some(now), now, now, 100, 100).times.is_empty());
    }

    #[test]
    fn catch_up_is_bounded_whatever_the_gap() {
        // Every second since 1970, catching up: only the newest 100 are
        // due, the rest is skipped and said so; found without walking the
        // ~1.8 billion seconds in between.
        let mut every_second = spec("* * * * * *", "UTC", true);
        every_second.start = Some("1970-01-01T00:00:00Z".into());
        let s = Schedule::new(&every_second).unwrap();
        let now = t("2026-12-01T12:00:00Z");
        let due = s.due(None, now, now, 100, 30);
        assert_eq!(due.times.len(), 30, "a step makes at most per_step runs");
        assert!(due.more);
        assert_eq!(due.times[0], t("2026-12-01T11:58:21Z"), "the 100th newest cycle comes first");
        assert_eq!(due.skipped, Some((t("1970-01-01T00:00:00Z"), t("2026-12-01T11:58:20Z"))));
        // The next step goes on from the last one made, and owes the rest.
        let next = s.due(due.times.last().copied(), now, now, 100, 30);
        assert_eq!(next.times[0], t("2026-12-01T11:58:51Z"));
        assert_eq!(next.skipped, None);
        // An hour behind: still 100, not 3,600.
        let hour = s.due(Some(now - chrono::Duration::hours(1)), now, now, 100, 1000);
        assert_eq!(hour.times.len(), 100);
        assert!(!hour.more);
        assert_eq!(hour.times.last(), Some(&now));
    }

    #[test]
    fn a_cron_that_never_fires_costs_little() {
        let issue = Schedule::new(&spec("0 0 30 2 *", "UTC", true)).unwrap_err();
        assert_eq!(issue.location, "cron");
        assert!(issue.message.contains("never fires"), "{}", issue.message);
        // Leap days do fire.
        assert!(Schedule::new(&spec("0 0 29 2 *", "UTC", true)).is_ok());
    }

    #[test]
    fn end_and_start_bound_the_cycles() {
        let mut bounded = spec("0 0 * * *", "UTC", true);
        bounded.start = Some("2026-01-02T00:00:00Z".into());
        bounded.end = Some("2026-01-03T12:00:00Z".into());
        let s = Schedule::new(&bounded).unwrap();
        let due = s.due(None, t("2026-01-01T00:00:00Z"), t("2026-02-01T00:00:00Z"), 100, 100);
        assert_eq!(due.times, vec![t("2026-01-02T00:00:00Z"), t("2026-01-03T00:00:00Z")]);
        assert_eq!(due.skipped, None);
    }

    #[test]
    fn a_bare_date_is_the_whole_day_in_the_workflow_s_time_zone() {
        // Issue 11: `--from 2026-01-01 --to 2026-01-10` with a daily cron at
        // 02:00 Europe/Berlin made 9 runs: `--to` was midnight UTC of the
        // 10th, before its 02:00 Berlin (01:00 UTC) cycle.
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let daily = Schedule::new(&spec("0 2 * * *", "Europe/Berlin", false)).unwrap();
        let from = range_bound("2026-01-01", berlin, false).unwrap();
        let to = range_bound("2026-01-10", berlin, true).unwrap();
        assert_eq!(from, t("2025-12-31T23:00:00Z"));
        assert_eq!(to, t("2026-01-10T22:59:59.999Z"));
        let times = backfill_times(Some(&daily), from, to, 100).unwrap();
        assert_eq!(times.len(), 10);
        assert_eq!(times.last(), Some(&t("2026-01-10T01:00:00Z")));
        // Instants stay instants; local times are the zone's.
        assert_eq!(range_bound("2026-01-10T00:00:00Z", berlin, true).unwrap(), t("2026-01-10T00:00:00Z"));
        assert_eq!(range_bound("2026-07-10T02:00:00", berlin, false).unwrap(), t("2026-07-10T00:00:00Z"));
        // 02:30 does not exist on the day summer time starts: the next instant that does.
        assert_eq!(range_bound("2026-03-29T02:30:00", berlin, false).unwrap(), t("2026-03-29T01:00:00Z"));
        assert!(range_bound("yesterday", berlin, false).unwrap_err().contains("is not a time"));
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
