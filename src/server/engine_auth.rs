//! `engine/auth/methods`, `engine/authenticate`, `engine/auth/cancel` for ACP engines
//! (spec `engines.md` §1.11): one operation per engine at a time, run on its own
//! thread with a 5-minute limit; it starts the agent, reads `authMethods` from
//! `initialize` (those of type empty or `agent`: terminal logins are left to the CLI)
//! and, for `engine/authenticate`, calls `authenticate {methodId}`. Cancel kills the
//! operation's agent, which fails its pending call.

use crate::engine::acp;
use crate::engine::catalog::{self, Env};
use crate::engine::codex::rpc::Peer;
use crate::engine::codex::ChildSettings;
use crate::outbound::Responder;
use crate::session::Host;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use wuu_protocol::{EngineAuthMethod, EngineAuthParams, EngineAuthResult, ErrorCode, OkResult};

/// Limit of one authentication operation.
pub const AUTH_LIMIT: Duration = Duration::from_secs(300);

/// Running operations: engine id → the agent of the operation (once started).
fn running() -> &'static Mutex<HashMap<String, Option<Arc<Peer>>>> {
    static R: OnceLock<Mutex<HashMap<String, Option<Arc<Peer>>>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The advertised methods a client may run.
fn methods_of(raw: &[Value]) -> Vec<EngineAuthMethod> {
    raw.iter()
        .filter_map(|m| {
            let kind = m.get("type").and_then(Value::as_str).unwrap_or("");
            if !(kind.is_empty() || kind == "agent") {
                return None;
            }
            let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
            Some(EngineAuthMethod {
                id: s("id")?,
                name: s("name").unwrap_or_default(),
                description: s("description"),
                kind: s("type"),
            })
        })
        .collect()
}

/// `engine/auth/methods` (`authenticate: false`) and `engine/authenticate`.
pub fn run(shared: &Arc<Host>, p: EngineAuthParams, authenticate: bool, reply: Responder) {
    let id = p.engine_id.trim().to_owned();
    if !acp::is_acp(&id) {
        return reply.err(
            ErrorCode::InvalidParams,
            format!(
                "engine {:?} does not support ACP authentication",
                crate::util::clip(&id, 100)
            ),
        );
    }
    let method = p
        .method_id
        .as_deref()
        .map(str::trim)
        .unwrap_or("")
        .to_owned();
    if authenticate && method.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: method_id is required",
        );
    }
    let cfg = shared.config();
    let binary = match catalog::available(&id, cfg.config.engines.as_ref(), &Env::current()) {
        Ok(b) => b,
        Err(e) => return reply.err(ErrorCode::Error, e),
    };
    let settings = ChildSettings::from_config(&cfg, &shared.opts.home);
    let cwd = shared.opts.workdir.clone();
    {
        let mut r = running().lock();
        if r.contains_key(&id) {
            return reply.err(
                ErrorCode::Error,
                "an authentication operation is already running for this engine",
            );
        }
        r.insert(id.clone(), None);
    }
    let op_id = id.clone();
    let spawned = crate::util::spawn("wuu-engine-auth".into(), move || {
        let out = operate(&op_id, &binary, &cwd, &settings, authenticate, &method);
        running().lock().remove(&op_id);
        match out {
            Ok(r) => reply.ok(&r),
            Err(e) => reply.err(ErrorCode::Error, e),
        }
    });
    if let Err(e) = spawned {
        running().lock().remove(&id);
        log::error!("cannot start an engine authentication: {e}");
    }
}

fn operate(
    id: &str,
    binary: &std::path::Path,
    cwd: &std::path::Path,
    settings: &ChildSettings,
    authenticate: bool,
    method: &str,
) -> Result<EngineAuthResult, String> {
    let (peer, info) = acp::start(id, binary, cwd, settings, None)?;
    {
        let mut r = running().lock();
        match r.get_mut(id) {
            Some(slot) => *slot = Some(peer.clone()),
            None => return Err("the authentication was cancelled".into()),
        }
    }
    let methods = methods_of(&info.auth_methods);
    if !authenticate {
        return Ok(EngineAuthResult {
            methods,
            authenticated: false,
        });
    }
    if !methods.iter().any(|m| m.id == method) {
        return Err(format!(
            "authentication method {:?} is not advertised or requires terminal login",
            crate::util::clip(method, 100)
        ));
    }
    match peer.request("authenticate", json!({"methodId": method}), AUTH_LIMIT) {
        Ok(_) => {
            catalog::forget_discoveries();
            Ok(EngineAuthResult {
                methods,
                authenticated: true,
            })
        }
        Err(_) if !running().lock().contains_key(id) => {
            Err("the authentication was cancelled".into())
        }
        Err(e) => Err(format!("{id} authentication failed: {e}")),
    }
}

/// `engine/auth/cancel`: stops the operation of `engine_id` (empty: every one).
pub fn cancel(p: EngineAuthParams, reply: Responder) {
    let id = p.engine_id.trim().to_owned();
    if !id.is_empty() && !acp::is_acp(&id) {
        return reply.err(
            ErrorCode::InvalidParams,
            format!(
                "engine {:?} does not support ACP authentication",
                crate::util::clip(&id, 100)
            ),
        );
    }
    let peers: Vec<Arc<Peer>> = {
        let mut r = running().lock();
        let keys: Vec<String> = r
            .keys()
            .filter(|k| id.is_empty() || **k == id)
            .cloned()
            .collect();
        keys.iter().filter_map(|k| r.remove(k).flatten()).collect()
    };
    for p in peers {
        p.kill();
    }
    reply.ok(&OkResult { ok: true })
}
