//! How the process hands memory back to the system. dagr allocates with
//! mimalloc (see `main.rs`); two of its defaults keep memory that a node
//! idling after its start does not need:
//!
//! - On Linux it commits its 1 GiB arenas eagerly, and pages it frees in
//!   an eagerly committed arena stay resident. Off, they go back.
//! - It gives freed pages back after a delay (10 ms), but only when it
//!   next allocates; a node that has just started and then waits keeps
//!   what its start used.
//!
//! An idle `dagr serve` (restarted on its data directory) went from 101 MiB
//! of RSS to 68 MiB with eager commit off and no delay (docs/BENCHMARKS.md,
//! "Idle memory"). No delay at all made a busy node fault every page it
//! allocated again, step after step (18,000–19,000 page faults per fan-out
//! of 10,000, 5–10 % of its CPU): the delay is 100 ms, which keeps pages
//! through a burst and costs an idle node nothing it did not cost before
//! (docs/BENCHMARKS.md, "Freed pages kept for 100 ms").
//!
//! SQLite is C and does not go through Rust's global allocator: by default
//! it allocates with glibc's `malloc` and counts every allocation under a
//! process-wide mutex. [`configure`] gives it mimalloc and turns the
//! counting off (docs/BENCHMARKS.md, "SQLite's allocations").
#![allow(unsafe_code)]

use std::os::raw::{c_int, c_long, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use libsqlite3_sys as sqlite;

/// `mi_option_arena_eager_commit` in mimalloc 3's `mimalloc.h` (the
/// version `libmimalloc-sys` builds unless its `v2` feature is on); the
/// `-sys` crate does not name it.
const ARENA_EAGER_COMMIT: c_int = 4;
/// `mi_option_purge_delay`, ibid.
const PURGE_DELAY: c_int = 15;
/// How long freed pages stay before they go back to the system.
const PURGE_DELAY_MS: c_int = 100;

/// Runs before `main`, as the C runtime starts the process: Rust's own
/// start-up allocates, and mimalloc reserves (and, by default, commits) its
/// first arena with that allocation, so `main` is too late.
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE: extern "C" fn() = configure;

/// Sets both options, unless the environment sets them (mimalloc's own
/// `MIMALLOC_ARENA_EAGER_COMMIT` and `MIMALLOC_PURGE_DELAY`), then SQLite's
/// allocator.
extern "C" fn configure() {
    configure_mimalloc();
    configure_sqlite();
}

fn configure_mimalloc() {
    // Nothing here may allocate: the first allocation reserves the arena.
    for (option, env, value) in [
        (ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT", 0),
        (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS),
    ] {
        // SAFETY: `getenv` reads the environment the C runtime set up before
        // any constructor; the name is a NUL-terminated literal.
        let set = unsafe { !libc::getenv(env.as_ptr()).is_null() };
        if !set {
            // SAFETY: sets an option by its number; mimalloc reads options
            // as it reserves arenas, and an unknown number is ignored.
            unsafe { libmimalloc_sys::mi_option_set(option, value as c_long) }
        }
    }
}

/// SQLite's allocations go to mimalloc, without its memory statistics
/// (`SQLITE_CONFIG_MEMSTATUS`: a global mutex taken on every allocation and
/// free, for counters dagr never reads). Both must be set before SQLite
/// initialises, which the first connection does; before `main` nothing has
/// opened one. Nothing here allocates.
fn configure_sqlite() {
    let methods = sqlite::sqlite3_mem_methods {
        xMalloc: Some(sqlite_malloc),
        xFree: Some(sqlite_free),
        xRealloc: Some(sqlite_realloc),
        xSize: Some(sqlite_size),
        xRoundup: Some(sqlite_roundup),
        xInit: Some(sqlite_init),
        xShutdown: Some(sqlite_shutdown),
        pAppData: std::ptr::null_mut(),
    };
    // SAFETY: SQLite has not been initialised (no connection exists before
    // `main`); `sqlite3_config` takes an int for MEMSTATUS and a pointer to
    // the methods, which it copies. Should either fail, SQLite keeps its
    // defaults, which work.
    let codes = unsafe {
        [
            sqlite::sqlite3_config(sqlite::SQLITE_CONFIG_MEMSTATUS, 0 as c_int),
            sqlite::sqlite3_config(sqlite::SQLITE_CONFIG_MALLOC, &methods as *const sqlite::sqlite3_mem_methods),
        ]
    };
    SQLITE_CONFIG.store(
        codes.into_iter().find(|&code| code != sqlite::SQLITE_OK).unwrap_or(sqlite::SQLITE_OK),
        Ordering::Relaxed,
    );
}

/// What SQLite answered to [`configure_sqlite`]: its first error code, or
/// `SQLITE_OK`.
static SQLITE_CONFIG: AtomicI32 = AtomicI32::new(sqlite::SQLITE_OK);

/// Logs it if SQLite refused its allocator (it then works on its own
/// defaults, only slower); called by the nodes that open SQLite, once their
/// logs are set up.
pub fn warn_if_sqlite_unconfigured() {
    let code = SQLITE_CONFIG.load(Ordering::Relaxed);
    if code != sqlite::SQLITE_OK {
        tracing::warn!(code, "SQLite refused mimalloc as its allocator; it allocates with the system's malloc");
    }
}

/// SQLite asks for at least one byte (it never calls `xMalloc(0)`), and
/// expects 8-byte alignment; mimalloc's is 16.
unsafe extern "C" fn sqlite_malloc(size: c_int) -> *mut c_void {
    // SAFETY: mimalloc's `malloc`; a negative size cannot come from SQLite.
    unsafe { libmimalloc_sys::mi_malloc(size.max(0) as usize) }
}

unsafe extern "C" fn sqlite_free(ptr: *mut c_void) {
    // SAFETY: SQLite frees only what `sqlite_malloc`/`sqlite_realloc` gave it.
    unsafe { libmimalloc_sys::mi_free(ptr) }
}

unsafe extern "C" fn sqlite_realloc(ptr: *mut c_void, size: c_int) -> *mut c_void {
    // SAFETY: as `sqlite_free`: the pointer is one of mimalloc's.
    unsafe { libmimalloc_sys::mi_realloc(ptr, size.max(0) as usize) }
}

/// The usable size of an allocation, which SQLite uses as its real size.
unsafe extern "C" fn sqlite_size(ptr: *mut c_void) -> c_int {
    // SAFETY: as `sqlite_free`: the pointer is one of mimalloc's.
    let size = unsafe { libmimalloc_sys::mi_usable_size(ptr) };
    c_int::try_from(size).unwrap_or(c_int::MAX)
}

/// What `sqlite_malloc` of `size` would really give.
unsafe extern "C" fn sqlite_roundup(size: c_int) -> c_int {
    // SAFETY: a pure function of the size.
    let good = unsafe { libmimalloc_sys::mi_good_size(size.max(0) as usize) };
    c_int::try_from(good).unwrap_or(size)
}

unsafe extern "C" fn sqlite_init(_: *mut c_void) -> c_int {
    sqlite::SQLITE_OK
}

unsafe extern "C" fn sqlite_shutdown(_: *mut c_void) {}
