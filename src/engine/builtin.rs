//! The built-in engine (`wuu`): the provider loop plus the tools (spec `app-server.md`
//! §4.3–§4.9, `providers.md`).
//!
//! Each step asks the host for the transcript ([`EngineEvent::BeginStep`]: the host
//! commits pending steers first), sends it to the provider and reads the answer on this
//! thread ([`inline`]), looking at the controls between reads; the host cuts a read
//! blocked on a silent socket, so an interrupt or a steer takes effect at once. A steer
//! that arrives while the answer streams cuts it at the visible text and starts the
//! next step. Tool calls are recorded
//! durably by the host before their effect ([`EngineEvent::ToolReady`]) and run on helper
//! threads the same way; an interrupt kills a command's process group.

use super::compaction::{self, CompactReason, CompactionSettings};
use super::{
    context, trace::Trace, Control, Engine, EngineEvent, EventSink, HostTools, Outcome,
    Reconnecting, StepStart, TurnRequest,
};
use crate::provider::chat::{
    ChatMessage, ChatRequest, FailureKind, ProviderError, Role, StreamEvent, ToolCall, Tools, Usage,
};
use crate::provider::Provider;
use crate::tools::{self, ToolContext, ToolEvent, ToolOutcome};
use crate::util::now_ms;
use crossbeam_channel::{never, select, Receiver};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use wuu_protocol::{Recovery, TurnError};

mod inline;

/// How long an interrupted tool may take to stop before the turn goes on without it.
const CANCELLED_TOOL_GRACE: Duration = Duration::from_secs(10);

/// The built-in engine bound to one conversation's provider.
pub struct Builtin {
    provider: Arc<dyn Provider>,
    host_tools: Arc<dyn HostTools>,
    /// Set once an interrupt arrived (or the host went away).
    interrupted: bool,
    /// The controls channel is disconnected (the host is gone).
    host_gone: bool,
    /// Usage of this turn so far (for the trace).
    usage: Usage,
    /// Tool calls of the current step cut off by the output limit (`(id, name)`): never
    /// run; the model is told at the next step ([`cut_off_note`]).
    cut_off: Vec<(String, String)>,
    /// The last provider step produced output (text, reasoning, calls, a retry)
    /// before it ended: it is not sent again after an overflow.
    step_output: bool,
}

/// How a compaction ended.
enum Compaction {
    /// The context is compacted: the step's new transcript.
    Done(StepStart),
    /// There was nothing to summarise.
    Nothing,
    /// The summary request failed (the item is marked failed).
    Failed(Box<TurnError>),
    /// The turn was interrupted meanwhile.
    Interrupted,
}

/// Whether a turn error is a context overflow of the provider.
fn is_overflow(e: &TurnError) -> bool {
    e.code.as_deref() == Some("context_overflow")
}

/// Logs once per process and provider/model that automatic compaction is off because
/// the model's window is unknown.
fn warn_no_window(provider: &str, model: &str) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let key = format!("{provider}/{model}");
    let first = WARNED
        .get_or_init(Default::default)
        .lock()
        .map(|mut w| w.insert(key))
        .unwrap_or(false);
    if first {
        log::warn!(
            "automatic compaction is off for {provider}/{model}: its context window is unknown \
             (set agent.max_context_tokens, agent.provider_context_window or the provider's context_window)"
        );
    }
}

/// What the model reads (a user note after the step's tool results, in the next request
/// only) when the output limit cut off some of its tool calls while others completed and
/// ran: which calls, that they did not run, and to re-issue them shorter.
pub fn cut_off_note(cut: &[(String, String)]) -> String {
    let calls: Vec<String> = cut
        .iter()
        .map(|(id, name)| format!("`{name}` (call id {id})"))
        .collect();
    format!(
        "[wuu: your tool call {} was cut off by the output limit before its arguments were complete, so it was NOT run (the other tool calls of that answer ran). Re-issue it with shorter arguments, e.g. split a large file write into several smaller edits.]",
        calls.join(", ")
    )
}

impl Builtin {
    /// The engine for `provider`, offering `host_tools` besides its own tools.
    pub fn new(provider: Arc<dyn Provider>, host_tools: Arc<dyn HostTools>) -> Self {
        Builtin {
            provider,
            host_tools,
            interrupted: false,
            host_gone: false,
            usage: Usage::default(),
            cut_off: vec![],
            step_output: false,
        }
    }

    fn controls(&self, controls: &Receiver<Control>) -> Receiver<Control> {
        if self.host_gone {
            never()
        } else {
            controls.clone()
        }
    }

    /// Applies a control that arrived outside a stream or tool wait.
    fn note(&mut self, c: Result<Control, crossbeam_channel::RecvError>) {
        match c {
            Ok(Control::Interrupt) => self.interrupted = true,
            Err(_) => {
                self.interrupted = true;
                self.host_gone = true;
            }
            // Steers are taken at the next step; answers are not expected.
            Ok(Control::Steer(_) | Control::Answer { .. }) => {}
        }
    }

    /// Reads the controls that are already waiting (a host on this thread serves its
    /// mailbox first: the controls it yields are among them).
    fn drain(&mut self, sink: &EventSink, controls: &Receiver<Control>) {
        sink.serve();
        loop {
            match controls.try_recv() {
                Ok(c) => self.note(Ok(c)),
                Err(crossbeam_channel::TryRecvError::Empty) => return,
                Err(crossbeam_channel::TryRecvError::Disconnected) => {
                    return self.note(Err(crossbeam_channel::RecvError))
                }
            }
        }
    }
}

impl Engine for Builtin {
    fn id(&self) -> &str {
        super::BUILTIN
    }

    fn run_turn(
        &mut self,
        req: TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome {
        self.interrupted = false;
        self.usage = Usage::default();
        let turn = self.turn_frame(&req);
        let max_steps = req.limits.max_steps.max(1);
        let mut trace = req.trace.clone();
        // Calls of the previous step the output limit cut off: the model is told.
        let mut cut_note: Option<String> = None;
        loop {
            let mut start = match self.begin_step(max_steps, sink, controls) {
                Ok(start) => start,
                Err(end) => return end,
            };
            if req.compact_only {
                return match self.compact(
                    CompactReason::Manual,
                    &req,
                    &start.compaction,
                    sink,
                    controls,
                ) {
                    Compaction::Done(_) | Compaction::Nothing => Outcome::Completed,
                    Compaction::Failed(e) => Outcome::Failed(e),
                    Compaction::Interrupted => Outcome::Interrupted,
                };
            }
            if let Err(end) = self.compact_if_over(&req, &turn, &mut start, sink, controls) {
                return end;
            }
            if let Some(note) = cut_note.take() {
                start.messages.push(ChatMessage::text(Role::User, note));
            }
            let calls = match self.request_step(&req, &turn, &mut start, &mut trace, sink, controls)
            {
                Ok(Some(calls)) => calls,
                // A steer ended the stream at the visible text: next step.
                Ok(None) => continue,
                Err(end) => return end,
            };
            if calls.is_empty() {
                // The user may have added input before the answer settled: continue.
                return match sink.call(|reply| EngineEvent::AnswerReady { reply }) {
                    Some(true) => continue,
                    Some(false) => Outcome::Completed,
                    None => Outcome::Interrupted,
                };
            }
            let cut = std::mem::take(&mut self.cut_off);
            if !cut.is_empty() {
                cut_note = Some(cut_off_note(&cut));
            }
            for call in calls {
                self.run_tool(call, &req, sink, controls, &mut trace);
            }
        }
    }
}

/// What every step of one turn sends alike: the system prompt, the tools and the provider.
struct TurnFrame {
    sections: Vec<context::Section>,
    system: String,
    tool_specs: Tools,
    provider: Arc<dyn Provider>,
    provider_id: String,
}

impl Builtin {
    /// The turn's fixed request parts, built once per turn from its workspace and mode.
    fn turn_frame(&self, req: &TurnRequest) -> TurnFrame {
        let mode = req.permission_mode;
        let sections = context::system_sections(
            &req.workspace_root,
            &req.cwd,
            mode.as_str(),
            req.instructions.as_deref(),
        );
        let system = context::system_prompt(&sections);
        let tool_specs = self.host_tools.offered(mode);
        let provider = self.provider.clone();
        let provider_id = provider.id().to_owned();
        TurnFrame {
            sections,
            system,
            tool_specs,
            provider,
            provider_id,
        }
    }

    /// Opens the next step: takes waiting controls, gets the transcript, enforces the step limit.
    fn begin_step(
        &mut self,
        max_steps: u32,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Result<StepStart, Outcome> {
        self.drain(sink, controls);
        if self.interrupted {
            return Err(Outcome::Interrupted);
        }
        let Some(start) = sink.call(|reply| EngineEvent::BeginStep { reply }) else {
            return Err(Outcome::Interrupted);
        };
        if start.step > max_steps {
            return Err(Outcome::Failed(Box::new(TurnError {
                message: format!("the turn reached the step limit ({max_steps} model requests)"),
                code: Some("max_steps_exceeded".into()),
                category: Some("local".into()),
                ..Default::default()
            })));
        }
        Ok(start)
    }

    /// Compacts the step's transcript first when it is over the threshold, so the request fits.
    fn compact_if_over(
        &mut self,
        req: &TurnRequest,
        turn: &TurnFrame,
        start: &mut StepStart,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Result<(), Outcome> {
        match start.compaction.threshold_tokens() {
            Some(limit)
                if context::over(&turn.system, &start.messages, &turn.tool_specs, limit) =>
            {
                match self.compact(CompactReason::Auto, req, &start.compaction, sink, controls) {
                    Compaction::Done(s) => {
                        start.messages = s.messages;
                        start.turn_start_index = s.turn_start_index;
                    }
                    // A failed summary leaves the history as it was: the request
                    // may still fit, and an overflow compacts once more.
                    Compaction::Nothing | Compaction::Failed(_) => {}
                    Compaction::Interrupted => return Err(Outcome::Interrupted),
                }
            }
            None if start.compaction.auto && start.compaction.window.is_none() => {
                warn_no_window(&turn.provider_id, &req.model)
            }
            _ => {}
        }
        Ok(())
    }

    /// Sends the step's request and streams the answer, compacting and resending once on overflow.
    fn request_step(
        &mut self,
        req: &TurnRequest,
        turn: &TurnFrame,
        start: &mut StepStart,
        trace: &mut Trace,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> StepEnd {
        let step = start.step;
        let cache_key = req.thread_id.chars().take(64).collect::<String>();
        // The step is sent again once after a context overflow, compacted.
        let mut overflow_compacted = false;
        loop {
            let chat = ChatRequest {
                model: req.model.clone(),
                system: turn.system.clone(),
                // The step's transcript goes to the request: it is read again only once a
                // compaction after an overflow has replaced it.
                messages: std::mem::take(&mut start.messages),
                tools: turn.tool_specs.clone(),
                effort: Some(req.effort.clone()).filter(|e| !e.is_empty()),
                max_output_tokens: None,
                prompt_cache_key: Some(cache_key.clone()),
                output_schema: req
                    .output_schema
                    .clone()
                    .map(|s| json!({"name": "final_answer", "schema": s})),
                temperature: req.limits.temperature,
            };
            let rc = context::request_context(
                step,
                &turn.sections,
                &turn.system,
                &chat.messages,
                start.turn_start_index.min(chat.messages.len()),
                &chat.tools,
                &cache_key,
            );
            trace.write(json!({
                "type": "request", "thread_id": req.thread_id, "turn_id": req.turn_id,
                "step": step, "provider": turn.provider_id, "model": req.model,
                "messages": chat.messages.len(), "tools": chat.tools.len(),
                "system_hash": rc["system_hash"], "turn_prefix_hash": rc["turn_prefix_hash"],
            }));
            sink.emit(EngineEvent::Diagnostic(rc));
            sink.emit(EngineEvent::Diagnostic(context::provider_state(
                step,
                &turn.provider_id,
                turn.provider.protocol(),
                chat.messages.len(),
            )));
            let started = now_ms();
            let end = self.stream_step(
                turn.provider.clone(),
                chat,
                &turn.provider_id,
                sink,
                controls,
            );
            match end {
                Ok(Some(calls)) => {
                    trace.write(json!({
                        "type": "response", "thread_id": req.thread_id, "turn_id": req.turn_id,
                        "step": step, "duration_ms": now_ms() - started,
                        "tool_calls": calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
                        "usage": self.usage,
                    }));
                    return Ok(Some(calls));
                }
                Ok(None) => return Ok(None),
                Err(Outcome::Failed(e))
                    if is_overflow(&e)
                        && !overflow_compacted
                        && !self.step_output
                        && start.compaction.auto =>
                {
                    overflow_compacted = true;
                    match self.compact(
                        CompactReason::Overflow,
                        req,
                        &start.compaction,
                        sink,
                        controls,
                    ) {
                        Compaction::Done(s) => {
                            start.messages = s.messages;
                            start.turn_start_index = s.turn_start_index;
                        }
                        Compaction::Nothing | Compaction::Failed(_) => {
                            return Err(Outcome::Failed(e))
                        }
                        Compaction::Interrupted => return Err(Outcome::Interrupted),
                    }
                }
                Err(end) => return Err(end),
            }
        }
    }
}

/// How a provider step ended: its complete tool calls (empty = final answer), `None`
/// when a steer cut the stream, or (`Err`) how the turn ended.
type StepEnd = Result<Option<Vec<ToolCall>>, Outcome>;

/// The state of one streaming step: the complete tool calls so far and whether a
/// retry is under way (the next output of a new attempt means reconnected).
#[derive(Default)]
struct StepStream {
    calls: Vec<ToolCall>,
    reconnecting: bool,
}

impl Builtin {
    /// Handles one provider event other than a delta: reasoning blocks, tool calls
    /// (complete or cut off), retries, and the step's end (`Done`/`Failed`).
    fn on_stream_event(
        &mut self,
        step: &mut StepStream,
        ev: StreamEvent,
        provider_id: &str,
        sink: &EventSink,
    ) -> Option<StepEnd> {
        match ev {
            StreamEvent::TextDelta { .. }
            | StreamEvent::ReasoningDelta { .. }
            | StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::ReasoningDone { block } => {
                sink.emit(EngineEvent::ThinkingDone {
                    text: Some(block.text.clone()),
                    detail: serde_json::to_value(&block).ok(),
                });
            }
            StreamEvent::ToolCallStart { id, name } => {
                sink.emit(EngineEvent::ToolStart {
                    call_id: id,
                    name,
                    arguments: None,
                });
            }
            StreamEvent::ToolCallEnd { call } => {
                sink.emit(EngineEvent::ToolArgs {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                });
                step.calls.push(call);
            }
            // Arguments cut off (output limit): never run, never in history.
            StreamEvent::ToolCallCutOff { id, name, reason } => {
                self.cut_off.push((id.clone(), name));
                sink.emit(EngineEvent::ToolWithdrawn {
                    call_id: id,
                    reason,
                });
            }
            StreamEvent::Retrying {
                attempt,
                max_attempts,
                delay_ms,
                kind,
                message,
            } => {
                // The failed attempt's partial output is void.
                step.calls.clear();
                self.cut_off.clear();
                step.reconnecting = true;
                sink.emit(EngineEvent::Reconnecting(Reconnecting {
                    attempt,
                    max_attempts,
                    delay_ms,
                    reason: serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned)),
                    message,
                    discard_step: true,
                }));
            }
            StreamEvent::Done {
                usage,
                stop_reason,
                truncated,
                ..
            } => {
                add(&mut self.usage, &usage);
                sink.emit(EngineEvent::Usage(usage));
                sink.emit(EngineEvent::StepEnd {
                    stop_reason,
                    truncated,
                    has_calls: !step.calls.is_empty(),
                });
                return Some(Ok(Some(std::mem::take(&mut step.calls))));
            }
            StreamEvent::Failed { error } => {
                return Some(Err(Outcome::Failed(Box::new(provider_failure(
                    provider_id,
                    error,
                )))));
            }
        }
        None
    }

    /// Compacts the conversation's context: the host names the older messages, the
    /// model summarises them (a request of its own, its usage counted like any step),
    /// the host records the summary and answers with the compacted transcript.
    fn compact(
        &mut self,
        reason: CompactReason,
        req: &TurnRequest,
        settings: &CompactionSettings,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Compaction {
        let Some(older) = sink.call(|reply| EngineEvent::Compact { reason, reply }) else {
            return Compaction::Interrupted;
        };
        let Some(older) = older else {
            return Compaction::Nothing;
        };
        let chat =
            compaction::summary_request(&req.model, &older, settings, req.limits.temperature);
        let result = self.summarise(chat, sink, controls);
        let summary = match &result {
            Ok(text) => Ok(text.clone()),
            Err(Outcome::Failed(e)) => Err(e.message.clone()),
            Err(_) => Err("interrupted".to_owned()),
        };
        let Some(start) = sink.call(|reply| EngineEvent::Compacted { summary, reply }) else {
            return Compaction::Interrupted;
        };
        match result {
            Ok(_) => Compaction::Done(start),
            Err(Outcome::Failed(e)) => Compaction::Failed(e),
            Err(_) => Compaction::Interrupted,
        }
    }

    /// Runs one complete tool call, streaming its output, until it ends or the turn is
    /// interrupted (then the command's process group is killed).
    fn run_tool(
        &mut self,
        call: ToolCall,
        req: &TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
        trace: &mut Trace,
    ) {
        self.drain(sink, controls);
        let not_run = |sink: &EventSink, why: &str| {
            sink.emit(EngineEvent::ToolEnd {
                call_id: call.id.clone(),
                output: None,
                detail: None,
                is_error: true,
                error: Some(why.into()),
                permission_denied: false,
            });
        };
        if self.interrupted {
            return not_run(sink, "not run: the turn was interrupted");
        }
        // The call is durable before its effect: after a crash its outcome is known to
        // be unknown (an at-most-once tool is then never repeated automatically).
        let at_most_once = tools::is_at_most_once(&call.name);
        let recorded = sink.call(|reply| EngineEvent::ToolReady {
            call_id: call.id.clone(),
            at_most_once,
            reply,
        });
        match recorded {
            None => {
                self.interrupted = true;
                return;
            }
            // Without a durable record a crash would leave no trace of the effect.
            Some(false) if at_most_once => {
                return not_run(sink, "not run: the call could not be recorded in the store")
            }
            Some(_) => {}
        }
        let ctx = ToolContext {
            workspace_root: req.workspace_root.clone(),
            cwd: req.cwd.clone(),
            permission_mode: req.permission_mode,
            spill_dir: req.home.join("spill").join(&req.thread_id),
            default_timeout_ms: req.limits.bash_timeout_ms,
            output_cap_bytes: req.limits.output_cap_bytes,
            temp_dir: req.home.join("tmp").join(&req.thread_id),
            sandbox: req.limits.sandbox.clone(),
            background: req.background.clone(),
            max_background: req.limits.max_background,
        };
        let started = now_ms();
        let handle = if self.host_tools.handles(&call.name) {
            self.host_tools.spawn(
                &req.turn_id,
                &call.id,
                &call.name,
                &call.arguments,
                req.permission_mode,
            )
        } else {
            tools::spawn(&call.name, &call.arguments, ctx)
        };
        let mut cancelled_at: Option<std::time::Instant> = None;
        let never = crossbeam_channel::never();
        let bell = sink.bell().unwrap_or(&never);
        let outcome: ToolOutcome = loop {
            if self.interrupted && cancelled_at.is_none() {
                handle.cancel();
                cancelled_at = Some(std::time::Instant::now());
            }
            let wait = match cancelled_at {
                Some(t) => CANCELLED_TOOL_GRACE.saturating_sub(t.elapsed()),
                None => Duration::from_secs(3600),
            };
            if cancelled_at.is_some() && wait.is_zero() {
                break ToolOutcome {
                    output: "interrupted: the tool did not stop in time".into(),
                    is_error: true,
                    ..Default::default()
                };
            }
            // A host on this thread serves its mailbox when its bell rings and at its
            // run deadline.
            let wait = sink.wait_limit(wait);
            sink.serve();
            let ctl = self.controls(controls);
            select! {
                recv(handle.events) -> ev => match ev {
                    Ok(ToolEvent::Output { stream, text }) => {
                        sink.emit(EngineEvent::ToolOutput {
                            call_id: call.id.clone(),
                            stream: Some(stream.to_owned()),
                            text,
                        });
                    }
                    Ok(ToolEvent::Done(o)) => break o,
                    Err(_) => break ToolOutcome {
                        output: "the tool ended without a result".into(),
                        is_error: true,
                        ..Default::default()
                    },
                },
                recv(ctl) -> c => self.note(c),
                recv(bell) -> _ => {}
                default(wait) => {}
            }
        };
        trace.write(json!({
            "type": "tool", "thread_id": req.thread_id, "turn_id": req.turn_id,
            "name": call.name, "arguments": crate::util::redact(&call.arguments),
            "duration_ms": now_ms() - started, "is_error": outcome.is_error,
            "permission_denied": outcome.permission_denied,
        }));
        if call.name == "todo_write" && !outcome.is_error {
            let todo = json!({"todos": outcome.detail.get("todos").cloned().unwrap_or(json!([]))});
            sink.emit(EngineEvent::Todo(todo));
        }
        sink.emit(EngineEvent::ToolEnd {
            call_id: call.id.clone(),
            error: outcome.is_error.then(|| outcome.output.clone()),
            output: Some(outcome.output),
            detail: Some(outcome.detail),
            is_error: outcome.is_error,
            permission_denied: outcome.permission_denied,
        });
    }
}

fn add(total: &mut Usage, u: &Usage) {
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    total.cache_read_tokens += u.cache_read_tokens;
    total.cache_creation_tokens += u.cache_creation_tokens;
    total.reasoning_tokens += u.reasoning_tokens;
}

/// Maps a provider failure to the turn error: 401/403 → `auth`, 404 and server failures
/// → `provider`, 400 → `invalid_request`, network → `network`.
pub fn provider_failure(provider_id: &str, e: ProviderError) -> TurnError {
    let category = match e.kind {
        FailureKind::Authentication => "auth",
        FailureKind::InvalidRequest
        | FailureKind::ContextOverflow
        | FailureKind::RequestTooLarge => "invalid_request",
        FailureKind::Network | FailureKind::IncompleteStream => "network",
        FailureKind::Cancelled => "cancelled",
        _ => "provider",
    };
    let code = serde_json::to_value(e.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned));
    TurnError {
        message: e.message.clone(),
        code: code.clone(),
        category: Some(category.into()),
        provider: Some(provider_id.to_owned()),
        status_code: e.status_code,
        recovery: Some(Recovery {
            attempt_count: e.attempts,
            retry_count: e.attempts.saturating_sub(1),
            submission_count: e.attempts,
            max_attempts: e.max_attempts,
            stop_reason: e.stop_reason.clone(),
            failure_category: code.unwrap_or_default(),
            operation_id: String::new(),
        }),
    }
}
