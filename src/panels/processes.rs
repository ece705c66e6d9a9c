//! `process/list|read|write|resize|stop`: clients' view of a conversation's background
//! processes (spec `app-server.md` §3.7; the processes are [`crate::tools::background`]).
//! Answered on the panels' process pool: a read may wait (`wait_ms`), a stop waits for
//! the end of the process.

use crate::outbound::Responder;
use crate::session::Host;
use crate::tools::background::{self, Processes};
use std::sync::Arc;
use wuu_protocol::*;

fn table(shared: &Host, thread_id: &str) -> Result<Arc<Processes>, String> {
    shared
        .background
        .of(thread_id.trim(), false)
        .map_err(|e| e.to_string())
}

/// Serves one `process/*` request.
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    let bad = |reply: Responder, m: String| reply.err(ErrorCode::InvalidParams, m);
    match req {
        ClientRequest::ProcessList(p) => match table(shared, &p.thread_id) {
            Ok(t) => reply.ok(&ProcessListResult {
                processes: t.list(),
            }),
            Err(m) => bad(reply, m),
        },
        ClientRequest::ProcessRead(p) => {
            let t = match table(shared, &p.thread_id) {
                Ok(t) => t,
                Err(m) => return bad(reply, m),
            };
            if p.wait_ms.is_some_and(|w| w > background::MAX_WAIT_MS) {
                return bad(
                    reply,
                    format!(
                        "invalid params: wait_ms must be between 0 and {}",
                        background::MAX_WAIT_MS
                    ),
                );
            }
            let max = p
                .max_bytes
                .map(|m| m.min(background::READ_MAX_BYTES as u64) as usize)
                .unwrap_or(background::READ_DEFAULT_BYTES);
            match t.read(
                &p.process_id,
                Some(p.offset_bytes.unwrap_or(0)),
                max,
                p.wait_ms.unwrap_or(0),
                false,
            ) {
                Ok((process, r)) => reply.ok(&ProcessReadResult {
                    process,
                    output: r.output,
                    truncated: r.truncated,
                    start_offset: r.start_offset,
                    end_offset: r.end_offset,
                    total_bytes: r.total_bytes,
                    timed_out: r.timed_out,
                }),
                Err(m) => reply.err(ErrorCode::Error, m),
            }
        }
        ClientRequest::ProcessWrite(p) => {
            let t = match table(shared, &p.thread_id) {
                Ok(t) => t,
                Err(m) => return bad(reply, m),
            };
            match t.write(&p.process_id, p.input.as_bytes()) {
                Ok((process, n)) => reply.ok(&ProcessWriteResult {
                    process,
                    bytes_written: n as u64,
                }),
                Err(m) => reply.err(ErrorCode::Error, m),
            }
        }
        ClientRequest::ProcessResize(p) => {
            if !(2..=500).contains(&p.cols) || !(2..=200).contains(&p.rows) {
                return bad(
                    reply,
                    "invalid params: terminal size is out of range (cols 2..=500, rows 2..=200)"
                        .into(),
                );
            }
            let t = match table(shared, &p.thread_id) {
                Ok(t) => t,
                Err(m) => return bad(reply, m),
            };
            match t.resize(&p.process_id, p.cols as u16, p.rows as u16) {
                Ok(process) => reply.ok(&ProcessResult { process }),
                Err(m) => reply.err(ErrorCode::Error, m),
            }
        }
        ClientRequest::ProcessStop(p) => {
            let t = match table(shared, &p.thread_id) {
                Ok(t) => t,
                Err(m) => return bad(reply, m),
            };
            match t.stop(&p.process_id) {
                Ok(process) => reply.ok(&ProcessResult { process }),
                Err(m) => reply.err(ErrorCode::Error, m),
            }
        }
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not a process method", other.method()),
        ),
    }
}
