//! The turn driver: runs one admitted turn of a conversation over the engine seam
//! ([`crate::engine`]) and projects what the engine says (spec `app-server.md`
//! §4.3–§4.9, `engines.md` §1.1). This module holds the turn's live state and its
//! token usage; its rooms are the run loop ([`run_loop`]: the engine on its own thread,
//! this one selecting over its events, the mailbox and the deadline), the mailbox while
//! the turn runs ([`mailbox`]), the projection of engine events ([`project`],
//! [`tool_calls`], answers to native engines in [`native`], steers in [`steers`]), the
//! turn's items ([`items`]), delta batching ([`deltas`]) and settling ([`settle`]):
//! every item is persisted as it settles; the turn ends with exactly one of
//! `turn/completed` / `turn/error`.

use crate::engine::trace::Trace;
use crate::engine::Control;
use crate::outbound::transport::Overflow;
use crate::provider::chat::Usage;
use crate::session::{Session, SessionMsg};
use crate::util::now_ms;
use serde_json::Value;
use wuu_protocol::*;
use wuu_store::UsageRow;

mod compaction;
mod deltas;
mod items;
mod mailbox;
mod native;
mod project;
mod run_loop;
mod settle;
mod steers;
mod tool_calls;

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model gave its final answer.
    Completed {
        /// The answer text.
        content: String,
    },
    /// The turn failed.
    Failed(Box<TurnError>),
    /// The turn was interrupted (reason: `interrupted`, `timeout`, `shutdown`, `archived`).
    Interrupted(String),
}

/// Why the driver stopped listening.
enum Stop {
    Interrupt(String),
    Overflow,
}

/// Per-turn limits and options.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// JSON Schema the final answer must satisfy (passed to the provider).
    pub output_schema: Option<Value>,
    /// Deadline (Unix ms) after which the turn is interrupted with reason `timeout`.
    pub deadline_ms: Option<i64>,
    /// The run this turn belongs to (`run/interrupt` for it stops the turn).
    pub run_id: Option<String>,
    /// A final answer that fails `output_schema` gets a correction turn (the run has
    /// corrections and turns left): its `turn/completed` then says
    /// `awaiting_auto_continuation: true`.
    pub corrects_schema: bool,
}

/// The live state of the active turn.
pub struct Driver<'a> {
    /// The session.
    pub s: &'a mut Session,
    turn_idx: usize,
    next_item: u32,
    step: u32,
    usage: Usage,
    /// Messages that must wait until the turn settles (archive, shutdown).
    pub deferred: Vec<SessionMsg>,
    stop: Option<Stop>,
    /// The stop was asked for by the client and acknowledged (`turn/interrupt`,
    /// `run/interrupt`, a forced archive): the turn ends interrupted even if the engine
    /// finished meanwhile (spec rule 9).
    stop_acknowledged: bool,
    denials: Vec<Value>,
    agent_item: Option<usize>,
    reasoning_item: Option<usize>,
    reconnect_item: Option<usize>,
    trace: Trace,
    opts: TurnOptions,
    last_usage_emit: i64,
    /// Input size (fresh + cached tokens) of the last provider request.
    last_context_tokens: Option<u64>,
    /// The compaction under way: its item and the kept boundary it recorded.
    compaction: Option<compaction::Pending>,
    /// The answer text once the engine marked it final.
    final_content: Option<String>,
    /// The final answer's item, left open from the moment the engine's answer is final
    /// until the settlement, which stores and announces it with the turn's end (one
    /// transaction instead of two; nothing runs between them).
    answer_item: Option<usize>,
    /// Usage records of this turn's provider requests not stored yet: they go into the
    /// turn's next store transaction (an item's or the settlement's).
    unsaved_usage: Vec<UsageRow>,
    /// While the turn settles: the items it completes and their frames, stored in the
    /// settlement's transaction and announced once that committed.
    settling: Option<settle::Settling>,
    /// Steers handed to a native steering engine (not sent twice).
    steers_sent: Vec<String>,
    /// Questions of the engine relayed to the client.
    questions: Vec<native::Relayed>,
    /// The control channel of the running engine.
    ctl: Option<crossbeam_channel::Sender<Control>>,
    /// Tails of delta streams held back because a secret may continue in the next
    /// delta, by item id and stream; sent before the item is complete.
    masks: crate::secrets::DeltaStreams<(String, deltas::DeltaKind)>,
    /// This turn's share of the outbox for its deltas (fair among streaming
    /// conversations, see [`crate::outbound::transport::Lane`]).
    lane: crate::outbound::transport::Lane,
    /// Delta frames of the engine batch being projected, not yet handed to the outbox.
    deltas: crate::outbound::transport::Lines,
    /// An engine batch is being projected (deltas are gathered, [`Self::send_deltas`]).
    batching: bool,
}

impl<'a> Driver<'a> {
    /// A driver for the last turn of `s` (already admitted and announced).
    pub fn new(s: &'a mut Session, opts: TurnOptions) -> Self {
        let turn_idx = s.turns.len() - 1;
        let next_item = s.turns[turn_idx].items.len() as u32 + 1;
        let trace = Trace::open(&s.shared.opts.home, &s.id);
        Driver {
            s,
            turn_idx,
            next_item,
            step: 0,
            usage: Usage::default(),
            deferred: vec![],
            stop: None,
            stop_acknowledged: false,
            denials: vec![],
            agent_item: None,
            reasoning_item: None,
            reconnect_item: None,
            trace,
            opts,
            last_usage_emit: 0,
            last_context_tokens: None,
            compaction: None,
            final_content: None,
            answer_item: None,
            unsaved_usage: vec![],
            settling: None,
            steers_sent: vec![],
            questions: vec![],
            ctl: None,
            masks: Default::default(),
            lane: Default::default(),
            deltas: Default::default(),
            batching: false,
        }
    }

    /// Runs the turn to its end and settles it.
    pub fn run(mut self) -> (TurnEnd, Vec<SessionMsg>) {
        let outcome = self.run_engine();
        let end = self.end_of(outcome);
        self.settle(&end);
        (end, std::mem::take(&mut self.deferred))
    }

    fn thread_id(&self) -> String {
        self.s.id.clone()
    }

    fn turn_id(&self) -> String {
        self.s.turns[self.turn_idx].row.id.clone()
    }

    fn notify<N: ServerNotification>(&mut self, n: &N) {
        self.send_deltas();
        if let Err(Overflow) = self.s.shared.outbox.notify(n) {
            log::error!("outbox overflow in {}; failing the turn", self.s.id);
            self.stop.get_or_insert(Stop::Overflow);
        }
    }

    fn event(&mut self, event: Value) {
        let n = TurnEvent {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            event: nest_turn_event(event),
        };
        self.notify(&n);
    }

    fn emit_usage(&mut self, force: bool) {
        let now = now_ms();
        if !force && now - self.last_usage_emit < 100 {
            return;
        }
        self.last_usage_emit = now;
        let n = TurnUsage {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            model: Some(self.s.turns[self.turn_idx].row.model.clone()),
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cache_creation_tokens: self.usage.cache_creation_tokens,
            cache_read_tokens: self.usage.cache_read_tokens,
            reasoning_tokens: Some(self.usage.reasoning_tokens).filter(|n| *n > 0),
            context_tokens: self.last_context_tokens,
            context_window_tokens: {
                let row = &self.s.turns[self.turn_idx].row;
                let host = &self.s.shared;
                crate::provider::catalog::context_window(
                    &host.config(),
                    &host.model_catalog,
                    &row.provider,
                    &row.model,
                )
            },
        };
        self.notify(&n);
    }

    /// Adds one provider request's usage to the turn: announced (`turn/usage`) and
    /// stored as a usage record with the turn's next store write.
    fn add_usage(&mut self, u: Usage) {
        self.last_context_tokens =
            Some(u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens);
        self.usage.input_tokens += u.input_tokens;
        self.usage.output_tokens += u.output_tokens;
        self.usage.cache_read_tokens += u.cache_read_tokens;
        self.usage.cache_creation_tokens += u.cache_creation_tokens;
        self.usage.reasoning_tokens += u.reasoning_tokens;
        let row = &self.s.turns[self.turn_idx].row;
        let rec = UsageRow {
            thread_id: self.s.id.clone(),
            turn_id: row.id.clone(),
            provider: row.provider.clone(),
            model: row.model.clone(),
            at_ms: now_ms(),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            reasoning_tokens: u.reasoning_tokens,
        };
        // Stored with the turn's next write (see `unsaved_usage`), announced now.
        self.unsaved_usage.push(rec);
        self.emit_usage(true);
    }
}
