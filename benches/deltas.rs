//! Delta throughput and latency bench (issue 3).
//!
//! **Throughput.** The fake provider streams N text deltas (`Script::many_deltas`, Chat
//! Completions, 64 KiB buffered writes, as fast as it can) and we measure, in one run, how
//! fast they arrive at three layers:
//!
//! 1. **bare SSE**: a plain `TcpStream` POST + a minimal chunked/SSE line reader (the floor);
//! 2. **in-process provider**: `wuu::provider::start_stream` (HTTP client, SSE and protocol
//!    parsers, the bounded event channel), events read on this thread;
//! 3. **app-server**: the real `wuu app-server` (spawned), `item/agentMessage/delta`
//!    notifications read from its stdout.
//!
//! Rates are taken from the first to the last delta (the fake renders the whole script
//! before its first byte, so "e2e" rates from the request include that). For the
//! app-server, CPU time per thread (`/proc/<pid>/task/*/stat`, 10 ms ticks) shows where
//! the time goes.
//!
//! **Added latency.** A paced SSE server in this process sends M deltas, one every
//! ~200 µs (sleep-paced), each carrying its own send time (ns since a shared `Instant`);
//! each layer reports `arrival − send` per delta (p50 / p99 / max), and the bare reader is the
//! baseline. (Under the saturating throughput stream, "latency" is only queueing; it is
//! shown as `lag` = how far behind the bare reader delta *i* arrives, aligned on the
//! first delta.)
//!
//! Run: `cargo bench --bench deltas`. Env: `WUU_BENCH_DELTAS` (default 100 000),
//! `WUU_BENCH_REPEAT` (rounds, default 5; the median round is reported),
//! `WUU_BENCH_PACED` (paced deltas, default 2 000).

#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use fake_provider::{FakeProvider, Script};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const DELTA: &str = "tok ";

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The shared clock of the paced server and the readers.
fn base() -> Instant {
    static B: OnceLock<Instant> = OnceLock::new();
    *B.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    base().elapsed().as_nanos() as u64
}

/// The send time carried by a paced delta text `"<ns>|"` at the start of `s`.
fn stamp(s: &[u8]) -> Option<u64> {
    let end = s.iter().position(|&b| b == b'|')?;
    std::str::from_utf8(&s[..end]).ok()?.parse().ok()
}

// ---------------------------------------------------------------------------------------
// The three readers. Each calls `on_delta(bytes)` per delta (bytes start at the delta
// text) and returns the arrival times.
// ---------------------------------------------------------------------------------------

/// Layer 1: POST with a plain socket, decode chunked framing, read SSE `data:` lines.
fn bare_sse(root_url: &str, mut on_delta: impl FnMut(&[u8])) -> Vec<Instant> {
    const NEEDLE: &[u8] = b"\"content\":\"";
    let body =
        r#"{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"go"}]}"#;
    let addr = root_url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_nodelay(true).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::with_capacity(256 * 1024, s);
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
    }
    let mut at = Vec::new();
    let mut pending: Vec<u8> = Vec::with_capacity(128 * 1024);
    let mut chunk = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let size = usize::from_str_radix(line.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        chunk.resize(size + 2, 0);
        r.read_exact(&mut chunk).unwrap();
        pending.extend_from_slice(&chunk[..size]);
        let mut start = 0;
        while let Some(p) = pending[start..].iter().position(|&b| b == b'\n') {
            let l = &pending[start..start + p];
            if l.starts_with(b"data: ") {
                if let Some(i) = find(l, NEEDLE) {
                    let text = &l[i + NEEDLE.len()..];
                    if !text.starts_with(b"\"") {
                        at.push(Instant::now());
                        on_delta(text);
                    }
                }
            }
            start += p + 1;
        }
        pending.drain(..start);
    }
    at
}

/// Layer 2: the provider client in this process.
fn in_process(base_url: &str, mut on_delta: impl FnMut(&[u8])) -> Vec<Instant> {
    use wuu::provider::{start_stream, ChatMessage, ChatRequest, Role, StreamEvent};
    let cfg = wuu::config::ProviderConfig {
        provider_type: "openai-compatible".into(),
        base_url: base_url.into(),
        model: "fake-model".into(),
        max_retries: Some(0),
        stream_idle_timeout_ms: Some(30_000),
        ..Default::default()
    };
    let p = wuu::provider::build("fake", &cfg, std::path::Path::new(".")).unwrap();
    let req = ChatRequest {
        model: "fake-model".into(),
        system: "bench".into(),
        messages: vec![ChatMessage::text(Role::User, "go")],
        tools: Default::default(),
        effort: None,
        max_output_tokens: None,
        prompt_cache_key: None,
        output_schema: None,
        temperature: None,
    };
    let mut h = start_stream(p, req);
    let mut at = Vec::new();
    for ev in h.events() {
        match ev {
            StreamEvent::TextDelta { text } => {
                at.push(Instant::now());
                on_delta(text.as_bytes());
            }
            StreamEvent::Done { .. } => break,
            StreamEvent::Failed { error } => panic!("stream failed: {error:?}"),
            _ => {}
        }
    }
    at
}

/// CPU ticks (utime + stime) per thread name of process `pid`.
fn thread_cpu(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in dir.flatten() {
        if let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) {
            if let Some((comm, ticks)) = parse_stat(&stat) {
                *out.entry(comm).or_insert(0) += ticks;
            }
        }
    }
    out
}

/// `(comm, utime + stime)` of a `/proc/…/stat` line.
fn parse_stat(stat: &str) -> Option<(String, u64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let f: Vec<&str> = stat[close + 2..].split(' ').collect();
    let ticks = f[11].parse::<u64>().ok()? + f[12].parse::<u64>().ok()?;
    Some((stat[open + 1..close].to_string(), ticks))
}

/// CPU ticks of the whole process, exited threads included.
fn process_cpu(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    parse_stat(&stat).map(|(_, t)| t).unwrap_or(0)
}

/// A spawned `wuu app-server` with one thread.
struct Server {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    tid: String,
    _root: tempfile::TempDir,
}

impl Server {
    fn start(base_url: &str) -> Server {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let cfg = serde_json::json!({"default_provider": "fake", "providers": {"fake": {
            "type": "openai-compatible", "base_url": base_url, "model": "fake-model",
            "max_retries": 0, "stream_idle_timeout_ms": 30_000}},
            "agent": {"auto_title": false}});
        std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_wuu"))
            .arg("app-server")
            .arg("--workdir")
            .arg(&ws)
            .env("WUU_HOME", &home)
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn wuu");
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        stdin
            .write_all(b"{\"id\":\"s\",\"method\":\"thread/start\",\"params\":{}}\n")
            .unwrap();
        let mut line = Vec::new();
        let tid = loop {
            line.clear();
            out.read_until(b'\n', &mut line).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            if v["id"] == "s" {
                break v["result"]["thread"]["id"].as_str().unwrap().to_owned();
            }
        };
        Server {
            child,
            stdin,
            out,
            tid,
            _root: root,
        }
    }

    /// Layer 3: runs one turn; returns the arrival times, CPU ticks per thread, bytes.
    fn turn(
        &mut self,
        mut on_delta: impl FnMut(&[u8]),
    ) -> (Vec<Instant>, BTreeMap<String, i64>, usize) {
        const NEEDLE: &[u8] = b"\"delta\":\"";
        let pid = self.child.id();
        let start = serde_json::json!({"id": "t", "method": "turn/start",
            "params": {"thread_id": self.tid, "prompt": "go"}})
        .to_string()
            + "\n";
        let cpu0 = thread_cpu(pid);
        let total0 = process_cpu(pid);
        self.stdin.write_all(start.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        let mut at = Vec::new();
        let mut bytes = 0;
        let mut line = Vec::with_capacity(4096);
        loop {
            line.clear();
            if self.out.read_until(b'\n', &mut line).unwrap() == 0 {
                panic!("app-server closed its output");
            }
            if find(&line, b"\"item/agentMessage/delta\"").is_some() {
                at.push(Instant::now());
                bytes += line.len();
                if let Some(i) = find(&line, NEEDLE) {
                    on_delta(&line[i + NEEDLE.len()..]);
                }
            } else if find(&line, b"\"turn/completed\"").is_some() {
                break;
            } else if find(&line, b"\"turn/error\"").is_some() {
                panic!("turn failed: {}", String::from_utf8_lossy(&line));
            }
        }
        let total = process_cpu(pid) as i64 - total0 as i64;
        let mut cpu: BTreeMap<String, i64> = thread_cpu(pid)
            .iter()
            .map(|(k, v)| (k.clone(), *v as i64 - *cpu0.get(k).unwrap_or(&0) as i64))
            .filter(|(_, v)| *v > 0)
            .collect();
        // The provider thread has exited by now: its share is the total minus the rest.
        let live: i64 = cpu.values().sum();
        cpu.insert("(exited) provider-fake".into(), (total - live).max(0));
        (at, cpu, bytes)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The paced server (latency)
// ---------------------------------------------------------------------------------------

/// Serves Chat Completions streams of `m` deltas, one every `gap`, each delta text being
/// its send time (`"<ns since base>|"`). One connection per stream. Returns the root URL.
fn paced_server(m: usize, gap: Duration) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = serve_paced(conn, m, gap);
            });
        }
    });
    url
}

fn serve_paced(conn: TcpStream, m: usize, gap: Duration) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut r = BufReader::new(conn.try_clone()?);
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    let mut w = conn;
    w.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")?;
    let chunk = |w: &mut TcpStream, data: &str| {
        w.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes())
    };
    for _ in 0..m {
        // Sleep pacing (no spinning: 2 shared cores); the stamp is taken at the write.
        std::thread::sleep(gap);
        let ev = format!(
            "data: {{\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}|\"}},\"finish_reason\":null}}]}}\n\n",
            now_ns()
        );
        chunk(&mut w, &ev)?;
    }
    chunk(&mut w, "data: {\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")?;
    chunk(&mut w, "data: {\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"model\":\"fake-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n")?;
    chunk(&mut w, "data: [DONE]\n\n")?;
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

fn quantiles(mut v: Vec<u64>) -> [Duration; 3] {
    v.sort_unstable();
    let q = |p: f64| Duration::from_nanos(v[((v.len() - 1) as f64 * p) as usize]);
    [q(0.5), q(0.99), q(1.0)]
}

// ---------------------------------------------------------------------------------------

fn rate(at: &[Instant]) -> f64 {
    (at.len() - 1) as f64 / at.last().unwrap().duration_since(at[0]).as_secs_f64()
}

/// Lag of delta i behind the bare reader, aligned on the first delta (p50/p99/max).
fn lag(bare: &[Instant], layer: &[Instant]) -> [Duration; 3] {
    quantiles(
        bare.iter()
            .zip(layer)
            .map(|(b, l)| {
                let lb = b.duration_since(bare[0]).as_nanos() as i128;
                let ll = l.duration_since(layer[0]).as_nanos() as i128;
                (ll - lb).max(0) as u64
            })
            .collect(),
    )
}

struct Round {
    bare: Vec<Instant>,
    prov: Vec<Instant>,
    app: Vec<Instant>,
    e2e: [f64; 3],
    cpu: BTreeMap<String, i64>,
    bytes: usize,
}

fn main() {
    let n = env_or("WUU_BENCH_DELTAS", 100_000);
    let rounds = env_or("WUU_BENCH_REPEAT", 5).max(1);
    let m = env_or("WUU_BENCH_PACED", 2_000);
    base();
    let fp = FakeProvider::start();
    let script = || Script::many_deltas(n, DELTA);

    let mut runs: Vec<Round> = vec![];
    for round in 0..rounds {
        let e2e = |t0: Instant, at: &[Instant]| {
            at.len() as f64 / (*at.last().unwrap() - t0).as_secs_f64()
        };
        fp.push(script());
        let t0 = Instant::now();
        let bare = bare_sse(&fp.root_url(), |_| {});
        let e_bare = e2e(t0, &bare);
        fp.push(script());
        let t0 = Instant::now();
        let prov = in_process(&fp.base_url(), |_| {});
        let e_prov = e2e(t0, &prov);
        fp.push(script());
        let mut srv = Server::start(&fp.base_url());
        let t0 = Instant::now();
        let (app, cpu, bytes) = srv.turn(|_| {});
        let e_app = e2e(t0, &app);
        drop(srv);
        for (what, at) in [("bare", &bare), ("provider", &prov), ("app-server", &app)] {
            assert_eq!(at.len(), n, "{what} saw every delta");
        }
        eprintln!(
            "round {}: bare {:.0}/s, provider {:.0}/s, app-server {:.0}/s",
            round + 1,
            rate(&bare),
            rate(&prov),
            rate(&app)
        );
        runs.push(Round {
            bare,
            prov,
            app,
            e2e: [e_bare, e_prov, e_app],
            cpu,
            bytes,
        });
    }
    runs.sort_by(|a, b| rate(&a.app).total_cmp(&rate(&b.app)));
    let (lo, hi) = (rate(&runs[0].app), rate(&runs[runs.len() - 1].app));
    let r = runs.swap_remove(rounds / 2);

    println!(
        "THROUGHPUT: {n} text deltas of {DELTA:?} (openai-compatible, fake provider on loopback); \
         median of {rounds} rounds (app-server range {lo:.0}..{hi:.0}/s)"
    );
    println!(
        "{:<24} {:>12} {:>14} {:>11} {:>11} {:>11}",
        "layer", "deltas/s", "e2e deltas/s", "lag p50", "lag p99", "lag max"
    );
    for (i, (name, at)) in [
        ("bare SSE (floor)", &r.bare),
        ("in-process provider", &r.prov),
        ("wuu app-server stdout", &r.app),
    ]
    .into_iter()
    .enumerate()
    {
        let [p50, p99, max] = lag(&r.bare, at);
        println!(
            "{:<24} {:>12.0} {:>14.0} {:>11.2?} {:>11.2?} {:>11.2?}",
            name,
            rate(at),
            r.e2e[i],
            p50,
            p99,
            max
        );
    }
    println!(
        "ratios: provider/bare {:.3}, app-server/bare {:.3}, app-server/provider {:.3}",
        rate(&r.prov) / rate(&r.bare),
        rate(&r.app) / rate(&r.bare),
        rate(&r.app) / rate(&r.prov)
    );
    println!(
        "app-server: {:.0} bytes per notification, {:.1} MB/s on stdout; target >= 200000 notifications/s: {}",
        r.bytes as f64 / n as f64,
        r.bytes as f64 / (*r.app.last().unwrap() - r.app[0]).as_secs_f64() / 1e6,
        if rate(&r.app) >= 200_000.0 { "met" } else { "NOT met" }
    );
    let tick_us = 1e6 / 100.0; // USER_HZ = 100
    let ticks: i64 = r.cpu.values().sum();
    println!(
        "app-server CPU during the turn: {:.0} ms, {:.2} us per delta; by thread:",
        ticks as f64 * tick_us / 1e3,
        ticks as f64 * tick_us / n as f64
    );
    for (name, t) in &r.cpu {
        println!(
            "  {:<24} {:>6.0} ms {:>7.2} us/delta",
            name,
            *t as f64 * tick_us / 1e3,
            *t as f64 * tick_us / n as f64
        );
    }

    // Latency: paced stream, send time carried in each delta.
    let gap = Duration::from_micros(200);
    let url = paced_server(m, gap);
    let mut results = vec![];
    for name in [
        "bare SSE (floor)",
        "in-process provider",
        "wuu app-server stdout",
    ] {
        let mut lats: Vec<u64> = Vec::with_capacity(m);
        let mut on = |b: &[u8]| {
            let sent = stamp(b).expect("stamped delta");
            lats.push(now_ns().saturating_sub(sent));
        };
        let at = match name {
            "bare SSE (floor)" => bare_sse(&url, &mut on),
            "in-process provider" => in_process(&format!("{url}/v1"), &mut on),
            _ => {
                let mut srv = Server::start(&format!("{url}/v1"));
                let (at, _, _) = srv.turn(&mut on);
                at
            }
        };
        assert_eq!(at.len(), m, "{name}: every paced delta");
        results.push((name, quantiles(lats)));
    }
    println!("LATENCY: {m} deltas paced every {gap:?}; arrival − send per delta (same clock)");
    println!(
        "{:<24} {:>11} {:>11} {:>11} {:>14} {:>14}",
        "layer", "p50", "p99", "max", "added p50", "added p99"
    );
    let b = results[0].1;
    for (name, q) in &results {
        println!(
            "{:<24} {:>11.2?} {:>11.2?} {:>11.2?} {:>14.2?} {:>14.2?}",
            name,
            q[0],
            q[1],
            q[2],
            q[0].saturating_sub(b[0]),
            q[1].saturating_sub(b[1])
        );
    }
}
