//! Master ↔ worker messages.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifies one attempt: run, task (by index in the workflow) and number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttemptKey {
    pub run_id: String,
    pub task: u32,
    pub number: u32,
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.run_id, self.task, self.number)
    }
}

/// Which component to run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PluginSpec {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// An attempt for a worker to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptSpec {
    pub key: AttemptKey,
    /// The run's ownership epoch when this attempt was dispatched; the
    /// result must carry it back.
    pub epoch: i64,
    /// The master that dispatched it (results go to the run's current owner).
    pub master: String,
    pub tenant: String,
    pub workflow: String,
    pub task_name: String,
    pub plugin: PluginSpec,
    /// Rendered params, JSON text.
    pub params: String,
    /// Upstream outputs by task name, a JSON object as text.
    pub inputs: String,
    /// RFC 3339, UTC.
    pub logical_time: String,
    pub idempotency_key: String,
    pub priority: i32,
    /// The run's workflow's grade (0–3), which plugins see.
    #[serde(default)]
    pub grade: u8,
    pub deadline_ms: u64,
    pub memory_bytes: u64,
    pub max_output_bytes: u64,
    pub max_log_bytes: u64,
    pub allow_hosts: Vec<String>,
    /// Most bytes the attempt may keep in its scratch directory.
    #[serde(default)]
    pub scratch_bytes: Option<u64>,
    /// The W3C `traceparent` of the span that dispatched it, when traces
    /// are exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The worker's lease its master knew when it chose the worker: a
    /// worker that holds another since (it lost that one and joined again)
    /// refuses it — the request may have waited, in a frozen worker's
    /// socket, while the master counted the attempt lost with that lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_lease: Option<i64>,
}

pub use dagr_core::attempt::FailureKind;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Succeeded { output: String },
    Failed { kind: FailureKind, message: String },
}

/// A worker's report of a finished attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptResult {
    pub key: AttemptKey,
    pub epoch: i64,
    pub task_name: String,
    pub worker: String,
    pub started_at: i64,
    pub finished_at: i64,
    pub outcome: Outcome,
    /// The W3C `traceparent` of the attempt's span, when traces are
    /// exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

/// What a master made of a worker's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ack {
    /// Recorded (durably).
    Applied,
    /// Not current any more (superseded, killed, duplicate): dropped.
    Stale,
    /// This master does not own the run: report to its owner.
    NotOwner,
}

/// A master asking a worker about an attempt it took over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptRequest {
    pub key: AttemptKey,
    /// The run's new epoch; the worker's result must carry it.
    pub epoch: i64,
    /// The master that now owns the run (node id).
    pub master: String,
}

/// The worker's answer to an [`AdoptRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AdoptResponse {
    Running,
    Finished {
        result: AttemptResult,
    },
    /// Neither running nor finished here. From now on the worker refuses
    /// the attempt, should its dispatch still arrive.
    Unknown {
        /// The worker's lease now, when it can vouch that the attempt never
        /// reached it under that lease (it keeps the key of every attempt
        /// it took since it started, and forgot none). Absent, the attempt
        /// may have run here and had its result dropped (a stale
        /// acknowledgement), or the worker holds no lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        never_under: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    pub key: AttemptKey,
}

/// Attempts a master hands to one worker in one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchBatch {
    pub attempts: Vec<AttemptSpec>,
}

/// A worker's answer to a [`DispatchBatch`]: one verdict per attempt, in
/// the order they were sent, and the worker's load after taking them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchResponse {
    pub verdicts: Vec<Verdict>,
    /// Attempts running (or reserved) on the worker now, and its capacity.
    pub running: u32,
    pub capacity: u32,
}

/// Whether a worker took one attempt of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Accepted,
    Refused { reason: String },
}

/// The largest request body the internal endpoints (workers' dispatch,
/// masters' results) accept. One attempt may carry big inputs (every
/// upstream output, each up to the output limit), so this is generous; a
/// batch is cut well below it ([`BATCH_BYTES`]).
pub const INTERNAL_BODY_LIMIT: usize = 256 << 20;

/// A batch of attempts or results is cut once its payload reaches this
/// size, or [`BATCH_ITEMS`] entries; an item bigger than that goes alone.
pub const BATCH_BYTES: usize = 4 << 20;
/// Most attempts or results in one request.
pub const BATCH_ITEMS: usize = 512;

/// Cuts `items` into batches of at most [`BATCH_ITEMS`] entries and about
/// [`BATCH_BYTES`] of payload (as `size` estimates it), in order.
pub fn batches<T>(items: impl IntoIterator<Item = T>, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut bytes = 0;
    for item in items {
        let n = size(&item);
        match out.last_mut() {
            Some(batch) if batch.len() < BATCH_ITEMS && bytes + n <= BATCH_BYTES => {
                bytes += n;
                batch.push(item);
            }
            _ => {
                bytes = n;
                out.push(vec![item]);
            }
        }
    }
    out
}

impl AttemptSpec {
    /// Roughly how many bytes it takes on the wire.
    pub fn payload_bytes(&self) -> usize {
        self.params.len() + self.inputs.len() + 1024
    }
}

impl AttemptResult {
    /// Roughly how many bytes it takes on the wire.
    pub fn payload_bytes(&self) -> usize {
        let outcome = match &self.outcome {
            Outcome::Succeeded { output } => output.len(),
            Outcome::Failed { message, .. } => message.len(),
        };
        outcome + 512
    }
}

/// The secret every node of a cluster shares. Internal requests (dispatch,
/// results, adoption, cancellation, nudges from the API) carry it in
/// [`ClusterSecret::HEADER`], and internal endpoints refuse requests without
/// it: reaching a worker's port must not be enough to run an attempt as any
/// tenant (with that tenant's secrets), nor a master's to forge a result.
#[derive(Clone)]
pub struct ClusterSecret(std::sync::Arc<str>);

impl ClusterSecret {
    pub const HEADER: &'static str = "x-dagr-cluster-secret";
    pub const MIN_LEN: usize = 16;

    /// `None` unless `secret` is long enough to guess at no better than by
    /// brute force.
    pub fn new(secret: &str) -> Option<ClusterSecret> {
        let secret = secret.trim();
        (secret.len() >= Self::MIN_LEN && http::HeaderValue::from_str(secret).is_ok())
            .then(|| ClusterSecret(std::sync::Arc::from(secret)))
    }

    /// Headers that every internal request carries.
    pub fn headers(&self) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        if let Ok(mut value) = http::HeaderValue::from_str(&self.0) {
            value.set_sensitive(true);
            headers.insert(Self::HEADER, value);
        }
        headers
    }

    /// Whether a request's headers carry this secret (compared in constant
    /// time for a given length).
    pub fn admits(&self, headers: &http::HeaderMap) -> bool {
        let Some(presented) = headers.get(Self::HEADER) else { return false };
        self.matches(presented.as_bytes())
    }

    /// Whether `Authorization: Bearer <secret>` carries the secret (how a
    /// Prometheus server presents it when it scrapes a node).
    pub fn admits_bearer(&self, headers: &http::HeaderMap) -> bool {
        let Some(presented) = headers.get(http::header::AUTHORIZATION) else { return false };
        presented.as_bytes().strip_prefix(b"Bearer ").is_some_and(|token| self.matches(token))
    }

    fn matches(&self, presented: &[u8]) -> bool {
        let (a, b) = (presented, self.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// Results a worker delivers to one master in one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultBatch {
    pub results: Vec<AttemptResult>,
}

/// The master's answer to a [`ResultBatch`]: one [`Ack`] per result, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultAcks {
    pub acks: Vec<Ack>,
}

/// Slots of one worker (a count of attempts it may run at once).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkerSlots {
    pub worker: String,
    pub slots: u32,
}

/// Slots a master would use for tasks of one worker group (`None`: tasks
/// without a group).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct GroupWant {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub slots: u32,
}

/// A master's exchange with the resource leader (Buffalo's active-standby
/// resource scheduler): what it holds now, and what more it would use.
/// Holdings are absolute, so a lost answer or a new leader loses nothing:
/// the next exchange says them again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRequest {
    /// The asking master (node id).
    pub master: String,
    /// The largest leader token this master has seen: a leader with a
    /// smaller one (deposed, and not told yet) must not answer.
    pub seen: i64,
    /// The slots this master keeps, per worker (its attempts running
    /// there, and granted slots it still means to use).
    pub holding: Vec<WorkerSlots>,
    /// Slots it would use beyond those, per worker group.
    pub want: Vec<GroupWant>,
}

/// The leader's answer to a [`ResourceRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceAnswer {
    /// The leader's fencing token.
    pub token: i64,
    /// What the master holds now, per worker: its holdings and the new
    /// grants.
    pub held: Vec<WorkerSlots>,
    /// The most slots the master should keep while others wait for some
    /// (its fair share); `None`: no limit now. Above it, a master gives
    /// slots back as its attempts end instead of starting new ones on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_by_count_and_by_size_and_keep_the_order() {
        let counted = batches(0..(BATCH_ITEMS * 2 + 1), |_| 1);
        assert_eq!(counted.iter().map(Vec::len).collect::<Vec<_>>(), vec![BATCH_ITEMS, BATCH_ITEMS, 1]);
        assert_eq!(counted.concat(), (0..(BATCH_ITEMS * 2 + 1)).collect::<Vec<_>>());

        let third = BATCH_BYTES / 3 + 1;
        let sized = batches(vec![third, third, third, BATCH_BYTES * 2, 1], |n| *n);
        assert_eq!(sized, vec![vec![third, third], vec![third], vec![BATCH_BYTES * 2], vec![1]]);

        assert!(batches(Vec::<usize>::new(), |n| *n).is_empty());
    }

    #[test]
    fn a_cluster_secret_admits_only_itself() {
        assert!(ClusterSecret::new("short").is_none(), "too short");
        assert!(ClusterSecret::new("sixteen chars\nxx").is_none(), "not a header value");
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        assert!(secret.admits(&secret.headers()));
        let other = ClusterSecret::new("0123456789abcdef0124").unwrap();
        assert!(!secret.admits(&other.headers()));
        assert!(!secret.admits(&http::HeaderMap::new()));
        assert!(!format!("{secret:?}").contains("0123"), "never printed");
    }
}
