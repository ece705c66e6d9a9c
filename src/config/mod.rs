//! Configuration: `$WUU_HOME/config.json` plus project layers (`.wuu.json` or
//! `wuu.json`, `.wuu/settings.json`, `.wuu/settings.local.json`). Objects merge
//! recursively, arrays and scalars replace; unknown fields are rejected with their path;
//! user-owned fields are stripped from project layers and reported.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One provider connection (providers.md §6.7, reduced to what this host supports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai-responses` | `openai-compatible` | `anthropic` | `replay`.
    #[serde(rename = "type")]
    pub provider_type: String,
    /// Base URL, e.g. `https://api.openai.com/v1` (include `/v1` when the service needs
    /// it; for Anthropic the host root, `/v1/messages` is appended).
    #[serde(default)]
    pub base_url: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Default model.
    #[serde(default)]
    pub model: String,
    /// Known models.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// `replay` only: the cassette file (relative paths resolve against the config file's
    /// directory).
    #[serde(default)]
    pub cassette: Option<String>,
    /// Extra HTTP headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Socket idle timeout of a stream, ms (default 300 000).
    #[serde(default)]
    pub stream_idle_timeout_ms: Option<u64>,
    /// Connect / first-header timeout, ms (default 60 000).
    #[serde(default)]
    pub stream_connect_timeout_ms: Option<u64>,
    /// Retries after the first attempt (default 4).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Cap of one backoff wait, ms (default 30 000). Tests set it low.
    #[serde(default)]
    pub max_backoff_ms: Option<u64>,
    /// Initial backoff, ms (default 1 000).
    #[serde(default)]
    pub initial_backoff_ms: Option<u64>,
}
