//! A real `dagr serve` process for end-to-end tests.
//!
//! [`DagrServer::start`] picks a free loopback port, starts the `dagr`
//! binary of this build on it with a fresh data directory, and returns once
//! `GET /healthz` answers. The process is killed when the value is dropped.
//! Its stdout and stderr go to `server.log` in the data directory; when a
//! test fails, the end of that log is printed, and with
//! `DAGR_KEEP_TEST_DIRS=1` the whole directory is kept for a post-mortem.
//!
//! The server makes its tokens at its first start: [`DagrServer::token`]
//! (the `default` tenant's, with every scope) and
//! [`DagrServer::admin_token`]. [`DagrServer::cli`] and
//! [`DagrServer::client`] send the former.
//!
//! ```ignore
//! let server = DagrServer::start();
//! let out = server.cli(&["apply", "-f", path]);       // `dagr --server URL apply …`
//! let body = server.client().get(server.url("/v1/runs")).send().await?;
//! ```

#![allow(dead_code)]

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{dagr_binary, shared_cache_dir};

/// How long a server may take to answer its first health check (a debug
/// build on a busy two-core machine, loading every built-in plugin).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `dagr serve`.
pub struct DagrServer {
    /// Where the server listens.
    pub addr: SocketAddr,
    dir: Option<tempfile::TempDir>,
    envs: Vec<(String, String)>,
    child: Option<Child>,
}

impl DagrServer {
    /// Starts a server with the default configuration (plus the test
    /// suite's shared compiled-code cache).
    pub fn start() -> DagrServer {
        DagrServer::start_with(&[])
    }

    /// Starts a server with extra environment variables, which is how any
    /// part of the config can be set: `("DAGR_WORKER__SLOTS", "4")`.
    pub fn start_with(envs: &[(&str, &str)]) -> DagrServer {
        let dir = tempfile::Builder::new()
            .prefix("dagr-server-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a data dir: {e}"));
        let mut server = DagrServer {
            addr: free_port(),
            dir: Some(dir),
            envs: envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
        };
        server.spawn_and_wait();
        server
    }

    /// `http://127.0.0.1:PORT`, the value for `--server`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The data directory (the database, the server's log).
    pub fn data_dir(&self) -> &Path {
        self.dir.as_ref().map(|d| d.path()).unwrap_or_else(|| Path::new("."))
    }

    /// The `default` tenant's token (read, write and admin), which the
    /// server wrote to its data directory at its first start.
    pub fn token(&self) -> String {
        self.token_file("token")
    }

    /// The admin token (tenants and their tokens), likewise.
    pub fn admin_token(&self) -> String {
        self.token_file("admin.token")
    }

    fn token_file(&self, name: &str) -> String {
        let path = self.data_dir().join(name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("the server wrote no {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// An HTTP client that sends the `default` tenant's token.
    pub fn client(&self) -> reqwest::Client {
        client_with_token(&self.token())
    }

    /// The server's stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir().join("server.log")).unwrap_or_default()
    }

    /// The process id of the server, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Runs the `dagr` CLI against this server (`DAGR_SERVER` is set) and
    /// waits for it, at most [`CLI_TIMEOUT`].
    pub fn cli(&self, args: &[&str]) -> Output {
        output_within(self.cli_command(args), CLI_TIMEOUT)
    }

    /// The command [`cli`](Self::cli) runs, for tests that need stdin or a
    /// child they control.
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(dagr_binary());
        command
            .args(args)
            .env("DAGR_SERVER", self.base_url())
            .env("DAGR_TOKEN", self.token())
            // Not the profiles of whoever runs the tests.
            .env("XDG_CONFIG_HOME", self.data_dir().join("client-config"))
            .env_remove("DAGR_PROFILE")
            .env_remove("DAGR_TENANT")
            .env_remove("DAGR_LOG");
        command
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Asks the server to stop (SIGTERM) and waits for it to exit.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let sent = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !sent {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs (SIGKILL) and starts it again on the same
    /// data directory and port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_and_wait();
    }

    fn spawn_and_wait(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir().join("server.log"))
            .unwrap_or_else(|e| panic!("cannot create the server log: {e}"));
        let log_err = log.try_clone().unwrap_or_else(|e| panic!("cannot share the server log: {e}"));
        let mut command = Command::new(dagr_binary());
        command
            .arg("serve")
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--data-dir")
            .arg(self.data_dir())
            .env("DAGR_WORKER__CACHE_DIR", shared_cache_dir())
            .env("DAGR_LOG", "info,sqlx=warn,wasmtime=warn,cranelift=warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", dagr_binary().display()));
        self.child = Some(child);
        self.wait_until_healthy();
    }

    fn wait_until_healthy(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                panic!(
                    "dagr serve on {} exited with {status} before it was healthy; its log:\n{}",
                    self.addr,
                    self.log()
                );
            }
            if healthz(self.addr) {
                return;
            }
            if Instant::now() > deadline {
                panic!("dagr serve on {} was not healthy after {READY_TIMEOUT:?}; its log:\n{}", self.addr, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for DagrServer {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            return;
        }
        let log = self.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!("--- the last lines of dagr serve's log ({}):", self.addr);
        for line in tail.iter().rev() {
            eprintln!("{line}");
        }
        if std::env::var("DAGR_KEEP_TEST_DIRS").is_ok_and(|v| v == "1")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("--- kept the server's data dir: {}", dir.keep().display());
        }
    }
}

/// How long [`DagrServer::cli`] lets a command run before it kills it and
/// fails the test (a hung client must not hang the suite).
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` to its end and collects its output, like
/// [`Command::output`], but kills it and panics after `timeout`.
pub fn output_within(mut command: Command, timeout: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = read_all(child.stdout.take());
    let stderr = read_all(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = stdout.join().unwrap_or_default();
                let stderr = stderr.join().unwrap_or_default();
                panic!(
                    "{command:?} did not finish within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
        }
    };
    Output { status, stdout: stdout.join().unwrap_or_default(), stderr: stderr.join().unwrap_or_default() }
}

/// Reads a child's pipe to its end on a thread.
fn read_all(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// An HTTP client that sends `token` with every request.
pub fn client_with_token(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .unwrap_or_else(|e| panic!("`{token}` is not a header value: {e}"));
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(CLI_TIMEOUT)
        .build()
        .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"))
}

/// A loopback address whose port was free a moment ago. The server binds it
/// again right after; another process taking it in between would make the
/// start fail loudly, not wrongly.
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
    listener.local_addr().unwrap_or_else(|e| panic!("no local address: {e}"))
}

/// Whether `GET /healthz` answers 200 with `"status":"ok"` (a node that is
/// still starting answers `"starting"`), with a plain blocking socket so
/// the helper works in sync and async tests alike.
fn healthz(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let ok = br#""status":"ok""#;
    answer.starts_with(b"HTTP/1.1 200") && answer.windows(ok.len()).any(|w| w == ok)
}

/// The path of a file written into `dir`, for `dagr apply -f`.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}
