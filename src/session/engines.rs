//! The session side of the engine seam: which engine runs a conversation's turns, the
//! host tools offered to the built-in engine, and the native session reference an
//! external engine persists (`engines.md` §1.1).
//!
//! The built-in engine is cheap and rebuilt for every turn (its provider instance is
//! cached per process). An external engine's session is kept by the conversation's
//! session thread between turns (it holds a reference on the shared native host) and
//! dropped when the session parks or ends.

use super::Session;
use crate::engine::builtin::Builtin;
use crate::engine::{Engine, FailingEngine, HostTools, BUILTIN};
use crate::provider::chat::Tools;
use crate::session::Host;
use crate::tools::{PermissionMode, ToolHandle};
use std::sync::Arc;
use wuu_protocol::TurnError;
use wuu_store::ThreadRow;

/// Key of the native session reference in the thread row's `extra`.
pub const ENGINE_REF: &str = "engine_ref";

/// The client-served tools of one conversation (`ask_user`, browser tools).
pub struct ClientTools {
    shared: Arc<Host>,
    thread_id: String,
    /// What the conversation is in a worker tree (which agent tools it gets).
    role: super::agents::Role,
}

impl HostTools for ClientTools {
    fn offered(&self, mode: PermissionMode) -> Tools {
        super::client_tools::offered(&self.shared, mode, &self.role)
    }

    fn handles(&self, name: &str) -> bool {
        super::client_tools::handles(&self.shared, name)
    }

    fn spawn(
        &self,
        turn_id: &str,
        call_id: &str,
        name: &str,
        args: &str,
        mode: PermissionMode,
    ) -> ToolHandle {
        if crate::mcp::is_mcp_tool(name) && !self.shared.opts.no_tools {
            let cfg = self.shared.config();
            return self.shared.mcp.spawn(&cfg, name, args, mode);
        }
        super::client_tools::spawn(
            &self.shared,
            &self.thread_id,
            &self.role,
            turn_id,
            call_id,
            name,
            args,
        )
    }
}

/// How the engine of `thread` takes input that arrives while its turn runs (known
/// before an engine session is opened: `turn/steer` answers by it).
pub fn steering(thread: &ThreadRow) -> crate::engine::Steering {
    match engine_id(thread) {
        crate::engine::codex::ID => crate::engine::Steering::Native,
        crate::engine::claude::ID | crate::engine::opencode::ID => crate::engine::Steering::Queued,
        _ => crate::engine::Steering::NextStep,
    }
}

/// The engine id a thread is bound to (`""` = the built-in one).
pub fn engine_id(thread: &ThreadRow) -> &str {
    if thread.engine_id.is_empty() {
        BUILTIN
    } else {
        &thread.engine_id
    }
}

/// The persisted native session reference of a thread.
pub fn engine_ref(thread: &ThreadRow) -> Option<String> {
    thread
        .extra
        .get(ENGINE_REF)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Persists a new native session reference before the turn proceeds.
pub fn persist_ref(s: &mut Session, engine_ref: &str) -> Result<(), String> {
    if !s.thread.extra.is_object() {
        s.thread.extra = serde_json::json!({});
    }
    s.thread.extra[ENGINE_REF] = serde_json::Value::String(engine_ref.to_owned());
    let thread = s.thread.clone();
    s.persist(|st| st.update_thread(&thread))
        .map(|_| ())
        .map_err(|(_, e)| format!("cannot store the native session reference: {e}"))
}

/// The engine that runs this conversation's next turn: the kept external engine
/// session, or a new one; the built-in engine for `wuu`. An engine that cannot be
/// opened becomes one whose turns fail with the reason.
pub fn open(s: &mut Session) -> Box<dyn Engine> {
    let id = engine_id(&s.thread).to_owned();
    if id == BUILTIN {
        let provider_id = s.turns.last().map(|t| t.row.provider.clone());
        let provider_id = provider_id.unwrap_or_else(|| s.thread.provider.clone());
        return match super::turn::provider_for(&s.shared, &provider_id) {
            Ok(p) => Box::new(Builtin::new(
                p,
                Arc::new(ClientTools {
                    shared: s.shared.clone(),
                    thread_id: s.id.clone(),
                    role: super::agents::role_of(&s.thread),
                }),
            )),
            Err(message) => Box::new(FailingEngine {
                id,
                error: TurnError {
                    message,
                    code: Some("provider_unavailable".into()),
                    category: Some("provider".into()),
                    provider: Some(provider_id),
                    ..Default::default()
                },
            }),
        };
    }
    if let Some(e) = s.engine.take().filter(|e| e.id() == id) {
        return e;
    }
    open_external(s, &id)
}

fn open_external(s: &mut Session, id: &str) -> Box<dyn Engine> {
    let cfg = s.shared.config();
    let env = crate::engine::catalog::Env::current();
    match crate::engine::catalog::available(id, cfg.config.engines.as_ref(), &env) {
        Ok(binary) if id == crate::engine::codex::ID => {
            let settings =
                crate::engine::child::ChildSettings::from_config(&cfg, &s.shared.opts.home);
            Box::new(crate::engine::codex::CodexEngine::new(binary, settings))
        }
        Ok(binary) if id == crate::engine::claude::ID => {
            let settings =
                crate::engine::child::ChildSettings::from_config(&cfg, &s.shared.opts.home);
            Box::new(crate::engine::claude::ClaudeEngine::new(binary, settings))
        }
        Ok(binary) if id == crate::engine::opencode::ID => {
            let settings =
                crate::engine::child::ChildSettings::from_config(&cfg, &s.shared.opts.home);
            Box::new(crate::engine::opencode::OpenCodeEngine::new(
                binary, settings,
            ))
        }
        Ok(binary) if crate::engine::acp::is_acp(id) => {
            let settings =
                crate::engine::child::ChildSettings::from_config(&cfg, &s.shared.opts.home);
            Box::new(crate::engine::acp::AcpEngine::new(id, binary, settings))
        }
        Ok(_) => unavailable(id, format!("engine {id:?} has no adapter in this build")),
        Err(why) => unavailable(id, why),
    }
}

fn unavailable(id: &str, message: String) -> Box<dyn Engine> {
    Box::new(FailingEngine {
        id: id.to_owned(),
        error: TurnError {
            message,
            code: Some("engine_unavailable".into()),
            category: Some("engine".into()),
            provider: Some(id.to_owned()),
            ..Default::default()
        },
    })
}

/// A unit of work for the conversation's engine thread (one turn).
pub type EngineJob = Box<dyn FnOnce() + Send>;

/// The conversation's engine thread for an external engine (the built-in one runs on
/// the session thread): started at its first turn and kept while the session thread
/// lives, so a turn creates no thread. It runs one job (one turn) at a
/// time and ends when the session drops this handle.
#[derive(Default)]
pub struct EngineThread {
    jobs: Option<crossbeam_channel::Sender<EngineJob>>,
}

impl EngineThread {
    /// Runs `job` on the engine thread, starting the thread if it is not running (or
    /// ended after a panic). Errors: the OS refused a thread.
    pub fn run(&mut self, thread_id: &str, job: EngineJob) -> Result<(), String> {
        let job = match &self.jobs {
            Some(tx) => match tx.send(job) {
                Ok(()) => return Ok(()),
                Err(crossbeam_channel::SendError(job)) => job,
            },
            None => job,
        };
        // One job at a time: the session waits for each turn's end before the next.
        let (tx, rx) = crossbeam_channel::bounded::<EngineJob>(1);
        crate::util::spawn(
            format!("wuu-engine-{}", crate::util::name_tail(thread_id, 12)),
            move || {
                for job in rx.iter() {
                    job();
                }
            },
        )
        .map_err(|e| e.to_string())?;
        let sent = tx
            .send(job)
            .map_err(|_| "the engine thread ended".to_owned());
        self.jobs = Some(tx);
        sent
    }
}
