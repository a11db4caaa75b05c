//! Measuring and removing a directory tree that a guest built, without
//! trusting its shape.
//!
//! A guest controls everything under its scratch directory: it can nest
//! directories tens of thousands of levels deep, make paths far longer
//! than `PATH_MAX`, and create millions of empty files. So neither walk
//! here recurses (no thread stack grows with the depth), joins paths (every
//! step is relative to a directory descriptor, so no path is ever longer
//! than one name), or holds more than one directory open (it goes back up
//! through `..`, and checks that `..` is the directory it came from, so a
//! directory moved during the walk can never lead it above the root).
//! What the walks keep per level is the names of the subdirectories not yet
//! visited: memory grows with the tree's size, never the stack.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

/// What a directory tree holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Bytes on disk: for every entry (files, directories, links, the root
    /// itself) the larger of its length and its allocated blocks, so both
    /// a sparse file's size and an empty directory's blocks count.
    pub bytes: u64,
    /// Entries below the root (files, directories, links, anything).
    pub entries: u64,
    /// How many directories deep the tree goes (a root with only files: 0).
    pub depth: u64,
}

/// Where a measurement may stop early: once any figure is past its cap,
/// the rest of the tree does not change the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caps {
    pub bytes: u64,
    pub entries: u64,
    pub depth: u64,
}

impl Caps {
    pub(crate) fn exceeded_by(&self, usage: &Usage) -> bool {
        usage.bytes > self.bytes || usage.entries > self.entries || usage.depth > self.depth
    }
}

/// One level of a walk: the directory's identity and its subdirectories
/// still to visit (and, when removing, its own name in its parent).
struct Level {
    id: (u64, u64),
    pending: Vec<CString>,
    name: Option<CString>,
}

fn open_dir(at: impl AsFd, name: impl rustix::path::Arg) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

fn identity(stat: &Stat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

fn footprint(stat: &Stat) -> u64 {
    let length = u64::try_from(stat.st_size).unwrap_or(0);
    let blocks = u64::try_from(stat.st_blocks).unwrap_or(0).saturating_mul(512);
    length.max(blocks)
}

/// Goes from `dir` to its parent, which must be `expected`.
fn up(dir: &OwnedFd, expected: (u64, u64)) -> io::Result<OwnedFd> {
    let parent = open_dir(dir, c"..")?;
    if identity(&rustix::fs::fstat(&parent)?) != expected {
        return Err(io::Error::other("a directory was moved while the tree was walked"));
    }
    Ok(parent)
}

/// Reads a directory's entries: `visit` gets each name and type (the type
/// as the directory reports it, which may be unknown).
fn entries(dir: &OwnedFd, mut visit: impl FnMut(&std::ffi::CStr, FileType) -> io::Result<()>) -> io::Result<()> {
    let mut reader = Dir::new(rustix::io::dup(dir)?)?;
    while let Some(entry) = reader.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        visit(name, entry.file_type())?;
    }
    Ok(())
}

/// Measures the tree under `root`, stopping as soon as a figure passes
/// `caps` (the figures are then lower bounds). Entries that vanish while
/// it walks are skipped.
pub(crate) fn measure(root: &Path, caps: Option<&Caps>) -> io::Result<Usage> {
    let mut cur = open_dir(CWD, root)?;
    let root_stat = rustix::fs::fstat(&cur)?;
    let mut usage = Usage { bytes: footprint(&root_stat), ..Usage::default() };
    let mut stack = vec![Level { id: identity(&root_stat), pending: scan(&cur, &mut usage)?, name: None }];
    while let Some(top) = stack.last_mut() {
        if caps.is_some_and(|c| c.exceeded_by(&usage)) {
            break;
        }
        match top.pending.pop() {
            Some(name) => {
                let child = match open_dir(&cur, name.as_c_str()) {
                    Ok(child) => child,
                    // Removed or replaced meanwhile: nothing to count there.
                    Err(e) if vanished(&e) => continue,
                    Err(e) => return Err(e),
                };
                let id = identity(&rustix::fs::fstat(&child)?);
                cur = child;
                let pending = scan(&cur, &mut usage)?;
                stack.push(Level { id, pending, name: None });
                usage.depth = usage.depth.max(stack.len() as u64 - 1);
            }
            None => {
                stack.pop();
                let Some(parent) = stack.last() else { break };
                cur = up(&cur, parent.id)?;
            }
        }
    }
    Ok(usage)
}

/// Counts a directory's entries into `usage`; returns its subdirectories.
fn scan(dir: &OwnedFd, usage: &mut Usage) -> io::Result<Vec<CString>> {
    let mut subdirs = Vec::new();
    entries(dir, |name, _| {
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(e) if e == Errno::NOENT => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        usage.entries += 1;
        usage.bytes = usage.bytes.saturating_add(footprint(&stat));
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            subdirs.push(name.to_owned());
        }
        Ok(())
    })?;
    Ok(subdirs)
}

fn vanished(e: &io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::NOENT | Errno::NOTDIR | Errno::LOOP))
}

/// Removes `root` and everything under it, however deep. A missing root
/// is not an error.
pub(crate) fn remove(root: &Path) -> io::Result<()> {
    let mut cur = match open_dir(CWD, root) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let root_id = identity(&rustix::fs::fstat(&cur)?);
    let mut stack = vec![Level { id: root_id, pending: clear(&cur)?, name: None }];
    while let Some(top) = stack.last_mut() {
        match top.pending.pop() {
            Some(name) => match open_dir(&cur, name.as_c_str()) {
                Ok(child) => {
                    let id = identity(&rustix::fs::fstat(&child)?);
                    cur = child;
                    let pending = clear(&cur)?;
                    stack.push(Level { id, pending, name: Some(name) });
                }
                Err(e) if Errno::from_io_error(&e) == Some(Errno::NOENT) => {}
                // Replaced by something that is not a directory: unlink it.
                Err(e) if vanished(&e) => unlink(&cur, &name, AtFlags::empty())?,
                Err(e) => return Err(e),
            },
            None => {
                // Everything listed is gone; whatever was added meanwhile
                // (at most what a stopped guest had queued) goes too.
                let more = clear(&cur)?;
                if !more.is_empty() {
                    top.pending = more;
                    continue;
                }
                let done = stack.pop();
                let Some(parent) = stack.last() else { break };
                let parent_fd = up(&cur, parent.id)?;
                if let Some(name) = done.and_then(|l| l.name) {
                    unlink(&parent_fd, &name, AtFlags::REMOVEDIR)?;
                }
                cur = parent_fd;
            }
        }
    }
    drop(cur);
    match std::fs::remove_dir(root) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Unlinks every entry of `dir` that is not a directory; returns the
/// subdirectories.
fn clear(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut subdirs = Vec::new();
    entries(dir, |name, kind| {
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::Unknown => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => FileType::from_raw_mode(stat.st_mode) == FileType::Directory,
                Err(e) if e == Errno::NOENT => return Ok(()),
                Err(e) => return Err(e.into()),
            },
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_owned());
            Ok(())
        } else {
            unlink(dir, name, AtFlags::empty())
        }
    })?;
    Ok(subdirs)
}

fn unlink(dir: &OwnedFd, name: &std::ffi::CStr, flags: AtFlags) -> io::Result<()> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Err(e) if e == Errno::NOENT => Ok(()),
        other => Ok(other?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a chain `depth` directories deep under `root` through
    /// descriptors (its paths are far longer than PATH_MAX), with a file of
    /// `bytes` bytes at the bottom.
    fn chain(root: &Path, depth: usize, bytes: usize) {
        let mut cur = open_dir(CWD, root).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&cur, c"dd", Mode::from_raw_mode(0o755)).unwrap();
            cur = open_dir(&cur, c"dd").unwrap();
        }
        let file =
            rustix::fs::openat(&cur, c"data", OFlags::CREATE | OFlags::WRONLY, Mode::from_raw_mode(0o644)).unwrap();
        rustix::io::write(&file, &vec![7u8; bytes]).unwrap();
    }

    #[test]
    fn a_chain_deeper_than_any_stack_or_path_is_measured_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("scratch");
        std::fs::create_dir(&root).unwrap();
        // 20,000 levels: the recursive walk this replaces overflowed a
        // 2 MiB stack at ~15,000, and the paths are ~60 KiB long.
        chain(&root, 20_000, 100_000);
        let usage = measure(&root, None).unwrap();
        assert_eq!(usage.depth, 20_000);
        assert_eq!(usage.entries, 20_001);
        assert!(usage.bytes >= 100_000, "the file at the bottom counts: {usage:?}");
        // A measurement capped at 100 levels stops early and says so.
        let caps = Caps { bytes: u64::MAX, entries: u64::MAX, depth: 100 };
        let capped = measure(&root, Some(&caps)).unwrap();
        assert!(caps.exceeded_by(&capped) && capped.depth == 101, "{capped:?}");
        // Removing it from a thread with a small stack proves no recursion.
        let removed = root.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || remove(&removed).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert!(!root.exists());
        assert!(dir.path().exists(), "nothing above the root is touched");
    }

    #[test]
    fn empty_entries_and_directories_count() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..300 {
            std::fs::write(root.join(format!("f{i}")), b"").unwrap();
        }
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("a/link")).unwrap();
        let usage = measure(root, None).unwrap();
        assert_eq!(usage.entries, 304);
        assert_eq!(usage.depth, 3);
        assert!(usage.bytes >= 3 * 512, "directories' blocks count: {usage:?}");
        remove(root).unwrap();
        assert!(!root.exists());
        assert!(std::path::Path::new("/etc/passwd").exists(), "a link's target is never followed");
        remove(root).unwrap(); // already gone: fine
    }

    #[test]
    fn a_moved_directory_cannot_lead_the_walk_above_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let mut cur = open_dir(CWD, &root).unwrap();
        let root_id = identity(&rustix::fs::fstat(&cur).unwrap());
        cur = open_dir(&cur, c"a").unwrap();
        cur = open_dir(&cur, c"b").unwrap();
        // `b` moves out of the tree while the walk is inside it.
        std::fs::rename(root.join("a/b"), dir.path().join("b")).unwrap();
        let a_id = identity(&rustix::fs::stat(root.join("a")).unwrap());
        assert!(up(&cur, a_id).is_err());
        assert_ne!(a_id, root_id);
    }
}
