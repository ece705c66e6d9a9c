//! Settings panels: `config/advanced/update`, `config/general/update`,
//! `config/provider/remove`, and the summaries `initialize`/`config/read` report.
//!
//! Every change is written to the user config file (`$WUU_HOME/config.json`, or the
//! `--config` file) through [`crate::config::edit::edit_file`] (validated with the load
//! rules, replaced atomically), then the configuration is reloaded and put in force at
//! once: the next `config/read` or `initialize` shows it, and turns started afterwards
//! use it (a running turn keeps the settings it started with). A project layer that sets
//! the same field still wins, as at load time; the result shows the effective value.

use crate::config::views::{advanced_settings, general_settings, model_aliases};
use crate::config::{AliasConfig, LoadedConfig};
use crate::outbound::Responder;
use crate::session::live_config::{edit_user_config, invalid, object, Refusal};
use crate::session::Host;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use wuu_protocol::*;

/// A refusal: the code and the message.
fn set_or_clear(o: &mut Map<String, Value>, key: &str, v: Option<Value>) {
    match v {
        Some(v) => {
            o.insert(key.to_owned(), v);
        }
        None => {
            o.remove(key);
        }
    }
}

fn clean_alias(name: &str, a: &ModelAlias, cfg: &LoadedConfig) -> Result<AliasConfig, Refusal> {
    let provider = a.provider.trim();
    let model = a.model.trim();
    if provider.is_empty() || model.is_empty() {
        return Err(invalid(format!("{name}: provider and model are required")));
    }
    if cfg.provider(provider).is_none() {
        return Err(invalid(format!(
            "{name}.provider: {provider:?} is not configured"
        )));
    }
    let opt = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(AliasConfig {
        provider: provider.to_owned(),
        model: model.to_owned(),
        effort: opt(&a.effort),
        variant: opt(&a.variant),
    })
}

/// `config/advanced/update`.
pub fn advanced_update(shared: &Arc<Host>, p: ConfigAdvancedUpdateParams, reply: Responder) {
    match try_advanced_update(shared, p) {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

fn try_advanced_update(
    shared: &Host,
    p: ConfigAdvancedUpdateParams,
) -> Result<ConfigAdvancedUpdateResult, Refusal> {
    if let Some(n) = p.max_steps {
        if !(1..=10_000).contains(&n) {
            return Err(invalid(format!("max_steps: {n} is not in 1 ..= 10000")));
        }
    }
    if let Some(t) = p.temperature {
        if !t.is_finite() || !(0.0..=2.0).contains(&t) {
            return Err(invalid(format!("temperature: {t} is not in 0 ..= 2")));
        }
    }
    if let Some(x) = p.compact_threshold_pct {
        if !x.is_finite() || !(0.0..=1.0).contains(&x) {
            return Err(invalid(format!(
                "compact_threshold_pct: {x} is not a fraction in 0 ..= 1 (0 clears it)"
            )));
        }
    }
    let cfg = shared.config();
    let aliases = match &p.model_aliases {
        None => None,
        Some(m) => {
            let mut out = Map::new();
            for (name, a) in m {
                let key = name.trim();
                if key.is_empty() {
                    return Err(invalid("model_aliases: an alias name is empty"));
                }
                let clean = clean_alias(&format!("model_aliases.{key}"), a, &cfg)?;
                out.insert(key.to_owned(), serde_json::to_value(clean).expect("alias"));
            }
            Some(out)
        }
    };
    let verification = match &p.verification_model {
        None => None,
        Some(a) if a.model.trim().is_empty() => Some(None),
        Some(a) => Some(Some(clean_alias("verification_model", a, &cfg)?)),
    };
    let nothing = p == ConfigAdvancedUpdateParams::default();
    let cfg = if nothing {
        cfg
    } else {
        edit_user_config(shared, |doc, _| {
            let agent = object(doc, "agent");
            if let Some(n) = p.max_steps {
                agent.insert("max_steps".into(), json!(n));
            }
            let pos = |v: Option<u64>| v.filter(|v| *v > 0).map(|v| json!(v));
            if let Some(v) = p.max_context_tokens {
                set_or_clear(agent, "max_context_tokens", pos(Some(v)));
            }
            if let Some(t) = p.temperature {
                set_or_clear(agent, "temperature", (t > 0.0).then(|| json!(t)));
            }
            if let Some(x) = p.compact_threshold_pct {
                set_or_clear(agent, "compact_threshold_pct", (x > 0.0).then(|| json!(x)));
            }
            if let Some(v) = p.compact_keep_recent_tokens {
                set_or_clear(agent, "compact_keep_recent_tokens", pos(Some(v)));
            }
            if let Some(b) = p.disable_auto_compact {
                set_or_clear(
                    agent,
                    "disable_auto_compact",
                    b.then_some(Value::Bool(true)),
                );
            }
            if let Some(v) = p.provider_context_window {
                set_or_clear(agent, "provider_context_window", pos(Some(v)));
            }
            if let Some(a) = aliases {
                set_or_clear(
                    agent,
                    "model_aliases",
                    (!a.is_empty()).then_some(Value::Object(a)),
                );
            }
            if let Some(v) = verification {
                set_or_clear(
                    agent,
                    "verification_model",
                    v.map(|v| serde_json::to_value(v).expect("alias")),
                );
            }
            Ok(())
        })?
    };
    Ok(ConfigAdvancedUpdateResult {
        advanced_settings: advanced_settings(&cfg),
        model_aliases: model_aliases(&cfg),
        providers: crate::provider::catalog::provider_summaries(&cfg),
    })
}

/// `config/general/update`. `mcp_enabled_toggles` are written to the user config
/// (`general.mcp_server_enabled`; approving a project server also records its
/// fingerprint in `general.mcp_project_approvals`); a server turned off is stopped.
pub fn general_update(shared: &Arc<Host>, p: ConfigGeneralUpdateParams, reply: Responder) {
    let toggles = p.mcp_enabled_toggles.clone().unwrap_or_default();
    let current = shared.config();
    let known = crate::config::mcp::entries(&current);
    for name in toggles.keys() {
        if !known.iter().any(|e| &e.name == name) {
            return reply.err(
                ErrorCode::InvalidParams,
                format!(
                    "invalid params: mcp_enabled_toggles: no MCP server is named {name:?} (configured: {})",
                    known.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }
    let result = if p.git_attribution_enabled.is_none() && toggles.is_empty() {
        Ok(current)
    } else {
        edit_user_config(shared, |doc, cfg| {
            let general = object(doc, "general");
            if let Some(b) = p.git_attribution_enabled {
                general.insert("git_attribution_enabled".into(), json!(b));
            }
            if toggles.is_empty() {
                return Ok(());
            }
            let entries = crate::config::mcp::entries(cfg);
            let mut enabled = general
                .get("mcp_server_enabled")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut approvals = general
                .get("mcp_project_approvals")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (name, on) in &toggles {
                let entry = entries.iter().find(|e| &e.name == name);
                let project = entry.filter(|e| e.source == crate::config::mcp::Source::Project);
                match on {
                    Some(b) => {
                        enabled.insert(name.clone(), json!(b));
                    }
                    None => {
                        enabled.remove(name);
                    }
                }
                match (on, project) {
                    (Some(true), Some(e)) => {
                        let fp = crate::config::mcp::fingerprint(&cfg.project_root, &e.config);
                        approvals.insert(name.clone(), json!(fp));
                    }
                    (Some(false) | None, Some(_)) => {
                        approvals.remove(name);
                    }
                    _ => {}
                }
            }
            set_or_clear(
                general,
                "mcp_server_enabled",
                (!enabled.is_empty()).then_some(Value::Object(enabled)),
            );
            set_or_clear(
                general,
                "mcp_project_approvals",
                (!approvals.is_empty()).then_some(Value::Object(approvals)),
            );
            Ok(())
        })
    };
    match result {
        Ok(cfg) => {
            if !toggles.is_empty() {
                shared.mcp.reconcile(&cfg);
            }
            reply.ok(&ConfigGeneralUpdateResult {
                general_settings: general_settings(&cfg),
            })
        }
        Err((c, m)) => reply.err(c, m),
    }
}

/// `config/provider/remove`.
pub fn provider_remove(shared: &Arc<Host>, p: ConfigProviderRemoveParams, reply: Responder) {
    match try_provider_remove(shared, p) {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

fn try_provider_remove(
    shared: &Host,
    p: ConfigProviderRemoveParams,
) -> Result<ConfigProviderRemoveResult, Refusal> {
    let id = p.provider.trim().to_owned();
    if id.is_empty() {
        return Err(invalid("provider is required"));
    }
    let cfg = shared.config();
    let Some(pc) = cfg.provider(&id) else {
        return Err(invalid(format!("provider: {id:?} is not configured")));
    };
    if pc.locked.unwrap_or(false) {
        return Err((
            ErrorCode::Error,
            format!(
                "provider {id:?} is locked (providers.{id}.locked in {}): remove it by editing that file",
                cfg.config_path.display()
            ),
        ));
    }
    let agent = cfg.agent();
    for (name, a) in agent.model_aliases.iter().flatten() {
        if a.provider == id {
            return Err((
                ErrorCode::Error,
                format!("provider {id:?} is used by the model alias {name:?}; change or remove the alias first"),
            ));
        }
    }
    if agent
        .verification_model
        .as_ref()
        .is_some_and(|v| v.provider == id)
    {
        return Err((
            ErrorCode::Error,
            format!("provider {id:?} is the verification model's provider; change it first"),
        ));
    }
    match shared.open_store()
        .and_then(|s| s.running_turn_with_provider(&id))
    {
        Ok(Some(thread)) => {
            return Err((
                ErrorCode::ThreadBusy,
                format!("provider {id:?} is in use by a running turn of thread {thread:?}; remove it when that turn has ended"),
            ))
        }
        Ok(None) => {}
        Err(e) => {
            return Err((
                ErrorCode::InternalError,
                format!("cannot check whether provider {id:?} is in use: {e}"),
            ))
        }
    }
    let remaining: Vec<String> = cfg
        .config
        .providers
        .iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .filter(|k| *k != id)
        .collect();
    if remaining.is_empty() {
        return Err((
            ErrorCode::Error,
            format!(
                "cannot remove {id:?}: it is the last configured provider (add another one first)"
            ),
        ));
    }
    let was_default = cfg.default_provider() == id;
    let fallback = if was_default {
        let fp = match p
            .fallback_provider
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            Some(f) if f == id => {
                return Err(invalid(
                    "fallback_provider: must differ from the provider removed",
                ))
            }
            Some(f) if !remaining.iter().any(|r| r == f) => {
                return Err(invalid(format!(
                    "fallback_provider: {f:?} is not configured"
                )))
            }
            Some(f) => f.to_owned(),
            None => remaining[0].clone(),
        };
        let fm = p
            .fallback_model
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .or_else(|| cfg.provider(&fp).map(|c| c.model.clone()))
            .unwrap_or_default();
        Some(Selection {
            provider: fp,
            model: fm,
        })
    } else {
        None
    };
    let fb = fallback.clone();
    let cfg = edit_user_config(shared, |doc, _| {
        let providers = object(doc, "providers");
        if providers.remove(&id).is_none() {
            return Err((
                ErrorCode::Error,
                format!(
                    "provider {id:?} is not defined in the user config file; it cannot be removed from here"
                ),
            ));
        }
        if let Some(f) = &fb {
            doc.insert("default_provider".into(), json!(f.provider));
            let agent = object(doc, "agent");
            if f.model.is_empty() {
                agent.remove("model");
            } else {
                agent.insert("model".into(), json!(f.model));
            }
        }
        Ok(())
    })?;
    shared.providers.forget(&id);
    let agent = cfg.agent();
    Ok(ConfigProviderRemoveResult {
        removed: id,
        provider: cfg.default_provider(),
        model: cfg.default_model(),
        effort: agent.effort.clone(),
        variant: agent.effort.clone(),
        fallback,
        permissions: Permissions {
            mode: agent
                .permission_mode
                .clone()
                .unwrap_or_else(|| "standard".into()),
        },
        providers: crate::provider::catalog::provider_summaries(&cfg),
        advanced_settings: advanced_settings(&cfg),
    })
}
