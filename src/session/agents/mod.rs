//! Subagents: the tree of workers a root conversation delegates to (spec
//! `subagents.md`). A worker is a real conversation — a child thread whose row carries
//! `extra.agent` (its immutable identity: root, parent, path, task name) — run on its own
//! session thread through the same engine seam, in the root's permission mode and
//! sandbox. This module owns the tree state ([`Agents`], one per host): capacity
//! (`agent.max_parallel` workers of one root run at once; more wait in order), each
//! worker's status, tokens and result, and the flow of results back to the root as
//! stored inputs (a steer into a running root turn, or a queued input that wakes an
//! idle root), each delivered exactly once (the input id is the result id). The mutable
//! record of each worker is a JSON file under `$WUU_HOME/agents/<root>/` written
//! before every announcement, so a restart recovers queued spawns and undelivered
//! results ([`recover`]). An interrupt of the root freezes its tree ([`freeze`]).

mod record;
pub mod tools;
mod worktree;

pub use record::{preview_of, Rec, INLINE_LIMIT};

use crate::session::{Host, Session, SessionMsg};
use crate::util::now_ms;
use parking_lot::{Condvar, Mutex};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wuu_protocol::{AgentMailbox, AgentUpdated, ErrorCode};
use wuu_store::{input_mode, input_state, InputRow};

/// Prefix of the stored inputs that carry a worker's result to its root.
pub const RESULT_INPUT_PREFIX: &str = "agent_result_";

/// Statuses after which a worker does nothing until revived.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled" | "interrupted")
}

/// The tree state of every root conversation of this process.
#[derive(Default)]
pub struct Agents {
    state: Mutex<State>,
    /// Signalled on every change (foreground waits, run waits).
    changed: Condvar,
}

#[derive(Default)]
struct State {
    agents: HashMap<String, Rec>,
    /// Roots whose tree is frozen by an interrupt.
    frozen: HashSet<String>,
    /// Roots whose records were read back from disk by this process.
    loaded: HashSet<String>,
}

/// What a conversation is in a tree (from its row's `extra.agent`).
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// A root conversation: offered the management tools.
    Root,
    /// A worker: offered `agent_report` only.
    Worker {
        /// The root conversation.
        root_id: String,
    },
    /// Neither (ephemeral conversations, external engines): no agent tools.
    None,
}

/// The role of a conversation row.
pub fn role_of(thread: &wuu_store::ThreadRow) -> Role {
    if crate::util::is_ephemeral(&thread.id) {
        return Role::None;
    }
    match thread
        .extra
        .pointer("/agent/root_id")
        .and_then(|v| v.as_str())
    {
        Some(root) => Role::Worker {
            root_id: root.to_owned(),
        },
        None if crate::session::engines::engine_id(thread) == crate::engine::BUILTIN => Role::Root,
        None => Role::None,
    }
}

/// Whether a conversation is a worker isolated in its own git worktree (its cwd).
pub fn isolated(thread: &wuu_store::ThreadRow) -> bool {
    thread
        .extra
        .pointer("/agent/isolation")
        .and_then(|v| v.as_str())
        == Some("worktree")
}

/// The directory of a root's worker records.
fn root_dir(shared: &Host, root_id: &str) -> PathBuf {
    shared
        .opts
        .home
        .join("agents")
        .join(crate::util::name_tail(root_id, 80))
}

impl Agents {
    /// A copy of one worker's record.
    pub fn get(&self, id: &str) -> Option<Rec> {
        self.state.lock().agents.get(id).cloned()
    }

    /// The workers of a root, oldest first.
    pub fn of_root(&self, root_id: &str) -> Vec<Rec> {
        let st = self.state.lock();
        let mut v: Vec<Rec> = st
            .agents
            .values()
            .filter(|r| r.root_id == root_id)
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        v
    }

    /// Workers of `root_id` that are not terminal (queued ones included).
    pub fn live_count(&self, root_id: &str) -> usize {
        self.state
            .lock()
            .agents
            .values()
            .filter(|r| r.root_id == root_id && !is_terminal(&r.status))
            .count()
    }

    /// Whether the root still has agent work to wait for: a live worker, or a
    /// terminal one whose result is neither delivered nor consumed (a frozen tree has
    /// none: it waits for the user).
    pub fn outstanding(&self, root_id: &str) -> bool {
        let st = self.state.lock();
        if st.frozen.contains(root_id) {
            return false;
        }
        st.agents
            .values()
            .any(|r| r.root_id == root_id && (!is_terminal(&r.status) || r.undelivered()))
    }

    /// Waits until something changes or `timeout` passes.
    pub fn wait(&self, timeout: std::time::Duration) {
        let mut st = self.state.lock();
        self.changed.wait_for(&mut st, timeout);
    }

    /// Updates a record in memory and on disk, then announces it (`agent/updated`).
    fn update(&self, shared: &Host, id: &str, f: impl FnOnce(&mut Rec)) -> Option<Rec> {
        self.update_with(shared, id, true, f)
    }

    /// Updates bookkeeping of a record (delivery marks, held flags) in memory and on
    /// disk without announcing it: clients see one `agent/updated` per state.
    fn note(&self, shared: &Host, id: &str, f: impl FnOnce(&mut Rec)) -> Option<Rec> {
        self.update_with(shared, id, false, f)
    }

    fn update_with(
        &self,
        shared: &Host,
        id: &str,
        loud: bool,
        f: impl FnOnce(&mut Rec),
    ) -> Option<Rec> {
        let rec = {
            let mut st = self.state.lock();
            let rec = st.agents.get_mut(id)?;
            f(rec);
            rec.clone()
        };
        record::save(&root_dir(shared, &rec.root_id), &rec);
        if loud {
            announce(shared, &rec);
        }
        self.changed.notify_all();
        Some(rec)
    }

    /// Inserts a new `queued` record and stores it; it is announced by the caller
    /// (after a launch claimed it, or as `queued`).
    fn insert(&self, shared: &Host, rec: Rec) {
        record::save(&root_dir(shared, &rec.root_id), &rec);
        self.state.lock().agents.insert(rec.id.clone(), rec);
        self.changed.notify_all();
    }

    /// Reserves a slot for a new worker of `root_id` when fewer than `max` run.
    fn has_capacity(&self, root_id: &str, max: u32) -> bool {
        let st = self.state.lock();
        let running = st
            .agents
            .values()
            .filter(|r| r.root_id == root_id && matches!(r.status.as_str(), "pending" | "running"))
            .count();
        running < max as usize
    }

    fn is_frozen(&self, root_id: &str) -> bool {
        self.state.lock().frozen.contains(root_id)
    }
}

/// Sends `agent/updated` for a record.
fn announce(shared: &Host, rec: &Rec) {
    let _ = shared.outbox.notify(&AgentUpdated {
        thread_id: rec.root_id.clone(),
        agent: rec.wire(),
    });
}

/// The text the root model reads when a worker's result arrives.
fn notification_text(msg: &wuu_protocol::AgentMailboxMessage) -> String {
    format!(
        "<subagent_notification>\n{}\n</subagent_notification>",
        json!({"agent_path": msg.agent_path, "status": msg})
    )
}

/// Starts queued workers of `root_id` while capacity allows (FIFO by creation). The
/// slot is claimed (status `pending`) under the lock, so concurrent drains never run
/// more than `agent.max_parallel` workers.
pub fn drain(shared: &Arc<Host>, root_id: &str) {
    if shared.is_closing() {
        return;
    }
    let max = shared.config().max_parallel() as usize;
    loop {
        let claimed = {
            let mut st = shared.agents.state.lock();
            if st.frozen.contains(root_id) {
                return;
            }
            let running = st
                .agents
                .values()
                .filter(|r| {
                    r.root_id == root_id && matches!(r.status.as_str(), "pending" | "running")
                })
                .count();
            if running >= max {
                return;
            }
            let next = st
                .agents
                .values()
                .filter(|r| r.root_id == root_id && r.status == "queued")
                .min_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)))
                .map(|r| r.id.clone());
            let Some(id) = next else { return };
            let Some(r) = st.agents.get_mut(&id) else {
                return;
            };
            r.status = "pending".into();
            r.started_at_ms = now_ms();
            r.clone()
        };
        launch(shared, claimed);
    }
}

/// Starts a claimed worker's first turn: its record (now `pending`) is stored and
/// announced, and its prompt goes to its session thread (`running` once admitted).
fn launch(shared: &Arc<Host>, rec: Rec) {
    let mut prompt = worker_prompt(&rec);
    for m in &rec.mailbox {
        prompt.push_str("\n\n");
        prompt.push_str(m);
    }
    let _ = shared.agents.update(shared, &rec.id, |r| r.mailbox.clear());
    run_on_worker(shared, &rec.id, prompt);
}

/// Gives `prompt` to the worker's session as a new turn (or a steer when it is
/// running), via its mailbox.
fn run_on_worker(shared: &Arc<Host>, id: &str, prompt: String) {
    let agent_id = id.to_owned();
    let sh = shared.clone();
    shared.registry.dispatch(
        shared,
        id,
        SessionMsg::Call(Box::new(move |s| match s {
            Err((_, why)) => finish(&sh, &agent_id, Outcome::Failed(why)),
            Ok(s) => {
                if sh.agents.get(&agent_id).is_some_and(|r| r.cancel_requested) {
                    return finish(&sh, &agent_id, Outcome::Cancelled("closed".into()));
                }
                push_input(s, &crate::util::new_id("agent_msg"), &prompt, true);
            }
        })),
    );
}

/// Puts `text` into conversation `s` as input: a pending steer when a turn runs, else
/// a queued input that starts a turn now (unless `drain_now` is false or the session
/// holds automatic turns). Idempotent by `id`: an input already stored is left alone.
pub fn push_input(s: &mut Session, id: &str, text: &str, drain_now: bool) -> bool {
    if s.input_get(id).is_some() {
        return false;
    }
    let running = s.running.load(Ordering::SeqCst);
    let now = now_ms();
    let row = InputRow {
        thread_id: s.id.clone(),
        id: id.to_owned(),
        mode: if running {
            input_mode::STEER
        } else {
            input_mode::QUEUE
        }
        .into(),
        state: input_state::PENDING.into(),
        body: json!({"prompt": text, "images": [], "files": [], "origin": "agent"}),
        created_at_ms: now,
        updated_at_ms: now,
    };
    if let Err((_, e)) = s.input_put(row) {
        log::error!("storing agent input for {}: {e}", s.id);
        return false;
    }
    if running {
        s.steer_signal = true;
    } else if drain_now && !s.hold_agent_turns {
        s.drain_queue();
    }
    true
}

/// The first prompt of a worker: who it is, what it may do, then the task.
fn worker_prompt(rec: &Rec) -> String {
    format!(
        "<system-reminder>\nYou are a worker agent ({path}, task `{name}`) spawned by the main agent. Do the task below on your own. You cannot spawn, message or close other agents. When you are done, call `agent_report` with your outcome and a summary, then give your final answer: it is handed back to the main agent.\n</system-reminder>\n\n{prompt}",
        path = rec.agent_path,
        name = rec.task_name,
        prompt = rec.prompt
    )
}

/// How a worker's turn ended, as the supervisor records it.
pub enum Outcome {
    /// Finished with this final text.
    Completed(String),
    /// Failed with this error.
    Failed(String),
    /// Stopped (closed, frozen, shut down), with the reason.
    Cancelled(String),
    /// The process that ran it stopped (crash recovery).
    Interrupted(String),
}

/// A worker turn is about to run: its status becomes `running`.
pub fn before_turn(s: &Session) {
    if let Role::Worker { .. } = role_of(&s.thread) {
        let _ = s.shared.agents.update(&s.shared, &s.id, |r| {
            if r.generation_done {
                // A revived worker: its next terminal state is a new result.
                r.generation += 1;
                r.generation_done = false;
            }
            r.status = "running".into();
            r.completed_at_ms = None;
        });
    }
}

/// A turn settled on `s`: a worker records its outcome and tokens (and its result
/// flows to the root); a root turns result steers that came too late for the turn into
/// queued inputs (so they start the next turn).
pub fn after_turn(s: &mut Session, end: &crate::session::driver::TurnEnd) {
    use crate::session::driver::TurnEnd;
    match role_of(&s.thread) {
        Role::Worker { .. } => {
            if let Some(last) = s.turns.last() {
                let row = &last.row;
                let (i, o, cc, cr) = (
                    row.input_tokens,
                    row.output_tokens,
                    row.cache_creation_tokens,
                    row.cache_read_tokens,
                );
                let _ = s.shared.agents.update(&s.shared, &s.id, |r| {
                    r.input_tokens += i;
                    r.output_tokens += o;
                    r.cache_creation_tokens += cc;
                    r.cache_read_tokens += cr;
                });
            }
            if s.inputs_in(&[input_state::PENDING])
                .iter()
                .any(|r| r.mode == input_mode::QUEUE)
            {
                // A message arrived for the worker meanwhile: its next turn runs first.
                return;
            }
            let outcome = match end {
                TurnEnd::Completed { content } => Outcome::Completed(content.clone()),
                TurnEnd::Failed(e) => Outcome::Failed(e.message.clone()),
                // A server shutdown interrupts; a later message revives the worker.
                TurnEnd::Interrupted(reason) if reason == "shutdown" => Outcome::Interrupted(
                    "the server shut down while this worker ran; send it a message to continue"
                        .into(),
                ),
                TurnEnd::Interrupted(reason) => Outcome::Cancelled(reason.clone()),
            };
            let shared = s.shared.clone();
            finish(&shared, &s.id, outcome);
        }
        Role::Root => requeue_late_results(s),
        Role::None => {}
    }
}

/// Result steers still pending after the root turn ended become queued inputs.
pub fn requeue_late_results(s: &mut Session) {
    for mut row in s.inputs_in(&[input_state::PENDING]) {
        if row.id.starts_with(RESULT_INPUT_PREFIX) && row.mode == input_mode::STEER {
            row.mode = input_mode::QUEUE.into();
            let _ = s.input_put(row);
        }
    }
}

/// A worker reached a terminal state: record it (result file, preview), announce it,
/// deliver the result to the root (unless a foreground spawn takes it, `close_agent`
/// suppressed it or the tree is frozen), and start queued workers.
pub fn finish(shared: &Arc<Host>, id: &str, outcome: Outcome) {
    let Some(before) = shared.agents.get(id) else {
        return;
    };
    if is_terminal(&before.status) && before.generation_done {
        return;
    }
    let dir = root_dir(shared, &before.root_id);
    let frozen = shared.agents.is_frozen(&before.root_id);
    let (status, text, error) = match outcome {
        Outcome::Completed(t) => (
            "completed",
            before.report_text().unwrap_or(t),
            String::new(),
        ),
        Outcome::Failed(e) => ("failed", String::new(), e),
        Outcome::Cancelled(why) => (
            "cancelled",
            String::new(),
            format!("the worker was stopped ({why})"),
        ),
        Outcome::Interrupted(why) => ("interrupted", String::new(), why),
    };
    let written = record::write_result(&dir, id, &text);
    let Some(rec) = shared.agents.update(shared, id, |r| {
        r.status = status.into();
        r.error = error;
        r.completed_at_ms = Some(now_ms());
        r.generation_done = true;
        let (preview, truncated) = preview_of(&text);
        r.result = preview;
        r.result_truncated = truncated;
        r.result_bytes = text.len() as u64;
        r.result_path = written.unwrap_or_default();
        r.result_id = format!("{RESULT_INPUT_PREFIX}{}_{}", r.id, r.generation);
        if frozen && !r.suppress {
            r.held = true;
        }
    }) else {
        return;
    };
    if rec.isolation == "worktree" && rec.suppress {
        worktree::remove_if_clean(&rec);
    }
    if !rec.held && rec.undelivered() {
        deliver(shared, &rec);
    }
    drain(shared, &rec.root_id);
}

/// Hands a terminal worker's result to its root conversation (exactly once: the input
/// id is the result id, and the root checks it before storing).
fn deliver(shared: &Arc<Host>, rec: &Rec) {
    let agent_id = rec.id.clone();
    shared.registry.dispatch(
        shared,
        &rec.root_id.clone(),
        SessionMsg::Call(Box::new(move |s| {
            let Ok(s) = s else {
                log::warn!("the root of worker {agent_id} is gone; its result is kept on disk");
                return;
            };
            deliver_here(s, &agent_id);
            if !s.running.load(Ordering::SeqCst) && !s.hold_agent_turns {
                s.drain_queue();
            }
        })),
    );
}

/// Stores worker `agent_id`'s current result as input of its root `s` (on the root's
/// session thread) and records the delivery; announces `agent/mailbox` once.
fn deliver_here(s: &mut Session, agent_id: &str) {
    let shared = s.shared.clone();
    let Some(rec) = shared.agents.get(agent_id) else {
        return;
    };
    if !rec.undelivered() {
        return;
    }
    let msg = rec.mailbox_message();
    let stored = push_input(s, &rec.result_id, &notification_text(&msg), false);
    let _ = shared
        .agents
        .note(&shared, agent_id, |r| r.delivered = rec.result_id.clone());
    if stored {
        let _ = shared.outbox.notify(&AgentMailbox {
            thread_id: s.id.clone(),
            message: msg,
        });
    }
}

/// Marks a worker's current result consumed by a foreground spawn (never delivered).
fn consume(shared: &Host, id: &str) -> Option<Rec> {
    shared.agents.note(shared, id, |r| {
        r.delivered = r.result_id.clone();
    })
}

/// Stops a worker and its subtree: queued ones end `cancelled` at once, running ones
/// get an interrupt. `suppress` = `close_agent` (no delivery to the root).
pub fn cancel(shared: &Arc<Host>, id: &str, suppress: bool, why: &str) {
    let Some(rec) = shared.agents.note(shared, id, |r| {
        r.cancel_requested = !is_terminal(&r.status);
        if suppress {
            r.suppress = true;
        }
    }) else {
        return;
    };
    match rec.status.as_str() {
        "queued" => finish(shared, id, Outcome::Cancelled(why.to_owned())),
        "pending" | "running" => {
            let req =
                wuu_protocol::ClientRequest::TurnInterrupt(wuu_protocol::TurnInterruptParams {
                    thread_id: id.to_owned(),
                    turn_id: None,
                });
            shared.registry.dispatch(
                shared,
                id,
                SessionMsg::Request {
                    req,
                    reply: crate::outbound::Responder::new(
                        None,
                        shared.outbox.clone(),
                        "turn/interrupt",
                    ),
                },
            );
        }
        _ => {
            if suppress && rec.isolation == "worktree" {
                worktree::remove_if_clean(&rec);
            }
        }
    }
}

/// Interrupt of the root: the whole tree freezes. Running workers are stopped,
/// queued ones cancelled; their results are held (not delivered) until the next user
/// turn of the root ([`unfreeze`]). Returns whether the root had live workers.
pub fn freeze(shared: &Arc<Host>, root_id: &str) -> bool {
    let live: Vec<String> = shared
        .agents
        .of_root(root_id)
        .into_iter()
        .filter(|r| !is_terminal(&r.status))
        .map(|r| r.id)
        .collect();
    if live.is_empty() {
        return false;
    }
    shared.agents.state.lock().frozen.insert(root_id.to_owned());
    // Queued ones first, so a stopped worker's freed slot starts nothing.
    let (queued, running): (Vec<_>, Vec<_>) = live
        .into_iter()
        .partition(|id| shared.agents.get(id).is_some_and(|r| r.status == "queued"));
    for id in queued.iter().chain(running.iter()) {
        cancel(shared, id, false, "interrupted with the main agent's turn");
    }
    true
}

/// The next user turn of a frozen root: the freeze ends and the held results (finished
/// or stopped workers) are delivered into that turn. Nothing restarts by itself.
pub fn unfreeze(s: &mut Session) {
    // Results the interrupt held as user work go into this turn.
    for mut row in s.inputs_in(&[input_state::HELD]) {
        if row.id.starts_with(RESULT_INPUT_PREFIX) {
            row.state = input_state::PENDING.into();
            row.mode = input_mode::STEER.into();
            let _ = s.input_put(row);
            s.steer_signal = true;
        }
    }
    let (shared, root_id) = (s.shared.clone(), s.id.clone());
    let root_id = root_id.as_str();
    let was = shared.agents.state.lock().frozen.remove(root_id);
    if !was {
        return;
    }
    for rec in shared.agents.of_root(root_id) {
        if rec.held {
            let _ = shared.agents.note(&shared, &rec.id, |r| r.held = false);
            deliver_here(s, &rec.id);
        }
    }
}

/// Closes every worker of a root (forced archive or delete of the root).
pub fn close_all(shared: &Arc<Host>, root_id: &str) {
    for rec in shared.agents.of_root(root_id) {
        if !is_terminal(&rec.status) {
            cancel(
                shared,
                &rec.id,
                true,
                "the main conversation was archived or deleted",
            );
        }
    }
}

/// Reads a root's worker records back after a restart (once per process): queued
/// spawns are queued again, workers the dead process was running become
/// `interrupted`, and every result not yet delivered is delivered to the root.
pub fn recover(shared: &Arc<Host>, root_id: &str) {
    {
        let mut st = shared.agents.state.lock();
        if !st.loaded.insert(root_id.to_owned()) {
            return;
        }
    }
    let recs = record::load_all(&root_dir(shared, root_id));
    if recs.is_empty() {
        return;
    }
    let mut settle = vec![];
    let mut redeliver = vec![];
    {
        let mut st = shared.agents.state.lock();
        for rec in recs {
            if st.agents.contains_key(&rec.id) || rec.root_id != root_id {
                continue;
            }
            if matches!(rec.status.as_str(), "pending" | "running") {
                settle.push(rec.id.clone());
            } else if is_terminal(&rec.status) && rec.undelivered() {
                redeliver.push(rec.id.clone());
            }
            st.agents.insert(rec.id.clone(), rec);
        }
    }
    for id in settle {
        let _ = shared
            .agents
            .note(shared, &id, |r| r.generation_done = false);
        finish(
            shared,
            &id,
            Outcome::Interrupted(
                "the process running this worker stopped; send it a message to continue".into(),
            ),
        );
    }
    for id in redeliver {
        if let Some(rec) = shared.agents.note(shared, &id, |r| r.held = false) {
            deliver(shared, &rec);
        }
    }
    // Results stored before the crash but not yet taken by a turn start one now.
    shared.registry.dispatch(
        shared,
        root_id,
        SessionMsg::Call(Box::new(|s| {
            if let Ok(s) = s {
                if !s.running.load(Ordering::SeqCst) && !s.hold_agent_turns {
                    s.drain_queue();
                }
            }
        })),
    );
    drain(shared, root_id);
}

/// Whether archiving or deleting conversation `id` must be refused: it is a root with
/// live workers and the request is not forced. Forced: the workers are closed.
pub fn guard_removal(shared: &Arc<Host>, id: &str, force: bool) -> Result<(), (ErrorCode, String)> {
    let live = shared.agents.live_count(id);
    if live == 0 {
        return Ok(());
    }
    if !force {
        return Err((
            ErrorCode::ThreadBusy,
            format!(
                "thread {id:?} has {live} live subagent worker(s); close them first or send force: true"
            ),
        ));
    }
    close_all(shared, id);
    Ok(())
}
