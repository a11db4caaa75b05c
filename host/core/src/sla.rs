//! A workflow's service-level deadline: each run must finish by a local
//! time of day after its cycle (`finish_by: "06:00"`), or within a time
//! after its cycle (`within: 2h`). A run still unfinished then raises a
//! `run.sla_missed` event (and alerts); it is not stopped.

use std::str::FromStr;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::definition::HumanDuration;

/// `sla:` in a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlaSpec {
    /// `HH:MM`: a run must finish by the first such local time at or after
    /// its cycle's logical time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_by: Option<String>,
    /// Or: a run must finish this long after its cycle's logical time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<HumanDuration>,
    /// The time zone of `finish_by` (default: the schedule's, else UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

/// A validated deadline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sla {
    FinishBy { at: NaiveTime, timezone: Tz },
    Within(Duration),
}

impl Sla {
    /// Checks `spec`; an error is (field under `sla`, message).
    pub fn new(spec: &SlaSpec, schedule_timezone: Option<Tz>) -> Result<Sla, (&'static str, String)> {
        match (&spec.finish_by, &spec.within) {
            (Some(_), Some(_)) | (None, None) => {
                Err(("", "give one of `finish_by` (HH:MM) or `within` (a duration)".into()))
            }
            (None, Some(within)) => {
                if spec.timezone.is_some() {
                    return Err(("timezone", "only `finish_by` takes a time zone".into()));
                }
                if within.0.is_zero() {
                    return Err(("within", "must be longer than zero".into()));
                }
                Ok(Sla::Within(within.0))
            }
            (Some(text), None) => {
                let at = NaiveTime::parse_from_str(text, "%H:%M")
                    .map_err(|_| ("finish_by", format!("`{text}` is not a time of day like 06:00")))?;
                let timezone = match &spec.timezone {
                    Some(name) => {
                        Tz::from_str(name).map_err(|_| ("timezone", format!("`{name}` is not a time zone")))?
                    }
                    None => schedule_timezone.unwrap_or(chrono_tz::UTC),
                };
                Ok(Sla::FinishBy { at, timezone })
            }
        }
    }

    /// The deadline (ms) of the run of the cycle at `logical_ms`.
    pub fn deadline(&self, logical_ms: i64) -> i64 {
        match *self {
            Sla::Within(d) => logical_ms.saturating_add(d.as_millis() as i64),
            Sla::FinishBy { at, timezone } => {
                let logical =
                    Utc.timestamp_millis_opt(logical_ms).single().unwrap_or_default().with_timezone(&timezone);
                let mut date = logical.date_naive();
                if logical.time() > at {
                    date = date.succ_opt().unwrap_or(date);
                }
                let local = date.and_time(at);
                // A time that does not exist that day (a DST gap) is an
                // hour later; an ambiguous one is its first occurrence.
                let when = timezone
                    .from_local_datetime(&local)
                    .earliest()
                    .or_else(|| timezone.from_local_datetime(&(local + ChronoDuration::hours(1))).earliest());
                when.map_or(logical_ms, |w| w.timestamp_millis())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(finish_by: Option<&str>, within: Option<u64>, timezone: Option<&str>) -> SlaSpec {
        SlaSpec {
            finish_by: finish_by.map(str::to_owned),
            within: within.map(|s| HumanDuration(Duration::from_secs(s))),
            timezone: timezone.map(str::to_owned),
        }
    }

    /// 2026-01-10T00:00:00Z.
    const DAY: i64 = 1_768_003_200_000;
    const HOUR: i64 = 3_600_000;

    #[test]
    fn deadlines_follow_the_cycle_in_local_time() {
        let within = Sla::new(&spec(None, Some(7200), None), None).unwrap();
        assert_eq!(within.deadline(DAY), DAY + 2 * HOUR);
        let by_six = Sla::new(&spec(Some("06:00"), None, None), None).unwrap();
        assert_eq!(by_six.deadline(DAY), DAY + 6 * HOUR, "the same day");
        assert_eq!(by_six.deadline(DAY + 7 * HOUR), DAY + 30 * HOUR, "past 06:00: the next day's");
        // 06:00 in Shanghai (UTC+8) is 22:00 UTC the day before.
        let shanghai = Sla::new(&spec(Some("06:00"), None, Some("Asia/Shanghai")), None).unwrap();
        assert_eq!(shanghai.deadline(DAY), DAY + 22 * HOUR);
        let from_schedule = Sla::new(&spec(Some("06:00"), None, None), Some(chrono_tz::Asia::Shanghai)).unwrap();
        assert_eq!(from_schedule, shanghai, "the schedule's zone by default");
    }

    #[test]
    fn a_bad_sla_says_which_field() {
        let field = |s: SlaSpec| Sla::new(&s, None).unwrap_err().0;
        assert_eq!(field(spec(None, None, None)), "");
        assert_eq!(field(spec(Some("06:00"), Some(60), None)), "");
        assert_eq!(field(spec(Some("6 am"), None, None)), "finish_by");
        assert_eq!(field(spec(Some("06:00"), None, Some("Mars/Olympus"))), "timezone");
        assert_eq!(field(spec(None, Some(0), None)), "within");
        assert_eq!(field(spec(None, Some(60), Some("UTC"))), "timezone");
    }
}
