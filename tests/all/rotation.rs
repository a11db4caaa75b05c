//! Rotating the key that seals tenants' secrets: `dagr secret rotate`
//! re-seals every secret under `[secrets] key` while `previous_keys` still
//! open them (tenants' secrets and webhooks' signing secrets), on SQLite
//! and PostgreSQL; killed with SIGKILL half-way, it leaves every secret
//! readable, and a second run finishes the job.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use dagr_protocol::sealed::SecretKey;
use dagr_store::{
    SqlStore, Store, Synchronous, TenancyStore as _, WebhookRow, WebhookState, WebhookStore as _, webhook_secret_name,
};

use crate::support;

const SECRETS: usize = 3000;

/// Fills the store: secrets sealed by `old`, two stored before sealing,
/// one sealed by a key nobody has. Returns the values by (tenant, name).
async fn fill(store: &dyn Store, old: &SecretKey) -> BTreeMap<(String, String), String> {
    let mut values = BTreeMap::new();
    for i in 0..SECRETS {
        let (tenant, name, value) =
            (format!("t{}", i % 3), format!("s{i:05}"), format!("value-{i}-{}", "x".repeat(i % 50)));
        store.put_secret(&tenant, &name, &old.seal(&tenant, &name, &value), i as i64).await.unwrap();
        values.insert((tenant, name), value);
    }
    for name in ["legacy-a", "legacy-b"] {
        store.put_secret("t0", name, "plain old value", 1).await.unwrap();
        values.insert(("t0".into(), name.into()), "plain old value".into());
    }
    let lost = SecretKey::generate().seal("t1", "lost", "nobody can read this");
    store.put_secret("t1", "lost", &lost, 1).await.unwrap();
    // Two webhooks: one sealed by `old`, one stored before sealing.
    for (id, sealed) in [("wh_sealed", true), ("wh_legacy", false)] {
        let name = webhook_secret_name(id);
        let value = format!("whsec_{id}");
        let row = WebhookRow {
            id: id.into(),
            tenant: "t2".into(),
            url: "https://hooks.example.org/x".into(),
            kinds: String::new(),
            workflow: None,
            secret: if sealed { old.seal("t2", &name, &value) } else { value.clone() },
            batch: 1,
            cursor: 0,
            state: WebhookState::Active,
            failing_since: None,
            disabled_reason: None,
            created_at: 1,
        };
        store.create_webhook(&row).await.unwrap();
        values.insert(("t2".into(), name), value);
    }
    values
}

/// Every secret opens with `key` to its value (`lost` aside).
async fn all_open(store: &dyn Store, key: &SecretKey, values: &BTreeMap<(String, String), String>) {
    for tenant in ["t0", "t1", "t2"] {
        for (name, stored) in store.tenant_secrets(tenant).await.unwrap() {
            if name == "lost" {
                continue;
            }
            let want = &values[&(tenant.to_owned(), name.clone())];
            let got = key.open(tenant, &name, &stored).unwrap_or_else(|e| panic!("{tenant}/{name}: {e}"));
            assert_eq!(&got, want, "{tenant}/{name}");
        }
    }
    for id in ["wh_sealed", "wh_legacy"] {
        let stored = store.get_webhook("t2", id).await.unwrap().unwrap().secret;
        let name = webhook_secret_name(id);
        let got = key.open("t2", &name, &stored).unwrap_or_else(|e| panic!("webhook {id}: {e}"));
        assert_eq!(got, values[&("t2".to_owned(), name)], "webhook {id}");
    }
}

fn config(dir: &Path, url: &str, new: &SecretKey, old: &SecretKey) -> std::path::PathBuf {
    let path = dir.join("rotate.toml");
    let text = format!(
        "[store]\nurl = {url:?}\n[secrets]\nkey = \"{}\"\nprevious_keys = [\"{}\"]\n",
        new.to_hex(),
        old.to_hex()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn rotate(config: &Path) -> (bool, String) {
    let out = Command::new(support::dagr_binary()).args(["secret", "rotate", "--config"]).arg(config).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn rotation_survives_kill_9(url: &str) {
    let store = SqlStore::open(url, Synchronous::Normal).await.unwrap();
    let (old, new) = (SecretKey::generate(), SecretKey::generate());
    let values = fill(&store, &old).await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), url, &new, &old);
    let both = new.clone().with_previous(vec![old.clone()]);

    // Killed after its first page.
    let mut child = Command::new(support::dagr_binary())
        .args(["secret", "rotate", "--config"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut progress = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while progress.read_line(&mut line).unwrap() > 0 && !line.contains("so far") {
        line.clear();
    }
    let _ = child.kill();
    let _ = child.wait();
    all_open(&store, &both, &values).await;

    // Again, to the end: every secret under the new key but the one no key opens.
    let (ok, said) = rotate(&config);
    assert!(!ok, "a secret no key opens makes the run fail: {said}");
    assert!(said.contains("1 opened by no key"), "{said}");
    all_open(&store, &new, &values).await;
    let lost = store.tenant_secrets("t1").await.unwrap().into_iter().find(|(n, _)| n == "lost").unwrap().1;
    assert!(both.open("t1", "lost", &lost).is_err(), "a secret no key opens is left as it was");
    // Once more: nothing left to do.
    let (_, said) = rotate(&config);
    assert!(said.starts_with("0 re-sealed"), "{said}");
    assert!(said.contains(&format!("{} already under the current key", SECRETS + 4)), "{said}");
    let legacy = store.get_webhook("t2", "wh_legacy").await.unwrap().unwrap().secret;
    assert!(legacy.starts_with("sealed:v1:"), "a plain webhook secret is sealed: {legacy}");
    // Re-sealing is not writing: the last write times are the tenants'.
    let metas = store.list_secrets("t0").await.unwrap();
    assert!(metas.iter().any(|m| m.name == "s00000" && m.updated_at == 0), "{:?}", &metas[..2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_on_sqlite_survives_kill_9_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/dagr.db?mode=rwc", dir.path().display());
    rotation_survives_kill_9(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_on_postgres_survives_kill_9_and_resumes() {
    let Some(url) = crate::hostile_api::fresh_postgres_database("dagr_rotation").await else { return };
    rotation_survives_kill_9(&url).await;
}

#[test]
fn rotation_needs_the_new_key_configured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let url = format!("sqlite://{}/dagr.db?mode=rwc", dir.path().display());
    std::fs::write(&path, format!("[store]\nurl = \"{url}\"\n")).unwrap();
    let out = Command::new(support::dagr_binary()).args(["secret", "rotate", "--config"]).arg(&path).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("previous_keys"), "{out:?}");
}
