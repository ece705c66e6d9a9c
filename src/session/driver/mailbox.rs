//! The session mailbox while a turn runs: requests that touch the active turn
//! (`turn/interrupt`, `run/interrupt`, a forced archive, shutdown) are answered or
//! deferred until the turn settles; conversation reads are served as usual (spec
//! `app-server.md` §3.2–§3.3, §6 rule 9).

use super::{Driver, Stop};
use crate::session::SessionMsg;
use wuu_protocol::*;

impl Driver<'_> {
    /// Serves the mailbox while the turn runs. Requests that touch the active turn are
    /// answered here; conversation reads are served normally; archive and shutdown
    /// interrupt the turn and wait for its settlement.
    pub(super) fn on_mailbox(&mut self, msg: SessionMsg) {
        // Once a request waits for the settlement (forced archive, shutdown), later
        // requests of this conversation wait behind it, in order.
        if !self.deferred.is_empty() {
            self.deferred.push(msg);
            return;
        }
        match msg {
            SessionMsg::Request { req, reply } => match req {
                ClientRequest::TurnInterrupt(p) => {
                    let current = self.turn_id();
                    if p.turn_id.as_deref().is_some_and(|t| !t.is_empty() && t != current) {
                        return reply.err(
                            ErrorCode::Error,
                            format!("turn {:?} is not the active turn ({current})", p.turn_id.unwrap_or_default()),
                        );
                    }
                    self.stop.get_or_insert(Stop::Interrupt("interrupted".into()));
                    self.stop_acknowledged = true;
                    // The worker tree of this conversation freezes with it.
                    crate::session::agents::freeze(&self.s.shared, &self.s.id);
                    // Pending steers and queued input become durable held work.
                    self.s.hold_all_pending();
                    reply.ok(&OkResult { ok: true });
                }
                ClientRequest::RunInterrupt(p)
                    if Some(p.run_id.trim()) == self.opts.run_id.as_deref() =>
                {
                    let reason = if p.reason.as_deref() == Some("timeout") {
                        "timeout"
                    } else {
                        "interrupted"
                    };
                    self.stop.get_or_insert(Stop::Interrupt(reason.into()));
                    self.stop_acknowledged = true;
                    crate::session::agents::freeze(&self.s.shared, &self.s.id);
                    self.deferred.push(SessionMsg::Request {
                        req: ClientRequest::RunInterrupt(p),
                        reply,
                    });
                }
                ClientRequest::TurnStart(_)
                | ClientRequest::RunStart(_)
                | ClientRequest::ThreadCompactStart(_) => reply.err(
                    ErrorCode::ThreadBusy,
                    format!("thread {:?} already has a running turn", self.s.id),
                ),
                ClientRequest::ThreadDelete(_) => reply.err(
                    ErrorCode::ThreadBusy,
                    format!("thread {:?} is running; interrupt it first", self.s.id),
                ),
                ClientRequest::ThreadArchive(p) if p.archived && !p.force.unwrap_or(false) => reply
                    .err(
                        ErrorCode::ThreadBusy,
                        "cannot archive a running thread (send force: true after the user confirms)",
                    ),
                ClientRequest::ThreadArchive(p) if p.archived => {
                    self.stop.get_or_insert(Stop::Interrupt("archived".into()));
                    self.stop_acknowledged = true;
                    self.s.hold_all_pending();
                    self.deferred.push(SessionMsg::Request {
                        req: ClientRequest::ThreadArchive(p),
                        reply,
                    });
                }
                other => self.s.handle(SessionMsg::Request { req: other, reply }),
            },
            SessionMsg::Shutdown { done } => {
                self.stop.get_or_insert(Stop::Interrupt("shutdown".into()));
                self.deferred.push(SessionMsg::Shutdown { done });
            }
            other => self.s.handle(other),
        }
    }
}
