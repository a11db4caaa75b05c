//! `dagr events`: the tenant's event stream, a page of it or followed live
//! (`-f`), resuming after the last event it printed when the connection
//! drops (a server restart loses nothing and repeats nothing).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use dagr_protocol::api::{EventPage, EventView};
use futures::StreamExt as _;

use crate::client::Api;

/// The most a line of the stream may hold before the client gives up on it.
const MAX_FRAME: usize = 16 << 20;

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep following: print new events as they happen.
    #[arg(short, long)]
    follow: bool,
    /// Only this workflow's events.
    #[arg(long)]
    workflow: Option<String>,
    /// Only this run's events.
    #[arg(long)]
    run: Option<String>,
    /// Only these kinds, comma-separated (`run.*` for every run event).
    #[arg(long)]
    kind: Option<String>,
    /// Start after this event number (default: the beginning, or with
    /// --follow, now).
    #[arg(long)]
    after: Option<i64>,
    /// Most events to print without --follow.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

pub async fn events(api: &Api, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let mut query: Vec<(&str, String)> = Vec::new();
    query.extend(args.workflow.clone().map(|w| ("workflow", w)));
    query.extend(args.run.clone().map(|r| ("run", r)));
    query.extend(args.kind.clone().map(|k| ("kind", k)));
    if !args.follow {
        query.push(("after", args.after.unwrap_or(0).to_string()));
        query.push(("limit", args.limit.to_string()));
        let page: EventPage = api.json(api.get(&["v1", "events"]).query(&query)).await?;
        for event in &page.events {
            print(event, args.json)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut last = args.after;
    let mut delay = Duration::from_millis(200);
    loop {
        let mut request = api.get(&["v1", "events"]).query(&query).header("accept", "text/event-stream");
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        match api.send(request).await {
            Ok(response) => {
                delay = Duration::from_millis(200);
                let mut body = response.bytes_stream();
                let mut buffer: Vec<u8> = Vec::new();
                while let Some(chunk) = body.next().await {
                    let Ok(chunk) = chunk else { break };
                    buffer.extend_from_slice(&chunk);
                    while let Some(end) = frame_end(&buffer) {
                        let frame: Vec<u8> = buffer.drain(..end).collect();
                        if let Some(event) = parse_frame(&frame) {
                            last = Some(event.seq);
                            print(&event, args.json)?;
                        }
                    }
                    if buffer.len() > MAX_FRAME {
                        anyhow::bail!("the server sent an event of more than {MAX_FRAME} bytes");
                    }
                }
            }
            // The server refused the request itself: no use asking again.
            Err(e) if e.downcast_ref::<crate::client::ApiFailure>().is_some() => return Err(e),
            Err(e) => eprintln!("warning: {e:#}; reconnecting"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Where the first complete frame (ending in a blank line) ends.
fn frame_end(buffer: &[u8]) -> Option<usize> {
    buffer.windows(2).position(|w| w == b"\n\n").map(|i| i + 2)
}

/// The event of one SSE frame (comments and keep-alives are none).
fn parse_frame(frame: &[u8]) -> Option<EventView> {
    let text = std::str::from_utf8(frame).ok()?;
    let data: Vec<&str> =
        text.lines().filter_map(|l| l.strip_prefix("data:")).map(|d| d.strip_prefix(' ').unwrap_or(d)).collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

fn print(event: &EventView, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(event)?)?;
    } else {
        let whose = [event.workflow.as_deref(), event.run_id.as_deref(), event.task.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        writeln!(out, "{:>8}  {}  {:<20} {whose}  {}", event.seq, event.at, event.kind, event.data)?;
    }
    out.flush()?;
    Ok(())
}

/// `dagr alerts`: the alerts raised for the tenant, newest first, and
/// whether they went out.
pub async fn alerts(api: &Api, limit: u32) -> anyhow::Result<ExitCode> {
    let history: Vec<dagr_protocol::api::AlertView> =
        api.json(api.get(&["v1", "alerts", "history"]).query(&[("limit", limit.to_string())])).await?;
    let mut out = std::io::stdout().lock();
    for a in &history {
        let sent = match (&a.sent_at, &a.error) {
            (Some(at), _) => format!("sent {at}"),
            (None, Some(error)) => format!("not sent: {error}"),
            (None, None) => "waiting for its group's window".into(),
        };
        writeln!(out, "{}  {:<18} {}  ({sent}; rule {})", a.at, a.kind, a.message, a.rule)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_split_at_blank_lines_and_keep_alives_are_skipped() {
        let stream = b": keep-alive\n\nid: 7\nevent: run.state\ndata: {\"seq\":7,\"at\":\"t\",\"kind\":\"run.state\",\"data\":{}}\n\nid: 8";
        let first = frame_end(stream).unwrap();
        assert!(parse_frame(&stream[..first]).is_none(), "a comment is no event");
        let rest = &stream[first..];
        let second = frame_end(rest).unwrap();
        assert_eq!(parse_frame(&rest[..second]).unwrap().seq, 7);
        assert!(frame_end(&rest[second..]).is_none(), "an unfinished frame waits for more");
    }
}
