//! End-to-end tests of `wuu exec`'s human mode: the README's main job (the bundled
//! `examples/fix-the-test`, a replayed model whose tools really run) in a scratch copy
//! of the example workspace, once with stderr on a pseudo-terminal (python3's `pty`
//! module, as on a fresh Debian machine) and once into pipes, as in a CI log.
//!
//! Each run has its own `WUU_HOME` and `HOME`; no test needs the internet.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");

/// The final message of the example's cassette.
const FINAL: &str = "Fixed `average` in calc.py: it divided by `len(values) + 1` instead of \
                     `len(values)`. Both tests now pass (`python3 -m unittest -v`).";

/// The command the replayed model runs twice.
const TEST_CMD: &str = "$ python3 -m unittest -v 2>&1; echo exit=$?";

/// Runs a child on a pseudo-terminal: stdin, stdout and stderr are its slave side
/// (a 120×40 window, `TERM=xterm-256color`); prints everything the terminal showed.
const PTY_RUNNER: &str = r#"
import fcntl, os, pty, struct, subprocess, sys, termios
master, slave = pty.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
p = subprocess.Popen(sys.argv[1:], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
os.close(slave)
out = bytearray()
while True:
    try:
        b = os.read(master, 65536)
    except OSError:
        break
    if not b:
        break
    out += b
code = p.wait()
sys.stdout.buffer.write(bytes(out))
sys.exit(code)
"#;

struct Job {
    config: PathBuf,
    home: tempfile::TempDir,
    user_home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fix-the-test")
}

/// The example's config. Its commands run in the sandbox, which reads the system
/// directories and the toolchains in `$HOME`; each test has a `HOME` of its own, so a
/// `python3` installed in the real home (pyenv) is made readable with
/// `agent.sandbox.readable_roots` in a copy of the config. With a system `python3` (a
/// fresh Debian machine) the example's own file is used as is.
fn main_job_config() -> PathBuf {
    static CONFIG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let out = Command::new("python3")
                .args([
                    "-c",
                    "import os, sys; print(os.path.realpath(sys.base_prefix))",
                ])
                .output()
                .expect("python3 is needed for the example");
            let prefix = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let mut roots: Vec<String> = vec![];
            if !prefix.starts_with("/usr") && !prefix.is_empty() {
                roots.push(prefix);
            }
            if let Some(r) = std::env::var_os("PYENV_ROOT") {
                roots.push(r.to_string_lossy().into_owned());
            }
            if roots.is_empty() {
                return example().join("config.json");
            }
            let text = std::fs::read_to_string(example().join("config.json")).unwrap();
            let mut cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
            cfg["providers"]["replay"]["cassette"] =
                example().join("cassette.json").display().to_string().into();
            cfg["agent"]["sandbox"] = serde_json::json!({ "readable_roots": roots });
            let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec_human_config.json");
            std::fs::write(&path, cfg.to_string()).unwrap();
            path
        })
        .clone()
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

impl Job {
    /// A scratch copy of the example workspace, as the README's command makes it.
    fn new() -> Job {
        let ws = tempfile::tempdir().unwrap();
        copy_dir(&example().join("workspace"), ws.path());
        Job {
            config: main_job_config(),
            home: tempfile::tempdir().unwrap(),
            user_home: tempfile::tempdir().unwrap(),
            ws,
        }
    }

    /// `wuu exec --config examples/fix-the-test/config.json --cd <scratch> EXTRA… "Fix
    /// the failing test"`, with `env` set on top of a clean colour environment.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut a = vec![
            BIN.to_owned(),
            "exec".into(),
            "--config".into(),
            self.config.display().to_string(),
            "--cd".into(),
            self.ws.path().display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a.push("Fix the failing test".into());
        a
    }

    fn command(&self, program: &str, args: &[String], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env("WUU_HOME", self.home.path())
            .env("HOME", self.user_home.path())
            .env("TERM", "xterm-256color")
            .current_dir(self.ws.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for k in ["RUST_LOG", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "CI"] {
            c.env_remove(k);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Runs with stdout and stderr into pipes.
    fn piped(&self, extra: &[&str], env: &[(&str, &str)]) -> Outcome {
        let a = self.args(extra);
        let child = self
            .command(&a[0], &a[1..], env)
            .spawn()
            .expect("spawn wuu");
        finish(child)
    }

    /// Runs with stdin, stdout and stderr on one pseudo-terminal; `stdout` is what the
    /// terminal showed (its `\r\n` line ends made `\n`).
    fn on_terminal(&self, extra: &[&str], env: &[(&str, &str)]) -> Outcome {
        let mut a = vec!["-c".to_owned(), PTY_RUNNER.to_owned()];
        a.extend(self.args(extra));
        let child = self
            .command("python3", &a, env)
            .spawn()
            .expect("spawn python3 (needed for the example and the pseudo-terminal)");
        let mut o = finish(child);
        o.stdout = o.stdout.replace("\r\n", "\n");
        o
    }

    /// The example's test file is fixed in the scratch copy.
    fn assert_fixed(&self) {
        let calc = std::fs::read_to_string(self.ws.path().join("calc.py")).unwrap();
        assert!(calc.contains("return sum(values) / len(values)"), "{calc}");
    }
}

fn finish(mut child: Child) -> Outcome {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = vec![];
        out.read_to_end(&mut s).unwrap();
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = vec![];
        err.read_to_end(&mut s).unwrap();
        s
    });
    let end = Instant::now() + Duration::from_secs(90);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code().unwrap_or(-1);
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("wuu exec hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    Outcome {
        code,
        stdout: text(t_out.join().unwrap()),
        stderr: text(t_err.join().unwrap()),
    }
}

/// The lines of a run's progress, with styles removed, the live status line's frames
/// dropped (what remains is what stays on screen).
fn screen_lines(text: &str) -> Vec<String> {
    let mut lines = vec![];
    for raw in text.split('\n') {
        // A live status frame is erased before the next line: what stays is after the
        // last erase of the row.
        let kept = raw.rsplit("\r\x1b[2K").next().unwrap_or("");
        let plain = anstream::adapter::strip_str(kept).to_string();
        lines.push(plain);
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// Checks the content every human form shows for the main job: the header, both
/// commands with exit code and duration and their output, the file change with its
/// counts, the model's text and the summary line.
fn assert_story(lines: &[String]) {
    let all = lines.join("\n");
    let pos = |needle: &str, from: usize| -> usize {
        lines
            .iter()
            .skip(from)
            .position(|l| l.contains(needle))
            .map(|p| p + from)
            .unwrap_or_else(|| panic!("no line with {needle:?} after line {from} in:\n{all}"))
    };
    let head = pos("provider: replay · model: replay-coder", 0);
    let _ = pos("workspace: ", head);
    let _ = pos("thread_id: ", head);
    let text1 = pos("Let me run the tests first.", head);
    let cmd1 = pos(TEST_CMD, text1);
    assert_eq!(lines[cmd1].trim_end(), TEST_CMD, "{all}");
    let exit1 = cmd1 + 1;
    assert_exit_line(&lines[exit1], &all);
    // The first run's output tail: the failure, then the echoed exit status.
    let fail = pos("FAILED (failures=1)", exit1);
    assert!(lines[fail].starts_with("    │ "), "{all}");
    let _ = pos("│ exit=1", fail);
    let read = pos("read_file calc.py", fail);
    let edit = pos("edit_file calc.py +1 −1", read);
    let cmd2 = pos(TEST_CMD, edit);
    assert_exit_line(&lines[cmd2 + 1], &all);
    let ok = pos("│ OK", cmd2);
    let _ = pos("│ exit=0", ok);
    let answer = pos("Fixed `average` in calc.py", ok);
    let summary = pos("completed · 1 turn · tokens ", answer);
    let s = &lines[summary];
    let rest = s
        .strip_prefix("completed · 1 turn · tokens ")
        .unwrap_or_else(|| panic!("summary line: {s:?}"));
    // `N in / N out / N cached · <wall time> · trace_path: <file>`
    let parts: Vec<&str> = rest.split(" · ").collect();
    assert_eq!(parts.len(), 3, "{s}");
    let tokens: Vec<&str> = parts[0].split(" / ").collect();
    assert_eq!(tokens.len(), 3, "{s}");
    for (t, what) in tokens.iter().zip(["in", "out", "cached"]) {
        let n = t
            .strip_suffix(&format!(" {what}"))
            .unwrap_or_else(|| panic!("{what} in {s}"));
        assert!(!n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == ','));
    }
    assert!(tokens[0] != "0 in" && tokens[1] != "0 out", "{s}");
    assert!(is_duration(parts[1]), "{s}");
    let trace = parts[2]
        .strip_prefix("trace_path: ")
        .unwrap_or_else(|| panic!("{s}"));
    assert!(Path::new(trace).is_file(), "{trace}");
}

/// `  ✓ exit 0 · <duration>` (the command ends with `echo`, so it exits 0).
fn assert_exit_line(l: &str, all: &str) {
    let d = l
        .strip_prefix("  ✓ exit 0 · ")
        .unwrap_or_else(|| panic!("exit line {l:?} in:\n{all}"));
    assert!(is_duration(d.trim_end()), "{l:?}");
}

/// `850ms`, `4.2s`, `2m05s`, `1h02m`.
fn is_duration(s: &str) -> bool {
    let num = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.');
    ["ms", "s"]
        .iter()
        .any(|u| s.strip_suffix(u).is_some_and(num))
        || s.split_once('m')
            .is_some_and(|(m, sec)| num(m) && sec.strip_suffix('s').is_some_and(num))
}

#[test]
fn main_job_without_a_terminal_is_plain_lines() {
    let job = Job::new();
    let o = job.piped(&[], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    job.assert_fixed();
    // stdout keeps its contract: the final message only.
    assert_eq!(o.stdout, format!("{FINAL}\n"));
    // No control sequence of any kind: no colour, no cursor movement, no spinner.
    assert!(
        !o.stderr.contains('\x1b') && !o.stderr.contains('\r'),
        "{:?}",
        o.stderr
    );
    assert!(!o.stderr.contains('⠋'));
    let lines: Vec<String> = o.stderr.lines().map(str::to_owned).collect();
    assert_story(&lines);
    // The summary is the last line.
    assert!(
        lines.last().unwrap().starts_with("completed · "),
        "{}",
        o.stderr
    );

    // `--color always` styles the same lines, and still draws no live line.
    let job = Job::new();
    let o = job.piped(&["--color", "always"], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("\x1b["), "{:?}", o.stderr);
    assert!(
        !o.stderr.contains("\x1b[2K") && !o.stderr.contains('\r'),
        "{:?}",
        o.stderr
    );
    assert_story(&screen_lines(&o.stderr));
}

#[test]
fn main_job_on_a_terminal_is_live_and_coloured() {
    let job = Job::new();
    let o = job.on_terminal(&[], &[]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    job.assert_fixed();
    let screen = &o.stdout;
    // Colour, and the live status line (drawn with the spinner and erased again).
    assert!(screen.contains("\x1b[32m"), "{screen:?}");
    assert!(screen.contains("\r\x1b[2K"), "{screen:?}");
    assert!(screen.contains('⠋'), "{screen:?}");
    let lines = screen_lines(screen);
    assert_story(&lines);
    // The final message (stdout) comes last, after the summary.
    assert_eq!(lines.last().map(String::as_str), Some(FINAL), "{screen:?}");
    let summary = &lines[lines.len() - 2];
    assert!(summary.starts_with("completed · 1 turn"), "{screen:?}");
}

#[test]
fn no_color_and_color_never_give_plain_lines_on_a_terminal() {
    for (extra, env) in [
        (&[][..], &[("NO_COLOR", "1")][..]),
        (&["--color", "never"][..], &[][..]),
    ] {
        let job = Job::new();
        let o = job.on_terminal(extra, env);
        assert_eq!(o.code, 0, "{extra:?} {env:?}: {}", o.stdout);
        job.assert_fixed();
        // After the terminal's own `\r\n`: no escape, no carriage return, no spinner.
        assert!(
            !o.stdout.contains('\x1b') && !o.stdout.contains('\r'),
            "{extra:?} {env:?}: {:?}",
            o.stdout
        );
        assert!(!o.stdout.contains('⠋'));
        let lines: Vec<String> = o.stdout.lines().map(str::to_owned).collect();
        assert_story(&lines);
        assert_eq!(lines.last().map(String::as_str), Some(FINAL));
    }
}

#[test]
fn quiet_keeps_the_final_message_and_errors() {
    let job = Job::new();
    let o = job.piped(&["--quiet"], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    job.assert_fixed();
    assert_eq!(o.stdout, format!("{FINAL}\n"));
    assert_eq!(o.stderr, "");

    // On a terminal too: the answer alone.
    let job = Job::new();
    let o = job.on_terminal(&["-q"], &[]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(o.stdout, format!("{FINAL}\n"));

    // An error still shows: a cassette without responses fails the first request.
    let mut job = Job::new();
    let cassette = job.home.path().join("empty.json");
    std::fs::write(
        &cassette,
        r#"{"protocol":"openai-compatible","responses":[]}"#,
    )
    .unwrap();
    job.config = job.home.path().join("config.json");
    let cfg = serde_json::json!({
        "default_provider": "replay",
        "providers": {"replay": {"type": "replay", "cassette": cassette, "model": "r"}},
    });
    std::fs::write(&job.config, cfg.to_string()).unwrap();
    let o = job.piped(&["--quiet"], &[]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    assert_eq!(o.stdout, "");
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.stderr);
    assert!(lines[0].starts_with("error: "), "{}", o.stderr);
    assert!(lines[0].contains("has 0 responses"), "{}", o.stderr);

    // Without --quiet the failure has its summary line before the error.
    let o = job.piped(&[], &[]);
    assert_eq!(o.code, 7, "{}", o.stderr);
    let lines: Vec<&str> = o.stderr.lines().collect();
    let n = lines.len();
    assert!(
        n >= 2 && lines[n - 2].starts_with("failed · 1 turn · tokens 0 in"),
        "{}",
        o.stderr
    );
    assert!(lines[n - 1].starts_with("error: "), "{}", o.stderr);
}

#[test]
fn bad_color_value_is_invalid_input() {
    let job = Job::new();
    let o = job.piped(&["--color", "sometimes"], &[]);
    assert_eq!(o.code, 2);
    assert_eq!(o.stdout, "");
    assert!(
        o.stderr.starts_with("error: invalid --color"),
        "{}",
        o.stderr
    );
}

#[test]
fn the_final_message_on_a_terminal_has_no_escape_sequences() {
    let mut job = Job::new();
    let cassette = job.home.path().join("esc.json");
    let text = "Final \u{1b}[31mRED\u{1b}[0m \u{1b}]52;c;ZXZpbA==\u{7} done";
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "r",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let cfg = serde_json::json!({
        "protocol": "openai-compatible",
        "responses": [{"events": [
            chunk(serde_json::json!({"role": "assistant", "content": text}), serde_json::Value::Null),
            chunk(serde_json::json!({}), serde_json::json!("stop")),
        ]}],
    });
    std::fs::write(&cassette, cfg.to_string()).unwrap();
    job.config = job.home.path().join("config.json");
    let cfg = serde_json::json!({
        "default_provider": "replay",
        "providers": {"replay": {"type": "replay", "cassette": cassette, "model": "r"}},
    });
    std::fs::write(&job.config, cfg.to_string()).unwrap();
    // On a terminal: the text without its sequences (OSC 52 would write the clipboard).
    let o = job.on_terminal(&["-q"], &[]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(o.stdout, "Final RED  done\n");
    // Into a pipe: the answer as the model gave it (scripts get the data).
    let mut job2 = Job::new();
    job2.config = job.config.clone();
    let o = job2.piped(&["-q"], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("{text}\n"));
}
