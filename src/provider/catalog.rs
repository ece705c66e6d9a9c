//! The model catalog: the connectable services shipped with wuu, the context windows of
//! well-known models, the configured providers as clients see them, and the catalog a
//! host keeps (refreshed from the providers on demand). Spec `app-server.md` §3.4
//! (`config/model-catalog/providers`); seed: `catalog_providers`.

use crate::config::{LoadedConfig, ProviderConfig};
use parking_lot::{Mutex, MutexGuard};
use wuu_protocol::{CatalogModel, CatalogProvider, ProviderSummary};

/// A host's model catalog: one entry per provider (embedded or configured), with its
/// models when known.
pub struct ModelCatalog(Mutex<Vec<CatalogProvider>>);

impl ModelCatalog {
    /// A catalog holding `entries` (see [`embedded_catalog`]).
    pub fn new(entries: Vec<CatalogProvider>) -> ModelCatalog {
        ModelCatalog(Mutex::new(entries))
    }

    /// The entries, locked for reading or replacing.
    pub fn lock(&self) -> MutexGuard<'_, Vec<CatalogProvider>> {
        self.0.lock()
    }
}

/// One connectable service shipped with wuu: `(id, name, type, base_url, api_key_env,
/// default_model, models)`.
type EmbeddedService = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

/// Connectable services shipped with wuu.
const EMBEDDED: &[EmbeddedService] = &[
    (
        "openai",
        "OpenAI",
        "openai-responses",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        "gpt-5.1",
        &["gpt-5.1", "gpt-5.1-codex", "gpt-5-mini"],
    ),
    (
        "anthropic",
        "Anthropic",
        "anthropic",
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
        "claude-sonnet-4-5",
        &["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"],
    ),
    (
        "openrouter",
        "OpenRouter",
        "openai-compatible",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
        "openai/gpt-5.1",
        &["openai/gpt-5.1", "anthropic/claude-sonnet-4.5"],
    ),
    (
        "deepseek",
        "DeepSeek",
        "openai-compatible",
        "https://api.deepseek.com/v1",
        "DEEPSEEK_API_KEY",
        "deepseek-chat",
        &["deepseek-chat", "deepseek-reasoner"],
    ),
    (
        "ollama",
        "Ollama (local)",
        "openai-compatible",
        "http://localhost:11434/v1",
        "",
        "qwen3-coder",
        &["qwen3-coder", "llama3.1"],
    ),
    (
        "llama-cpp",
        "llama.cpp server (local)",
        "openai-compatible",
        "http://localhost:8080/v1",
        "",
        "default",
        &["default"],
    ),
    (
        "vllm",
        "vLLM (local)",
        "openai-compatible",
        "http://localhost:8000/v1",
        "",
        "default",
        &["default"],
    ),
];

/// Published context windows (tokens) of the models wuu ships in its catalog.
const KNOWN_WINDOWS: &[(&str, u64)] = &[
    ("gpt-5.1", 400_000),
    ("gpt-5.1-codex", 400_000),
    ("gpt-5-mini", 400_000),
    ("openai/gpt-5.1", 400_000),
    ("claude-sonnet-4-5", 200_000),
    ("claude-opus-4-1", 200_000),
    ("claude-haiku-4-5", 200_000),
    ("anthropic/claude-sonnet-4.5", 200_000),
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
];

/// A catalog entry for model `id`, with its context window when it is a known model.
pub fn catalog_model(id: &str) -> CatalogModel {
    CatalogModel {
        id: id.to_owned(),
        name: None,
        tool_call: true,
        context_window: KNOWN_WINDOWS
            .iter()
            .find(|(m, _)| *m == id)
            .map(|(_, w)| *w),
    }
}

/// The context window (tokens) of `model` at `provider`, as `turn/usage`
/// `context_window_tokens` reports it (the clients' context meter): the override
/// `agent.provider_context_window`, else the provider's `context_window` in the config,
/// else the model catalog's entry; then capped by the budget `agent.max_context_tokens`
/// (which alone gives the window when nothing else knows it). `0` in either agent
/// setting means unset. `None` when no source knows a window.
pub fn context_window(
    cfg: &LoadedConfig,
    catalog: &ModelCatalog,
    provider: &str,
    model: &str,
) -> Option<u64> {
    let agent = cfg.agent();
    let window = agent
        .provider_context_window
        .filter(|w| *w > 0)
        .or_else(|| cfg.provider(provider).and_then(|p| p.context_window))
        .or_else(|| model_window(catalog, provider, model));
    match agent.max_context_tokens.filter(|b| *b > 0) {
        Some(budget) => Some(window.map_or(budget, |w| w.min(budget))),
        None => window,
    }
}

/// The model catalog's context window of `model` (the provider's own entry first).
fn model_window(catalog: &ModelCatalog, provider: &str, model: &str) -> Option<u64> {
    let catalog = catalog.lock();
    catalog
        .iter()
        .filter(|c| c.id == provider)
        .chain(catalog.iter())
        .filter_map(|c| c.models.as_ref())
        .flatten()
        .find(|m| m.id == model)
        .and_then(|m| m.context_window)
}

/// The catalog at start: the embedded services plus every configured provider that is
/// not one of them.
pub fn embedded_catalog(cfg: &LoadedConfig) -> Vec<CatalogProvider> {
    let mut out: Vec<CatalogProvider> = EMBEDDED
        .iter()
        .map(|(id, name, ty, url, env, model, models)| CatalogProvider {
            id: (*id).into(),
            name: (*name).into(),
            provider_type: (*ty).into(),
            base_url: (*url).into(),
            model_count: models.len() as u32,
            default_model: (*model).into(),
            api_key_env: (!env.is_empty()).then(|| (*env).to_owned()),
            models: Some(models.iter().map(|m| catalog_model(m)).collect()),
            refresh_error: None,
            refreshed_at: None,
        })
        .collect();
    for (id, p) in cfg.config.providers.clone().unwrap_or_default() {
        let models: Vec<String> = p.models.clone().unwrap_or_else(|| vec![p.model.clone()]);
        let entry = CatalogProvider {
            id: id.clone(),
            name: id.clone(),
            provider_type: p.provider_type.clone(),
            base_url: p.base_url.clone(),
            model_count: models.len() as u32,
            default_model: p.model.clone(),
            api_key_env: p.api_key_env.clone(),
            models: Some(models.iter().map(|m| catalog_model(m)).collect()),
            refresh_error: None,
            refreshed_at: None,
        };
        match out.iter_mut().find(|c| c.id == id) {
            Some(slot) => *slot = entry,
            None => out.push(entry),
        }
    }
    out
}

pub fn without_models(c: &[CatalogProvider]) -> Vec<CatalogProvider> {
    // Field by field: `..p.clone()` would clone every provider's model list only to
    // drop it, which is most of what `initialize` costs with the embedded catalog.
    c.iter()
        .map(|p| CatalogProvider {
            id: p.id.clone(),
            name: p.name.clone(),
            provider_type: p.provider_type.clone(),
            base_url: p.base_url.clone(),
            model_count: p.model_count,
            default_model: p.default_model.clone(),
            api_key_env: p.api_key_env.clone(),
            models: None,
            refresh_error: p.refresh_error.clone(),
            refreshed_at: p.refreshed_at.clone(),
        })
        .collect()
}

/// The configured providers as clients see them (never the key itself).
pub fn provider_summaries(cfg: &LoadedConfig) -> Vec<ProviderSummary> {
    cfg.config
        .providers
        .iter()
        .flatten()
        .map(|(name, p)| provider_summary(name, p))
        .collect()
}

/// Provider `name` configured as `p`, as clients see it: its type, default model, base
/// URL, whether its key's environment variable is set (never the key itself), whether
/// its connection is locked, and its models.
pub fn provider_summary(name: &str, p: &ProviderConfig) -> ProviderSummary {
    ProviderSummary {
        name: name.to_owned(),
        provider_type: p.provider_type.clone(),
        model: p.model.clone(),
        base_url: (!p.base_url.is_empty()).then(|| p.base_url.clone()),
        api_key_configured: p
            .api_key_env
            .as_ref()
            .is_some_and(|e| std::env::var_os(e).is_some_and(|v| !v.is_empty())),
        connection_locked: p.locked.unwrap_or(false),
        models: p.models.clone().unwrap_or_default(),
    }
}
