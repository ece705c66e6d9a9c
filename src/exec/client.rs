//! exec's connection to the in-process app-server ([`MemoryClient`]) and its bounded
//! notification subscription (spec `exec.md` §7.5).
//!
//! A pump thread reads every frame the server writes, at once and forever (so the
//! server's writer never waits on exec), and sorts it:
//! - responses (`id`, no `method`) go to [`Subscription::responses`];
//! - notifications go to [`Subscription::events`], a queue bounded at
//!   [`MAX_PENDING_EVENTS`] events and [`MAX_PENDING_BYTES`] bytes (frame sizes). When a
//!   notification does not fit, the pump waits for room (**backpressure**: the server's
//!   output, then the session and the provider stream, wait with it) for up to
//!   [`DEFAULT_BACKPRESSURE`] (20 s; `WUU_EXEC_BACKPRESSURE_MS` overrides it), so a
//!   consumer that pauses for a few seconds (a CI log shipper, a full pipe) costs nothing.
//!   Only when the queue stays full that long does the subscription **overflow**: it stops
//!   delivering events and reports [`Failure::Overflow`]. Nothing is dropped silently: the
//!   run then fails with a protocol error (exit 6). The bound stays below the server's own
//!   notification deadline (30 s), so exec is the one that reports it;
//! - a request from the server (`method` and `id`) is a protocol failure
//!   ([`Failure::ServerRequest`]): exec answers none;
//! - an undecodable frame is [`Failure::BadFrame`]; the end of the stream is
//!   [`Failure::Closed`].
//!
//! Only the first failure is reported (channel of capacity 1).

use crate::server::MemoryClient;
use crate::session::ServerOptions;
use crossbeam_channel::{bounded, unbounded, Receiver, SendTimeoutError, Sender};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most notifications queued between the server and the JSONL writer.
pub const MAX_PENDING_EVENTS: usize = 1024;

/// Most bytes (serialized notification frames) queued between the server and the
/// JSONL writer: 16 MiB (one larger notification is still taken when nothing is queued).
pub const MAX_PENDING_BYTES: usize = 16 * 1024 * 1024;

/// How long the pump holds a notification back while the queue is full before the
/// subscription overflows (20 s).
pub const DEFAULT_BACKPRESSURE: Duration = Duration::from_secs(20);

/// The backpressure bound: `WUU_EXEC_BACKPRESSURE_MS` (milliseconds) when set and
/// valid, else [`DEFAULT_BACKPRESSURE`].
pub fn backpressure_limit() -> Duration {
    std::env::var("WUU_EXEC_BACKPRESSURE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_BACKPRESSURE)
}

/// One notification from the server.
#[derive(Debug, Clone)]
pub struct Notification {
    /// Wire method, e.g. `turn/started`.
    pub method: String,
    /// Params (`Null` when absent).
    pub params: Value,
    /// Size of the frame in bytes (counted against [`MAX_PENDING_BYTES`]).
    pub size: usize,
}

/// One response from the server.
#[derive(Debug, Clone)]
pub struct Response {
    /// The request id (as a string).
    pub id: String,
    /// `result` on success.
    pub result: Option<Value>,
    /// `error` object on failure (`{code, message}`).
    pub error: Option<Value>,
}

/// Why the subscription ended before the run settled. Every variant is a protocol
/// failure (exit 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// More than [`MAX_PENDING_EVENTS`] events or [`MAX_PENDING_BYTES`] bytes stayed
    /// pending for the whole backpressure bound.
    Overflow {
        /// Events queued when it overflowed.
        events: usize,
        /// Bytes queued when it overflowed.
        bytes: usize,
        /// How long the pump waited for room, ms.
        waited_ms: u64,
    },
    /// The server sent a request (method named).
    ServerRequest(String),
    /// A frame that is not a JSON object.
    BadFrame(String),
    /// The server closed its output.
    Closed,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Overflow {
                events,
                bytes,
                waited_ms,
            } => write!(
                f,
                "event subscription overflow: {events} events / {bytes} bytes pending (limits {MAX_PENDING_EVENTS} / {MAX_PENDING_BYTES}) for {waited_ms} ms; the output consumer stopped reading"
            ),
            Failure::ServerRequest(m) => write!(
                f,
                "the app-server sent a request ({m}) that wuu exec does not answer"
            ),
            Failure::BadFrame(e) => write!(f, "undecodable app-server frame: {e}"),
            Failure::Closed => {
                f.write_str("app-server notification stream closed before Run completed")
            }
        }
    }
}

/// The consumer side of the subscription.
pub struct Subscription {
    /// Notifications, in order (bounded, see module docs).
    pub events: Receiver<Notification>,
    /// Responses to exec's requests.
    pub responses: Receiver<Response>,
    /// The first failure, if any.
    pub failure: Receiver<Failure>,
    bytes: Arc<AtomicUsize>,
}

impl Subscription {
    /// Marks a received notification as handed over (frees its bytes).
    pub fn release(&self, n: &Notification) {
        self.bytes.fetch_sub(n.size, Ordering::SeqCst);
    }
}

/// The connection: the in-memory client plus the subscription fed by the pump.
pub struct Connection {
    client: Option<MemoryClient>,
    tx: crossbeam_channel::Sender<Vec<u8>>,
    next_id: AtomicU64,
    /// The subscription.
    pub sub: Subscription,
    closing: Arc<AtomicBool>,
}

impl Connection {
    /// Starts the server in-process and the pump. Errors: the server could not start
    /// (config, store).
    pub fn start(opts: ServerOptions) -> Result<Connection, String> {
        let client = MemoryClient::start(opts)?;
        let tx = client.tx.clone().ok_or("the connection is closed")?;
        let rx = client.rx.clone();
        let (ev_tx, ev_rx) = bounded(MAX_PENDING_EVENTS);
        let (resp_tx, resp_rx) = unbounded();
        let (fail_tx, fail_rx) = bounded(1);
        let bytes = Arc::new(AtomicUsize::new(0));
        let closing = Arc::new(AtomicBool::new(false));
        let b2 = bytes.clone();
        let c2 = closing.clone();
        crate::util::spawn("wuu-exec-pump".into(), move || {
            pump(rx, ev_tx, resp_tx, fail_tx, b2, c2)
        })
        .map_err(|e| format!("cannot start the event pump: {e}"))?;
        Ok(Connection {
            client: Some(client),
            tx,
            next_id: AtomicU64::new(1),
            sub: Subscription {
                events: ev_rx,
                responses: resp_rx,
                failure: fail_rx,
                bytes,
            },
            closing,
        })
    }

    /// Sends a request; returns its id. Errors: the server stopped reading input
    /// within 5 s, or is gone.
    pub fn send(&self, method: &str, params: Value) -> Result<String, String> {
        let id = format!("exec-{}", self.next_id.fetch_add(1, Ordering::SeqCst));
        let line =
            serde_json::to_vec(&serde_json::json!({"id": id, "method": method, "params": params}))
                .map_err(|e| e.to_string())?;
        self.tx
            .send_timeout(line, Duration::from_secs(5))
            .map_err(|_| format!("the app-server is not accepting requests ({method})"))?;
        Ok(id)
    }

    /// Closes the connection: graceful server shutdown, waiting at most `within`.
    /// Returns false when the shutdown did not finish in time (the caller exits anyway).
    pub fn close(mut self, within: Duration) -> bool {
        self.closing.store(true, Ordering::SeqCst);
        let Some(client) = self.client.take() else {
            return true;
        };
        drop(self.tx);
        let (done_tx, done_rx) = bounded::<()>(1);
        let spawned = crate::util::spawn("wuu-exec-close".into(), move || {
            client.close();
            let _ = done_tx.send(());
        });
        spawned.is_ok() && done_rx.recv_timeout(within).is_ok()
    }
}

fn pump(
    rx: Receiver<Vec<u8>>,
    events: Sender<Notification>,
    responses: Sender<Response>,
    failure: Sender<Failure>,
    bytes: Arc<AtomicUsize>,
    closing: Arc<AtomicBool>,
) {
    let limit = backpressure_limit();
    let mut failed = false;
    let fail = |f: Failure, failed: &mut bool| {
        if !*failed {
            *failed = true;
            log::debug!("exec subscription failure: {f}");
            let _ = failure.try_send(f);
        }
    };
    for frame in rx.iter() {
        let size = frame.len();
        let v: Value = match serde_json::from_slice(&frame) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                fail(Failure::BadFrame("not a JSON object".into()), &mut failed);
                continue;
            }
            Err(e) => {
                fail(Failure::BadFrame(e.to_string()), &mut failed);
                continue;
            }
        };
        drop(frame);
        let method = v.get("method").and_then(Value::as_str).map(str::to_owned);
        let id = v.get("id").filter(|i| !i.is_null()).map(|i| match i {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        match (method, id) {
            (Some(m), Some(_)) => fail(Failure::ServerRequest(m), &mut failed),
            (Some(method), None) => {
                if failed {
                    continue;
                }
                let mut v = v;
                let n = Notification {
                    method,
                    params: v.get_mut("params").map(Value::take).unwrap_or(Value::Null),
                    size,
                };
                let started = Instant::now();
                let deadline = started + limit;
                // Wait (bounded) for byte budget, then for a slot.
                let fits = |bytes: &AtomicUsize| {
                    bytes.load(Ordering::SeqCst) + size <= MAX_PENDING_BYTES || events.is_empty()
                };
                while !fits(&bytes) && Instant::now() < deadline && !closing.load(Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let result = if fits(&bytes) {
                    bytes.fetch_add(size, Ordering::SeqCst);
                    let r = events.send_deadline(n, deadline);
                    if r.is_err() {
                        bytes.fetch_sub(size, Ordering::SeqCst);
                    }
                    r.map_err(|e| matches!(e, SendTimeoutError::Timeout(_)))
                } else {
                    Err(!closing.load(Ordering::SeqCst))
                };
                if let Err(true) = result {
                    fail(
                        Failure::Overflow {
                            events: events.len(),
                            bytes: bytes.load(Ordering::SeqCst),
                            waited_ms: started.elapsed().as_millis() as u64,
                        },
                        &mut failed,
                    );
                }
            }
            (None, Some(id)) => {
                let mut v = v;
                let _ = responses.send(Response {
                    id,
                    result: v.get_mut("result").map(Value::take),
                    error: v.get_mut("error").map(Value::take),
                });
            }
            (None, None) => fail(
                Failure::BadFrame("a frame with neither method nor id".into()),
                &mut failed,
            ),
        }
    }
    if !closing.load(Ordering::SeqCst) {
        fail(Failure::Closed, &mut failed);
    }
}
