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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tempfile::TempDir;

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
    by_tenant: HashMap<String, Vec<(TempDir, Option<SystemTime>)>>,
    total: usize,
}

/// The scratch directory of one attempt.
pub(crate) enum Scratch {
    /// The runtime's (of a tenant): empty at the start, reused or removed
    /// at the end. `settled`: its change time, if that was older
    /// than [`SETTLED`] when the attempt took it.
    Owned { dir: TempDir, tenant: String, settled: Option<SystemTime> },
    /// Brought by the caller, who owns its lifetime.
    Given(PathBuf),
}

impl Scratch {
    pub(crate) fn path(&self) -> &Path {
        match self {
            Scratch::Owned { dir, .. } => dir.path(),
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
        let create = || tempfile::Builder::new().prefix("attempt-").tempdir_in(&root);
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
    /// docs); if not, or if the directory is not empty, it is removed.
    pub(crate) fn give_back(&self, scratch: Scratch, returned: bool) {
        let Scratch::Owned { dir, tenant, settled } = scratch else { return };
        // An interrupted attempt's directory is removed: no need to look.
        let changed = if returned { changed_at(dir.path()) } else { None };
        let untouched = settled.is_some() && settled == changed;
        if returned && (untouched || is_empty(dir.path())) {
            let mut idle = self.lock();
            if idle.total < 2 * self.max_per_tenant {
                let mine = idle.by_tenant.entry(tenant).or_default();
                if mine.len() < self.max_per_tenant {
                    mine.push((dir, changed));
                    idle.total += 1;
                    return;
                }
            }
        }
        // Dropping a `TempDir` removes it with everything inside; a failure
        // leaves a directory behind, which costs disk space, not safety.
        drop(dir);
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

/// Bytes of the files under `dir`, recursively (symbolic links count as
/// their own size, not their target's).
pub(crate) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
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

    /// Scratch directories under a fresh root (kept alive by the first value).
    fn scratch_dirs(concurrent: usize) -> (TempDir, ScratchDirs) {
        let root = tempfile::tempdir().unwrap();
        let dirs = ScratchDirs::new(root.path().join("scratch"), concurrent);
        (root, dirs)
    }

    #[test]
    fn empty_directories_are_reused_others_removed() {
        let (_root, dirs) = scratch_dirs(4);

        let first = dirs.take(None, "t").unwrap();
        let first_path = first.path().to_path_buf();
        dirs.give_back(first, true);
        let second = dirs.take(None, "t").unwrap();
        assert_eq!(second.path(), first_path, "an untouched directory is reused");

        std::fs::write(second.path().join("left-over"), b"x").unwrap();
        dirs.give_back(second, true);
        assert!(!first_path.exists(), "a directory with something in it is removed");
        let third = dirs.take(None, "t").unwrap();
        assert_ne!(third.path(), first_path);
        assert_eq!(std::fs::read_dir(third.path()).unwrap().count(), 0);

        let third_path = third.path().to_path_buf();
        dirs.give_back(third, false);
        assert!(!third_path.exists(), "an interrupted attempt's directory is removed");
    }

    #[test]
    fn a_settled_directory_is_checked_by_its_change_time() {
        let (_root, dirs) = scratch_dirs(4);
        let first = dirs.take(None, "t").unwrap();
        let path = first.path().to_path_buf();
        dirs.give_back(first, true);
        std::thread::sleep(SETTLED + Duration::from_millis(50));

        // Untouched: reused.
        let again = dirs.take(None, "t").unwrap();
        assert!(matches!(again, Scratch::Owned { settled: Some(_), .. }));
        dirs.give_back(again, true);
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
        dirs.give_back(written, true);
        assert!(!path.exists(), "a directory with something in it is removed");
    }

    #[test]
    fn given_directories_are_left_alone() {
        let (root, dirs) = scratch_dirs(4);
        let given = root.path().join("mine/nested");
        let scratch = dirs.take(Some(given.clone()), "t").unwrap();
        assert!(given.is_dir());
        std::fs::write(given.join("keep"), b"x").unwrap();
        dirs.give_back(scratch, true);
        assert!(given.join("keep").exists());
        assert_eq!(dirs.lock().total, 0);
    }

    #[test]
    fn tenants_never_share_a_directory() {
        let (root, dirs) = scratch_dirs(4);
        let a = dirs.take(None, "a").unwrap();
        let a_path = a.path().to_path_buf();
        assert!(a_path.starts_with(root.path().join("scratch/a")), "{}", a_path.display());
        dirs.give_back(a, true);
        let b = dirs.take(None, "b/../a").unwrap();
        assert_ne!(b.path(), a_path, "another tenant gets a directory of its own");
        assert!(b.path().starts_with(root.path().join("scratch/b____a")), "{}", b.path().display());
        assert_eq!(dirs.take(None, "a").unwrap().path(), a_path);
    }

    #[test]
    fn idle_directories_are_capped_per_tenant_and_in_all() {
        let (_root, dirs) = scratch_dirs(2);
        let give_back_three = |tenant: &str| {
            let taken: Vec<Scratch> = (0..3).map(|_| dirs.take(None, tenant).unwrap()).collect();
            let paths: Vec<PathBuf> = taken.iter().map(|s| s.path().to_path_buf()).collect();
            for scratch in taken {
                dirs.give_back(scratch, true);
            }
            paths.iter().filter(|p| p.exists()).count()
        };
        assert_eq!(give_back_three("a"), 2, "two kept for `a`, the third removed");
        assert_eq!(give_back_three("b"), 2, "two kept for `b`: four in all");
        // `c` finds no idle directory of its own and the total is reached.
        assert_eq!(give_back_three("c"), 0);
        assert_eq!(dirs.lock().total, 4);
        let a = dirs.take(None, "a").unwrap();
        assert_eq!(dirs.lock().total, 3);
        dirs.give_back(a, true);
        assert_eq!(dirs.lock().total, 4);
    }
}
