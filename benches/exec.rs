//! `wuu exec` bench: wall time and peak RSS of `wuu exec --json` on a one-answer
//! prompt against the fake provider (a real HTTP server on loopback), median of N runs,
//! next to two baselines measured in the same process:
//! - the fake provider's own round trip (one streamed Chat Completions answer over a
//!   fresh TCP connection, no wuu involved),
//! - the spawn floor (`true`: fork + exec + wait).
//!
//! Peak RSS is the child's `VmHWM`, sampled from `/proc` every millisecond until it
//! exits (high-water mark, so the last sample is the peak up to ~1 ms before exit).
//!
//! Run: `cargo bench --bench exec` (env `WUU_BENCH_RUNS` overrides 9 runs).

#[path = "../tests/support/fake_provider.rs"]
mod fake_provider;

use fake_provider::{FakeProvider, Script};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn median<T: Copy + PartialOrd>(v: &mut [T]) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One streamed answer straight from the fake provider.
fn provider_round_trip(fake: &FakeProvider, port_url: &str) -> Duration {
    fake.push(Script::text(&["The answer is 4."]));
    let addr = port_url.trim_start_matches("http://");
    let body =
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"What is 2+2?"}]}"#;
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        if seen.windows(6).any(|w| w == b"[DONE]") {
            break;
        }
    }
    t.elapsed()
}

/// Runs `cmd` to the end; returns wall time and peak RSS (KiB).
fn measure(mut cmd: Command, expect_result: bool) -> (Duration, u64, i32) {
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        out.read_to_end(&mut s).unwrap();
        s
    });
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let code = loop {
        if let Ok(s) = std::fs::read_to_string(&status_path) {
            if let Some(kib) = s
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
            {
                peak = peak.max(kib);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st.code().unwrap_or(-1);
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let wall = t.elapsed();
    let stdout = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    if code != 0 {
        eprintln!("exit {code}; stderr:\n{stderr}");
    }
    if code == 0 && expect_result {
        let last = stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap_or(b"");
        assert!(
            String::from_utf8_lossy(last).contains("\"type\":\"result\""),
            "last line is the result: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&stdout)
        );
    }
    (wall, peak, code)
}

fn main() {
    let runs: usize = std::env::var("WUU_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9)
        .max(5);
    let bin = env!("CARGO_BIN_EXE_wuu");
    let fake = FakeProvider::start();
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cfg = serde_json::json!({
        "default_provider": "fake",
        "providers": {"fake": {"type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
            "max_retries": 1, "initial_backoff_ms": 1, "max_backoff_ms": 5}},
        "agent": {"auto_title": false},
    });
    std::fs::write(home.path().join("config.json"), cfg.to_string()).unwrap();

    // Warm-up (page cache, store creation).
    for _ in 0..2 {
        fake.push(Script::text(&["The answer is 4."]));
        let mut c = Command::new(bin);
        c.args(["exec", "--json", "--ephemeral", "--cd"])
            .arg(ws.path())
            .arg("What is 2+2?")
            .env("WUU_HOME", home.path());
        measure(c, true);
        provider_round_trip(&fake, &fake.root_url());
    }

    let mut walls = vec![];
    let mut rss = vec![];
    let mut walls_stored = vec![];
    let mut rtt = vec![];
    let mut floor = vec![];
    for i in 0..runs {
        for ephemeral in [true, false] {
            fake.push(Script::text(&["The answer is 4."]));
            let mut c = Command::new(bin);
            c.args(["exec", "--json", "--cd"])
                .arg(ws.path())
                .env("WUU_HOME", home.path());
            if ephemeral {
                c.arg("--ephemeral");
            }
            c.arg(format!("What is 2+2? (run {i})"));
            let (wall, peak, code) = measure(c, true);
            assert_eq!(code, 0, "wuu exec failed");
            if ephemeral {
                walls.push(wall);
                rss.push(peak);
            } else {
                walls_stored.push(wall);
            }
        }
        rtt.push(provider_round_trip(&fake, &fake.root_url()));
        floor.push(measure(Command::new("true"), false).0);
    }
    let w = median(&mut walls);
    let ws_ = median(&mut walls_stored);
    let r = median(&mut rss);
    let p = median(&mut rtt);
    let f = median(&mut floor);
    println!("wuu exec --json, one answer, fake provider, median of {runs} runs");
    println!("  exec wall (ephemeral)        {:>9.2} ms", ms(w));
    println!("  exec wall (stored thread)    {:>9.2} ms", ms(ws_));
    println!("  exec peak RSS (VmHWM)        {:>9} KiB", r);
    println!("  baseline: provider round trip{:>9.3} ms", ms(p));
    println!("  baseline: spawn floor (true) {:>9.3} ms", ms(f));
    println!(
        "  ratios: exec/provider {:.1}x, exec/spawn floor {:.1}x, (exec - floor - provider) = {:.2} ms",
        w.as_secs_f64() / p.as_secs_f64(),
        w.as_secs_f64() / f.as_secs_f64(),
        ms(w) - ms(f) - ms(p)
    );
}
