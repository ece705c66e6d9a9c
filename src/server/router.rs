//! The reader thread's loop: parse each line, answer envelope errors, decode params
//! through the method table, and route (inline, new session, session mailbox, catalog
//! pool). The reader never touches the disk or the network.

use super::{init, Shared};
use crate::outbound::transport::{LineRead, LineSource, MAX_LINE_BYTES};
use crate::outbound::Responder;
use crate::session::SessionMsg;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_protocol::{
    ClientRequest, DecodeError, ErrorCode, ErrorObject, Message, ProtocolError, Request, Response,
    Route,
};

/// Reads and routes lines until end of input or the end that `shutdown` asks for.
pub fn read_loop(shared: &Arc<Shared>, mut source: Box<dyn LineSource>) {
    let mut buf = Vec::with_capacity(8 * 1024);
    loop {
        let read = source.next_line(&mut buf);
        match serve_read(shared, read, &buf) {
            Flow::Continue => {}
            Flow::End => return,
            Flow::Shutdown(reply) => return close_while_reading(shared, source, reply),
        }
        if buf.capacity() > 1024 * 1024 {
            buf = Vec::with_capacity(8 * 1024);
        }
    }
}

/// `shutdown`: the end (refuse new work, settle what runs, answer the request, flush)
/// runs on this thread while a `wuu-reader-closing` thread goes on reading, so that a
/// request sent after `shutdown` (another `shutdown` too) is answered `server_closed`
/// instead of never read (a client that pipelines writes its next requests before the
/// answer). Once the end is
/// done, the connection ends when the input has been quiet for [`QUIET`] (what was
/// already sent is served), or after [`LAST_LINES`] at most (spec app-server.md §2.2).
fn close_while_reading(shared: &Arc<Shared>, mut source: Box<dyn LineSource>, reply: Responder) {
    shared
        .host
        .closing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // Locked while a line is served, so the end never cuts one short.
    let state = Arc::new(parking_lot::Mutex::new(Closing::default()));
    let (s2, state2) = (shared.clone(), state.clone());
    let reading = crate::util::spawn("wuu-reader-closing".into(), move || {
        let mut buf = Vec::with_capacity(8 * 1024);
        loop {
            state2.lock().reading_since = Some(Instant::now());
            let read = source.next_line(&mut buf);
            let mut st = state2.lock();
            st.reading_since = None;
            if st.ended {
                return;
            }
            match serve_read(&s2, read, &buf) {
                Flow::Continue => {}
                Flow::End => {
                    st.gone = true;
                    return;
                }
                // Refused like any request now: the end under way waits for every
                // request read to be answered, so this one must not wait for the end.
                Flow::Shutdown(again) => {
                    again.err(ErrorCode::ServerClosed, "the server is shutting down");
                }
            }
            drop(st);
            if buf.capacity() > 1024 * 1024 {
                buf = Vec::with_capacity(8 * 1024);
            }
        }
    });
    if let Err(e) = &reading {
        log::warn!("cannot read on while shutting down ({e}): later lines are not answered");
    }
    shared.shutdown(Some(reply));
    let until = Instant::now() + LAST_LINES;
    loop {
        let mut st = state.lock();
        let quiet = st.reading_since.is_some_and(|t| t.elapsed() >= QUIET);
        if reading.is_err() || st.gone || quiet || Instant::now() >= until {
            st.ended = true;
            break;
        }
        drop(st);
        std::thread::sleep(Duration::from_millis(5));
    }
    shared.host.outbox.flush();
}

/// After `shutdown`'s end, how long the input must have been quiet before the
/// connection ends.
const QUIET: Duration = Duration::from_millis(50);

/// After `shutdown`'s end, the longest the connection stays open for lines still coming.
const LAST_LINES: Duration = Duration::from_secs(1);

/// The reading after `shutdown` ([`close_while_reading`]).
#[derive(Default)]
struct Closing {
    /// The connection has ended: a line read now is not served.
    ended: bool,
    /// When the closing reader began waiting for its next line (`None` while it serves
    /// one).
    reading_since: Option<Instant>,
    /// The input ended.
    gone: bool,
}

/// Serves one read of the input: a line is parsed and routed, an over-long line
/// answered `invalid_request`; end of input or a read error ends the loop.
fn serve_read(shared: &Arc<Shared>, read: std::io::Result<LineRead>, buf: &[u8]) -> Flow {
    match read {
        Ok(LineRead::Eof) => {
            log::debug!("input closed");
            Flow::End
        }
        Err(e) => {
            log::warn!("input error: {e}");
            Flow::End
        }
        Ok(LineRead::TooLong(n)) => {
            shared.host.outbox.send(
                serde_json::to_vec(&Response::err(
                    None,
                    ErrorObject::new(
                        ErrorCode::InvalidRequest,
                        format!(
                            "invalid request: line too long ({n} bytes; the limit is {MAX_LINE_BYTES} bytes)"
                        ),
                    ),
                ))
                .expect("serialize"),
            );
            Flow::Continue
        }
        Ok(LineRead::Line) => {
            if buf.iter().all(u8::is_ascii_whitespace) {
                return Flow::Continue;
            }
            // A bug triggered by one line must not end the connection: the line's
            // request gets `internal_error` from its dropped responder and the next
            // line is served.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle_line(shared, buf)))
                .unwrap_or_else(|_| {
                    log::error!("handling a request line panicked; serving the next line");
                    Flow::Continue
                })
        }
    }
}

/// What the reader does after a line.
enum Flow {
    Continue,
    /// End of input: the caller ends the connection.
    End,
    /// A `shutdown` request (its responder): the connection ends once it is answered.
    Shutdown(Responder),
}

fn handle_line(shared: &Arc<Shared>, line: &[u8]) -> Flow {
    log::trace!("in: {}", String::from_utf8_lossy(line));
    match Message::parse_line(line) {
        Err(e) => {
            let frame =
                serde_json::to_vec(&Response::err(e.id, ErrorObject::new(e.code, e.message)))
                    .expect("serialize");
            shared.host.outbox.send(frame);
            Flow::Continue
        }
        Ok(Message::Response(resp)) => {
            crate::session::reverse::deliver(&shared.host, resp);
            Flow::Continue
        }
        Ok(Message::Notification(n)) => {
            // A request without id: executed, not answered (spec §1.2).
            dispatch(
                shared,
                Request {
                    id: wuu_protocol::RequestId::from(""),
                    method: n.method,
                    params: n.params,
                },
                false,
                line,
            )
        }
        Ok(Message::Request(req)) => dispatch(shared, req, true, line),
    }
}

/// The path of the invalid param of `method` in the request `line` (its params read
/// again), or `None` (see [`super::params_path::params_path`]).
fn invalid_param_path(method: &str, line: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    super::params_path::params_path(method, v.get("params").unwrap_or(&serde_json::Value::Null))
}

/// Decodes and routes one request; `line` is its raw line, read again only to locate an
/// invalid param ([`super::params_path`]).
fn dispatch(shared: &Arc<Shared>, req: Request, answer: bool, line: &[u8]) -> Flow {
    let id = answer.then_some(req.id);
    let method = req.method;
    let decoded = match ClientRequest::decode(&method, req.params) {
        Ok(d) => d,
        Err(DecodeError::UnknownMethod(m)) => {
            Responder::new(id, shared.host.outbox.clone(), "?")
                .err(ErrorCode::MethodNotFound, format!("unknown method {m:?}"));
            if !answer {
                let _ = shared.host.outbox.notify(&ProtocolError {
                    code: "method_not_found".into(),
                    message: format!("unknown method {m:?}"),
                });
            }
            return Flow::Continue;
        }
        Err(DecodeError::InvalidParams(m)) => {
            let m = match invalid_param_path(&method, line) {
                Some(path) => {
                    m.replacen("invalid params: ", &format!("invalid params: {path}: "), 1)
                }
                None => m,
            };
            Responder::new(id, shared.host.outbox.clone(), "?").err(ErrorCode::InvalidParams, m);
            return Flow::Continue;
        }
    };
    let reply = Responder::new(id, shared.host.outbox.clone(), decoded.method());
    if let ClientRequest::Shutdown(_) = decoded {
        return Flow::Shutdown(reply);
    }
    if shared.host.is_closing() {
        reply.err(ErrorCode::ServerClosed, "the server is shutting down");
        return Flow::Continue;
    }
    if let Err(m) = check_named_threads(&decoded).and_then(|()| check_bounds(&decoded)) {
        reply.err(ErrorCode::InvalidParams, m);
        return Flow::Continue;
    }
    match decoded.route() {
        Route::Inline => init::handle_inline(&shared.host, decoded, reply),
        Route::Spawn => crate::session::spawn_new(&shared.host, decoded, reply),
        Route::Session(thread_id) => {
            let thread_id = thread_id.trim().to_owned();
            if thread_id.is_empty() {
                reply.err(
                    ErrorCode::InvalidParams,
                    "invalid params: thread_id is required",
                );
            } else {
                let reply = reply.with_thread(&thread_id);
                shared.host.registry.dispatch(
                    &shared.host,
                    &thread_id,
                    SessionMsg::Request {
                        req: decoded,
                        reply,
                    },
                );
            }
        }
        Route::Resolve(Some(thread_id)) if !thread_id.trim().is_empty() => {
            let thread_id = thread_id.trim().to_owned();
            shared.host.registry.dispatch(
                &shared.host,
                &thread_id,
                SessionMsg::Request {
                    req: decoded,
                    reply,
                },
            );
        }
        Route::Catalog if matches!(decoded, ClientRequest::ThreadSearch(_)) => {
            shared.search.submit(decoded, reply)
        }
        Route::Catalog => {
            // A listing that nothing has changed since it was built is answered here,
            // from memory (no disk, no hand-off).
            let cached = super::catalog::listing_filter(shared, &decoded)
                .and_then(|f| shared.cached_listing(&f));
            match cached {
                Some(bytes) => {
                    log::trace!("listing answered from the cache");
                    reply.ok_raw(&bytes)
                }
                None => shared.catalog.submit(decoded, reply),
            }
        }
        Route::Resolve(_) => shared.catalog.submit(decoded, reply),
    }
    Flow::Continue
}

/// Checks every conversation id a request names, on the reader, before anything is
/// routed: an id that is too long or holds a control character (NUL included) is
/// `invalid_params` and never reaches a session, a thread name or the store.
fn check_named_threads(req: &ClientRequest) -> Result<(), String> {
    let (field, id) = match req {
        ClientRequest::ThreadResume(p) => ("session_id", p.session_id.as_deref()),
        ClientRequest::ThreadFork(p) => ("thread_id", Some(p.thread_id.as_str())),
        ClientRequest::ThreadHistoryRead(p) => ("thread_id", Some(p.thread_id.as_str())),
        ClientRequest::ThreadActivityRead(p) => ("thread_id", Some(p.thread_id.as_str())),
        ClientRequest::ThreadContentRead(p) => ("thread_id", Some(p.thread_id.as_str())),
        ClientRequest::UserQuestionList(p) => ("thread_id", p.thread_id.as_deref()),
        other => {
            return match other.route() {
                Route::Session(id) => crate::util::check_thread_id("thread_id", id.trim()),
                _ => Ok(()),
            }
        }
    };
    match id {
        Some(id) => crate::util::check_thread_id(field, id.trim()),
        None => Ok(()),
    }
}

/// Bounds checked on the reader before a request occupies a worker.
fn check_bounds(req: &ClientRequest) -> Result<(), String> {
    use super::catalog::MAX_SEARCH_QUERY_BYTES;
    if let ClientRequest::ThreadSearch(p) = req {
        let n = p.query.as_deref().map_or(0, |q| q.trim().len());
        if n > MAX_SEARCH_QUERY_BYTES {
            return Err(format!(
                "invalid params: query: {n} bytes is longer than the limit of {MAX_SEARCH_QUERY_BYTES} bytes"
            ));
        }
    }
    Ok(())
}
