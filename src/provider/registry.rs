//! The provider instances of one host, by provider id: each is built from its
//! configuration on first use and kept, so a replay provider keeps its place in its
//! cassette and a connection pool is shared by every conversation on that provider.
//! When the configuration changes, the instances whose connection changed are dropped
//! (running turns keep the instance they started with). Spec `providers.md` §1.

use super::Provider;
use crate::config::LoadedConfig;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Provider instances by provider id.
#[derive(Default)]
pub struct Providers(Mutex<HashMap<String, Arc<dyn Provider>>>);

impl Providers {
    /// The instance of provider `id` under `cfg`, built on first use. Errors: no provider
    /// is configured (`id` empty), `id` is not configured, or the instance cannot be
    /// built (the builder's message).
    pub fn get(&self, cfg: &LoadedConfig, id: &str) -> Result<Arc<dyn Provider>, String> {
        if id.is_empty() {
            return Err("no provider is configured: add one to the user config".into());
        }
        if let Some(p) = self.0.lock().get(id) {
            return Ok(p.clone());
        }
        let pc = cfg
            .provider(id)
            .ok_or_else(|| format!("provider {id:?} is not configured"))?;
        let p = super::build(id, pc, &cfg.config_dir)?;
        Ok(self.0.lock().entry(id.to_owned()).or_insert(p).clone())
    }

    /// Forgets the instance of provider `id` (it is rebuilt on next use).
    pub fn forget(&self, id: &str) {
        self.0.lock().remove(id);
    }

    /// Keeps only the instances whose provider is configured alike in `old` and `new`.
    pub fn retain_unchanged(&self, old: &LoadedConfig, new: &LoadedConfig) {
        let old_p = old.config.providers.clone().unwrap_or_default();
        let new_p = new.config.providers.clone().unwrap_or_default();
        self.0
            .lock()
            .retain(|id, _| old_p.get(id) == new_p.get(id) && new_p.contains_key(id));
    }
}
