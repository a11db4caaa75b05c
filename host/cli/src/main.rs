//! `dagr`: the one binary. Every role (server, client verbs, tools) is a
//! subcommand.

mod bench;
mod client;
mod cluster;
mod node;
mod plugin;
mod serve;

use clap::{Parser, Subcommand};

/// dagr: DAG workflows whose tasks are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "dagr", version, about, propagate_version = true)]
struct Cli {
    /// The dagr server the client verbs talk to.
    #[arg(long, global = true, env = "DAGR_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run dagr on one machine: API, scheduler and worker in one process, on
    /// embedded SQLite.
    Serve(serve::ServeArgs),
    /// Cluster role: drive runs (many masters share the work by slots).
    Master(cluster::RoleArgs),
    /// Cluster role: run attempts pushed by masters.
    Worker(cluster::RoleArgs),
    /// Cluster role: serve the HTTP API.
    Api(cluster::RoleArgs),
    /// Work with plugins (WebAssembly components that implement a task type).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Measure the engine: run a DAG on a fresh in-process node and report
    /// wall time, tasks per second and peak memory.
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(client::ClientCommand),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DAGR_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn,wasmtime=warn,cranelift=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Master(args) => cluster::master(args),
        Command::Worker(args) => cluster::worker(args),
        Command::Api(args) => cluster::api(args),
        Command::Plugin(cmd) => plugin::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Client(cmd) => return client::run(&cli.server, cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
