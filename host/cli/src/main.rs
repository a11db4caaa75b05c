//! `dagr`: the one binary. Every role (server, client verbs, tools) is a
//! subcommand.

mod node;
mod plugin;
mod serve;

use clap::{Parser, Subcommand};

/// dagr: DAG workflows whose tasks are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "dagr", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run dagr on one machine: API, scheduler and worker in one process, on
    /// embedded SQLite.
    Serve(serve::ServeArgs),
    /// Work with plugins (WebAssembly components that implement a task type).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
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
        Command::Plugin(cmd) => plugin::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
