//! Inline handlers: `initialize`, `config/read`, `config/model-catalog/providers`, and the
//! model-catalog refresh (run on the catalog pool). Spec `app-server.md` §2.1, §3.4;
//! seed: `catalog_providers`.

use crate::outbound::Responder;
use crate::provider::catalog::{catalog_model, provider_summaries, without_models};
use crate::session::Host;
use serde_json::json;
use std::sync::Arc;
use wuu_protocol::*;

/// The `initialize` result for the current configuration.
pub fn initialize_result(shared: &Host) -> InitializeResult {
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
        max_parallel: cfg.max_parallel(),
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
        advanced_settings: serde_json::to_value(crate::config::views::advanced_settings(&cfg))
            .expect("serialize settings"),
        general_settings: crate::config::views::general_settings(&cfg),
        model_aliases: crate::config::views::model_aliases(&cfg),
        features: json!({
            "browser": browser,
            "safe_mode": shared.opts.safe_mode,
            "user_question": crate::session::questions::enabled(shared),
        }),
    }
}

/// Handles a request routed `inline`.
pub fn handle_inline(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
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
pub fn refresh_catalog(shared: &Arc<Host>, reply: Responder) {
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
