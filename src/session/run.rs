//! Runs (`run/start`, `run/interrupt`): an automation execution of one conversation that
//! spans the initial turn and up to two structured-output correction turns, and settles
//! with exactly one terminal `run/updated` (spec `app-server.md` §3.3, §5.4, §6 rules
//! 2–3, 16; exit codes per `exec.md` §3.3).

use super::convert::TurnState;
use super::driver::{Driver, TurnEnd, TurnOptions};
use super::turn::{admit, current_turn, input_from, process_deferred, TurnInput};

use crate::outbound::Responder;
use crate::session::Host;
use crate::session::{Session, SessionMsg};
use crate::util::{new_id, now_ms, rfc3339};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{RunRow, Store};

/// The runs of one host that are not only in the store: which conversation executes each
/// live run of this process (so `run/interrupt` reaches its session), and every run of
/// an ephemeral conversation (never stored).
#[derive(Default)]
pub struct Runs {
    live: Mutex<HashMap<String, String>>,
    ephemeral: Mutex<HashMap<String, Run>>,
}

impl Runs {
    /// Records that conversation `thread_id` executes run `run_id`.
    fn started(&self, run_id: &str, thread_id: &str) {
        self.live
            .lock()
            .insert(run_id.to_owned(), thread_id.to_owned());
    }

    /// Forgets the live run `run_id` (it settled).
    fn settled(&self, run_id: &str) {
        self.live.lock().remove(run_id);
    }

    /// The conversation executing the live run `run_id`.
    fn live_thread(&self, run_id: &str) -> Option<String> {
        self.live.lock().get(run_id).cloned()
    }

    /// Keeps the latest state of a run of an ephemeral conversation.
    fn keep_ephemeral(&self, run: &Run) {
        self.ephemeral.lock().insert(run.id.clone(), run.clone());
    }

    /// A run of an ephemeral conversation.
    fn ephemeral(&self, run_id: &str) -> Option<Run> {
        self.ephemeral.lock().get(run_id).cloned()
    }
}

/// Correction turns allowed after a final answer that fails the output schema.
pub const MAX_SCHEMA_CORRECTIONS: u32 = 2;

/// Default turn budget of a run.
pub const DEFAULT_MAX_TURNS: u32 = 8;

/// The exit code of a settlement (exec.md §3.3 "settlement mapping").
pub fn exit_code(status: &str, category: Option<&str>, code: Option<&str>) -> i32 {
    match status {
        "completed" => 0,
        "timed_out" => 4,
        "interrupted" | "cancelled" => 5,
        _ => {
            if code == Some("permission_denied") || category == Some("permission_denied") {
                return 3;
            }
            match category {
                Some("provider" | "auth" | "network" | "invalid_request") => 7,
                Some("local" | "tool") => 8,
                Some("cancelled" | "canceled") => 5,
                Some("timeout") => 4,
                _ => 1,
            }
        }
    }
}

/// Extracts the JSON value of a final answer: the whole text, or the body of a fenced
/// ```json block.
pub fn parse_structured(text: &str) -> Result<Value, String> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return Ok(v);
    }
    if let Some(start) = t.find("```") {
        let after = &t[start + 3..];
        let after = after.strip_prefix("json").unwrap_or(after);
        if let Some(end) = after.find("```") {
            return serde_json::from_str::<Value>(after[..end].trim())
                .map_err(|e| format!("the final message is not valid JSON: {e}"));
        }
    }
    serde_json::from_str::<Value>(t)
        .map_err(|e| format!("the final message is not valid JSON: {e}"))
}

/// Validates `value` against `schema`; the errors (at most 5) when it does not match.
pub fn schema_errors(schema: &Value, value: &Value) -> Result<(), String> {
    let v = jsonschema::validator_for(schema).map_err(|e| format!("invalid output schema: {e}"))?;
    let errs: Vec<String> = v
        .iter_errors(value)
        .take(5)
        .map(|e| format!("{} (at {})", e, e.instance_path()))
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// Checks that `schema` is a usable JSON Schema (dialect from `$schema`, default
/// 2020-12): valid under its meta-schema, then compilable (e.g. its patterns are valid
/// regular expressions). The error names the JSON pointer into `schema` of the first
/// problem and the rule it breaks, e.g. `at /properties/summary/type: "strng" is not a
/// JSON Schema type (one of "array", …, "string", or an array of them) (meta-schema
/// rule: anyOf at /allOf/3/$ref/properties/type/anyOf)`.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    jsonschema::meta::validate(schema).map_err(|e| describe_schema_error(&e))?;
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| describe_schema_error(&e))
}

/// One schema problem as `at POINTER: WHAT (meta-schema rule: KEYWORD at PATH)`.
fn describe_schema_error(e: &jsonschema::ValidationError) -> String {
    let pointer = e.instance_path().as_str();
    let at = if pointer.is_empty() {
        "the schema root".to_owned()
    } else {
        pointer.to_owned()
    };
    let type_word = pointer.ends_with("/type") || pointer == "/type";
    let what = match e.kind() {
        jsonschema::error::ValidationErrorKind::AnyOf { .. }
        | jsonschema::error::ValidationErrorKind::Enum { .. }
            if type_word =>
        {
            format!(
                "{} is not a JSON Schema type (one of \"array\", \"boolean\", \"integer\", \"null\", \"number\", \"object\", \"string\", or an array of them)",
                e.instance()
            )
        }
        _ => e.to_string(),
    };
    let rule = e.evaluation_path().as_str();
    if rule.is_empty() {
        format!("at {at}: {what}")
    } else {
        format!(
            "at {at}: {what} (meta-schema rule: {} at {rule})",
            e.kind().keyword()
        )
    }
}

fn persist_run(s: &mut Session, run: &Run) {
    let row = RunRow {
        id: run.id.clone(),
        thread_id: run.thread_id.clone(),
        status: run.status.clone(),
        owner_instance: s.shared.owner.instance.clone(),
        body: serde_json::to_value(run).unwrap_or_default(),
        created_at_ms: now_ms(),
        updated_at_ms: now_ms(),
    };
    if s.store.is_none() {
        s.shared.runs.keep_ephemeral(run);
    }
    if let Err((_, e)) = s.persist(|st| st.upsert_run(&row)) {
        log::error!("persisting run {}: {e}", run.id);
    }
}

/// `run/start`: answers `{run}` once the first turn is admitted, then drives the turns
/// and announces the terminal `run/updated`.
pub fn run_start(s: &mut Session, p: RunStartParams, reply: Responder) {
    let input = match input_from(
        s,
        p.input.prompt.clone(),
        p.input.images.clone(),
        p.input.files.clone(),
        p.input.content_parts.clone(),
        p.input.client_id.clone(),
        p.input.permission_mode.clone(),
    ) {
        Ok(i) => i,
        Err((c, m)) => return reply.err(c, m),
    };
    let intent = p.request.clone().unwrap_or_default();
    if let Some(m) = intent
        .mode
        .as_deref()
        .filter(|m| !m.is_empty() && *m != "start")
    {
        return reply.err(
            ErrorCode::InvalidParams,
            format!("invalid params: request.mode: {m:?} is not supported (only \"start\")"),
        );
    }
    // `/compact` makes the run one compact turn (the engine summarises the older
    // context); it has no answer to validate against a schema.
    let kind = if super::turn::is_compact_command(&input.prompt) {
        if p.output_schema.is_some() {
            return reply.err(
                ErrorCode::InvalidParams,
                "invalid params: a /compact run takes no output_schema",
            );
        }
        if let Err((c, m)) = super::turn::compaction_supported(s) {
            return reply.err(c, m);
        }
        "compact"
    } else {
        "user"
    };
    if let Some(schema) = &p.output_schema {
        if let Err(e) = check_schema(schema) {
            return reply.err(
                ErrorCode::InvalidParams,
                format!("invalid params: output_schema: {e}"),
            );
        }
    }
    let max_turns = p
        .max_turns
        .or(intent.max_turns)
        .unwrap_or(DEFAULT_MAX_TURNS)
        .max(1);
    let timeout_ms = p.timeout_ms.or(intent.timeout_ms).filter(|t| *t > 0);
    let now = now_ms();
    let deadline_ms = timeout_ms.map(|t| now + t as i64);
    let mut request = json!({
        "mode": "start",
        "requested": intent.requested,
        "has_prompt": !input.prompt.trim().is_empty(),
        "image_count": input.images.len(),
        "file_count": input.files.len(),
        "structured_output": p.output_schema.is_some(),
        "max_turns": max_turns,
        "timeout_ms": timeout_ms,
    });
    // The schema itself is kept with the run, so a stored or announced run shows what
    // its answer was validated against.
    if let Some(schema) = &p.output_schema {
        request["output_schema"] = schema.clone();
    }
    let mut run = Run {
        id: new_id("run"),
        thread_id: s.id.clone(),
        status: "running".into(),
        request,
        runtime: json!({
            "provider": s.thread.provider,
            "model": s.thread.model,
            "variant": s.thread.variant,
            "effort": s.thread.effort,
            "permission_mode": s.thread.permission_mode,
            "protocol_version": PROTOCOL_VERSION,
            "core_version": env!("CARGO_PKG_VERSION"),
            "max_parallel": s.shared.config().max_parallel(),
        }),
        workspace: json!({"root": s.shared.opts.workdir.to_string_lossy()}),
        turns: vec![],
        result: None,
        error: None,
        created_at: rfc3339(now),
        updated_at: rfc3339(now),
        completed_at: None,
    };
    if let Err((c, m)) = admit(s, input, kind) {
        return reply.err(c, m);
    }
    run.turns.push(RunTurn {
        id: current_turn(s).id,
        purpose: "initial".into(),
        status: "in_progress".into(),
    });
    persist_run(s, &run);
    s.shared.runs.started(&run.id, &s.id);
    reply.ok(&RunEnvelope { run: run.clone() });
    let _ = s
        .shared
        .outbox
        .notify(&RunStarted(RunEnvelope { run: run.clone() }));
    let _ = s.shared.outbox.notify(&TurnStarted {
        thread_id: s.id.clone(),
        turn: current_turn(s),
        queue_id: None,
        run_id: Some(run.id.clone()),
    });
    drive(s, run, p.output_schema, max_turns, deadline_ms);
    s.release_turn_memory();
}

/// Drives the run's turns: the admitted turn runs; a final answer that fails the output
/// schema gets a correction turn (at most [`MAX_SCHEMA_CORRECTIONS`], within
/// `max_turns`); the run then settles with one terminal `run/updated`.
fn drive(
    s: &mut Session,
    mut run: Run,
    schema: Option<Value>,
    max_turns: u32,
    deadline_ms: Option<i64>,
) {
    let mut corrections = 0;
    let mut waiting_replies: Vec<Responder> = vec![];
    let mut later: Vec<SessionMsg> = vec![];
    let mut denials: Vec<Value> = vec![];
    loop {
        let opts = TurnOptions {
            output_schema: schema.clone(),
            deadline_ms,
            run_id: Some(run.id.clone()),
            corrects_schema: corrections < MAX_SCHEMA_CORRECTIONS
                && (run.turns.len() as u32) < max_turns,
        };
        let (end, deferred) = Driver::new(s, opts).run();
        for msg in deferred {
            match msg {
                SessionMsg::Request {
                    req: ClientRequest::RunInterrupt(p),
                    reply,
                } if p.run_id == run.id => waiting_replies.push(reply),
                other => later.push(other),
            }
        }
        let last = s.turns.last().expect("turn").clone();
        if let Some(d) = last
            .row
            .extra
            .get("permission_denials")
            .and_then(Value::as_array)
        {
            denials.extend(d.iter().cloned());
        }
        if let Some(t) = run.turns.last_mut() {
            t.status = last.row.status.clone();
        }
        let mut result = turn_result(s, &last);
        match end {
            TurnEnd::Completed { content } => {
                result.final_message = Some(content.clone());
                let verdict = match &schema {
                    None => Ok(None),
                    Some(sch) => parse_structured(&content)
                        .and_then(|v| schema_errors(sch, &v).map(|_| Some(v))),
                };
                match verdict {
                    Ok(structured) => {
                        result.structured_result = structured;
                        if denials.is_empty() {
                            run.status = "completed".into();
                        } else {
                            fail(&mut run, denied(s, &denials));
                        }
                    }
                    Err(why) => {
                        let turns_used = run.turns.len() as u32;
                        if corrections < MAX_SCHEMA_CORRECTIONS
                            && turns_used < max_turns
                            && !s.shared.is_closing()
                        {
                            corrections += 1;
                            match admit_correction(s, &mut run, &why) {
                                Ok(()) => continue,
                                Err(m) => fail(
                                    &mut run,
                                    run_error("structured_output_retry_failed", "local", m),
                                ),
                            }
                        } else {
                            fail(
                                &mut run,
                                run_error(
                                    "structured_output_retry_failed",
                                    "invalid_output",
                                    format!(
                                        "the final answer did not match the output schema after {corrections} correction turn(s): {why}"
                                    ),
                                ),
                            );
                        }
                    }
                }
            }
            TurnEnd::Failed(e) => {
                result.final_message = last_message(&last);
                fail(
                    &mut run,
                    RunError {
                        code: "turn_failed".into(),
                        category: e.category.clone().unwrap_or_else(|| "internal".into()),
                        message: e.message.clone(),
                        provider: e.provider.clone(),
                        status_code: e.status_code,
                    },
                );
            }
            TurnEnd::Interrupted(reason) => {
                result.final_message = last_message(&last);
                interrupted(&mut run, &reason);
            }
        }
        // The run is settled only when its workers are: each result they deliver
        // becomes one more turn of the run (spec `subagents.md` §1.9).
        if run.status == "completed" {
            match next_agent_input(s, &run.id, &mut waiting_replies, &mut later, deadline_ms) {
                AgentWait::Settled => {}
                AgentWait::Interrupted(reason) => interrupted(&mut run, &reason),
                AgentWait::Turn(input) => match admit(s, *input, "user") {
                    Ok(()) => {
                        run.turns.push(RunTurn {
                            id: current_turn(s).id,
                            purpose: "subagent_result".into(),
                            status: "in_progress".into(),
                        });
                        persist_run(s, &run);
                        let _ = s.shared.outbox.notify(&TurnStarted {
                            thread_id: s.id.clone(),
                            turn: current_turn(s),
                            queue_id: None,
                            run_id: Some(run.id.clone()),
                        });
                        continue;
                    }
                    Err((_, m)) => fail(&mut run, run_error("subagent_result_failed", "local", m)),
                },
            }
        }
        return finish(s, run, result, waiting_replies, later);
    }
}

/// What a run found while it waited for its workers.
enum AgentWait {
    /// Nothing outstanding: the run settles.
    Settled,
    /// A worker's result waits as input: the run's next turn takes it.
    Turn(Box<TurnInput>),
    /// The run was interrupted (or the server shuts down) meanwhile; the tree froze.
    Interrupted(String),
}

/// Waits (serving the mailbox) until a worker's result is stored as input of this
/// conversation, or nothing is outstanding any more, or the run is interrupted.
fn next_agent_input(
    s: &mut Session,
    run_id: &str,
    waiting_replies: &mut Vec<Responder>,
    later: &mut Vec<SessionMsg>,
    deadline_ms: Option<i64>,
) -> AgentWait {
    use crate::session::agents;
    use crossbeam_channel::RecvTimeoutError;
    s.hold_agent_turns = true;
    let out = loop {
        if s.acquire_store().is_ok() {
            agents::requeue_late_results(s);
            let waiting = s
                .inputs_in(&[wuu_store::input_state::PENDING])
                .into_iter()
                .find(|r| r.id.starts_with(agents::RESULT_INPUT_PREFIX));
            if let Some(row) = waiting {
                break AgentWait::Turn(Box::new(super::inputs::input_of(&row)));
            }
        }
        if !s.shared.agents.outstanding(&s.id) {
            break AgentWait::Settled;
        }
        if s.shared.is_closing() {
            agents::freeze(&s.shared, &s.id);
            break AgentWait::Interrupted("shutdown".into());
        }
        if deadline_ms.is_some_and(|d| now_ms() >= d) {
            agents::freeze(&s.shared, &s.id);
            break AgentWait::Interrupted("timeout".into());
        }
        match s.rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(msg) => match *msg {
                SessionMsg::Request {
                    req: ClientRequest::RunInterrupt(p),
                    reply,
                } if p.run_id.trim() == run_id => {
                    agents::freeze(&s.shared, &s.id);
                    waiting_replies.push(reply);
                    let reason = if p.reason.as_deref() == Some("timeout") {
                        "timeout"
                    } else {
                        "interrupted"
                    };
                    break AgentWait::Interrupted(reason.into());
                }
                SessionMsg::Request {
                    req: ClientRequest::TurnInterrupt(_),
                    reply,
                } => {
                    agents::freeze(&s.shared, &s.id);
                    reply.ok(&OkResult { ok: true });
                    break AgentWait::Interrupted("interrupted".into());
                }
                SessionMsg::Shutdown { done } => {
                    agents::freeze(&s.shared, &s.id);
                    later.push(SessionMsg::Shutdown { done });
                    break AgentWait::Interrupted("shutdown".into());
                }
                other => s.handle(other),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break AgentWait::Interrupted("shutdown".into()),
        }
    };
    s.hold_agent_turns = false;
    out
}

/// A run error that names no provider.
fn run_error(code: &str, category: &str, message: impl Into<String>) -> RunError {
    RunError {
        code: code.into(),
        category: category.into(),
        message: message.into(),
        provider: None,
        status_code: None,
    }
}

/// Marks the run failed with `error`.
fn fail(run: &mut Run, error: RunError) {
    run.status = "failed".into();
    run.error = Some(error);
}

/// The error of a run whose answer came after tool calls the permission mode refused.
fn denied(s: &Session, denials: &[Value]) -> RunError {
    run_error(
        "permission_denied",
        "permission_denied",
        format!(
            "{} tool call(s) were refused by the permission mode {:?}: {}",
            denials.len(),
            s.thread.permission_mode,
            denials
                .iter()
                .filter_map(|d| d.get("tool").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// Marks the run interrupted (or timed out, or closed by a shutdown) for `reason`.
fn interrupted(run: &mut Run, reason: &str) {
    let timeout = reason == "timeout";
    run.status = if timeout { "timed_out" } else { "interrupted" }.into();
    run.error = Some(run_error(
        if timeout { "timeout" } else { "interrupted" },
        if timeout { "timeout" } else { "cancelled" },
        if timeout {
            "execution run timed out"
        } else if reason == "shutdown" {
            "execution run interrupted: the server shut down"
        } else {
            "execution run interrupted"
        },
    ));
    if reason == "shutdown" {
        if let Some(e) = run.error.as_mut() {
            e.code = "server_closed".into();
        }
    }
}

/// The run's result as of its last turn (answer, structured result and exit code are
/// filled in by the caller).
fn turn_result(s: &Session, last: &TurnState) -> RunResult {
    let trace = crate::engine::trace::Trace::open(&s.shared.opts.home, &s.id).path_string();
    let final_item = last
        .items
        .iter()
        .rev()
        .find(|i| i.item_type == "agent_message" && i.terminal)
        .map(|i| i.id.clone());
    RunResult {
        final_turn_id: last.row.id.clone(),
        final_item_id: final_item,
        final_message: None,
        structured_result: None,
        trace_path: trace,
        exit_code: 0,
    }
}

/// The text of the turn's last agent message (a failed or interrupted turn's partial
/// answer).
fn last_message(last: &TurnState) -> Option<String> {
    last.items
        .iter()
        .rev()
        .find(|i| i.item_type == "agent_message")
        .and_then(|i| i.text.clone())
}

/// Admits a correction turn that asks for an answer matching the schema (`why`: what
/// the last one broke) and announces it as part of the run.
fn admit_correction(s: &mut Session, run: &mut Run, why: &str) -> Result<(), String> {
    let input = TurnInput {
        prompt: format!(
            "Your final answer does not match the required JSON schema: {why}. \
             Reply again with only a JSON value that matches the schema, no prose."
        ),
        origin: Some("schema_correction".into()),
        ..Default::default()
    };
    admit(s, input, "user").map_err(|(_, m)| m)?;
    run.turns.push(RunTurn {
        id: current_turn(s).id,
        purpose: "schema_correction".into(),
        status: "in_progress".into(),
    });
    run.updated_at = rfc3339(now_ms());
    persist_run(s, run);
    let _ = s.shared.outbox.notify(&TurnStarted {
        thread_id: s.id.clone(),
        turn: current_turn(s),
        queue_id: None,
        run_id: Some(run.id.clone()),
    });
    Ok(())
}

/// Settles the run: its exit code and result are stored and announced (`run/updated`),
/// waiting `run/interrupt` requests are answered, and the messages held back during
/// the run are served.
fn finish(
    s: &mut Session,
    mut run: Run,
    mut result: RunResult,
    waiting_replies: Vec<Responder>,
    later: Vec<SessionMsg>,
) {
    let err = run.error.clone();
    result.exit_code = exit_code(
        &run.status,
        err.as_ref().map(|e| e.category.as_str()),
        err.as_ref().map(|e| e.code.as_str()),
    );
    run.result = Some(result);
    let now = now_ms();
    run.updated_at = rfc3339(now);
    run.completed_at = Some(rfc3339(now));
    persist_run(s, &run);
    s.shared.runs.settled(&run.id);
    let _ = s
        .shared
        .outbox
        .notify(&RunUpdated(RunEnvelope { run: run.clone() }));
    for r in waiting_replies {
        r.ok(&RunEnvelope { run: run.clone() });
    }
    process_deferred(s, later);
    s.drain_queue();
}

/// Finds a run by id: a live or finished ephemeral run in memory, else the store.
fn stored_run(
    shared: &Host,
    store: Option<&Store>,
    run_id: &str,
) -> Result<Option<(Run, String)>, String> {
    if let Some(r) = shared.runs.ephemeral(run_id) {
        return Ok(Some((r, shared.owner.instance.clone())));
    }
    let Some(store) = store else { return Ok(None) };
    let Some(row) = store.get_run(run_id).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let mut run: Run = serde_json::from_value(row.body.clone())
        .map_err(|e| format!("stored run is damaged: {e}"))?;
    run.status = row.status.clone();
    Ok(Some((run, row.owner_instance)))
}

/// `run/interrupt` on the catalog pool: routes to the session of a live run of this
/// process; answers terminal runs as they are; `run_not_attached` for a live run owned
/// by another process; `run_not_found` otherwise.
pub fn run_interrupt_catalog(
    shared: &Arc<Host>,
    store: &Store,
    p: RunInterruptParams,
    reply: Responder,
) {
    let run_id = p.run_id.trim().to_owned();
    if run_id.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: run_id is required",
        );
    }
    let live = shared.runs.live_thread(&run_id);
    if let Some(thread_id) = live {
        return shared.registry.dispatch(
            shared,
            &thread_id,
            SessionMsg::Request {
                req: ClientRequest::RunInterrupt(p),
                reply,
            },
        );
    }
    match stored_run(shared, Some(store), &run_id) {
        Err(e) => reply.err(ErrorCode::InternalError, e),
        Ok(None) => reply.err(ErrorCode::RunNotFound, format!("run {run_id:?} not found")),
        Ok(Some((run, _))) if run.is_terminal() => reply.ok(&RunEnvelope { run }),
        Ok(Some((_, owner))) if owner != shared.owner.instance => reply.err(
            ErrorCode::RunNotAttached,
            format!("run {run_id:?} is not attached to this app-server"),
        ),
        Ok(Some((run, _))) => reply.ok(&RunEnvelope { run }),
    }
}

/// `run/interrupt` reaching an idle session (the run already settled).
pub fn run_interrupt_idle(s: &mut Session, p: RunInterruptParams, reply: Responder) {
    match stored_run(&s.shared, s.store.as_deref(), p.run_id.trim()) {
        Ok(Some((run, _))) => reply.ok(&RunEnvelope { run }),
        Ok(None) => reply.err(
            ErrorCode::RunNotFound,
            format!("run {:?} not found", p.run_id),
        ),
        Err(e) => reply.err(ErrorCode::InternalError, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_exec_spec() {
        assert_eq!(exit_code("completed", None, None), 0);
        assert_eq!(exit_code("timed_out", None, None), 4);
        assert_eq!(exit_code("interrupted", None, None), 5);
        assert_eq!(exit_code("failed", Some("auth"), None), 7);
        assert_eq!(exit_code("failed", Some("permission_denied"), None), 3);
        assert_eq!(exit_code("failed", Some("local"), None), 8);
        assert_eq!(exit_code("failed", None, None), 1);
    }

    #[test]
    fn schema_errors_name_the_pointer_and_the_rule() {
        let e =
            check_schema(&json!({"type": "object", "properties": {"summary": {"type": "strng"}}}))
                .unwrap_err();
        assert!(
            e.starts_with("at /properties/summary/type: \"strng\" is not a JSON Schema type"),
            "{e}"
        );
        assert!(e.contains("anyOf"), "{e}");
        let e = check_schema(&json!({"type": "string", "pattern": "("})).unwrap_err();
        assert!(e.starts_with("at /pattern: "), "{e}");
        let e = check_schema(&json!({"type": "object", "required": "x"})).unwrap_err();
        assert!(e.starts_with("at /required: "), "{e}");
        assert!(check_schema(&json!({"type": "object"})).is_ok());
    }

    #[test]
    fn structured_from_fence() {
        assert_eq!(
            parse_structured("```json\n{\"a\":1}\n```").unwrap(),
            json!({"a":1})
        );
        assert!(parse_structured("nope").is_err());
    }
}
