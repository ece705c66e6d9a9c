//! `config/model/update` (spec `app-server.md` §3.4, §6 rule 15; each conversation
//! keeps its own model and permission selection):
//!
//! - with `thread_id`: changes that conversation's provider/model/effort/variant/
//!   permission selection only (omitted fields inherit the conversation's values;
//!   `updated_at` is not touched), refused with `thread_busy` while it executes here or
//!   under another process's lease, answered with the new selection and followed by
//!   `thread/updated`. Provider connection fields may not be combined with it.
//! - without `thread_id`: changes the defaults of future conversations (`model`
//!   required) in the user config file (`$WUU_HOME/config.json`, or the `--config`
//!   file), and reloads the configuration. `keep_selection: true` saves only the
//!   provider connection (`provider`, `base_url`, `api_key_env`, `type`,
//!   `create_provider`) without making it the default. Existing conversations keep
//!   their selection.

use super::Session;
use crate::outbound::Responder;
use crate::session::Host;
use crate::tools::PermissionMode;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wuu_protocol::*;

type Refusal = (ErrorCode, String);

fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

fn clean(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// True when the request edits a provider connection.
fn touches_connection(p: &ConfigModelUpdateParams) -> bool {
    clean(&p.base_url).is_some()
        || clean(&p.api_key_env).is_some()
        || p.api_key.is_some()
        || clean(&p.provider_type).is_some()
        || p.create_provider.unwrap_or(false)
        || p.keep_selection.unwrap_or(false)
        || clean(&p.add_model).is_some()
        || clean(&p.remove_model).is_some()
}

fn check_mode(m: &Option<String>) -> Result<Option<String>, Refusal> {
    match clean(m) {
        Some(m) if PermissionMode::parse(&m).is_none() => Err(invalid(format!(
            "permission_mode: {m:?} is not one of standard, read_only, unconfined"
        ))),
        other => Ok(other),
    }
}

fn result_for(
    shared: &Host,
    provider: String,
    model: String,
    effort: String,
    variant: String,
    mode: String,
) -> ConfigModelUpdateResult {
    let cfg = shared.config();
    ConfigModelUpdateResult {
        provider,
        model,
        effort: Some(effort).filter(|e| !e.is_empty()),
        variant: Some(variant).filter(|v| !v.is_empty()),
        max_parallel: cfg.max_parallel(),
        permissions: Permissions { mode },
        providers: crate::provider::catalog::provider_summaries(&cfg),
        advanced_settings: serde_json::to_value(crate::config::views::advanced_settings(&cfg))
            .expect("serialize settings"),
    }
}

impl Session {
    /// `config/model/update` with `thread_id`: this conversation's selection.
    pub fn update_selection(&mut self, p: ConfigModelUpdateParams, reply: Responder) {
        match self.try_update_selection(p) {
            Ok(r) => {
                reply.ok(&r);
                self.notify_updated();
            }
            Err((c, m)) => reply.err(c, m),
        }
    }

    fn try_update_selection(
        &mut self,
        p: ConfigModelUpdateParams,
    ) -> Result<ConfigModelUpdateResult, Refusal> {
        if touches_connection(&p) {
            return Err(invalid(
                "a provider connection change (base_url, api_key_env, api_key, type, create_provider, keep_selection, add_model, remove_model) cannot be combined with thread_id",
            ));
        }
        if self.running.load(Ordering::SeqCst) {
            return Err((
                ErrorCode::ThreadBusy,
                format!(
                    "thread {:?} is running; change its selection when it is idle",
                    self.id
                ),
            ));
        }
        if let Some(store) = self.store.as_ref() {
            if let Ok(Some((owner, _))) = store.lease_of(&self.id) {
                if owner.instance != self.shared.owner.instance && wuu_store::pid_alive(owner.pid) {
                    return Err((
                        ErrorCode::ThreadBusy,
                        format!(
                            "thread {:?} is executing in another wuu process (pid {})",
                            self.id, owner.pid
                        ),
                    ));
                }
            }
        }
        let cfg = self.shared.config();
        let mode = check_mode(&p.permission_mode)?;
        let provider = clean(&p.provider);
        let mut row = self.thread.clone();
        if let Some(pv) = &provider {
            let Some(pc) = cfg.provider(pv) else {
                return Err(invalid(format!("provider: {pv:?} is not configured")));
            };
            if *pv != row.provider && clean(&p.model).is_none() {
                row.model = pc.model.clone();
            }
            row.provider = pv.clone();
        }
        if let Some(m) = clean(&p.model) {
            // A model naming an alias selects its target (`LoadedConfig::alias`).
            match cfg.alias(provider.as_deref(), &m) {
                Some(a) => {
                    if cfg.provider(&a.provider).is_none() {
                        return Err(invalid(format!(
                            "model alias {m:?} names provider {:?}, which is not configured",
                            a.provider
                        )));
                    }
                    row.provider = a.provider;
                    row.model = a.model;
                    if clean(&p.effort).is_none() {
                        if let Some(e) = a.effort.filter(|e| !e.is_empty()) {
                            row.variant = a.variant.filter(|v| !v.is_empty()).unwrap_or(e.clone());
                            row.effort = e;
                        }
                    }
                }
                None => row.model = m,
            }
        }
        if let Some(e) = clean(&p.effort) {
            row.effort = e.clone();
            if clean(&p.variant).is_none() {
                row.variant = e;
            }
        }
        if let Some(v) = clean(&p.variant) {
            row.variant = v;
        }
        if let Some(m) = mode {
            row.permission_mode = m;
        }
        let r2 = row.clone();
        self.persist(|s| s.update_thread(&r2))?;
        self.thread = row;
        let t = &self.thread;
        Ok(result_for(
            &self.shared,
            t.provider.clone(),
            t.model.clone(),
            t.effort.clone(),
            t.variant.clone(),
            t.permission_mode.clone(),
        ))
    }
}

/// `config/model/update` without `thread_id` (answered by the catalog pool): edits the
/// user config file and reloads the configuration.
pub fn update_defaults(shared: &Arc<Host>, p: ConfigModelUpdateParams, reply: Responder) {
    match try_update_defaults(shared, p) {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

fn try_update_defaults(
    shared: &Arc<Host>,
    p: ConfigModelUpdateParams,
) -> Result<ConfigModelUpdateResult, Refusal> {
    refuse_api_key(&p)?;
    let keep = p.keep_selection.unwrap_or(false);
    let mode = check_mode(&p.permission_mode)?;
    let model = clean(&p.model);
    check_keep_selection(&p, keep, mode.is_some(), model.is_some())?;
    let cfg = shared.config();
    let edit = DefaultsEdit {
        provider: clean(&p.provider).unwrap_or_else(|| cfg.default_provider()),
        add_model: clean(&p.add_model),
        remove_model: clean(&p.remove_model),
        p: &p,
        keep,
        mode,
        model,
    };
    edit.check_locked(&cfg)?;
    if let Some(r) = &edit.remove_model {
        if edit.model.as_deref() == Some(r.as_str()) {
            return Err(invalid(format!(
                "remove_model: {r:?} is the model being selected; select another model first"
            )));
        }
    }
    let new = crate::session::live_config::edit_user_config(shared, |doc, _| edit.apply(doc))?;
    drop(new);
    shared.providers.forget(&edit.provider);
    let cfg = shared.config();
    let agent = cfg.agent();
    Ok(result_for(
        shared,
        cfg.default_provider(),
        cfg.default_model(),
        agent.effort.clone().unwrap_or_default(),
        agent.effort.clone().unwrap_or_default(),
        agent
            .permission_mode
            .clone()
            .unwrap_or_else(|| "standard".into()),
    ))
}

/// Refuses any `api_key`: keys are never stored. A plausible key is added to the
/// redactor first so it is masked on every surface from now on.
fn refuse_api_key(p: &ConfigModelUpdateParams) -> Result<(), Refusal> {
    let Some(key) = &p.api_key else {
        return Ok(());
    };
    if key.len() > crate::secrets::MAX_SECRET_LEN {
        return Err(invalid(format!(
            "api_key: longer than {} bytes, so it is not a key; keys are never stored; set api_key_env to the environment variable that holds it",
            crate::secrets::MAX_SECRET_LEN
        )));
    }
    // Never stored, never shown: mask it on every surface from now on.
    crate::secrets::add(key);
    Err(invalid(
        "api_key: keys are never stored; set api_key_env to the environment variable that holds it",
    ))
}

/// `keep_selection` saves a provider connection only (so it needs `provider` and takes
/// no selection fields); without it, `model` is required.
fn check_keep_selection(
    p: &ConfigModelUpdateParams,
    keep: bool,
    has_mode: bool,
    has_model: bool,
) -> Result<(), Refusal> {
    if keep {
        if clean(&p.effort).is_some() || clean(&p.variant).is_some() || has_mode {
            return Err(invalid(
                "keep_selection cannot be combined with effort, variant or permission_mode",
            ));
        }
        if clean(&p.provider).is_none() {
            return Err(invalid("keep_selection requires provider"));
        }
    } else if !has_model {
        return Err(invalid("model is required without thread_id"));
    }
    Ok(())
}

/// A validated defaults update: the request with its cleaned fields, applied to the
/// user config document by [`DefaultsEdit::apply`].
struct DefaultsEdit<'a> {
    p: &'a ConfigModelUpdateParams,
    keep: bool,
    mode: Option<String>,
    model: Option<String>,
    /// The provider edited (the default provider when the request names none).
    provider: String,
    add_model: Option<String>,
    remove_model: Option<String>,
}

impl DefaultsEdit<'_> {
    /// Refuses connection edits of a provider locked in its config file.
    fn check_locked(&self, cfg: &crate::config::LoadedConfig) -> Result<(), Refusal> {
        let (p, provider) = (self.p, &self.provider);
        let Some(pc) = cfg.provider(provider) else {
            return Ok(());
        };
        let edits_connection = clean(&p.base_url).is_some()
            || clean(&p.api_key_env).is_some()
            || clean(&p.provider_type).is_some()
            || self.add_model.is_some()
            || self.remove_model.is_some();
        if pc.locked.unwrap_or(false) && edits_connection {
            return Err((
                ErrorCode::Error,
                format!(
                    "provider {provider:?} is locked (providers.{provider}.locked in {}): edit it in that file",
                    cfg.config_path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Applies the update to the user config document: the provider connection (when
    /// the request edits one), then the defaults (unless `keep_selection`).
    fn apply(&self, doc: &mut Map<String, Value>) -> Result<(), Refusal> {
        let p = self.p;
        let provider = &self.provider;
        let exists = doc.get("providers").and_then(|p| p.get(provider)).is_some();
        let connection = clean(&p.base_url).is_some()
            || clean(&p.api_key_env).is_some()
            || clean(&p.provider_type).is_some()
            || p.create_provider.unwrap_or(false)
            || self.add_model.is_some()
            || self.remove_model.is_some();
        if !exists && !p.create_provider.unwrap_or(false) {
            return Err(invalid(format!(
                "provider: {provider:?} is not configured (send create_provider: true with type and base_url to add it)"
            )));
        }
        if connection {
            let providers = crate::session::live_config::object(doc, "providers");
            let obj = crate::session::live_config::object(providers, provider);
            self.edit_connection(obj, exists)?;
        }
        if !self.keep {
            self.set_defaults(doc);
        }
        Ok(())
    }

    /// Writes the connection fields into the provider's object `obj` (creating the
    /// provider needs `type` and `base_url`), then its model list.
    fn edit_connection(&self, obj: &mut Map<String, Value>, exists: bool) -> Result<(), Refusal> {
        let p = self.p;
        if !exists {
            if clean(&p.provider_type).is_none() {
                return Err(invalid("type is required to create a provider"));
            }
            if clean(&p.base_url).is_none() {
                return Err(invalid("base_url is required to create a provider"));
            }
        }
        if let Some(t) = clean(&p.provider_type) {
            obj.insert("type".into(), json!(t));
        }
        if let Some(u) = clean(&p.base_url) {
            obj.insert("base_url".into(), json!(u));
        }
        if let Some(k) = clean(&p.api_key_env) {
            obj.insert("api_key_env".into(), json!(k));
        }
        if let Some(m) = &self.model {
            if self.keep || !obj.contains_key("model") {
                obj.insert("model".into(), json!(m));
            }
        }
        self.edit_models(obj)
    }

    /// Applies `add_model` / `remove_model` to the provider's `models` list (written
    /// only when it changed). Removing the provider's default model moves the default to
    /// the selected model, or the first remaining one.
    fn edit_models(&self, obj: &mut Map<String, Value>) -> Result<(), Refusal> {
        let provider = &self.provider;
        let default_model = obj.get("model").and_then(Value::as_str).map(str::to_owned);
        let mut models: Vec<String> = obj
            .get("models")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let listed_before = models.clone();
        if let Some(a) = &self.add_model {
            if models.is_empty() {
                // An implicit list is the default model alone: keep it listed.
                models.extend(default_model.clone());
            }
            if !models.contains(a) {
                models.push(a.clone());
            }
        }
        if let Some(r) = &self.remove_model {
            let known = models.contains(r) || default_model.as_deref() == Some(r);
            if !known {
                return Err(invalid(format!(
                    "remove_model: {r:?} is not a model of provider {provider:?}"
                )));
            }
            models.retain(|m| m != r);
            if default_model.as_deref() == Some(r.as_str()) {
                // The provider's default goes with it: the selected model (or the
                // first remaining one) takes its place.
                let next = self.model.clone().or_else(|| models.first().cloned());
                match next {
                    Some(n) => {
                        if !models.contains(&n) && !models.is_empty() {
                            models.push(n.clone());
                        }
                        obj.insert("model".into(), json!(n));
                    }
                    None => {
                        return Err(invalid(format!(
                            "remove_model: {r:?} is the only model of provider {provider:?}"
                        )))
                    }
                }
            }
        }
        if models != listed_before {
            obj.insert("models".into(), json!(models));
        }
        Ok(())
    }

    /// Makes the selection the default of future conversations: `default_provider` and
    /// `agent.{model, effort, permission_mode}`.
    fn set_defaults(&self, doc: &mut Map<String, Value>) {
        let p = self.p;
        doc.insert("default_provider".into(), json!(self.provider));
        let agent = crate::session::live_config::object(doc, "agent");
        if let Some(m) = &self.model {
            agent.insert("model".into(), json!(m));
        }
        if let Some(e) = clean(&p.effort).or_else(|| clean(&p.variant)) {
            agent.insert("effort".into(), json!(e));
        }
        if let Some(m) = &self.mode {
            agent.insert("permission_mode".into(), json!(m));
        }
    }
}
