//! Secrets that never come back out, the CLI's tenant verbs, and tokens
//! and secrets at rest.

use super::*;

// Secrets ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_never_comes_back_out_even_when_a_plugin_logs_it() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let token = server.token();
    let value = format!("hunter2-{}-{}", std::process::id(), dagr_api::auth::generate_token().id);

    let set =
        client.expect(Method::PUT, "/v1/secrets/k", &token, Body::Json(json!({"value": value})), StatusCode::OK).await;
    assert_eq!(set["name"], "k");
    let definition = "name: leaky\ntasks:\n  - name: leak\n    plugin: script\n    params:\n      script: 'info(\"the value is \" + secret(\"k\")); secret(\"k\")'\n";
    client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition.into()), StatusCode::CREATED).await;
    let run = client
        .expect(Method::POST, "/v1/workflows/leaky/runs", &token, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let run = run["id"].as_str().unwrap().to_owned();
    let finished = client.wait_run_as(&token, &run).await;
    assert_eq!(finished["state"], "succeeded", "{finished}");

    let logs = client
        .expect(Method::GET, &format!("/v1/runs/{run}/tasks/leak/logs"), &token, Body::None, StatusCode::OK)
        .await;
    assert!(
        logs.as_array().unwrap().iter().any(|l| l["message"] == "the value is [REDACTED]"),
        "the plugin read the secret and its log shows it redacted: {logs:#}"
    );
    let task =
        client.expect(Method::GET, &format!("/v1/runs/{run}/tasks/leak"), &token, Body::None, StatusCode::OK).await;
    assert_eq!(task["output"], "[REDACTED]", "{task:#}");
    let job = client
        .expect(
            Method::POST,
            "/v1/jobs?wait=true",
            &token,
            Body::Json(json!({"plugin": "script", "params": {"script": "info(secret(\"k\")); secret(\"k\")"}})),
            StatusCode::OK,
        )
        .await;
    assert_eq!(job["output"], "[REDACTED]", "{job:#}");
    let job_run = job["run_id"].as_str().unwrap();

    let mut seen = Vec::new();
    for path in [
        "/v1/secrets".to_owned(),
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/tasks/leak"),
        format!("/v1/runs/{run}/tasks/leak/logs"),
        format!("/v1/runs/{run}/tasks/leak/logs?follow=true"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{job_run}"),
        format!("/v1/runs/{job_run}/tasks/script/logs"),
        "/v1/runs".into(),
        "/v1/audit".into(),
    ] {
        let answer = client.send(Method::GET, &path, &token, Body::None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.text);
        assert!(!answer.text.contains(&value), "{path} shows the secret: {}", answer.text);
        seen.push(answer.text);
    }
    assert!(seen[0].contains("\"k\""), "the secret is listed by name: {}", seen[0]);
    assert!(seen.last().unwrap().contains("secret.put"), "setting the secret is audited: {}", seen.last().unwrap());
    assert!(!server.log().contains(&value), "the server's own log shows the secret");

    // Another tenant's plugin does not get it.
    let admin = server.admin_token();
    let other = tenant_with_token(&client, &admin, "stranger", json!({})).await;
    let job = client
        .expect(
            Method::POST,
            "/v1/jobs?wait=true",
            &other,
            Body::Json(json!({"plugin": "script", "params": {"script": "let s = secret(\"k\"); if type_of(s) == \"()\" { \"none\" } else { s }"}})),
            StatusCode::OK,
        )
        .await;
    assert_eq!(job["output"], "none", "tenant `stranger` read default's secret: {job:#}");

    let answer = client.send(Method::DELETE, "/v1/secrets/k", &token, Body::None).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.text);
    let answer = client.send(Method::DELETE, "/v1/secrets/k", &token, Body::None).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
}

// The CLI -----------------------------------------------------------------------------------

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn expect_ok(out: &std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn cli_manages_tenants_tokens_secrets_and_reads_the_audit() {
    let _serial = crate::support::serial_blocking();
    let server = DagrServer::start();
    let admin = server.admin_token();
    let as_admin = |args: &[&str]| {
        let mut command = server.cli_command(args);
        command.env("DAGR_TOKEN", &admin);
        crate::server::output_within(command, crate::server::CLI_TIMEOUT)
    };

    let out = as_admin(&[
        "tenant",
        "create",
        "team",
        "--allow-host",
        "api.example.org",
        "--runs-per-minute",
        "5",
        "--max-unfinished-runs",
        "700",
        "--max-memory",
        "256MiB",
        "--max-duration",
        "10m",
    ]);
    let stdout = expect_ok(&out, "dagr tenant create");
    assert!(stdout.contains("tenant team created"), "{stdout}");
    let out = as_admin(&["tenant", "set", "team", "--max-concurrent", "3", "--clear", "max-memory"]);
    expect_ok(&out, "dagr tenant set");
    let list = expect_ok(&as_admin(&["tenant", "list"]), "dagr tenant list");
    let row = list.lines().find(|l| l.starts_with("team ")).unwrap_or_else(|| panic!("{list}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells, ["team", "-", "10m", "3", "5", "700", "-", "api.example.org"], "{list}");
    // A tenant token may not manage tenants.
    let out = server.cli(&["tenant", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("admin token"), "{}", text(&out.stderr));

    let out = as_admin(&["token", "create", "--tenant", "team", "--scope", "write", "--label", "ci"]);
    let team_token = expect_ok(&out, "dagr token create").trim().to_owned();
    assert!(team_token.starts_with("dagr_"), "{team_token}");
    let team = |args: &[&str], stdin: Option<&str>| {
        let mut command = server.cli_command(args);
        command.env("DAGR_TOKEN", &team_token);
        match stdin {
            None => crate::server::output_within(command, crate::server::CLI_TIMEOUT),
            Some(input) => {
                use std::io::Write as _;
                let mut child = command
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
                child.wait_with_output().unwrap()
            }
        }
    };
    expect_ok(&team(&["secret", "set", "db-password"], Some("from stdin\n")), "dagr secret set (stdin)");
    expect_ok(&team(&["secret", "set", "other", "--value", "v"], None), "dagr secret set --value");
    let secrets = expect_ok(&team(&["secret", "list"], None), "dagr secret list");
    assert!(secrets.contains("db-password") && secrets.contains("other"), "{secrets}");
    assert!(!secrets.contains("from stdin"), "{secrets}");
    expect_ok(&team(&["secret", "delete", "other"], None), "dagr secret delete");
    let audit = expect_ok(&team(&["audit"], None), "dagr audit");
    let team_id = team_token.split('_').nth(1).unwrap();
    assert!(audit.lines().any(|l| l.contains("secret.put") && l.contains(team_id)), "{audit}");
    assert!(audit.lines().any(|l| l.contains("secret.delete")), "{audit}");
    assert!(audit.lines().any(|l| l.contains("token.create")), "{audit}");
    // Its own tokens need the admin scope.
    let out = team(&["token", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("admin"), "{}", text(&out.stderr));
    let tokens = expect_ok(&as_admin(&["token", "list", "--tenant", "team"]), "dagr token list --tenant");
    assert!(tokens.contains(team_id) && tokens.contains("read,write") && !tokens.contains(&team_token), "{tokens}");

    // A profile gives the server and the token.
    let config = server.data_dir().join("client-config").join("dagr");
    std::fs::create_dir_all(&config).unwrap();
    write_file(
        &config,
        "config.toml",
        &format!("[profiles.team]\nserver = \"{}\"\ntoken = \"{team_token}\"\n", server.base_url()),
    );
    let mut command = server.cli_command(&["--profile", "team", "secret", "list"]);
    command.env_remove("DAGR_TOKEN").env_remove("DAGR_SERVER");
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert!(expect_ok(&out, "dagr --profile team secret list").contains("db-password"));
    let mut command = server.cli_command(&["--profile", "nope", "secret", "list"]);
    command.env_remove("DAGR_TOKEN");
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert!(text(&out.stderr).contains("no profile `nope`"), "{}", text(&out.stderr));

    // Revoked: refused, and the CLI says so.
    expect_ok(&as_admin(&["token", "revoke", team_id, "--tenant", "team"]), "dagr token revoke");
    let out = team(&["secret", "list"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("revoked"), "{}", text(&out.stderr));
    // No token at all: the CLI says how to give one.
    let mut command = server.cli_command(&["workflows"]);
    command.env_remove("DAGR_TOKEN").current_dir(server.data_dir());
    let out = crate::server::output_within(command, crate::server::CLI_TIMEOUT);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("missing token") && text(&out.stderr).contains("DAGR_TOKEN"),
        "{}",
        text(&out.stderr)
    );
}

// Tokens at rest --------------------------------------------------------------------------

/// The database files (the SQLite file and its write-ahead log), as bytes.
fn database_bytes(server: &DagrServer) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["dagr.db", "dagr.db-wal"] {
        if let Ok(mut more) = std::fs::read(server.data_dir().join(name)) {
            bytes.append(&mut more);
        }
    }
    assert!(!bytes.is_empty(), "no database in {}", server.data_dir().display());
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_secrets_are_not_stored_in_plain_text() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let team = tenant_with_token(&client, &admin, "hashed", json!({})).await;
    let (read, _) = token_of(&client, &admin, "hashed", &["read"]).await;
    client.expect(Method::GET, "/v1/workflows", &team, Body::None, StatusCode::OK).await;
    let value = "the-password-is-swordfish-7f3a9c";
    let path = "/v1/secrets/db_password";
    client.expect(Method::PUT, path, &team, Body::Json(json!({ "value": value })), StatusCode::OK).await;

    let database = database_bytes(&server);
    assert!(!contains(&database, value), "a secret's value is in the database in plain text");
    assert!(contains(&database, "sealed:v1:"), "no sealed secret in the database");
    // The key that seals them is in the data directory, readable by its
    // owner only, and not in the database.
    let key = std::fs::read_to_string(server.data_dir().join("secrets.key")).unwrap();
    assert_eq!(key.trim().len(), 64, "{key}");
    assert!(!contains(&database, key.trim()), "the sealing key is in the database");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(server.data_dir().join("secrets.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "secrets.key has mode {mode:o}");

    for token in [server.token(), admin, team, read] {
        let (id, secret) = token.trim_start_matches("dagr_").split_once('_').unwrap();
        assert!(!contains(&database, secret), "the secret of token {id} is in the database in plain text");
        assert!(
            contains(&database, &dagr_api::auth::hash_secret(secret)),
            "the hash of token {id} is not in the database"
        );
        assert!(contains(&database, id), "token {id} is not in the database");
    }
}
