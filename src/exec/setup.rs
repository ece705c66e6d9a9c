//! Setup checks of a run (spec `exec.md` §2.9, §3.3 setup rule): which engine a new
//! conversation starts on, whether the configuration `initialize` reports can run that
//! engine, and the exit code of a server that failed to start.

use super::exit::{code, Fail};
use super::run::Runner;
use serde_json::{json, Value};

impl Runner {
    /// The engine a new conversation starts on: the configuration's
    /// `engines.default_engine` (the `settings` of `engine/list` without model
    /// discovery), else `"wuu"`.
    pub(super) fn default_engine(&mut self) -> Result<String, Fail> {
        let list = self.rpc("engine/list", json!({"include_models": false}))?;
        Ok(list
            .pointer("/settings/default_engine")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .unwrap_or("wuu")
            .to_owned())
    }

    /// Fails setup when `initialize` reports a configuration that cannot run: a
    /// missing/invalid config, or a problem with the provider that will be used.
    /// `engine` is the engine that runs the turn (`"wuu"` = the built-in one): for an
    /// external engine (Codex) wuu's provider issues, including "no providers
    /// configured", are warnings, since the engine brings its own provider.
    pub(super) fn check_setup(&self, init: &Value, engine: &str) -> Result<(), Fail> {
        let own_provider = engine == "wuu";
        if init.get("status").and_then(Value::as_str) != Some("needs_setup") {
            return Ok(());
        }
        let selected = self.opts.provider.clone().unwrap_or_else(|| {
            init.get("provider")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        });
        let mut fatal = vec![];
        let mut provider_problem = false;
        for i in init
            .get("issues")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let c = i.get("code").and_then(Value::as_str).unwrap_or("");
            let p = i.get("provider").and_then(Value::as_str).unwrap_or("");
            let m = i
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match c {
                "invalid_config" if !own_provider && m.ends_with(crate::config::NO_PROVIDERS) => {
                    eprintln!("warning: {m}")
                }
                "missing_user_config" | "invalid_config" => fatal.push(m),
                "unknown_provider" if own_provider && self.opts.provider.is_none() => {
                    provider_problem = true;
                    fatal.push(m)
                }
                "invalid_provider" | "missing_api_key" if own_provider && p == selected => {
                    provider_problem = true;
                    fatal.push(m)
                }
                _ => eprintln!("warning: {}", crate::secrets::redact(&m.to_string())),
            }
        }
        if fatal.is_empty() {
            return Ok(());
        }
        let exit = if provider_problem {
            code::PROVIDER
        } else {
            code::INVALID_INPUT
        };
        Err(Fail::new(
            exit,
            format!("configuration: {}", fatal.join("; ")),
        ))
    }
}

/// Exit code of a failed in-process server start (spec §3.3 setup rule): 7 when the
/// message looks like a provider/model problem, else 2.
pub(super) fn setup_code(msg: &str) -> i32 {
    let m = msg.to_ascii_lowercase();
    const PROVIDERISH: &[&str] = &[
        "provider",
        "model not found",
        "unsupported model",
        "unknown model",
        "no model",
        "api key",
        "auth token",
        "unsupported wire",
        "unsupported api",
    ];
    if PROVIDERISH.iter().any(|p| m.contains(p)) {
        code::PROVIDER
    } else {
        code::INVALID_INPUT
    }
}
