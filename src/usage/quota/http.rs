//! The HTTP read every quota adapter uses: one `GET` returning JSON, classified into the
//! safe error categories (spec `engines.md` §3.2): transport failure or timeout →
//! `network`; 401/403 → `sign_in`; 429 → `rate_limited`; any other non-2xx, a body over
//! 1 MiB or a body that is not JSON → `invalid_response`. Upstream bodies are never
//! passed on (only logged at debug level, cut).

use super::QuotaError;
use crate::provider::http::{host_of, is_loopback};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Largest body read.
pub const MAX_BODY_BYTES: u64 = 1024 * 1024;
/// Default per-request timeout (always capped by the shared deadline).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// Host of `url`, lower-cased (`""` when there is none).
pub fn host(url: &str) -> String {
    host_of(url).to_ascii_lowercase()
}

/// `GET url` with `headers`, answered before `deadline` (and within
/// [`REQUEST_TIMEOUT`]). Returns the JSON body of a 2xx answer.
pub fn get_json(
    url: &str,
    headers: &[(&str, String)],
    deadline: Instant,
) -> Result<Value, QuotaError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(QuotaError::Network);
    }
    let timeout = left.min(REQUEST_TIMEOUT);
    let mut b = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .max_idle_connections(0)
        .user_agent(format!("wuu/{}", env!("CARGO_PKG_VERSION")));
    if is_loopback(host_of(url)) {
        b = b.proxy(None);
    }
    let agent = ureq::Agent::new_with_config(b.build());
    let mut rb = agent.get(url).header("accept", "application/json");
    for (k, v) in headers {
        rb = rb.header(*k, v.as_str());
    }
    let mut resp = rb.call().map_err(|e| {
        log::debug!("quota read {url}: {e}");
        QuotaError::Network
    })?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec();
    match status {
        200..=299 => {}
        401 | 403 => return Err(QuotaError::SignIn),
        429 => return Err(QuotaError::RateLimited),
        _ => {
            log::debug!("quota read {url}: HTTP {status}");
            return Err(QuotaError::InvalidResponse);
        }
    }
    let body = body.map_err(|e| {
        log::debug!("quota read {url}: body: {e}");
        match e {
            ureq::Error::Timeout(_) | ureq::Error::Io(_) => QuotaError::Network,
            _ => QuotaError::InvalidResponse,
        }
    })?;
    serde_json::from_slice(&body).map_err(|_| QuotaError::InvalidResponse)
}
