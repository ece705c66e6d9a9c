//! End-to-end tests of what the HOST itself reads from a workspace (issue 10, attack
//! report B1, B2, B6, B8, B9, B10): `AGENTS.md`, project config layers, project skills,
//! the repository the workspace git views run on, and the wuu home when the workspace
//! holds it. The real binary (`wuu exec`, `wuu app-server`), a fake provider on
//! 127.0.0.1, and a scratch layout:
//!
//! ```text
//! base/ws/        the workspace
//! base/outside/   secret.txt (must never reach the model, a client or a log)
//! base/home/      $HOME
//! base/wuu/       WUU_HOME (user config with provider `fake`, key in FAKE_API_KEY)
//! ```
//!
//! Hangs are caught by a harness deadline (the process is killed and the test fails),
//! never by a timing assertion.

mod support;

use serde_json::{json, Value};
use std::fs;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::app::App;
use support::fake_provider::{FakeProvider, Script};

const BIN: &str = env!("CARGO_BIN_EXE_wuu");
const SECRET: &str = "OUTSIDE-SECRET-h0stre4ds";
const KEY: &str = "sk-fake-KEY-h0stre4ds-5e8a1f";
/// How long a run may take before the harness calls it a hang.
const HANG: Duration = Duration::from_secs(60);

struct Lab {
    _dir: tempfile::TempDir,
    base: PathBuf,
    fake: FakeProvider,
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

fn config(fake: &FakeProvider) -> Value {
    json!({
        "default_provider": "fake",
        "providers": {"fake": {
            "type": "openai-compatible", "base_url": fake.base_url(), "model": "m",
            "api_key_env": "FAKE_API_KEY",
            "max_retries": 0, "initial_backoff_ms": 1, "max_backoff_ms": 5,
        }},
        "agent": {"auto_title": false},
    })
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(dir.path()).unwrap();
        for d in ["ws", "outside", "home", "wuu"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        fs::write(base.join("outside/secret.txt"), format!("{SECRET}\n")).unwrap();
        let fake = FakeProvider::start();
        fs::write(base.join("wuu/config.json"), config(&fake).to_string()).unwrap();
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

    /// `wuu exec` in `cwd` with the given environment; `stdin_open` keeps a pipe to its
    /// stdin open (never written) for the whole run.
    fn exec_in(&self, cwd: &Path, env: &[(&str, &Path)], mode: &str, stdin_open: bool) -> Run {
        let mut c = Command::new(BIN);
        c.arg("exec")
            .arg("--json")
            .arg("--permission-mode")
            .arg(mode)
            .arg("go")
            .env("WUU_HOME", self.base.join("wuu"))
            .env("HOME", self.base.join("home"))
            .env("FAKE_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .current_dir(cwd)
            .stdin(if stdin_open {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("spawn wuu");
        let _stdin = child.stdin.take();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let t_err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let end = Instant::now() + HANG;
        let code = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st.code().unwrap_or(-1);
            }
            if Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("wuu exec hung (killed after {HANG:?})");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Run {
            code,
            stdout: t_out.join().unwrap(),
            stderr: t_err.join().unwrap(),
        }
    }

    fn exec(&self, mode: &str) -> Run {
        self.exec_in(&self.ws(), &[], mode, false)
    }

    /// The system prompt of the last provider request.
    fn last_system(&self) -> String {
        let reqs = self.fake.requests();
        let last = reqs.last().expect("the provider was called");
        last.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Every provider request body, as text.
    fn all_requests(&self) -> String {
        self.fake
            .requests()
            .iter()
            .map(|r| r.body.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn app(&self) -> App {
        App::spawn_in_env(
            &self.base.join("wuu"),
            &self.ws(),
            &[
                ("HOME", self.base.join("home").to_str().unwrap()),
                ("FAKE_API_KEY", KEY),
            ],
        )
    }
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(st.success());
}

fn git(dir: &Path, home: &Path, args: &[&str]) {
    let st = Command::new("git")
        .args(["-c", "user.email=t@e.st", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("git");
    assert!(st.success(), "git {args:?}");
}

/// B1: `AGENTS.md` that links out of the workspace (to an outside file, to the host's
/// own `/proc/self/environ`) never reaches the system prompt; an inside one does.
#[test]
fn agents_md_links_out_are_not_read() {
    let lab = Lab::new();
    fs::write(lab.ws().join("AGENTS.md"), "INSIDE-RULES-42\n").unwrap();
    lab.fake.push(Script::text(&["done"]));
    let r = lab.exec("read_only");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(lab.last_system().contains("INSIDE-RULES-42"));

    for target in [
        lab.outside().join("secret.txt"),
        "/proc/self/environ".into(),
    ] {
        fs::remove_file(lab.ws().join("AGENTS.md")).unwrap();
        symlink(&target, lab.ws().join("AGENTS.md")).unwrap();
        for mode in ["read_only", "standard"] {
            lab.fake.push(Script::text(&["done"]));
            let r = lab.exec(mode);
            assert_eq!(r.code, 0, "{}", r.stderr);
            let sys = lab.last_system();
            assert!(!sys.contains(SECRET), "outside file in the prompt: {sys}");
            assert!(!sys.contains(KEY), "the key is in the prompt");
            assert!(
                !sys.contains("FAKE_API_KEY"),
                "the environ is in the prompt"
            );
            assert!(!sys.contains("Instructions from"), "{sys}");
            assert!(!r.all().contains(SECRET) && !r.all().contains(KEY));
            assert!(
                r.stderr.contains("AGENTS.md: not read as instructions"),
                "a clear log line: {}",
                r.stderr
            );
        }
    }
    // A link that stays inside the workspace is followed.
    fs::write(lab.ws().join("rules.md"), "LINKED-RULES-7\n").unwrap();
    fs::remove_file(lab.ws().join("AGENTS.md")).unwrap();
    symlink("rules.md", lab.ws().join("AGENTS.md")).unwrap();
    lab.fake.push(Script::text(&["done"]));
    assert_eq!(lab.exec("standard").code, 0);
    assert!(lab.last_system().contains("LINKED-RULES-7"));
    assert!(!lab.all_requests().contains(KEY));
}

/// B10: a FIFO `AGENTS.md`, or one linked to the host's own stdin, never blocks a turn.
#[test]
fn agents_md_fifo_or_stdin_does_not_hang_the_turn() {
    let lab = Lab::new();
    fs::create_dir_all(lab.ws().join("sub")).unwrap();
    mkfifo(&lab.ws().join("AGENTS.md"));
    symlink("/proc/self/fd/0", lab.ws().join("sub/AGENTS.md")).unwrap();
    for cwd in [lab.ws(), lab.ws().join("sub")] {
        lab.fake.push(Script::text(&["done"]));
        // stdin stays open and silent: a host that read it would wait forever.
        let r = lab.exec_in(&cwd, &[], "standard", true);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(r.stdout.contains("done"), "{}", r.stdout);
        assert!(r.stderr.contains("not a regular file") || r.stderr.contains("outside"));
    }
}

/// B1 + B10 on the app-server: `instructions/list {include_content}` answers, shows an
/// inside file, and never an outside one or a FIFO.
#[test]
fn instructions_list_reads_beneath_the_workspace() {
    let lab = Lab::new();
    fs::write(lab.ws().join("AGENTS.md"), "INSIDE-RULES-42\n").unwrap();
    let mut app = lab.app();
    let r = app.call("instructions/list", json!({"include_content": true}));
    let files = r["files"].as_array().unwrap().clone();
    assert!(files
        .iter()
        .any(|f| f["content"].as_str() == Some("INSIDE-RULES-42\n")));

    fs::remove_file(lab.ws().join("AGENTS.md")).unwrap();
    symlink(lab.outside().join("secret.txt"), lab.ws().join("AGENTS.md")).unwrap();
    let r = app.call("instructions/list", json!({"include_content": true}));
    assert!(!r.to_string().contains(SECRET), "{r}");
    assert!(!r["files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["source"] == "project"));

    fs::remove_file(lab.ws().join("AGENTS.md")).unwrap();
    mkfifo(&lab.ws().join("AGENTS.md"));
    // Answers (the App harness fails the test after its own deadline otherwise).
    let r = app.call("instructions/list", json!({"include_content": true}));
    assert!(r["files"].is_array());
}

/// B9: a project layer that links out of the workspace is refused without being read
/// (its content never shows in an error); a FIFO layer does not hang startup.
#[test]
fn project_layer_links_out_are_refused() {
    let lab = Lab::new();
    fs::write(
        lab.outside().join("cfg.json"),
        format!("{{\"agent\":{{\"{SECRET}\":1}}}}"),
    )
    .unwrap();
    symlink("../outside/cfg.json", lab.ws().join(".wuu.json")).unwrap();
    lab.fake.push(Script::text(&["done"]));
    let r = lab.exec("standard");
    assert!(
        !r.all().contains(SECRET),
        "outside content echoed: {}",
        r.all()
    );
    assert!(
        r.all().contains("leads outside the workspace"),
        "the refusal is reported: {}",
        r.all()
    );

    // Control: the same file inside the workspace is read (and its unknown field named).
    fs::remove_file(lab.ws().join(".wuu.json")).unwrap();
    fs::copy(lab.outside().join("cfg.json"), lab.ws().join(".wuu.json")).unwrap();
    lab.fake.push(Script::text(&["done"]));
    let r = lab.exec("standard");
    assert!(r.all().contains("unknown field"), "{}", r.all());

    fs::remove_file(lab.ws().join(".wuu.json")).unwrap();
    fs::create_dir_all(lab.ws().join(".wuu")).unwrap();
    mkfifo(&lab.ws().join(".wuu/settings.json"));
    lab.fake.push(Script::text(&["done"]));
    // Refused with a clear configuration error (as any invalid layer), never waited on.
    let r = lab.exec("standard");
    assert!(r.all().contains("not a regular file"), "{}", r.all());
}

fn skill(dir: &Path, name: &str, body: &str) {
    fs::create_dir_all(dir.join(name)).unwrap();
    fs::write(
        dir.join(name).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: d\n---\n{body}\n"),
    )
    .unwrap();
}

/// The tool result the model got for the last call.
fn last_tool_result(lab: &Lab) -> String {
    let reqs = lab.fake.requests();
    reqs.last()
        .and_then(|r| r.body["messages"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

/// B9: `.wuu` or `.wuu/skills` linked out of the workspace: `load_skill` never returns
/// an outside `SKILL.md`; an inside skill loads.
#[test]
fn skills_linked_out_are_not_loaded() {
    let lab = Lab::new();
    skill(&lab.ws().join(".wuu/skills"), "good", "GOOD-BODY-1");
    skill(
        &lab.outside().join("dotwuu/skills"),
        "evil",
        "OUTSIDE-SKILL-BODY",
    );
    let load = |name: &str| {
        lab.fake.push(Script::tool_call(
            "c1",
            "load_skill",
            &json!({ "name": name }).to_string(),
        ));
        lab.fake.push(Script::text(&["done"]));
        let r = lab.exec("standard");
        assert_eq!(r.code, 0, "{}", r.all());
        (last_tool_result(&lab), r)
    };
    let (res, _) = load("good");
    assert!(res.contains("GOOD-BODY-1"), "{res}");

    // `.wuu` itself linked out: its project layers are refused (a configuration error
    // for exec), and the app-server lists no skill from it.
    fs::remove_dir_all(lab.ws().join(".wuu")).unwrap();
    symlink("../outside/dotwuu", lab.ws().join(".wuu")).unwrap();
    let mut app = lab.app();
    let list = app.call("skill/list", json!({}));
    assert!(!list.to_string().contains("evil"), "{list}");
    drop(app);

    fs::remove_file(lab.ws().join(".wuu")).unwrap();
    fs::create_dir_all(lab.ws().join(".wuu")).unwrap();
    symlink("../../outside/dotwuu/skills", lab.ws().join(".wuu/skills")).unwrap();
    let (res, r) = load("evil");
    assert!(!res.contains("OUTSIDE-SKILL-BODY"), "{res}");
    assert!(!lab.all_requests().contains("OUTSIDE-SKILL-BODY"));
    assert!(r.stderr.contains("leads outside"), "{}", r.stderr);

    // A skill folder linked out, next to a real one.
    fs::remove_file(lab.ws().join(".wuu/skills")).unwrap();
    skill(&lab.ws().join(".wuu/skills"), "good", "GOOD-BODY-1");
    symlink(
        "../../../outside/dotwuu/skills/evil",
        lab.ws().join(".wuu/skills/evil"),
    )
    .unwrap();
    let (res, _) = load("evil");
    assert!(!res.contains("OUTSIDE-SKILL-BODY"), "{res}");
    let (res, _) = load("good");
    assert!(res.contains("GOOD-BODY-1"), "{res}");
}

/// B2: a clean filter (`.gitattributes` + `.git/config`) and an index hook
/// (`core.hooksPath`) planted in the workspace never run on the host with the key: the
/// hook does not run at all, the filter runs only inside the read-only sandbox with the
/// command environment, and neither can write outside.
#[test]
fn workspace_git_views_run_planted_programs_confined() {
    planted_programs(false);
}

/// B2 without Landlock (`WUU_SANDBOX_UNAVAILABLE=1`): git runs directly, hooks still
/// never run, and the filter (which then does run unconfined) gets no provider key.
#[test]
fn workspace_git_views_without_landlock_still_scrub_and_disable_hooks() {
    planted_programs(true);
}

fn planted_programs(no_landlock: bool) {
    let lab = Lab::new();
    let (ws, home) = (lab.ws(), lab.base.join("home"));
    fs::write(ws.join("f.txt"), "one\n").unwrap();
    git(&ws, &home, &["init", "-q"]);
    git(&ws, &home, &["add", "f.txt"]);
    git(&ws, &home, &["commit", "-qm", "init"]);
    let marker = lab.outside().join("PWNED");
    let m = marker.display();
    fs::write(
        ws.join(".git/filter.sh"),
        format!(
            "#!/bin/sh\nenv > \"$TMPDIR/filter-env\" 2>/dev/null\nenv >> {m}-filter 2>/dev/null\ncat\n"
        ),
    )
    .unwrap();
    fs::create_dir_all(ws.join(".git/hooks2")).unwrap();
    for hook in ["post-index-change", "post-checkout", "pre-commit"] {
        fs::write(
            ws.join(".git/hooks2").join(hook),
            format!("#!/bin/sh\nenv >> {m}-hook\ntouch \"$TMPDIR/hook-ran\"\n"),
        )
        .unwrap();
    }
    Command::new("chmod")
        .args(["-R", "+x"])
        .arg(ws.join(".git/filter.sh"))
        .arg(ws.join(".git/hooks2"))
        .status()
        .unwrap();
    let cfg = ws.join(".git/config");
    let mut text = fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[filter \"x\"]\n\tclean = {}\n[core]\n\thooksPath = {}\n",
        ws.join(".git/filter.sh").display(),
        ws.join(".git/hooks2").display()
    ));
    fs::write(&cfg, text).unwrap();
    fs::write(ws.join(".gitattributes"), "* filter=x\n").unwrap();
    fs::write(ws.join("f.txt"), "one\ntwo\n").unwrap();

    let mut app = if no_landlock {
        App::spawn_in_env(
            &lab.base.join("wuu"),
            &lab.ws(),
            &[
                ("HOME", lab.base.join("home").to_str().unwrap()),
                ("FAKE_API_KEY", KEY),
                ("WUU_SANDBOX_UNAVAILABLE", "1"),
            ],
        )
    } else {
        lab.app()
    };
    let st = app.call("workspace/git/status", json!({}));
    assert_eq!(st["is_repo"], true, "{st}");
    let ch = app.call("workspace/git/changes", json!({}));
    assert!(ch.to_string().contains("f.txt"), "{ch}");
    let d = app.call("workspace/git/diff", json!({"path": "f.txt"}));
    assert!(
        d["patch"].as_str().unwrap_or_default().contains("+two"),
        "{d}"
    );
    drop(app);

    let hook = PathBuf::from(format!("{m}-hook"));
    assert!(
        !hook.exists(),
        "a repository hook ran: {:?}",
        fs::read_to_string(&hook)
    );
    let filter = PathBuf::from(format!("{m}-filter"));
    if no_landlock {
        // Unconfined, but with the command environment.
        let env = fs::read_to_string(&filter).expect("the filter ran");
        assert!(!env.contains(KEY) && !env.contains("FAKE_API_KEY"), "{env}");
        return;
    }
    assert!(
        !filter.exists(),
        "the filter wrote outside: {:?}",
        fs::read_to_string(&filter)
    );
    let tmp = lab.base.join("wuu/tmp/workspace-views");
    assert!(!tmp.join("hook-ran").exists(), "a repository hook ran");
    // The filter did run (so the test is not vacuous), confined and without the key.
    let env = fs::read_to_string(tmp.join("filter-env")).expect("the filter ran in the sandbox");
    assert!(env.contains("WUU_SANDBOX=read_only"), "{env}");
    assert!(!env.contains(KEY) && !env.contains("FAKE_API_KEY"), "{env}");
}

/// B8: a `.git` file pointing at a repository outside the workspace is refused by the
/// git views; nothing of the outside repository is returned.
#[test]
fn workspace_git_views_refuse_a_git_dir_outside() {
    let lab = Lab::new();
    let home = lab.base.join("home");
    let repo = lab.outside().join("repo");
    fs::create_dir_all(&repo).unwrap();
    fs::write(repo.join("secret.txt"), format!("{SECRET}\n")).unwrap();
    git(&repo, &home, &["init", "-q"]);
    git(&repo, &home, &["add", "."]);
    git(&repo, &home, &["commit", "-qm", "s"]);
    fs::write(
        lab.ws().join(".git"),
        format!("gitdir: {}\n", repo.join(".git").display()),
    )
    .unwrap();
    let mut app = lab.app();
    for (method, params) in [
        ("workspace/git/status", json!({})),
        ("workspace/git/changes", json!({})),
        ("workspace/git/diff", json!({"path": "secret.txt"})),
    ] {
        let id = app.send(method, params);
        let r = app.response(&id);
        assert!(!r.to_string().contains(SECRET), "{method}: {r}");
        let refused = r.get("error").is_some() || r["result"]["is_repo"] == false;
        assert!(refused, "{method} used the outside repository: {r}");
    }
}

/// B6 (file tools): with the workspace holding the wuu home (workspace = `~`, default
/// `~/.wuu`), file tools refuse its files (also through a link made in the workspace)
/// and listings leave it out; the user config is unchanged.
#[test]
fn file_tools_refuse_the_wuu_home_inside_the_workspace() {
    let lab = Lab::new();
    let home = lab.base.join("home");
    let wuu = home.join(".wuu");
    fs::create_dir_all(&wuu).unwrap();
    let cfg_text = config(&lab.fake).to_string();
    fs::write(wuu.join("config.json"), &cfg_text).unwrap();
    fs::write(home.join("inside.txt"), "INSIDE-FILE\n").unwrap();
    symlink(".wuu", home.join("w")).unwrap();
    symlink(".wuu/config.json", home.join("c.json")).unwrap();
    let patch =
        "*** Begin Patch\n*** Update File: .wuu/config.json\n@@\n-{\n+{\"x\":1,\n*** End Patch";
    let calls: Vec<(&str, Value)> = vec![
        ("read_file", json!({"path": "inside.txt"})),
        ("read_file", json!({"path": ".wuu/config.json"})),
        ("read_file", json!({"path": "w/config.json"})),
        ("read_file", json!({"path": "c.json"})),
        ("read_file", json!({"path": ".wuu/wuu.db"})),
        (
            "write_file",
            json!({"path": ".wuu/config.json", "content": "{}"}),
        ),
        (
            "write_file",
            json!({"path": "w/config.json", "content": "{}"}),
        ),
        ("write_file", json!({"path": "c.json", "content": "{}"})),
        (
            "write_file",
            json!({"path": ".wuu/new.json", "content": "{}"}),
        ),
        (
            "edit_file",
            json!({"path": "c.json", "old_string": "standard", "new_string": "unconfined"}),
        ),
        ("apply_patch", json!({ "patch": patch })),
        ("grep", json!({"pattern": "default_provider", "path": "."})),
        ("grep", json!({"pattern": "default_provider", "path": "w"})),
        ("glob", json!({"pattern": "**/*.json"})),
        ("list_files", json!({"path": "."})),
        ("list_files", json!({"path": "w"})),
    ];
    // WUU_HOME unset: the run's wuu home is the default ~/.wuu, inside the workspace ~.
    let r = {
        let mut c = Command::new(BIN);
        c.arg("exec")
            .arg("--json")
            .arg("--permission-mode")
            .arg("standard")
            .arg("go")
            .env_remove("WUU_HOME")
            .env("HOME", &home)
            .env("FAKE_API_KEY", KEY)
            .current_dir(&home)
            .stdin(Stdio::null());
        for (i, (name, args)) in calls.iter().enumerate() {
            lab.fake
                .push(Script::tool_call(&format!("d{i}"), name, &args.to_string()));
        }
        lab.fake.push(Script::text(&["done"]));
        let out = c.output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    assert!(r.code == 0 || r.code == 3, "{}", r.all());
    let reqs = lab.fake.requests();
    let results: Vec<String> = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let results = &results[results.len() - calls.len()..];
    assert!(results[0].contains("INSIDE-FILE"), "{}", results[0]);
    for (i, res) in results.iter().enumerate().skip(1) {
        assert!(
            !res.contains("default_provider") && !res.contains("api_key_env"),
            "call {i} {:?} showed the user config: {res}",
            calls[i]
        );
        if i <= 10 {
            assert!(res.contains("wuu home"), "call {i} {:?}: {res}", calls[i]);
        }
    }
    for i in [13, 14, 15] {
        assert!(!results[i].contains(".wuu/"), "listing {i}: {}", results[i]);
    }
    assert_eq!(
        fs::read_to_string(wuu.join("config.json")).unwrap(),
        cfg_text
    );
    assert!(!wuu.join("new.json").exists());
}

/// B6 (file tools): a user config given with `--config FILE` inside the workspace is
/// fenced too: refused by name, through a symbolic link and through a hard link, and left
/// out of listings; it stays unchanged.
#[test]
fn file_tools_refuse_a_user_config_inside_the_workspace() {
    let lab = Lab::new();
    let cfg = lab.ws().join("my-wuu.json");
    let cfg_text = config(&lab.fake).to_string();
    fs::write(&cfg, &cfg_text).unwrap();
    fs::write(lab.ws().join("inside.txt"), "INSIDE-FILE\n").unwrap();
    symlink("my-wuu.json", lab.ws().join("soft.json")).unwrap();
    fs::hard_link(&cfg, lab.ws().join("hard.json")).unwrap();
    let calls: Vec<(&str, Value)> = vec![
        ("read_file", json!({"path": "inside.txt"})),
        ("read_file", json!({"path": "my-wuu.json"})),
        ("read_file", json!({"path": "soft.json"})),
        ("read_file", json!({"path": "hard.json"})),
        ("write_file", json!({"path": "soft.json", "content": "{}"})),
        (
            "edit_file",
            json!({"path": "my-wuu.json", "old_string": "fake", "new_string": "x"}),
        ),
        ("grep", json!({"pattern": "default_provider", "path": "."})),
        ("glob", json!({"pattern": "*.json"})),
        ("list_files", json!({"path": "."})),
    ];
    for (i, (name, args)) in calls.iter().enumerate() {
        lab.fake
            .push(Script::tool_call(&format!("c{i}"), name, &args.to_string()));
    }
    lab.fake.push(Script::text(&["done"]));
    let out = Command::new(BIN)
        .arg("exec")
        .arg("--json")
        .arg("--config")
        .arg(&cfg)
        .arg("--permission-mode")
        .arg("standard")
        .arg("go")
        .env("WUU_HOME", lab.base.join("wuu"))
        .env("HOME", lab.base.join("home"))
        .env("FAKE_API_KEY", KEY)
        .current_dir(lab.ws())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 3, "{out:?}");
    let reqs = lab.fake.requests();
    let results: Vec<String> = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(results.len(), calls.len());
    assert!(results[0].contains("INSIDE-FILE"), "{}", results[0]);
    for (i, res) in results.iter().enumerate().skip(1) {
        assert!(
            !res.contains("default_provider") && !res.contains("api_key_env"),
            "call {i} {:?} showed the user config: {res}",
            calls[i]
        );
        if i <= 5 {
            assert!(res.contains("user config file"), "call {i}: {res}");
        }
    }
    for i in [7, 8] {
        assert!(
            !results[i].contains("my-wuu.json"),
            "listing {i}: {}",
            results[i]
        );
    }
    assert_eq!(fs::read_to_string(&cfg).unwrap(), cfg_text);
}
