//! The configuration as clients see it: the advanced and general settings and the model
//! aliases in force, as `initialize`, `config/read` and `config/changed` report them
//! (spec `app-server.md` §3.4).

use super::{AliasConfig, LoadedConfig};
use std::collections::BTreeMap;
use wuu_protocol::{AdvancedSettings, GeneralSettings, ModelAlias};

/// The advanced settings in force.
pub fn advanced_settings(cfg: &LoadedConfig) -> AdvancedSettings {
    let a = cfg.agent();
    AdvancedSettings {
        max_steps: a.max_steps.unwrap_or(200),
        max_context_tokens: a.max_context_tokens.unwrap_or(0),
        temperature: a.temperature.unwrap_or(0.0),
        compact_threshold_pct: a.compact_threshold_pct,
        compact_keep_recent_tokens: a.compact_keep_recent_tokens,
        disable_auto_compact: a.disable_auto_compact.unwrap_or(false),
        provider_context_window: a.provider_context_window,
        verification_model: a.verification_model.as_ref().map(alias_wire),
        bash_timeout_ms: a.bash_timeout_ms.unwrap_or(120_000),
        auto_title: a.auto_title.unwrap_or(true),
    }
}

/// The general settings in force.
pub fn general_settings(cfg: &LoadedConfig) -> GeneralSettings {
    GeneralSettings {
        git_attribution_enabled: cfg.general().git_attribution_enabled.unwrap_or(true),
        mcp_server_enabled: super::mcp::entries(cfg)
            .into_iter()
            .map(|e| (e.name, e.gate == super::mcp::Gate::Enabled))
            .collect(),
    }
}

pub fn alias_wire(a: &AliasConfig) -> ModelAlias {
    ModelAlias {
        provider: a.provider.clone(),
        model: a.model.clone(),
        effort: a.effort.clone(),
        variant: a.variant.clone(),
    }
}

/// The model aliases in force.
pub fn model_aliases(cfg: &LoadedConfig) -> BTreeMap<String, ModelAlias> {
    cfg.agent()
        .model_aliases
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| (k.clone(), alias_wire(v)))
        .collect()
}
