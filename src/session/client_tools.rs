//! Tools served by the client through reverse requests and notifications: `ask_user`
//! ([`super::questions`]) and the browser tools ([`super::browser`]); also `load_skill`
//! ([`super::skills`]), which needs the server state the file tools lack.
//!
//! Offered to the model only when the client negotiated them in `initialize`:
//! `ask_user` unless the client declined it (see [`questions::enabled`]); the browser
//! tools when `capabilities.reverse_rpc.methods` lists the six base browser methods
//! (`browser_finalize` also needs `browser/finalize`). Each call runs on its own helper
//! thread and reports one [`ToolEvent::Done`]; [`ToolHandle::cancel`] (an interrupt)
//! revokes its question or stops waiting for its reverse request.

use crate::provider::chat::{ToolSpec, Tools};
use crate::session::Host;
use crate::tools::{ToolEvent, ToolHandle, ToolOutcome};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{browser, questions};

/// Tool specs to offer, given what the client negotiated in `initialize`.
pub fn specs(shared: &Host) -> Vec<ToolSpec> {
    let mut out = vec![];
    if questions::enabled(shared) {
        out.push(questions::spec());
    }
    out.extend(browser::specs(shared));
    // Host-served (not client-served), but it needs the server state the file tools do
    // not have: the skill roots and the store that counts uses.
    out.extend(crate::session::skills::tool_spec(shared));
    out
}

/// Every tool the model is offered in `mode`: the built-in tools plus the client-served
/// ones; none at all on a `--no-tools` server.
pub fn offered(
    shared: &Host,
    mode: crate::tools::PermissionMode,
    role: &super::agents::Role,
) -> Tools {
    if shared.opts.no_tools {
        return Tools::default();
    }
    let mut extras = specs(shared);
    extras.extend(super::agents::tools::specs(role));
    // MCP servers start here, at the first turn that asks for tools.
    extras.extend(shared.mcp.specs(&shared.config(), mode));
    crate::tools::shared_specs(mode).joined(extras)
}

/// [`offered`] without starting MCP servers (views such as the context composition).
pub fn offered_now(
    shared: &Host,
    mode: crate::tools::PermissionMode,
    role: &super::agents::Role,
) -> Vec<ToolSpec> {
    if shared.opts.no_tools {
        return vec![];
    }
    let mut out = crate::tools::specs(mode);
    out.extend(specs(shared));
    out.extend(super::agents::tools::specs(role));
    out.extend(shared.mcp.ready_specs(mode));
    out
}

/// Whether a call to `name` is served here rather than by the built-in tools: the
/// client-served tools, and every tool on a `--no-tools` server (refused by [`spawn`]).
pub fn handles(shared: &Host, name: &str) -> bool {
    shared.opts.no_tools
        || crate::mcp::is_mcp_tool(name)
        || name == questions::TOOL
        || browser::is_tool(name)
        || name == crate::tools::skill::NAME
        || super::agents::tools::is_tool(name)
}

/// Starts a client-served tool call on a helper thread. `call_id` is the model's tool
/// call id (carried by `user-question/requested` as `call_id`).
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    shared: &Arc<Host>,
    thread_id: &str,
    role: &super::agents::Role,
    turn_id: &str,
    call_id: &str,
    name: &str,
    args: &str,
) -> ToolHandle {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let cancel = Arc::new(AtomicBool::new(false));
    let handle = ToolHandle::from_parts(rx, cancel.clone());
    if shared.opts.no_tools {
        let _ = tx.send(ToolEvent::Done(ToolOutcome::error(format!(
            "tool {name:?} is not available: this server runs without tools (--no-tools)"
        ))));
        return handle;
    }
    let role = role.clone();
    let (shared, thread_id, turn_id, call_id, name_owned, args) = (
        shared.clone(),
        thread_id.to_owned(),
        turn_id.to_owned(),
        call_id.to_owned(),
        name.to_owned(),
        args.to_owned(),
    );
    let tx2 = tx.clone();
    let spawned = crate::util::spawn(format!("client-tool-{name}"), move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if name_owned == questions::TOOL {
                questions::run_ask_user(&shared, &thread_id, &turn_id, &call_id, &args, &cancel)
            } else if name_owned == crate::tools::skill::NAME {
                crate::session::skills::run_tool(&shared, &thread_id, &args)
            } else if super::agents::tools::is_tool(&name_owned) {
                super::agents::tools::run(&shared, &thread_id, &role, &name_owned, &args, &cancel)
            } else {
                let ctx = browser::CallCtx {
                    shared: &shared,
                    thread_id: &thread_id,
                    turn_id: &turn_id,
                    cancel: &cancel,
                };
                browser::run_tool(&ctx, &name_owned, &args)
            }
        }))
        .unwrap_or_else(|_| ToolOutcome {
            output: format!("internal error in {name_owned}"),
            is_error: true,
            ..Default::default()
        });
        let _ = tx2.send(ToolEvent::Done(outcome));
    });
    if let Err(e) = spawned {
        let _ = tx.send(ToolEvent::Done(ToolOutcome {
            output: format!("internal error: cannot start tool thread: {e}"),
            is_error: true,
            ..Default::default()
        }));
    }
    handle
}

/// The turn ended (completed, failed, interrupted): revokes its open questions and ends
/// its browser execution (`browser/turn_ended`, sent from a helper thread).
pub fn turn_ended(shared: &Arc<Host>, thread_id: &str, turn_id: &str) {
    shared
        .questions
        .revoke_turn(shared, thread_id, turn_id, "the turn ended");
    browser::turn_ended(shared, thread_id, turn_id);
}
