//! End-to-end tests of the command launcher's confinement beyond Landlock (issue 10,
//! attack report B3, B4, B6, B7, B11, B12, inherited descriptors): the real `wuu exec`
//! binary, a fake provider that makes the model call `bash`, and a scratch layout
//!
//! ```text
//! base/ws/            the workspace (inside.txt)
//! base/outside/       secret.txt: its content and metadata must never change
//! base/home/          $HOME of the host
//! base/wuu/           WUU_HOME (unless a test puts it inside the workspace)
//! ```
//!
//! What the command printed is read from the provider requests (the `tool` messages
//! sent back), i.e. what the model saw.

mod support;

use serde_json::json;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::fake_provider::{FakeProvider, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");
const SECRET: &str = "OUTSIDE-SECRET-5b8e21";

struct Lab {
    _dir: tempfile::TempDir,
    base: PathBuf,
    wuu_home: PathBuf,
    fake: FakeProvider,
}

struct Run {
    code: i32,
    stderr: String,
    /// Tool results as the model received them, in call order.
    results: Vec<String>,
}

/// Everything `chmod`, `chown`, `touch -d` and `setxattr` could change.
#[derive(Debug, PartialEq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: i64,
    xattrs: Vec<u8>,
}

fn meta(p: &Path) -> Meta {
    let m = fs::metadata(p).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::listxattr(p, &mut buf[..]).unwrap_or(0);
    buf.truncate(n);
    Meta {
        mode: m.permissions().mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime: m.mtime(),
        xattrs: buf,
    }
}

impl Lab {
    /// A lab whose WUU_HOME is `base/wuu`, or `base/ws/.wuu` with `home_in_ws`.
    fn new(home_in_ws: bool) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "outside", "home"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        fs::write(base.join("ws/inside.txt"), "inside\n").unwrap();
        fs::write(base.join("outside/secret.txt"), format!("{SECRET}\n")).unwrap();
        let wuu_home = if home_in_ws {
            base.join("ws/.wuu")
        } else {
            base.join("wuu")
        };
        fs::create_dir_all(&wuu_home).unwrap();
        let fake = FakeProvider::start();
        let cfg = json!({
            "default_provider": "fake",
            "providers": {"fake": {
                "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
                "api_key_env": "FAKE_API_KEY",
                "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5,
            }},
            "agent": {"auto_title": false},
        });
        fs::write(wuu_home.join("config.json"), cfg.to_string()).unwrap();
        Lab {
            _dir: dir,
            base,
            wuu_home,
            fake,
        }
    }

    fn ws(&self) -> PathBuf {
        self.base.join("ws")
    }

    fn secret(&self) -> PathBuf {
        self.base.join("outside/secret.txt")
    }

    /// `wuu exec` in `mode`, started through `bash -c 'exec 251<FILE; exec wuu …'` so
    /// that the host inherits a descriptor without close-on-exec (as from a parent that
    /// leaks one).
    fn command(&self, bin: &Path, mode: &str) -> Command {
        let mut c = Command::new("/bin/bash");
        c.arg("-c")
            .arg("exec 251<\"$0\"; exec \"$@\"")
            .arg(self.base.join("ws/inside.txt"))
            .arg(bin)
            .arg("exec")
            .arg("--json")
            .arg("--cd")
            .arg(self.ws())
            .arg("--permission-mode")
            .arg(mode)
            .arg("go")
            .env("WUU_HOME", &self.wuu_home)
            .env("HOME", self.base.join("home"))
            .env("FAKE_API_KEY", "sk-fake-KEY-sandbox-2c4e")
            .env("SSH_AUTH_SOCK", self.base.join("home/agent.sock"))
            .env("GPG_AGENT_INFO", self.base.join("home/S.gpg-agent:0:1"))
            .env_remove("RUST_LOG")
            .env_remove("WUU_SANDBOX_NO_MOUNT_NS")
            .current_dir(self.ws())
            .stdin(Stdio::null());
        c
    }

    /// Makes the model call `bash` with each command in turn, then answer "done".
    fn run_with(&self, mode: &str, commands: &[&str], adjust: impl FnOnce(&mut Command)) -> Run {
        self.run_bin(Path::new(BIN), mode, commands, adjust)
    }

    /// [`Lab::run_with`] with the host binary at `bin`.
    fn run_bin(
        &self,
        bin: &Path,
        mode: &str,
        commands: &[&str],
        adjust: impl FnOnce(&mut Command),
    ) -> Run {
        let before = self.fake.requests().len();
        for (i, cmd) in commands.iter().enumerate() {
            self.fake.push(Script::tool_call(
                &format!("call_{i}"),
                "bash",
                &json!({ "command": cmd }).to_string(),
            ));
        }
        self.fake.push(Script::text(&["done"]));
        let mut c = self.command(bin, mode);
        adjust(&mut c);
        let out = c.output().expect("run wuu");
        let code = out.status.code().unwrap_or(-1);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let reqs = self.fake.requests();
        let last = reqs.last().filter(|_| reqs.len() > before);
        let results: Vec<String> = last
            .and_then(|r| r.body["messages"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect();
        let results = results[results.len().saturating_sub(commands.len())..].to_vec();
        assert_eq!(
            results.len(),
            commands.len(),
            "every call got a result (exit {code}): {stderr}"
        );
        Run {
            code,
            stderr,
            results,
        }
    }

    fn run(&self, mode: &str, commands: &[&str]) -> Run {
        self.run_with(mode, commands, |_| {})
    }
}

/// The metadata attempts of the attack report (B4) on `target`.
fn metadata_attempts(target: &str) -> Vec<String> {
    vec![
        format!("chmod 4777 {target}"),
        format!("chown 65534:65534 {target}"),
        format!("touch -d 2001-01-01 {target}"),
        format!(
            "/usr/bin/env python3 -c \"import os; os.setxattr('{target}', 'user.wuu_test', b'1')\" || echo no-python"
        ),
    ]
}

#[test]
fn metadata_outside_the_workspace_cannot_change_in_standard() {
    let lab = Lab::new(false);
    let before = meta(&lab.secret());
    let cmds = metadata_attempts("../outside/secret.txt");
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let r = lab.run("standard", &cmds);
    for (i, res) in r.results.iter().enumerate() {
        assert!(
            res.contains("Read-only file system") || res.contains("no-python"),
            "attempt {i} not refused: {res}"
        );
    }
    assert_eq!(meta(&lab.secret()), before, "outside metadata changed");
    assert_eq!(
        fs::read_to_string(lab.secret()).unwrap(),
        format!("{SECRET}\n")
    );
    // The workspace itself stays fully writable, metadata included.
    let r = lab.run(
        "standard",
        &["echo w > w.txt && chmod 600 w.txt && touch -d 2001-01-01 w.txt && stat -c %a w.txt"],
    );
    assert!(r.results[0].contains("Exit code: 0"), "{}", r.results[0]);
    assert!(r.results[0].contains("600"), "{}", r.results[0]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn metadata_of_the_workspace_cannot_change_in_read_only() {
    let lab = Lab::new(false);
    let inside = lab.ws().join("inside.txt");
    let before = meta(&inside);
    let cmds = metadata_attempts("inside.txt");
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let r = lab.run("read_only", &cmds);
    for (i, res) in r.results.iter().enumerate() {
        assert!(
            res.contains("Read-only file system") || res.contains("no-python"),
            "attempt {i} not refused: {res}"
        );
    }
    assert_eq!(meta(&inside), before, "workspace metadata changed");
    // The private temp dir stays writable in read_only.
    let r = lab.run(
        "read_only",
        &["echo t > \"$TMPDIR/t\" && chmod 600 \"$TMPDIR/t\" && cat \"$TMPDIR/t\""],
    );
    assert!(r.results[0].contains("Exit code: 0"), "{}", r.results[0]);
}

#[test]
fn wuu_home_inside_the_workspace_is_hidden_from_commands() {
    let lab = Lab::new(true);
    let cfg_before = fs::read_to_string(lab.wuu_home.join("config.json")).unwrap();
    let r = lab.run(
        "standard",
        &[
            "ls -A .wuu; echo listed",
            "cat .wuu/config.json",
            "echo '{}' > .wuu/config.json",
            "echo x > inside.txt && echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
        ],
    );
    // The home is an empty directory to the command (its own temp dir, created inside,
    // is all there is); nothing in it can be read or replaced.
    assert!(r.results[0].contains("listed"), "{}", r.results[0]);
    for name in ["config.json", "wuu.db", "traces"] {
        assert!(
            !r.results[0].contains(name),
            "{name} visible: {}",
            r.results[0]
        );
    }
    assert!(!r.results[1].contains("permission_mode") && !r.results[1].contains("fake"));
    assert!(r.results[1].contains("No such file"), "{}", r.results[1]);
    assert!(
        r.results[2].contains("Read-only file system"),
        "{}",
        r.results[2]
    );
    assert!(r.results[3].contains("Exit code: 0"), "{}", r.results[3]);
    assert!(r.results[3].contains("tmp"), "{}", r.results[3]);
    assert_eq!(
        fs::read_to_string(lab.wuu_home.join("config.json")).unwrap(),
        cfg_before
    );
    assert!(
        lab.wuu_home.join("wuu.db").exists(),
        "the host's store is in place"
    );

    // Without a mount namespace the command is refused, naming the cause.
    let r = lab.run_with("standard", &["echo ran > ran.txt"], |c| {
        c.env("WUU_SANDBOX_NO_MOUNT_NS", "1");
    });
    assert!(r.results[0].contains("belongs to wuu"), "{}", r.results[0]);
    assert!(r.results[0].contains("WUU_HOME"), "{}", r.results[0]);
    assert!(!lab.ws().join("ran.txt").exists());
}

#[test]
fn without_a_mount_namespace_commands_run_with_a_warning() {
    let lab = Lab::new(false);
    let r = lab.run_with(
        "standard",
        &["echo ok > made.txt && cat made.txt; cat ../outside/secret.txt"],
        |c| {
            c.env("WUU_SANDBOX_NO_MOUNT_NS", "1");
        },
    );
    let res = &r.results[0];
    assert!(res.contains("ok"), "{res}");
    assert!(res.contains("no mount namespace"), "{res}");
    assert!(res.contains("Permission denied"), "{res}");
    assert!(!res.contains(SECRET), "{res}");
}

#[test]
fn a_host_binary_under_another_name_runs_commands_in_standard() {
    // A copy installed under another name (and without a `wuu` beside it) re-executes
    // itself as the launcher.
    let lab = Lab::new(false);
    let bin = lab.base.join("bin/agent-host");
    fs::create_dir_all(bin.parent().unwrap()).unwrap();
    fs::copy(BIN, &bin).unwrap();
    let r = lab.run_bin(
        &bin,
        "standard",
        &["echo ok > made.txt && cat made.txt; cat ../outside/secret.txt"],
        |_| {},
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let res = &r.results[0];
    assert!(res.contains("ok"), "{res}");
    assert!(!res.contains("cannot start the command sandbox"), "{res}");
    assert!(!res.contains(SECRET), "{res}");
    assert_eq!(
        fs::read_to_string(lab.ws().join("made.txt")).unwrap(),
        "ok\n"
    );
}

/// `pid (comm) state ppid pgrp session …` of `/proc/PID/stat`: (pgrp, session).
fn group_and_session(stat: &str) -> (i64, i64) {
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<i64> = rest
        .split_whitespace()
        .skip(1)
        .take(4)
        .filter_map(|x| x.parse().ok())
        .collect();
    (f[1], f[2])
}

#[test]
fn commands_run_in_a_session_of_their_own_without_a_terminal() {
    let lab = Lab::new(false);
    // Without a PID namespace, where the launcher and the host are visible.
    let r = lab.run_with(
        "standard",
        &[
            "echo self=$(cat /proc/$$/stat); echo launcher=$PPID; echo host=$(awk '{print $4}' /proc/$PPID/stat)",
            "exec 3<>/dev/tty && echo TTY-OPEN || echo no-tty",
        ],
        |c| {
            c.env("WUU_SANDBOX_NO_PID_NS", "1");
        },
    );
    let out = &r.results[0];
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .to_string()
    };
    let (pgrp, session) = group_and_session(&field("self"));
    let launcher: i64 = field("launcher").trim().parse().unwrap();
    // The launcher leads the command's session and process group.
    assert_eq!(session, launcher, "{out}");
    assert_eq!(pgrp, launcher, "{out}");
    // The host stays in the session it was started in (the test's).
    assert_ne!(session, test_session(), "{out}");
    assert!(r.results[1].contains("no-tty"), "{}", r.results[1]);
    assert!(!r.results[1].contains("TTY-OPEN"), "{}", r.results[1]);
}

#[test]
fn commands_run_in_a_pid_namespace_of_their_own() {
    let lab = Lab::new(false);
    let r = lab.run(
        "standard",
        &["echo self=$$ parent=$PPID; echo procs=$(ls -d /proc/[0-9]* | wc -l); echo mount=$(awk '$2 == \"/proc\" {print $4}' /proc/self/mounts | tail -n 1)"],
    );
    let out = &r.results[0];
    // The shell is the second process of its namespace, after the launcher's init; the
    // namespace's own /proc (read-only) shows only its processes, not the host's.
    assert!(out.contains("self=2 parent=1"), "{out}");
    let procs: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("procs="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(procs <= 6, "{out}");
    assert!(out.contains("mount=ro,"), "{out}");
}

fn test_session() -> i64 {
    let stat = fs::read_to_string("/proc/self/stat").unwrap();
    group_and_session(&stat).1
}

#[test]
fn the_launcher_cannot_be_read_or_traced_by_its_command() {
    let lab = Lab::new(false);
    let r = lab.run(
        "standard",
        &["if head -c 1 /proc/$PPID/maps >/dev/null 2>&1 || cat /proc/$PPID/environ >/dev/null 2>&1; then echo LAUNCHER-READABLE; else echo launcher-protected; fi"],
    );
    assert!(
        r.results[0].contains("launcher-protected"),
        "{}",
        r.results[0]
    );
    assert!(!r.results[0].contains("LAUNCHER-READABLE"));
}

#[test]
fn a_non_canonical_path_entry_does_not_open_the_siblings() {
    let lab = Lab::new(false);
    fs::create_dir_all(lab.base.join("home/bin")).unwrap();
    std::os::unix::fs::symlink(&lab.base, lab.base.join("ws-parent-link")).unwrap();
    let path = format!(
        "{}/..:/proc/self/root:{}:{}",
        lab.ws().display(),
        lab.base.join("ws-parent-link").display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let r = lab.run_with(
        "standard",
        &["cat ../outside/secret.txt; ls ../outside; ls /root /home 2>&1 | head -3"],
        |c| {
            c.env("PATH", &path);
        },
    );
    assert!(!r.results[0].contains(SECRET), "{}", r.results[0]);
    assert!(
        r.results[0].contains("Permission denied"),
        "{}",
        r.results[0]
    );
}

#[test]
fn inherited_descriptors_and_agent_sockets_do_not_reach_commands() {
    let lab = Lab::new(false);
    // A listening "ssh agent" at $SSH_AUTH_SOCK: the variable is scrubbed, and the
    // socket itself (reachable by path: Landlock does not confine `connect`) is covered.
    let sock = lab.base.join("home/agent.sock");
    let _agent = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let connect = format!(
        "if [ -x /usr/bin/python3 ]; then /usr/bin/python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('AGENT-CONNECTED')\" 2>&1 | tail -1; else echo no-python; fi",
        sock.display()
    );
    let r = lab.run(
        "standard",
        &[
            "if [ -e /proc/self/fd/251 ]; then echo FD251-OPEN; else echo fd251-closed; fi; ls /proc/self/fd | tr '\\n' ' '",
            "echo sock=${SSH_AUTH_SOCK:-none} gpg=${GPG_AGENT_INFO:-none}",
            &connect,
        ],
    );
    assert!(r.results[0].contains("fd251-closed"), "{}", r.results[0]);
    assert!(
        r.results[1].contains("sock=none gpg=none"),
        "{}",
        r.results[1]
    );
    assert!(
        !r.results[2].contains("AGENT-CONNECTED"),
        "{}",
        r.results[2]
    );
    assert!(
        r.results[2].contains("Connection refused") || r.results[2].contains("no-python"),
        "{}",
        r.results[2]
    );
}

/// Whether the kernel offers Landlock ABI 6 (signal and abstract socket scopes).
fn landlock_scopes() -> bool {
    use landlock::{Access, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI};
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::from_all(ABI::V6))
        .and_then(|r| r.create())
        .is_ok()
}

#[test]
fn commands_cannot_signal_the_host() {
    if !landlock_scopes() {
        eprintln!("skipped: this kernel has no Landlock ABI 6 scopes");
        return;
    }
    let lab = Lab::new(false);
    // Without a PID namespace (with one, the host is not even visible).
    let r = lab.run_with(
        "standard",
        &["host=$(awk '{print $4}' /proc/$PPID/stat); if kill -0 $host; then echo HOST-SIGNALLED; else echo host-unreachable; fi"],
        |c| {
            c.env("WUU_SANDBOX_NO_PID_NS", "1");
        },
    );
    assert!(
        r.results[0].contains("host-unreachable"),
        "{}",
        r.results[0]
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}
