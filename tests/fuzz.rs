//! On-demand fuzz run of the real `wuu app-server` (issue 11): a million mutated request
//! lines of every method, checking 0 crashes, 0 hangs and bounded threads and memory.
//!
//! ```sh
//! cargo test --test fuzz -- --ignored --nocapture          # 1,000,000 lines
//! WUU_FUZZ_LINES=100000 WUU_FUZZ_SEED=7 cargo test --test fuzz -- --ignored --nocapture
//! ```
//!
//! Every 5,000 lines a probe request (`thread/list` with a unique id) must be answered
//! within 60 s (a hang fails the run); the server must still be alive at the end and
//! exit 0 on end of input; the peak OS thread count and resident memory (sampled from
//! `/proc` every 5,000 lines) must stay under fixed bounds. Figures are printed.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::app::{config_for, wuu_bin};

/// xorshift64*: a small deterministic generator (the run is reproducible from its seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Strings that have broken servers: NUL, control characters, split UTF-8 tails, huge
/// numbers, odd ids.
const NASTY: &[&str] = &[
    "\u{0}",
    "thr_\u{0}",
    "\u{7f}\u{1b}[31m",
    "€€€€€x",
    "😀😀😀x",
    "a\u{301}\u{301}\u{301}",
    "",
    " ",
    "ephemeral-",
    "ephemeral-\u{0}",
    "../../etc/passwd",
    "%s%n",
    "null",
    "thr_00000000000000000000000000000000",
    "\u{feff}",
    "\u{202e}",
];

const NASTY_JSON: &[&str] = &[
    "null",
    "true",
    "-0",
    "1E2",
    "123456789012345678901234567890",
    "-1",
    "18446744073709551616",
    "1.5",
    "[]",
    "{}",
    "[[[[[[[[[[]]]]]]]]]]",
    "\"\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "{\"a\":{\"b\":{\"c\":[1,2,{\"d\":null}]}}}",
];

fn seeds(threads: &[String]) -> Vec<Vec<u8>> {
    let t = |i: usize| threads[i % threads.len()].clone();
    let mut out = vec![];
    for (i, m) in wuu_protocol::METHODS.iter().enumerate() {
        if m.name == "shutdown" {
            continue; // ends the run by design
        }
        let th = t(i);
        for params in [
            json!({}),
            json!({"thread_id": th}),
            json!({"thread_id": th, "prompt": "hello", "client_id": format!("c{i}")}),
            json!({"session_id": th}),
            json!({"thread_id": th, "title": "t", "archived": true}),
            json!({"thread_id": th, "cursor": "turn:x"}),
            json!({"thread_id": th, "turn_id": "t", "item_id": "i", "last_item_id": "i", "sha256": "00"}),
            json!({"request_id": "uq_1", "answer": {"answers": [{"id": "q", "selected": ["a"]}]}}),
            json!({"query": "hello", "limit": 5}),
            json!({"run_id": "run_x"}),
        ] {
            out.push(
                json!({"id": format!("seed-{i}"), "method": m.name, "params": params})
                    .to_string()
                    .into_bytes(),
            );
        }
    }
    out
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        if b.is_empty() {
            b.extend_from_slice(b"{}");
        }
        match rng.below(10) {
            // Flip one byte.
            0 => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            // Random bytes somewhere (newlines excluded: one line per request).
            1 => {
                let i = rng.below(b.len() + 1);
                let n = 1 + rng.below(4);
                let junk: Vec<u8> = (0..n)
                    .map(|_| (rng.next() as u8).max(1))
                    .map(|c| if c == b'\n' { b' ' } else { c })
                    .collect();
                b.splice(i..i, junk);
            }
            // Delete a range.
            2 => {
                let i = rng.below(b.len());
                let j = (i + 1 + rng.below(8)).min(b.len());
                b.drain(i..j);
            }
            // Truncate.
            3 => {
                let n = rng.below(b.len());
                b.truncate(n);
            }
            // Replace one string value with a nasty string.
            4 | 5 => {
                let s = String::from_utf8_lossy(&b).into_owned();
                let quotes: Vec<usize> = s.match_indices(":\"").map(|(i, _)| i + 2).collect();
                if let Some(&start) = quotes.get(rng.below(quotes.len())) {
                    if let Some(len) = s[start..].find('"') {
                        let nasty = serde_json::to_string(NASTY[rng.below(NASTY.len())]).unwrap();
                        let inner = &nasty[1..nasty.len() - 1];
                        let mut t = s[..start].to_owned();
                        t.push_str(inner);
                        t.push_str(&s[start + len..]);
                        b = t.into_bytes();
                    }
                }
            }
            // Replace one value (string or other) with nasty JSON.
            6 | 7 => {
                let s = String::from_utf8_lossy(&b).into_owned();
                let colons: Vec<usize> = s.match_indices(':').map(|(i, _)| i + 1).collect();
                if let Some(&start) = colons.get(rng.below(colons.len())) {
                    let rest = &s[start..];
                    let end = if let Some(inner) = rest.strip_prefix('"') {
                        inner.find('"').map(|e| e + 2)
                    } else {
                        rest.find([',', '}'])
                    };
                    if let Some(end) = end {
                        let mut t = s[..start].to_owned();
                        t.push_str(NASTY_JSON[rng.below(NASTY_JSON.len())]);
                        t.push_str(&s[start + end..]);
                        b = t.into_bytes();
                    }
                }
            }
            // Another method name.
            8 => {
                let s = String::from_utf8_lossy(&b).into_owned();
                if let Some(i) = s.find("\"method\":\"") {
                    let start = i + 10;
                    if let Some(len) = s[start..].find('"') {
                        let m = wuu_protocol::METHODS[rng.below(wuu_protocol::METHODS.len())].name;
                        if m != "shutdown" {
                            let mut t = s[..start].to_owned();
                            t.push_str(m);
                            t.push_str(&s[start + len..]);
                            b = t.into_bytes();
                        }
                    }
                }
            }
            // Nothing: the valid seed itself.
            _ => {}
        }
    }
    b
}

fn proc_status(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

#[test]
#[ignore = "long: run on demand with --ignored (see the module docs)"]
fn a_million_mutated_lines_of_every_method() {
    let lines: u64 = std::env::var("WUU_FUZZ_LINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = std::env::var("WUU_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_1234_ABCD);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A provider that refuses connections: turns fail fast (no network).
    std::fs::write(
        home.path().join("config.json"),
        config_for("http://127.0.0.1:9/v1").to_string(),
    )
    .unwrap();
    let mut child = Command::new(wuu_bin())
        .arg("app-server")
        .arg("--workdir")
        .arg(ws.path())
        .env("WUU_HOME", home.path())
        .env("HOME", home.path())
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    // The reader: counts frames and records when each probe was answered.
    let answered: Arc<Mutex<std::collections::HashSet<String>>> = Default::default();
    let frames = Arc::new(AtomicU64::new(0));
    let (ids_tx, ids_rx) = std::sync::mpsc::channel::<String>();
    let reader = {
        let answered = answered.clone();
        let frames = frames.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 20, stdout);
            let mut line = String::new();
            let mut thread_ids = vec![];
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return thread_ids,
                    Ok(_) => {}
                }
                frames.fetch_add(1, Ordering::Relaxed);
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    panic!("stdout line is not JSON: {line:?}");
                };
                if let Some(id) = v["id"].as_str() {
                    if id.starts_with("probe-") || id.starts_with("boot-") {
                        if let Some(t) = v["result"]["thread"]["id"].as_str() {
                            thread_ids.push(t.to_owned());
                            let _ = ids_tx.send(t.to_owned());
                        }
                        answered.lock().unwrap().insert(id.to_owned());
                    }
                }
            }
        })
    };
    // A few real conversations for the seeds to name.
    for i in 0..4 {
        writeln!(
            stdin,
            "{}",
            json!({"id": format!("boot-{i}"), "method": "thread/start", "params": {}})
        )
        .unwrap();
    }
    stdin.flush().unwrap();
    let threads: Vec<String> = (0..4)
        .map(|_| {
            ids_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("thread/start answered")
        })
        .collect();
    let seeds = seeds(&threads);
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    let (mut peak_threads, mut peak_rss_kb) = (0u64, 0u64);
    let mut samples = vec![];
    let mut buf = Vec::with_capacity(1 << 20);
    let mut bytes = 0u64;
    let probe_every = 5_000u64;
    for n in 0..lines {
        let pick = rng.below(seeds.len());
        let line = mutate(&mut rng, &seeds[pick]);
        bytes += line.len() as u64 + 1;
        buf.extend_from_slice(&line);
        buf.push(b'\n');
        if (n + 1) % probe_every == 0 {
            let probe = format!("probe-{n}");
            buf.extend_from_slice(
                json!({"id": probe, "method": "thread/list", "params": {}})
                    .to_string()
                    .as_bytes(),
            );
            buf.push(b'\n');
            stdin
                .write_all(&buf)
                .expect("the server stopped reading (crash?)");
            stdin.flush().unwrap();
            buf.clear();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !answered.lock().unwrap().contains(&probe) {
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "the server died after {n} lines"
                );
                assert!(
                    Instant::now() < deadline,
                    "hang: probe {probe} unanswered for 60 s"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            let (t, rss) = proc_status(pid);
            peak_threads = peak_threads.max(t);
            peak_rss_kb = peak_rss_kb.max(rss);
            if (n + 1) % 100_000 == 0 {
                samples.push((n + 1, t, rss / 1024, started.elapsed().as_secs_f64()));
                eprintln!(
                    "fuzz: {} lines, {t} threads, {} MiB RSS, {:.0} s",
                    n + 1,
                    rss / 1024,
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
    stdin.write_all(&buf).unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"id": "probe-final", "method": "thread/listAll", "params": {}})
    )
    .unwrap();
    stdin.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !answered.lock().unwrap().contains("probe-final") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the server died at the end"
        );
        assert!(
            Instant::now() < deadline,
            "hang: the final probe was not answered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();
    let (end_threads, end_rss) = proc_status(pid);
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(120);
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        assert!(
            Instant::now() < deadline,
            "no exit within 120 s after end of input"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    reader.join().unwrap();
    eprintln!(
        "fuzz: seed {seed}, {lines} lines ({:.1} MB) in {:.1} s ({:.0} lines/s), {} frames out; \
         peak {peak_threads} threads / {} MiB RSS; at the end {end_threads} threads / {} MiB; exit {code:?}",
        bytes as f64 / 1e6,
        elapsed.as_secs_f64(),
        lines as f64 / elapsed.as_secs_f64(),
        frames.load(Ordering::Relaxed),
        peak_rss_kb / 1024,
        end_rss / 1024,
    );
    for (n, t, mb, s) in &samples {
        eprintln!("fuzz sample: {n} lines: {t} threads, {mb} MiB, {s:.0} s");
    }
    assert_eq!(code, Some(0), "exit status after end of input");
    assert!(peak_threads < 400, "{peak_threads} OS threads at peak");
    assert!(
        peak_rss_kb < 512 * 1024,
        "{} MiB resident at peak",
        peak_rss_kb / 1024
    );
}
