//! End-to-end tests of the workspace boundary (issue 10): the real `wuu exec` binary, a
//! fake provider that makes the model call tools, and a scratch layout
//!
//! ```text
//! base/ws/            the workspace (inside.txt)
//! base/outside/       secret.txt, victim.txt: must never be read or changed
//! base/home/          $HOME of the host: must not be written by commands
//! base/wuu/           WUU_HOME
//! ```
//!
//! Every attempt runs in `standard` and in `read_only`. What the model saw is read from
//! the provider requests (the `tool` messages sent back), so "refused with a clear tool
//! error" is checked on the model's side.

mod support;

use serde_json::{json, Value};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::fake_provider::{FakeProvider, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");
const SECRET: &str = "OUTSIDE-SECRET-7f3a9c";
const KEY: &str = "sk-fake-KEY-b0undary-91d2e7c4";

struct Lab {
    _dir: tempfile::TempDir,
    base: PathBuf,
    fake: FakeProvider,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    /// Tool results as the model received them, in call order.
    results: Vec<String>,
}

impl Lab {
    fn new() -> Lab {
        Lab::with_agent(json!({"auto_title": false, "max_steps": 400}))
    }

    fn with_agent(agent: Value) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "outside", "home", "wuu"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        fs::write(base.join("ws/inside.txt"), "inside\n").unwrap();
        fs::write(base.join("outside/secret.txt"), format!("{SECRET}\n")).unwrap();
        fs::write(base.join("outside/victim.txt"), "victim\n").unwrap();
        let fake = FakeProvider::start();
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
                "api_key_env": "FAKE_API_KEY",
                "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5,
            }},
            "agent": agent,
        });
        fs::write(base.join("wuu/config.json"), cfg.to_string()).unwrap();
        Lab {
            _dir: dir,
            base,
            fake,
        }
    }

    fn ws(&self) -> PathBuf {
        self.base.join("ws")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    fn command(&self, mode: &str, prompt: &str) -> Command {
        let mut c = Command::new(BIN);
        c.arg("exec")
            .arg("--json")
            .arg("--cd")
            .arg(self.ws())
            .arg("--permission-mode")
            .arg(mode)
            .arg(prompt)
            .env("WUU_HOME", self.base.join("wuu"))
            .env("HOME", self.base.join("home"))
            .env("FAKE_API_KEY", KEY)
            .env("OTHER_SERVICE_TOKEN", "tok-should-not-pass-3c1d")
            .env_remove("RUST_LOG")
            .current_dir(self.ws())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Makes the model call each tool in turn (one call per step), then answer "done".
    fn run(&self, mode: &str, calls: &[(&str, Value)]) -> Run {
        let before = self.fake.requests().len();
        for (i, (name, args)) in calls.iter().enumerate() {
            self.fake.push(Script::tool_call(
                &format!("call_{i}"),
                name,
                &args.to_string(),
            ));
        }
        self.fake.push(Script::text(&["done"]));
        let mut child = self.command(mode, "go").spawn().expect("spawn wuu");
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            out.read_to_string(&mut s).unwrap();
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            err.read_to_string(&mut s).unwrap();
            s
        });
        let end = Instant::now() + Duration::from_secs(120);
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            assert!(Instant::now() < end, "wuu exec hung");
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = t_out.join().unwrap();
        let stderr = t_err.join().unwrap();
        let reqs = self.fake.requests();
        let last = reqs.last().filter(|_| reqs.len() > before);
        let results = last
            .and_then(|r| r.body["messages"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>();
        let results = results[results.len().saturating_sub(calls.len())..].to_vec();
        assert_eq!(
            results.len(),
            calls.len(),
            "every call got a result (exit {code}): {stderr}\n{stdout:.3000}"
        );
        Run {
            code,
            stdout,
            stderr,
            results,
        }
    }

    /// The outside files are exactly as made.
    fn assert_outside_untouched(&self) {
        assert_eq!(
            fs::read_to_string(self.outside().join("secret.txt")).unwrap(),
            format!("{SECRET}\n")
        );
        assert_eq!(
            fs::read_to_string(self.outside().join("victim.txt")).unwrap(),
            "victim\n"
        );
        let mut names: Vec<String> = fs::read_dir(self.outside())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["secret.txt", "victim.txt"]);
        let home: Vec<_> = fs::read_dir(self.base.join("home"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(home.is_empty(), "HOME was written: {home:?}");
    }
}

fn assert_no_secret(r: &Run) {
    for (i, res) in r.results.iter().enumerate() {
        assert!(!res.contains(SECRET), "result {i} shows the secret: {res}");
    }
    assert!(!r.stdout.contains(SECRET), "stdout shows the secret");
}

/// Exit 0, or 3 (`permission_denied`) when a call was refused by the mode.
fn assert_ok_or_refused(r: &Run, mode: &str) {
    assert!(
        r.code == 0 || r.code == 3,
        "{mode}: exit {}: {}",
        r.code,
        r.stderr
    );
    if r.code == 3 {
        assert!(
            r.stderr.contains("refused by the permission mode"),
            "{}",
            r.stderr
        );
    }
}

fn bash(cmd: &str) -> (&'static str, Value) {
    ("bash", json!({ "command": cmd }))
}

/// A refusal the model can act on: an error that names the reason.
fn assert_refused(res: &str, why: &[&str]) {
    assert!(
        why.iter().any(|w| res.contains(w)),
        "expected a refusal mentioning one of {why:?}, got: {res}"
    );
}

const MODES: [&str; 2] = ["standard", "read_only"];

#[test]
fn bash_cannot_write_outside_write_home_or_read_outside() {
    let lab = Lab::new();
    for mode in MODES {
        let r = lab.run(
            mode,
            &[
                bash("echo pwn > ../outside/x"),
                bash("cp inside.txt ~/x"),
                bash("cat ../outside/secret.txt"),
                bash("echo ok > inside-bash.txt && cat inside-bash.txt"),
                bash("ls ../outside"),
                // The launcher ($PPID) and the host (its parent) are outside the domain.
                bash("host=$(awk '{print $4}' /proc/$PPID/stat); echo host=$host; cat /proc/$PPID/environ | tr '\\0' '\\n' | grep -c FAKE_API_KEY; cat /proc/$host/environ | tr '\\0' '\\n' | grep FAKE_API_KEY; cat /proc/$host/maps | head -c 100"),
                bash("grep Cap /proc/self/status"),
                bash("mknod blk b 1 3 || mknod blk c 1 3"),
                bash("n=0; for b in $(ls /sys/class/block); do n=$((n+1)); if head -c 1 \"/dev/$b\" > /dev/null 2>&1; then echo \"READ /dev/$b\"; fi; done; echo scanned $n"),
            ],
        );
        assert_ok_or_refused(&r, mode);
        // Writes outside the write roots meet the read-only mount (or Landlock).
        assert_refused(
            &r.results[0],
            &["Permission denied", "Read-only file system"],
        );
        assert_refused(
            &r.results[1],
            &["Permission denied", "Read-only file system"],
        );
        assert_refused(&r.results[2], &["Permission denied"]);
        if mode == "standard" {
            assert!(r.results[3].contains("Exit code: 0"), "{}", r.results[3]);
            assert!(r.results[3].contains("ok"), "{}", r.results[3]);
        } else {
            assert_refused(&r.results[3], &["Permission denied", "Read-only"]);
            assert!(!lab.ws().join("inside-bash.txt").exists());
        }
        assert_refused(&r.results[4], &["Permission denied"]);
        assert!(r.results[5].contains("host="), "{}", r.results[5]);
        // The launcher's environment is scrubbed, and the host's cannot be read: it is
        // non-dumpable and the command holds none of CAP_SYS_PTRACE, CAP_SYS_ADMIN,
        // CAP_PERFMON (each of which lets root read it anyway). Asserted for root too.
        assert!(
            r.results[5].contains("\n0\n"),
            "launcher env: {}",
            r.results[5]
        );
        assert!(!r.results[5].contains(KEY), "{}", r.results[5]);
        assert_refused(&r.results[5], &["Permission denied"]);
        // Capabilities that reach past the file-system sandbox are gone (root has them
        // otherwise): bits 19 SYS_PTRACE, 21 SYS_ADMIN, 16 SYS_MODULE, 17 SYS_RAWIO,
        // 27 MKNOD, 2 DAC_READ_SEARCH, 38 PERFMON, 39 BPF.
        let caps = r.results[6]
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no CapBnd in {}", r.results[6]));
        for bit in [19, 21, 16, 17, 27, 2, 38, 39] {
            assert_eq!(caps & (1 << bit), 0, "capability {bit} kept: {caps:x}");
        }
        // No device node can be made, not even in the workspace, and no disk is readable.
        assert_refused(
            &r.results[7],
            &[
                "Permission denied",
                "Operation not permitted",
                "Read-only file system",
            ],
        );
        assert!(!lab.ws().join("blk").exists());
        assert!(r.results[8].contains("scanned"), "{}", r.results[8]);
        assert!(!r.results[8].contains("READ "), "{}", r.results[8]);
        assert_no_secret(&r);
        lab.assert_outside_untouched();
        let _ = fs::remove_file(lab.ws().join("inside-bash.txt"));
    }
}

#[test]
fn hard_link_made_by_bash_is_refused_and_tools_read_nothing_outside() {
    let lab = Lab::new();
    for mode in MODES {
        let r = lab.run(
            mode,
            &[
                bash("ln ../outside/secret.txt h.txt"),
                ("read_file", json!({"path": "h.txt"})),
                ("grep", json!({"pattern": "OUTSIDE", "path": "."})),
                ("glob", json!({"pattern": "**"})),
                bash("ln ../outside/victim.txt v.txt"),
                ("write_file", json!({"path": "v.txt", "content": "pwned\n"})),
            ],
        );
        assert_ok_or_refused(&r, mode);
        assert_refused(
            &r.results[0],
            &[
                "Invalid cross-device link",
                "Permission denied",
                "Read-only file system",
            ],
        );
        assert!(!lab.ws().join("h.txt").exists());
        assert_refused(&r.results[1], &["no such file"]);
        assert!(
            r.results[2].contains("No matches found"),
            "{}",
            r.results[2]
        );
        assert!(!r.results[3].contains("secret"), "{}", r.results[3]);
        assert_refused(
            &r.results[4],
            &[
                "Invalid cross-device link",
                "Permission denied",
                "Read-only file system",
            ],
        );
        assert_no_secret(&r);
        lab.assert_outside_untouched();
        let _ = fs::remove_file(lab.ws().join("v.txt"));
    }
}

#[test]
fn writing_through_a_user_made_hard_link_replaces_the_workspace_name_only() {
    let lab = Lab::new();
    let victim = lab.outside().join("victim.txt");
    let patch = "*** Begin Patch\n*** Update File: p.txt\n@@\n-victim\n+pwned\n*** End Patch";
    for mode in MODES {
        for name in ["w.txt", "e.txt", "p.txt"] {
            let _ = fs::remove_file(lab.ws().join(name));
            fs::hard_link(&victim, lab.ws().join(name)).unwrap();
        }
        let r = lab.run(
            mode,
            &[
                ("write_file", json!({"path": "w.txt", "content": "pwned\n"})),
                (
                    "edit_file",
                    json!({"path": "e.txt", "old_string": "victim", "new_string": "pwned"}),
                ),
                ("apply_patch", json!({ "patch": patch })),
            ],
        );
        assert_ok_or_refused(&r, mode);
        for (i, name) in ["w.txt", "e.txt", "p.txt"].iter().enumerate() {
            let now = fs::read_to_string(lab.ws().join(name)).unwrap();
            if mode == "standard" {
                assert!(!r.results[i].contains("denied"), "{}", r.results[i]);
                assert_eq!(now, "pwned\n", "{name}");
            } else {
                assert_refused(&r.results[i], &["read_only mode"]);
                assert_eq!(now, "victim\n", "{name}");
            }
        }
        lab.assert_outside_untouched();
    }
}

#[test]
fn env_of_commands_has_no_provider_key_or_secret_looking_names() {
    let lab = Lab::with_agent(json!({
        "auto_title": false,
        "shell_env": {"keep": ["OTHER_SERVICE_TOKEN"]},
    }));
    for mode in MODES {
        let r = lab.run(
            mode,
            &[
                bash("env | grep FAKE_API_KEY; echo \"[$FAKE_API_KEY]\""),
                bash("echo \"[$OTHER_SERVICE_TOKEN] [$WUU_SANDBOX]\""),
            ],
        );
        assert_ok_or_refused(&r, mode);
        assert!(!r.results[0].contains(KEY), "{}", r.results[0]);
        assert!(r.results[0].contains("[]"), "{}", r.results[0]);
        assert!(
            r.results[1].contains(&format!("[tok-should-not-pass-3c1d] [{mode}]")),
            "keep passes a named variable: {}",
            r.results[1]
        );
    }
    // Without `keep`, the token is removed too.
    let lab = Lab::new();
    let r = lab.run("standard", &[bash("echo \"[$OTHER_SERVICE_TOKEN]\"")]);
    assert!(r.results[0].contains("[]"), "{}", r.results[0]);
}

#[test]
fn symlink_swap_race_never_reaches_outside() {
    let lab = Lab::new();
    let ws = lab.ws();
    fs::create_dir_all(ws.join("race")).unwrap();
    fs::write(ws.join("race/secret.txt"), "inside\n").unwrap();
    fs::write(ws.join("race/victim.txt"), "victim\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let flipper = {
        let (ws, outside, stop, flips) = (ws.clone(), lab.outside(), stop.clone(), flips.clone());
        std::thread::spawn(move || {
            let race = ws.join("race");
            let parked = ws.join(".race.real");
            while !stop.load(Ordering::SeqCst) {
                let _ = fs::rename(&race, &parked);
                let _ = std::os::unix::fs::symlink(&outside, &race);
                std::thread::sleep(Duration::from_micros(50));
                let _ = fs::remove_file(&race);
                let _ = fs::rename(&parked, &race);
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let patch =
        "*** Begin Patch\n*** Update File: race/victim.txt\n@@\n-victim\n+pwned\n*** End Patch";
    let kinds: [(&str, Value); 6] = [
        ("read_file", json!({"path": "race/secret.txt"})),
        (
            "write_file",
            json!({"path": "race/victim.txt", "content": "pwned\n"}),
        ),
        (
            "edit_file",
            json!({"path": "race/victim.txt", "old_string": "victim", "new_string": "pwned"}),
        ),
        ("apply_patch", json!({ "patch": patch })),
        ("grep", json!({"pattern": "OUTSIDE", "path": "."})),
        ("glob", json!({"pattern": "race/*"})),
    ];
    let calls: Vec<(&str, Value)> = (0..300).map(|i| kinds[i % kinds.len()].clone()).collect();
    let r = lab.run("standard", &calls);
    stop.store(true, Ordering::SeqCst);
    flipper.join().unwrap();
    assert!(flips.load(Ordering::Relaxed) > 50, "the flipper ran");
    assert_ok_or_refused(&r, "standard");
    assert_no_secret(&r);
    for (i, res) in r.results.iter().enumerate() {
        assert!(!res.contains("OUTSIDE"), "call {i} saw outside: {res}");
    }
    lab.assert_outside_untouched();
}

#[test]
fn without_landlock_confined_bash_fails_closed() {
    let lab = Lab::new();
    let mut outcomes = Vec::new();
    for mode in ["standard", "read_only"] {
        for (i, (name, args)) in [bash("echo hi > made.txt")].iter().enumerate() {
            lab.fake
                .push(Script::tool_call(&format!("c{i}"), name, &args.to_string()));
        }
        lab.fake.push(Script::text(&["done"]));
        let out = lab
            .command(mode, "go")
            .env("WUU_SANDBOX_UNAVAILABLE", "1")
            .output()
            .unwrap();
        let req = lab.fake.requests().last().unwrap().body.clone();
        let tool = req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        outcomes.push((mode, out.status.code(), tool));
    }
    for (mode, _code, tool) in &outcomes {
        assert!(tool.contains("permission denied"), "{mode}: {tool}");
        assert!(tool.contains("unconfined"), "{mode}: {tool}");
        assert!(tool.contains("Landlock"), "{mode}: {tool}");
    }
    assert!(!lab.ws().join("made.txt").exists());
    // Unconfined still runs commands.
    lab.fake.push(Script::tool_call(
        "u",
        "bash",
        &json!({"command": "echo hi > made.txt"}).to_string(),
    ));
    lab.fake.push(Script::text(&["done"]));
    let out = lab
        .command("unconfined", "go")
        .env("WUU_SANDBOX_UNAVAILABLE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(lab.ws().join("made.txt").exists());
    // initialize reports the issue.
    let out = Command::new(BIN)
        .args(["debug", "app-server", "initialize", "--workdir"])
        .arg(lab.ws())
        .env("WUU_HOME", lab.base.join("wuu"))
        .env("HOME", lab.base.join("home"))
        .env("FAKE_API_KEY", KEY)
        .env("WUU_SANDBOX_UNAVAILABLE", "1")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let issues = v["result"]["issues"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        issues.iter().any(|i| i["code"] == "sandbox_unavailable"),
        "{v}"
    );
    let _ = Path::new("");
}
