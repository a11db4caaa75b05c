//! The tenancy conformance checks (part of [`crate::conformance::run_all`]):
//! tenants, tokens, secrets, the audit log and its retention, and the
//! counts behind a tenant's quotas.

use crate::conformance::{check, run};
use crate::*;

/// The audit log's retention: old records go, oldest first, a bounded
/// batch at a time; newer ones stay.
pub(crate) async fn audit_retention(store: &dyn Store, p: &str) -> Result<()> {
    use crate::tenancy::NewAudit;
    let tenant = format!("{p}audit-retention");
    let entry = |at: i64, action: &str| NewAudit {
        tenant: tenant.clone(),
        at,
        token_id: "t".into(),
        action: action.into(),
        target: "wf".into(),
        detail: "{}".into(),
    };
    // A new record first, then two far in the past (1, 2): time, not the
    // order of appending, decides.
    store.append_audit(entry(i64::MAX / 2, "new")).await?;
    store.append_audit(entry(2, "old-2")).await?;
    store.append_audit(entry(1, "old-1")).await?;
    check(store.drop_audit(3, 1).await? == 1, "one record per batch of 1")?;
    let left: Vec<String> = store.list_audit(&tenant, 0, 10).await?.into_iter().map(|r| r.action).collect();
    check(left == ["new", "old-2"], &format!("the oldest record goes first (left: {left:?})"))?;
    while store.drop_audit(3, 100).await? > 0 {}
    let left: Vec<String> = store.list_audit(&tenant, 0, 10).await?.into_iter().map(|r| r.action).collect();
    check(left == ["new"], &format!("only the new audit record stays (left: {left:?})"))?;
    Ok(())
}

/// A run made by a request and its audit entry are written together: a
/// cycle that already has a run adds neither, and a run that cannot be
/// written leaves no entry behind.
pub(crate) async fn audited_runs(store: &dyn Store, p: &str) -> Result<()> {
    use crate::tenancy::NewAudit;
    let tenant = format!("{p}audited");
    let entry = |target: &str| NewAudit {
        tenant: tenant.clone(),
        at: 5,
        token_id: "t".into(),
        action: "run.trigger".into(),
        target: target.into(),
        detail: "{}".into(),
    };
    let new = |id: &str, kind, at| NewRun {
        run: run(&format!("{p}audited-{id}"), &tenant, "daily", kind, at),
        tasks: vec!["a".into()],
        sla_at: Some(at),
    };
    let made = store.create_runs_audited(vec![new("a1", RunKind::Schedule, 86_400_000)], None, entry("a1")).await?;
    check(matches!(made.as_slice(), [Created::Created { .. }]), "an audited run is created")?;
    let again = store.create_runs_audited(vec![new("a2", RunKind::Schedule, 86_400_000)], None, entry("a2")).await?;
    check(matches!(again.as_slice(), [Created::Exists { .. }]), "a cycle's second run is refused")?;
    let manual = store.create_runs_audited(vec![new("m1", RunKind::Manual, 1)], None, entry("m1")).await?;
    check(matches!(manual.as_slice(), [Created::Created { .. }]), "an audited manual run is created")?;
    // The same id again is an error: the transaction is rolled back whole.
    let clash = store.create_runs_audited(vec![new("m1", RunKind::Manual, 1)], None, entry("m1-again")).await;
    check(clash.is_err(), "a run whose id exists is refused")?;
    let targets: Vec<String> = store.list_audit(&tenant, 0, 10).await?.into_iter().map(|r| r.target).collect();
    check(targets == ["a1", "m1"], &format!("an entry for each run made, none for the others (got {targets:?})"))?;
    // Both ways of writing a run write its deadline (a schedule's run is
    // read back first, a manual run goes as one script).
    let due: Vec<String> = store.due_slas(86_400_001, 100_000).await?.into_iter().map(|d| d.run_id).collect();
    for id in ["a1", "m1"] {
        check(due.contains(&format!("{p}audited-{id}")), &format!("run {id}'s deadline is written"))?;
    }
    Ok(())
}

/// Tenants, tokens, secrets, audit and the recent-runs count.
pub(crate) async fn tenancy(store: &dyn Store, p: &str) -> Result<()> {
    use crate::tenancy::*;
    let name = format!("{p}acme");
    let other = format!("{p}other");
    let tenant = TenantRow { name: name.clone(), limits: "{}".into(), created_at: 1, updated_at: 1 };
    check(store.create_tenant(&tenant).await?, "tenant created")?;
    check(!store.create_tenant(&TenantRow { limits: "{\"x\":1}".into(), ..tenant.clone() }).await?, "no twin")?;
    check(store.get_tenant(&name).await?.as_ref() == Some(&tenant), "tenant kept as created")?;
    check(store.update_tenant(&name, "{\"max_concurrent\":2}", 5).await?, "limits updated")?;
    check(!store.update_tenant(&format!("{p}nobody"), "{}", 5).await?, "no update of a missing tenant")?;
    let got = store.get_tenant(&name).await?;
    check(got.is_some_and(|t| t.limits == "{\"max_concurrent\":2}" && t.updated_at == 5), "new limits read back")?;
    check(store.list_tenants().await?.iter().any(|t| t.name == name), "tenant listed")?;

    let token = TokenRow {
        id: format!("{p}tok1"),
        tenant: name.clone(),
        hash: "ab".repeat(32),
        scopes: "read,write".into(),
        label: "ci".into(),
        created_at: 10,
        revoked_at: None,
        created_by: None,
    };
    check(store.create_token(&token).await?, "token created")?;
    check(!store.create_token(&TokenRow { tenant: other.clone(), ..token.clone() }).await?, "token ids are unique")?;
    check(store.get_token(&token.id).await?.as_ref() == Some(&token), "token read back")?;
    let second =
        TokenRow { id: format!("{p}tok2"), created_at: 11, created_by: Some(token.id.clone()), ..token.clone() };
    store.create_token(&second).await?;
    let listed = store.list_tokens(&name).await?;
    check(listed.len() == 2 && listed[0] == token && listed[1] == second, "a tenant's tokens, oldest first")?;
    check(store.list_tokens(&other).await?.is_empty(), "tokens belong to their tenant")?;
    check(!store.revoke_token(&other, &token.id, 20).await?, "another tenant cannot revoke a token")?;
    check(store.revoke_token(&name, &token.id, 20).await?, "token revoked")?;
    check(!store.revoke_token(&name, &token.id, 21).await?, "revoking twice changes nothing")?;
    check(store.get_token(&token.id).await?.is_some_and(|t| t.revoked_at == Some(20)), "revocation time kept")?;

    store.put_secret(&name, "db", "one", 30).await?;
    store.put_secret(&name, "api", "two", 31).await?;
    store.put_secret(&name, "db", "three", 32).await?;
    store.put_secret(&other, "db", "theirs", 33).await?;
    let metas = store.list_secrets(&name).await?;
    check(
        metas
            == vec![
                SecretMeta { name: "api".into(), updated_at: 31 },
                SecretMeta { name: "db".into(), updated_at: 32 },
            ],
        "secret names by name, with the last write time",
    )?;
    let all = store.tenant_secrets(&name).await?;
    check(all == vec![("api".into(), "two".into()), ("db".into(), "three".into())], "a tenant's secrets")?;
    check(!store.delete_secret(&name, "nope").await?, "deleting a missing secret")?;
    check(store.delete_secret(&name, "db").await?, "secret deleted")?;
    check(store.tenant_secrets(&other).await? == vec![("db".into(), "theirs".into())], "secrets are per tenant")?;

    // Every tenant's secrets, a page at a time, and re-sealing them.
    store.put_secret(&name, "b", "two-b", 34).await?;
    let mut seen = Vec::new();
    let mut after: Option<(String, String)> = Some((p.to_owned(), String::new()));
    loop {
        let page = store.secrets_page(after.as_ref().map(|(t, n)| (t.as_str(), n.as_str())), 2).await?;
        check(page.len() <= 2, "a page holds at most its limit")?;
        let ours: Vec<_> = page.iter().filter(|(t, _, _)| t.starts_with(p)).cloned().collect();
        seen.extend(ours.iter().cloned());
        match page.last() {
            Some((t, n, _)) if ours.len() == page.len() => after = Some((t.clone(), n.clone())),
            _ => break,
        }
    }
    let expected: Vec<(String, String, String)> = vec![
        (name.clone(), "api".into(), "two".into()),
        (name.clone(), "b".into(), "two-b".into()),
        (other.clone(), "db".into(), "theirs".into()),
    ];
    check(seen == expected, "every tenant's secrets in (tenant, name) order, paged")?;
    check(store.reseal_secret(&name, "api", "two", "two-sealed").await?, "a secret re-sealed")?;
    check(!store.reseal_secret(&name, "api", "two", "again").await?, "no re-seal over a value that changed")?;
    check(!store.reseal_secret(&name, "nope", "x", "y").await?, "no re-seal of a missing secret")?;
    let metas = store.list_secrets(&name).await?;
    check(metas.iter().any(|m| m.name == "api" && m.updated_at == 31), "re-sealing keeps the last write time")?;
    check(
        store.tenant_secrets(&name).await?.contains(&("api".into(), "two-sealed".into())),
        "the re-sealed value is stored",
    )?;

    let entry = |tenant: &str, action: &str| NewAudit {
        tenant: tenant.into(),
        at: 40,
        token_id: token.id.clone(),
        action: action.into(),
        target: "wf".into(),
        detail: "{}".into(),
    };
    let first = store.append_audit(entry(&name, "apply")).await?;
    store.append_audit(entry(&other, "apply")).await?;
    let third = store.append_audit(entry(&name, "trigger")).await?;
    check(first < third, "audit sequence grows")?;
    let records = store.list_audit(&name, 0, 10).await?;
    check(
        records.len() == 2 && records[0].action == "apply" && records[1].action == "trigger",
        "a tenant's audit in order",
    )?;
    check(records[0].seq == first && records[0].token_id == token.id, "audit records keep their token")?;
    let page = store.list_audit(&name, first, 10).await?;
    check(page.len() == 1 && page[0].seq == third, "audit pages by sequence")?;
    check(store.list_audit(&name, 0, 1).await?.len() == 1, "audit limit")?;

    let runs = [("m1", RunKind::Manual, 1000), ("j1", RunKind::Job, 2000), ("s1", RunKind::Schedule, 3000)];
    for (id, kind, at) in runs {
        let id = format!("{p}rate-{id}");
        store
            .create_runs(vec![NewRun { run: run(&id, &name, "wf", kind, at), tasks: vec![], sla_at: None }], None)
            .await?;
    }
    let manual_and_jobs = [RunKind::Manual, RunKind::Job];
    let recent = store.count_runs_since(&name, &manual_and_jobs, 1000).await?;
    check(recent == RecentRuns { count: 2, oldest: Some(1000) }, "manual and job runs counted")?;
    let recent = store.count_runs_since(&name, &manual_and_jobs, 1500).await?;
    check(recent == RecentRuns { count: 1, oldest: Some(2000) }, "only runs since the time")?;
    let none = store.count_runs_since(&other, &manual_and_jobs, 0).await?;
    check(none == RecentRuns { count: 0, oldest: None }, "runs of another tenant are not counted")?;

    check(store.count_unfinished_runs(&name).await? == 3, "three queued runs are unfinished")?;
    check(store.count_unfinished_runs(&other).await? == 0, "another tenant's runs are not counted")?;
    let end = |id: &str, state: RunState| WriteBatch {
        runs: vec![RunWrite { id: format!("{p}rate-{id}"), state, started_at: None, finished_at: None, updated_at: 9 }],
        ..Default::default()
    };
    store.commit(end("m1", RunState::Succeeded)).await?;
    store.commit(end("j1", RunState::Running)).await?;
    check(store.count_unfinished_runs(&name).await? == 2, "an ended run is not counted, a running one is")?;
    Ok(())
}
