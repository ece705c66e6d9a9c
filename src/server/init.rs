//! Inline handlers: `initialize`, `config/read`, `config/model-catalog/providers`, and the
//! model-catalog refresh (run on the catalog pool). Spec `app-server.md` §2.1, §3.4;
//! seed: `catalog_providers`.

use super::{Responder, Shared};
use crate::config::LoadedConfig;
use serde_json::json;
use std::sync::Arc;
use wuu_protocol::*;

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

fn catalog_model(id: &str) -> CatalogModel {
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
pub fn context_window(shared: &Shared, provider: &str, model: &str) -> Option<u64> {
    let cfg = shared.config();
    let agent = cfg.agent();
    let window = agent
        .provider_context_window
        .filter(|w| *w > 0)
        .or_else(|| cfg.provider(provider).and_then(|p| p.context_window))
        .or_else(|| model_window(shared, provider, model));
    match agent.max_context_tokens.filter(|b| *b > 0) {
        Some(budget) => Some(window.map_or(budget, |w| w.min(budget))),
        None => window,
    }
}

/// The model catalog's context window of `model` (the provider's own entry first).
fn model_window(shared: &Shared, provider: &str, model: &str) -> Option<u64> {
    let catalog = shared.model_catalog.lock();
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

fn without_models(c: &[CatalogProvider]) -> Vec<CatalogProvider> {
    // Field by field: `..p.clone()` cloned every provider's model list only to drop it
    // (most of `initialize`'s ~80 µs of CPU with the embedded catalog; issue 15).
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
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, p)| ProviderSummary {
            name,
            provider_type: p.provider_type.clone(),
            model: p.model.clone(),
            base_url: (!p.base_url.is_empty()).then(|| p.base_url.clone()),
            api_key_configured: p
                .api_key_env
                .as_ref()
                .is_some_and(|e| std::env::var_os(e).is_some_and(|v| !v.is_empty())),
            connection_locked: p.locked.unwrap_or(false),
            models: p.models.clone().unwrap_or_default(),
        })
        .collect()
}

/// The `initialize` result for the current configuration.
pub fn initialize_result(shared: &Shared) -> InitializeResult {
    let cfg = shared.config();
    let agent = cfg.agent();
    let issues: Vec<RuntimeIssue> = cfg
        .issues
        .iter()
        .map(|i| RuntimeIssue {
            code: i.code.to_owned(),
            provider: i.provider.clone(),
            message: i.message.clone(),
        })
        .collect();
    let providers = provider_summaries(&cfg);
    let mut issues = issues;
    // What is known about the store now (the quick check at start, or the lease
    // thread's open if it already failed); `initialize` never waits for the open.
    if let Some(e) = shared.store_error.lock().clone() {
        issues.push(RuntimeIssue {
            code: "store_unavailable".into(),
            provider: None,
            message: e,
        });
    }
    if let Some(why) = crate::tools::sandbox::unavailable_issue() {
        // Informational: unconfined conversations still work.
        issues.push(RuntimeIssue {
            code: "sandbox_unavailable".into(),
            provider: None,
            message: why,
        });
    }
    let caps = shared.capabilities.read().clone();
    let reverse: Vec<String> = caps.reverse_rpc.map(|r| r.methods).unwrap_or_default();
    let browser = crate::session::reverse::BROWSER_METHODS
        .iter()
        .all(|m| reverse.iter().any(|r| r == m));
    InitializeResult {
        status: if cfg.ready() && shared.store_error.lock().is_none() {
            "ready"
        } else {
            "needs_setup"
        }
        .into(),
        issues,
        protocol_version: PROTOCOL_VERSION.into(),
        core: CoreIdentity {
            version: env!("CARGO_PKG_VERSION").into(),
            commit: option_env!("WUU_BUILD_COMMIT").map(str::to_owned),
            profile: Some(
                if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                }
                .into(),
            ),
        },
        provider: cfg.default_provider(),
        model: cfg.default_model(),
        effort: agent.effort.clone(),
        max_parallel: agent.max_parallel.unwrap_or(4),
        runtime_host: match &shared.opts.instance_id {
            Some(i) => json!({"kind": shared.opts.host, "instance_id": i}),
            None => json!({"kind": shared.opts.host}),
        },
        workspace_root: shared.opts.workdir.to_string_lossy().into_owned(),
        workspace: WorkspaceSummary {
            root: shared.opts.workdir.to_string_lossy().into_owned(),
            config_layers: cfg
                .layers
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect(),
        },
        permissions: Permissions {
            mode: agent
                .permission_mode
                .clone()
                .unwrap_or_else(|| "standard".into()),
        },
        providers,
        catalog_providers: without_models(&shared.model_catalog.lock()),
        advanced_settings: serde_json::to_value(crate::panels::settings::advanced_settings(&cfg))
            .expect("serialize settings"),
        general_settings: crate::panels::settings::general_settings(&cfg),
        model_aliases: crate::panels::settings::model_aliases(&cfg),
        features: json!({
            "browser": browser,
            "safe_mode": shared.opts.safe_mode,
            "user_question": crate::session::questions::enabled(shared),
        }),
    }
}

/// Handles a request routed `inline`.
pub fn handle_inline(shared: &Arc<Shared>, req: ClientRequest, reply: Responder) {
    match req {
        ClientRequest::Initialize(p) => {
            if let Some(v) = p.protocol_version.as_deref() {
                if v != PROTOCOL_VERSION {
                    return reply.err(
                        ErrorCode::InvalidParams,
                        format!(
                            "unsupported protocol version {v:?} (server uses {PROTOCOL_VERSION:?})"
                        ),
                    );
                }
            }
            if let Some(c) = p.capabilities {
                shared
                    .outbox
                    .set_defer_content(c.deferred_notification_content == Some(true));
                *shared.capabilities.write() = c;
            }
            reply.ok(&initialize_result(shared))
        }
        ClientRequest::ConfigRead(_) => {
            let cfg = shared.config();
            reply.ok(&ConfigReadResult {
                base: initialize_result(shared),
                config_path: cfg.config_path.to_string_lossy().into_owned(),
                session_dir: shared.opts.home.to_string_lossy().into_owned(),
            })
        }
        ClientRequest::ModelCatalogProviders(p) => {
            let catalog = shared.model_catalog.lock().clone();
            match p
                .provider
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
            {
                None => reply.ok(&ModelCatalogProvidersResult {
                    providers: without_models(&catalog),
                }),
                Some(id) => match catalog.into_iter().find(|c| c.id == id) {
                    Some(c) => reply.ok(&ModelCatalogProvidersResult { providers: vec![c] }),
                    None => reply.err(
                        ErrorCode::InvalidParams,
                        format!("invalid params: provider: unknown catalog provider {id:?}"),
                    ),
                },
            }
        }
        q @ (ClientRequest::UserQuestionList(_)
        | ClientRequest::UserQuestionRespond(_)
        | ClientRequest::UserQuestionCancel(_)
        | ClientRequest::UserQuestionHold(_)) => {
            crate::session::questions::handle(shared, q, reply)
        }
        other => crate::panels::handle(shared, other, reply),
    }
}

/// `config/model-catalog/refresh`: asks each configured provider's `GET …/models`.
/// A failed provider keeps its previous options and says why in `refresh_error`.
pub fn refresh_catalog(shared: &Arc<Shared>, reply: Responder) {
    let cfg = shared.config();
    let providers = cfg.config.providers.clone().unwrap_or_default();
    let mut asked = 0u32;
    let mut results = vec![];
    for (id, p) in &providers {
        asked += 1;
        let outcome = crate::provider::list_models(id, p, &cfg.config_dir);
        results.push((id.clone(), outcome));
    }
    let mut catalog = shared.model_catalog.lock();
    for (id, outcome) in results {
        let Some(entry) = catalog.iter_mut().find(|c| c.id == id) else {
            continue;
        };
        match outcome {
            Ok(models) if !models.is_empty() => {
                entry.model_count = models.len() as u32;
                entry.models = Some(models.iter().map(|m| catalog_model(m)).collect());
                entry.refresh_error = None;
                entry.refreshed_at = Some(crate::util::rfc3339(crate::util::now_ms()));
            }
            Ok(_) => entry.refresh_error = Some("the provider listed no models".into()),
            Err(e) => entry.refresh_error = Some(e),
        }
    }
    let model_count = catalog.iter().map(|c| c.model_count).sum();
    let list = catalog.clone();
    drop(catalog);
    reply.ok(&ModelCatalogRefreshResult {
        provider_count: asked,
        model_count,
        providers: list.clone(),
        catalog_providers: list,
    })
}
