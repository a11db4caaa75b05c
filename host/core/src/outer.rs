//! The outer DAG: workflows that depend on workflows, across cycles of
//! different sizes (the second of Buffalo's two layers).
//!
//! A run of a workflow has a logical time (its cycle). An [`Upstream`]
//! dependency names another workflow and which of its instances this run
//! needs, relative to the run's logical time, in the run's time zone:
//!
//! - the same cycle: the upstream instance in effect then (its latest cycle
//!   at or before that time; or, for a workflow without a schedule, its run
//!   for exactly that time);
//! - an `offset` (`-1d`: yesterday's, `-2h`, `-1w`, `-1mo`);
//! - every cycle within a `cycles` period (`hour`, `day`, `week`, `month`)
//!   around the (shifted) time: a daily report needs the 24 hourly loads of
//!   its day, a monthly summary every daily run of its month;
//! - the state it `require`s (`success`, or `finished`: any end state), of
//!   the run or of one `task` of it;
//! - what to do about an expected instance that does not exist: `wait`
//!   for it, or `skip` it (count it as satisfied — e.g. cycles before the
//!   upstream workflow existed).
//!
//! [`expected`] says which instances a run needs, [`evaluate`] whether what
//! the store has satisfies it, and [`find_loop`] refuses dependency loops
//! at apply time. All pure: times in, verdicts out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::run::{RunState, TaskState};
use crate::schedule::Schedule;

/// A dependency on instances of another workflow, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// The workflow (of the same tenant) this one waits for.
    pub workflow: String,
    /// Wait for this task of the upstream instance, not the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// A shift from this run's logical time, zero or negative: `-1d`
    /// (yesterday's), `-6h`, `-1w`, `-1mo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// Every upstream instance whose logical time falls in this period
    /// around the (shifted) logical time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<Period>,
    #[serde(default, skip_serializing_if = "Require::is_default")]
    pub require: Require,
    #[serde(default, skip_serializing_if = "Missing::is_default")]
    pub missing: Missing,
}

/// A calendar period, in the downstream run's time zone.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Hour,
    #[default]
    Day,
    /// Monday to Sunday.
    Week,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Hour => "hour",
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }
}

/// The state an upstream instance must reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Require {
    #[default]
    Success,
    /// Any end state (succeeded, failed, killed).
    Finished,
}

impl Require {
    fn is_default(&self) -> bool {
        *self == Require::Success
    }
}

/// What an expected upstream instance that does not exist means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// Wait until it is created and reaches the required state.
    #[default]
    Wait,
    /// Count it as satisfied.
    Skip,
}

impl Missing {
    fn is_default(&self) -> bool {
        *self == Missing::Wait
    }
}

/// A whole number of calendar units: `-1d`, `-6h`, `-2w`, `-1mo`, `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CycleOffset {
    pub amount: i32,
    pub unit: Period,
}

impl CycleOffset {
    pub fn parse(text: &str) -> Result<CycleOffset, String> {
        let t = text.trim();
        if t == "0" {
            return Ok(CycleOffset::default());
        }
        let split = t.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(|| bad_offset(text))?;
        let (number, unit) = t.split_at(split);
        let amount: i32 = number.trim().parse().map_err(|_| bad_offset(text))?;
        let unit = match unit.trim() {
            "h" | "hour" | "hours" => Period::Hour,
            "d" | "day" | "days" => Period::Day,
            "w" | "week" | "weeks" => Period::Week,
            "mo" | "month" | "months" => Period::Month,
            _ => return Err(bad_offset(text)),
        };
        if amount > 0 {
            return Err(format!("`{text}` points into the future: an offset is zero or negative (`-1d`)"));
        }
        if amount < -10_000 {
            return Err(format!("`{text}` is more than 10000 units back"));
        }
        Ok(CycleOffset { amount, unit })
    }

    /// `t` shifted by the offset, in `tz`'s calendar (a day back keeps the
    /// local time of day; a month back keeps the day of month, or the
    /// month's last day).
    pub fn apply(&self, t: DateTime<Utc>, tz: Tz) -> DateTime<Utc> {
        if self.amount == 0 {
            return t;
        }
        let local = t.with_timezone(&tz).naive_local();
        let shifted = match self.unit {
            Period::Hour => return t + Duration::hours(self.amount as i64),
            Period::Day => local + Duration::days(self.amount as i64),
            Period::Week => local + Duration::weeks(self.amount as i64),
            Period::Month => local.checked_sub_months(chrono::Months::new(self.amount.unsigned_abs())).unwrap_or(local),
        };
        from_local(shifted, tz)
    }
}

impl fmt::Display for CycleOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.unit {
            Period::Hour => "h",
            Period::Day => "d",
            Period::Week => "w",
            Period::Month => "mo",
        };
        write!(f, "{}{unit}", self.amount)
    }
}

fn bad_offset(text: &str) -> String {
    format!("`{text}` is not an offset: use a negative whole number of h, d, w or mo (`-1d`, `-6h`, `-1mo`)")
}

/// A local time made an instant: the earlier of two (a clock going back),
/// the first valid one after it (a clock going forward).
fn from_local(local: NaiveDateTime, tz: Tz) -> DateTime<Utc> {
    let mut probe = local;
    for _ in 0..180 {
        if let Some(t) = tz.from_local_datetime(&probe).earliest() {
            return t.with_timezone(&Utc);
        }
        probe += Duration::minutes(1);
    }
    Utc.from_utc_datetime(&local)
}

/// The period `p` around `t` in `tz`: [start, end).
pub fn window(p: Period, t: DateTime<Utc>, tz: Tz) -> (DateTime<Utc>, DateTime<Utc>) {
    let local = t.with_timezone(&tz).naive_local();
    let day = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap_or_default();
    let (start, end) = match p {
        Period::Hour => {
            let s = local.date().and_hms_opt(local.hour(), 0, 0).unwrap_or(local);
            (s, s + Duration::hours(1))
        }
        Period::Day => (day(local.date()), day(local.date()) + Duration::days(1)),
        Period::Week => {
            let monday = local.date() - Duration::days(local.weekday().num_days_from_monday() as i64);
            (day(monday), day(monday) + Duration::days(7))
        }
        Period::Month => {
            let first = local.date().with_day(1).unwrap_or(local.date());
            let next = first.checked_add_months(chrono::Months::new(1)).unwrap_or(first);
            (day(first), day(next))
        }
    };
    (from_local(start, tz), from_local(end, tz))
}

/// A validated upstream dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub workflow: String,
    pub task: Option<String>,
    pub offset: CycleOffset,
    pub cycles: Option<Period>,
    pub require: Require,
    pub missing: Missing,
}

impl Upstream {
    /// Validates a spec; problems are located relative to the entry.
    pub fn new(spec: &UpstreamSpec) -> Result<Upstream, (String, String)> {
        if !crate::definition::valid_name(&spec.workflow) {
            return Err(("workflow".into(), format!("`{}` is not a valid workflow name", spec.workflow)));
        }
        let offset = match &spec.offset {
            None => CycleOffset::default(),
            Some(text) => CycleOffset::parse(text).map_err(|m| ("offset".to_owned(), m))?,
        };
        Ok(Upstream {
            workflow: spec.workflow.clone(),
            task: spec.task.clone(),
            offset,
            cycles: spec.cycles,
            require: spec.require,
            missing: spec.missing,
        })
    }

    /// Whether every instance this dependency names lies strictly before
    /// the run's own cycle: such an edge can never close a loop.
    pub fn strictly_past(&self) -> bool {
        self.offset.amount < 0 && self.cycles.is_none_or(|p| self.offset.unit >= p)
    }
}

/// The upstream instances a run needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Runs for exactly these logical times.
    Times(Vec<DateTime<Utc>>),
    /// Every run whose logical time is in [from, to) (an upstream without
    /// a schedule has no cycles to expect).
    Window { from: DateTime<Utc>, to: DateTime<Utc> },
}

impl Expected {
    /// The range of logical times it covers, [from, to] inclusive (for
    /// the wake-up index); `None` when nothing is expected.
    pub fn span(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        match self {
            Expected::Times(times) => Some((*times.first()?, *times.last()?)),
            Expected::Window { from, to } => Some((*from, *to - Duration::milliseconds(1))),
        }
    }
}

/// Which instances of `dep`'s workflow a run with `logical` time (in its
/// time zone `tz`) needs, given the upstream's schedule. At most
/// `max_instances` (a per-second upstream over a month would be millions).
pub fn expected(
    dep: &Upstream,
    logical: DateTime<Utc>,
    tz: Tz,
    upstream: Option<&Schedule>,
    max_instances: usize,
) -> Result<Expected, String> {
    let at = dep.offset.apply(logical, tz);
    match (dep.cycles, upstream) {
        (Some(p), Some(schedule)) => {
            let (from, to) = window(p, at, tz);
            let mut times = Vec::new();
            let mut t = from - Duration::seconds(1);
            while let Some(next) = schedule.next_after(t) {
                if next >= to {
                    break;
                }
                times.push(next);
                if times.len() > max_instances {
                    return Err(format!(
                        "`{}` has more than {max_instances} cycles in a {} (limit [master] max_upstream_instances)",
                        dep.workflow,
                        p.as_str()
                    ));
                }
                t = next;
            }
            Ok(Expected::Times(times))
        }
        (Some(p), None) => {
            let (from, to) = window(p, at, tz);
            Ok(Expected::Window { from, to })
        }
        (None, Some(schedule)) => Ok(Expected::Times(schedule.previous_at_or_before(at).into_iter().collect())),
        (None, None) => Ok(Expected::Times(vec![at])),
    }
}

/// An upstream run the store has, as far as a dependency is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamRun {
    pub id: String,
    pub logical_time: DateTime<Utc>,
    pub state: RunState,
    /// The state of the dependency's `task` in this run, if it names one.
    pub task_state: Option<TaskState>,
}

/// Where a dependency stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    Satisfied,
    Waiting,
    /// An upstream instance ended in a way that can never satisfy it (until
    /// it is rerun or forced).
    Failed,
}

/// One upstream instance a run waits for (or that failed it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    pub workflow: String,
    /// `None` for a whole window with no run in it.
    pub logical_time: Option<DateTime<Utc>>,
    pub run_id: Option<String>,
    /// The run's (or its task's) state, or `missing`.
    pub state: String,
    pub standing: Standing,
}

/// Whether `runs` (the upstream workflow's runs in the expected range)
/// satisfy `dep`; the instances it still waits for, or that failed it.
pub fn evaluate(dep: &Upstream, expected: &Expected, runs: &[UpstreamRun]) -> (Standing, Vec<Wait>) {
    let mut waits = Vec::new();
    let judge = |run: &UpstreamRun| -> (Standing, String) {
        let state = match (&dep.task, run.task_state) {
            (Some(_), Some(task)) => {
                if task.is_terminal() || run.state.is_terminal() {
                    let ok = match dep.require {
                        Require::Success => task == TaskState::Succeeded,
                        Require::Finished => task.is_terminal() || run.state.is_terminal(),
                    };
                    return (if ok { Standing::Satisfied } else { Standing::Failed }, task.as_str().into());
                }
                return (Standing::Waiting, task.as_str().into());
            }
            _ => run.state,
        };
        if !state.is_terminal() {
            return (Standing::Waiting, state.as_str().into());
        }
        let ok = match dep.require {
            Require::Success => state == RunState::Succeeded,
            Require::Finished => true,
        };
        (if ok { Standing::Satisfied } else { Standing::Failed }, state.as_str().into())
    };
    let missing = |waits: &mut Vec<Wait>, logical_time: Option<DateTime<Utc>>| {
        if dep.missing == Missing::Wait {
            waits.push(Wait {
                workflow: dep.workflow.clone(),
                logical_time,
                run_id: None,
                state: "missing".into(),
                standing: Standing::Waiting,
            });
        }
    };
    match expected {
        Expected::Times(times) => {
            let mut by_time: BTreeMap<DateTime<Utc>, Vec<&UpstreamRun>> = BTreeMap::new();
            for run in runs {
                by_time.entry(run.logical_time).or_default().push(run);
            }
            for t in times {
                match by_time.get(t) {
                    None => missing(&mut waits, Some(*t)),
                    Some(candidates) => {
                        // Several runs for one cycle (a manual one besides
                        // the scheduled one): the best of them counts.
                        let best = candidates.iter().map(|r| (judge(r), *r)).min_by_key(|((s, _), _)| *s);
                        if let Some(((standing, state), run)) = best
                            && standing != Standing::Satisfied
                        {
                            waits.push(Wait {
                                workflow: dep.workflow.clone(),
                                logical_time: Some(*t),
                                run_id: Some(run.id.clone()),
                                state,
                                standing,
                            });
                        }
                    }
                }
            }
        }
        Expected::Window { from, to } => {
            let inside: Vec<&UpstreamRun> =
                runs.iter().filter(|r| r.logical_time >= *from && r.logical_time < *to).collect();
            if inside.is_empty() {
                missing(&mut waits, None);
            }
            for run in inside {
                let (standing, state) = judge(run);
                if standing != Standing::Satisfied {
                    waits.push(Wait {
                        workflow: dep.workflow.clone(),
                        logical_time: Some(run.logical_time),
                        run_id: Some(run.id.clone()),
                        state,
                        standing,
                    });
                }
            }
        }
    }
    let standing = waits.iter().map(|w| w.standing).max().unwrap_or(Standing::Satisfied);
    (standing, waits)
}

/// An edge of the workflow graph: `from` needs `to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// Every instance it names lies strictly before the needing run's own
    /// cycle ([`Upstream::strictly_past`]); a sub-workflow edge never does.
    pub past: bool,
}

/// A dependency loop that can close (every edge on it may reach the same
/// or a later cycle), as the workflows along it; `None` if there is none.
/// A loop through an edge into the strict past never closes: each turn
/// goes back in time.
pub fn find_loop(edges: &[Edge]) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges.iter().filter(|e| !e.past) {
        graph.entry(e.from.as_str()).or_default().insert(e.to.as_str());
    }
    // Iterative depth-first search with colours; the stack holds the path.
    let mut colour: HashMap<&str, u8> = HashMap::new();
    for &start in graph.keys() {
        if colour.contains_key(start) {
            continue;
        }
        let mut path: Vec<&str> = vec![start];
        let mut iters: Vec<std::collections::btree_set::Iter<'_, &str>> =
            vec![graph.get(start).map(|s| s.iter()).unwrap_or_default()];
        colour.insert(start, 1);
        while let Some(iter) = iters.last_mut() {
            match iter.next() {
                Some(&next) => match colour.get(next) {
                    Some(1) => {
                        let at = path.iter().position(|&p| p == next).unwrap_or(0);
                        let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
                        cycle.push(next.to_owned());
                        return Some(cycle);
                    }
                    Some(_) => {}
                    None => {
                        colour.insert(next, 1);
                        path.push(next);
                        iters.push(graph.get(next).map(|s| s.iter()).unwrap_or_default());
                    }
                },
                None => {
                    iters.pop();
                    if let Some(done) = path.pop() {
                        colour.insert(done, 2);
                    }
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::definition::ScheduleSpec;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn cron(expr: &str, tz: &str) -> Schedule {
        Schedule::new(&ScheduleSpec { cron: expr.into(), timezone: tz.into(), start: None, end: None, catch_up: false })
            .unwrap()
    }

    fn dep(yaml: &str) -> Upstream {
        Upstream::new(&serde_yaml::from_str(yaml).unwrap()).unwrap()
    }

    fn run(id: &str, at: &str, state: RunState) -> UpstreamRun {
        UpstreamRun { id: id.into(), logical_time: t(at), state, task_state: None }
    }

    #[test]
    fn offsets_parse_and_shift_in_the_calendar() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(CycleOffset::parse("-1d").unwrap(), CycleOffset { amount: -1, unit: Period::Day });
        assert_eq!(CycleOffset::parse("-1mo").unwrap().unit, Period::Month);
        assert!(CycleOffset::parse("+1d").unwrap_err().contains("future"));
        assert!(CycleOffset::parse("-1y").unwrap_err().contains("not an offset"));
        // A day back keeps the local time of day (10:00 on both sides of
        // the change to summer time)…
        let day = CycleOffset::parse("-1d").unwrap();
        assert_eq!(day.apply(t("2026-03-30T08:00:00Z"), berlin), t("2026-03-29T08:00:00Z"));
        assert_eq!(day.apply(t("2026-03-29T08:00:00Z"), berlin), t("2026-03-28T09:00:00Z"));
        // …or, where it does not exist (02:30 on the day of the change),
        // the first instant after it.
        assert_eq!(day.apply(t("2026-03-30T00:30:00Z"), berlin), t("2026-03-29T01:00:00Z"));
        // A month back from March 31st is February's last day.
        let month = CycleOffset::parse("-1mo").unwrap();
        assert_eq!(month.apply(t("2026-03-31T10:00:00Z"), chrono_tz::UTC), t("2026-02-28T10:00:00Z"));
    }

    #[test]
    fn periods_are_the_zone_s_calendar() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(
            window(Period::Day, t("2026-01-10T01:00:00Z"), berlin),
            (t("2026-01-09T23:00:00Z"), t("2026-01-10T23:00:00Z"))
        );
        assert_eq!(
            window(Period::Week, t("2026-01-08T12:00:00Z"), chrono_tz::UTC),
            (t("2026-01-05T00:00:00Z"), t("2026-01-12T00:00:00Z")),
            "Monday to Monday"
        );
        assert_eq!(
            window(Period::Month, t("2026-02-14T12:00:00Z"), chrono_tz::UTC),
            (t("2026-02-01T00:00:00Z"), t("2026-03-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_daily_report_expects_the_24_hourly_loads_of_its_day() {
        let hourly = cron("0 * * * *", "UTC");
        let d = dep("{workflow: orders-hourly, cycles: day}");
        let Expected::Times(times) =
            expected(&d, t("2026-01-10T02:00:00Z"), chrono_tz::UTC, Some(&hourly), 100).unwrap()
        else {
            panic!("times expected")
        };
        assert_eq!(times.len(), 24);
        assert_eq!(times[0], t("2026-01-10T00:00:00Z"));
        assert_eq!(times[23], t("2026-01-10T23:00:00Z"));
        assert!(
            expected(&d, t("2026-01-10T02:00:00Z"), chrono_tz::UTC, Some(&hourly), 10)
                .unwrap_err()
                .contains("max_upstream_instances")
        );
    }

    #[test]
    fn yesterday_s_run_and_the_cycle_in_effect() {
        let daily = cron("0 2 * * *", "UTC");
        let y = dep("{workflow: sales-daily, offset: -1d}");
        let e = expected(&y, t("2026-01-10T03:00:00Z"), chrono_tz::UTC, Some(&daily), 100).unwrap();
        assert_eq!(e, Expected::Times(vec![t("2026-01-09T02:00:00Z")]));
        // Without a schedule: exactly the shifted time.
        let e = expected(&y, t("2026-01-10T03:00:00Z"), chrono_tz::UTC, None, 100).unwrap();
        assert_eq!(e, Expected::Times(vec![t("2026-01-09T03:00:00Z")]));
    }

    #[test]
    fn evaluation_waits_fails_or_is_satisfied() {
        let d = dep("{workflow: up, cycles: day}");
        let times = Expected::Times(vec![t("2026-01-10T00:00:00Z"), t("2026-01-10T12:00:00Z")]);
        let (s, waits) = evaluate(&d, &times, &[run("a", "2026-01-10T00:00:00Z", RunState::Succeeded)]);
        assert_eq!(s, Standing::Waiting);
        assert_eq!(waits.len(), 1);
        assert_eq!(waits[0].state, "missing");
        let both = [
            run("a", "2026-01-10T00:00:00Z", RunState::Succeeded),
            run("b", "2026-01-10T12:00:00Z", RunState::Running),
        ];
        assert_eq!(evaluate(&d, &times, &both).0, Standing::Waiting);
        let failed =
            [run("a", "2026-01-10T00:00:00Z", RunState::Failed), run("b", "2026-01-10T12:00:00Z", RunState::Running)];
        let (s, waits) = evaluate(&d, &times, &failed);
        assert_eq!(s, Standing::Failed, "{waits:?}");
        let done = [
            run("a", "2026-01-10T00:00:00Z", RunState::Succeeded),
            run("b", "2026-01-10T12:00:00Z", RunState::Succeeded),
        ];
        assert_eq!(evaluate(&d, &times, &done), (Standing::Satisfied, vec![]));
        // `finished` accepts a failure; `skip` accepts a missing instance.
        let lenient = dep("{workflow: up, cycles: day, require: finished, missing: skip}");
        assert_eq!(evaluate(&lenient, &times, &failed[..1]).0, Standing::Satisfied);
        // A manual rerun of a failed cycle that succeeded counts.
        let rerun = [
            run("a", "2026-01-10T00:00:00Z", RunState::Failed),
            run("a2", "2026-01-10T00:00:00Z", RunState::Succeeded),
            run("b", "2026-01-10T12:00:00Z", RunState::Succeeded),
        ];
        assert_eq!(evaluate(&d, &times, &rerun).0, Standing::Satisfied);
    }

    #[test]
    fn a_task_of_the_upstream_run_can_be_enough() {
        let d = dep("{workflow: up, task: load}");
        let times = Expected::Times(vec![t("2026-01-10T00:00:00Z")]);
        let mut r = run("a", "2026-01-10T00:00:00Z", RunState::Running);
        r.task_state = Some(TaskState::Succeeded);
        assert_eq!(evaluate(&d, &times, &[r.clone()]).0, Standing::Satisfied, "the run still runs other tasks");
        r.task_state = Some(TaskState::Running);
        assert_eq!(evaluate(&d, &times, &[r]).0, Standing::Waiting);
    }

    #[test]
    fn loops_that_can_close_are_found_and_past_ones_are_not() {
        let e = |from: &str, to: &str, past: bool| Edge { from: from.into(), to: to.into(), past };
        assert_eq!(
            find_loop(&[e("a", "b", false), e("b", "a", false)]),
            Some(vec!["a".into(), "b".into(), "a".into()])
        );
        assert_eq!(find_loop(&[e("a", "a", true)]), None, "yesterday's run of itself");
        assert_eq!(find_loop(&[e("a", "b", true), e("b", "a", false)]), None, "each turn goes a day back");
        let chain: Vec<Edge> = (0..5000).map(|i| e(&format!("w{i}"), &format!("w{}", i + 1), false)).collect();
        assert_eq!(find_loop(&chain), None, "a long chain is no loop (and no recursion)");
        assert!(dep("{workflow: x, offset: -1d}").strictly_past());
        assert!(dep("{workflow: x, offset: -1d, cycles: day}").strictly_past());
        assert!(!dep("{workflow: x, offset: -1d, cycles: month}").strictly_past(), "this month may include today");
        assert!(!dep("{workflow: x}").strictly_past());
    }
}
