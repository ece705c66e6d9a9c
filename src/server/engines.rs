//! `engine/list` and `engine/update` (spec `engines.md` §2; seed "刷新外部引擎",
//! default-engine rules).
//!
//! `engine/list` answers from its own helper thread (native model discovery can take
//! seconds), so it never holds a catalog worker; responses may therefore overtake
//! others (clients correlate by id). `engine/update` writes the user config's
//! `engines` object atomically, re-validates the whole config, and answers the list
//! shape without discovery (every `models_status` is `deferred`).
//!
//! Quota hook: `include_quota: true` is handed to [`attach_quota`], the single place
//! where account quota, `subscription_providers`, `local_usage` and `latest_request`
//! are added (the usage collectors plug in there and nowhere else).

use crate::engine::catalog::{self, Env};
use crate::engine::{acp, codex};
use crate::outbound::Responder;
use crate::session::Host;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use wuu_protocol::*;

/// Adds quota and activity to an `engine/list` answer (`include_quota: true`;
/// `include_activity` false skips the history scan): `subscription_providers` and each
/// entry's `quota` / `local_usage` / `latest_request`, built by
/// [`crate::usage::engine_list_usage`] (all quota sources under one 8 s deadline; the
/// Codex entry's rate limits through its shared host's `account/rateLimits/read`).
/// Errors: the store cannot be opened.
pub fn attach_quota(
    shared: &Arc<Host>,
    usage: &crate::usage::UsageState,
    p: &EngineListParams,
    result: &mut EngineListResult,
) -> Result<(), String> {
    let mut store = shared
        .open_store()
        .map_err(|e| format!("store unavailable: {e}"))?;
    let root = p
        .cwd
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| shared.opts.workdir.clone());
    let codex_reader: Option<crate::usage::quota::SharedReader> = result
        .engines
        .iter()
        .find(|e| e.id == "codex" && e.enabled && e.binary_ok)
        .and_then(|e| e.binary_path.clone())
        .map(|binary| {
            let binary = PathBuf::from(binary);
            let settings = codex::ChildSettings::from_config(&shared.config(), &shared.opts.home);
            let reader = move |timeout: std::time::Duration| -> Result<Value, String> {
                let host = codex::shared_host(&binary, &root, &settings)?;
                host.peer
                    .request("account/rateLimits/read", json!({}), timeout)
                    .map_err(|e| e.to_string())
            };
            Arc::new(reader) as crate::usage::quota::SharedReader
        });
    let entries: Vec<crate::usage::EngineEntry<'_>> = result
        .engines
        .iter()
        .map(|e| crate::usage::EngineEntry {
            id: &e.id,
            available: e.enabled && e.binary_ok,
        })
        .collect();
    let usage = crate::usage::engine_list_usage(
        &shared.config(),
        usage,
        &mut store,
        &entries,
        p.include_activity != Some(false),
        codex_reader,
    );
    for e in &mut result.engines {
        if let Some(u) = usage.engines.get(&e.id) {
            e.quota = u.quota.as_ref().map(to_json);
            e.local_usage = u.local_usage.as_ref().map(to_json);
            e.latest_request = u.latest_request.as_ref().map(to_json);
        }
    }
    result.subscription_providers =
        Some(usage.subscription_providers.iter().map(to_json).collect());
    Ok(())
}

/// A protocol value as JSON (plain data: serialization cannot fail).
fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The persisted `engines` object of the effective config (absent without one).
fn settings(shared: &Host) -> Option<Value> {
    shared
        .config()
        .config
        .engines
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok())
        .map(strip_nulls)
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Builds the list. `discover`: run native model discovery (`false` → `deferred`).
pub fn build(
    shared: &Host,
    cwd: &std::path::Path,
    discover: bool,
    refresh: bool,
) -> EngineListResult {
    if refresh {
        catalog::rescan();
    }
    let cfg = shared.config();
    let engines_cfg = cfg.config.engines.as_ref();
    let env = Env::current();
    let mut out = vec![catalog::builtin_info()];
    // Probes run concurrently (one thread per probed engine).
    let mut probes = vec![];
    for e in catalog::CATALOGUE {
        let (mut info, detection) = catalog::describe(e, engines_cfg, &env);
        if e.id == crate::engine::claude::ID && info.enabled {
            // Claude reports its CLI version (`claude --version`, cached per binary).
            if let Some(p) = &detection.path {
                let settings = codex::ChildSettings::from_config(&cfg, &shared.opts.home);
                if let Some(v) = crate::engine::claude::version(p, &settings) {
                    info.version = Some(v);
                }
            }
        }
        let probed = discover && info.enabled && (e.id == codex::ID || acp::is_acp(e.id));
        if !discover {
            info.models_status = Some("deferred".into());
        } else if !probed && info.enabled {
            info.models_status = Some("unsupported".into());
        }
        let idx = out.len();
        out.push(info);
        if probed {
            if let Some(binary) = detection.path {
                let (cwd, env) = (cwd.to_path_buf(), env.clone());
                let settings = codex::ChildSettings::from_config(&cfg, &shared.opts.home);
                let id = e.id;
                probes.push((
                    idx,
                    std::thread::spawn(move || {
                        let key = catalog::cache_key(id, &binary, &cwd, &env);
                        catalog::discover(
                            id,
                            key,
                            refresh,
                            || {
                                if id == codex::ID {
                                    codex::discover_models(&binary, &cwd, &settings).map(Some)
                                } else {
                                    acp::discover_models(id, &binary, &cwd, &settings)
                                }
                            },
                            || catalog::cache_key(id, &binary, &cwd, &env),
                        )
                    }),
                ));
            }
        }
    }
    for (idx, h) in probes {
        let (status, models, error) = h.join().unwrap_or_else(|_| {
            (
                "error".into(),
                vec![],
                Some("model discovery failed".into()),
            )
        });
        let info = &mut out[idx];
        info.models = Some(models);
        info.models_error = error.filter(|_| status != "unsupported");
        info.models_status = Some(status);
    }
    EngineListResult {
        engines: out,
        settings: settings(shared),
        subscription_providers: None,
    }
}

/// `engine/list`.
pub fn list(shared: &Arc<super::Shared>, p: EngineListParams, reply: Responder) {
    let cwd = match p.cwd.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        None => shared.host.opts.workdir.clone(),
        Some(c) => {
            let path = PathBuf::from(c);
            if !path.is_absolute() {
                return reply.err(
                    ErrorCode::InvalidParams,
                    format!(
                        "invalid params: cwd: {:?} is not an absolute path",
                        crate::util::clip(c, 200)
                    ),
                );
            }
            if !path.is_dir() {
                return reply.err(
                    ErrorCode::InvalidParams,
                    format!(
                        "invalid params: cwd: {:?} is not a directory",
                        crate::util::clip(c, 200)
                    ),
                );
            }
            path
        }
    };
    let shared = shared.clone();
    let spawned = crate::util::spawn("wuu-engine-list".into(), move || {
        let discover = p.include_models != Some(false);
        let mut result = build(&shared.host, &cwd, discover, p.refresh_models == Some(true));
        if p.include_quota == Some(true) {
            if let Err(e) = attach_quota(&shared.host, &shared.usage, &p, &mut result) {
                return reply.err(ErrorCode::Error, e);
            }
        }
        reply.ok(&result);
    });
    if let Err(e) = spawned {
        log::error!("cannot start engine/list: {e}");
    }
}

/// `engine/update`: changes `engines` in the user config (atomic write, whole config
/// re-validated), keeps `default_engine` when that engine is disabled, answers the
/// list shape with every `models_status` `deferred`.
pub fn update(shared: &Arc<Host>, p: EngineUpdateParams, reply: Responder) {
    if let Some(d) = p.default_engine.as_deref().map(str::trim) {
        if !d.is_empty() && !catalog::known(d) {
            return reply.err(
                ErrorCode::InvalidParams,
                format!(
                    "invalid params: default_engine: unknown engine {:?}",
                    crate::util::clip(d, 100)
                ),
            );
        }
    }
    for (id, u) in p.entries() {
        if let Some(b) = u.binary_path.as_deref() {
            let b = b.trim();
            if !b.is_empty() && !b.contains('/') && b.contains(char::is_whitespace) {
                return reply.err(
                    ErrorCode::InvalidParams,
                    format!(
                        "invalid params: {id}.binary_path must name a program, not a command line"
                    ),
                );
            }
            if !b.is_empty() {
                let path = std::path::Path::new(b);
                let shown = crate::util::clip(b, 200);
                if !path.is_absolute() {
                    return reply.err(
                        ErrorCode::InvalidParams,
                        format!(
                            "invalid params: {id}.binary_path must be an absolute path to an executable file, not {shown:?}"
                        ),
                    );
                }
                if !catalog::is_executable(path) {
                    return reply.err(
                        ErrorCode::InvalidParams,
                        format!(
                            "invalid params: {id}.binary_path {shown:?} is not an executable file"
                        ),
                    );
                }
            }
        }
    }
    let cfg = shared.config();
    let path = cfg.config_path.clone();
    let written = edit_user_config(shared, &path, |doc| {
        let root = doc
            .as_object_mut()
            .ok_or("the config file is not a JSON object")?;
        let engines = root
            .entry("engines")
            .or_insert_with(|| Value::Object(Map::new()));
        if !engines.is_object() {
            *engines = Value::Object(Map::new());
        }
        let engines = engines.as_object_mut().ok_or("engines is not an object")?;
        if let Some(d) = p.default_engine.as_deref().map(str::trim) {
            if d.is_empty() || d == crate::engine::BUILTIN {
                engines.remove("default_engine");
            } else {
                engines.insert("default_engine".into(), json!(d));
            }
        }
        for (id, u) in p.entries() {
            let entry = engines
                .entry(id.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let entry = entry
                .as_object_mut()
                .ok_or("engine entry is not an object")?;
            if let Some(en) = u.enabled {
                entry.insert("enabled".into(), json!(en));
            }
            if let Some(b) = u.binary_path.as_deref().map(str::trim) {
                if b.is_empty() {
                    entry.remove("binary_path");
                } else {
                    entry.insert("binary_path".into(), json!(b));
                }
            }
            if entry.is_empty() {
                engines.remove(id);
            }
        }
        if engines.is_empty() {
            root.remove("engines");
        }
        Ok(())
    });
    if let Err((code, m)) = written {
        return reply.err(code, m);
    }
    let result = build(shared, &shared.opts.workdir.clone(), false, true);
    reply.ok(&result);
}

/// Edits the user config file through the shared settings editor (one process-wide
/// lock, strict validation naming the field, atomic replace, reload, watcher restamp).
fn edit_user_config(
    shared: &Host,
    _path: &std::path::Path,
    f: impl FnOnce(&mut Value) -> Result<(), &'static str>,
) -> Result<(), (ErrorCode, String)> {
    crate::session::live_config::edit_user_config(shared, |doc, _| {
        let mut v = Value::Object(std::mem::take(doc));
        let r = f(&mut v);
        if let Value::Object(o) = v {
            *doc = o;
        }
        r.map_err(|m| (ErrorCode::Error, m.to_owned()))
    })
    .map(|_| ())
}

/// `config/codex/models`: the Codex engine's model catalogue (the same discovery and
/// cache as `engine/list`). `provider` must be empty or `codex`. Errors: the Codex engine
/// is disabled or not installed, or its discovery failed (the message says which).
pub fn codex_models(shared: &Arc<super::Shared>, p: CodexModelsParams, reply: Responder) {
    let asked = p.provider.as_deref().map(str::trim).unwrap_or("");
    if !asked.is_empty() && asked != codex::ID {
        return reply.err(
            ErrorCode::InvalidParams,
            format!(
                "invalid params: provider: {:?} is not the Codex engine (send \"\" or \"codex\")",
                crate::util::clip(asked, 200)
            ),
        );
    }
    let host = &shared.host;
    let list = build(host, &host.opts.workdir, true, false);
    let Some(info) = list.engines.into_iter().find(|e| e.id == codex::ID) else {
        return reply.err(
            ErrorCode::Error,
            "the Codex engine is not known to this build",
        );
    };
    if !info.enabled {
        return reply.err(
            ErrorCode::Error,
            "the Codex engine is disabled (engines.codex.enabled: false)",
        );
    }
    if !info.binary_ok {
        return reply.err(
            ErrorCode::Error,
            format!(
                "the Codex engine is not installed: {}",
                info.error.as_deref().unwrap_or("no codex binary found")
            ),
        );
    }
    let models = info.models.unwrap_or_default();
    if models.is_empty() {
        if let Some(e) = info.models_error {
            return reply.err(
                ErrorCode::Error,
                format!("Codex model discovery failed: {e}"),
            );
        }
    }
    let default = models
        .iter()
        .find(|m| m.is_default == Some(true))
        .or_else(|| models.first());
    let model = default.map(|m| m.id.clone()).unwrap_or_default();
    let effort = default.and_then(|m| m.default_effort.clone());
    reply.ok(&CodexModelsResult {
        providers: crate::provider::catalog::provider_summaries(&host.config()),
        provider: codex::ID.into(),
        model,
        effort,
        variant: None,
        models: models
            .into_iter()
            .map(|m| CodexModelSummary {
                slug: m.id,
                display_name: m.display_name,
                default_reasoning_level: m.default_effort,
                supported_reasoning: m.supported_efforts.unwrap_or_default(),
                supported_in_api: true,
            })
            .collect(),
    })
}
