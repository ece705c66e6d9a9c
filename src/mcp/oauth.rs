//! OAuth 2.1 authorization code flow with PKCE (S256) for remote MCP servers (MCP
//! 2025-06-18 "Authorization"): the endpoints come from the entry's `oauth` settings or
//! are discovered (RFC 9728 protected-resource metadata at the server's origin, then
//! RFC 8414 authorization-server metadata); without a configured `client_id` the client
//! registers itself (RFC 7591) when the server offers registration. Tokens are kept in
//! `$WUU_HOME/mcp-oauth.json` (mode 0600), keyed by server name and URL, and are never
//! part of an answer or a log line (they join the redactor as they are read).

use crate::config::McpServerConfig;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The token file under the wuu home.
pub const TOKEN_FILE: &str = "mcp-oauth.json";
/// Default redirect URI (the client shows the user where to paste the code from).
pub const DEFAULT_REDIRECT: &str = "http://127.0.0.1/callback";
/// How long a started flow waits for `finish`.
const FLOW_TTL_MS: i64 = 15 * 60 * 1000;

/// A stored token.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Token {
    /// The server URL it was issued for.
    pub url: String,
    /// Access token.
    pub access_token: String,
    /// Refresh token.
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// Expiry, ms since the epoch.
    #[serde(default)]
    pub expires_at_ms: Option<i64>,
    /// Granted scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
}

struct Flow {
    name: String,
    state: String,
    verifier: String,
    token_url: String,
    client_id: String,
    redirect: String,
    url: String,
    started_ms: i64,
}

/// Started flows and the token file.
pub struct OAuth {
    file: PathBuf,
    flows: Mutex<Vec<Flow>>,
    lock: Mutex<()>,
}

fn random_token() -> String {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    let mut bytes = a.as_bytes().to_vec();
    bytes.extend_from_slice(b.as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The PKCE S256 challenge of `verifier`.
pub fn challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Percent-encodes `s` for a query or form value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build(),
    )
}

fn read_json(resp: ureq::http::Response<ureq::Body>, what: &str) -> Result<Value, String> {
    let status = resp.status().as_u16();
    let mut text = Vec::new();
    let _ = resp
        .into_body()
        .into_reader()
        .take(1024 * 1024)
        .read_to_end(&mut text);
    if !(200..300).contains(&status) {
        return Err(format!(
            "{what} answered HTTP {status}: {}",
            crate::util::clip(
                &crate::secrets::redact(&String::from_utf8_lossy(&text)),
                300
            )
        ));
    }
    serde_json::from_slice(&text).map_err(|e| format!("{what} sent no JSON: {e}"))
}

fn get_json(url: &str, what: &str) -> Result<Value, String> {
    let resp = agent()
        .get(url)
        .header("accept", "application/json")
        .header("mcp-protocol-version", super::PROTOCOL_VERSION)
        .call()
        .map_err(|e| format!("cannot reach {what}: {e}"))?;
    read_json(resp, what)
}

fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?', '#']).next()?;
    Some(format!("{scheme}://{host}"))
}

/// `(authorization_endpoint, token_endpoint, registration_endpoint)` of a server.
fn endpoints(
    url: &str,
    o: &crate::config::McpOAuthConfig,
) -> Result<(String, String, Option<String>), String> {
    if let (Some(a), Some(t)) = (&o.authorization_url, &o.token_url) {
        return Ok((a.clone(), t.clone(), None));
    }
    let base = origin(url).ok_or_else(|| format!("{url:?} is not an http(s) URL"))?;
    let issuer = get_json(
        &format!("{base}/.well-known/oauth-protected-resource"),
        "the protected-resource metadata",
    )
    .ok()
    .and_then(|m| {
        m.get("authorization_servers")?
            .as_array()?
            .first()?
            .as_str()
            .map(str::to_owned)
    })
    .unwrap_or(base);
    let issuer = issuer.trim_end_matches('/');
    let meta = get_json(
        &format!("{issuer}/.well-known/oauth-authorization-server"),
        "the authorization server metadata",
    )?;
    let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok((
        o.authorization_url
            .clone()
            .or_else(|| s("authorization_endpoint"))
            .ok_or("the authorization server names no authorization_endpoint")?,
        o.token_url
            .clone()
            .or_else(|| s("token_endpoint"))
            .ok_or("the authorization server names no token_endpoint")?,
        s("registration_endpoint"),
    ))
}

impl OAuth {
    /// The flows of a host whose wuu home is `home`.
    pub fn new(home: &Path) -> OAuth {
        OAuth {
            file: home.join(TOKEN_FILE),
            flows: Mutex::new(vec![]),
            lock: Mutex::new(()),
        }
    }

    fn load(&self) -> BTreeMap<String, Token> {
        let map: BTreeMap<String, Token> = std::fs::read(&self.file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        for t in map.values() {
            crate::secrets::add(&t.access_token);
            if let Some(r) = &t.refresh_token {
                crate::secrets::add(r);
            }
        }
        map
    }

    fn save(&self, map: &BTreeMap<String, Token>) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let _ = std::fs::create_dir_all(dir);
        let tmp = dir.join(format!(".{TOKEN_FILE}.{}", uuid::Uuid::new_v4().simple()));
        let body = serde_json::to_vec_pretty(map).unwrap_or_default();
        let write = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&body).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, &self.file));
        write.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot store the token in {}: {e}", self.file.display())
        })
    }

    /// The stored token of `name` for `url` (a token of another URL is not used).
    pub fn token(&self, name: &str, url: &str) -> Option<Token> {
        let _g = self.lock.lock();
        self.load().remove(name).filter(|t| t.url == url)
    }

    /// Forgets the token of `name`; whether there was one.
    pub fn remove(&self, name: &str) -> Result<bool, String> {
        let _g = self.lock.lock();
        let mut map = self.load();
        let had = map.remove(name).is_some();
        if had {
            self.save(&map)?;
        }
        Ok(had)
    }

    /// Starts a flow: `(authorization_url, state, scopes)`.
    pub fn start(
        &self,
        name: &str,
        entry: &McpServerConfig,
    ) -> Result<(String, String, Vec<String>), String> {
        let url = entry
            .url
            .clone()
            .ok_or("this server is not a remote (HTTP) server; it has no authorization")?;
        let o = entry.oauth.clone().unwrap_or_default();
        let (authz, token_url, registration) = endpoints(&url, &o)?;
        let redirect = o
            .redirect_uri
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIRECT.to_owned());
        let scopes = o.scopes.clone().unwrap_or_default();
        let client_id = match (o.client_id.clone(), registration) {
            (Some(id), _) => id,
            (None, Some(reg)) => {
                let body = serde_json::json!({
                    "client_name": "wuu",
                    "redirect_uris": [redirect],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "none",
                });
                let resp = agent()
                    .post(&reg)
                    .header("content-type", "application/json")
                    .send(body.to_string().as_bytes())
                    .map_err(|e| format!("cannot reach the registration endpoint: {e}"))?;
                read_json(resp, "the registration endpoint")?
                    .get("client_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or("the registration endpoint gave no client_id")?
            }
            (None, None) => {
                return Err(
                    "no client id: set mcp_servers.<name>.oauth.client_id (the server offers no dynamic registration)"
                        .into(),
                )
            }
        };
        let verifier = random_token() + &random_token();
        let state = random_token();
        let mut q = format!(
            "response_type=code&client_id={}&redirect_uri={}&code_challenge={}&code_challenge_method=S256&state={}&resource={}",
            enc(&client_id),
            enc(&redirect),
            challenge(&verifier),
            enc(&state),
            enc(&url)
        );
        if !scopes.is_empty() {
            q.push_str(&format!("&scope={}", enc(&scopes.join(" "))));
        }
        let sep = if authz.contains('?') { '&' } else { '?' };
        let now = crate::util::now_ms();
        let mut flows = self.flows.lock();
        flows.retain(|f| now - f.started_ms < FLOW_TTL_MS && f.name != name);
        flows.push(Flow {
            name: name.to_owned(),
            state: state.clone(),
            verifier,
            token_url,
            client_id,
            redirect,
            url,
            started_ms: now,
        });
        Ok((format!("{authz}{sep}{q}"), state, scopes))
    }

    /// Finishes the flow `state` of `name` with the redirected `code`: exchanges it for
    /// a token and stores it.
    pub fn finish(&self, name: &str, state: &str, code: &str) -> Result<Token, String> {
        let flow = {
            let mut flows = self.flows.lock();
            let now = crate::util::now_ms();
            flows.retain(|f| now - f.started_ms < FLOW_TTL_MS);
            let i = flows
                .iter()
                .position(|f| f.name == name && f.state == state)
                .ok_or("no authorization of this server is waiting with that state: start again with mcp/auth/start")?;
            flows.remove(i)
        };
        let form = format!(
            "grant_type=authorization_code&code={}&redirect_uri={}&client_id={}&code_verifier={}&resource={}",
            enc(code),
            enc(&flow.redirect),
            enc(&flow.client_id),
            enc(&flow.verifier),
            enc(&flow.url)
        );
        let resp = agent()
            .post(&flow.token_url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .send(form.as_bytes())
            .map_err(|e| format!("cannot reach the token endpoint: {e}"))?;
        let v = read_json(resp, "the token endpoint")?;
        let access = v
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or("the token endpoint gave no access_token")?;
        crate::secrets::add(access);
        let refresh = v
            .get("refresh_token")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(r) = &refresh {
            crate::secrets::add(r);
        }
        let token = Token {
            url: flow.url,
            access_token: access.to_owned(),
            refresh_token: refresh,
            expires_at_ms: v
                .get("expires_in")
                .and_then(Value::as_i64)
                .map(|s| crate::util::now_ms() + s * 1000),
            scopes: v
                .get("scope")
                .and_then(Value::as_str)
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
        };
        let _g = self.lock.lock();
        let mut map = self.load();
        map.insert(name.to_owned(), token.clone());
        self.save(&map)?;
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_is_base64url_sha256() {
        // Computed independently: base64url(sha256(verifier)) without padding.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mJ0kzPwG_9_pHX7fVb0zxyoAH1kNQ"),
            "vbPKTbH7RGNGUwmLowK_clqgfpYeWZ48dT6mA-K3F-w"
        );
        assert_eq!(enc("a b/c"), "a%20b%2Fc");
    }
}
