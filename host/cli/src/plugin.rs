//! `dagr plugin …`: run a component locally; publish, list and delete a
//! tenant's plugins on a server; and the hidden `inspect`, the child process
//! in which the API validates and compiles uploads under CPU and memory
//! limits.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Subcommand;
use dagr_runtime::{AttemptContext, Execution, LogSource, NetworkPolicy, Runtime, RuntimeConfig};

use crate::client::{Api, table};

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
    /// List the plugins a server offers (its built-ins and your tenant's),
    /// with what they describe about themselves.
    List {
        /// Only the built-ins of this binary, without asking a server.
        #[arg(long)]
        builtin: bool,
    },
    /// Make a plugin project: the task, a params schema, a unit test, test
    /// cases, a README and a .gitignore; it builds and passes its tests as
    /// made.
    New(crate::plugin_project::NewArgs),
    /// Build a plugin project with its language's toolchain (cargo,
    /// componentize-py, jco) and print the component's path, size and what
    /// it describes.
    Build(crate::plugin_project::BuildArgs),
    /// Run a project's test cases (cases/*.json) in the real sandbox,
    /// building it first if a source changed.
    Test(crate::plugin_test::TestArgs),
    /// Publish a plugin (a component built for wasm32-wasip2) for your
    /// tenant. Its name and version are what it describes; a published
    /// version is immutable.
    Push {
        /// The component (.wasm), or a plugin project's directory (built
        /// first if a source changed).
        #[arg(default_value = ".")]
        file: PathBuf,
    },
    /// Delete one of your tenant's plugin versions (refused while a
    /// workflow uses it).
    Delete {
        name: String,
        #[arg(value_name = "VERSION")]
        plugin_version: String,
    },
    /// Read a component on stdin, validate and describe it, print the
    /// outcome as JSON. The API runs this in a child process under CPU and
    /// memory limits for every upload.
    #[command(hide = true)]
    Inspect {
        /// Keep the machine code in this code cache (a node's), so that
        /// the node loads it instead of compiling the component itself.
        #[arg(long)]
        cache_dir: Option<std::path::PathBuf>,
    },
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    dagr_core::units::parse_duration(text)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    dagr_core::units::parse_bytes(text)
}

pub fn run(server: &str, cmd: PluginCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Run { file, params, inputs, timeout, memory, allow_hosts, secrets, quiet } => {
            run_one(&file, params, inputs, timeout, memory, allow_hosts, secrets, quiet)
        }
        PluginCommand::List { builtin: true } => list(),
        PluginCommand::Inspect { cache_dir } => inspect(cache_dir),
        PluginCommand::New(args) => crate::plugin_project::new(args).map(|()| ExitCode::SUCCESS),
        PluginCommand::Build(args) => crate::plugin_project::build_verb(args).map(|()| ExitCode::SUCCESS),
        PluginCommand::Test(args) => crate::plugin_test::run(args),
        PluginCommand::Push { file } => {
            let file = crate::plugin_project::component_for_push(&file)?;
            Ok(server_verb(server, PluginCommand::Push { file }))
        }
        verb @ (PluginCommand::List { .. } | PluginCommand::Delete { .. }) => Ok(server_verb(server, verb)),
    }
}

fn component_bytes(file: &str) -> anyhow::Result<Vec<u8>> {
    if let Some((_, bytes)) = dagr_builtins::BUILTINS.iter().find(|(name, _)| *name == file) {
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
    match serde_json::from_str::<serde_json::Value>(&inputs).context("--inputs is not valid JSON")? {
        serde_json::Value::Object(_) => {}
        _ => bail!("--inputs must be a JSON object keyed by upstream task name"),
    }
    let network = NetworkPolicy::allow(&allow_hosts).map_err(|e| anyhow::anyhow!("--allow-host: {e}"))?;
    let mut secret_map = HashMap::new();
    for pair in secrets {
        let Some((name, value)) = pair.split_once('=') else { bail!("--secret `{pair}` must be NAME=VALUE") };
        secret_map.insert(name.to_owned(), value.to_owned());
    }

    let bytes = component_bytes(file)?;
    let runtime = Runtime::new(RuntimeConfig { guest_threads: 1, max_concurrent_attempts: 4, ..Default::default() })?;
    let plugin = runtime.load(&bytes).with_context(|| format!("cannot load {file}"))?;
    let info = plugin.info();

    let mut exec = Execution::new(AttemptContext::adhoc(&info.name), params);
    exec.inputs = inputs;
    exec.limits.deadline = timeout;
    exec.limits.memory_bytes = memory;
    exec.network = network;
    exec.secrets = Some(Arc::new(secret_map));

    let host = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = host.block_on(runtime.execute(&plugin, exec));
    if !quiet {
        eprintln!("── {} {} ({} in {:.1?})", info.name, info.version, file, report.elapsed);
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
    let runtime = Runtime::new(RuntimeConfig { guest_threads: 1, max_concurrent_attempts: 4, ..Default::default() })?;
    for (name, bytes) in dagr_builtins::BUILTINS {
        let plugin = runtime.load(bytes).with_context(|| format!("built-in plugin {name} does not load"))?;
        let info = plugin.info();
        println!("{:<10} {:<7} {}", info.name, info.version, info.description);
    }
    Ok(ExitCode::SUCCESS)
}

/// `dagr plugin inspect`: the component on stdin, an [`InspectOutcome`] on
/// stdout. An invalid component is an outcome (exit 0); a crash or a limit
/// (the parent sets them) ends the process, and the parent reports that.
fn inspect(cache_dir: Option<std::path::PathBuf>) -> anyhow::Result<ExitCode> {
    use std::io::Read as _;

    use dagr_protocol::plugins::InspectOutcome;

    test_hog();
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).context("cannot read the component from stdin")?;
    // The same engine as a node's (a pool, with its per-component limits):
    // a component the pool cannot hold fails here, at upload, and the
    // machine code, written to the node's cache, is what the node loads.
    // The pool's reservations are address space only; the parent limits
    // this process's data (`RLIMIT_DATA`), not its address space.
    let runtime = Runtime::new(RuntimeConfig {
        guest_threads: 1,
        max_concurrent_attempts: 1,
        pooling: true,
        cache_dir,
        ..Default::default()
    })?;
    let outcome = match runtime.load(&bytes) {
        Ok(plugin) => {
            let info = plugin.info().clone();
            InspectOutcome::Valid {
                name: info.name,
                version: info.version,
                description: info.description,
                params_schema: info.params_schema,
            }
        }
        Err(e) => InspectOutcome::Invalid { message: e.to_string() },
    };
    println!("{}", serde_json::to_string(&outcome)?);
    Ok(ExitCode::SUCCESS)
}

/// For tests only: with `DAGR_TEST_INSPECT_HOG` set (the API passes it on
/// when the server has it), misbehave the way a hostile upload could make
/// the compiler misbehave, so that tests can prove the limits stop it.
fn test_hog() {
    match std::env::var(dagr_api::inspect::TEST_HOG_ENV).as_deref() {
        Ok("cpu") => {
            let mut x: u64 = 1;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        Ok("memory") => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Touch every page, so that the memory is really used.
                hoard.push(vec![1u8; 64 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        Ok("sleep") => std::thread::sleep(Duration::from_secs(3600)),
        _ => {}
    }
}

/// `dagr plugin list|push|delete`: the verbs that talk to a server. Like
/// every client verb, a failure prints `error: …` and exits 1.
fn server_verb(server: &str, verb: PluginCommand) -> ExitCode {
    crate::client::finish(crate::client::block_on(server_verb_async(server, verb)))
}

async fn server_verb_async(server: &str, verb: PluginCommand) -> anyhow::Result<ExitCode> {
    use dagr_protocol::plugins::PluginDescriptor;

    let api = Api::new(server)?;
    match verb {
        PluginCommand::Push { file } => {
            let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let request = api.post(&["v1", "plugins"]).header("content-type", "application/wasm").body(bytes);
            let response = api.send(request).await?;
            let fresh = response.status() == reqwest::StatusCode::CREATED;
            let plugin: PluginDescriptor = response.json().await.context("unexpected answer from the server")?;
            let what = if fresh { "published" } else { "already published with these bytes:" };
            println!("{what} {}@{} sha256:{}", plugin.name, plugin.version, plugin.sha256);
        }
        PluginCommand::List { .. } => {
            let plugins: Vec<PluginDescriptor> = api.json(api.get(&["v1", "plugins"])).await?;
            let rows = plugins
                .iter()
                .map(|p| {
                    vec![
                        p.name.clone(),
                        p.version.clone(),
                        if p.builtin { "built-in".into() } else { "tenant".into() },
                        p.sha256.chars().take(12).collect(),
                        p.description.clone(),
                    ]
                })
                .collect();
            let mut out = std::io::stdout().lock();
            write!(out, "{}", table(&["NAME", "VERSION", "SOURCE", "SHA256", "DESCRIPTION"], rows))?;
        }
        PluginCommand::Delete { name, plugin_version } => {
            let plugin: PluginDescriptor = api.json(api.delete(&["v1", "plugins", &name, &plugin_version])).await?;
            println!("deleted {}@{} sha256:{}", plugin.name, plugin.version, plugin.sha256);
        }
        PluginCommand::Run { .. }
        | PluginCommand::Inspect { .. }
        | PluginCommand::New(_)
        | PluginCommand::Build(_)
        | PluginCommand::Test(_) => {}
    }
    Ok(ExitCode::SUCCESS)
}
