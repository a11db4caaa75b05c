//! The public REST API's request and response bodies. Times are RFC 3339
//! strings in UTC.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// Every error response: what went wrong, and where when it is about input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    /// A stable machine-readable code, e.g. `invalid_definition`, `not_found`.
    pub code: String,
    /// For people: what was wrong and what to do.
    pub message: String,
    /// Where in the input the problem is, e.g. `tasks[3].depends_on[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Every problem, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub location: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `starting` while the node starts (it answers other requests
    /// once it is ready; they wait until then).
    pub status: String,
    pub version: String,
    /// What a starting node is doing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting: Option<String>,
}

/// The answer to applying a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Applied {
    pub name: String,
    pub version: i64,
    /// False when the definition equals the latest version (nothing changed).
    pub created: bool,
    /// The next scheduled run, if the workflow has a schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowSummary {
    pub name: String,
    pub description: String,
    pub latest_version: i64,
    pub tasks: usize,
    /// The cron expression, if scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Whether its schedule is paused.
    #[serde(default)]
    pub schedule_paused: bool,
    /// The next scheduled cycle (absent if unscheduled or paused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<String>,
    /// The latest runs, newest first (only when asked for with `?runs=N`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_runs: Vec<RunBrief>,
    pub created_at: String,
    pub updated_at: String,
}

/// A run in a list of workflows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunBrief {
    pub id: String,
    pub state: String,
    pub logical_time: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkflowDetail {
    pub name: String,
    pub version: i64,
    pub latest_version: i64,
    pub hash: String,
    /// The definition, canonical JSON.
    #[schema(value_type = Object)]
    pub definition: Value,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VersionSummary {
    pub version: i64,
    pub hash: String,
    pub created_at: String,
}

/// Trigger a run by hand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    /// Overrides of the workflow's params.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: Map<String, Value>,
    /// The run's logical time: RFC 3339, `YYYY-MM-DDTHH:MM:SS` (UTC) or a
    /// date (midnight UTC); default now.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub logical_time: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    pub id: String,
    pub workflow: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// manual, schedule, backfill or job.
    pub kind: String,
    /// queued, running, paused, succeeded, failed or killed.
    pub state: String,
    pub logical_time: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_id: Option<String>,
    /// The run was carried over to cold storage (an action on it restores
    /// it first).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    /// Pass as `before` to get the next (older) page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    pub name: String,
    pub plugin: String,
    /// pending, queued, running, retry_wait, succeeded, failed,
    /// upstream_failed, skipped or killed.
    pub state: String,
    pub attempts: i64,
    pub failures: i64,
    pub forced: bool,
    pub depends_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A run: its params, how many tasks are in each state, and the first
/// page of its tasks (the rest from `GET /v1/runs/{id}/tasks`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunSummary,
    #[schema(value_type = Object)]
    pub params: Value,
    /// The number of the run's tasks in each state.
    #[serde(default)]
    pub task_counts: std::collections::BTreeMap<String, i64>,
    /// The first tasks, in definition order (at most 100).
    pub tasks: Vec<TaskView>,
    /// When the run has more tasks: pass as `after` to
    /// `GET /v1/runs/{id}/tasks` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_next: Option<i64>,
}

/// A page of a run's tasks, in definition order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskList {
    pub tasks: Vec<TaskView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    pub number: i64,
    /// running, succeeded or failed.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether a failure counted against the retry budget.
    pub charged: bool,
    pub worker: String,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskDetail {
    #[serde(flatten)]
    pub task: TaskView,
    /// The task's output, once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub attempts_detail: Vec<AttemptView>,
    /// The latest attempt's last progress report (the plugin's `progress`
    /// calls; they are also lines of its log, source `progress`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
}

/// A task's progress, as its plugin reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProgressView {
    /// 0–100.
    pub percent: u8,
    pub message: String,
    pub at: String,
}

/// Options of a task rerun.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RerunTaskRequest {
    /// Also rerun everything downstream of the task.
    #[serde(default)]
    pub downstream: bool,
}

/// The answer to a run or task action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActionResult {
    /// The engine applied the action (false: it refused, see `message`).
    pub ok: bool,
    pub message: String,
    pub run: RunSummary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    pub workflow: String,
    /// First logical time, inclusive: RFC 3339, a local time
    /// (`YYYY-MM-DDTHH:MM:SS`) or a date (`YYYY-MM-DD`, from its first
    /// instant), both in the workflow's time zone.
    pub from: String,
    /// Last logical time, inclusive: as `from`; a date includes its whole
    /// day.
    pub to: String,
    /// Runs at once; 1 (the default) runs them one after another, in order.
    #[serde(default = "one")]
    #[schema(minimum = 1)]
    pub parallel: u32,
    /// Also run every cycle in the range of the workflows downstream of
    /// this one (transitively), re-flushing cycles that already have runs;
    /// each waits for its upstream instances, so they run in dependency
    /// order.
    #[serde(default)]
    pub include_downstream: bool,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: Map<String, Value>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BackfillView {
    pub id: String,
    pub workflow: String,
    pub from: String,
    pub to: String,
    pub parallel: i64,
    /// Logical times in the range (runs created plus skipped).
    pub total: i64,
    pub created_at: String,
    /// Runs created (one per logical time).
    pub runs: Vec<RunSummary>,
    /// Logical times skipped because a run for them already existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// An ad-hoc job: one plugin (`plugin`, with `params`), or a small inline
/// DAG (`tasks`); exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// One task: the plugin (`name` or `name@version`).
    #[serde(default)]
    pub plugin: Option<String>,
    /// One task: its params.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub params: Option<Value>,
    /// A DAG: tasks as in a workflow definition.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tasks: Option<Vec<Value>>,
    /// A name for the job (shown as its workflow); default `job`.
    #[serde(default)]
    pub name: Option<String>,
    /// Deadline of each attempt, e.g. `30s`.
    #[serde(default)]
    pub timeout: Option<String>,
}

/// A job's run; with `wait=true`, its outcome too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobResult {
    pub run_id: String,
    pub state: String,
    /// Outputs by task name (with `wait=true`, once finished).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub outputs: Map<String, Value>,
    /// The single task's output, for one-plugin jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// Why it failed, by task name.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub errors: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogLineView {
    pub seq: i64,
    pub attempt: i64,
    pub at: String,
    /// plugin, stdout, stderr or dagr.
    pub source: String,
    pub level: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    /// The event's number: numbers only grow, across every tenant.
    pub seq: i64,
    pub at: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
}

/// A page of the event stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<EventView>,
    /// Pass as `after` for the next page (the number of the last event
    /// read, which a filter may have left out).
    pub next: i64,
}

/// A workflow's neighbourhood in its tenant's workflow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LineageView {
    pub workflow: String,
    /// The workflows reached, with their distance: negative upstream,
    /// positive downstream, 0 the workflow itself.
    pub nodes: Vec<LineageNode>,
    pub edges: Vec<LineageEdge>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LineageNode {
    pub name: String,
    pub level: i32,
    /// Its cron, if it has a schedule (and exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
}

/// `from` needs `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LineageEdge {
    pub from: String,
    pub to: String,
    /// `upstream` (waits for its instances) or `child` (runs it as a sub-workflow).
    pub kind: String,
    /// The upstream task waited for, if only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// It names only earlier cycles (such as yesterday's).
    pub past: bool,
}

/// What a run waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunUpstreamView {
    pub run_id: String,
    pub state: String,
    /// `satisfied`, `waiting` or `failed` (an upstream instance failed).
    pub standing: String,
    pub dependencies: Vec<DependencyView>,
}

/// One dependency of a run (or of one of its tasks) and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DependencyView {
    pub workflow: String,
    /// The run's task that waits, if not the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The upstream task waited for, if only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_task: Option<String>,
    pub offset: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycles: Option<String>,
    pub standing: String,
    /// The instances still missing, unfinished or failed.
    pub waits: Vec<WaitView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WaitView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The instance's (or its task's) state, or `missing`.
    pub state: String,
}

/// A workflow's schedule, online or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleStateView {
    pub workflow: String,
    pub paused: bool,
}

/// `POST /v1/webhooks`: a subscription to the tenant's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// Where events are POSTed (http or https, a public address unless the
    /// admin allows more: `[webhooks] allow_private`).
    pub url: String,
    /// Only these kinds (`run.*` for a prefix); none: every kind.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Only this workflow's events.
    #[serde(default)]
    pub workflow: Option<String>,
    /// Most events one request carries, 1–100 (default 1). Above 1, a
    /// request carries up to that many consecutive events as
    /// `{"type": "batch", "timestamp": …, "data": [event, …]}`, each event
    /// as a single delivery would have it, and its `webhook-id` is
    /// `evt_<first>-<last>`: a subscription that follows a busy tenant
    /// keeps up with one request per batch, not per event.
    #[serde(default)]
    pub batch: Option<u32>,
}

/// A webhook subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    pub id: String,
    pub url: String,
    pub kinds: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// `active` or `disabled`.
    pub state: String,
    /// The number of the last event delivered (or passed over).
    pub cursor: i64,
    /// Since when every delivery has failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    pub created_at: String,
    /// Most events one request carries.
    pub batch: i64,
    /// The signing secret (`whsec_…`): shown only when the subscription is
    /// created. Deliveries carry `webhook-id`, `webhook-timestamp` and
    /// `webhook-signature` as the Standard Webhooks specification says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// One attempt to deliver one event to a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// The event's number.
    pub seq: i64,
    pub attempt: i64,
    pub at: String,
    /// The receiver's HTTP status, if it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// `POST /v1/alerts`: a rule that turns events into messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleRequest {
    /// Only this workflow's events; none: every workflow of the tenant.
    #[serde(default)]
    pub workflow: Option<String>,
    /// What alerts: `run.failed`, `run.succeeded`, `task.failed` (its
    /// retries spent), `run.upstream_failed`, `run.waiting`,
    /// `run.waiting_long` (see `waiting_longer_than`), `run.sla_missed`,
    /// `task.timeout_warn`, `webhook.disabled`.
    pub on: Vec<String>,
    /// Where: `{"email": "ops@example.org"}`, `{"slack": URL}`,
    /// `{"teams": URL}` or `{"webhook": URL}`.
    #[schema(value_type = Object)]
    pub channel: std::collections::BTreeMap<String, String>,
    /// Alerts of one workflow and kind within this window go out as one
    /// summary (the first at once), e.g. `1h`, `30m`. Default `1h`.
    #[serde(default)]
    pub group: Option<String>,
    /// Hours in which the rule sends nothing: what it raises then goes out
    /// as one summary when they end.
    #[serde(default)]
    pub quiet_hours: Option<QuietHoursSpec>,
    /// With `run.waiting_long` (and only then): how long a run may wait
    /// for its upstream instances before it alerts, e.g. `2h`.
    #[serde(default)]
    pub waiting_longer_than: Option<String>,
}

/// A daily window of local time, e.g. `22:00` to `07:00` (it may wrap past
/// midnight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuietHoursSpec {
    /// `HH:MM`.
    pub from: String,
    /// `HH:MM`.
    pub to: String,
    /// An IANA time zone; default UTC.
    #[serde(default = "utc")]
    pub timezone: String,
}

fn utc() -> String {
    "UTC".into()
}

/// An alert rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AlertRuleView {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    pub on: Vec<String>,
    /// `email`, `slack`, `teams` or `webhook`.
    pub channel: String,
    pub target: String,
    pub group_seconds: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_hours: Option<QuietHoursSpec>,
    /// For `run.waiting_long`: the wait that alerts, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_longer_than_seconds: Option<i64>,
    pub created_at: String,
}

/// An alert raised, and whether it went out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AlertView {
    pub id: i64,
    pub rule: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub message: String,
    pub at: String,
    /// When it went out (alone or in a summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    /// Why sending it failed (it is retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Not sent yet because its rule is in its quiet hours, until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_until: Option<String>,
}
