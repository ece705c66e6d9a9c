//! The projector's answers to what external engines raise during a turn: questions
//! (relayed through `user-question/*`), approvals, and native steer acknowledgements
//! (`engines.md` §1.9–§1.10; seed "回答原生引擎问题", "排队输入与崩溃恢复").

use super::Driver;
use crate::engine::{Answer, ApprovalDecision, ApprovalRequest, Control, Question, QuestionAnswer};
use crate::session::questions;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wuu_protocol::{QuestionOption, UserQuestionRequest};

/// A question relayed to the client.
pub(super) struct Relayed {
    /// The engine's request id.
    pub request_id: String,
    /// Set to revoke it.
    pub cancel: Arc<AtomicBool>,
}

impl Driver<'_> {
    fn control(&self, c: Control) {
        if let Some(tx) = &self.ctl {
            let _ = tx.send(c);
        }
    }

    /// Relays a native question to the client as a `user-question/requested` with
    /// `reply_to_tool: true`; the answer returns to the engine as a control. Without a
    /// client that answers questions the engine gets "no answer" at once.
    pub(super) fn relay_question(
        &mut self,
        request_id: String,
        call_id: String,
        qs: Vec<Question>,
        blocking: bool,
    ) {
        if !questions::enabled(&self.s.shared) || self.s.shared.is_closing() {
            return self.control(Control::Answer {
                request_id,
                answer: Answer::Question(None),
            });
        }
        let now = crate::util::now_ms();
        let request = UserQuestionRequest {
            request_id: crate::util::new_id("uq"),
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            call_id: Some(call_id).filter(|c| !c.is_empty()),
            mode: if blocking { "ask" } else { "offer" }.into(),
            questions: qs
                .into_iter()
                .map(|q| {
                    let options: Vec<QuestionOption> = q
                        .options
                        .into_iter()
                        .map(|(label, description)| QuestionOption {
                            label,
                            description: Some(description).filter(|d| !d.is_empty()),
                        })
                        .collect();
                    wuu_protocol::Question {
                        id: q.id,
                        question: q.question,
                        header: Some(q.header).filter(|h| !h.is_empty()),
                        detail: None,
                        multi_select: false,
                        allow_custom: q.is_other || options.is_empty(),
                        options,
                    }
                })
                .collect(),
            created_at: crate::util::rfc3339(now),
            expires_at: None,
            held: false,
            reply_to_tool: true,
        };
        let cancel = Arc::new(AtomicBool::new(false));
        self.questions.push(Relayed {
            request_id: request_id.clone(),
            cancel: cancel.clone(),
        });
        let (shared, ctl) = (self.s.shared.clone(), self.ctl.clone());
        let spawned = std::thread::Builder::new()
            .name("wuu-engine-question".into())
            .spawn(move || {
                let r = questions::ask_for_engine(&shared, request, &cancel, "the turn ended");
                let answers = r.answer.map(|a| {
                    a.answers
                        .into_iter()
                        .map(|x| QuestionAnswer {
                            id: x.id,
                            selected: x.selected,
                            custom: x.custom,
                        })
                        .collect()
                });
                if let Some(tx) = ctl {
                    let _ = tx.send(Control::Answer {
                        request_id,
                        answer: Answer::Question(answers),
                    });
                }
            });
        if let Err(e) = spawned {
            log::error!("cannot relay an engine question: {e}");
        }
    }

    /// Answers an approval request. This host has no interactive approval surface for
    /// external engines: the native sandbox of the permission mode is the boundary, and
    /// a request to go beyond it is declined (fail closed).
    pub(super) fn answer_approval(&mut self, request_id: String, request: ApprovalRequest) {
        log::info!(
            "declining a {} approval request of thread {} ({})",
            request.kind,
            self.s.id,
            request.reason.as_deref().unwrap_or("no reason given")
        );
        self.event(serde_json::json!({
            "type": "approval_declined",
            "kind": request.kind,
            "item_id": request.item_id,
            "command": request.command,
            "file_path": request.file_path,
            "reason": request.reason,
        }));
        self.control(Control::Answer {
            request_id,
            answer: Answer::Approval(ApprovalDecision::Decline),
        });
    }

    /// The engine stopped waiting for `request_id`: its question is revoked.
    pub(super) fn revoke_question(&mut self, request_id: &str) {
        for q in self.questions.iter().filter(|q| q.request_id == request_id) {
            q.cancel.store(true, Ordering::SeqCst);
        }
        self.questions.retain(|q| q.request_id != request_id);
    }

    /// Turn end: every question still open is revoked (late answers are refused).
    pub(super) fn revoke_questions(&mut self) {
        for q in self.questions.drain(..) {
            q.cancel.store(true, Ordering::SeqCst);
        }
    }

    /// The native turn acknowledged the steer with the matching turn id: it enters
    /// history now (committed with the input's consumption).
    pub(super) fn steer_accepted(&mut self, input_id: &str) {
        let row = self
            .s
            .inputs_in(&[wuu_store::input_state::PENDING])
            .into_iter()
            .find(|r| r.id == input_id);
        match row {
            Some(row) => {
                if !self.commit_steer(row) {
                    // Delivered natively but not recorded: never resend it.
                    self.steer_unconfirmed(input_id);
                }
            }
            None => log::warn!("steer {input_id} acknowledged but no longer pending"),
        }
    }

    /// The native side refused the steer explicitly: the input stays pending (it is
    /// never moved silently into a later turn).
    pub(super) fn steer_refused(&mut self, input_id: &str, message: &str) {
        log::info!("steer {input_id} refused by the engine: {message}");
        self.event(serde_json::json!({
            "type": "steer_refused", "input_id": input_id, "message": message,
        }));
    }

    /// The steer was sent but its acknowledgement was lost (or could not be recorded):
    /// the entry is frozen with `delivery_unconfirmed: true` (never edited, withdrawn,
    /// requeued or resent, also after a restart) and held for the user to inspect.
    pub(super) fn steer_unconfirmed(&mut self, input_id: &str) {
        let Some(mut row) = self.s.input_get(input_id) else {
            return;
        };
        if row.state == wuu_store::input_state::CONSUMED {
            return;
        }
        if !row.body.is_object() {
            row.body = serde_json::json!({});
        }
        row.body["delivery_unconfirmed"] = serde_json::Value::Bool(true);
        row.state = wuu_store::input_state::HELD.into();
        row.updated_at_ms = crate::util::now_ms();
        if let Err((_, e)) = self.s.input_put(row) {
            log::error!("marking steer {input_id} unconfirmed: {e}");
        }
        self.s.announce_held();
    }
}
