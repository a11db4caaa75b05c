//! The tenancy verbs: `dagr tenant`, `dagr token`, `dagr secret` and
//! `dagr audit`. Tenant management and `token … --tenant` need the admin
//! token; the others act for the token's own tenant.

use std::io::Read as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use dagr_core::units::{format_duration, parse_bytes, parse_duration};
use dagr_protocol::tenancy::{
    AuditList, CreateTenant, CreateToken, CreatedToken, PutSecret, Scope, SecretView, TenantLimits, TenantView,
    TokenView,
};
use serde_json::{Map, Value, json};

use crate::client::{Api, block_on, finish, table};

/// A tenant's limits, as flags.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// A host the tenant's tasks may reach (repeatable; replaces the list).
    /// Without any: no network.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Most memory of one attempt, e.g. 256MiB.
    #[arg(long, value_name = "BYTES")]
    max_memory: Option<String>,
    /// Longest attempt, e.g. 10m.
    #[arg(long, value_name = "DURATION")]
    max_duration: Option<String>,
    /// Attempts of the tenant running at once.
    #[arg(long, value_name = "N")]
    max_concurrent: Option<u32>,
    /// Runs (manual and jobs) the tenant may start per minute.
    #[arg(long, value_name = "N")]
    runs_per_minute: Option<u32>,
    /// Unfinished runs the tenant may have before a new backfill is refused.
    #[arg(long, value_name = "N")]
    max_unfinished_runs: Option<u32>,
    /// Most scratch disk of one attempt, e.g. 64MiB.
    #[arg(long, value_name = "BYTES")]
    scratch: Option<String>,
}

impl LimitArgs {
    /// The limits given, as the JSON fields of [`TenantLimits`].
    fn fields(&self) -> anyhow::Result<Map<String, Value>> {
        let mut fields = Map::new();
        if !self.allow_hosts.is_empty() {
            fields.insert("allow_hosts".into(), json!(self.allow_hosts));
        }
        let bytes = |flag: &str, text: &str| parse_bytes(text).map_err(|m| anyhow::anyhow!("--{flag}: {m}"));
        if let Some(text) = &self.max_memory {
            fields.insert("max_memory".into(), json!(bytes("max-memory", text)?));
        }
        if let Some(text) = &self.max_duration {
            let duration = parse_duration(text).map_err(|m| anyhow::anyhow!("--max-duration: {m}"))?;
            fields.insert("max_duration_ms".into(), json!(duration.as_millis() as u64));
        }
        if let Some(n) = self.max_concurrent {
            fields.insert("max_concurrent".into(), json!(n));
        }
        if let Some(n) = self.runs_per_minute {
            fields.insert("runs_per_minute".into(), json!(n));
        }
        if let Some(n) = self.max_unfinished_runs {
            fields.insert("max_unfinished_runs".into(), json!(n));
        }
        if let Some(text) = &self.scratch {
            fields.insert("scratch_bytes".into(), json!(bytes("scratch", text)?));
        }
        Ok(fields)
    }
}

/// A limit `dagr tenant set --clear` can remove.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Limit {
    AllowHosts,
    MaxMemory,
    MaxDuration,
    MaxConcurrent,
    RunsPerMinute,
    MaxUnfinishedRuns,
    Scratch,
}

impl Limit {
    fn field(self) -> &'static str {
        match self {
            Limit::AllowHosts => "allow_hosts",
            Limit::MaxMemory => "max_memory",
            Limit::MaxDuration => "max_duration_ms",
            Limit::MaxConcurrent => "max_concurrent",
            Limit::RunsPerMinute => "runs_per_minute",
            Limit::MaxUnfinishedRuns => "max_unfinished_runs",
            Limit::Scratch => "scratch_bytes",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant.
    Create {
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// List the tenants and their limits.
    List,
    /// Change a tenant's limits: the ones given change, the others stay.
    Set {
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
        /// Remove a limit (repeatable).
        #[arg(long, value_enum, value_name = "LIMIT")]
        clear: Vec<Limit>,
    },
}

/// The largest scope of a new token; it has the smaller ones too.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ScopeArg {
    Read,
    Write,
    Admin,
}

impl ScopeArg {
    fn scopes(self) -> Vec<Scope> {
        match self {
            ScopeArg::Read => vec![Scope::Read],
            ScopeArg::Write => vec![Scope::Read, Scope::Write],
            ScopeArg::Admin => vec![Scope::Read, Scope::Write, Scope::Admin],
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (the only time it is shown).
    Create {
        /// A tenant's token (with the admin token); default your own tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// What it may do: read, write (and read), or admin (all of them).
        #[arg(long, value_enum, default_value = "write")]
        scope: ScopeArg,
        /// What the token is for.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List tokens (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Revoke a token: requests with it are refused from now on.
    Revoke {
        id: String,
        #[arg(long)]
        tenant: Option<String>,
    },
}

impl TokenCommand {
    /// Whether it manages another tenant's tokens (with the admin token).
    pub fn for_other_tenant(&self) -> bool {
        match self {
            TokenCommand::Create { tenant, .. }
            | TokenCommand::List { tenant }
            | TokenCommand::Revoke { tenant, .. } => tenant.is_some(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret; the value comes from --value or stdin.
    Set {
        name: String,
        /// The value (visible in the process list; prefer stdin).
        #[arg(long)]
        value: Option<String>,
    },
    /// List the secrets' names (values are never shown).
    List,
    /// Delete a secret.
    Delete { name: String },
    /// Re-seal every tenant's secrets under `[secrets] key`, opening them
    /// with it or with `[secrets] previous_keys` (an operator's verb: it
    /// reads the config and the store, not the API).
    Rotate(crate::secrets::RotateArgs),
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Records after this sequence number.
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// Most records to show.
    #[arg(long, default_value_t = 100)]
    limit: i64,
}

/// A tenancy verb.
#[derive(Debug)]
pub enum Verb {
    Tenant(TenantCommand),
    Token(TokenCommand),
    Secret(SecretCommand),
    Audit(AuditArgs),
}

/// Runs a tenancy verb against `server`.
pub fn run(server: &str, verb: Verb) -> ExitCode {
    finish(block_on(async {
        let api = Api::new(server)?;
        match verb {
            Verb::Tenant(cmd) => tenant(&api, cmd).await,
            Verb::Token(cmd) => token(&api, cmd).await,
            Verb::Secret(cmd) => secret(&api, cmd).await,
            Verb::Audit(args) => audit(&api, args).await,
        }
    }))
}

async fn tenant(api: &Api, cmd: TenantCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TenantCommand::Create { name, limits } => {
            let limits: TenantLimits = serde_json::from_value(Value::Object(limits.fields()?))?;
            let request = CreateTenant { name, limits };
            let tenant: TenantView = api.json(api.post(&["v1", "tenants"]).json(&request)).await?;
            println!("tenant {} created", tenant.name);
            print_tenants(&[tenant]);
        }
        TenantCommand::List => {
            let tenants: Vec<TenantView> = api.json(api.get(&["v1", "tenants"])).await?;
            print_tenants(&tenants);
        }
        TenantCommand::Set { name, limits, clear } => {
            let mut fields = limits.fields()?;
            for limit in clear {
                fields.insert(limit.field().into(), Value::Null);
            }
            if fields.is_empty() {
                bail!("give a limit to change (see `dagr tenant set --help`)");
            }
            let request =
                api.request(reqwest::Method::PATCH, &["v1", "tenants", &name]).json(&json!({"limits": fields}));
            let tenant: TenantView = api.json(request).await?;
            print_tenants(&[tenant]);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_tenants(tenants: &[TenantView]) {
    let bytes = |b: Option<u64>| b.map(|b| format!("{}MiB", b / (1 << 20))).unwrap_or_else(|| "-".into());
    let rows = tenants
        .iter()
        .map(|t| {
            let l = &t.limits;
            vec![
                t.name.clone(),
                bytes(l.max_memory),
                l.max_duration_ms.map(|ms| format_duration(Duration::from_millis(ms))).unwrap_or_else(|| "-".into()),
                l.max_concurrent.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
                l.runs_per_minute.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
                l.max_unfinished_runs.map(|n| n.to_string()).unwrap_or_else(|| "-".into()),
                bytes(l.scratch_bytes),
                if l.allow_hosts.is_empty() { "none".into() } else { l.allow_hosts.join(" ") },
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["TENANT", "MEMORY", "DURATION", "CONCURRENT", "RUNS/MIN", "UNFINISHED", "SCRATCH", "NETWORK"], rows)
    );
}

async fn token(api: &Api, cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    let base = |tenant: &Option<String>| -> Vec<String> {
        match tenant {
            Some(t) => vec!["v1".into(), "tenants".into(), t.clone(), "tokens".into()],
            None => vec!["v1".into(), "tokens".into()],
        }
    };
    match cmd {
        TokenCommand::Create { tenant, scope, label } => {
            let segments = base(&tenant);
            let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
            let request = CreateToken { scopes: scope.scopes(), label };
            let created: CreatedToken = api.json(api.post(&segments).json(&request)).await?;
            let scopes: Vec<&str> = created.view.scopes.iter().map(|s| s.as_str()).collect();
            eprintln!(
                "token {} of tenant {} ({}); it is shown only now:",
                created.view.id,
                created.view.tenant,
                scopes.join(", ")
            );
            println!("{}", created.token);
        }
        TokenCommand::List { tenant } => {
            let segments = base(&tenant);
            let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
            let tokens: Vec<TokenView> = api.json(api.get(&segments)).await?;
            let rows = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.id.clone(),
                        t.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(","),
                        t.created_at.clone(),
                        t.revoked_at.clone().unwrap_or_else(|| "-".into()),
                        t.created_by.clone().unwrap_or_else(|| "dagr".into()),
                        t.label.clone(),
                    ]
                })
                .collect();
            print!("{}", table(&["ID", "SCOPES", "CREATED", "REVOKED", "CREATED BY", "LABEL"], rows));
        }
        TokenCommand::Revoke { id, tenant } => {
            let mut segments = base(&tenant);
            segments.push(id.clone());
            let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
            api.send(api.request(reqwest::Method::DELETE, &segments)).await?;
            println!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn secret(api: &Api, cmd: SecretCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        SecretCommand::Set { name, value } => {
            let value = match value {
                Some(v) => v,
                None => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text).context("cannot read the value from stdin")?;
                    // A value piped with `echo` ends with a newline that is not part of it.
                    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
                    trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned()
                }
            };
            let request = api.request(reqwest::Method::PUT, &["v1", "secrets", &name]).json(&PutSecret { value });
            let set: SecretView = api.json(request).await?;
            println!("secret {} set", set.name);
        }
        SecretCommand::List => {
            let secrets: Vec<SecretView> = api.json(api.get(&["v1", "secrets"])).await?;
            let rows = secrets.into_iter().map(|s| vec![s.name, s.updated_at]).collect();
            print!("{}", table(&["NAME", "UPDATED"], rows));
        }
        SecretCommand::Delete { name } => {
            api.send(api.request(reqwest::Method::DELETE, &["v1", "secrets", &name])).await?;
            println!("secret {name} deleted");
        }
        SecretCommand::Rotate(_) => anyhow::bail!("`dagr secret rotate` works on the store, not through the API"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn audit(api: &Api, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let query = [("after", args.after.to_string()), ("limit", args.limit.to_string())];
    let page: AuditList = api.json(api.get(&["v1", "audit"]).query(&query)).await?;
    let rows = page
        .records
        .into_iter()
        .map(|r| {
            let detail = match r.detail {
                Value::Object(map) if map.is_empty() => String::new(),
                other => other.to_string(),
            };
            vec![r.seq.to_string(), r.at, r.token_id, r.action, r.target, detail]
        })
        .collect();
    print!("{}", table(&["SEQ", "AT", "TOKEN", "ACTION", "TARGET", "DETAIL"], rows));
    if let Some(next) = page.next {
        println!("more: dagr audit --after {next}");
    }
    Ok(ExitCode::SUCCESS)
}
