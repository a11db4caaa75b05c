//! `dagr archive`: the operator's view of cold storage, on the store
//! directly (like `dagr secret rotate`): its partitions, an export of one
//! before retention drops it, and a carry-over round on demand.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use dagr_store::Store;

#[derive(Debug, clap::Subcommand)]
pub enum ArchiveCommand {
    /// List cold partitions: tenant, period, runs, logical-time range.
    List(ArchiveArgs),
    /// Export a partition as JSON lines, zstd-compressed: one line per run
    /// with its tasks, outputs, attempts, events and logs.
    Export {
        #[command(flatten)]
        store: ArchiveArgs,
        /// The partition's id (`dagr archive list`).
        #[arg(long)]
        partition: i64,
        /// Where to write (default: <tenant>-<period>.jsonl.zst here).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Carry over now (one round over every tenant, as the leader does
    /// every `[archive] interval`), then print the hot tables' row counts.
    Run(ArchiveArgs),
}

#[derive(Debug, clap::Args)]
pub struct ArchiveArgs {
    /// The config file (`[store] url`, `[archive]`). `DAGR_*` variables override it.
    #[arg(long, env = "DAGR_CONFIG")]
    pub config: Option<PathBuf>,
    /// The data directory (`dagr serve`'s store is SQLite in it).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Only this tenant's partitions (list).
    #[arg(long)]
    pub tenant: Option<String>,
}

async fn open(args: &ArchiveArgs) -> anyhow::Result<(std::sync::Arc<dyn Store>, dagr_config::Settings)> {
    let mut config = dagr_config::Config::load(args.config.as_deref())?;
    if let Some(dir) = &args.data_dir {
        config.server.data_dir = dir.clone();
    }
    let settings = config.validate()?;
    Ok((crate::node::open_store(&settings).await?, settings))
}

pub fn run(cmd: ArchiveCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        match cmd {
            ArchiveCommand::List(args) => {
                let (store, _) = open(&args).await?;
                let parts = store.partitions(args.tenant.as_deref()).await?;
                if parts.is_empty() {
                    println!("no cold partitions");
                }
                let time = |ms: Option<i64>| {
                    ms.and_then(chrono::DateTime::from_timestamp_millis).map_or("-".into(), |t| t.to_rfc3339())
                };
                for p in parts {
                    let logs = if p.logs_dropped_at.is_some() { " (logs dropped)" } else { "" };
                    println!(
                        "{:>6}  {:<20} {:<9} {:>9} runs  logical {} .. {}{logs}",
                        p.id,
                        p.tenant,
                        p.period,
                        p.runs,
                        time(p.min_logical),
                        time(p.max_logical)
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            ArchiveCommand::Export { store: args, partition, out } => {
                let (store, _) = open(&args).await?;
                let part = store
                    .partitions(None)
                    .await?
                    .into_iter()
                    .find(|p| p.id == partition)
                    .with_context(|| format!("there is no cold partition {partition} (see `dagr archive list`)"))?;
                let path = out.unwrap_or_else(|| PathBuf::from(format!("{}-{}.jsonl.zst", part.tenant, part.period)));
                let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
                let mut encoder = zstd::Encoder::new(file, 3)?.auto_finish();
                let (mut after, mut runs) = (String::new(), 0_u64);
                loop {
                    let page = store.export_page(partition, &after, 200).await?;
                    let Some(last) = page.last() else { break };
                    after = last["run"]["id"].as_str().unwrap_or_default().to_owned();
                    for run in &page {
                        serde_json::to_writer(&mut encoder, run)?;
                        encoder.write_all(b"\n")?;
                        runs += 1;
                    }
                }
                drop(encoder);
                println!("exported {runs} runs of {} {} to {}", part.tenant, part.period, path.display());
                Ok(ExitCode::SUCCESS)
            }
            ArchiveCommand::Run(args) => {
                let (store, settings) = open(&args).await?;
                let config = crate::node::archive_config(&settings);
                let archiver = dagr_master::archive::Archiver::new(store.clone(), config);
                while archiver.round().await? {}
                let counts = store.hot_counts().await?;
                println!(
                    "hot: {} runs, {} tasks, {} attempts, {} events, {} log lines, {} commands",
                    counts.runs, counts.tasks, counts.attempts, counts.events, counts.logs, counts.commands
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}
