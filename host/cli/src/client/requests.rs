//! Requests: the server and credentials a verb uses ([`connect`]), and
//! [`Api`], which sends them and turns error answers into [`ApiFailure`].

use super::*;

// Requests ------------------------------------------------------------------------

/// The server the client verbs talk to when none is configured.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// What every request carries.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The bearer token.
    pub token: Option<String>,
    /// With the admin token: the tenant to act for.
    pub tenant: Option<String>,
}

pub(crate) static CREDENTIALS: OnceLock<Credentials> = OnceLock::new();

/// `~/.config/dagr/config.toml`: named connections.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ClientConfig {
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    server: Option<String>,
    token: Option<String>,
    /// With an admin token: the tenant to act for.
    tenant: Option<String>,
}

pub(crate) fn client_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("dagr").join("config.toml"))
}

/// Decides the server and the credentials of this process's requests;
/// returns the server. `server` and `token` are the flags (or their
/// variables), empty or `None` when not given; `admin` says the verb needs
/// the admin token, whose local file differs.
pub fn connect(
    server: &str,
    token: Option<String>,
    profile: &str,
    tenant: Option<String>,
    admin: bool,
) -> anyhow::Result<String> {
    let mut chosen = Profile::default();
    if let Some(path) = client_config_path().filter(|p| p.exists()) {
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut config: ClientConfig =
            toml::from_str(&text).with_context(|| format!("{} is not a valid dagr client config", path.display()))?;
        match config.profiles.remove(profile) {
            Some(p) => chosen = p,
            None if profile != "default" => bail!("there is no profile `{profile}` in {}", path.display()),
            None => {}
        }
    } else if profile != "default" {
        bail!("there is no profile `{profile}`: ~/.config/dagr/config.toml does not exist");
    }
    let server = match (server.is_empty(), chosen.server) {
        (false, _) => server.to_owned(),
        (true, Some(s)) => s,
        (true, None) => DEFAULT_SERVER.to_owned(),
    };
    let local = Path::new("dagr-data").join(if admin { "admin.token" } else { "token" });
    let token = token
        .filter(|t| !t.trim().is_empty())
        .or(chosen.token)
        .or_else(|| std::fs::read_to_string(&local).ok())
        .map(|t| t.trim().to_owned());
    let tenant = tenant.filter(|t| !t.is_empty()).or(chosen.tenant);
    let _ = CREDENTIALS.set(Credentials { token, tenant });
    Ok(server)
}

/// A dagr server's HTTP API.
pub struct Api {
    base: Url,
    http: reqwest::Client,
}

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiFailure(pub ApiError);

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Issues often repeat their location in front of the message.
        let line = |f: &mut fmt::Formatter<'_>, location: Option<&str>, message: &str| match location {
            Some(at) if !at.is_empty() => {
                let message = message.strip_prefix(at).and_then(|m| m.strip_prefix(": ")).unwrap_or(message);
                write!(f, "{message} (at {at})")
            }
            _ => write!(f, "{message}"),
        };
        let error = &self.0;
        line(f, error.location.as_deref(), &error.message)?;
        for detail in error.details.iter().skip(1) {
            write!(f, "\nerror: ")?;
            line(f, Some(&detail.location), &detail.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiFailure {}

impl Api {
    /// A client of `server` with the credentials [`connect`] chose.
    pub fn new(server: &str) -> anyhow::Result<Api> {
        Api::with_credentials(server, CREDENTIALS.get().cloned().unwrap_or_default())
    }

    pub fn with_credentials(server: &str, credentials: Credentials) -> anyhow::Result<Api> {
        let base =
            Url::parse(server).with_context(|| format!("`{server}` is not a server URL like http://127.0.0.1:8080"))?;
        if base.cannot_be_a_base() {
            bail!("`{server}` is not a server URL like http://127.0.0.1:8080");
        }
        let mut headers = HeaderMap::new();
        if let Some(token) = &credentials.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| anyhow::anyhow!("the token has characters a token cannot have"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(tenant) = &credentials.tenant {
            let value = HeaderValue::from_str(tenant).with_context(|| format!("`{tenant}` is not a tenant name"))?;
            headers.insert(dagr_protocol::tenancy::TENANT_HEADER, value);
        }
        Ok(Api { base, http: reqwest::Client::builder().default_headers(headers).build()? })
    }

    /// The URL of a path made of these segments (each one escaped).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    pub fn get(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::GET, self.url(segments))
    }

    pub fn post(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::POST, self.url(segments))
    }

    pub fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.http.request(method, self.url(segments))
    }

    pub fn delete(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::DELETE, self.url(segments))
    }

    /// Sends a request; any answer but 2xx becomes an error.
    pub async fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow::anyhow!(
                    "the dagr server is not reachable at {} (start one with `dagr serve`, or point --server / DAGR_SERVER at one)",
                    self.base
                )
            } else {
                anyhow::anyhow!("request to {} failed: {e}", self.base)
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.bytes().await.unwrap_or_default();
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(mut error) => {
                if status == StatusCode::UNAUTHORIZED {
                    error.message.push_str(
                        " (give the CLI a token with --token, DAGR_TOKEN or a profile in ~/.config/dagr/config.toml)",
                    );
                }
                Err(ApiFailure(error).into())
            }
            Err(_) => bail!("the server answered {status}: {}", String::from_utf8_lossy(&body).trim()),
        }
    }

    /// Sends a request and decodes its JSON answer.
    pub async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> anyhow::Result<T> {
        let response = self.send(request).await?;
        let body = response.bytes().await?;
        serde_json::from_slice(&body).with_context(|| {
            format!("unexpected answer from the server: {}", String::from_utf8_lossy(&body[..body.len().min(300)]))
        })
    }
}

/// `KEY=VALUE` pairs as a JSON object; a VALUE that parses as JSON is taken
/// as JSON, anything else as a string.
pub fn parse_params(pairs: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut params = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--param `{pair}` must be KEY=VALUE");
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        params.insert(key.into(), value);
    }
    Ok(params)
}
