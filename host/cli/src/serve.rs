//! `dagr serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dagr_config::Config;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the HTTP API (default 127.0.0.1:8080).
    #[arg(long)]
    pub listen: Option<String>,
    /// Where dagr keeps its data (default ./dagr-data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// A TOML config file; `DAGR_*` variables override it, flags override both.
    #[arg(long, env = "DAGR_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Loads the config: defaults, file, environment, then these flags.
pub fn load_config(
    config: Option<&PathBuf>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<dagr_config::Settings> {
    let mut config = Config::load(config.map(|p| p.as_path()))?;
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    if let Some(dir) = data_dir {
        config.server.data_dir = dir;
    }
    Ok(config.validate()?)
}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let settings = load_config(args.config.as_ref(), args.listen, args.data_dir)?;
    let _telemetry = crate::node::telemetry(&settings, "serve")?;
    crate::memory::warn_if_sqlite_unconfigured();
    let runtime = crate::node::node_runtime(&settings, true)?;
    runtime.block_on(async {
        let node = crate::node::Node::start(&settings).await?;
        show_tokens(&node.bootstrap);
        tracing::info!(addr = %node.addr, data = %settings.data_dir.display(), "dagr is serving");
        println!("dagr is serving on http://{} (data in {})", node.addr, settings.data_dir.display());
        shutdown_signal().await;
        tracing::info!("shutting down");
        node.stop().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Prints the tokens made at this start: the only time they are shown
/// (they are also in files only their owner may read).
pub fn show_tokens(tokens: &dagr_api::auth::Bootstrapped) {
    if let Some((token, path)) = &tokens.admin_token {
        println!("admin token (shown once; also in {}): {token}", path.display());
    }
    if let Some((token, path)) = &tokens.default_token {
        println!("token of tenant `default` (shown once; also in {}): {token}", path.display());
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
