//! The projector's answers to what external engines raise during a turn: questions
//! (relayed through `user-question/*`), approvals (answered by the permission mode) and
//! native steer acknowledgements (`engines.md` §1.9–§1.10).

use super::Driver;
use crate::engine::{Answer, ApprovalDecision, ApprovalRequest, Control, Question};

impl Driver<'_> {
    fn control(&self, c: Control) {
        if let Some(tx) = &self.ctl {
            let _ = tx.send(c);
        }
    }

    /// Relays a native question to the client; the answer returns as a control.
    pub(super) fn relay_question(
        &mut self,
        request_id: String,
        _call_id: String,
        _questions: Vec<Question>,
    ) {
        // No bridge for native questions yet: answer "no answer" (never a chosen option).
        self.control(Control::Answer {
            request_id,
            answer: Answer::Question(None),
        });
    }

    /// Answers an approval request by the conversation's permission mode: a mode that
    /// never asks accepts nothing it was not configured for — decline (fail closed).
    pub(super) fn answer_approval(&mut self, request_id: String, _request: ApprovalRequest) {
        self.control(Control::Answer {
            request_id,
            answer: Answer::Approval(ApprovalDecision::Decline),
        });
    }

    /// The engine stopped waiting for `request_id`.
    pub(super) fn revoke_question(&mut self, request_id: &str) {
        self.questions.retain(|q| q != request_id);
    }

    /// Turn end: every question still open is revoked.
    pub(super) fn revoke_questions(&mut self) {
        self.questions.clear();
    }

    /// The native turn acknowledged a steer: it enters history now.
    pub(super) fn steer_accepted(&mut self, input_id: &str) {
        let row = self
            .s
            .inputs_in(&[wuu_store::input_state::PENDING])
            .into_iter()
            .find(|r| r.id == input_id);
        if let Some(row) = row {
            self.commit_steer(row);
        }
    }

    /// The native side refused the steer: it stays pending (never silently moved into a
    /// later turn).
    pub(super) fn steer_refused(&mut self, input_id: &str, message: &str) {
        log::info!("steer {input_id} refused by the engine: {message}");
    }

    /// The steer's acknowledgement was lost.
    pub(super) fn steer_unconfirmed(&mut self, input_id: &str) {
        log::warn!("steer {input_id}: delivery unconfirmed");
    }
}
