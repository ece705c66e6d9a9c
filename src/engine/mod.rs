//! The built-in agent loop (under construction).

use crate::server::Responder;
use crate::session::Session;
use wuu_protocol::{ErrorCode, TurnInterruptParams, TurnStartParams};

/// `turn/start`.
pub fn turn_start(_s: &mut Session, _p: TurnStartParams, reply: Responder) {
    reply.err(ErrorCode::Error, "turns are not available in this build yet");
}

/// `turn/interrupt`.
pub fn turn_interrupt(_s: &mut Session, _p: TurnInterruptParams, reply: Responder) {
    reply.err(ErrorCode::Error, "no active turn");
}

/// Stops and settles the active turn before shutdown.
pub fn settle_for_shutdown(_s: &mut Session) {}

/// Stops and settles the active turn before a forced archive.
pub fn interrupt_for_archive(_s: &mut Session) {}
