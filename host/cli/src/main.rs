//! `dagr`: the one binary. Every role (server, client verbs, tools) is a
//! subcommand.

mod archive;
mod bench;
mod bench_events;
mod cert;
mod client;
mod cluster;
mod events_client;
mod memory;
mod node;
mod outer_client;
mod plugin;
mod plugin_project;
mod plugin_test;
mod secrets;
mod serve;
mod sim;
mod soak;
mod templates;
mod tenancy;

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's allocator: the engine, the API and the
/// runtime allocate and free on different threads all the time, and with
/// glibc that cost ~15 % of the CPU time of a fan-out (see
/// docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// dagr: DAG workflows whose tasks are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "dagr", version, about, propagate_version = true)]
struct Cli {
    /// The dagr server the client verbs talk to [default: the profile's
    /// server, else http://127.0.0.1:8080].
    #[arg(long, global = true, env = "DAGR_SERVER", default_value = "", hide_default_value = true)]
    server: String,
    /// The API token [default: the profile's token, else ./dagr-data/token,
    /// or ./dagr-data/admin.token for tenant management, when it exists].
    #[arg(long, global = true, env = "DAGR_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The profile of ~/.config/dagr/config.toml (`[profiles.NAME]` with
    /// `server` and `token`) to connect with.
    #[arg(long, global = true, env = "DAGR_PROFILE", default_value = "default")]
    profile: String,
    /// With the admin token: the tenant to act for (sent as X-Dagr-Tenant).
    #[arg(long, global = true, env = "DAGR_TENANT", value_name = "TENANT")]
    as_tenant: Option<String>,
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
    /// A day's load in compressed time: `dagr serve` with the carry-over
    /// to cold storage, N runs of a small DAG, the hot tables' size, list
    /// latency and database growth sampled as JSON lines.
    Soak(soak::SoakArgs),
    /// Simulate a cluster deterministically: masters, workers, the store,
    /// etcd and the network in one process on a simulated clock, faults
    /// drawn from a seed, invariants checked after every commit; a failure
    /// prints its seed and trace, and replays exactly.
    Sim(sim::SimArgs),
    /// Make a private CA and node certificates for mutual TLS between a
    /// cluster's nodes.
    #[command(subcommand)]
    Cert(cert::CertCommand),
    /// Manage tenants and their limits (needs the admin token).
    #[command(subcommand)]
    Tenant(tenancy::TenantCommand),
    /// Manage API tokens: your tenant's (admin scope), or any tenant's with
    /// --tenant (the admin token).
    #[command(subcommand)]
    Token(tenancy::TokenCommand),
    /// Manage your tenant's secrets (write-only: values are never shown).
    #[command(subcommand)]
    Secret(tenancy::SecretCommand),
    /// Your tenant's audit log: who (token id) did what, and when.
    Audit(tenancy::AuditArgs),
    /// Cold storage (on the store directly): list partitions, export one,
    /// carry over now.
    #[command(subcommand)]
    Archive(archive::ArchiveCommand),
    #[command(flatten)]
    Client(client::ClientCommand),
}

impl Command {
    /// Whether the verb talks to a server, and whether it needs the admin
    /// token (which decides the local token file to fall back to).
    fn connects(&self) -> Option<bool> {
        match self {
            Command::Serve(_)
            | Command::Master(_)
            | Command::Worker(_)
            | Command::Api(_)
            | Command::Bench(_)
            | Command::Soak(_)
            | Command::Sim(_)
            | Command::Cert(_)
            | Command::Archive(_)
            | Command::Secret(tenancy::SecretCommand::Rotate(_)) => None,
            Command::Tenant(_) => Some(true),
            Command::Token(cmd) => Some(cmd.for_other_tenant()),
            Command::Plugin(_) | Command::Secret(_) | Command::Audit(_) | Command::Client(_) => Some(false),
        }
    }
}

impl Command {
    /// Whether the verb runs a node, which sets up its logs and traces
    /// itself once it has read its configuration (`[telemetry]`).
    fn runs_a_node(&self) -> bool {
        matches!(self, Command::Serve(_) | Command::Master(_) | Command::Worker(_) | Command::Api(_))
    }
}

fn main() -> std::process::ExitCode {
    let mut cli = Cli::parse();
    // The simulation's engines log what real ones would (every fault): off
    // unless asked for with DAGR_LOG.
    let quiet = matches!(cli.command, Command::Sim(_));
    let _logs = if cli.command.runs_a_node() {
        None
    } else {
        match dagr_telemetry::init_with(None, if quiet { "off" } else { dagr_telemetry::DEFAULT_LOG }) {
            Ok(logs) => Some(logs),
            Err(e) => {
                eprintln!("error: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        }
    };
    if let Some(admin) = cli.command.connects() {
        match client::connect(&cli.server, cli.token.take(), &cli.profile, cli.as_tenant.take(), admin) {
            Ok(server) => cli.server = server,
            Err(e) => {
                eprintln!("error: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Master(args) => cluster::master(args),
        Command::Worker(args) => cluster::worker(args),
        Command::Api(args) => cluster::api(args),
        Command::Plugin(cmd) => plugin::run(&cli.server, cmd),
        Command::Bench(args) => bench::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Cert(cmd) => cert::run(cmd),
        Command::Archive(cmd) => archive::run(cmd),
        Command::Secret(tenancy::SecretCommand::Rotate(args)) => secrets::rotate(args),
        Command::Tenant(cmd) => return tenancy::run(&cli.server, tenancy::Verb::Tenant(cmd)),
        Command::Token(cmd) => return tenancy::run(&cli.server, tenancy::Verb::Token(cmd)),
        Command::Secret(cmd) => return tenancy::run(&cli.server, tenancy::Verb::Secret(cmd)),
        Command::Audit(args) => return tenancy::run(&cli.server, tenancy::Verb::Audit(args)),
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// clap checks the whole command tree (unique names, valid defaults)
    /// only when a verb is parsed; this checks every verb at once.
    #[test]
    fn the_command_tree_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
