//! The live configuration (spec `app-server.md` §3.4, `config/changed`, `config/error`):
//! puts a reloaded configuration in force for every conversation of the host, watches
//! the configuration files for hand edits (once per heartbeat tick), and edits the user
//! config file for the settings panels. A running turn keeps the settings it started
//! with; the next one uses the new ones.

use super::Host;
use crate::config::edit::{edit_file, EditError, WRITE_LOCK};
use crate::config::LoadedConfig;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use wuu_protocol::ErrorCode;

/// A refusal: the code and the message.
pub type Refusal = (ErrorCode, String);

/// An `invalid_params` refusal with message `m`.
pub fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

/// The live configuration of one host.
pub struct LiveConfig {
    /// Hand-edit detection of the configuration files.
    pub watcher: crate::config::watch::Watcher,
    /// Discovered skills (rescanned when their files change).
    pub skills: super::skills::Catalog,
    /// SHA-256 of the last rejected content per file (`config/error` is sent once per
    /// distinct rejected document).
    rejected: Mutex<HashMap<PathBuf, [u8; 32]>>,
}

impl LiveConfig {
    /// State for a server started with `loaded` over `workdir`.
    pub fn new(loaded: &LoadedConfig, workdir: &std::path::Path, explicit: bool) -> LiveConfig {
        LiveConfig {
            watcher: crate::config::watch::Watcher::new(loaded.watched_paths(workdir, explicit)),
            skills: super::skills::Catalog::default(),
            rejected: Mutex::new(HashMap::new()),
        }
    }
}

/// Puts `new` in force: swaps the configuration snapshot, drops provider instances
/// whose connection changed (they are rebuilt on next use; running turns keep the
/// instance they started with) and refreshes the catalog entries of configured
/// providers. Call with [`crate::config::edit::WRITE_LOCK`] held.
pub fn apply_loaded(shared: &Host, new: LoadedConfig) -> Arc<LoadedConfig> {
    let old = shared.config();
    let new = Arc::new(new);
    *shared.config.write() = new.clone();
    shared.providers.retain_unchanged(&old, &new);
    {
        let fresh = crate::provider::catalog::embedded_catalog(&new);
        let old_ids: Vec<String> = old
            .config
            .providers
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        let mut catalog = shared.model_catalog.lock();
        // Entries of providers that are no longer configured (and not embedded) go.
        catalog.retain(|c| fresh.iter().any(|f| f.id == c.id) || !old_ids.contains(&c.id));
        for entry in fresh {
            let configured = new
                .config
                .providers
                .as_ref()
                .is_some_and(|p| p.contains_key(&entry.id));
            match catalog.iter_mut().find(|c| c.id == entry.id) {
                Some(slot) if configured => *slot = entry,
                Some(_) => {}
                None => catalog.push(entry),
            }
        }
    }
    new
}

/// Reloads the configuration from disk (same sources and `--provider`/`--model`
/// overrides as at start).
pub fn reload(shared: &Host) -> LoadedConfig {
    shared.opts.load_config()
}

/// One tick of the configuration watcher (called by the lease-heartbeat thread every
/// [`crate::config::watch::TICK`]). A changed file that does not validate is reported
/// with `config/error {message, path, reason}` (once per distinct content) and the
/// configuration in force stays; otherwise the configuration is reloaded and announced
/// with `config/changed`.
pub fn config_tick(shared: &Host) {
    let _guard = crate::config::edit::WRITE_LOCK.lock();
    let changed = shared.live.watcher.poll();
    if changed.is_empty() {
        return;
    }
    for path in &changed {
        if shared.opts.ignore_user_config && *path == shared.config().config_path {
            continue;
        }
        // A removed user config is treated like an invalid one: the configuration in
        // force stays (a missing optional project layer is a legitimate change).
        let removed = *path == shared.config().config_path
            && matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        // Project layers are read beneath the workspace (never through a link out).
        let beneath =
            (*path != shared.config().config_path).then_some(shared.opts.workdir.as_path());
        let mcp_file = *path == shared.opts.workdir.join(crate::config::mcp::PROJECT_FILE);
        let verdict = if removed {
            Err("the file was removed".to_owned())
        } else if mcp_file {
            crate::config::mcp::read_project(&shared.opts.workdir).map(drop)
        } else {
            crate::config::read_layer(path, beneath).map(drop)
        };
        if let Err(reason) = verdict {
            let digest = crate::config::layer_bytes(path, beneath)
                .ok()
                .flatten()
                .map(|b| {
                    use sha2::Digest;
                    sha2::Sha256::digest(&b).into()
                })
                .unwrap_or([0; 32]);
            let mut rejected = shared.live.rejected.lock();
            if rejected.get(path) == Some(&digest) {
                return;
            }
            rejected.insert(path.clone(), digest);
            drop(rejected);
            let shown = path.display().to_string();
            let reason = reason
                .strip_prefix(&format!("{shown}: "))
                .unwrap_or(&reason)
                .to_owned();
            log::warn!("config edit rejected: {shown}: {reason}");
            let _ = shared.outbox.notify(&wuu_protocol::ConfigError {
                message: format!("{shown}: {reason} (the previous configuration stays in force)"),
                path: shown,
                reason,
            });
            return;
        }
    }
    shared.live.rejected.lock().clear();
    let new = reload(shared);
    let cfg = apply_loaded(shared, new);
    shared.live.skills.invalidate();
    log::info!(
        "configuration reloaded after a hand edit of {}",
        changed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let agent = cfg.agent();
    let _ = shared.outbox.notify(&wuu_protocol::ConfigChanged {
        provider: cfg.default_provider(),
        model: cfg.default_model(),
        effort: agent.effort.clone(),
        variant: agent.effort.clone(),
        model_aliases: crate::config::views::model_aliases(&cfg),
        providers: crate::provider::catalog::provider_summaries(&cfg),
        advanced_settings: crate::config::views::advanced_settings(&cfg),
        general_settings: crate::config::views::general_settings(&cfg),
        paths: changed.iter().map(|p| p.display().to_string()).collect(),
    });
}

/// Edits the user config file with `change`, reloads, and puts the result in force.
/// Errors: `invalid_params` for an invalid change (naming the field), `error` when the
/// file cannot be edited (not JSON, unwritable) or the server ignores the user config.
pub fn edit_user_config(
    shared: &Host,
    change: impl FnOnce(&mut Map<String, Value>, &LoadedConfig) -> Result<(), Refusal>,
) -> Result<Arc<LoadedConfig>, Refusal> {
    if shared.opts.ignore_user_config && shared.opts.config_file.is_none() {
        return Err((
            ErrorCode::Error,
            "this server ignores the user config (--ignore-user-config): settings cannot be saved"
                .into(),
        ));
    }
    let _guard = WRITE_LOCK.lock();
    let cfg = shared.config();
    let path = cfg.config_path.clone();
    let mut refusal = None;
    let edited = edit_file(&path, |doc| {
        change(doc, &cfg).map_err(|r| {
            let m = r.1.clone();
            refusal = Some(r);
            EditError::Invalid(m)
        })
    });
    match edited {
        Ok(_) => {}
        Err(_) if refusal.is_some() => return Err(refusal.expect("checked")),
        Err(EditError::Invalid(m)) => return Err(invalid(m)),
        Err(EditError::File(m)) => return Err((ErrorCode::Error, m)),
    }
    shared.live.watcher.restamp(&path);
    let new = reload(shared);
    Ok(apply_loaded(shared, new))
}

/// The object at `key` of `doc`, created (or replaced when it is not an object).
pub fn object<'a>(doc: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = doc
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().expect("object")
}
