//! How the git views run git (spec `app-server.md`, workspace/git/*).
//!
//! The workspace's repository configuration can name programs (`filter.*.clean`
//! through `.gitattributes`, hooks through `core.hooksPath`), so `git` never runs as a
//! plain child of the host: it runs through the command sandbox launcher in `read_only`
//! mode (the workspace readable, nothing writable but a private temp dir, the same read
//! roots as `bash`) with the command environment (no provider keys, see
//! `tools::sandbox::command_env`). A filter a repository configures therefore runs
//! confined and without secrets. Where Landlock is unavailable git runs directly, with
//! the same environment and flags (logged as a warning). Always: hooks off
//! (`core.hooksPath=/dev/null`), external diff drivers, text conversion, fsmonitor and
//! optional index locks off, variables that redirect git (`GIT_DIR`, …) removed, bounded
//! output (8 MiB for listings, 512 KiB for a patch or a file text, 4 KiB of stderr) and a
//! 25 s deadline (then its process group is killed).

use super::super::{err, Refusal, GIT_LIST_BYTES, GIT_TIMEOUT};
use crate::session::Host;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one git command printed (bounded) and how it ended.
pub(super) struct GitOut {
    pub(super) stdout: Vec<u8>,
    pub(super) truncated: bool,
    pub(super) code: Option<i32>,
    pub(super) stderr: String,
}

/// How the git commands of one view run (see the module doc): through the command
/// sandbox launcher in `read_only` mode when Landlock is available, else directly
/// (hardened flags and the scrubbed environment only).
pub(super) struct Git {
    deadline: Instant,
    /// The launcher and its arguments up to and including `--`; None = run git directly.
    launch: Option<(PathBuf, Vec<std::ffi::OsString>)>,
    /// The environment (the command environment: no provider keys or secret-looking
    /// variables, no variables that redirect git to another repository).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

/// Variables that would point git at another repository, index or object store.
const GIT_REDIRECT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
];

impl Git {
    pub(super) fn new(shared: &Host) -> Git {
        use crate::tools::{sandbox, PermissionMode, ToolContext};
        let home = &shared.opts.home;
        let workdir = &shared.opts.workdir;
        let ctx = ToolContext {
            workspace_root: std::fs::canonicalize(workdir).unwrap_or_else(|_| workdir.clone()),
            cwd: workdir.clone(),
            permission_mode: PermissionMode::ReadOnly,
            spill_dir: home.join("spill").join("workspace-views"),
            default_timeout_ms: 0,
            output_cap_bytes: 0,
            temp_dir: home.join("tmp").join("workspace-views"),
            sandbox: sandbox::SandboxSettings {
                // The wuu home is hidden from git (and whatever it runs) as from `bash`.
                process_ledger: Some(home.clone()),
                ..sandbox::SandboxSettings::from_config(&shared.config())
            },
            background: None,
            max_background: 0,
        };
        let launch = match (sandbox::status(), sandbox::launcher()) {
            (sandbox::Status::Available(_), Ok(exe)) => {
                match std::fs::create_dir_all(&ctx.temp_dir) {
                    Ok(()) => {
                        let mut args: Vec<std::ffi::OsString> = vec![
                            sandbox::LAUNCHER_ARG.into(),
                            "--ppid".into(),
                            std::process::id().to_string().into(),
                            "--mode".into(),
                            "read_only".into(),
                        ];
                        args.extend(sandbox::policy_args(&ctx));
                        args.push("--".into());
                        Some((exe, args))
                    }
                    Err(e) => {
                        log::warn!(
                            "workspace git views: cannot create {}: {e}; git runs unconfined (hardened flags, scrubbed environment)",
                            ctx.temp_dir.display()
                        );
                        None
                    }
                }
            }
            (sandbox::Status::Unavailable(why), _) => {
                log::warn!("workspace git views: the command sandbox is unavailable ({why}); git runs unconfined (hardened flags, scrubbed environment)");
                None
            }
            (_, Err(e)) => {
                log::warn!("workspace git views: {e}; git runs unconfined (hardened flags, scrubbed environment)");
                None
            }
        };
        let mut env: Vec<_> = sandbox::command_env(&ctx)
            .into_iter()
            .filter(|(k, _)| !GIT_REDIRECT_VARS.iter().any(|v| k == v))
            .collect();
        for (k, v) in [
            ("GIT_OPTIONAL_LOCKS", "0"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("LC_ALL", "C"),
        ] {
            env.retain(|(n, _)| n != k);
            env.push((k.into(), v.into()));
        }
        Git {
            deadline: Instant::now() + GIT_TIMEOUT,
            launch,
            env,
        }
    }
}

/// Runs `git ARGS` in `dir` with bounded output and the shared deadline: confined by
/// the command sandbox (`read_only`) when it is available, with the command
/// environment, repository hooks disabled (`core.hooksPath=/dev/null`), no fsmonitor,
/// no optional locks, and in its own process group (killed whole at the deadline).
pub(super) fn git(dir: &Path, g: &Git, limit: usize, args: &[&str]) -> Result<GitOut, Refusal> {
    let mut cmd = match &g.launch {
        Some((exe, pre)) => {
            let mut c = Command::new(exe);
            c.args(pre).arg("git");
            c
        }
        None => Command::new("git"),
    };
    cmd.args([
        "--no-pager",
        "--literal-pathspecs",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.quotePath=false",
        "-c",
        "diff.external=",
    ])
    .args(args)
    .current_dir(dir)
    .env_clear()
    .envs(g.env.iter().map(|(k, v)| (k, v)))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if g.launch.is_none() {
        // (The launcher starts a session of its own, so it is its group's leader.)
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| err(format!("cannot run git: {e}")))?;
    fn drain(
        mut r: impl Read + Send + 'static,
        limit: usize,
    ) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            let mut cut = false;
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = limit.saturating_sub(kept.len());
                        if n > room {
                            cut = true;
                        }
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
            (kept, cut)
        })
    }
    let out = drain(child.stdout.take().expect("piped"), limit);
    let errs = drain(child.stderr.take().expect("piped"), 4096);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= g.deadline => {
                if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!(
                    "git {} did not finish within {} s",
                    args.first().unwrap_or(&""),
                    GIT_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(err(format!("git: {e}"))),
        }
    };
    let (stdout, truncated) = out.join().unwrap_or_default();
    let (stderr, _) = errs.join().unwrap_or_default();
    Ok(GitOut {
        stdout,
        truncated,
        code: status.code(),
        stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
    })
}

/// A git listing that must succeed and fit.
pub(super) fn git_list(dir: &Path, g: &Git, args: &[&str]) -> Result<Vec<u8>, Refusal> {
    let o = git(dir, g, GIT_LIST_BYTES, args)?;
    if o.code != Some(0) {
        return Err(err(format!(
            "git {}: {} (exit {:?})",
            args.first().unwrap_or(&""),
            o.stderr,
            o.code
        )));
    }
    if o.truncated {
        return Err(err("repository changes exceed the remote view limit"));
    }
    Ok(o.stdout)
}
