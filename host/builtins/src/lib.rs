//! dagr's built-in plugins, compiled from `plugins/` to wasm32-wasip2 by this
//! crate's build script.
//!
//! - [`BUILTINS`] lists every built-in task type with its component bytes,
//!   embedded in the binary so that `dagr serve` needs no files;
//!   [`BUILTINS_HASHED`] the same with each one's SHA-256, computed at build
//!   time.
//! - `<NAME>_PATH` constants give the path of every component the build
//!   produced, including the hostile test components under
//!   `plugins/testing/` that the test suite loads.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
