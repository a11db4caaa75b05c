//! The engine's state machine alone (no store, no network, no clock): what
//! one step of a 10,000-task fan-out costs, per task. This is the floor the
//! shell (reads, the commit, dispatch) adds to.
//!
//! ```sh
//! cargo bench -p dagr-master --bench engine
//! ```

use std::time::{Duration, Instant};

use dagr_master::engine::testkit::{TestEnv, worker};
use dagr_master::engine::{Data, Effects, Input};
use dagr_protocol::wire::{AttemptResult, Outcome};

const WIDTH: usize = 10_000;
const ROUNDS: usize = 7;

fn fan_out() -> String {
    let mut yaml = String::from("name: fan\ntasks:\n- {name: root, plugin: echo}\n");
    for i in 0..WIDTH {
        yaml.push_str(&format!("- {{name: t{i}, plugin: echo, depends_on: [root]}}\n"));
    }
    yaml
}

fn result(key: &dagr_protocol::wire::AttemptKey, epoch: i64) -> Input {
    let result = AttemptResult {
        key: key.clone(),
        epoch,
        task_name: String::new(),
        worker: "w1".into(),
        started_at: 0,
        finished_at: 0,
        outcome: Outcome::Succeeded { output: "{}".into() },
        trace: None,
    };
    Input::Result { result, ack: None }
}

/// One step of the state alone, sealed as the shell would before a commit.
fn timed_step(env: &mut TestEnv, inputs: Vec<Input>) -> (Duration, Effects) {
    let mut effects = Effects::default();
    let started = Instant::now();
    env.state.begin(&mut effects);
    env.state.step(&mut effects, inputs, Data::default(), &env.plugins, env.now);
    env.state.seal(&mut effects, env.now);
    (started.elapsed(), effects)
}

fn main() {
    let yaml = fan_out();
    let mut dispatch = Vec::new();
    let mut finish = Vec::new();
    for _ in 0..ROUNDS {
        let mut env = TestEnv::with(|c| c.max_in_flight = 2 * WIDTH, vec![worker("w1", 2 * WIDTH as u32)]);
        env.apply(&yaml);
        env.trigger("fan");
        env.step(vec![]);
        let root = env.in_flight("root");
        let epoch = 1;
        // The root's result: 10,000 tasks become ready and are dispatched.
        let (took, effects) = timed_step(&mut env, vec![result(&root, epoch)]);
        assert_eq!(effects.dispatches.len(), WIDTH, "every child dispatched in one step");
        dispatch.push(took);
        // Their 10,000 results in one step.
        let keys: Vec<_> = effects.dispatches.iter().map(|(s, _)| s.key.clone()).collect();
        let inputs = keys.iter().map(|k| result(k, epoch)).collect();
        let (took, effects) = timed_step(&mut env, inputs);
        assert_eq!(effects.finished.len(), 1, "the run finished");
        finish.push(took);
    }
    dispatch.sort();
    finish.sort();
    let per_task = |d: Duration| d.as_secs_f64() * 1e6 / WIDTH as f64;
    println!("engine state machine, fan-out of {WIDTH} ({ROUNDS} rounds, best / median):");
    println!(
        "  step that readies and dispatches {WIDTH} tasks: {:.1} / {:.1} ms ({:.2} / {:.2} µs per task)",
        dispatch[0].as_secs_f64() * 1e3,
        dispatch[ROUNDS / 2].as_secs_f64() * 1e3,
        per_task(dispatch[0]),
        per_task(dispatch[ROUNDS / 2])
    );
    println!(
        "  step that applies {WIDTH} results:            {:.1} / {:.1} ms ({:.2} / {:.2} µs per task)",
        finish[0].as_secs_f64() * 1e3,
        finish[ROUNDS / 2].as_secs_f64() * 1e3,
        per_task(finish[0]),
        per_task(finish[ROUNDS / 2])
    );
}
