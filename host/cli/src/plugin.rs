//! `dagr plugin …`: run a component locally, list the built-ins.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use dagr_runtime::{AttemptContext, Execution, LogSource, NetworkPolicy, Runtime, RuntimeConfig};

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Run one attempt of a plugin, here and now, and print its output and log.
    ///
    /// FILE is a component (.wasm), or the name of a built-in plugin
    /// (echo, fail, sleep, fib, http, transform, script).
    Run {
        file: String,
        /// The task's params, JSON.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Upstream outputs by task name, a JSON object.
        #[arg(long, default_value = "{}")]
        inputs: String,
        /// Wall-clock deadline, e.g. 500ms, 5s, 2m.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
        /// Linear-memory cap, e.g. 64MiB.
        #[arg(long, default_value = "128MiB", value_parser = parse_bytes)]
        memory: u64,
        /// A host the plugin may reach over HTTP (repeatable), e.g.
        /// example.org, *.example.org:443, 127.0.0.1:8080.
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// A secret the plugin may read, NAME=VALUE (repeatable).
        #[arg(long = "secret", value_name = "NAME=VALUE")]
        secrets: Vec<String>,
        /// Print the output only, no log.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List the built-in plugins with what they describe about themselves.
    List,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    dagr_core::units::parse_duration(text)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    dagr_core::units::parse_bytes(text)
}

pub fn run(cmd: PluginCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Run {
            file,
            params,
            inputs,
            timeout,
            memory,
            allow_hosts,
            secrets,
            quiet,
        } => run_one(
            &file,
            params,
            inputs,
            timeout,
            memory,
            allow_hosts,
            secrets,
            quiet,
        ),
        PluginCommand::List => list(),
    }
}

fn component_bytes(file: &str) -> anyhow::Result<Vec<u8>> {
    if let Some((_, bytes)) = dagr_builtins::BUILTINS
        .iter()
        .find(|(name, _)| *name == file)
    {
        return Ok(bytes.to_vec());
    }
    let path = PathBuf::from(file);
    std::fs::read(&path).with_context(|| {
        format!("cannot read {file} (it is neither a file nor a built-in plugin: echo, fail, sleep, fib, http, transform, script)")
    })
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    file: &str,
    params: String,
    inputs: String,
    timeout: Duration,
    memory: u64,
    allow_hosts: Vec<String>,
    secrets: Vec<String>,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    serde_json::from_str::<serde_json::Value>(&params).context("--params is not valid JSON")?;
    match serde_json::from_str::<serde_json::Value>(&inputs)
        .context("--inputs is not valid JSON")?
    {
        serde_json::Value::Object(_) => {}
        _ => bail!("--inputs must be a JSON object keyed by upstream task name"),
    }
    let network =
        NetworkPolicy::allow(&allow_hosts).map_err(|e| anyhow::anyhow!("--allow-host: {e}"))?;
    let mut secret_map = HashMap::new();
    for pair in secrets {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--secret `{pair}` must be NAME=VALUE")
        };
        secret_map.insert(name.to_owned(), value.to_owned());
    }

    let bytes = component_bytes(file)?;
    let runtime = Runtime::new(RuntimeConfig {
        guest_threads: 1,
        max_concurrent_attempts: 4,
        ..Default::default()
    })?;
    let plugin = runtime
        .load(&bytes)
        .with_context(|| format!("cannot load {file}"))?;
    let info = plugin.info();

    let mut exec = Execution::new(AttemptContext::adhoc(&info.name), params);
    exec.inputs = inputs;
    exec.limits.deadline = timeout;
    exec.limits.memory_bytes = memory;
    exec.network = network;
    exec.secrets = Some(Arc::new(secret_map));

    let host = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = host.block_on(runtime.execute(&plugin, exec));
    if !quiet {
        eprintln!(
            "── {} {} ({} in {:.1?})",
            info.name, info.version, file, report.elapsed
        );
        for line in &report.log {
            let source = match line.source {
                LogSource::Plugin => "plugin",
                LogSource::Stdout => "stdout",
                LogSource::Stderr => "stderr",
                LogSource::Dagr => "dagr",
            };
            eprintln!("{:>5} {source:>6} │ {}", line.level.as_str(), line.message);
        }
        if let Some((percent, message)) = &report.progress {
            eprintln!("progress: {percent}% {message}");
        }
    }
    match report.result {
        Ok(output) => {
            println!("{output}");
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            eprintln!("error ({}): {}", failure.kind, failure.message);
            Ok(ExitCode::from(1))
        }
    }
}

fn list() -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new(RuntimeConfig {
        guest_threads: 1,
        max_concurrent_attempts: 4,
        ..Default::default()
    })?;
    for (name, bytes) in dagr_builtins::BUILTINS {
        let plugin = runtime
            .load(bytes)
            .with_context(|| format!("built-in plugin {name} does not load"))?;
        let info = plugin.info();
        println!("{:<10} {:<7} {}", info.name, info.version, info.description);
    }
    Ok(ExitCode::SUCCESS)
}
