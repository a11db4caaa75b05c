//! How the process hands memory back to the system. dagr allocates with
//! mimalloc (see `main.rs`); two of its defaults keep memory that a node
//! idling after its start does not need:
//!
//! - On Linux it commits its 1 GiB arenas eagerly, and pages it frees in
//!   an eagerly committed arena stay resident. Off, they go back.
//! - It gives freed pages back after a delay, but only when it next
//!   allocates; a node that has just started and then waits keeps what
//!   its start used. With no delay they go back as they are freed.
//!
//! An idle `dagr serve` (restarted on its data directory) went from 101 MiB
//! of RSS to 68 MiB with both (docs/BENCHMARKS.md, "Idle memory").
#![allow(unsafe_code)]

use std::os::raw::{c_int, c_long};

/// `mi_option_arena_eager_commit` in mimalloc 3's `mimalloc.h` (the
/// version `libmimalloc-sys` builds unless its `v2` feature is on); the
/// `-sys` crate does not name it.
const ARENA_EAGER_COMMIT: c_int = 4;
/// `mi_option_purge_delay`, ibid.
const PURGE_DELAY: c_int = 15;

/// Runs before `main`, as the C runtime starts the process: Rust's own
/// start-up allocates, and mimalloc reserves (and, by default, commits) its
/// first arena with that allocation, so `main` is too late.
#[used]
#[unsafe(link_section = ".init_array")]
static CONFIGURE: extern "C" fn() = configure;

/// Sets both options, unless the environment sets them (mimalloc's own
/// `MIMALLOC_ARENA_EAGER_COMMIT` and `MIMALLOC_PURGE_DELAY`).
extern "C" fn configure() {
    // Nothing here may allocate: the first allocation reserves the arena.
    for (option, env) in [(ARENA_EAGER_COMMIT, c"MIMALLOC_ARENA_EAGER_COMMIT"), (PURGE_DELAY, c"MIMALLOC_PURGE_DELAY")]
    {
        // SAFETY: `getenv` reads the environment the C runtime set up before
        // any constructor; the name is a NUL-terminated literal.
        let set = unsafe { !libc::getenv(env.as_ptr()).is_null() };
        if !set {
            // SAFETY: sets an option by its number; mimalloc reads options
            // as it reserves arenas, and an unknown number is ignored.
            unsafe { libmimalloc_sys::mi_option_set(option, 0 as c_long) }
        }
    }
}
