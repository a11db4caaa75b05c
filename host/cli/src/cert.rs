//! `dagr cert`: a private CA and node certificates for mutual TLS between
//! a cluster's nodes (`[cluster] tls_cert`, `tls_key`, `tls_ca`).
//!
//! ```sh
//! dagr cert ca --out certs                                  # certs/ca.pem, certs/ca.key
//! dagr cert node m1 --ip 127.0.0.1 --dns localhost --out certs   # certs/m1.pem, certs/m1.key
//! ```

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use dagr_transport::certs::{Pem, make_ca, make_node};

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Make a private CA: OUT/ca.pem (give it to every node as tls_ca) and
    /// OUT/ca.key (keep it apart; it signs node certificates).
    Ca {
        /// The directory to write to (made if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// The CA's name (its common name).
        #[arg(long, default_value = "dagr cluster CA")]
        name: String,
        /// Days it is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Make a node's certificate, signed by the CA: OUT/NAME.pem and
    /// OUT/NAME.key (its tls_cert and tls_key). It serves and connects
    /// (server and client authentication).
    Node {
        /// The node's name (its common name and file names).
        name: String,
        /// An address peers reach the node at (repeatable); peers check it.
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
        /// A DNS name peers reach the node at (repeatable).
        #[arg(long = "dns")]
        dns: Vec<String>,
        /// The directory with ca.pem and ca.key.
        #[arg(long, default_value = ".")]
        ca: PathBuf,
        /// The directory to write to (made if missing).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Days it is valid.
        #[arg(long, default_value_t = 825)]
        days: u32,
    },
}

pub fn run(cmd: CertCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        CertCommand::Ca { out, name, days } => {
            let pem = make_ca(&name, days)?;
            let (cert, key) = write(&out, "ca", &pem)?;
            println!("{}\n{}", cert.display(), key.display());
        }
        CertCommand::Node { name, ips, dns, ca, out, days } => {
            if ips.is_empty() && dns.is_empty() {
                anyhow::bail!("give the node at least one --ip or --dns: peers check the address they reach it at");
            }
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                anyhow::bail!("`{name}` is not a node name: use letters, digits, `-`, `_` and `.`");
            }
            let read = |file: &str| {
                let path = ca.join(file);
                std::fs::read_to_string(&path).with_context(|| format!("cannot read the CA's {}", path.display()))
            };
            let ca_pem = Pem { cert: read("ca.pem")?, key: read("ca.key")? };
            let pem = make_node(&ca_pem, &name, &ips, &dns, days)?;
            let (cert, key) = write(&out, &name, &pem)?;
            println!("{}\n{}", cert.display(), key.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `NAME.pem` and `NAME.key` (mode 0600), never over existing files.
fn write(dir: &Path, name: &str, pem: &Pem) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    for (path, text, mode) in [(&key, &pem.key, 0o600), (&cert, &pem.cert, 0o644)] {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .with_context(|| format!("cannot create {} (it is not overwritten)", path.display()))?;
        file.write_all(text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok((cert, key))
}
