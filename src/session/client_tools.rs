//! Tools served by the client through reverse requests (user questions, browser
//! control). Issue 7 fills this in; until then no such tool is offered.

use crate::provider::ToolSpec;
use crate::server::Shared;
use crate::tools::{ToolEvent, ToolHandle, ToolOutcome};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Tool specs to offer, given what the client negotiated in `initialize`.
pub fn specs(_shared: &Shared) -> Vec<ToolSpec> {
    vec![]
}

/// Whether `name` is a client-served tool.
pub fn handles(_name: &str) -> bool {
    false
}

/// Starts a client-served tool call.
pub fn spawn(
    _shared: &Arc<Shared>,
    _thread_id: &str,
    _turn_id: &str,
    name: &str,
    _args: &str,
) -> ToolHandle {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = tx.send(ToolEvent::Done(ToolOutcome {
        output: format!("unknown tool {name:?}"),
        is_error: true,
        ..Default::default()
    }));
    ToolHandle::from_parts(rx, Arc::new(AtomicBool::new(false)))
}

/// The turn ended (completed, failed, interrupted): revoke its open requests.
pub fn turn_ended(_shared: &Arc<Shared>, _thread_id: &str, _turn_id: &str) {}
