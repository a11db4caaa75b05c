//! A real headless Chromium, driven over WebDriver (Debian's `chromedriver`),
//! for the web UI's tests: [`Browser`] starts its own chromedriver on a free
//! loopback port and one browser session, and speaks the W3C WebDriver
//! protocol over plain HTTP (a handful of commands: navigate, find, click,
//! type, read, run a script, screenshot, the console log).
//!
//! Every wait polls until [`PATIENCE`]; nothing asserts on time.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::api::PATIENCE;

/// The W3C name of a web element's id in JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session of a chromedriver of its own.
pub(crate) struct Browser {
    driver: Child,
    driver_url: String,
    session: String,
    http: reqwest::Client,
    /// Where screenshots go.
    shots: PathBuf,
    /// Console lines already read by [`Browser::console_errors`].
    console: Vec<String>,
}

/// Where chromedriver is, or why the test cannot run.
fn chromedriver() -> PathBuf {
    for candidate in ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!("chromedriver is not installed: apt-get install chromium chromium-driver (scripts/test.sh does)")
}

impl Browser {
    /// Starts chromedriver and a headless Chromium at 1280×800.
    pub(crate) async fn start(shots: &Path) -> Browser {
        std::fs::create_dir_all(shots).unwrap_or_else(|e| panic!("cannot create {}: {e}", shots.display()));
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("no loopback port: {e}"));
            listener.local_addr().unwrap().port()
        };
        let log = std::fs::File::create(shots.join("chromedriver.log")).unwrap();
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}"));
        let driver_url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(format!("{driver_url}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(started.elapsed() < PATIENCE, "chromedriver did not start on port {port}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": [
                "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,800", "--no-first-run", "--disable-extensions",
            ]},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let mut browser =
            Browser { driver, driver_url, session: String::new(), http, shots: shots.to_owned(), console: Vec::new() };
        let created = browser.command(reqwest::Method::POST, "/session", Some(capabilities)).await;
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("chromedriver made no session: {created}"))
            .to_owned();
        browser
    }

    /// Sends one WebDriver command; panics with the driver's message on an error.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.try_command(method.clone(), path, body).await {
            Ok(value) => value,
            Err(e) => panic!("WebDriver {method} {path}: {e}"),
        }
    }

    async fn try_command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.driver_url);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| format!("no answer: {e}"))?;
        let status = response.status();
        let body: Value = response.json().await.map_err(|e| format!("not JSON: {e}"))?;
        let value = body.get("value").cloned().unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(format!("{status}: {} {}", value["error"], value["message"]));
        }
        Ok(value)
    }

    fn at(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` and waits for the page to load.
    pub(crate) async fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, &self.at("/url"), Some(json!({"url": url}))).await;
    }

    /// The page's URL.
    pub(crate) async fn url(&self) -> String {
        self.command(reqwest::Method::GET, &self.at("/url"), None).await.as_str().unwrap_or_default().to_owned()
    }

    /// Resizes the window.
    pub(crate) async fn window(&self, width: u32, height: u32) {
        let body = json!({"width": width, "height": height});
        self.command(reqwest::Method::POST, &self.at("/window/rect"), Some(body)).await;
    }

    /// The element `css` matches, if there is one now (else the driver's
    /// error).
    async fn find_now(&self, css: &str) -> Result<String, String> {
        let body = json!({"using": "css selector", "value": css});
        let found = self.try_command(reqwest::Method::POST, &self.at("/element"), Some(body)).await?;
        found[ELEMENT].as_str().map(str::to_owned).ok_or_else(|| format!("not an element: {found}"))
    }

    /// The element `css` matches, waiting for it to appear.
    pub(crate) async fn find(&self, css: &str) -> String {
        let started = Instant::now();
        loop {
            let error = match self.find_now(css).await {
                Ok(id) => return id,
                Err(e) => e,
            };
            if started.elapsed() > PATIENCE {
                let shot = self.screenshot("missing-element").await;
                panic!(
                    "no element `{css}` on {} after {PATIENCE:?}: {error} (screenshot {})",
                    self.url().await,
                    shot.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the element `css` matches (waiting for it), retrying while it
    /// is not yet clickable (e.g. still being laid out).
    pub(crate) async fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            let id = self.find(css).await;
            match self
                .try_command(reqwest::Method::POST, &self.at(&format!("/element/{id}/click")), Some(json!({})))
                .await
            {
                Ok(_) => return,
                Err(e) if started.elapsed() > PATIENCE => panic!("cannot click `{css}`: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Types `text` into the element `css` matches, after clearing it.
    pub(crate) async fn fill(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.command(reqwest::Method::POST, &self.at(&format!("/element/{id}/clear")), Some(json!({}))).await;
        let body = json!({"text": text});
        self.command(reqwest::Method::POST, &self.at(&format!("/element/{id}/value")), Some(body)).await;
    }

    /// The text of the element `css` matches (waiting for it).
    pub(crate) async fn text(&self, css: &str) -> String {
        let id = self.find(css).await;
        let text = self.command(reqwest::Method::GET, &self.at(&format!("/element/{id}/text")), None).await;
        text.as_str().unwrap_or_default().to_owned()
    }

    /// An attribute of the element `css` matches.
    pub(crate) async fn attribute(&self, css: &str, name: &str) -> Option<String> {
        let id = self.find(css).await;
        let value =
            self.command(reqwest::Method::GET, &self.at(&format!("/element/{id}/attribute/{name}")), None).await;
        value.as_str().map(str::to_owned)
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub(crate) async fn script(&self, script: &str, args: Vec<Value>) -> Value {
        let body = json!({"script": script, "args": args});
        self.command(reqwest::Method::POST, &self.at("/execute/sync"), Some(body)).await
    }

    /// Waits until `check` (a script returning a value) returns something
    /// truthy; returns it. `what` names the wait in the failure.
    pub(crate) async fn wait_for(&self, what: &str, check: &str) -> Value {
        let started = Instant::now();
        loop {
            let body = json!({"script": check, "args": []});
            if let Ok(value) = self.try_command(reqwest::Method::POST, &self.at("/execute/sync"), Some(body)).await
                && !matches!(value, Value::Null | Value::Bool(false))
                && value != json!("")
                && value != json!(0)
            {
                return value;
            }
            if started.elapsed() > PATIENCE {
                let shot = self.screenshot("timeout").await;
                panic!("waited {PATIENCE:?} for {what} on {} (screenshot {})", self.url().await, shot.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the text of `css` satisfies `ok`; returns it.
    pub(crate) async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        let mut last = String::new();
        loop {
            if let Ok(id) = self.find_now(css).await
                && let Ok(text) =
                    self.try_command(reqwest::Method::GET, &self.at(&format!("/element/{id}/text")), None).await
            {
                last = text.as_str().unwrap_or_default().to_owned();
                if ok(&last) {
                    return last;
                }
            }
            if started.elapsed() > PATIENCE {
                let shot = self.screenshot("timeout").await;
                panic!("waited {PATIENCE:?} for {what} in `{css}`; last text {last:?} (screenshot {})", shot.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Accepts the page's confirmation dialog (`#confirm-yes`).
    pub(crate) async fn confirm(&self) {
        self.click("#confirm-yes").await;
    }

    /// Saves a PNG of the window as `<name>.png` in the screenshot directory.
    pub(crate) async fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.shots.join(format!("{name}.png"));
        if let Ok(value) = self.try_command(reqwest::Method::GET, &self.at("/screenshot"), None).await
            && let Some(data) = value.as_str()
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data)
        {
            let _ = std::fs::write(&path, bytes);
        }
        path
    }

    /// The console's errors (and CSP violations) since the last call.
    pub(crate) async fn console_errors(&mut self) -> Vec<String> {
        let log = self.command(reqwest::Method::POST, &self.at("/se/log"), Some(json!({"type": "browser"}))).await;
        let mut errors = Vec::new();
        for entry in log.as_array().into_iter().flatten() {
            let line = format!("{} {}", entry["level"].as_str().unwrap_or(""), entry["message"].as_str().unwrap_or(""));
            self.console.push(line.clone());
            let message = entry["message"].as_str().unwrap_or("");
            if entry["level"] == "SEVERE" || message.contains("Content Security Policy") || message.contains("CSP") {
                errors.push(line);
            }
        }
        errors
    }

    /// Every console line seen so far (for failure messages).
    pub(crate) fn console_seen(&self) -> &[String] {
        &self.console
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // End the session (which closes Chromium) with a plain blocking
        // request: Drop cannot await, and killing chromedriver alone would
        // leave its browser running.
        if !self.session.is_empty()
            && let Some(addr) = self.driver_url.strip_prefix("http://")
            && let Ok(mut stream) = TcpStream::connect(addr)
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request =
                format!("DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n", self.session);
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut answer = Vec::new();
                let _ = stream.read_to_end(&mut answer);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
