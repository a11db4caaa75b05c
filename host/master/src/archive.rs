//! The carry-over: a leader's duty that moves finished runs into cold
//! partitions, drops cold logs and whole partitions past their retention,
//! off the engine's path, in bounded batches.
//!
//! What to do is decided by [`plan`], a pure function of the time, the
//! configuration and each tenant's overrides; [`Archiver`] carries it out
//! against the store ([`dagr_store::ArchiveStore`]), whose moves keep a run
//! in exactly one place whatever happens between two steps. Only the
//! leader carries over (`active`); the moves are idempotent, so a deposed
//! leader that has not noticed yet cannot lose or duplicate a run either.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dagr_metrics::{Counter, Gauge, global};
use dagr_protocol::tenancy::TenantLimits;
use dagr_store::{Period, Store};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `[archive]`: when runs go cold and how long cold data stays.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveConfig {
    /// Off: nothing moves (lists and restores still see existing partitions).
    pub enabled: bool,
    /// Finished runs older than this move (per tenant: `archive_after_ms`).
    pub after: Duration,
    /// How long a cold partition's period is.
    pub period: Period,
    /// Cold partitions whose period ended longer ago go whole; `None`: never.
    pub retain_for: Option<Duration>,
    /// Cold logs go sooner, if set.
    pub logs_retain_for: Option<Duration>,
    /// Audit records older than this go (every tenant's); `None`: never.
    pub audit_retain_for: Option<Duration>,
    /// Runs (or audit records) per batch.
    pub batch: i64,
    /// How long the carrier sleeps when it has nothing to move.
    pub interval: Duration,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            enabled: true,
            after: Duration::from_secs(7 * 86_400),
            period: Period::Month,
            retain_for: None,
            logs_retain_for: None,
            audit_retain_for: None,
            batch: 500,
            interval: Duration::from_secs(60),
        }
    }
}

/// One tenant's archive policy: the configuration with its overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub after_ms: i64,
    pub retain_ms: Option<i64>,
    pub logs_retain_ms: Option<i64>,
}

impl Policy {
    pub fn of(config: &ArchiveConfig, limits: &TenantLimits) -> Policy {
        let ms = |d: Duration| d.as_millis().min(i64::MAX as u128) as i64;
        let over = |v: Option<u64>| v.map(|v| v.min(i64::MAX as u64) as i64);
        Policy {
            after_ms: over(limits.archive_after_ms).unwrap_or(ms(config.after)),
            retain_ms: over(limits.archive_retain_ms).or(config.retain_for.map(ms)),
            logs_retain_ms: over(limits.archive_logs_retain_ms).or(config.logs_retain_for.map(ms)),
        }
    }
}

/// One thing a round does for a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Duty {
    /// Move runs finished before `cutoff`.
    CarryOver { tenant: String, cutoff: i64 },
    /// Drop the logs of partitions whose period ended before `before`.
    DropLogs { tenant: String, before: i64 },
    /// Drop partitions whose period ended before `before`.
    DropPartitions { tenant: String, before: i64 },
    /// Drop audit records made before `before` (every tenant's).
    DropAudit { before: i64 },
}

/// What a round does at `now`: for each tenant, its carry-over, then the
/// retention of its logs and partitions. Retention never reaches data the
/// carry-over would still keep hot (a retention shorter than `after` is
/// counted from `after`). Last, the audit log's retention
/// (`audit_retain_ms`), counted from `now`.
pub fn plan(now: i64, tenants: &[(String, Policy)], audit_retain_ms: Option<i64>) -> Vec<Duty> {
    let mut duties = Vec::new();
    for (tenant, policy) in tenants {
        let cutoff = now.saturating_sub(policy.after_ms);
        duties.push(Duty::CarryOver { tenant: tenant.clone(), cutoff });
        if let Some(logs) = policy.logs_retain_ms {
            duties.push(Duty::DropLogs { tenant: tenant.clone(), before: cutoff.saturating_sub(logs) });
        }
        if let Some(retain) = policy.retain_ms {
            duties.push(Duty::DropPartitions { tenant: tenant.clone(), before: cutoff.saturating_sub(retain) });
        }
    }
    if let Some(keep) = audit_retain_ms {
        duties.push(Duty::DropAudit { before: now.saturating_sub(keep) });
    }
    duties
}

struct Metrics {
    moved: Arc<Counter>,
    kept: Arc<Counter>,
    dropped: Arc<Counter>,
    audit_dropped: Arc<Counter>,
    failures: Arc<Counter>,
    hot_runs: Arc<Gauge>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics {
        moved: global().counter("dagr_archive_runs_moved_total", "Runs carried over to cold partitions."),
        kept: global().counter(
            "dagr_archive_runs_kept_total",
            "Runs copied to cold storage but kept hot (they changed while they moved).",
        ),
        dropped: global().counter("dagr_archive_partitions_dropped_total", "Cold partitions dropped by retention."),
        audit_dropped: global()
            .counter("dagr_archive_audit_records_dropped_total", "Audit records dropped by retention."),
        failures: global().counter("dagr_archive_failures_total", "Carry-over or retention steps that failed."),
        hot_runs: global().gauge("dagr_archive_hot_runs", "Runs in the hot tables at the last carry-over round."),
    })
}

pub struct Archiver {
    store: Arc<dyn Store>,
    config: ArchiveConfig,
    /// When the hot tables were last counted (a count reads them whole:
    /// once a minute, not every round).
    counted: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How often the hot tables are counted for `dagr_archive_hot_runs` (and
/// the storage of dropped partitions swept).
const COUNT_EVERY: Duration = Duration::from_secs(60);

impl Archiver {
    /// Carries over while `active` (the leader, in a cluster).
    pub fn start(store: Arc<dyn Store>, config: ArchiveConfig, active: watch::Receiver<bool>) -> JoinHandle<()> {
        let archiver = Archiver::new(store, config);
        tokio::spawn(async move { archiver.run(active).await })
    }

    /// An archiver whose rounds the caller runs ([`Archiver::round`]).
    pub fn new(store: Arc<dyn Store>, config: ArchiveConfig) -> Archiver {
        metrics();
        Archiver { store, config, counted: std::sync::Mutex::new(None) }
    }

    async fn run(self, active: watch::Receiver<bool>) {
        loop {
            let busy = if *active.borrow() && self.config.enabled {
                match self.round().await {
                    Ok(busy) => busy,
                    Err(e) => {
                        metrics().failures.inc();
                        tracing::warn!(error = %e, "the carry-over to cold storage failed; will retry");
                        false
                    }
                }
            } else {
                false
            };
            // A full batch means more is waiting: go on at once (each batch
            // is bounded, and the engine's writes go between them).
            if !busy {
                tokio::time::sleep(self.config.interval).await;
            }
        }
    }

    /// One round over every tenant; true if some tenant had a full batch.
    pub async fn round(&self) -> Result<bool, dagr_store::Error> {
        let now = chrono::Utc::now().timestamp_millis();
        let mut tenants = Vec::new();
        for row in self.store.list_tenants().await? {
            let limits: TenantLimits = serde_json::from_str(&row.limits).unwrap_or_default();
            tenants.push((row.name, Policy::of(&self.config, &limits)));
        }
        let mut busy = false;
        let audit_retain_ms = self.config.audit_retain_for.map(|d| d.as_millis().min(i64::MAX as u128) as i64);
        for duty in plan(now, &tenants, audit_retain_ms) {
            match duty {
                Duty::CarryOver { tenant, cutoff } => {
                    let done =
                        self.store.carry_over(&tenant, cutoff, self.config.period, self.config.batch, now).await?;
                    metrics().moved.add(done.moved as u64);
                    metrics().kept.add(done.kept as u64);
                    if done.moved > 0 {
                        tracing::info!(
                            tenant,
                            moved = done.moved,
                            kept = done.kept,
                            "carried runs over to cold storage"
                        );
                    }
                    busy |= done.candidates as i64 >= self.config.batch;
                }
                Duty::DropLogs { tenant, before } => {
                    for part in self.store.drop_cold_logs(&tenant, before, now).await? {
                        tracing::info!(
                            tenant,
                            period = part.period,
                            "dropped the logs of a cold partition (retention)"
                        );
                    }
                }
                Duty::DropPartitions { tenant, before } => {
                    for part in self.store.drop_partitions(&tenant, before).await? {
                        metrics().dropped.inc();
                        tracing::info!(
                            tenant,
                            period = part.period,
                            runs = part.runs,
                            "dropped a cold partition (retention)"
                        );
                    }
                }
                Duty::DropAudit { before } => {
                    let dropped = self.store.drop_audit(before, self.config.batch).await?;
                    metrics().audit_dropped.add(dropped);
                    busy |= dropped as i64 >= self.config.batch;
                }
            }
        }
        let due = {
            let mut counted = self.counted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = counted.is_none_or(|at| at.elapsed() >= COUNT_EVERY);
            if due {
                *counted = Some(std::time::Instant::now());
            }
            due
        };
        if due && let Ok(counts) = self.store.hot_counts().await {
            metrics().hot_runs.set(counts.runs);
        }
        if due {
            // Storage of a partition whose drop was cut short by a crash.
            for orphan in self.store.sweep_orphan_partitions().await? {
                tracing::info!(storage = orphan, "removed the storage of a dropped cold partition");
            }
        }
        Ok(busy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_s_overrides_win_over_the_configuration() {
        let config = ArchiveConfig { retain_for: Some(Duration::from_secs(100)), ..ArchiveConfig::default() };
        let plain = Policy::of(&config, &TenantLimits::default());
        assert_eq!(plain, Policy { after_ms: 7 * 86_400_000, retain_ms: Some(100_000), logs_retain_ms: None });
        let limits =
            TenantLimits { archive_after_ms: Some(5), archive_logs_retain_ms: Some(7), ..TenantLimits::default() };
        assert_eq!(
            Policy::of(&config, &limits),
            Policy { after_ms: 5, retain_ms: Some(100_000), logs_retain_ms: Some(7) }
        );
    }

    #[test]
    fn retention_is_counted_from_the_carry_over_s_cut_off() {
        let policy = Policy { after_ms: 1_000, retain_ms: Some(50_000), logs_retain_ms: Some(5_000) };
        let keep = Policy { after_ms: 1_000, retain_ms: None, logs_retain_ms: None };
        let duties = plan(100_000, &[("a".into(), policy), ("b".into(), keep)], None);
        assert_eq!(
            duties,
            vec![
                Duty::CarryOver { tenant: "a".into(), cutoff: 99_000 },
                Duty::DropLogs { tenant: "a".into(), before: 94_000 },
                Duty::DropPartitions { tenant: "a".into(), before: 49_000 },
                Duty::CarryOver { tenant: "b".into(), cutoff: 99_000 },
            ]
        );
        // Nothing underflows at the start of time.
        let huge = Policy { after_ms: i64::MAX, retain_ms: Some(i64::MAX), logs_retain_ms: None };
        assert!(matches!(plan(0, &[("c".into(), huge)], None)[1], Duty::DropPartitions { before, .. } if before < 0));
    }

    #[test]
    fn the_audit_log_s_retention_is_one_duty_for_every_tenant_counted_from_now() {
        let keep = Policy { after_ms: 1_000, retain_ms: None, logs_retain_ms: None };
        let tenants = [("a".into(), keep), ("b".into(), keep)];
        let duties = plan(100_000, &tenants, Some(30_000));
        assert_eq!(duties.iter().filter(|d| matches!(d, Duty::DropAudit { .. })).count(), 1);
        assert_eq!(duties.last(), Some(&Duty::DropAudit { before: 70_000 }));
        assert!(!plan(100_000, &tenants, None).iter().any(|d| matches!(d, Duty::DropAudit { .. })));
    }
}
