//! Cron schedules in time zones: validation, next and previous fire times,
//! catch-up, backfill ranges, and the range bounds people write.
//!
//! Input: UTF-8 lines `cron`, `time zone`, `now` (RFC 3339), `start`,
//! `end`, `catch-up` (`1`); anything else is decoded as a structured case
//! (fields, zone and times picked from the bytes).
//!
//! Properties: validation never panics and is deterministic; fire times
//! strictly increase; each matches the expression in the zone's
//! wall-clock time, or is the first instant after a DST gap (a fixed-time
//! job whose time does not exist that day); nothing fires between two
//! consecutive fire times; the backward search agrees with the forward
//! one; catch-up returns sorted cycles inside its window, no more than
//! asked; backfills stay in their range and bound; range bounds never
//! panic.

use std::str::FromStr;

use arbitrary::Unstructured;
use chrono::{DateTime, Duration, TimeZone, Utc};
use chrono_tz::{TZ_VARIANTS, Tz};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use dagr_core::definition::ScheduleSpec;
use dagr_core::schedule::{Schedule, backfill_times, range_bound};

pub const DICTIONARY: &[&str] = &[
    "*",
    "*/",
    "-",
    ",",
    "L",
    "W",
    "#",
    "?",
    "MON",
    "SUN",
    "JAN",
    "DEC",
    "@daily",
    "@hourly",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
    " ",
    "0",
    "59",
    "23",
    "31",
    "12",
    "7",
    "29",
    "30",
    "2",
    "\nEurope/Berlin",
    "\nUTC",
    "\nAmerica/New_York",
    "\nAustralia/Lord_Howe",
    "\n2026-03-29T00:30:00Z",
    "\n2026-10-25T00:00:00Z",
    "\n1",
    "\n4999-12-31T00:00:00Z",
    "\n0001-01-01T00:00:00Z",
];

struct Case {
    spec: ScheduleSpec,
    now: DateTime<Utc>,
}

fn time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text.trim()).ok().map(|t| t.with_timezone(&Utc))
}

fn from_lines(text: &str) -> Case {
    let mut lines = text.split('\n');
    let cron = lines.next().unwrap_or_default().to_owned();
    let timezone = lines.next().map(str::trim).filter(|t| !t.is_empty()).unwrap_or("UTC").to_owned();
    let now = lines.next().and_then(time).unwrap_or_else(|| "2026-03-29T00:00:00Z".parse().unwrap());
    let start = lines.next().map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
    let end = lines.next().map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
    let catch_up = lines.next().is_some_and(|l| l.trim() == "1");
    Case { spec: ScheduleSpec { cron, timezone, start, end, catch_up }, now }
}

fn structured(u: &mut Unstructured<'_>) -> arbitrary::Result<Case> {
    fn field(u: &mut Unstructured<'_>, lo: u32, hi: u32, names: &[&str]) -> arbitrary::Result<String> {
        let n = |u: &mut Unstructured<'_>| u.int_in_range(lo..=hi);
        Ok(match u.int_in_range(0..=7)? {
            0 => "*".into(),
            1 => format!("*/{}", u.int_in_range(1..=hi.max(1))?),
            2 => format!("{}-{}", n(u)?, n(u)?),
            3 => format!("{},{}", n(u)?, n(u)?),
            4 => format!("{}-{}/{}", n(u)?, n(u)?, u.int_in_range(1..=hi.max(1))?),
            5 if !names.is_empty() => u.choose(names)?.to_string(),
            _ => n(u)?.to_string(),
        })
    }
    let mut fields = Vec::new();
    if u.arbitrary()? {
        fields.push(field(u, 0, 59, &[])?);
    }
    fields.push(field(u, 0, 59, &[])?);
    fields.push(field(u, 0, 23, &[])?);
    fields.push(field(u, 1, 31, &["L", "15W", "LW", "?"])?);
    fields.push(field(u, 1, 12, &["JAN", "FEB-MAR", "DEC"])?);
    fields.push(field(u, 0, 7, &["MON", "SUN#2", "5L", "MON-FRI", "?"])?);
    let zone = u.choose(&TZ_VARIANTS)?;
    let instant = |u: &mut Unstructured<'_>| -> arbitrary::Result<DateTime<Utc>> {
        // 1900 to 2200, to the second.
        let secs = u.int_in_range(-2_208_988_800i64..=7_258_118_400)?;
        Ok(Utc.timestamp_opt(secs, 0).single().unwrap_or_default())
    };
    let now = instant(u)?;
    let start = if u.ratio(1, 4)? { Some(instant(u)?.to_rfc3339()) } else { None };
    let end = if u.ratio(1, 4)? { Some(instant(u)?.to_rfc3339()) } else { None };
    let spec =
        ScheduleSpec { cron: fields.join(" "), timezone: zone.name().to_owned(), start, end, catch_up: u.arbitrary()? };
    Ok(Case { spec, now })
}

pub fn check(data: &[u8]) {
    let case = match std::str::from_utf8(data) {
        Ok(text) => from_lines(text),
        Err(_) => match structured(&mut Unstructured::new(data)) {
            Ok(case) => case,
            Err(_) => return,
        },
    };
    for text in [case.spec.cron.as_str(), case.spec.timezone.as_str()] {
        if let Ok(zone) = Tz::from_str(&case.spec.timezone) {
            let _ = range_bound(text, zone, false);
            let _ = range_bound(text, zone, true);
        }
    }
    let built = Schedule::new(&case.spec);
    assert_eq!(
        built.as_ref().map(|s| s.expression.clone()).map_err(|e| e.clone()),
        Schedule::new(&case.spec).map(|s| s.expression),
        "validation is deterministic"
    );
    let Ok(schedule) = built else { return };
    let cron = CronParser::builder().seconds(Seconds::Optional).build().parse(&case.spec.cron).expect("it validated");

    // Forward from `now`, a few fire times.
    let mut at = case.now;
    for _ in 0..6 {
        let Some(next) = schedule.next_after(at) else { break };
        assert!(next > at, "the next fire time {next} is after {at}");
        fits_the_zone(&cron, schedule.timezone, next, &case.spec.cron);
        if let Some(start) = schedule.start {
            assert!(next >= start, "{next} is not before start {start}");
        }
        if let Some(end) = schedule.end {
            assert!(next <= end, "{next} is not after end {end}");
        }
        // Nothing fires in between: the last fire time before `next` is at or before `at`.
        if let Some(before) = schedule.previous_at_or_before(next - Duration::seconds(1)) {
            assert!(
                before <= at || schedule.start.is_some_and(|s| at < s),
                "`{}` in {}: {before} fires between {at} and {next}",
                case.spec.cron,
                case.spec.timezone
            );
        }
        assert_eq!(schedule.previous_at_or_before(next), Some(next), "the backward search finds {next} itself");
        at = next;
    }

    // Backward from `now`: the next after the previous is past `now`.
    if let Some(prev) = schedule.previous_at_or_before(case.now) {
        assert!(prev <= case.now);
        fits_the_zone(&cron, schedule.timezone, prev, &case.spec.cron);
        if let Some(next) = schedule.next_after(prev) {
            assert!(
                next > case.now,
                "`{}`: {prev} then {next}, but nothing else fires by {}",
                case.spec.cron,
                case.now
            );
        }
    }

    // Catch-up: cursor a day before `now`.
    let cursor = case.now - Duration::days(1);
    let due = schedule.due(Some(cursor), cursor, case.now, 20, 5);
    assert!(due.times.len() <= 5);
    assert!(!due.more || due.times.len() == 5, "`more` only when the step is full");
    assert!(due.times.windows(2).all(|w| w[0] < w[1]), "due cycles are sorted and distinct: {:?}", due.times);
    for t in &due.times {
        assert!(*t > cursor && *t <= case.now, "a due cycle {t} is inside ({cursor}, {}]", case.now);
    }
    if let (Some((first, last)), Some(t0)) = (due.skipped, due.times.first()) {
        assert!(first <= last && last < *t0, "skipped {first}..{last} come before the due {t0}");
    }

    // Backfill over a week.
    if let Ok(times) = backfill_times(Some(&schedule), cursor, case.now + Duration::days(6), 50) {
        assert!(times.len() <= 50);
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        assert!(times.iter().all(|t| *t >= cursor && *t <= case.now + Duration::days(6)));
    }
}

/// `t` matches `cron` on the zone's wall clock, or is the first instant
/// after a DST gap (the clock jumped at `t`).
fn fits_the_zone(cron: &Cron, zone: Tz, t: DateTime<Utc>, expression: &str) {
    let local = t.with_timezone(&zone);
    if cron.is_time_matching(&local).unwrap_or(false) {
        return;
    }
    let offset = |t: DateTime<Utc>| zone.offset_from_utc_datetime(&t.naive_utc());
    let just_before = t - Duration::seconds(1);
    assert!(
        offset(just_before) != offset(t),
        "`{expression}` fires at {t} ({local} in {zone}), which does not match it and is not right after a DST gap"
    );
}
