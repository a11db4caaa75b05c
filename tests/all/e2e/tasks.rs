//! Tasks within a run: data passing, retries, timeouts, trigger rules,
//! kill, pause, reruns, force-success; ad-hoc jobs and logs.

use super::*;

// 1. Data passing ----------------------------------------------------------------------

#[tokio::test]
async fn a_diamond_passes_outputs_as_inputs_and_through_templates() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-diamond
params: {x: default-x, n: 10}
tasks:
- name: a
  plugin: echo
  params: {who: "{{ params.x }}", day: "{{ ds }}", v: 7}
- name: b
  plugin: echo
  depends_on: [a]
  params: {from_a: "{{ inputs.a.params.v }}", text: "a said {{ inputs.a.params.who }}"}
- name: c
  plugin: fib
  depends_on: [a]
  params: {n: "{{ params.n }}"}
- name: d
  plugin: transform
  depends_on: [b, c]
  params:
    filter: '{b: .inputs.b.params, fib: .inputs.c.value, day: .vars.day}'
    vars: {day: "{{ ds_nodash }}"}
"#,
    )
    .await;
    let id =
        api.trigger("e2e-diamond", json!({"params": {"x": "override"}, "logical_time": "2026-03-04T05:06:07Z"})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(run["params"], json!({"x": "override", "n": 10}));
    assert_eq!(run["logical_time"], "2026-03-04T05:06:07.000Z");

    let a = api.task(&id, "a").await;
    assert_eq!(a["output"], json!({"params": {"who": "override", "day": "2026-03-04", "v": 7}, "inputs": {}}));
    // b sees a's whole output under a's name; a whole-string template keeps
    // the JSON type (7 stays a number).
    let b = api.task(&id, "b").await;
    assert_eq!(
        b["output"],
        json!({
            "params": {"from_a": 7, "text": "a said override"},
            "inputs": {"a": a["output"].clone()},
        })
    );
    let c = api.task(&id, "c").await;
    assert_eq!(c["output"], json!({"n": 10, "value": 55}));
    let d = api.task(&id, "d").await;
    assert_eq!(d["output"], json!({"b": {"from_a": 7, "text": "a said override"}, "fib": 55, "day": "20260304"}));
    assert_eq!(task_of(&run, "d")["depends_on"], json!(["b", "c"]));
}

// 2–4. Retries, exhaustion, timeouts ------------------------------------------------

#[tokio::test]
async fn a_big_output_reaches_a_dependent_started_in_the_same_step() {
    // Outputs over 64 KiB are not kept in memory; the dependent starts in
    // the step that records its upstream's output, before that is committed.
    let api = Api::shared().await;
    let blob = "x".repeat(100 << 10);
    api.apply(&format!(
        r#"
name: e2e-big-output
tasks:
- name: a
  plugin: echo
  params: {{blob: "{blob}"}}
- name: b
  plugin: transform
  depends_on: [a]
  params: {{filter: '.inputs.a.params.blob | length'}}
"#
    ))
    .await;
    let id = api.trigger("e2e-big-output", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(api.task(&id, "b").await["output"], json!(100 << 10));
}

#[tokio::test]
async fn a_retryable_failure_is_retried_until_it_succeeds() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-retries
tasks:
- name: flaky
  plugin: fail
  params: {mode: retryable, attempts: 2}
  retries: 2
  retry_backoff: {kind: fixed, delay: 0s}
- name: after
  plugin: echo
  depends_on: [flaky]
"#,
    )
    .await;
    let id = api.trigger("e2e-retries", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let flaky = api.task(&id, "flaky").await;
    assert_eq!(flaky["state"], "succeeded");
    assert_eq!(flaky["attempts"], 3);
    assert_eq!(flaky["failures"], 2);
    assert_eq!(flaky["output"], json!({"succeeded_on_attempt": 3}));
    assert_eq!(attempt_summary(&flaky), vec![failed("retryable", true), failed("retryable", true), succeeded()]);
    let numbers: Vec<i64> =
        flaky["attempts_detail"].as_array().unwrap().iter().map(|a| a["number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    assert_eq!(attempts(&run, "after"), 1);
}

#[tokio::test]
async fn exhausted_retries_fail_the_task_its_downstream_and_the_run() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-exhausted
tasks:
- name: broken
  plugin: fail
  params: {mode: retryable, message: always broken}
  retries: 1
  retry_backoff: {kind: fixed, delay: 10ms}
- name: next
  plugin: echo
  depends_on: [broken]
- name: last
  plugin: echo
  depends_on: [next]
"#,
    )
    .await;
    let id = api.trigger("e2e-exhausted", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    assert_eq!(task_state(&run, "broken"), "failed");
    assert_eq!(task_state(&run, "next"), "upstream_failed");
    assert_eq!(task_state(&run, "last"), "upstream_failed");
    assert_eq!(attempts(&run, "next"), 0);
    let broken = api.task(&id, "broken").await;
    assert_eq!(broken["attempts"], 2, "retries: 1 means two attempts");
    assert_eq!(broken["failures"], 2);
    assert_eq!(attempt_summary(&broken), vec![failed("retryable", true), failed("retryable", true)]);
    let error = broken["error"].as_str().unwrap_or_default();
    assert!(error.contains("always broken"), "error: {error}");
    assert!(broken.get("output").is_none(), "{broken:#}");
}

#[tokio::test]
async fn an_attempt_past_its_timeout_fails_as_timeout() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-timeout
tasks:
- {name: slow, plugin: sleep, params: {ms: 10000}, timeout: 500ms}
"#,
    )
    .await;
    let id = api.trigger("e2e-timeout", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    let slow = api.task(&id, "slow").await;
    assert_eq!(slow["state"], "failed");
    assert_eq!(attempt_summary(&slow), vec![failed("timeout", true)]);
}

// 5. Trigger rules -------------------------------------------------------------------------

#[tokio::test]
async fn trigger_rules_decide_from_how_upstream_ended() {
    let api = Api::shared().await;
    // Each rule, behind (ok, bad) and behind (ok, ok2); none_failed and
    // all_success also behind a skipped task.
    api.apply(
        r#"
name: e2e-rules
tasks:
- {name: ok, plugin: echo}
- {name: ok2, plugin: echo}
- {name: bad, plugin: fail, params: {mode: fatal}}
- {name: mixed-all-success, plugin: echo, depends_on: [ok, bad], trigger_rule: all_success}
- {name: mixed-all-done, plugin: echo, depends_on: [ok, bad], trigger_rule: all_done}
- {name: mixed-one-failed, plugin: echo, depends_on: [ok, bad], trigger_rule: one_failed}
- {name: mixed-none-failed, plugin: echo, depends_on: [ok, bad], trigger_rule: none_failed}
- {name: good-all-success, plugin: echo, depends_on: [ok, ok2], trigger_rule: all_success}
- {name: good-all-done, plugin: echo, depends_on: [ok, ok2], trigger_rule: all_done}
- {name: good-one-failed, plugin: echo, depends_on: [ok, ok2], trigger_rule: one_failed}
- {name: good-none-failed, plugin: echo, depends_on: [ok, ok2], trigger_rule: none_failed}
- {name: after-skip-none-failed, plugin: echo, depends_on: [ok, good-one-failed], trigger_rule: none_failed}
- {name: after-skip-all-success, plugin: echo, depends_on: [ok, good-one-failed]}
"#,
    )
    .await;
    let id = api.trigger("e2e-rules", json!({})).await;
    let run = api.finished(&id).await;
    let expected = [
        ("ok", "succeeded", 1),
        ("ok2", "succeeded", 1),
        ("bad", "failed", 1),
        ("mixed-all-success", "upstream_failed", 0),
        ("mixed-all-done", "succeeded", 1),
        ("mixed-one-failed", "succeeded", 1),
        ("mixed-none-failed", "upstream_failed", 0),
        ("good-all-success", "succeeded", 1),
        ("good-all-done", "succeeded", 1),
        ("good-one-failed", "skipped", 0),
        ("good-none-failed", "succeeded", 1),
        ("after-skip-none-failed", "succeeded", 1),
        ("after-skip-all-success", "skipped", 0),
    ];
    let got: Vec<(String, String, i64)> = expected
        .iter()
        .map(|(name, _, _)| (name.to_string(), task_state(&run, name).to_owned(), attempts(&run, name)))
        .collect();
    let want: Vec<(String, String, i64)> =
        expected.iter().map(|(n, s, a)| (n.to_string(), s.to_string(), *a)).collect();
    assert_eq!(got, want, "{run:#}");
    // A failed task fails the run, whatever ran after it.
    assert_eq!(state(&run), "failed");
    // all_done and one_failed tasks get the outputs of the upstream that succeeded.
    let all_done = api.task(&id, "mixed-all-done").await;
    assert_eq!(all_done["output"]["inputs"], json!({"ok": {"params": {}, "inputs": {}}}));
}

// 6–7. Kill, pause and resume ------------------------------------------------------------

#[tokio::test]
async fn killing_a_run_cancels_its_running_attempt() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-kill
tasks:
- {name: long, plugin: sleep, params: {ms: 60000}}
- {name: never, plugin: echo, depends_on: [long]}
"#,
    )
    .await;
    let id = api.trigger("e2e-kill", json!({})).await;
    api.wait_task(&id, "long", "running").await;
    let killed = api.act_ok(&id, "kill").await;
    assert_eq!(killed["run"]["state"], "killed", "{killed:#}");
    let run = api.run(&id).await;
    assert_eq!(state(&run), "killed");
    assert_eq!(task_state(&run, "long"), "killed");
    assert_eq!(task_state(&run, "never"), "killed");
    assert_eq!(attempts(&run, "never"), 0);
    // A killed run cannot be killed again.
    let (status, body) = api.act(&id, "kill").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "conflict");
    // The attempt itself ends soon after (the plugin checks for cancellation
    // every 50 ms), not after its 60 s; "soon" is generous here.
    let deadline = Instant::now() + Duration::from_secs(30);
    let long = loop {
        let long = api.task(&id, "long").await;
        if long["attempts_detail"][0]["state"] != "running" {
            break long;
        }
        assert!(Instant::now() < deadline, "30 s after the kill, the attempt is still recorded as running: {long:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let attempt = &long["attempts_detail"][0];
    assert_eq!(attempt["state"], "failed", "{long:#}");
    assert_eq!(attempt["failure_kind"], "cancelled", "{long:#}");
    let ran = time_of(&attempt["finished_at"]) - time_of(&attempt["started_at"]);
    assert!(ran < chrono::Duration::seconds(30), "the cancelled attempt ran for {ran} of its 60 s");
    // The cancelled attempt's result arrived after the kill and was ignored
    // by the run: it did not count against the retry budget, and its
    // `charged` (documented as "whether a failure counted against the retry
    // budget") must say so.
    assert_eq!(long["failures"], 0, "{long:#}");
    assert_eq!(
        attempt["charged"], false,
        "the attempt of a killed task reports charged=true, yet the task's failures stayed 0: {long:#}"
    );
}

#[tokio::test]
async fn a_paused_run_starts_nothing_until_resumed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-pause
tasks:
- {name: first, plugin: sleep, params: {ms: 3000}}
- {name: second, plugin: echo, depends_on: [first]}
"#,
    )
    .await;
    let id = api.trigger("e2e-pause", json!({})).await;
    api.wait_task(&id, "first", "running").await;
    let paused = api.act_ok(&id, "pause").await;
    assert_eq!(paused["run"]["state"], "paused");
    // The running task finishes; the next one is ready but does not start.
    let run = api.wait_task(&id, "first", "succeeded").await;
    assert_eq!(state(&run), "paused");
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let run = api.run(&id).await;
        assert_eq!(state(&run), "paused");
        assert_eq!(task_state(&run, "second"), "queued", "{run:#}");
        assert_eq!(attempts(&run, "second"), 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Pausing twice is refused; resuming continues.
    let (status, _) = api.act(&id, "pause").await;
    assert_eq!(status, StatusCode::CONFLICT);
    api.act_ok(&id, "resume").await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(attempts(&run, "second"), 1);
    let (status, _) = api.act(&id, "resume").await;
    assert_eq!(status, StatusCode::CONFLICT);
}

// 8–9. Reruns and force-success ------------------------------------------------------------

#[tokio::test]
async fn rerun_from_failed_reruns_only_the_failed_part() {
    let api = Api::shared().await;
    // `bad` fails its first attempt only, fatally (no retry in the run).
    api.apply(
        r#"
name: e2e-rerun-failed
tasks:
- {name: root, plugin: echo}
- {name: good, plugin: echo, depends_on: [root]}
- {name: good-after, plugin: echo, depends_on: [good]}
- {name: bad, plugin: fail, params: {mode: fatal, attempts: 1}, retries: 0, depends_on: [root]}
- {name: bad-after, plugin: echo, depends_on: [bad]}
- {name: join, plugin: echo, depends_on: [good-after, bad-after]}
- {name: side, plugin: echo}
"#,
    )
    .await;
    let id = api.trigger("e2e-rerun-failed", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    assert_eq!(task_state(&run, "bad"), "failed");
    assert_eq!(task_state(&run, "bad-after"), "upstream_failed");
    assert_eq!(task_state(&run, "join"), "upstream_failed");

    let rerun = api.act_ok(&id, "rerun").await;
    assert_eq!(rerun["run"]["state"], "running", "{rerun:#}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let counts: BTreeMap<&str, i64> = ["root", "good", "good-after", "bad", "bad-after", "join", "side"]
        .into_iter()
        .map(|t| (t, attempts(&run, t)))
        .collect();
    let expected: BTreeMap<&str, i64> =
        [("root", 1), ("good", 1), ("good-after", 1), ("side", 1), ("bad", 2), ("bad-after", 1), ("join", 1)]
            .into_iter()
            .collect();
    assert_eq!(counts, expected, "{run:#}");
    let bad = api.task(&id, "bad").await;
    assert_eq!(attempt_summary(&bad), vec![failed("fatal", true), succeeded()]);
    assert_eq!(bad["output"], json!({"succeeded_on_attempt": 2}));
    // join got both inputs, the rerun one included.
    let join = api.task(&id, "join").await;
    assert_eq!(join["output"]["inputs"]["bad-after"]["inputs"]["bad"], json!({"succeeded_on_attempt": 2}));
    // Nothing failed now: a second rerun re-flushes the whole run (the
    // outer DAG's data re-flush), every task once more.
    let again = api.act_ok(&id, "rerun").await;
    assert_eq!(again["message"], "reflush done", "{again:#}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(attempts(&run, "root"), 2, "{run:#}");
    assert_eq!(attempts(&run, "bad"), 3, "{run:#}");
}

#[tokio::test]
async fn rerunning_one_task_with_and_without_downstream() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-rerun-task
tasks:
- {name: x, plugin: echo}
- {name: y, plugin: echo, depends_on: [x]}
- {name: z, plugin: echo, depends_on: [y]}
"#,
    )
    .await;
    let id = api.trigger("e2e-rerun-task", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded");

    let path = format!("/v1/runs/{id}/tasks/y/rerun");
    let (status, body) = api.post(&path, json!({"downstream": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.wait_run(&id, "y to run again", |r| state(r) == "succeeded" && attempts(r, "y") == 2).await;
    assert_eq!((attempts(&run, "x"), attempts(&run, "y"), attempts(&run, "z")), (1, 2, 1), "{run:#}");

    let (status, body) = api.post(&path, json!({"downstream": true})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.wait_run(&id, "y and z to run again", |r| state(r) == "succeeded" && attempts(r, "z") == 2).await;
    assert_eq!((attempts(&run, "x"), attempts(&run, "y"), attempts(&run, "z")), (1, 3, 2), "{run:#}");
    let (status, body) = api.post(&format!("/v1/runs/{id}/tasks/nope/rerun"), json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn force_success_lets_the_downstream_run_and_the_run_succeed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-force
tasks:
- {name: broken, plugin: fail, params: {mode: fatal}}
- {name: fine, plugin: echo}
- {name: after, plugin: echo, depends_on: [broken, fine]}
"#,
    )
    .await;
    let id = api.trigger("e2e-force", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed");
    assert_eq!(task_state(&run, "after"), "upstream_failed");
    // Only a failed task can be forced.
    let (status, _) = api.post(&format!("/v1/runs/{id}/tasks/fine/force-success"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, body) = api.post(&format!("/v1/runs/{id}/tasks/broken/force-success"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let broken = task_of(&run, "broken");
    assert_eq!(broken["state"], "succeeded");
    assert_eq!(broken["forced"], true);
    assert_eq!(broken["attempts"], 1, "forcing does not run the task");
    assert_eq!(task_state(&run, "after"), "succeeded");
    assert_eq!(attempts(&run, "after"), 1);
    assert_eq!(attempts(&run, "fine"), 1);
}

// 16. Ad-hoc jobs ----------------------------------------------------------------------------

#[tokio::test]
async fn ad_hoc_jobs_return_their_outputs() {
    let api = Api::shared().await;
    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "fib", "params": {"n": 20}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "succeeded");
    assert_eq!(body["output"], json!({"n": 20, "value": 6765}));
    let run = api.run(body["run_id"].as_str().unwrap()).await;
    assert_eq!(run["kind"], "job");

    let (status, body) = api
        .post(
            "/v1/jobs?wait=true",
            json!({"name": "e2e-job", "tasks": [
                {"name": "a", "plugin": "echo", "params": {"v": 20}},
                {"name": "b", "plugin": "fib", "depends_on": ["a"], "params": {"n": "{{ inputs.a.params.v }}"}},
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "succeeded");
    assert_eq!(body["outputs"], json!({"a": {"params": {"v": 20}, "inputs": {}}, "b": {"n": 20, "value": 6765}}));

    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "fail", "params": {"mode": "fatal"}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "failed");
    assert_eq!(body["errors"]["fail"]["state"], "failed", "{body}");

    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "nope"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_job");
    assert_eq!(body["location"], "tasks[0].plugin");
}

// 17. Logs --------------------------------------------------------------------------------------

#[tokio::test]
async fn task_logs_can_be_read_and_followed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-logs
tasks:
- name: quick
  plugin: script
  params:
    script: |
      info("first");
      warn("second");
      print("third");
      42
- name: slow
  plugin: script
  params:
    script: |
      let x = 0;
      for i in 0..6 {
        info("tick " + i);
        for j in 0..1500000 { x += 1; }
      }
      info("done");
      x
"#,
    )
    .await;
    let id = api.trigger("e2e-logs", json!({})).await;
    api.wait_task(&id, "slow", "running").await;

    // Follow the running attempt: the stream ends when the attempt does.
    let follow = format!("/v1/runs/{id}/tasks/slow/logs?follow=true");
    let response = api.request(reqwest::Method::GET, &follow).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_owned();
    assert_eq!(content_type, "application/x-ndjson");
    let mut response = response;
    let mut text = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let followed: Vec<String> = text
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            line["message"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut expected: Vec<String> = (0..6).map(|i| format!("tick {i}")).collect();
    expected.push("done".into());
    let plugin_lines: Vec<String> =
        followed.iter().filter(|m| m.starts_with("tick") || *m == "done").cloned().collect();
    assert_eq!(plugin_lines, expected, "followed:\n{text}");
    let slow = api.task(&id, "slow").await;
    assert_eq!(slow["state"], "succeeded", "the stream ended before the attempt");
    assert_eq!(slow["output"], 9_000_000);

    // Reading a finished attempt's log.
    api.wait_task(&id, "quick", "succeeded").await;
    let lines = api.get_ok(&format!("/v1/runs/{id}/tasks/quick/logs")).await;
    let lines = lines.as_array().unwrap();
    let plugin: Vec<(String, String)> = lines
        .iter()
        .filter(|l| ["first", "second", "third"].contains(&l["message"].as_str().unwrap()))
        .map(|l| (l["message"].as_str().unwrap().to_owned(), l["level"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(plugin.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["first", "second", "third"], "{lines:#?}");
    assert_eq!(plugin[0].1, "info");
    assert_eq!(plugin[1].1, "warn");
    for l in lines {
        assert_eq!(l["attempt"], 1);
    }
    let seqs: Vec<i64> = lines.iter().map(|l| l["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    // An attempt that does not exist.
    let (status, body) = api.get(&format!("/v1/runs/{id}/tasks/quick/logs?attempt=5")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "?attempt");
}
