//! The engine seam (DESIGN.md "The engine seam"; spec `engines.md` §1.1).
//!
//! An [`Engine`] runs one turn of one conversation. It reads the turn's input
//! ([`TurnRequest`]), speaks only [`EngineEvent`]s into an [`EventSink`], and takes
//! [`Control`]s (interrupt, steer, answer) from a channel it selects on. It knows nothing
//! of the wire, the store or the session: the host (the session thread) runs one
//! projector that turns engine events into items, notifications and store rows, the same
//! code for every engine.
//!
//! A few events are *host calls*: they carry a reply channel and the engine waits for
//! the answer (the built-in engine asks for the transcript before each model request,
//! asks whether input waits before it ends with an answer, and asks for the durable
//! record of a tool call before its effect; an external engine asks to persist its native
//! session reference before the turn proceeds). The host answers every host call in the
//! order the events arrive; a dropped reply means the host is gone and the engine stops.
//!
//! Implementations: [`builtin`] (the provider loop plus the tools), [`codex`]
//! (`codex app-server` as a child process), [`claude`] (`claude -p`, one child per
//! turn), [`acp`] (Agent Client Protocol agents) and [`opencode`] (`opencode serve`
//! over HTTP and SSE); [`child`] holds what external
//! engines' children share. The inventory of engines is [`catalog`].
//! Dependencies: `engine` → `provider`, `tools`, `store`/`protocol` types; never
//! `session` or `server`.

pub mod acp;
pub mod builtin;
pub mod catalog;
pub mod child;
pub mod claude;
pub mod codex;
pub mod compaction;
pub mod content_parts;
pub mod context;
pub mod history;
pub mod opencode;
mod text_deltas;
pub mod trace;

pub use text_deltas::TextDeltas;

use crate::provider::chat::{ChatMessage, Tools, Usage};
use crate::provider::CancelToken;
use crate::tools::{PermissionMode, ToolHandle};
use crate::util::reply::{reply, ReplyTx};
use crossbeam_channel::{Receiver, Sender};
use serde_json::Value;
use std::path::PathBuf;
use wuu_protocol::{Attachment, ThreadItem, TurnError};
use wuu_store::TurnRow;

/// The id of the built-in engine (an empty stored id means this one).
pub const BUILTIN: &str = "wuu";

/// Capacity of the engine → host event channel, in sends (an [`EngineEvent::Batch`] of
/// up to [`crate::provider::stream::STREAM_BATCH_EVENTS`] deltas is one). A slow host (a client
/// that stops reading) blocks the engine: backpressure, never a silent drop. 4 sends
/// hold at most 128 deltas. Kept small on purpose: a deep queue lets an engine read far
/// ahead of its session, so with many conversations streaming at once the provider and
/// engine threads would parse whole streams into memory before the sessions and the
/// writer get their share of the CPU, delaying the first deltas to the client.
pub const EVENT_CAPACITY: usize = 4;

/// A turn as the host holds it: the stored row plus its items in order (oldest first).
#[derive(Debug, Clone)]
pub struct TurnState {
    /// The stored row.
    pub row: TurnRow,
    /// Items, oldest first.
    pub items: Vec<ThreadItem>,
}

/// A user input given to an engine: the newest user message of the turn, or a steer.
#[derive(Debug, Clone, Default)]
pub struct UserInput {
    /// Prompt text.
    pub prompt: String,
    /// Images (`media_type` + base64 or `data:` URL).
    pub images: Vec<Attachment>,
    /// Files (PDF, video).
    pub files: Vec<Attachment>,
}

/// Limits of the built-in agent loop (from the `agent` config section).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Model requests per turn (default 200).
    pub max_steps: u32,
    /// Default `bash` timeout in ms.
    pub bash_timeout_ms: u64,
    /// Bytes of each tool output stream kept inline.
    pub output_cap_bytes: usize,
    /// Command sandbox roots and environment rules (`agent.sandbox`, `agent.shell_env`).
    pub sandbox: crate::tools::sandbox::SandboxSettings,
    /// Sampling temperature of every model request (`agent.temperature`, 0 ..= 2);
    /// `None` leaves it to the provider.
    pub temperature: Option<f64>,
    /// Concurrent background processes per conversation
    /// (`agent.max_background_processes`).
    pub max_background: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 200,
            bash_timeout_ms: 120_000,
            output_cap_bytes: 64 * 1024,
            sandbox: Default::default(),
            temperature: None,
            max_background: crate::tools::background::DEFAULT_LIMIT,
        }
    }
}

/// Everything an engine needs to run one turn (the binding record of `engines.md` §1.1
/// plus the turn's input).
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// Conversation id.
    pub thread_id: String,
    /// The host's id of this turn.
    pub turn_id: String,
    /// Canonical workspace root (the runtime root).
    pub workspace_root: PathBuf,
    /// The conversation's working directory (inside the workspace).
    pub cwd: PathBuf,
    /// The wuu home (`$WUU_HOME`): traces and spilled output live below it.
    pub home: PathBuf,
    /// Provider id of the turn (built-in engine) or `""`.
    pub provider_id: String,
    /// Model id (`""` = the engine's default).
    pub model: String,
    /// Reasoning effort (`""` = default).
    pub effort: String,
    /// The conversation's permission mode.
    pub permission_mode: PermissionMode,
    /// Durable instructions of the user config.
    pub instructions: Option<String>,
    /// JSON Schema the final answer must satisfy (runs).
    pub output_schema: Option<Value>,
    /// The newest user input (empty for an explicit continue).
    pub input: UserInput,
    /// The persisted native session reference (`engine_ref`), if any.
    pub engine_ref: Option<String>,
    /// Loop limits.
    pub limits: Limits,
    /// The conversation's background processes (see [`crate::tools::background`]).
    pub background: Option<std::sync::Arc<crate::tools::background::Processes>>,
    /// A compact-only turn (`/compact`, `thread/compact/start`): the engine compacts
    /// the conversation's context and ends; it sends no user input to the model.
    pub compact_only: bool,
    /// The conversation's trace file, shared with the host (which writes the turn's
    /// settlement there).
    pub trace: trace::Trace,
}

/// A steer handed to an engine that steers natively (`engines.md` §1.9).
#[derive(Debug, Clone)]
pub struct SteerInput {
    /// The stored input's id (its `client_id`).
    pub input_id: String,
    /// The content.
    pub input: UserInput,
}

/// The answer to an engine's [`EngineEvent::Question`] or [`EngineEvent::Approval`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Answers of a question: `[{id, selected: [..], custom?}]`; `None` = no answer
    /// (cancelled, skipped, expired, revoked).
    Question(Option<Vec<QuestionAnswer>>),
    /// An approval decision.
    Approval(ApprovalDecision),
}

/// One answered question of a question request.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionAnswer {
    /// The question id, echoed as sent.
    pub id: String,
    /// Selected option labels.
    pub selected: Vec<String>,
    /// Free text (the "other" answer).
    pub custom: Option<String>,
}

/// Engine-neutral approval decisions (`engines.md` §1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Allow this once.
    Accept,
    /// Allow for the rest of the native session.
    AcceptForSession,
    /// Refuse.
    Decline,
    /// Refuse and stop the turn.
    Cancel,
}

/// A control the host sends to a running turn.
#[derive(Debug, Clone)]
pub enum Control {
    /// Stop the turn now (the host knows the reason).
    Interrupt,
    /// Input waits for this turn. Engines that take steers at their next model step
    /// ([`Steering::NextStep`]) get no payload and fetch committed steers with
    /// [`EngineEvent::BeginStep`]; native steering engines get the input.
    Steer(Option<SteerInput>),
    /// The answer to a question or approval the engine raised.
    Answer {
        /// The `request_id` of the question / approval event.
        request_id: String,
        /// The answer.
        answer: Answer,
    },
}

/// How an engine takes input that arrives while its turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// The host commits pending steers into the transcript at the engine's next model
    /// step ([`EngineEvent::BeginStep`]); the control only wakes the engine.
    NextStep,
    /// The engine delivers each steer to its native turn and reports
    /// accepted / refused / unconfirmed.
    Native,
    /// The engine takes no input while its turn runs: a steer is queued and runs as
    /// the next turn (`turn/steer` answers `delivery: "queued"`).
    Queued,
}

/// What the host answers to [`EngineEvent::BeginStep`].
#[derive(Debug, Clone)]
pub struct StepStart {
    /// The step number (1 for the first model request of the turn).
    pub step: u32,
    /// The normalized transcript for the request (history + this turn so far).
    pub messages: Vec<ChatMessage>,
    /// Index in `messages` of this turn's first message.
    pub turn_start_index: usize,
    /// The compaction settings in force for this step (live configuration).
    pub compaction: compaction::CompactionSettings,
}

/// A stream lifecycle change (`engines.md` §1.1 "lifecycle reconnecting/connected/failed").
#[derive(Debug, Clone, PartialEq)]
pub struct Reconnecting {
    /// Attempt number of the next try (1-based).
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Delay before the next try, ms.
    pub delay_ms: u64,
    /// Failure kind (snake_case), if known.
    pub reason: Option<String>,
    /// Human-readable message.
    pub message: String,
    /// Whether the failed attempt's partial output of this step is void (the built-in
    /// engine re-requests the whole step; Codex keeps what it streamed).
    pub discard_step: bool,
}

/// One question of a [`EngineEvent::Question`].
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Question id (valid only within this request; echoed as is).
    pub id: String,
    /// Short header.
    pub header: String,
    /// The question text.
    pub question: String,
    /// Whether free text is allowed besides the options.
    pub is_other: bool,
    /// Options: `(label, description)`.
    pub options: Vec<(String, String)>,
}

impl Question {
    /// The questions of an `AskUserQuestion`-shaped value, `{questions: [{header,
    /// question, options: [{label, description}]}]}` (Claude Code's `AskUserQuestion`
    /// input, OpenCode's `question.asked`), with ids `q0`, `q1`, …; free text is allowed,
    /// and missing or non-text fields read as empty.
    pub fn list_from(v: &Value) -> Vec<Question> {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        fn array<'a>(v: &'a Value, k: &str) -> &'a [Value] {
            v.get(k)
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice)
        }
        array(v, "questions")
            .iter()
            .enumerate()
            .map(|(i, q)| Question {
                id: format!("q{i}"),
                header: text(q, "header"),
                question: text(q, "question"),
                is_other: true,
                options: array(q, "options")
                    .iter()
                    .map(|o| (text(o, "label"), text(o, "description")))
                    .collect(),
            })
            .collect()
    }
}

/// An approval request of an engine (`engines.md` §1.1).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// `command_execution` | `file_change` | `permissions`.
    pub kind: String,
    /// The native item id.
    pub item_id: String,
    /// The command, for command approvals.
    pub command: Option<String>,
    /// Working directory of the command.
    pub cwd: Option<String>,
    /// File path, for file changes.
    pub file_path: Option<String>,
    /// Why the engine asks.
    pub reason: Option<String>,
}

/// An event an engine speaks during a turn.
#[derive(Debug)]
pub enum EngineEvent {
    /// Host call (built-in loop): a model step starts. The host commits pending steers
    /// into the turn and answers with the transcript; the event also opens a new step
    /// for the projection (new message / reasoning items).
    BeginStep {
        /// Receives the step and transcript.
        reply: ReplyTx<StepStart>,
    },
    /// A new step of an engine that keeps its own transcript (no host call).
    Step,
    /// Host call (built-in loop): compaction of the context starts. The host opens
    /// the `context_compaction` item and answers with the older messages to summarise
    /// (oldest first), or `None` when there is nothing to compact.
    Compact {
        /// Why.
        reason: compaction::CompactReason,
        /// Receives the messages to summarise.
        reply: ReplyTx<Option<Vec<ChatMessage>>>,
    },
    /// Host call: the summary of a [`EngineEvent::Compact`] is ready (or failed). The
    /// host completes the item and answers with the transcript of the same step, now
    /// compacted.
    Compacted {
        /// The summary text, or why there is none.
        summary: Result<String, String>,
        /// Receives the new transcript.
        reply: ReplyTx<StepStart>,
    },
    /// Host call: the model gave an answer without tool calls. The host answers `true`
    /// when input waits (pending steers): the answer is then an ordinary message and
    /// the engine continues the turn with another step.
    AnswerReady {
        /// Receives whether to continue.
        reply: ReplyTx<bool>,
    },
    /// Host call: the tool call's arguments are complete and it is about to run; the
    /// host records it durably and answers whether the record was stored.
    ToolReady {
        /// The tool call id.
        call_id: String,
        /// Whether the tool must not run without a durable record (its effect is not
        /// repeatable); the host then withholds the re-announcement on failure.
        at_most_once: bool,
        /// Receives whether the record is durable.
        reply: ReplyTx<bool>,
    },
    /// Host call: persist a newly created native session reference before the turn
    /// proceeds; an error fails the turn.
    PersistRef {
        /// The reference (e.g. a Codex thread id).
        engine_ref: String,
        /// Receives the outcome.
        reply: ReplyTx<Result<(), String>>,
    },
    /// Assistant text delta of the open message.
    ContentDelta(String),
    /// The full text of the open message, replacing what streamed (adds a message if
    /// none is open).
    ContentReplace(String),
    /// The open message is complete; `final_answer` marks it as the turn's answer.
    MessageDone {
        /// Whether this is the terminal answer.
        final_answer: bool,
    },
    /// Reasoning text delta.
    ThinkingDelta(String),
    /// The full reasoning text of the open reasoning item.
    ThinkingReplace(String),
    /// The open reasoning item is complete. `text` fills an empty item; `detail` is the
    /// replayable reasoning block (stored as `result_detail`).
    ThinkingDone {
        /// Text for an item that streamed none.
        text: Option<String>,
        /// The provider's reasoning block.
        detail: Option<Value>,
    },
    /// A tool call starts (arguments may stream).
    ToolStart {
        /// Tool call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Arguments known at start.
        arguments: Option<String>,
    },
    /// Streamed argument text.
    ToolArgsDelta {
        /// Tool call id.
        call_id: String,
        /// The delta.
        delta: String,
    },
    /// The call's complete arguments (the call may not have been started before).
    ToolArgs {
        /// Tool call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Complete arguments (JSON text).
        arguments: String,
    },
    /// Output of a running tool.
    ToolOutput {
        /// Tool call id.
        call_id: String,
        /// `stdout` | `stderr`.
        stream: Option<String>,
        /// The text.
        text: String,
    },
    /// A tool call ended. `output: None` with `error` = it never ran.
    ToolEnd {
        /// Tool call id.
        call_id: String,
        /// The result text given to the model.
        output: Option<String>,
        /// Structured result (`structured_content`).
        detail: Option<Value>,
        /// Whether it failed.
        is_error: bool,
        /// Error text.
        error: Option<String>,
        /// Whether the permission mode refused it.
        permission_denied: bool,
    },
    /// Token usage of one model request (incremental; the host sums).
    Usage(Usage),
    /// A model request ended: its stop reason; `has_calls` = tool calls follow.
    StepEnd {
        /// Provider stop reason.
        stop_reason: Option<String>,
        /// Whether the output was cut by a limit.
        truncated: bool,
        /// Whether tool calls follow (the open message is then complete).
        has_calls: bool,
    },
    /// A started tool call will never run: its arguments are not complete JSON (the
    /// output limit cut them off). The host withdraws its item: it is not executed and
    /// does not enter history.
    ToolWithdrawn {
        /// Tool call id.
        call_id: String,
        /// Why (for logs).
        reason: String,
    },
    /// A steer cut the streaming answer at the visible text: the open message is kept
    /// as an incomplete fragment, unfinished calls of the step are withdrawn.
    StreamCut,
    /// The stream is reconnecting.
    Reconnecting(Reconnecting),
    /// Output flows again after a reconnect.
    Connected,
    /// Answer and reasoning text deltas, in order (those of one provider read, sent
    /// together as one [`TextDeltas`]). The host projects each as a `ContentDelta` /
    /// `ThinkingDelta`. Made by [`EventSink::emit_deltas`].
    Deltas(TextDeltas),
    /// Several events, in order (the deltas of one provider read, sent together: one
    /// hand-off to the host instead of one per delta). The host projects them one by
    /// one as if each had come alone. Made by [`EventSink::emit_all`].
    Batch(Vec<EngineEvent>),
    /// The todo list changed (`{todos: [...]}`).
    Todo(Value),
    /// Sub-agent activity (`{agent_id, label, status, ...}`).
    AgentActivity(Value),
    /// A diagnostic `turn/event` payload (request context, provider state).
    Diagnostic(Value),
    /// The engine asks the user; answered with [`Control::Answer`].
    Question {
        /// Id of this request (the answer names it).
        request_id: String,
        /// The native item id (→ `call_id`).
        call_id: String,
        /// The questions.
        questions: Vec<Question>,
        /// Whether the engine waits for the answer (`false` = an offer that may be
        /// skipped or expire).
        blocking: bool,
    },
    /// The engine asks for an approval; answered with [`Control::Answer`].
    Approval {
        /// Id of this request.
        request_id: String,
        /// What is asked.
        request: ApprovalRequest,
    },
    /// The engine no longer waits for the answer of this request (turn end, native
    /// revocation).
    Revoked {
        /// The request id.
        request_id: String,
    },
    /// A native steer was acknowledged by the native turn.
    SteerAccepted {
        /// The input id.
        input_id: String,
    },
    /// The native side explicitly refused the steer: the input goes back to pending.
    SteerRefused {
        /// The input id.
        input_id: String,
        /// Why.
        message: String,
    },
    /// The steer was sent but its acknowledgement was lost.
    SteerUnconfirmed {
        /// The input id.
        input_id: String,
    },
    /// The engine cannot steer natively now: the input stays queued for the next turn.
    SteerDeferred {
        /// The input id.
        input_id: String,
    },
}

impl EngineEvent {
    /// Whether this is a piece of streamed text or arguments (`ContentDelta`,
    /// `ThinkingDelta`, `ToolArgsDelta`): notifications only, gathered by the host with
    /// the rest of their batch.
    pub fn is_delta(&self) -> bool {
        matches!(
            self,
            EngineEvent::ContentDelta(_)
                | EngineEvent::ThinkingDelta(_)
                | EngineEvent::Deltas(_)
                | EngineEvent::ToolArgsDelta { .. }
        )
    }
}

/// How an engine's turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The engine gave its answer.
    Completed,
    /// The turn failed.
    Failed(Box<TurnError>),
    /// The turn stopped after [`Control::Interrupt`] (or the host went away).
    Interrupted,
}

impl Outcome {
    /// A failed turn of category `engine`, reported by external engine `provider` (its
    /// catalogue id), with error `code` and `message`.
    pub fn engine_failure(provider: &str, message: impl Into<String>, code: &str) -> Outcome {
        Outcome::Failed(Box::new(TurnError {
            message: message.into(),
            code: Some(code.into()),
            category: Some("engine".into()),
            provider: Some(provider.into()),
            ..Default::default()
        }))
    }
}

/// The provider stream an engine reads inline, as the host can cut it, and the wake
/// of the thread that reads it.
///
/// The engine opens it while a provider request runs. A host on another thread, after
/// sending a [`Control`], calls [`LiveStream::cut`], which cancels the request
/// (shutting its socket down, so a read blocked on a silent provider returns) when that
/// control ends the stream; the engine then finds the control in its channel. A host
/// on the engine's own thread is woken instead: whoever queues a request for it calls
/// [`LiveStream::posted`], which ends the read the thread is parked in (without damaging
/// the stream, [`crate::provider::wake`]), so the host serves the request and the
/// engine reads on, or stops when the control it got ends the stream. Cloning shares
/// the slot and the wake.
#[derive(Clone, Debug, Default)]
pub struct LiveStream {
    slot: std::sync::Arc<parking_lot::Mutex<Option<(CancelToken, bool)>>>,
    /// The engine runs on its host's thread ([`LiveStream::posted`]).
    here: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::sync::Arc<crate::provider::Wake>,
}

impl LiveStream {
    /// Whether the engine runs on its host's thread — see [`LiveStream::posted`].
    pub fn set_on_host_thread(&self, on: bool) {
        self.here.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// The wake of the thread that reads the stream.
    pub fn wake(&self) -> &crate::provider::Wake {
        &self.wake
    }

    /// Before queueing a request for the host that leads to `control` (if any) for a
    /// running turn: the request in flight that [`LiveStream::posted`] cuts if it
    /// cannot be woken from — only when the engine runs on the host's thread and
    /// `control` ends that request.
    pub fn cut_target(&self, control: Option<&Control>) -> Option<CancelToken> {
        let c = control?;
        if !self.here.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let slot = self.slot.lock();
        let (token, cut_on_steer) = slot.as_ref()?;
        let ends = match c {
            Control::Interrupt => true,
            Control::Steer(_) => *cut_on_steer,
            Control::Answer { .. } => false,
        };
        ends.then(|| token.clone())
    }

    /// After queueing a request for the host: wakes the host's thread from a read of
    /// a streaming body or a wait for a response head. `target`
    /// ([`LiveStream::cut_target`], taken before queueing, so never a request the host
    /// started after serving this one) is cut when the thread cannot be woken (its
    /// request waits for its response head on that thread, every head pool thread
    /// being busy), since the host cannot serve before that wait ends.
    pub fn posted(&self, target: Option<CancelToken>) {
        self.wake.signal();
        if let Some(t) = target {
            if !self.wake.listening() {
                t.cancel();
            }
        }
    }

    /// Registers the request in flight; `cut_on_steer` = a steer ends it too (not only
    /// an interrupt).
    pub fn open(&self, token: &CancelToken, cut_on_steer: bool) {
        if self.here.load(std::sync::atomic::Ordering::SeqCst) {
            token.set_wake(self.wake.clone());
        }
        *self.slot.lock() = Some((token.clone(), cut_on_steer));
    }

    /// Forgets the request in flight.
    pub fn close(&self) {
        self.slot.lock().take();
    }

    /// Cancels the request in flight when `control` ends it (an interrupt; a steer when
    /// the stream was opened to be cut by one). Call after sending `control`.
    pub fn cut(&self, control: &Control) {
        let slot = self.slot.lock();
        if let Some((token, cut_on_steer)) = slot.as_ref() {
            let ends = match control {
                Control::Interrupt => true,
                Control::Steer(_) => *cut_on_steer,
                Control::Answer { .. } => false,
            };
            if ends {
                token.cancel();
            }
        }
    }
}

/// A host that projects an engine's events in place, on the thread that runs the
/// engine (the built-in engine runs on its conversation's session thread): no channel
/// and no thread stand between the engine and the projection.
pub trait DirectHost {
    /// Projects `ev` now; a host call's reply is sent before this returns.
    fn project(&self, ev: EngineEvent);
    /// Projects text deltas now, lent (as [`EngineEvent::Deltas`]; the engine reuses
    /// the buffers for its next batch).
    fn project_deltas(&self, deltas: &TextDeltas) {
        self.project(EngineEvent::Deltas(deltas.clone()))
    }
    /// Serves what waits for the host (its mailbox) without blocking and sends the
    /// engine the controls that follow from it. Called between two reads of a stream,
    /// during waits and before the engine looks at its controls.
    fn serve(&self);
    /// The engine is about to wait (a socket read that may block): the host lets go
    /// of what it need not hold meanwhile, then serves as [`DirectHost::serve`].
    fn idle(&self) {
        self.serve()
    }
}

/// Where the engine's events go: a bounded channel to the host's thread, or a host
/// on this thread that projects them in place.
enum Target<'a> {
    Channel(Sender<EngineEvent>),
    Direct(&'a dyn DirectHost),
}

/// The engine's side of the event channel, with the stream the host may cut.
pub struct EventSink<'a> {
    target: Target<'a>,
    live: LiveStream,
}

impl<'a> EventSink<'a> {
    /// A sink writing into `tx`.
    pub fn new(tx: Sender<EngineEvent>) -> Self {
        Self::with_live(tx, LiveStream::default())
    }

    /// A sink writing into `tx` whose inline provider streams the host cuts through
    /// `live`.
    pub fn with_live(tx: Sender<EngineEvent>, live: LiveStream) -> Self {
        EventSink {
            target: Target::Channel(tx),
            live,
        }
    }

    /// A sink whose events `host` projects in place on this thread; its inline
    /// provider streams are cut through `live` (by whoever holds a clone of it).
    pub fn direct(host: &'a dyn DirectHost, live: LiveStream) -> Self {
        EventSink {
            target: Target::Direct(host),
            live,
        }
    }

    /// The slot of the provider stream in flight.
    pub fn live(&self) -> &LiveStream {
        &self.live
    }

    /// Sends one event (blocks while the host is behind). `false` = the host is gone.
    pub fn emit(&self, ev: EngineEvent) -> bool {
        match &self.target {
            Target::Channel(tx) => tx.send(ev).is_ok(),
            Target::Direct(host) => {
                host.project(ev);
                true
            }
        }
    }

    /// Sends `events` in order as one hand-off ([`EngineEvent::Batch`] when there are
    /// several; nothing when there are none). `false` = the host is gone.
    pub fn emit_all(&self, mut events: Vec<EngineEvent>) -> bool {
        match events.len() {
            0 => true,
            1 => events.pop().is_none_or(|ev| self.emit(ev)),
            _ => self.emit(EngineEvent::Batch(events)),
        }
    }

    /// Sends `deltas` as one hand-off ([`EngineEvent::Deltas`]; nothing when empty) and
    /// empties it: a host on this thread projects them lent and the buffers stay for
    /// the next batch. `false` = the host is gone.
    pub fn emit_deltas(&self, deltas: &mut TextDeltas) -> bool {
        if deltas.is_empty() {
            return true;
        }
        match &self.target {
            Target::Channel(tx) => tx.send(EngineEvent::Deltas(std::mem::take(deltas))).is_ok(),
            Target::Direct(host) => {
                host.project_deltas(deltas);
                deltas.clear();
                true
            }
        }
    }

    /// Makes a host call and waits for its answer; `None` = the host is gone.
    pub fn call<T: Send + 'static>(
        &self,
        make: impl FnOnce(ReplyTx<T>) -> EngineEvent,
    ) -> Option<T> {
        let (tx, rx) = reply::<T>();
        if !self.emit(make(tx)) {
            return None;
        }
        match &self.target {
            Target::Channel(_) => rx.recv().ok(),
            // Answered during the projection, or never.
            Target::Direct(_) => rx.try_recv().ok(),
        }
    }

    /// Lets a host on this thread serve its mailbox (no-op for a channel host, which
    /// runs on its own thread).
    pub fn serve(&self) {
        if let Target::Direct(host) = &self.target {
            host.serve();
        }
    }

    /// Before a wait that may block: a host on this thread lets go of what it need not
    /// hold and serves its mailbox.
    pub fn idle(&self) {
        if let Target::Direct(host) = &self.target {
            host.idle();
        }
    }

    /// The longest an engine may block in one wait: `wait` for a channel host; for a
    /// host on this thread, at most until its run deadline, after which it must serve
    /// its mailbox ([`EventSink::serve`]), as when [`EventSink::bell`] rings.
    pub fn wait_limit(&self, wait: std::time::Duration) -> std::time::Duration {
        match &self.target {
            Target::Channel(_) => wait,
            Target::Direct(_) => match self.live.wake().until_deadline() {
                Some(d) => wait.min(d),
                None => wait,
            },
        }
    }

    /// A channel that has a message when a host on this thread has mail to serve
    /// ([`EventSink::serve`]); `None` for a channel host.
    pub fn bell(&self) -> Option<&Receiver<()>> {
        match &self.target {
            Target::Channel(_) => None,
            Target::Direct(_) => Some(self.live.wake().bell()),
        }
    }
}

/// The host's part of the built-in engine's tools: which tools the model is offered,
/// and the tools the host serves itself (client tools: `ask_user`, browser tools).
pub trait HostTools: Send + Sync {
    /// Every tool the model is offered in `mode`: the built-in tools
    /// ([`crate::tools::specs`]) plus the host's, as the host's policy allows (a
    /// `--no-tools` server offers none).
    fn offered(&self, mode: PermissionMode) -> Tools;
    /// Whether a call to `name` is served by the host rather than the built-in tools.
    fn handles(&self, name: &str) -> bool;
    /// Starts a call on a helper thread; `mode` is the turn's permission mode.
    fn spawn(
        &self,
        turn_id: &str,
        call_id: &str,
        name: &str,
        args: &str,
        mode: PermissionMode,
    ) -> ToolHandle;
}

/// An engine session: bound to one conversation, runs its turns one at a time.
pub trait Engine: Send {
    /// The engine id (`wuu`, `codex`, …).
    fn id(&self) -> &str;
    /// How input arriving during a turn is taken.
    fn steering(&self) -> Steering {
        Steering::NextStep
    }
    /// Runs one turn to its end. Events go into `sink` in order; controls arrive on
    /// `controls`.
    fn run_turn(
        &mut self,
        req: TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome;
}

/// An engine whose every turn fails with one error (the engine could not be opened:
/// missing binary, provider not configured) — `engines.md` §1.1.
pub struct FailingEngine {
    /// Engine id.
    pub id: String,
    /// The error every turn ends with.
    pub error: TurnError,
}

impl Engine for FailingEngine {
    fn id(&self) -> &str {
        &self.id
    }

    fn run_turn(&mut self, _: TurnRequest, _: &EventSink, _: &Receiver<Control>) -> Outcome {
        Outcome::Failed(Box::new(self.error.clone()))
    }
}
