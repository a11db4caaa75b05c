//! Per-attempt scratch directories.
//!
//! Every attempt sees a directory that is empty when it starts. Creating one
//! and removing it costs two filesystem metadata operations per attempt,
//! which on some disks (ext4 with online discard) take hundreds of
//! microseconds, more than the rest of the attempt. Most tasks never touch
//! their scratch directory, so a directory that is still empty when its
//! attempt ends is kept and handed to a later attempt instead.
//!
//! A directory is reused only if
//! - the attempt's `run` returned (output or task error): a guest stopped in
//!   the middle of a host call may have a filesystem operation still queued
//!   on a blocking thread, which could add an entry after the check below;
//! - listing it shows no entry at all: nothing the previous attempt wrote
//!   survives (the guest cannot change the directory's permissions; its
//!   timestamps may differ from a new directory's, like any file's do).
//!
//! Listing a directory takes four system calls; a `stat` is one. Adding,
//! removing or renaming an entry sets the directory's change time (ctime)
//! to the current, clock-tick-coarse time, and unlike the modification
//! time no program can set it to anything else. So a directory whose
//! change time is the one it had when it went idle, and was already older
//! than a settling margin when the attempt started, has had no entry added
//! or removed since it was last found empty: it is reused without listing
//! it. A directory changed within the margin before the attempt could
//! carry a time that a change in the same clock tick would not move, so it
//! is listed, as is every directory on a system without change times.
//!
//! Anything else is removed before the attempt reports.
//! Directories a caller brings ([`crate::Execution::scratch_dir`]) are the
//! caller's and never reused or removed.
//!
//! Each tenant's directories live under the root in a directory of its own
//! and are only ever reused for the same tenant.
//!
//! A guest may leave a tree behind that no recursive walk survives (a
//! chain of directories tens of thousands deep): directories are removed
//! with [`crate::tree::remove`], which neither recurses nor joins paths,
//! and off the guests' threads. A runtime that owns its root exclusively
//! ([`ScratchDirs::exclusive`]) moves what an earlier process left there
//! aside at start and removes it in the background.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::tree::{Caps, Usage};
use crate::{Failure, FailureKind};

/// Hands out scratch directories under one root.
pub(crate) struct ScratchDirs {
    root: PathBuf,
    /// Idle directories: by tenant, and how many in all.
    idle: Mutex<Idle>,
    /// Idle directories kept per tenant (as many as attempts can run at
    /// once, so that a burst of short attempts creates none), and in all
    /// twice that (so that many tenants do not pile up empty directories);
    /// beyond either, a returned directory is removed.
    max_per_tenant: usize,
}

/// How long before an attempt starts its directory's last change must lie
/// for the change time alone to show that it stayed empty (many clock
/// ticks, which are 1–10 ms).
const SETTLED: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Idle {
    /// With each directory its change time when it went idle.
    by_tenant: HashMap<String, Vec<(PathBuf, Option<SystemTime>)>>,
    total: usize,
}

/// The scratch directory of one attempt.
pub(crate) enum Scratch {
    /// The runtime's (of a tenant): empty at the start, reused or removed
    /// at the end. `settled`: its change time, if that was older
    /// than [`SETTLED`] when the attempt took it.
    Owned { dir: PathBuf, tenant: String, settled: Option<SystemTime> },
    /// Brought by the caller, who owns its lifetime.
    Given(PathBuf),
}

impl Scratch {
    /// Whether nothing was added to or removed from the directory since it
    /// was last found empty (see the module docs).
    fn untouched(&self) -> bool {
        match self {
            Scratch::Owned { dir, settled: Some(settled), .. } => changed_at(dir) == Some(*settled),
            _ => false,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Scratch::Owned { dir, .. } => dir,
            Scratch::Given(dir) => dir,
        }
    }
}

impl ScratchDirs {
    /// Scratch directories under `root` for a runtime that runs at most
    /// `concurrent` attempts at once.
    pub(crate) fn new(root: PathBuf, concurrent: usize) -> Self {
        ScratchDirs { root, idle: Mutex::new(Idle::default()), max_per_tenant: concurrent.max(1) }
    }

    /// The scratch directory for an attempt of `tenant`: the caller's,
    /// created if missing, or an empty one of ours.
    pub(crate) fn take(&self, given: Option<PathBuf>, tenant: &str) -> Result<Scratch, String> {
        if let Some(dir) = given {
            if !dir.is_dir() {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| format!("cannot create the scratch directory {}: {e}", dir.display()))?;
            }
            return Ok(Scratch::Given(dir));
        }
        let tenant = path_safe(tenant);
        {
            let mut idle = self.lock();
            if let Some((dir, changed)) = idle.by_tenant.get_mut(&tenant).and_then(Vec::pop) {
                idle.total -= 1;
                let now = SystemTime::now();
                let settled = changed.filter(|&c| now.duration_since(c).is_ok_and(|age| age > SETTLED));
                return Ok(Scratch::Owned { dir, tenant, settled });
            }
        }
        let root = self.root.join(&tenant);
        let create = || tempfile::Builder::new().prefix("attempt-").tempdir_in(&root).map(tempfile::TempDir::keep);
        let dir = match create() {
            Ok(dir) => dir,
            Err(_) => {
                // Most likely the root does not exist (yet, or any more).
                std::fs::create_dir_all(&root)
                    .map_err(|e| format!("cannot create the scratch root {}: {e}", root.display()))?;
                create().map_err(|e| format!("cannot create a scratch directory in {}: {e}", root.display()))?
            }
        };
        Ok(Scratch::Owned { dir, tenant, settled: None })
    }

    /// Takes back an attempt's directory once nothing uses it any more.
    /// `returned` says whether the guest's `run` returned (see the module
    /// docs); if not, or if the directory is not empty, it is removed (on a
    /// blocking thread: a guest's tree can take long to remove).
    pub(crate) async fn give_back(&self, scratch: Scratch, returned: bool) {
        let Some(dir) = self.keep_or_return(scratch, returned) else { return };
        let removed = dir.clone();
        match tokio::task::spawn_blocking(move || crate::tree::remove(&removed)).await {
            Ok(Ok(())) => {}
            // A directory left behind costs disk space, not safety; the
            // next start of an exclusive root removes it.
            Ok(Err(e)) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a scratch directory"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "removing a scratch directory failed"),
        }
    }

    /// Keeps an idle directory for reuse; returns the one to remove.
    fn keep_or_return(&self, scratch: Scratch, returned: bool) -> Option<PathBuf> {
        let Scratch::Owned { dir, tenant, settled } = scratch else { return None };
        // An interrupted attempt's directory is removed: no need to look.
        let changed = if returned { changed_at(&dir) } else { None };
        let untouched = settled.is_some() && settled == changed;
        if returned && (untouched || is_empty(&dir)) {
            let mut idle = self.lock();
            if idle.total < 2 * self.max_per_tenant {
                let mine = idle.by_tenant.entry(tenant).or_default();
                if mine.len() < self.max_per_tenant {
                    mine.push((dir, changed));
                    idle.total += 1;
                    return None;
                }
            }
        }
        Some(dir)
    }

    /// Makes this runtime's root its own: whatever an earlier process left
    /// there (its attempts' directories, perhaps trees no recursive walk
    /// survives) is moved aside at once and removed in the background, as
    /// are the leftovers of earlier moves.
    pub(crate) fn exclusive(&self) -> std::io::Result<()> {
        let Some(parent) = self.root.parent() else { return Ok(()) };
        let Some(base) = self.root.file_name().map(|n| n.to_string_lossy().into_owned()) else { return Ok(()) };
        let aside_prefix = format!("{base}.removing-");
        if self.root.exists() {
            let aside = parent.join(format!("{aside_prefix}{}", uuid_suffix()));
            std::fs::rename(&self.root, &aside)?;
        }
        std::fs::create_dir_all(&self.root)?;
        let leftovers: Vec<PathBuf> = std::fs::read_dir(parent)?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&aside_prefix))
            .map(|e| e.path())
            .collect();
        if !leftovers.is_empty() {
            std::thread::Builder::new().name("dagr-scratch-clean".into()).spawn(move || {
                for dir in leftovers {
                    match crate::tree::remove(&dir) {
                        Ok(()) => tracing::info!(dir = %dir.display(), "removed an earlier process's scratch"),
                        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an earlier process's scratch"),
                    }
                }
            })?;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A tenant name made safe as one path component.
fn path_safe(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if safe.is_empty() { "_".into() } else { safe }
}

/// How often an attempt's scratch directory is measured while the attempt
/// runs. A guest can overshoot a limit by what it does in this time (then
/// it is stopped); the directory is measured once more at the end, so an
/// attempt over a limit never succeeds.
pub const SCRATCH_CHECK: Duration = Duration::from_millis(50);

/// What one attempt's scratch directory may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScratchCaps {
    /// The tenant's quota in bytes ([`crate::Limits::scratch_bytes`]).
    pub quota: Option<u64>,
    /// The node's caps on entries and nesting ([`crate::RuntimeConfig`]).
    pub max_entries: u64,
    pub max_depth: u64,
}

impl ScratchCaps {
    fn caps(&self) -> Caps {
        Caps { bytes: self.quota.unwrap_or(u64::MAX), entries: self.max_entries, depth: self.max_depth }
    }

    /// The failure of an attempt whose directory came to hold `usage`.
    fn failure(&self, usage: &Usage) -> Option<Failure> {
        let message = if let Some(quota) = self.quota.filter(|&q| usage.bytes > q) {
            format!(
                "scratch quota exceeded: the attempt's scratch directory holds more than {quota} bytes \
                 (the tenant's limit scratch_bytes = {quota})"
            )
        } else if usage.entries > self.max_entries {
            format!(
                "scratch quota exceeded: the attempt's scratch directory holds more than {} files and directories \
                 (limit [worker] scratch_max_entries = {})",
                self.max_entries, self.max_entries
            )
        } else if usage.depth > self.max_depth {
            format!(
                "scratch quota exceeded: the attempt nested directories more than {} levels deep \
                 (limit [worker] scratch_max_depth = {})",
                self.max_depth, self.max_depth
            )
        } else {
            return None;
        };
        Some(Failure::new(FailureKind::ScratchQuota, message))
    }
}

/// Enforces [`ScratchCaps`] on one attempt's scratch directory while the
/// attempt runs, and once more at its end.
pub(crate) struct Watch {
    caps: ScratchCaps,
    /// What the directory held when a measurement found it over its caps.
    over: Arc<Mutex<Option<Usage>>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Watch {
    /// Measures `dir` every [`SCRATCH_CHECK`]; past its caps, cancels the
    /// attempt.
    pub(crate) fn start(dir: &Path, caps: ScratchCaps, cancel: &CancellationToken) -> Watch {
        let over = Arc::new(Mutex::new(None));
        let (dir, found, cancel) = (dir.to_path_buf(), over.clone(), cancel.clone());
        let watcher = tokio::spawn(async move {
            loop {
                tokio::time::sleep(SCRATCH_CHECK).await;
                if let Some(usage) = measure(&dir, caps).await
                    && caps.caps().exceeded_by(&usage)
                {
                    *found.lock().unwrap_or_else(|e| e.into_inner()) = Some(usage);
                    cancel.cancel();
                    return;
                }
            }
        });
        Watch { caps, over, watcher }
    }

    /// Stops watching and measures a last time (unless the directory's
    /// change time shows it untouched since it was found empty): the
    /// failure, if the directory went past its caps at any point.
    pub(crate) async fn finish(self, scratch: &Scratch) -> Option<Failure> {
        self.watcher.abort();
        let found = *self.over.lock().unwrap_or_else(|e| e.into_inner());
        let usage = match found {
            Some(usage) => usage,
            None if scratch.untouched() => return None,
            None => measure(scratch.path(), self.caps).await?,
        };
        self.caps.failure(&usage)
    }
}

/// Measures a directory on a blocking thread, stopping early past `caps`.
/// A directory that cannot be measured is reported and counts as empty:
/// an attempt is not failed for the host's trouble.
async fn measure(dir: &Path, caps: ScratchCaps) -> Option<Usage> {
    let measured = dir.to_path_buf();
    let limits = caps.caps();
    match tokio::task::spawn_blocking(move || crate::tree::measure(&measured, Some(&limits))).await {
        Ok(Ok(usage)) => Some(usage),
        Ok(Err(e)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot measure a scratch directory");
            None
        }
        Err(_) => None,
    }
}

/// A suffix that no other directory moved aside has.
fn uuid_suffix() -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// When `dir`'s inode last changed (ctime), where the system says.
fn changed_at(dir: &Path) -> Option<SystemTime> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir).ok()?;
        let secs = u64::try_from(meta.ctime()).ok()?;
        let nanos = u32::try_from(meta.ctime_nsec()).ok()?;
        Some(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

fn is_empty(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    /// Scratch directories under a fresh root (kept alive by the first value).
    fn scratch_dirs(concurrent: usize) -> (TempDir, ScratchDirs) {
        let root = tempfile::tempdir().unwrap();
        let dirs = ScratchDirs::new(root.path().join("scratch"), concurrent);
        (root, dirs)
    }

    #[tokio::test]
    async fn empty_directories_are_reused_others_removed() {
        let (_root, dirs) = scratch_dirs(4);

        let first = dirs.take(None, "t").unwrap();
        let first_path = first.path().to_path_buf();
        dirs.give_back(first, true).await;
        let second = dirs.take(None, "t").unwrap();
        assert_eq!(second.path(), first_path, "an untouched directory is reused");

        std::fs::write(second.path().join("left-over"), b"x").unwrap();
        dirs.give_back(second, true).await;
        assert!(!first_path.exists(), "a directory with something in it is removed");
        let third = dirs.take(None, "t").unwrap();
        assert_ne!(third.path(), first_path);
        assert_eq!(std::fs::read_dir(third.path()).unwrap().count(), 0);

        let third_path = third.path().to_path_buf();
        dirs.give_back(third, false).await;
        assert!(!third_path.exists(), "an interrupted attempt's directory is removed");
    }

    #[tokio::test]
    async fn a_settled_directory_is_checked_by_its_change_time() {
        let (_root, dirs) = scratch_dirs(4);
        let first = dirs.take(None, "t").unwrap();
        let path = first.path().to_path_buf();
        dirs.give_back(first, true).await;
        std::thread::sleep(SETTLED + Duration::from_millis(50));

        // Untouched: reused.
        let again = dirs.take(None, "t").unwrap();
        assert!(matches!(again, Scratch::Owned { settled: Some(_), .. }));
        dirs.give_back(again, true).await;
        assert!(path.exists());
        std::thread::sleep(SETTLED + Duration::from_millis(50));

        // Written to, and its modification time put back as it was: the
        // change time still moved, so the directory is listed and removed.
        let written = dirs.take(None, "t").unwrap();
        assert_eq!(written.path(), path);
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(path.join("left-over"), b"x").unwrap();
        std::fs::File::open(&path).unwrap().set_modified(modified).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), modified);
        dirs.give_back(written, true).await;
        assert!(!path.exists(), "a directory with something in it is removed");
    }

    #[tokio::test]
    async fn given_directories_are_left_alone() {
        let (root, dirs) = scratch_dirs(4);
        let given = root.path().join("mine/nested");
        let scratch = dirs.take(Some(given.clone()), "t").unwrap();
        assert!(given.is_dir());
        std::fs::write(given.join("keep"), b"x").unwrap();
        dirs.give_back(scratch, true).await;
        assert!(given.join("keep").exists());
        assert_eq!(dirs.lock().total, 0);
    }

    #[tokio::test]
    async fn tenants_never_share_a_directory() {
        let (root, dirs) = scratch_dirs(4);
        let a = dirs.take(None, "a").unwrap();
        let a_path = a.path().to_path_buf();
        assert!(a_path.starts_with(root.path().join("scratch/a")), "{}", a_path.display());
        dirs.give_back(a, true).await;
        let b = dirs.take(None, "b/../a").unwrap();
        assert_ne!(b.path(), a_path, "another tenant gets a directory of its own");
        assert!(b.path().starts_with(root.path().join("scratch/b____a")), "{}", b.path().display());
        assert_eq!(dirs.take(None, "a").unwrap().path(), a_path);
    }

    #[tokio::test]
    async fn idle_directories_are_capped_per_tenant_and_in_all() {
        let (_root, dirs) = scratch_dirs(2);
        async fn give_back_three(dirs: &ScratchDirs, tenant: &str) -> usize {
            let taken: Vec<Scratch> = (0..3).map(|_| dirs.take(None, tenant).unwrap()).collect();
            let paths: Vec<PathBuf> = taken.iter().map(|s| s.path().to_path_buf()).collect();
            for scratch in taken {
                dirs.give_back(scratch, true).await;
            }
            paths.iter().filter(|p| p.exists()).count()
        }
        assert_eq!(give_back_three(&dirs, "a").await, 2, "two kept for `a`, the third removed");
        assert_eq!(give_back_three(&dirs, "b").await, 2, "two kept for `b`: four in all");
        // `c` finds no idle directory of its own and the total is reached.
        assert_eq!(give_back_three(&dirs, "c").await, 0);
        assert_eq!(dirs.lock().total, 4);
        let a = dirs.take(None, "a").unwrap();
        assert_eq!(dirs.lock().total, 3);
        dirs.give_back(a, true).await;
        assert_eq!(dirs.lock().total, 4);
    }

    #[tokio::test]
    async fn an_exclusive_root_is_emptied_of_an_earlier_process_s_trees() {
        let (root, dirs) = scratch_dirs(2);
        // What a crashed process left: an attempt's directory with a chain
        // far deeper than a recursive removal survives.
        let left = root.path().join("scratch/t/attempt-old");
        std::fs::create_dir_all(&left).unwrap();
        let mut deep = left.clone();
        for _ in 0..50 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        dirs.exclusive().unwrap();
        assert!(!left.exists(), "moved aside at once");
        assert!(root.path().join("scratch").is_dir());
        let fresh = dirs.take(None, "t").unwrap();
        assert!(fresh.path().starts_with(root.path().join("scratch/t")));
        // The background removal finishes.
        for _ in 0..200 {
            let aside = std::fs::read_dir(root.path())
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("scratch.removing-"));
            if !aside {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the earlier process's scratch was not removed");
    }
}
