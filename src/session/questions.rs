//! User questions: the built-in `ask_user` tool and the `user-question/*` methods (spec
//! `app-server.md` §3.5, §4.7; seed "回答原生引擎问题"; wire types in
//! `wuu_protocol::questions`).
//!
//! # Offer
//! Every app-server connection is offered questions ([`enabled`]); a client may decline
//! with `initialize.params.capabilities.opt_out_notifications: ["user-question"]`, and
//! `wuu exec` (which never answers server-initiated requests) turns them off. Without
//! the offer `ask_user` is not given to the model, and a call to it anyway fails with
//! "questions are unavailable in non-interactive runs …".
//!
//! # Life of a question
//! `ask_user` registers the request in [`Questions`] (owned by [`Host`]), emits
//! `user-question/requested` and waits on its helper thread. The request settles exactly
//! once, emitting `user-question/resolved {outcome}`:
//! - `answered` — `user-question/respond` with valid answers; the answer returns to the
//!   waiting tool call (`reply_to_tool` is always true);
//! - `cancelled` — `user-question/cancel`;
//! - `skipped` — `user-question/cancel {skip: true}` on an `offer` question;
//! - `expired` — an `offer` question not answered within `agent.question_offer_ttl_ms`
//!   (default 20 000 ms) — `user-question/hold` stops that countdown;
//! - `revoked` — its turn ended, was interrupted, or the client disconnected / the
//!   server shut down.
//!
//! Every outcome but `answered` returns "no answer" to the model, never an automatically
//! chosen option. Methods naming a settled request fail with code `error` and say how it
//! settled ("… was revoked …; late answers are refused"). Questions marked `secret` /
//! `is_secret` are refused (secret input is not supported).

use crate::outbound::Responder;
use crate::session::Host;
use crate::tools::ToolOutcome;
use crate::util::reply::{reply, ReplyRx, ReplyTx};
use crossbeam_channel::RecvTimeoutError;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wuu_protocol::*;

/// The capability string a client lists in `capabilities.notifications` to receive
/// questions.
pub const CAPABILITY: &str = "user-question";

/// Default lifetime of an `offer` question (seed: 20 s).
pub const DEFAULT_OFFER_TTL: Duration = Duration::from_secs(20);

/// How many settled request ids are remembered (to refuse late answers precisely).
const SETTLED_MEMORY: usize = 1024;

/// How often a waiting `ask_user` call re-checks interrupt and expiry.
const POLL: Duration = Duration::from_millis(20);

/// How a question settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by the user.
    Answered,
    /// Cancelled by the user.
    Cancelled,
    /// An offer the user skipped.
    Skipped,
    /// An offer that expired.
    Expired,
    /// Revoked by turn end, interrupt, disconnect or shutdown.
    Revoked,
}

impl Outcome {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Cancelled => "cancelled",
            Outcome::Skipped => "skipped",
            Outcome::Expired => "expired",
            Outcome::Revoked => "revoked",
        }
    }
}

/// What the waiting tool call receives.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// How it settled.
    pub outcome: Outcome,
    /// The answers (only for `answered`).
    pub answer: Option<QuestionAnswerSet>,
    /// Why (revocations).
    pub reason: Option<String>,
}

struct Open {
    request: UserQuestionRequest,
    tx: ReplyTx<Resolution>,
    deadline: Option<Instant>,
}

/// The registry of open questions (one per server).
#[derive(Default)]
pub struct Questions {
    open: Mutex<Vec<Open>>,
    settled: Mutex<VecDeque<(String, Outcome, Option<String>)>>,
}

/// Whether questions are offered: on every app-server connection (the desktop and phone
/// clients read `user-question/requested` without declaring anything), unless the
/// client declined them (`capabilities.opt_out_notifications: ["user-question"]`) or the
/// server is `wuu exec`'s (nobody answers there).
pub fn enabled(shared: &Host) -> bool {
    shared.opts.questions
        && !shared
            .capabilities
            .read()
            .opt_out_notifications
            .as_ref()
            .is_some_and(|n| n.iter().any(|s| s == CAPABILITY))
}

/// The offer lifetime: `agent.question_offer_ttl_ms`, default [`DEFAULT_OFFER_TTL`].
pub fn offer_ttl(shared: &Host) -> Duration {
    shared
        .config()
        .agent()
        .question_offer_ttl_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_OFFER_TTL)
}

impl Questions {
    /// Registers a request, emits `user-question/requested`, returns where the
    /// resolution arrives.
    fn open(&self, shared: &Host, request: UserQuestionRequest) -> ReplyRx<Resolution> {
        let (tx, rx) = reply();
        let deadline = (request.mode == "offer").then(|| Instant::now() + offer_ttl(shared));
        let n = UserQuestionRequested {
            thread_id: request.thread_id.clone(),
            turn_id: request.turn_id.clone(),
            request_id: request.request_id.clone(),
            request: request.clone(),
        };
        self.open.lock().push(Open {
            request,
            tx,
            deadline,
        });
        let _ = shared.outbox.notify(&n);
        rx
    }

    /// Settles every open request matching `pred`; returns how many.
    fn settle(
        &self,
        shared: &Host,
        pred: impl Fn(&Open) -> bool,
        outcome: Outcome,
        answer: Option<QuestionAnswerSet>,
        reason: Option<String>,
    ) -> usize {
        let taken: Vec<Open> = {
            let mut open = self.open.lock();
            let mut taken = vec![];
            let mut i = 0;
            while i < open.len() {
                if pred(&open[i]) {
                    taken.push(open.remove(i));
                } else {
                    i += 1;
                }
            }
            let mut settled = self.settled.lock();
            for o in &taken {
                settled.push_back((o.request.request_id.clone(), outcome, reason.clone()));
                if settled.len() > SETTLED_MEMORY {
                    settled.pop_front();
                }
            }
            taken
        };
        let now = crate::util::rfc3339(crate::util::now_ms());
        for o in &taken {
            let _ = shared.outbox.notify(&UserQuestionResolved {
                thread_id: o.request.thread_id.clone(),
                turn_id: o.request.turn_id.clone(),
                request_id: o.request.request_id.clone(),
                outcome: outcome.as_str().into(),
                answer: answer.clone(),
                reason: reason.clone(),
                resolved_at: now.clone(),
            });
            let _ = o.tx.send(Resolution {
                outcome,
                answer: answer.clone(),
                reason: reason.clone(),
            });
        }
        taken.len()
    }

    /// Why `request_id` cannot be acted on (it is not open): `question_settled` for a
    /// settled or revoked question, `question_not_found` for one never offered.
    fn not_open(&self, request_id: &str) -> Refusal {
        let settled = self.settled.lock();
        let shown = crate::util::clip(request_id, 80);
        match settled.iter().rev().find(|(id, _, _)| id == request_id) {
            Some((_, Outcome::Revoked, reason)) => (
                ErrorCode::QuestionSettled,
                format!(
                    "user question {shown:?} was revoked ({}); late answers are refused",
                    reason.as_deref().unwrap_or("its turn ended")
                ),
            ),
            Some((_, outcome, _)) => (
                ErrorCode::QuestionSettled,
                format!(
                    "user question {shown:?} is already settled ({})",
                    outcome.as_str()
                ),
            ),
            None => (
                ErrorCode::QuestionNotFound,
                format!("unknown user question {shown:?}"),
            ),
        }
    }

    /// The open requests, oldest first, optionally of one conversation.
    pub fn list(&self, thread_id: Option<&str>) -> Vec<UserQuestionRequest> {
        self.open
            .lock()
            .iter()
            .filter(|o| thread_id.is_none_or(|t| o.request.thread_id == t))
            .map(|o| o.request.clone())
            .collect()
    }

    /// `user-question/respond`. Errors: `question_not_found` (never offered),
    /// `question_settled` (settled or revoked); `invalid_params` for
    /// `reply_to_tool: false`, answers that name unknown questions, unknown option
    /// labels, several selections without `multi_select`, `custom` where not allowed,
    /// or no answer at all.
    pub fn respond(
        &self,
        shared: &Host,
        p: UserQuestionRespondParams,
    ) -> Result<UserQuestionResolveResult, Refusal> {
        let id = p.request_id.trim().to_owned();
        if p.reply_to_tool == Some(false) {
            return Err(invalid(
                "reply_to_tool: false is not supported: answers return to the waiting tool call",
            ));
        }
        let request = {
            let open = self.open.lock();
            match open.iter().find(|o| o.request.request_id == id) {
                Some(o) => o.request.clone(),
                None => {
                    drop(open);
                    return Err(self.not_open(&id));
                }
            }
        };
        validate_answer(&request, &p.answer).map_err(invalid)?;
        let n = self.settle(
            shared,
            |o| o.request.request_id == id,
            Outcome::Answered,
            Some(p.answer),
            None,
        );
        if n == 0 {
            return Err(self.not_open(&id));
        }
        Ok(UserQuestionResolveResult {
            request_id: id,
            resolved: true,
        })
    }

    /// `user-question/cancel` (`skip: true` skips an offer).
    pub fn cancel(
        &self,
        shared: &Host,
        p: UserQuestionCancelParams,
    ) -> Result<UserQuestionResolveResult, Refusal> {
        let id = p.request_id.trim().to_owned();
        let mode = self
            .open
            .lock()
            .iter()
            .find(|o| o.request.request_id == id)
            .map(|o| o.request.mode.clone());
        let Some(mode) = mode else {
            return Err(self.not_open(&id));
        };
        let skip = p.skip.unwrap_or(false);
        if skip && mode != "offer" {
            return Err(invalid(format!(
                "user question {id:?} is a form (mode ask): it can be cancelled, not skipped"
            )));
        }
        let outcome = if skip {
            Outcome::Skipped
        } else {
            Outcome::Cancelled
        };
        if self.settle(shared, |o| o.request.request_id == id, outcome, None, None) == 0 {
            return Err(self.not_open(&id));
        }
        Ok(UserQuestionResolveResult {
            request_id: id,
            resolved: true,
        })
    }

    /// `user-question/hold`: stops an offer's countdown (no effect on forms); the
    /// question stays open (`resolved: false`).
    pub fn hold(&self, p: UserQuestionHoldParams) -> Result<UserQuestionResolveResult, Refusal> {
        let id = p.request_id.trim().to_owned();
        let mut open = self.open.lock();
        match open.iter_mut().find(|o| o.request.request_id == id) {
            Some(o) => {
                o.deadline = None;
                o.request.held = true;
                o.request.expires_at = None;
                Ok(UserQuestionResolveResult {
                    request_id: id,
                    resolved: false,
                })
            }
            None => {
                drop(open);
                Err(self.not_open(&id))
            }
        }
    }

    /// Expires `request_id` if its deadline passed; true if it did.
    fn expire_due(&self, shared: &Host, request_id: &str) -> bool {
        let now = Instant::now();
        self.settle(
            shared,
            |o| o.request.request_id == request_id && o.deadline.is_some_and(|d| d <= now),
            Outcome::Expired,
            None,
            None,
        ) > 0
    }

    /// Revokes one request.
    fn revoke(&self, shared: &Host, request_id: &str, reason: &str) {
        self.settle(
            shared,
            |o| o.request.request_id == request_id,
            Outcome::Revoked,
            None,
            Some(reason.into()),
        );
    }

    /// Revokes the open questions of a turn (it ended).
    pub fn revoke_turn(&self, shared: &Host, thread_id: &str, turn_id: &str, reason: &str) {
        self.settle(
            shared,
            |o| o.request.thread_id == thread_id && o.request.turn_id == turn_id,
            Outcome::Revoked,
            None,
            Some(reason.into()),
        );
    }

    /// Revokes every open question (disconnect, shutdown).
    pub fn revoke_all(&self, shared: &Host, reason: &str) {
        self.settle(
            shared,
            |_| true,
            Outcome::Revoked,
            None,
            Some(reason.into()),
        );
    }
}

fn validate_answer(req: &UserQuestionRequest, a: &QuestionAnswerSet) -> Result<(), String> {
    if a.answers.is_empty() {
        return Err("answer.answers is empty: answer at least one question, or use user-question/cancel to decline".into());
    }
    let mut seen = HashSet::new();
    for ans in &a.answers {
        let Some(q) = req.questions.iter().find(|q| q.id == ans.id) else {
            return Err(format!(
                "answer names unknown question {:?} (questions: {})",
                ans.id,
                req.questions
                    .iter()
                    .map(|q| q.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        if !seen.insert(ans.id.as_str()) {
            return Err(format!("question {:?} is answered twice", ans.id));
        }
        for s in &ans.selected {
            if !q.options.iter().any(|o| &o.label == s) {
                return Err(format!("question {:?} has no option {s:?}", q.id));
            }
        }
        if ans.selected.len() > 1 && !q.multi_select {
            return Err(format!("question {:?} takes a single selection", q.id));
        }
        let custom = ans.custom.as_deref().map(str::trim).unwrap_or("");
        if !custom.is_empty() && !q.allow_custom && !q.options.is_empty() {
            return Err(format!("question {:?} does not accept custom text", q.id));
        }
        if ans.selected.is_empty() && custom.is_empty() {
            return Err(format!(
                "the answer to question {:?} selects nothing and has no custom text",
                q.id
            ));
        }
    }
    Ok(())
}

/// A refused `user-question/*` request: its code and message.
type Refusal = (ErrorCode, String);

fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

/// Handles `user-question/*` (routed inline: in-memory operations).
pub fn handle(shared: &Host, req: ClientRequest, reply: Responder) {
    let r = match req {
        ClientRequest::UserQuestionList(p) => {
            let t = p
                .thread_id
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty());
            return reply.ok(&UserQuestionListResult {
                questions: shared.questions.list(t),
            });
        }
        ClientRequest::UserQuestionRespond(p) => shared.questions.respond(shared, p),
        ClientRequest::UserQuestionCancel(p) => shared.questions.cancel(shared, p),
        ClientRequest::UserQuestionHold(p) => shared.questions.hold(p),
        other => Err((
            ErrorCode::InternalError,
            format!("{} is not a user-question method", other.method()),
        )),
    };
    match r {
        Ok(v) => reply.ok(&v),
        Err((code, m)) => reply.err(code, m),
    }
}

// ---------------------------------------------------------------------------------------
// The `ask_user` tool.
// ---------------------------------------------------------------------------------------

/// Name of the tool.
pub const TOOL: &str = "ask_user";

/// The `ask_user` tool spec.
pub fn spec() -> crate::provider::chat::ToolSpec {
    crate::provider::chat::ToolSpec {
        name: TOOL.into(),
        description: "Ask the user one or more questions and wait for the answer. Use \
            mode \"ask\" (default) for a form the user must answer or cancel; mode \
            \"offer\" for an optional, skippable suggestion that expires after about 20 \
            seconds. A question that is cancelled, skipped or expires returns no answer: \
            never assume one. Do not ask for secrets (passwords, tokens): secret input is \
            refused."
            .into(),
        parameters: crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string", "description": "Short id, unique in this call (default q1, q2, …)."},
                            "question": {"type": "string"},
                            "header": {"type": "string", "description": "Short label (a few words)."},
                            "options": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "label": {"type": "string"},
                                        "description": {"type": "string"}
                                    },
                                    "required": ["label"]
                                }
                            },
                            "multi_select": {"type": "boolean"},
                            "allow_custom": {"type": "boolean", "description": "Accept free text besides the options."}
                        },
                        "required": ["question"]
                    }
                },
                "mode": {"type": "string", "enum": ["ask", "offer"]}
            },
            "required": ["questions"]
        }"#,
        ),
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OptionArg {
    Label(String),
    Full {
        label: String,
        #[serde(default)]
        description: Option<String>,
    },
}

#[derive(Deserialize)]
struct QuestionArg {
    #[serde(default)]
    id: Option<String>,
    question: String,
    #[serde(default)]
    header: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    options: Option<Vec<OptionArg>>,
    #[serde(default)]
    multi_select: Option<bool>,
    #[serde(default)]
    allow_custom: Option<bool>,
    #[serde(default)]
    secret: Option<bool>,
    #[serde(default)]
    is_secret: Option<bool>,
}

#[derive(Deserialize)]
struct AskArgs {
    questions: Vec<QuestionArg>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    reply_to_tool: Option<bool>,
    #[serde(default)]
    secret: Option<bool>,
    #[serde(default)]
    is_secret: Option<bool>,
}

fn error(msg: impl Into<String>) -> ToolOutcome {
    ToolOutcome {
        output: msg.into(),
        is_error: true,
        ..Default::default()
    }
}

/// Builds the request from the tool's arguments (errors are for the model).
fn build_request(
    thread_id: &str,
    turn_id: &str,
    call_id: &str,
    args: &str,
) -> Result<UserQuestionRequest, String> {
    let args: AskArgs = serde_json::from_str(if args.trim().is_empty() { "{}" } else { args })
        .map_err(|e| format!("invalid arguments for ask_user: {e}"))?;
    if args.secret == Some(true) || args.is_secret == Some(true) {
        return Err("secret input is not supported: never ask the user for passwords, tokens or other secrets through ask_user".into());
    }
    if args.reply_to_tool == Some(false) {
        return Err(
            "reply_to_tool: false is not supported: the answer always returns to this tool call"
                .into(),
        );
    }
    let mode = args.mode.as_deref().map(str::trim).unwrap_or("ask");
    if mode != "ask" && mode != "offer" {
        return Err(format!("invalid mode {mode:?}: use \"ask\" or \"offer\""));
    }
    if args.questions.is_empty() {
        return Err("questions is empty: ask at least one question".into());
    }
    let mut questions = vec![];
    let mut ids = HashSet::new();
    for (i, q) in args.questions.into_iter().enumerate() {
        if q.secret == Some(true) || q.is_secret == Some(true) {
            return Err("secret input is not supported: never ask the user for passwords, tokens or other secrets through ask_user".into());
        }
        if q.question.trim().is_empty() {
            return Err(format!("question {} has no text", i + 1));
        }
        let id =
            q.id.map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("q{}", i + 1));
        if !ids.insert(id.clone()) {
            return Err(format!("duplicate question id {id:?}"));
        }
        let options: Vec<QuestionOption> = q
            .options
            .unwrap_or_default()
            .into_iter()
            .map(|o| match o {
                OptionArg::Label(label) => QuestionOption {
                    label,
                    description: None,
                },
                OptionArg::Full { label, description } => QuestionOption { label, description },
            })
            .collect();
        let mut labels = HashSet::new();
        for o in &options {
            if o.label.trim().is_empty() || !labels.insert(o.label.as_str()) {
                return Err(format!(
                    "question {id:?}: option labels must be non-empty and distinct"
                ));
            }
        }
        let allow_custom = q.allow_custom.unwrap_or(false) || options.is_empty();
        questions.push(Question {
            id,
            question: q.question,
            header: q.header,
            detail: q.detail,
            multi_select: q.multi_select.unwrap_or(false) && !options.is_empty(),
            options,
            allow_custom,
        });
    }
    let now = crate::util::now_ms();
    Ok(UserQuestionRequest {
        request_id: crate::util::new_id("uq"),
        thread_id: thread_id.to_owned(),
        turn_id: turn_id.to_owned(),
        call_id: (!call_id.is_empty()).then(|| call_id.to_owned()),
        mode: mode.to_owned(),
        questions,
        created_at: crate::util::rfc3339(now),
        expires_at: None,
        held: false,
        reply_to_tool: true,
    })
}

/// Runs one `ask_user` call on the calling (helper) thread until the question settles
/// or `cancel` is set (then the question is revoked).
pub fn run_ask_user(
    shared: &Host,
    thread_id: &str,
    turn_id: &str,
    call_id: &str,
    args: &str,
    cancel: &AtomicBool,
) -> ToolOutcome {
    if !enabled(shared) {
        return error(
            "questions are unavailable in non-interactive runs: the connected client cannot \
             answer questions (it did not opt in to \"user-question\"). Continue without asking.",
        );
    }
    if shared.is_closing() {
        return error("questions are unavailable: the server is shutting down");
    }
    let mut request = match build_request(thread_id, turn_id, call_id, args) {
        Ok(r) => r,
        Err(e) => return error(e),
    };
    if request.mode == "offer" {
        let ttl = offer_ttl(shared);
        request.expires_at = Some(crate::util::rfc3339(
            crate::util::now_ms() + ttl.as_millis() as i64,
        ));
    }
    let request_id = request.request_id.clone();
    let questions = request.questions.clone();
    let rx = shared.questions.open(shared, request);
    let resolution = loop {
        if cancel.load(Ordering::SeqCst) {
            shared
                .questions
                .revoke(shared, &request_id, "the turn was interrupted");
        } else {
            shared.questions.expire_due(shared, &request_id);
        }
        match rx.recv_timeout(POLL) {
            Ok(r) => break r,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Resolution {
                    outcome: Outcome::Revoked,
                    answer: None,
                    reason: Some("the question registry went away".into()),
                }
            }
        }
    };
    outcome_for_model(&questions, resolution)
}

/// Asks a question an external engine raised (seed "回答原生引擎问题"): registers the
/// prepared request (`reply_to_tool: true`, the native item id in `call_id`), emits
/// `user-question/requested` and waits on the calling (helper) thread until it settles
/// or `cancel` is set (then it is revoked with `revoke_reason`).
pub fn ask_for_engine(
    shared: &Host,
    mut request: UserQuestionRequest,
    cancel: &AtomicBool,
    revoke_reason: &str,
) -> Resolution {
    if request.mode == "offer" {
        let ttl = offer_ttl(shared);
        request.expires_at = Some(crate::util::rfc3339(
            crate::util::now_ms() + ttl.as_millis() as i64,
        ));
    }
    let request_id = request.request_id.clone();
    let rx = shared.questions.open(shared, request);
    loop {
        if cancel.load(Ordering::SeqCst) {
            shared.questions.revoke(shared, &request_id, revoke_reason);
        } else {
            shared.questions.expire_due(shared, &request_id);
        }
        match rx.recv_timeout(POLL) {
            Ok(r) => return r,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Resolution {
                    outcome: Outcome::Revoked,
                    answer: None,
                    reason: Some("the question registry went away".into()),
                }
            }
        }
    }
}

fn outcome_for_model(questions: &[Question], r: Resolution) -> ToolOutcome {
    match (r.outcome, r.answer) {
        (Outcome::Answered, Some(a)) => {
            let mut text = String::from("The user answered:\n");
            let mut answers = vec![];
            for ans in &a.answers {
                let q = questions.iter().find(|q| q.id == ans.id);
                let qtext = q.map(|q| q.question.as_str()).unwrap_or("");
                text.push_str(&format!("- [{}] {qtext}\n", ans.id));
                if !ans.selected.is_empty() {
                    text.push_str(&format!("  selected: {}\n", ans.selected.join("; ")));
                }
                if let Some(c) = ans.custom.as_deref().filter(|c| !c.trim().is_empty()) {
                    text.push_str(&format!("  custom answer: {c}\n"));
                }
                answers.push(json!({"id": ans.id, "selected": ans.selected, "custom": ans.custom}));
            }
            let unanswered: Vec<&str> = questions
                .iter()
                .filter(|q| !a.answers.iter().any(|x| x.id == q.id))
                .map(|q| q.id.as_str())
                .collect();
            if !unanswered.is_empty() {
                text.push_str(&format!(
                    "Not answered (no option was chosen): {}\n",
                    unanswered.join(", ")
                ));
            }
            ToolOutcome {
                output: text.trim_end().to_owned(),
                is_error: false,
                permission_denied: false,
                detail: json!({"outcome": "answered", "answers": answers}),
            }
        }
        (outcome, _) => {
            let why = match outcome {
                Outcome::Cancelled => "the user cancelled the question".to_owned(),
                Outcome::Skipped => "the user skipped the question".to_owned(),
                Outcome::Expired => "the question expired before the user answered".to_owned(),
                _ => format!(
                    "the question was revoked ({})",
                    r.reason.as_deref().unwrap_or("its turn ended")
                ),
            };
            ToolOutcome {
                output: format!("No answer: {why}. No option was chosen; do not assume an answer."),
                is_error: outcome == Outcome::Revoked,
                permission_denied: false,
                detail: json!({"outcome": outcome.as_str(), "answers": Value::Array(vec![])}),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tool_spec_requires_the_questions() {
        let s = spec();
        assert_eq!(s.parameters["type"], "object");
        assert_eq!(s.parameters["required"], json!(["questions"]));
        assert_eq!(
            s.parameters["properties"]["mode"]["enum"],
            json!(["ask", "offer"])
        );
    }

    #[test]
    fn builds_requests_and_refuses_secrets() {
        let r = build_request(
            "t",
            "u",
            "c",
            r#"{"questions":[{"question":"DB?","options":["pg",{"label":"sqlite"}]}],"mode":"offer"}"#,
        )
        .unwrap();
        assert_eq!(r.questions[0].id, "q1");
        assert_eq!(r.questions[0].options[1].label, "sqlite");
        assert!(!r.questions[0].allow_custom);
        assert_eq!(r.mode, "offer");
        let e = build_request(
            "t",
            "u",
            "c",
            r#"{"questions":[{"question":"pw?","secret":true}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("secret"), "{e}");
        assert!(build_request("t", "u", "c", r#"{"questions":[]}"#).is_err());
        assert!(build_request(
            "t",
            "u",
            "c",
            r#"{"questions":[{"question":"x"}],"mode":"x"}"#
        )
        .is_err());
    }

    #[test]
    fn validates_answers() {
        let r = build_request(
            "t",
            "u",
            "c",
            r#"{"questions":[{"id":"a","question":"DB?","options":["pg","sqlite"]},{"id":"b","question":"Name?"}]}"#,
        )
        .unwrap();
        let ok = |v: Value| validate_answer(&r, &serde_json::from_value(v).unwrap());
        assert!(ok(json!({"answers":[{"id":"a","selected":["pg"]}]})).is_ok());
        assert!(ok(json!({"answers":[{"id":"b","selected":[],"custom":"x"}]})).is_ok());
        assert!(ok(json!({"answers":[{"id":"a","selected":["mysql"]}]})).is_err());
        assert!(ok(json!({"answers":[{"id":"a","selected":["pg","sqlite"]}]})).is_err());
        assert!(ok(json!({"answers":[{"id":"a","selected":[],"custom":"x"}]})).is_err());
        assert!(ok(json!({"answers":[{"id":"z","selected":["pg"]}]})).is_err());
        assert!(ok(json!({"answers":[]})).is_err());
    }
}
