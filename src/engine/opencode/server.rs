//! The shared `opencode serve` child (spec `engines.md` §1.7): one per binary path,
//! started on first use and shared (weakly, by reference count) by every conversation
//! bound to OpenCode; a dead server is replaced on next use. Its stdout is read by one
//! thread (the listening line, then drained), its events by one SSE reader thread on
//! `/global/event` that routes each event to the turn listening for its native
//! session; when either ends, the server is dead and every listening turn hears it (its
//! channel disconnects). Requests go over `ureq` with basic auth, no proxy, no
//! redirects, `?directory=<workspace root>`; a non-2xx answer is an error naming the
//! method, path and status only (bodies may carry configuration secrets).

use super::{child_env, ChildSettings, MAX_BODY, START_TIMEOUT, USERNAME};
use crate::engine::child::{recv_watched, Process, Waited, Watch};
use base64::Engine as _;
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Capacity of each turn's event channel, in events (the SSE reader blocks when full:
/// backpressure, never a drop).
const EVENT_CAPACITY: usize = 256;

/// What the server's threads share with it.
struct Routes {
    dead: AtomicBool,
    /// Native session id → (workspace root, the listening turn's channel).
    subs: Mutex<HashMap<String, (String, Sender<Value>)>>,
}

impl Routes {
    /// The server is gone: every listening turn's channel disconnects.
    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.subs.lock().clear();
    }
}

/// A running `opencode serve` whose health was checked.
pub struct Server {
    proc: Process,
    base: String,
    auth: String,
    /// Setup and small requests (limit [`START_TIMEOUT`]).
    short: ureq::Agent,
    /// The prompt request, which lasts as long as the native turn.
    long: ureq::Agent,
    routes: Arc<Routes>,
    /// The server version (`/global/health`).
    pub version: String,
}

fn agent(limit: Option<Duration>) -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(limit)
            .user_agent(format!("wuu/{}", env!("CARGO_PKG_VERSION")))
            .build(),
    )
}

fn servers() -> &'static Mutex<HashMap<PathBuf, Weak<Server>>> {
    static SERVERS: OnceLock<Mutex<HashMap<PathBuf, Weak<Server>>>> = OnceLock::new();
    SERVERS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The shared server of `binary` (started in `root` on first use, with `settings`).
/// While it starts, an interrupt seen by `watch` kills it and ends the wait.
pub fn shared_server(
    binary: &Path,
    root: &Path,
    settings: &ChildSettings,
    watch: Option<&Watch>,
) -> Result<Arc<Server>, String> {
    let mut map = servers().lock();
    if let Some(s) = map.get(binary).and_then(Weak::upgrade) {
        if !s.is_dead() {
            return Ok(s);
        }
    }
    let server = Arc::new(Server::start(binary, root, settings, watch)?);
    map.insert(binary.to_path_buf(), Arc::downgrade(&server));
    Ok(server)
}

/// The base URL of a listening line `opencode server listening on http://127.0.0.1:<port>`
/// (http, 127.0.0.1, a port, nothing else); `None` for any other line.
pub fn listening_address(line: &str) -> Option<Result<String, String>> {
    let addr = line
        .trim()
        .strip_prefix("opencode server listening on ")?
        .trim();
    let port = addr
        .strip_prefix("http://127.0.0.1:")
        .map(|p| p.strip_suffix('/').unwrap_or(p));
    Some(
        match port
            .filter(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        {
            Some(p) if p.parse::<u16>().is_ok_and(|n| n > 0) => Ok(format!("http://127.0.0.1:{p}")),
            _ => Err("OpenCode published an invalid loopback address".to_owned()),
        },
    )
}

/// Percent-encodes a query component (RFC 3986 unreserved characters pass).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encodes a path segment (a native id).
pub fn segment(s: &str) -> String {
    encode(s)
}

impl Server {
    fn start(
        binary: &Path,
        root: &Path,
        settings: &ChildSettings,
        watch: Option<&Watch>,
    ) -> Result<Server, String> {
        let password = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let env = child_env(binary, settings, &password)?;
        let (proc, stdout) = Process::spawn(
            "opencode",
            binary,
            &super::launch_args(),
            root,
            &env,
            settings.ledger.as_deref(),
        )?;
        let routes = Arc::new(Routes {
            dead: AtomicBool::new(false),
            subs: Mutex::new(HashMap::new()),
        });
        let (line_tx, lines) = bounded::<String>(16);
        let r = routes.clone();
        crate::util::spawn("opencode-stdout".into(), move || {
            drain_stdout(stdout, line_tx, &r)
        })
        .map_err(|e| format!("cannot start the opencode reader: {e}"))?;
        let until = Instant::now() + START_TIMEOUT;
        let base = loop {
            match recv_watched(&lines, until, watch) {
                Waited::Message(l) => match listening_address(&l) {
                    Some(Ok(b)) => break b,
                    Some(Err(e)) => return Err(e),
                    None => continue,
                },
                // Dropping the half-started child kills it.
                Waited::Interrupted => return Err("interrupted while OpenCode started".into()),
                Waited::TimedOut => {
                    return Err(with_tail(
                        &proc,
                        &format!(
                            "OpenCode did not publish its local server address within {} s",
                            START_TIMEOUT.as_secs()
                        ),
                    ))
                }
                Waited::Disconnected => {
                    proc.wait_exit(Duration::from_millis(300));
                    return Err(with_tail(
                        &proc,
                        "OpenCode exited before publishing its local server address",
                    ));
                }
            }
        };
        drop(lines);
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USERNAME}:{password}"))
        );
        let mut server = Server {
            proc,
            base,
            auth,
            short: agent(Some(START_TIMEOUT)),
            long: agent(None),
            routes,
            version: String::new(),
        };
        let health = server.call("GET", "/global/health", None, root)?;
        let version = health
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if health.get("healthy").and_then(Value::as_bool) != Some(true)
            || !version.starts_with("1.")
        {
            return Err(format!(
                "unsupported OpenCode server version {:?}; this integration requires 1.x",
                crate::util::clip(&version, 40)
            ));
        }
        server.version = version;
        server.subscribe_events()?;
        Ok(server)
    }

    /// Opens `/global/event` and starts its reader thread; returns once the server
    /// said `server.connected` (its listener is registered: no event is missed).
    fn subscribe_events(&self) -> Result<(), String> {
        let resp = self
            .long
            .get(format!("{}/global/event", self.base))
            .header("authorization", &self.auth)
            .header("accept", "text/event-stream")
            .call()
            .map_err(|e| format!("OpenCode GET /global/event: {e}"))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(format!("OpenCode GET /global/event: HTTP {status}"));
        }
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !ctype.starts_with("text/event-stream") {
            return Err("OpenCode event endpoint did not return SSE".into());
        }
        let body = resp.into_body().into_reader();
        let (ready_tx, ready) = bounded(1);
        let routes = self.routes.clone();
        crate::util::spawn("opencode-events".into(), move || {
            read_events(body, &routes, ready_tx)
        })
        .map_err(|e| format!("cannot start the opencode event reader: {e}"))?;
        match ready.recv_timeout(START_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(_) => Err(with_tail(
                &self.proc,
                "OpenCode's event stream did not connect",
            )),
        }
    }

    /// Whether the server (its child or its event stream) ended.
    pub fn is_dead(&self) -> bool {
        self.routes.dead.load(Ordering::SeqCst)
    }

    /// Ends the server (a wedged one): every listening turn hears it.
    pub fn kill(&self) {
        self.routes.die();
        self.proc.kill();
    }

    /// `what`, with the child's last stderr line when it has one.
    pub fn explain(&self, what: &str) -> String {
        self.proc.wait_exit(Duration::from_millis(300));
        with_tail(&self.proc, what)
    }

    /// Listens for the events of native session `session` (workspace `root`); the
    /// channel disconnects when the server dies. A later listener of the same session
    /// replaces this one.
    pub fn listen(&self, session: &str, root: &Path) -> Receiver<Value> {
        let (tx, rx) = bounded(EVENT_CAPACITY);
        if !self.is_dead() {
            self.routes.subs.lock().insert(
                session.to_owned(),
                (root.to_string_lossy().into_owned(), tx),
            );
        }
        rx
    }

    /// Stops listening for `session`.
    pub fn unlisten(&self, session: &str) {
        self.routes.subs.lock().remove(session);
    }

    /// A setup or small request: `method path?directory=root` with `body` as JSON; the
    /// answer's JSON (`null` for an empty body). Errors: transport, non-2xx, a body over
    /// [`MAX_BODY`] or not JSON.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        root: &Path,
    ) -> Result<Value, String> {
        self.request(&self.short, method, path, body, root)
    }

    /// A request without a time limit (the prompt, answered at the native turn's end).
    pub fn call_long(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        root: &Path,
    ) -> Result<Value, String> {
        self.request(&self.long, method, path, body, root)
    }

    fn request(
        &self,
        agent: &ureq::Agent,
        method: &str,
        path: &str,
        body: Option<&Value>,
        root: &Path,
    ) -> Result<Value, String> {
        let url = format!(
            "{}{path}?directory={}",
            self.base,
            encode(&root.to_string_lossy())
        );
        let bytes = body.map(|b| b.to_string());
        let sent = match (method, bytes) {
            ("GET", _) => agent.get(&url).header("authorization", &self.auth).call(),
            (_, None) => agent
                .post(&url)
                .header("authorization", &self.auth)
                .send_empty(),
            ("PATCH", Some(b)) => agent
                .patch(&url)
                .header("authorization", &self.auth)
                .header("content-type", "application/json")
                .send(b.as_bytes()),
            (_, Some(b)) => agent
                .post(&url)
                .header("authorization", &self.auth)
                .header("content-type", "application/json")
                .send(b.as_bytes()),
        };
        let resp = sent.map_err(|e| format!("OpenCode {method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(format!("OpenCode {method} {path}: HTTP {status}"));
        }
        let mut data = Vec::new();
        resp.into_body()
            .into_reader()
            .take(MAX_BODY as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| format!("OpenCode {method} {path}: reading the answer: {e}"))?;
        if data.len() > MAX_BODY {
            return Err(format!(
                "OpenCode {method} {path}: the answer exceeds the size limit"
            ));
        }
        if data.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&data)
            .map_err(|e| format!("OpenCode {method} {path}: invalid answer: {e}"))
    }
}

fn with_tail(proc: &Process, what: &str) -> String {
    match proc.last_stderr_line() {
        Some(line) => format!("{what}: {line}"),
        None => what.to_owned(),
    }
}

/// Reads the child's stdout: lines go to `lines` until the starter stops listening,
/// then are logged and dropped; EOF means the child is gone.
fn drain_stdout(stdout: impl Read, lines: Sender<String>, routes: &Routes) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    let mut lines = Some(lines);
    loop {
        buf.clear();
        match (&mut reader).take(64 * 1024).read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf).trim().to_owned();
        if line.is_empty() {
            continue;
        }
        log::debug!("opencode stdout: {}", crate::util::clip(&line, 300));
        if let Some(tx) = &lines {
            if tx.send(line).is_err() {
                lines = None;
            }
        }
    }
    log::info!("opencode server output ended");
    routes.die();
}

/// The native session an event concerns (`properties.sessionID`, or that of its
/// `info` or `part`).
fn session_of(payload: &Value) -> Option<&str> {
    let p = payload.get("properties")?;
    p.get("sessionID")
        .or_else(|| p.pointer("/info/sessionID"))
        .or_else(|| p.pointer("/part/sessionID"))
        .and_then(Value::as_str)
}

/// The SSE reader: each event's payload goes to the turn listening for its session;
/// `server.instance.disposed` to every turn of that workspace. The stream's end kills
/// the routes (the server is dead).
fn read_events(body: impl Read, routes: &Routes, ready: Sender<()>) {
    let mut sse = crate::provider::sse::SseReader::new(BufReader::with_capacity(64 * 1024, body));
    let mut ready = Some(ready);
    loop {
        let ev = match sse.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(e) => {
                log::warn!("opencode event stream: {e}");
                break;
            }
        };
        if ev.data.trim().is_empty() {
            continue;
        }
        if ev.data.len() > MAX_BODY {
            log::warn!("opencode sent an event over {MAX_BODY} bytes; skipped");
            continue;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(&ev.data) else {
            log::warn!(
                "opencode sent an event that is not JSON ({} bytes)",
                ev.data.len()
            );
            continue;
        };
        let directory = v
            .get("directory")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let payload = match v.get_mut("payload") {
            Some(p) => p.take(),
            None => v,
        };
        let ty = payload.get("type").and_then(Value::as_str).unwrap_or("");
        log::trace!("opencode event {ty}");
        match ty {
            "server.connected" => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            "sync" | "server.heartbeat" => {}
            "server.instance.disposed" => {
                let targets: Vec<Sender<Value>> = routes
                    .subs
                    .lock()
                    .values()
                    .filter(|(dir, _)| directory.as_deref().is_none_or(|d| d == dir))
                    .map(|(_, tx)| tx.clone())
                    .collect();
                for tx in targets {
                    let _ = tx.send(payload.clone());
                }
            }
            _ => {
                let Some(sid) = session_of(&payload) else {
                    continue;
                };
                let tx = routes.subs.lock().get(sid).map(|(_, tx)| tx.clone());
                if let Some(tx) = tx {
                    // Blocks while the turn is behind; fails when it stopped listening.
                    let _ = tx.send(payload);
                }
            }
        }
    }
    log::info!("opencode event stream ended");
    routes.die();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_line_must_name_a_loopback_http_port() {
        assert_eq!(
            listening_address("opencode server listening on http://127.0.0.1:4096"),
            Some(Ok("http://127.0.0.1:4096".into()))
        );
        assert!(listening_address("some other line").is_none());
        for bad in [
            "http://0.0.0.0:4096",
            "https://127.0.0.1:4096",
            "http://127.0.0.1:4096/path",
            "http://127.0.0.1:99999",
            "http://127.0.0.1:",
            "http://user@127.0.0.1:1",
        ] {
            let line = format!("opencode server listening on {bad}");
            assert!(matches!(listening_address(&line), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn query_components_are_percent_encoded() {
        assert_eq!(encode("/tmp/a b/ü"), "%2Ftmp%2Fa%20b%2F%C3%BC");
    }
}
