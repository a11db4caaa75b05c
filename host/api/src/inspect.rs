//! Checking an uploaded component in a separate, limited process.
//!
//! Compiling WebAssembly is expensive, and wasmtime does not treat a
//! compile-time denial of service as a security bug: a crafted component
//! may make Cranelift take minutes or gigabytes. So the API never compiles
//! an upload itself. [`Inspector::inspect`] runs a child process (the
//! `dagr` binary's hidden `plugin inspect`), hands it the bytes on stdin
//! and reads an [`InspectOutcome`] from its stdout. The child runs with
//!
//! - `RLIMIT_CPU`: the kernel stops it (SIGXCPU) after so much CPU time;
//! - `RLIMIT_DATA`: allocations past so much memory fail, and the child
//!   aborts (address space reserved but inaccessible, as wasmtime's pool
//!   reserves it, does not count: the child compiles with a node's engine);
//! - a wall-clock timeout, after which the API kills it (for a child that
//!   sleeps or blocks instead of computing);
//! - a lower scheduling priority, no core dumps, and an empty environment.
//!
//! At most [`InspectLimits::concurrent`] children run at once; further
//! uploads wait for a turn.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use dagr_protocol::plugins::InspectOutcome;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Semaphore;

/// The limits of one inspection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InspectLimits {
    /// CPU time (every thread of the child together); rounded up to seconds.
    pub cpu: Duration,
    /// Memory of the child (its data: heap and writable mappings), bytes.
    pub memory: u64,
    /// Wall-clock time before the child is killed.
    pub wall: Duration,
    /// Children at once.
    pub concurrent: usize,
}

impl Default for InspectLimits {
    fn default() -> Self {
        InspectLimits { cpu: Duration::from_secs(20), memory: 2 << 30, wall: Duration::from_secs(30), concurrent: 2 }
    }
}

/// Why an upload was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectError {
    /// The component is not a valid plugin (the runtime's message).
    Invalid(String),
    /// Checking it hit a limit (the message names it).
    Limit(String),
    /// The check itself failed (could not start the child, garbled
    /// answer): dagr's problem, not the upload's.
    Failed(String),
}

/// The environment variable that makes the inspection child misbehave on
/// purpose (`cpu`: spin, `memory`: allocate without end, `sleep`: block),
/// so that tests can prove each limit stops it. For tests only: it is
/// passed to the child when the server has it set, and nothing else reads it.
pub const TEST_HOG_ENV: &str = "DAGR_TEST_INSPECT_HOG";

/// Runs inspections. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Inspector {
    program: PathBuf,
    args: Vec<String>,
    limits: InspectLimits,
    turns: Arc<Semaphore>,
}

impl Inspector {
    /// Inspects by running `program args…` (it reads the component on
    /// stdin and prints an [`InspectOutcome`] as JSON).
    pub fn new(program: PathBuf, args: Vec<String>, limits: InspectLimits) -> Inspector {
        let turns = Arc::new(Semaphore::new(limits.concurrent.max(1)));
        Inspector { program, args, limits, turns }
    }

    pub fn limits(&self) -> &InspectLimits {
        &self.limits
    }

    /// Validates and describes `bytes` in a limited child process.
    pub async fn inspect(&self, bytes: bytes::Bytes) -> Result<InspectOutcome, InspectError> {
        let _turn = self.turns.acquire().await.map_err(|_| InspectError::Failed("the inspector is closed".into()))?;
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            // Few malloc arenas: each reserves 64 MiB of address space.
            .env("MALLOC_ARENA_MAX", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Ok(hog) = std::env::var(TEST_HOG_ENV) {
            command.env(TEST_HOG_ENV, hog);
        }
        limit_child(&mut command, self.limits.cpu.as_secs_f64().ceil().max(1.0) as u64, self.limits.memory);
        let mut child = command
            .spawn()
            .map_err(|e| InspectError::Failed(format!("cannot start {}: {e}", self.program.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A child that dies early closes its stdin: that is reported by
            // its exit status, not as a write error.
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let output = match tokio::time::timeout(self.limits.wall, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(e)) => return Err(InspectError::Failed(format!("waiting for the inspection failed: {e}"))),
            // Dropping the child kills it (`kill_on_drop`).
            Err(_) => {
                return Err(InspectError::Limit(format!(
                    "checking the component took longer than the wall-clock limit of {} (plugins.compile_timeout)",
                    human(self.limits.wall)
                )));
            }
        };
        let stderr = String::from_utf8_lossy(&output.stderr);
        let memory_limit = || {
            InspectError::Limit(format!(
                "compiling the component needed more memory than the limit of {} (plugins.compile_memory)",
                bytes_human(self.limits.memory)
            ))
        };
        if output.status.success() {
            return match serde_json::from_slice::<InspectOutcome>(&output.stdout) {
                Ok(InspectOutcome::Invalid { message }) if out_of_memory(&message) => Err(memory_limit()),
                Ok(outcome) => Ok(outcome),
                Err(e) => Err(InspectError::Failed(format!(
                    "the inspection answered garbage ({e}): {}",
                    String::from_utf8_lossy(&output.stdout[..output.stdout.len().min(300)])
                ))),
            };
        }
        use std::os::unix::process::ExitStatusExt as _;
        match output.status.signal() {
            Some(libc::SIGXCPU) => Err(InspectError::Limit(format!(
                "compiling the component used more than the CPU-time limit of {} (plugins.compile_cpu)",
                human(self.limits.cpu)
            ))),
            // SIGKILL: the hard CPU limit (one second past the soft one) or
            // the kernel's OOM killer; SIGABRT: an allocation failed.
            Some(libc::SIGKILL) | Some(libc::SIGABRT) => Err(memory_limit()),
            _ if out_of_memory(&stderr) => Err(memory_limit()),
            Some(signal) => {
                tracing::warn!(signal, stderr = %tail(&stderr), "the inspection child crashed");
                Err(InspectError::Invalid(format!("the compiler crashed on this component (signal {signal})")))
            }
            None => Err(InspectError::Failed(format!("the inspection failed ({}): {}", output.status, tail(&stderr)))),
        }
    }
}

/// Sets the child's limits between fork and exec.
#[allow(unsafe_code)]
fn limit_child(command: &mut tokio::process::Command, cpu_seconds: u64, memory: u64) {
    let cpu = libc::rlimit { rlim_cur: cpu_seconds as libc::rlim_t, rlim_max: (cpu_seconds + 1) as libc::rlim_t };
    let data = libc::rlimit { rlim_cur: memory as libc::rlim_t, rlim_max: memory as libc::rlim_t };
    let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe functions may be called. It makes three `setrlimit`
    // calls and one `setpriority` call (plain system calls) on values
    // prepared before the fork: it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            for (resource, limit) in
                [(libc::RLIMIT_CPU, &cpu), (libc::RLIMIT_DATA, &data), (libc::RLIMIT_CORE, &no_core)]
            {
                if libc::setrlimit(resource, limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Lower priority, so that the API and running tasks come first.
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
            Ok(())
        });
    }
}

fn out_of_memory(text: &str) -> bool {
    text.contains("memory allocation of") || text.contains("Cannot allocate memory") || text.contains("out of memory")
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

fn human(duration: Duration) -> String {
    if duration.subsec_millis() == 0 { format!("{}s", duration.as_secs()) } else { format!("{duration:?}") }
}

fn bytes_human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}
