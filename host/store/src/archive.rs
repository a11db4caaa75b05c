//! Hot and cold data: finished runs carried over into cold partitions, and
//! back.
//!
//! The engine and the API's lists work on the hot tables (`runs`, `tasks`,
//! `attempts`, `task_outputs`, `logs`, `events`, …). A run that finished
//! long enough ago moves, with everything it owns, into the *cold
//! partition* of its tenant and period (the week, month or quarter it was
//! created in): on PostgreSQL a set of tables per partition
//! (`cold_p<id>_runs`, …), on SQLite a database file per partition beside
//! the main one (`archive/<tenant>/<period>-p<id>.db`), attached only while
//! it is read or written. Cold logs are kept per attempt, compressed with
//! zstd. The index table `archive_partitions` records each partition's
//! period and the range of creation and logical times of its runs, so that
//! a lookup by time or by run id (a UUIDv7 carries its creation time)
//! opens only the partitions that can hold it.
//!
//! # A run is in one place
//!
//! A carry-over copies a batch into the cold partition and commits there
//! first; then, in one transaction of the hot database, it deletes the
//! runs that are still eligible (finished, unchanged since the cut-off, no
//! pending command) and counts them into the index; last, it removes the
//! cold copies of the runs that stayed hot. A restore does the reverse:
//! the hot insert commits first, then the cold copy goes. A process killed
//! between two steps leaves a run in the hot tables *and* a stale copy in
//! a partition, never in neither; the hot row wins everywhere (every read
//! looks there first, a list drops a cold row whose id is hot), and the
//! next carry-over of that run replaces the stale copy. Each step is
//! idempotent, so two carriers at once (a leader and a deposed one) cannot
//! lose a run either.

use async_trait::async_trait;
use chrono::{Datelike, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::{Result, RunFilter, RunRow};

/// How long a cold partition's period is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Week,
    Month,
    Quarter,
}

impl Period {
    pub fn parse(text: &str) -> Option<Period> {
        match text {
            "week" => Some(Period::Week),
            "month" => Some(Period::Month),
            "quarter" => Some(Period::Quarter),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Week => "week",
            Period::Month => "month",
            Period::Quarter => "quarter",
        }
    }

    /// The period holding `at` (ms since the epoch, UTC): its name
    /// (`2026-w49`, `2026-12`, `2026-q4`) and its bounds `[from, to)` in ms.
    pub fn of(self, at: i64) -> (String, i64, i64) {
        let day = Utc.timestamp_millis_opt(at).single().unwrap_or_default().date_naive();
        let (name, from, to) = match self {
            Period::Week => {
                let week = day.iso_week();
                let from = NaiveDate::from_isoywd_opt(week.year(), week.week(), chrono::Weekday::Mon).unwrap_or(day);
                (format!("{}-w{:02}", week.year(), week.week()), from, from + chrono::Days::new(7))
            }
            Period::Month => {
                let from = NaiveDate::from_ymd_opt(day.year(), day.month(), 1).unwrap_or(day);
                (format!("{}-{:02}", day.year(), day.month()), from, from + chrono::Months::new(1))
            }
            Period::Quarter => {
                let quarter = (day.month() - 1) / 3;
                let from = NaiveDate::from_ymd_opt(day.year(), quarter * 3 + 1, 1).unwrap_or(day);
                (format!("{}-q{}", day.year(), quarter + 1), from, from + chrono::Months::new(3))
            }
        };
        let ms = |d: NaiveDate| d.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp_millis()).unwrap_or(at);
        (name, ms(from), ms(to))
    }
}

/// One cold partition, as the index table records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRow {
    pub id: i64,
    pub tenant: String,
    /// `2026-12`, `2026-q4`, `2026-w49`.
    pub period: String,
    /// The period's bounds, ms: its runs were created in `[from_time, to_time)`.
    pub from_time: i64,
    pub to_time: i64,
    /// Runs in it.
    pub runs: i64,
    /// The range of its runs' logical times (none while empty).
    pub min_logical: Option<i64>,
    pub max_logical: Option<i64>,
    /// The range of its runs' creation times.
    pub min_created: Option<i64>,
    pub max_created: Option<i64>,
    pub created_at: i64,
    /// When its logs were dropped (a shorter retention than the runs').
    pub logs_dropped_at: Option<i64>,
}

impl PartitionRow {
    /// Whether a run created at `created` (ms) may be in it.
    pub fn may_hold_created(&self, created: i64) -> bool {
        self.from_time <= created && created < self.to_time
    }

    /// Whether it may hold runs with logical times in `[from, to]`.
    pub fn overlaps_logical(&self, from: Option<i64>, to: Option<i64>) -> bool {
        match (self.min_logical, self.max_logical) {
            (Some(lo), Some(hi)) => from.is_none_or(|f| hi >= f) && to.is_none_or(|t| lo <= t),
            _ => false,
        }
    }
}

/// What one carry-over batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CarryOver {
    /// Runs moved into cold partitions.
    pub moved: usize,
    /// Runs copied but left hot (they changed, or a command came, meanwhile).
    pub kept: usize,
    /// Eligible runs seen; fewer than the limit means the tenant is done.
    pub candidates: usize,
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// It was cold and is hot now.
    Restored,
    /// It was hot already.
    Hot,
    /// There is no such run.
    Absent,
}

/// Row counts of the hot tables (the soak's and the operator's gauge).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotCounts {
    pub runs: i64,
    pub tasks: i64,
    pub attempts: i64,
    pub events: i64,
    pub logs: i64,
    pub commands: i64,
}

/// The archive's storage operations.
#[async_trait]
pub trait ArchiveStore: Send + Sync {
    /// Moves up to `limit` of a tenant's runs that finished, and last
    /// changed, before `cutoff` — with their tasks, outputs, attempts,
    /// logs and events — into the cold partitions of their period. A run
    /// with a pending command stays.
    async fn carry_over(&self, tenant: &str, cutoff: i64, period: Period, limit: i64, now: i64) -> Result<CarryOver>;

    /// Brings a cold run back into the hot tables (its `updated_at` becomes
    /// `now`, so the next carry-over leaves it alone for a while).
    async fn restore_run(&self, id: &str, now: i64) -> Result<Restored>;

    /// Restores a tenant's cold runs of `workflow` with logical times in
    /// `[from, to]` (at most `limit`); how many.
    async fn restore_range(
        &self,
        tenant: &str,
        workflow: &str,
        from: i64,
        to: i64,
        limit: i64,
        now: i64,
    ) -> Result<usize>;

    /// A tenant's run that is cold (not hot), with its partition.
    async fn archived_run(&self, tenant: &str, id: &str) -> Result<Option<(RunRow, PartitionRow)>>;

    /// A tenant's cold runs, newest first (by creation), as `filter` says.
    async fn list_archived_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>>;

    /// Partitions, oldest first: one tenant's, or every tenant's.
    async fn partitions(&self, tenant: Option<&str>) -> Result<Vec<PartitionRow>>;

    /// Drops a tenant's partitions whose period ended at or before
    /// `before`, whole; the ones dropped.
    async fn drop_partitions(&self, tenant: &str, before: i64) -> Result<Vec<PartitionRow>>;

    /// Drops the logs kept in a tenant's partitions whose period ended at
    /// or before `before`; the partitions whose logs went.
    async fn drop_cold_logs(&self, tenant: &str, before: i64, now: i64) -> Result<Vec<PartitionRow>>;

    /// A partition's runs after run id `after`, in id order, each as one
    /// JSON object with its tasks, outputs, attempts, events and logs (an
    /// export before retention drops it).
    async fn export_page(&self, partition: i64, after: &str, limit: i64) -> Result<Vec<serde_json::Value>>;

    /// Row counts of the hot tables.
    async fn hot_counts(&self) -> Result<HotCounts>;

    /// Removes the storage of partitions the index no longer lists (left
    /// by a process killed while it dropped a partition: the index row
    /// goes first); what went, by name.
    async fn sweep_orphan_partitions(&self) -> Result<Vec<String>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text).unwrap().timestamp_millis()
    }

    #[test]
    fn periods_are_named_and_bounded_in_utc() {
        let t = at("2026-12-03T09:30:00Z");
        assert_eq!(Period::Month.of(t), ("2026-12".into(), at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z")));
        assert_eq!(Period::Quarter.of(t), ("2026-q4".into(), at("2026-10-01T00:00:00Z"), at("2027-01-01T00:00:00Z")));
        // 2026-12-03 is a Thursday of ISO week 49, which began on Monday the 30th.
        assert_eq!(Period::Week.of(t), ("2026-w49".into(), at("2026-11-30T00:00:00Z"), at("2026-12-07T00:00:00Z")));
        // ISO week 1 of 2027 begins on 2027-01-04; the days before belong to 2026-w53.
        assert_eq!(Period::Week.of(at("2027-01-02T12:00:00Z")).0, "2026-w53");
        for period in [Period::Week, Period::Month, Period::Quarter] {
            let (_, from, to) = period.of(t);
            assert!(from <= t && t < to);
            assert_eq!(period.of(to).1, to, "periods follow each other");
            assert_eq!(Period::parse(period.as_str()), Some(period));
        }
    }

    #[test]
    fn a_partition_is_searched_only_where_it_can_hold_a_run() {
        let p = PartitionRow {
            id: 1,
            tenant: "t".into(),
            period: "2026-12".into(),
            from_time: 100,
            to_time: 200,
            runs: 2,
            min_logical: Some(10),
            max_logical: Some(20),
            min_created: Some(120),
            max_created: Some(150),
            created_at: 0,
            logs_dropped_at: None,
        };
        assert!(p.may_hold_created(100) && !p.may_hold_created(200));
        assert!(p.overlaps_logical(None, None));
        assert!(p.overlaps_logical(Some(20), None) && !p.overlaps_logical(Some(21), None));
        assert!(p.overlaps_logical(None, Some(10)) && !p.overlaps_logical(None, Some(9)));
        let empty = PartitionRow { min_logical: None, max_logical: None, ..p };
        assert!(!empty.overlaps_logical(None, None));
    }
}
