//! xAI (Grok subscription) sign-in: `auth/xai/login/start|poll|cancel` (wire types in
//! `wuu_protocol::extras`, spec `app-server.md` §3.5), an OAuth 2.0 device authorization
//! (RFC 8628) against the endpoints the Go server uses, overridable for tests and
//! private deployments by `WUU_XAI_DEVICE_CODE_URL`, `WUU_XAI_TOKEN_URL` and
//! `WUU_XAI_OAUTH_CLIENT_ID`.
//!
//! `start` asks the device-code endpoint (form `client_id`, `scope`, `referrer`) and
//! keeps the device code in memory under a new `login_id`; the client shows the user
//! code and polls. Each `poll` makes one token request (`grant_type` device_code):
//! `authorization_pending` / `slow_down` → `pending` (slow_down adds 5 s to the
//! interval), `access_denied` → `denied`, `expired_token` or the code's lifetime over →
//! `expired`, a token → `success`. The tokens are written to
//! `$WUU_HOME/credentials/xai-subscription.json` (mode 0600, replaced atomically) and
//! added to the redactor, so they never appear in an answer, a log line or the store.

use crate::outbound::Responder;
use crate::session::Host;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wuu_protocol::*;

const DEFAULT_DEVICE_CODE_URL: &str = "https://auth.x.ai/oauth2/device/code";
const DEFAULT_TOKEN_URL: &str = "https://auth.x.ai/oauth2/token";
const DEFAULT_CLIENT_ID: &str = "b1a00492-073a-47ea-816f-4c329264a828";
const SCOPE: &str = "openid profile email offline_access grok-cli:access api:access";
const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";
/// Most logins kept at once (older ones are dropped first).
const MAX_LOGINS: usize = 16;
/// The HTTP timeout of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Largest response body read.
const MAX_BODY: u64 = 1024 * 1024;
/// File name of the stored credentials under `$WUU_HOME/credentials/`.
pub const CREDENTIALS_FILE: &str = "xai-subscription.json";

struct Login {
    device_code: String,
    interval: Duration,
    expires_at: Instant,
    started: Instant,
}

fn logins() -> &'static Mutex<HashMap<String, Login>> {
    static L: OnceLock<Mutex<HashMap<String, Login>>> = OnceLock::new();
    L.get_or_init(Default::default)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// POSTs a form; returns `(status, body as JSON object or {})`.
fn post_form(url: &str, fields: &[(&str, &str)]) -> Result<(u16, Value), String> {
    let mut b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .max_idle_connections(0)
        .user_agent(format!("wuu/{}", env!("CARGO_PKG_VERSION")));
    let loopback = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split(['/', ':']).next())
        .is_some_and(|h| h == "127.0.0.1" || h == "localhost" || h == "[::1]");
    if loopback {
        b = b.proxy(None);
    }
    let agent = ureq::Agent::new_with_config(b.build());
    let mut resp = agent
        .post(url)
        .header("accept", "application/json")
        .send_form(fields.iter().copied())
        .map_err(|e| format!("xAI sign-in request failed: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_vec()
        .unwrap_or_default();
    let v = serde_json::from_slice::<Value>(&body)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    Ok((status, v))
}

fn text(v: &Value, k: &str) -> Option<String> {
    v.get(k)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn seconds(v: &Value, k: &str, default: u64) -> u64 {
    v.get(k)
        .and_then(Value::as_f64)
        .filter(|n| n.is_finite() && *n > 0.0)
        .map_or(default, |n| n.min(86_400.0) as u64)
}

fn https(uri: &str) -> Result<String, String> {
    if uri.starts_with("https://") && uri.len() > "https://".len() && uri.len() < 2048 {
        Ok(uri.to_owned())
    } else {
        Err("untrusted verification URI in the xAI sign-in response (not https)".into())
    }
}

fn oauth_failure(action: &str, status: u16, body: &Value) -> String {
    let detail: Vec<String> = ["error", "error_description"]
        .iter()
        .filter_map(|k| text(body, k))
        .map(|s| crate::util::clip(&s, 300).to_owned())
        .collect();
    if detail.is_empty() {
        format!("xAI sign-in {action} failed (HTTP {status})")
    } else {
        format!(
            "xAI sign-in {action} failed (HTTP {status}): {}",
            detail.join(": ")
        )
    }
}

/// `auth/xai/login/start`.
pub fn start(_shared: &Arc<Host>, reply: Responder) {
    let client_id = env_or("WUU_XAI_OAUTH_CLIENT_ID", DEFAULT_CLIENT_ID);
    let url = env_or("WUU_XAI_DEVICE_CODE_URL", DEFAULT_DEVICE_CODE_URL);
    let r = (|| {
        let (status, body) = post_form(
            &url,
            &[
                ("client_id", client_id.as_str()),
                ("scope", SCOPE),
                ("referrer", "wuu"),
            ],
        )?;
        if !(200..300).contains(&status) {
            return Err(oauth_failure("device authorization", status, &body));
        }
        let (Some(device_code), Some(user_code)) =
            (text(&body, "device_code"), text(&body, "user_code"))
        else {
            return Err("the xAI device code response is missing device_code / user_code".into());
        };
        let verification_uri = https(
            &text(&body, "verification_uri")
                .ok_or("the xAI device code response is missing verification_uri".to_owned())?,
        )?;
        let complete = match text(&body, "verification_uri_complete") {
            Some(u) => Some(https(&u)?),
            None => None,
        };
        let interval = seconds(&body, "interval", 5).max(1);
        let expires_in = seconds(&body, "expires_in", 300);
        let login_id = crate::util::new_id("xai_login");
        let now = Instant::now();
        let mut l = logins().lock();
        while l.len() >= MAX_LOGINS {
            let Some(oldest) = l
                .iter()
                .min_by_key(|(_, v)| v.started)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            l.remove(&oldest);
        }
        l.insert(
            login_id.clone(),
            Login {
                device_code,
                interval: Duration::from_secs(interval),
                expires_at: now + Duration::from_secs(expires_in),
                started: now,
            },
        );
        Ok(XaiLoginStartResult {
            login_id,
            user_code,
            verification_uri,
            verification_uri_complete: complete,
            expires_in,
            interval_ms: interval * 1000,
        })
    })();
    match r {
        Ok(v) => reply.ok(&v),
        Err(m) => reply.err(ErrorCode::Error, m),
    }
}

fn settled(status: &str, error: String) -> XaiLoginPollResult {
    XaiLoginPollResult {
        status: status.into(),
        error: Some(error),
        ..Default::default()
    }
}

/// `auth/xai/login/poll`: one token request for the login.
pub fn poll(shared: &Arc<Host>, p: XaiLoginParams, reply: Responder) {
    let id = p.login_id.trim().to_owned();
    if id.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: login_id is required",
        );
    }
    let (device_code, interval, expired) = match logins().lock().get(&id) {
        Some(l) => (
            l.device_code.clone(),
            l.interval,
            Instant::now() >= l.expires_at,
        ),
        None => {
            return reply.err(
                ErrorCode::Error,
                format!(
                    "unknown xAI login {:?} (cancelled, finished or from another server)",
                    crate::util::clip(&id, 100)
                ),
            )
        }
    };
    if expired {
        logins().lock().remove(&id);
        return reply.ok(&settled(
            "expired",
            "the xAI device code expired; sign in again".into(),
        ));
    }
    let client_id = env_or("WUU_XAI_OAUTH_CLIENT_ID", DEFAULT_CLIENT_ID);
    let url = env_or("WUU_XAI_TOKEN_URL", DEFAULT_TOKEN_URL);
    let r = post_form(
        &url,
        &[
            ("grant_type", DEVICE_GRANT),
            ("client_id", client_id.as_str()),
            ("device_code", device_code.as_str()),
        ],
    );
    let result = match r {
        Err(e) => XaiLoginPollResult {
            status: "pending".into(),
            interval_ms: Some(interval.as_millis() as u64),
            error: Some(e),
            providers: None,
        },
        Ok((status, body)) if (200..300).contains(&status) => {
            match store_tokens(&shared.opts.home, &body) {
                Ok(()) => {
                    logins().lock().remove(&id);
                    XaiLoginPollResult {
                        status: "success".into(),
                        providers: Some(crate::provider::catalog::provider_summaries(
                            &shared.config(),
                        )),
                        ..Default::default()
                    }
                }
                Err(e) => {
                    logins().lock().remove(&id);
                    settled("failed", e)
                }
            }
        }
        Ok((status, body)) => match text(&body, "error").as_deref() {
            Some("authorization_pending") => XaiLoginPollResult {
                status: "pending".into(),
                interval_ms: Some(interval.as_millis() as u64),
                ..Default::default()
            },
            Some("slow_down") => {
                let next = interval + Duration::from_secs(5);
                if let Some(l) = logins().lock().get_mut(&id) {
                    l.interval = next;
                }
                XaiLoginPollResult {
                    status: "pending".into(),
                    interval_ms: Some(next.as_millis() as u64),
                    ..Default::default()
                }
            }
            Some("access_denied" | "authorization_denied") => {
                logins().lock().remove(&id);
                settled("denied", "xAI authorization was denied".into())
            }
            Some("expired_token") => {
                logins().lock().remove(&id);
                settled(
                    "expired",
                    "the xAI device code expired; sign in again".into(),
                )
            }
            _ => {
                logins().lock().remove(&id);
                settled("failed", oauth_failure("token polling", status, &body))
            }
        },
    };
    reply.ok(&result)
}

/// `auth/xai/login/cancel`: forgets the login (`{ok: true}` even when unknown).
pub fn cancel(_shared: &Arc<Host>, p: XaiLoginParams, reply: Responder) {
    logins().lock().remove(p.login_id.trim());
    reply.ok(&OkResult { ok: true })
}

/// Where the xAI subscription credentials live.
pub fn credentials_path(home: &Path) -> PathBuf {
    home.join("credentials").join(CREDENTIALS_FILE)
}

/// Writes the token response's tokens (0600, atomically) and adds them to the redactor.
fn store_tokens(home: &Path, body: &Value) -> Result<(), String> {
    let Some(access) = text(body, "access_token") else {
        return Err("the xAI token response is missing access_token".into());
    };
    let Some(refresh) = text(body, "refresh_token") else {
        return Err("the xAI token response is missing refresh_token".into());
    };
    crate::secrets::add(&access);
    crate::secrets::add(&refresh);
    let expires_in = seconds(body, "expires_in", 3600) as i64;
    let now = crate::util::now_ms();
    let doc = json!({
        "type": "oauth",
        "auth_mode": "xai",
        "access_token": access,
        "refresh_token": refresh,
        "expires_at": crate::util::rfc3339(now + expires_in * 1000),
        "last_refresh": crate::util::rfc3339(now),
    });
    let path = credentials_path(home);
    let dir = path
        .parent()
        .ok_or_else(|| "no credentials directory".to_owned())?;
    let fail =
        |e: std::io::Error| format!("cannot store the xAI credentials in {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let tmp = dir.join(format!(".{CREDENTIALS_FILE}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(doc.to_string().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}
