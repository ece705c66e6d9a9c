//! Scale bench (issue 15): how cost grows with the number of conversations, and our
//! overhead over the floor. Every figure is reported next to a baseline measured in the
//! same run (the `cat` echo floor for round trips, an empty spawn for startup and RSS, a
//! bare SSE reader for streaming), with p50/p99 where it is a latency.
//!
//! Rows (select with `WUU_SCALE_ROWS=memory,list,rtt,spawn,stream`; default all):
//! - **memory**: RSS and OS threads of a server with N conversations just started
//!   (`thread/start` ×N), after each ran one short turn (fake provider), and after they
//!   all went idle and parked (the server runs with `WUU_PARK_AFTER_MS`, default 20000
//!   here, instead of the 60 s default, so the bench does not wait a minute).
//! - **list**: `thread/list` with 0 / 100 / 1,000 conversations in the store, uncached
//!   (each call follows a `thread/rename`, which invalidates listings) and cached
//!   (unchanged listing), against the echo floor of a line of the same size;
//!   `initialize` on the warm server.
//! - **rtt**: `thread/list` round trip (5 conversations) vs the echo floor, in blocks of
//!   100 alternating between the two.
//! - **spawn**: spawn → `initialize` response with a fresh home and with 10,000
//!   conversations in the store, vs spawn → echo of `cat`.
//! - **stream**: 200 conversations streaming at once, 1,000 deltas each, from the Rust
//!   fake provider (in this process): aggregate notifications/s and fairness, vs 200
//!   bare SSE readers on the same provider measured the same way. "At once": the fake
//!   holds its answers until all 200 requests arrived, then sends every stream,
//!   interleaved in rounds of 16 KiB as 200 providers streaming at once would
//!   ([`FakeProvider::hold_posts`]; written whole one after another, the first streams
//!   were read completely before the last were sent, and the bare readers themselves
//!   scored 14–51 on fairness), so the row measures 200 streams that really run
//!   together and not how far apart the turns started (that is reported too: the
//!   `turn/start` answer times, and when the last provider request arrived). Fairness
//!   is the max/min over the conversations of their rate, deltas ÷ (last delta −
//!   release); every stream has the same number of deltas, so it is also the max/min of
//!   their completion times (see `stream_figures`). `WUU_SCALE_HOLD=0` sends every
//!   stream as soon as it is asked for instead, figures taken from the common start.
//!
//! Run: `cargo bench --bench scale` (env `WUU_SCALE_N` = conversations of the memory
//! row, default 1000; `WUU_SCALE_STREAMS` default 200; `WUU_SCALE_DELTAS` default 1000;
//! `WUU_SCALE_RUST_LOG` = the servers' `RUST_LOG`, e.g.
//! `wuu::server::connections=debug` shows when the store pool opens extra connections).

#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use fake_provider::{FakeProvider, Script};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Stats {
    p50: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        p50: pct(&v, 0.5),
        p99: pct(&v, 0.99),
    }
}

/// A child speaking JSON lines over pipes.
struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            stdout,
            line: Vec::with_capacity(1 << 16),
        }
    }

    fn send(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn read_line(&mut self) -> &[u8] {
        self.line.clear();
        if self.stdout.read_until(b'\n', &mut self.line).unwrap() == 0 {
            panic!("the process closed its output");
        }
        &self.line
    }

    /// Sends `line` and reads one line back (the next line must be its answer).
    fn roundtrip(&mut self, line: &[u8]) -> Duration {
        let t = Instant::now();
        self.send(line);
        self.read_line();
        t.elapsed()
    }

    /// Sends a request and reads until the response with `id` (notifications skipped).
    fn request(&mut self, id: &str, method: &str, params: serde_json::Value) -> serde_json::Value {
        let line =
            serde_json::json!({"id": id, "method": method, "params": params}).to_string() + "\n";
        self.send(line.as_bytes());
        loop {
            let l = self.read_line();
            let v: serde_json::Value = serde_json::from_slice(l).unwrap();
            if v.get("method").is_none() && v["id"] == id {
                if v.get("error").is_some() {
                    panic!("{method} failed: {v}");
                }
                return v;
            }
        }
    }

    fn status(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    fn rss_mib(&self) -> f64 {
        self.status("VmRSS:") as f64 / 1024.0
    }

    fn threads(&self) -> u64 {
        self.status("Threads:")
    }

    /// CPU time the process has used so far (user + system, all its threads; clock
    /// ticks of `/proc/<pid>/stat`, usually 10 ms). Less sensitive to other load on the
    /// machine than wall time.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which is in parentheses and may hold spaces):
        // utime and stime are fields 14 and 15, i.e. 12 and 13 after the ")".
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
        Duration::from_millis(ticks * 10)
    }

    /// With `WUU_SCALE_SMAPS=<dir>`, copies `/proc/<pid>/smaps` to `<dir>/<stage>.smaps`
    /// (for profiling where the memory of a stage is: stacks, malloc arenas, SQLite).
    fn dump_smaps(&self, stage: &str) {
        if let Ok(dir) = std::env::var("WUU_SCALE_SMAPS") {
            let _ = std::fs::create_dir_all(&dir);
            if let Ok(s) = std::fs::read(format!("/proc/{}/smaps", self.child.id())) {
                let _ = std::fs::write(format!("{dir}/{stage}.smaps"), s);
            }
        }
        // `WUU_SCALE_HOOK=<program>`: runs `<program> <stage> <pid>` and waits (profiling).
        if let Ok(hook) = std::env::var("WUU_SCALE_HOOK") {
            let _ = Command::new(hook)
                .arg(stage)
                .arg(self.child.id().to_string())
                .status();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A home + workspace for one server.
struct Home {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Home {
    fn new(provider_url: Option<&str>) -> Home {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        if let Some(url) = provider_url {
            let cfg = serde_json::json!({"default_provider": "fake", "providers": {"fake": {
                "type": "openai-compatible", "base_url": url, "model": "fake-model",
                "max_retries": 0, "stream_idle_timeout_ms": 60_000}},
                "agent": {"auto_title": false}});
            std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
        }
        Home {
            _root: root,
            home,
            ws,
        }
    }

    fn server(&self, park_after_ms: Option<u64>) -> Proc {
        let mut c = Command::new(env!("CARGO_BIN_EXE_wuu"));
        c.arg("app-server")
            .arg("--workdir")
            .arg(&self.ws)
            .env("WUU_HOME", &self.home)
            .env("HOME", &self.home)
            .env_remove("RUST_LOG");
        // The server's log filter, for profiling a row (default: none, as a user runs it).
        if let Ok(filter) = std::env::var("WUU_SCALE_RUST_LOG") {
            c.env("RUST_LOG", filter);
        }
        if let Some(ms) = park_after_ms {
            c.env("WUU_PARK_AFTER_MS", ms.to_string());
        }
        Proc::spawn(c)
    }

    /// Writes `n` conversations of this workspace straight into the store.
    fn seed(&self, n: usize, cwd: Option<&str>) {
        let mut store = wuu_store::Store::open_home(&self.home).unwrap();
        let now = 1_780_000_000_000i64;
        let cwd = cwd.map_or_else(|| self.ws.to_string_lossy().into_owned(), str::to_owned);
        store
            .transaction(|tx| {
                for i in 0..n {
                    tx.insert_thread(&wuu_store::ThreadRow {
                        id: format!("thr_seed{i:06}"),
                        cwd: cwd.clone(),
                        title: Some(format!("Seeded conversation number {i}")),
                        title_revision: 1,
                        preview: "a preview of what the user first asked for".into(),
                        provider: "fake".into(),
                        model: "fake-model".into(),
                        variant: String::new(),
                        effort: String::new(),
                        permission_mode: "standard".into(),
                        engine_id: "wuu".into(),
                        archived: false,
                        archive_reason: None,
                        forked_from_id: None,
                        forked_from_turn_id: None,
                        forked_from_item_id: None,
                        created_at_ms: now + i as i64,
                        updated_at_ms: now + i as i64,
                        extra: serde_json::json!({}),
                        damage: None,
                    })?;
                }
                Ok(())
            })
            .unwrap();
    }
}

fn cat() -> Proc {
    Proc::spawn(Command::new("cat"))
}

/// The floor of a small request with a large answer: this bench binary in echo mode
/// (`WUU_SCALE_ECHO=BYTES`) answers every line with a line of BYTES bytes. (`cat` would
/// deadlock on a line larger than the pipe buffer.)
fn expander(bytes: usize) -> Proc {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env("WUU_SCALE_ECHO", bytes.to_string());
    Proc::spawn(c)
}

fn echo_mode(bytes: usize) {
    let answer = filler(bytes);
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut line = Vec::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
            return;
        }
        out.write_all(&answer).unwrap();
        out.flush().unwrap();
    }
}

const INIT: &[u8] = b"{\"id\":\"i\",\"method\":\"initialize\",\"params\":{}}\n";
const LIST: &[u8] = b"{\"id\":\"l\",\"method\":\"thread/list\",\"params\":{}}\n";

/// A line of `len` bytes (with its newline) for the echo floor.
fn filler(len: usize) -> Vec<u8> {
    let mut v = vec![b'x'; len.max(2) - 1];
    v.push(b'\n');
    v
}

// ---------------------------------------------------------------------------------------

fn row_memory(n: usize) {
    let fake = FakeProvider::start();
    let home = Home::new(Some(&fake.base_url()));
    let park_ms = env_or("WUU_PARK_AFTER_MS", 20_000) as u64;
    let mut p = home.server(Some(park_ms));
    p.request("i", "initialize", serde_json::json!({}));
    std::thread::sleep(Duration::from_millis(200));
    let base = (p.rss_mib(), p.threads());
    p.dump_smaps("base");
    let mut ids = Vec::with_capacity(n);
    let t = Instant::now();
    for i in 0..n {
        let v = p.request(&format!("s{i}"), "thread/start", serde_json::json!({}));
        ids.push(v["result"]["thread"]["id"].as_str().unwrap().to_owned());
    }
    let start_time = t.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let started = (p.rss_mib(), p.threads());
    p.dump_smaps("started");
    // One short turn each, 8 at a time.
    for _ in 0..n {
        fake.push(Script::text(&["Done", "."]));
    }
    let t = Instant::now();
    let mut next = 0;
    let mut running = 0;
    let mut done = 0;
    while done < n {
        while running < 8 && next < n {
            let line = serde_json::json!({"id": format!("t{next}"), "method": "turn/start",
                "params": {"thread_id": ids[next], "prompt": "say done"}})
            .to_string()
                + "\n";
            p.send(line.as_bytes());
            next += 1;
            running += 1;
        }
        let l = p.read_line();
        if find(l, b"\"method\":\"turn/completed\"").is_some() {
            running -= 1;
            done += 1;
        } else if find(l, b"\"error\":{").is_some() && find(l, b"\"method\"").is_none() {
            panic!("turn/start failed: {}", String::from_utf8_lossy(l));
        }
    }
    let turn_time = t.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let turned = (p.rss_mib(), p.threads());
    p.dump_smaps("turned");
    // Idle: every session parks after park_ms.
    let deadline = Instant::now() + Duration::from_millis(park_ms) + Duration::from_secs(30);
    std::thread::sleep(Duration::from_millis(park_ms + 500));
    while p.threads() > base.1 + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(500));
    let idle = (p.rss_mib(), p.threads());
    p.dump_smaps("idle");
    // The parked conversations still answer (revived on demand).
    p.request(
        "r",
        "thread/resume",
        serde_json::json!({"session_id": ids[0], "response_only": true}),
    );
    println!("## memory ({n} conversations; parking after {park_ms} ms)");
    println!(
        "baseline (empty server after initialize): RSS {:.1} MiB, {} threads",
        base.0, base.1
    );
    for (name, (rss, th)) in [
        ("just started (thread/start ×N)", started),
        ("after one short turn each", turned),
        ("after all went idle (parked)", idle),
    ] {
        // Live sessions ≈ threads over the baseline (one thread each while live).
        let live = th.saturating_sub(base.1);
        let per_live = if live > 0 {
            format!(
                "; {live} live sessions, {:.1} KiB each",
                (rss - base.0) * 1024.0 / live as f64
            )
        } else {
            String::new()
        };
        println!(
            "{name}: RSS {rss:.1} MiB ({:.1} KiB per conversation over the baseline; {:.2}× the baseline{per_live}), {th} threads",
            (rss - base.0) * 1024.0 / n as f64,
            rss / base.0
        );
    }
    println!(
        "thread/start ×{n}: {:.1} µs each; turns: {:.0} µs each (8 at a time)",
        us(start_time) / n as f64,
        us(turn_time) / n as f64
    );
}

/// Pins the calling thread to CPU 0 while the guard lives, with `taskset` (util-linux);
/// processes it spawns meanwhile (and their threads) inherit the pin. Latency rows use
/// it so that the server and its floor are placed alike: unpinned, whichever process
/// the scheduler puts on the other CPU pays a cross-CPU wake-up per round trip (55–75
/// µs on the 2-core VM, versus 4 µs on one CPU), and which one that is changes from run
/// to run (`thread/list` at 6.4 µs with `cat` at 58 µs in one run, 79 µs with `cat` at
/// 4.3 µs in the next). `WUU_SCALE_PIN=0` turns it off; `None` when it is off or
/// `taskset` failed.
struct Pinned {
    tid: String,
    /// The thread's CPU list before (`taskset -cp` shows it), restored on drop.
    before: String,
}

fn pin_to_cpu0() -> Option<Pinned> {
    if env_or("WUU_SCALE_PIN", 1) == 0 {
        return None;
    }
    let me = std::fs::read_link("/proc/thread-self").ok()?;
    let tid = me.file_name()?.to_str()?.to_owned();
    // "pid 123's current affinity list: 0,1"
    let shown = Command::new("taskset").args(["-cp", &tid]).output().ok()?;
    let before = String::from_utf8_lossy(&shown.stdout)
        .rsplit(": ")
        .next()?
        .trim()
        .to_owned();
    if before.is_empty() {
        return None;
    }
    let ok = Command::new("taskset")
        .args(["-cp", "0", &tid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(Pinned { tid, before })
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // Not from `available_parallelism`: it reads the (pinned) affinity mask.
        let _ = Command::new("taskset")
            .args(["-cp", &self.before, &self.tid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// How a latency row was placed, for its header.
fn placement(pin: &Option<Pinned>) -> &'static str {
    if pin.is_some() {
        "client, server and floor pinned to CPU 0"
    } else {
        "unpinned"
    }
}

fn row_list() {
    let pin = pin_to_cpu0();
    println!(
        "## listing (thread/list; uncached = right after a thread/rename; cached = unchanged; {})",
        placement(&pin)
    );
    println!("| conversations | answer bytes | uncached p50 / p99 µs | per conversation µs | cached p50 / p99 µs | floor (same answer bytes) p50 / p99 µs | cached ÷ floor p50 / p99 |");
    println!("|---|---|---|---|---|---|---|");
    let mut empty_p50 = 0.0;
    for n in [0usize, 100, 1000] {
        let home = Home::new(None);
        home.seed(n.max(1), (n == 0).then_some("/elsewhere"));
        let mut p = home.server(None);
        p.request("i", "initialize", serde_json::json!({}));
        let v = p.request("l", "thread/list", serde_json::json!({}));
        let bytes = serde_json::to_vec(&v).unwrap().len() + 1;
        // With n == 0 the store holds one conversation of another workspace (so the
        // rename has something to change); this workspace's listing is empty.
        let target = "thr_seed000000";
        let rounds = if n >= 1000 { 100 } else { 300 };
        let mut unc = Vec::with_capacity(rounds);
        for k in 0..rounds {
            let rename = serde_json::json!({"id": "r", "method": "thread/rename",
                "params": {"thread_id": target, "title": format!("renamed {k}")}})
            .to_string()
                + "\n";
            p.send(rename.as_bytes());
            loop {
                let l = p.read_line();
                if l.starts_with(b"{\"id\":\"r\"") {
                    break;
                }
            }
            // Drain the thread/updated notification (sent after the answer).
            p.read_line();
            unc.push(p.roundtrip(LIST));
        }
        let mut cached = Vec::new();
        let mut floor = Vec::new();
        let mut x = expander(bytes);
        for _ in 0..10 {
            for _ in 0..100 {
                cached.push(p.roundtrip(LIST));
            }
            for _ in 0..100 {
                floor.push(x.roundtrip(LIST));
            }
        }
        let (u, c, f) = (stats(unc), stats(cached), stats(floor));
        if n == 0 {
            empty_p50 = us(u.p50);
        }
        let per = if n > 0 {
            format!("{:.2}", (us(u.p50) - empty_p50) / n as f64)
        } else {
            "–".into()
        };
        println!(
            "| {n} | {bytes} | {:.1} / {:.1} | {per} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2}× / {:.2}× |",
            us(u.p50),
            us(u.p99),
            us(c.p50),
            us(c.p99),
            us(f.p50),
            us(f.p99),
            us(c.p50) / us(f.p50),
            us(c.p99) / us(f.p99)
        );
        if n == 1000 {
            let mut e = cat();
            let mut init = Vec::new();
            let mut floor = Vec::new();
            for _ in 0..10 {
                for _ in 0..100 {
                    init.push(p.roundtrip(INIT));
                }
                for _ in 0..100 {
                    floor.push(e.roundtrip(INIT));
                }
            }
            let (i, f) = (stats(init), stats(floor));
            println!(
                "initialize on a warm server (1,000 conversations): p50 {:.1} µs p99 {:.1} µs; echo floor p50 {:.1} µs p99 {:.1} µs; ratio {:.2}× / {:.2}×",
                us(i.p50),
                us(i.p99),
                us(f.p50),
                us(f.p99),
                us(i.p50) / us(f.p50),
                us(i.p99) / us(f.p99)
            );
        }
    }
}

fn row_rtt() {
    let pin = pin_to_cpu0();
    let n = env_or("WUU_SCALE_REQUESTS", 10_000);
    let home = Home::new(None);
    home.seed(5, None);
    let mut p = home.server(None);
    p.request("i", "initialize", serde_json::json!({}));
    let mut e = cat();
    for _ in 0..200 {
        p.roundtrip(LIST);
        e.roundtrip(LIST);
    }
    let mut lat = Vec::with_capacity(n);
    let mut floor = Vec::with_capacity(n);
    while lat.len() < n {
        for _ in 0..100 {
            lat.push(p.roundtrip(LIST));
        }
        for _ in 0..100 {
            floor.push(e.roundtrip(LIST));
        }
    }
    let (l, f) = (stats(lat), stats(floor));
    println!("## round trip ({n} thread/list requests, 5 conversations, blocks of 100 alternating with the floor; {})", placement(&pin));
    println!(
        "thread/list p50 {:.1} µs p99 {:.1} µs; cat echo floor p50 {:.1} µs p99 {:.1} µs; ratio p50 {:.2}× p99 {:.2}×; server RSS {:.1} MiB",
        us(l.p50),
        us(l.p99),
        us(f.p50),
        us(f.p99),
        us(l.p50) / us(f.p50),
        us(l.p99) / us(f.p99),
        p.rss_mib()
    );
}

fn spawn_init(home: &Home) -> Duration {
    let t = Instant::now();
    let mut p = home.server(None);
    p.roundtrip(INIT);
    let d = t.elapsed();
    assert!(find(&p.line, b"\"result\"").is_some(), "initialize failed");
    d
}

fn row_spawn() {
    let rounds = 20;
    let big = Home::new(None);
    big.seed(10_000, None);
    spawn_init(&big); // the first open migrates nothing but warms the page cache
    let (mut fresh, mut full, mut floor) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        let home = Home::new(None);
        fresh.push(spawn_init(&home));
        full.push(spawn_init(&big));
        let t = Instant::now();
        let mut e = cat();
        e.roundtrip(INIT);
        floor.push(t.elapsed());
    }
    let (a, b, f) = (stats(fresh), stats(full), stats(floor));
    println!("## startup (spawn → initialize response, {rounds} rounds each, interleaved)");
    println!(
        "fresh WUU_HOME: p50 {:.0} µs p99 {:.0} µs; 10,000 conversations: p50 {:.0} µs p99 {:.0} µs; spawn floor (cat) p50 {:.0} µs p99 {:.0} µs; ratio p50 {:.2}× / {:.2}×",
        us(a.p50),
        us(a.p99),
        us(b.p50),
        us(b.p99),
        us(f.p50),
        us(f.p99),
        us(a.p50) / us(f.p50),
        us(b.p50) / us(f.p50)
    );
}

/// One bare SSE stream (POST, chunked, `data:` lines): counts the text deltas (chunks
/// with a non-empty `content`), with the times of the first and the last.
fn bare_stream(root_url: &str) -> (usize, Instant, Instant) {
    const NEEDLE: &[u8] = b"\"content\":\"";
    let body =
        r#"{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"go"}]}"#;
    let addr = root_url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let mut line = Vec::new();
    let mut n = 0;
    let (mut first, mut last) = (None, Instant::now());
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        if line.starts_with(b"data: ") {
            if line.starts_with(b"data: [DONE]") {
                break;
            }
            if let Some(i) = find(&line, NEEDLE) {
                if line.get(i + NEEDLE.len()) != Some(&b'"') {
                    n += 1;
                    last = Instant::now();
                    first.get_or_insert(last);
                }
            }
        }
    }
    // The connection stays open (keep-alive): [DONE] ends the stream.
    (n, first.unwrap_or(last), last)
}

/// What one stream received: deltas, and the times of its first and last delta.
#[derive(Clone, Copy)]
struct StreamTimes {
    n: usize,
    first: Instant,
    last: Instant,
}

/// Throughput and fairness of a set of streams that all started at `t0` (the fake
/// provider released them together).
///
/// - aggregate: all deltas / (last delta of any stream − `t0`), the rate a client sees
///   from the release to the end; then all deltas / (last − first delta of any stream),
///   which leaves out the wait for the first delta (and so flatters a server that
///   buffers everything before its first write);
/// - **completion max/min** (the fairness figure): each stream's completion time is its
///   last delta − `t0`; max/min over the streams, which is also the max/min of their
///   rates n / (last − `t0`) since every stream has n deltas. Served round-robin, all
///   finish together (≈ 1); served one after another, it approaches the number of
///   streams. Unlike n / (last − first) of each stream, a burst of scheduling does not
///   move it;
/// - overlap share max/min: in the window in which every stream was active (the latest
///   first delta to the earliest last delta), the deltas each stream received, max/min
///   ("none": some stream finished before another began).
fn stream_figures(t0: Instant, per: &[StreamTimes]) -> String {
    let total: usize = per.iter().map(|p| p.n).sum();
    let first = per.iter().map(|p| p.first).min().unwrap_or(t0);
    let last = per.iter().map(|p| p.last).max().unwrap_or(t0);
    let span = (last - first).as_secs_f64().max(1e-6);
    let done: Vec<f64> = per
        .iter()
        .map(|p| (p.last - t0).as_secs_f64().max(1e-6))
        .collect();
    let max = done.iter().cloned().fold(0.0, f64::max);
    let min = done.iter().cloned().fold(f64::INFINITY, f64::min);
    let (lo, hi) = (
        per.iter().map(|p| p.first).max().unwrap_or(t0),
        per.iter().map(|p| p.last).min().unwrap_or(t0),
    );
    let overlap = if hi > lo {
        // Deltas inside [lo, hi], assuming each stream's deltas spread evenly between its
        // first and last (the bench keeps only the endpoints and the count).
        let shares: Vec<f64> = per
            .iter()
            .map(|p| {
                let len = (p.last - p.first).as_secs_f64().max(1e-9);
                p.n as f64 * (hi - lo).as_secs_f64() / len
            })
            .collect();
        let smax = shares.iter().cloned().fold(0.0, f64::max);
        let smin = shares.iter().cloned().fold(f64::INFINITY, f64::min);
        format!(
            "{:.2} over {:.0} ms",
            smax / smin.max(1e-9),
            (hi - lo).as_secs_f64() * 1e3
        )
    } else {
        "none (a stream finished before another began)".into()
    };
    let starts: Vec<f64> = per
        .iter()
        .map(|p| (p.first - t0).as_secs_f64() * 1e3)
        .collect();
    let mut sorted = done.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        let i = (sorted.len().saturating_sub(1) as f64 * q).round() as usize;
        sorted.get(i).copied().unwrap_or(0.0) * 1e3
    };
    format!(
        "{total} deltas, {:.0}/s aggregate ({:.0} ms from the common start to the last delta; first to last delta {:.0}/s over {:.0} ms); first delta {:.0}–{:.0} ms after the start; completion max/min {:.2} ({:.0} / {:.0} ms; p1 {:.0}, p10 {:.0}, p50 {:.0} ms); overlap share max/min {overlap}",
        total as f64 / max,
        max * 1e3,
        total as f64 / span,
        span * 1e3,
        starts.iter().cloned().fold(f64::INFINITY, f64::min),
        starts.iter().cloned().fold(0.0, f64::max),
        max / min,
        max * 1e3,
        min * 1e3,
        pct(0.01),
        pct(0.1),
        pct(0.5),
    )
}

fn row_stream(streams: usize, deltas: usize, hold: bool) {
    let fake = FakeProvider::start();
    // Floor: the same streams read by bare SSE readers, all at once.
    for _ in 0..streams {
        fake.push(Script::many_deltas(deltas, "tok "));
    }
    if hold {
        fake.hold_posts(streams);
    }
    let root = fake.root_url();
    let start = Instant::now();
    let handles: Vec<_> = (0..streams)
        .map(|_| {
            let r = root.clone();
            std::thread::spawn(move || bare_stream(&r))
        })
        .collect();
    let bare: Vec<StreamTimes> = handles
        .into_iter()
        .map(|h| {
            let (n, first, last) = h.join().unwrap();
            StreamTimes { n, first, last }
        })
        .collect();
    let bare_total: usize = bare.iter().map(|p| p.n).sum();
    let bare_released = fake.released_at().unwrap_or(start);
    // From the release to the last delta, like the aggregate.
    let bare_span = (bare.iter().map(|p| p.last).max().unwrap() - bare_released)
        .as_secs_f64()
        .max(1e-6);
    let bare_line = stream_figures(bare_released, &bare);

    let home = Home::new(Some(&fake.base_url()));
    let mut p = home.server(None);
    p.request("i", "initialize", serde_json::json!({}));
    let mut ids = vec![];
    for i in 0..streams {
        let v = p.request(&format!("s{i}"), "thread/start", serde_json::json!({}));
        ids.push(v["result"]["thread"]["id"].as_str().unwrap().to_owned());
    }
    for _ in 0..streams {
        fake.push(Script::many_deltas(deltas, "tok "));
    }
    if hold {
        fake.hold_posts(streams);
    }
    let index: HashMap<Vec<u8>, usize> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_bytes().to_vec(), i))
        .collect();
    let mut per: Vec<Option<StreamTimes>> = vec![None; streams];
    let mut lines = String::new();
    for (i, id) in ids.iter().enumerate() {
        lines += &(serde_json::json!({"id": format!("t{i}"), "method": "turn/start",
            "params": {"thread_id": id, "prompt": "go"}})
        .to_string()
            + "\n");
    }
    let cpu0 = p.cpu();
    let t0 = Instant::now();
    p.stdin.write_all(lines.as_bytes()).unwrap();
    p.stdin.flush().unwrap();
    let mut completed = 0;
    let mut total = 0usize;
    let mut admitted: Vec<f64> = Vec::with_capacity(streams);
    let mut max_threads = 0u64;
    // Frames start with the method, then the params in declaration order (thread_id
    // first): a prefix test keeps this reader cheap, since it shares the 2 cores.
    const DELTA: &[u8] = b"{\"method\":\"item/agentMessage/delta\",\"params\":{\"thread_id\":\"";
    while completed < streams {
        let l = p.read_line();
        if let Some(rest) = l.strip_prefix(DELTA) {
            let now = Instant::now();
            total += 1;
            let end = rest.iter().position(|&b| b == b'"').unwrap_or(0);
            let i = *index.get(&rest[..end]).unwrap_or_else(|| {
                panic!("delta of an unknown thread: {}", String::from_utf8_lossy(l))
            });
            let e = per[i].get_or_insert(StreamTimes {
                n: 0,
                first: now,
                last: now,
            });
            e.n += 1;
            e.last = now;
            // OS threads while the streams run (every 4,096 deltas: cheap enough).
            if total % 4096 == 0 {
                max_threads = max_threads.max(p.threads());
            }
        } else if find(l, b"\"method\":\"item/agentMessage/delta\"").is_some() {
            panic!(
                "unexpected delta frame shape: {}",
                String::from_utf8_lossy(l)
            );
        } else if l.starts_with(b"{\"id\":\"t") {
            // A turn/start answer: when the turn was admitted (persisted).
            admitted.push((Instant::now() - t0).as_secs_f64() * 1e3);
        } else if l.starts_with(b"{\"method\":\"turn/completed\"") {
            completed += 1;
        } else if find(l, b"\"method\":\"turn/error\"").is_some() {
            panic!("turn failed: {}", String::from_utf8_lossy(l));
        }
    }
    let cpu = p.cpu().saturating_sub(cpu0);
    let released = fake.released_at().unwrap_or(t0);
    let per: Vec<StreamTimes> = per.into_iter().flatten().collect();
    assert_eq!(per.len(), streams, "every conversation streamed");
    assert_eq!(total, streams * deltas, "every delta arrived");
    let span = (per.iter().map(|p| p.last).max().unwrap() - released)
        .as_secs_f64()
        .max(1e-6);
    println!(
        "## streaming ({streams} conversations at once, {deltas} deltas each, Rust fake provider; homes under {})",
        std::env::temp_dir().display()
    );
    println!("bare SSE readers ({streams} threads): {bare_line}");
    admitted.sort_by(f64::total_cmp);
    println!(
        "turn/start answers (turn admitted and persisted) {:.0}–{:.0} ms after the start (median {:.0} ms); {}",
        admitted.first().copied().unwrap_or(0.0),
        admitted.last().copied().unwrap_or(0.0),
        admitted.get(admitted.len() / 2).copied().unwrap_or(0.0),
        if hold {
            format!(
                "every turn's provider request arrived {:.0} ms after the start, and the streams were released together then (the figures below count from there)",
                (released - t0).as_secs_f64() * 1e3
            )
        } else {
            "streams sent as soon as asked for (WUU_SCALE_HOLD=0; figures from the common start)".to_owned()
        },
    );
    println!(
        "app-server (item/agentMessage/delta notifications): {}; ratio to the bare readers {:.2}×; RSS {:.1} MiB; at most {} OS threads while streaming; server CPU {:.0} ms ({:.0} µs per turn, {:.2} µs per delta)",
        stream_figures(released, &per),
        (total as f64 / span) / (bare_total as f64 / bare_span),
        p.rss_mib(),
        max_threads,
        cpu.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e6 / streams as f64,
        cpu.as_secs_f64() * 1e6 / total as f64,
    );
}

fn main() {
    if let Some(bytes) = std::env::var("WUU_SCALE_ECHO")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return echo_mode(bytes);
    }
    let rows =
        std::env::var("WUU_SCALE_ROWS").unwrap_or_else(|_| "memory,list,rtt,spawn,stream".into());
    let has = |r: &str| rows.split(',').any(|x| x.trim() == r);
    println!(
        "scale bench: {} ({} CPUs; load average {})",
        env!("CARGO_BIN_EXE_wuu"),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let row = |name: &str, run: &dyn Fn()| {
        if has(name) {
            let before = cpu_ticks();
            run();
            println!("{}", machine_share(before, cpu_ticks()));
        }
    };
    row("memory", &|| row_memory(env_or("WUU_SCALE_N", 1000)));
    row("list", &row_list);
    row("rtt", &row_rtt);
    row("spawn", &row_spawn);
    row("stream", &|| {
        row_stream(
            env_or("WUU_SCALE_STREAMS", 200),
            env_or("WUU_SCALE_DELTAS", 1000),
            env_or("WUU_SCALE_HOLD", 1) != 0,
        )
    });
}

/// The machine's CPU time so far (`/proc/stat`, first line): ticks per state, in
/// the kernel's order (user nice system idle iowait irq softirq steal …).
fn cpu_ticks() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// How the machine spent a row, to tell an idle machine from a shared one: the share
/// of CPU time that was idle and that the hypervisor took (steal: a neighbour ran on
/// our CPUs; figures of such a row are slower than the code).
fn machine_share(before: Vec<u64>, after: Vec<u64>) -> String {
    let d: Vec<u64> = after
        .iter()
        .zip(before.iter().chain(std::iter::repeat(&0)))
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total = d.iter().sum::<u64>().max(1) as f64;
    let at = |i: usize| d.get(i).copied().unwrap_or(0) as f64 * 100.0 / total;
    format!(
        "machine during the row: {:.1}% idle, {:.1}% steal",
        at(3) + at(4),
        at(7)
    )
}
