//! Watching a run in the terminal, and the formatting every listing uses.

use super::*;

// Watching a run ----------------------------------------------------------------------

/// Runs with more tasks than this show counts per state, not a line per task.
pub(crate) const TASK_LINES: usize = 40;

/// Polls a run until it ends, showing its tasks: redrawn in place on a
/// terminal, one line per change otherwise.
pub(crate) async fn watch(api: &Api, run_id: &str) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdout().is_terminal();
    let mut drawn_lines = 0;
    let mut seen: HashMap<String, (String, i64)> = HashMap::new();
    let mut run_state = String::new();
    let mut stdout = std::io::stdout();
    loop {
        let detail: RunDetail = api.json(api.get(&["v1", "runs", run_id])).await?;
        let done = matches!(detail.run.state.as_str(), "succeeded" | "failed" | "killed");
        if tty {
            let frame = live_frame(&detail);
            let mut out = String::new();
            if drawn_lines > 0 {
                out.push_str(&format!("\x1b[{drawn_lines}A"));
            }
            let width = terminal_width();
            for line in &frame {
                let line: String = line.chars().take(width.saturating_sub(1)).collect();
                out.push_str(&format!("\r\x1b[2K{line}\n"));
            }
            out.push_str("\x1b[J");
            drawn_lines = frame.len();
            stdout.write_all(out.as_bytes())?;
        } else {
            if detail.run.state != run_state {
                run_state = detail.run.state.clone();
                writeln!(stdout, "{} run {run_state}", now_clock())?;
            }
            for task in &detail.tasks {
                let key = (task.state.clone(), task.attempts);
                if seen.get(&task.name) == Some(&key) {
                    continue;
                }
                let mut line = format!("{} {} {}", now_clock(), task.name, task.state);
                if task.attempts > 1 {
                    line.push_str(&format!(" (attempt {})", task.attempts));
                }
                if let (true, Some(error)) = (task.state == "failed", &task.error) {
                    line.push_str(&format!(": {error}"));
                }
                writeln!(stdout, "{line}")?;
                seen.insert(task.name.clone(), key);
            }
        }
        stdout.flush()?;
        if done {
            let r = &detail.run;
            println!("run {} {} in {}", r.id, r.state, span(r.started_at.as_deref(), r.finished_at.as_deref()));
            for task in detail.tasks.iter().filter(|t| t.state == "failed") {
                let error = task.error.as_deref().unwrap_or("no error recorded");
                println!("  {} failed: {error}", task.name);
            }
            return Ok(if r.state == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The lines of the live display.
pub(crate) fn live_frame(detail: &RunDetail) -> Vec<String> {
    let r = &detail.run;
    let mut lines = vec![format!(
        "{} {}  {}  {}",
        r.workflow,
        r.id,
        r.state,
        span(r.started_at.as_deref(), r.finished_at.as_deref())
    )];
    let total: i64 = detail.task_counts.values().sum();
    if detail.tasks.len() <= TASK_LINES && detail.tasks_next.is_none() {
        let rows = detail
            .tasks
            .iter()
            .map(|t| vec![t.name.clone(), t.state.clone(), t.attempts.to_string(), task_span(t)])
            .collect();
        let text = table(&["TASK", "STATE", "ATTEMPTS", "DURATION"], rows);
        lines.extend(text.lines().map(str::to_owned));
        return lines;
    }
    const ORDER: [&str; 9] =
        ["pending", "queued", "running", "retry_wait", "succeeded", "failed", "upstream_failed", "skipped", "killed"];
    let counted: Vec<String> =
        ORDER.iter().filter_map(|s| detail.task_counts.get(*s).map(|n| format!("{s} {n}"))).collect();
    lines.push(format!("{total} tasks: {}", counted.join(", ")));
    if detail.tasks_next.is_some() {
        // Only the first page is here; the counts cover every task.
        return lines;
    }
    for state in ["running", "failed"] {
        let names: Vec<&str> = detail.tasks.iter().filter(|t| t.state == state).map(|t| t.name.as_str()).collect();
        if names.is_empty() {
            continue;
        }
        let shown = names.iter().take(8).copied().collect::<Vec<_>>().join(" ");
        let more = names.len().saturating_sub(8);
        let more = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        lines.push(format!("{state}: {shown}{more}"));
    }
    lines
}

pub(crate) fn terminal_width() -> usize {
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|&w: &usize| w > 20).unwrap_or(120)
}

// Formatting ----------------------------------------------------------------------------

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded. Ends with a newline.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&Utc))
}

/// `2026-01-31 12:00:00` from an RFC 3339 time.
pub(crate) fn short_time(text: &str) -> String {
    parse_time(text).map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_else(|| text.to_owned())
}

/// `12:00:00.123` from an RFC 3339 time.
pub(crate) fn clock(text: &str) -> String {
    parse_time(text).map(|t| t.format("%H:%M:%S%.3f").to_string()).unwrap_or_else(|| text.to_owned())
}

pub(crate) fn now_clock() -> String {
    Utc::now().format("%H:%M:%S%.3f").to_string()
}

/// How long from `start` to `end` (or to now, while running); `-` before it started.
pub(crate) fn span(start: Option<&str>, end: Option<&str>) -> String {
    let Some(start) = start.and_then(parse_time) else {
        return "-".into();
    };
    let end = end.and_then(parse_time).unwrap_or_else(Utc::now);
    human_duration((end - start).num_milliseconds().max(0) as u64)
}

pub(crate) fn task_span(task: &TaskView) -> String {
    span(task.started_at.as_deref(), task.finished_at.as_deref())
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn human_duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}
