//! App-server dispatch bench (issue 2): spawns the real binary and measures, in one run,
//! against a trivial line-echo process (`cat`) as the floor:
//! - spawn → `initialize` response time (median of 20 starts),
//! - round-trip latency of `thread/list` over 10 000 sequential requests (p50, p99),
//! - peak RSS of the server (VmHWM),
//! - size of the (stripped, release) binary.
//!
//! Run: `cargo bench --bench app_server` (env `WUU_BENCH_REQUESTS` overrides 10 000).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child,
            stdin,
            stdout,
        }
    }

    fn roundtrip(&mut self, line: &[u8], buf: &mut String) -> Duration {
        let t = Instant::now();
        self.stdin.write_all(line).unwrap();
        self.stdin.flush().unwrap();
        buf.clear();
        self.stdout.read_line(buf).unwrap();
        t.elapsed()
    }

    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let bin = env!("CARGO_BIN_EXE_wuu");
    let n: usize = std::env::var("WUU_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let wuu_cmd = || {
        let mut c = Command::new(bin);
        c.arg("app-server")
            .arg("--workdir")
            .arg(ws.path())
            .env("WUU_HOME", home.path());
        c
    };
    let init = b"{\"id\":\"1\",\"method\":\"initialize\",\"params\":{}}\n";
    let mut buf = String::new();

    // Startup: spawn → initialize response.
    let mut starts = vec![];
    let mut floor_starts = vec![];
    for _ in 0..20 {
        let t = Instant::now();
        let mut p = Proc::spawn(wuu_cmd());
        p.roundtrip(init, &mut buf);
        starts.push(t.elapsed());
        assert!(buf.contains("\"result\""), "initialize failed: {buf}");
        let t = Instant::now();
        let mut e = Proc::spawn(Command::new("cat"));
        e.roundtrip(init, &mut buf);
        floor_starts.push(t.elapsed());
    }
    starts.sort();
    floor_starts.sort();

    // Round trips.
    let mut p = Proc::spawn(wuu_cmd());
    p.roundtrip(init, &mut buf);
    for i in 0..5 {
        let line = format!("{{\"id\":\"s{i}\",\"method\":\"thread/start\",\"params\":{{}}}}\n");
        p.roundtrip(line.as_bytes(), &mut buf);
        // Drain the thread/started notification.
        buf.clear();
        p.stdout.read_line(&mut buf).unwrap();
    }
    let line = b"{\"id\":\"l\",\"method\":\"thread/list\",\"params\":{}}\n";
    let mut e = Proc::spawn(Command::new("cat"));
    for _ in 0..200 {
        p.roundtrip(line, &mut buf);
        e.roundtrip(line, &mut buf);
    }
    // An inline method (answered on the reader thread) isolates transport cost from the
    // catalog pool's hop and query.
    let inline_line =
        b"{\"id\":\"c\",\"method\":\"config/model-catalog/providers\",\"params\":{}}\n";
    let mut inline = Vec::with_capacity(n / 4);
    for _ in 0..n / 4 {
        inline.push(p.roundtrip(inline_line, &mut buf));
    }
    inline.sort();
    // Blocks of 100 requests alternate between the server and the echo floor, so both
    // see the same machine state (a tight loop keeps a process hot; interleaving single
    // requests would measure wake-ups from idle for both).
    let mut lat = Vec::with_capacity(n);
    let mut floor = Vec::with_capacity(n);
    while lat.len() < n {
        for _ in 0..100 {
            lat.push(p.roundtrip(line, &mut buf));
        }
        for _ in 0..100 {
            floor.push(e.roundtrip(line, &mut buf));
        }
    }
    lat.sort();
    floor.sort();
    let rss = p.peak_rss_kib();
    let size = std::fs::metadata(bin).map(|m| m.len()).unwrap_or(0);

    let (p50, p99, f50, f99) = (
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&floor, 0.5),
        pct(&floor, 0.99),
    );
    let (s50, fs50) = (pct(&starts, 0.5), pct(&floor_starts, 0.5));
    println!("app-server bench ({n} sequential thread/list requests, 5 conversations)");
    println!(
        "startup (spawn → initialize response): median {:.0} µs   echo floor {:.0} µs   ratio {:.2}×",
        us(s50),
        us(fs50),
        us(s50) / us(fs50)
    );
    println!(
        "thread/list round trip: p50 {:.1} µs  p99 {:.1} µs   echo floor p50 {:.1} µs  p99 {:.1} µs   ratio p50 {:.2}×  p99 {:.2}×",
        us(p50),
        us(p99),
        us(f50),
        us(f99),
        us(p50) / us(f50),
        us(p99) / us(f99)
    );
    println!(
        "inline method (config/model-catalog/providers) round trip: p50 {:.1} µs  p99 {:.1} µs",
        us(pct(&inline, 0.5)),
        us(pct(&inline, 0.99))
    );
    println!("peak RSS: {:.1} MiB", rss as f64 / 1024.0);
    println!(
        "binary: {:.2} MiB ({bin}; release profile strips symbols)",
        size as f64 / (1024.0 * 1024.0)
    );
}
