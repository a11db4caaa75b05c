//! dagr's core: the model and the pure logic around it. No I/O, no async,
//! no clock: time comes in as arguments.
//!
//! # Brief overview
//!
//! - [`definition`]: the workflow schema people write ([`WorkflowSpec`],
//!   YAML or JSON) and its validation into a [`Workflow`], reporting every
//!   problem with its location.
//! - [`control`]: control nodes (child workflows, switches, conditions,
//!   sensors) and failure policies.
//! - [`outer`]: the outer DAG — workflows that depend on workflows across
//!   cycles (offsets, periods), evaluated against the store's runs.
//! - [`document`]: limits on tenants' documents (nesting depth, the size
//!   of YAML once its aliases are expanded), checked before parsing.
//! - [`output`]: a task's output as it crosses the WIT boundary (size,
//!   depth, JSON, secrets redacted).
//! - [`template`]: `{{ … }}` templates in task params, checked at apply time,
//!   rendered at dispatch time.
//! - [`schedule`]: cron schedules, catch-up and backfill times.
//! - [`run`]: the run and task state machines ([`RunMachine`]): inputs in,
//!   [`Action`]s out.
//! - [`slots`]: the hash slots runs are sharded into.
//! - [`units`]: durations and sizes as people write them.

pub mod attempt;
pub mod control;
mod dates;
pub mod definition;
pub mod document;
pub mod events;
pub mod net;
pub mod outer;
pub mod output;
pub mod quiet;
pub mod run;
pub mod schedule;
pub mod sla;
pub mod slots;
pub mod template;
pub mod units;
pub mod versions;

pub use definition::{Invalid, Issue, PluginCatalog, PluginRef, ResolvedPlugin, Workflow, WorkflowSpec};
pub use run::{Action, FailureClass, Input, Rejected, RunMachine, RunState, TaskProgress, TaskState};
