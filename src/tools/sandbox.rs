//! The process sandbox of `bash` and the launcher that applies it.
//!
//! The host never restricts itself and never runs code between `fork` and `exec` (it is
//! multi-threaded; allocating there is unsound). Instead every command is started
//! through the host's own binary as a small launcher, the hidden subcommand
//! [`LAUNCHER_ARG`] (as Codex does with its Linux sandbox helper):
//!
//! ```text
//! wuu __sandbox --ppid PID --mode standard|read_only|unconfined [--service]
//!               [--read DIR]… [--write DIR]… [--hide PATH]… [--mask PATH]…
//!               -- SHELL -c COMMAND
//! ```
//!
//! The launcher, a fresh single-threaded process:
//!
//! 1. starts a session of its own (`setsid`, its very first act): it becomes session and
//!    process group leader (the group id the host signals and records is its pid), and
//!    the command has no controlling terminal (no `/dev/tty`, no `TIOCSTI`);
//! 2. in `standard` and `read_only` mode enters a private mount namespace (see
//!    `mount_ns`): the whole tree read-only, the `--write` roots read-write on top, the
//!    `--hide` paths (the wuu home, the user config) covered by empty read-only ones.
//!    Where no namespace can be made it goes on with Landlock alone and prints a
//!    warning on stderr, unless a `--hide` path lies inside a root: then it refuses.
//!    `--mask` paths (the credential agents' sockets, the user's runtime dir) are
//!    covered the same way, best effort: without a namespace they stay;
//! 3. makes itself non-dumpable (after the namespace: entering a user namespace resets
//!    the flag), so the command cannot ptrace it or read its memory, and asks for
//!    `SIGHUP` when its parent thread dies (`PR_SET_PDEATHSIG`), checking that the host
//!    (`--ppid`) is still its parent (else it exits: the host died first);
//! 4. in `standard` and `read_only` mode drops every capability outside
//!    [`kept_capabilities`] (only root has any; in a user namespace all of them) and
//!    restricts itself with Landlock ([`landlock`] crate, best effort up to ABI 6):
//!    reading and executing only beneath the `--read` and `--write` roots, writing
//!    (creating, removing, renaming, linking, truncating) only beneath the `--write`
//!    roots, plus reading and writing a few device files ([`DEVICES`], no `ioctl`); no
//!    device node can be made; no signal and no abstract unix socket reaches outside the
//!    domain (ABI 6 scopes). A Landlock domain also keeps the command from ptracing
//!    processes outside it; with the host non-dumpable and `CAP_SYS_PTRACE`,
//!    `CAP_SYS_ADMIN` and `CAP_PERFMON` gone, not even a root command can read the host's
//!    `/proc/PID/environ`, memory or descriptors;
//! 5. marks every descriptor above 2 close-on-exec and starts `SHELL -c COMMAND` so
//!    that nothing it starts outlives it (see `reap`): in `standard` and `read_only`
//!    mode, when it has its mount namespace, in a new PID namespace
//!    (`unshare(CLONE_NEWPID)`) whose init it forks: the init mounts the namespace's own
//!    `/proc` (read-only), applies step 4 to itself, starts the shell and reaps orphans;
//!    when the shell ends it sends `SIGTERM` to every other process left, `SIGKILL` after
//!    the grace period, and exits (the kernel kills whatever remains). The init dies
//!    with the launcher (`PR_SET_PDEATHSIG` `SIGKILL`). Otherwise (no mount namespace,
//!    or `unconfined`, whose mounts and `/proc` stay the host's) the launcher applies
//!    step 4 to itself, becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`: every
//!    orphan of the command is reparented to it), starts the shell and, when it ends,
//!    ends every descendant the same way. Either way the launcher exits with the
//!    shell's exit code, or dies by the same signal;
//! 6. when `SIGHUP` arrives and its parent is no longer the host (the host died, or the
//!    host thread that started it ended), it kills its whole process group and every
//!    descendant with `SIGKILL` (with a PID namespace, killing the init ends it all):
//!    the command dies with the host, whatever sessions or groups it made. A launcher
//!    that is itself killed with `SIGKILL` takes the PID namespace with it; without one
//!    its orphans are left to the sweep by token (see `process`).
//!
//! `SIGTERM` / `SIGINT` / `SIGHUP` from the host or the command itself are otherwise
//! ignored by the launcher: the host signals the whole group, so the shell gets them too
//! and the launcher follows the shell. With `--service` (an engine host such as
//! `codex app-server`, run `unconfined`), `SIGTERM` ends the whole tree instead.
//! `WUU_SANDBOX_NO_PID_NS=1` in its environment makes it use the subreaper (tests).
//!
//! What the roots are is decided by the host ([`policy_args`]); the README lists them.

use super::{Fail, PermissionMode, ToolContext};
use std::ffi::{OsStr, OsString};
#[cfg(target_os = "linux")]
mod mount_ns;
#[cfg(target_os = "linux")]
mod reap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

/// The hidden subcommand that runs the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox";

/// Makes the host process non-dumpable (`PR_SET_DUMPABLE 0`, as ssh-agent does): its
/// `/proc/PID/environ` and memory, which hold the provider keys, can then be read only
/// with `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` or `CAP_PERFMON`, which sandboxed commands do
/// not have (not even as root, see [`kept_capabilities`]).
/// Reset by `execve`, so commands and the launcher are unaffected. Call once at startup.
pub fn protect_host() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        log::warn!("cannot make the host non-dumpable: {e}");
    }
}

/// Landlock ABI this host is written and tested against (Linux 6.12: file access, TCP
/// not handled, device ioctls, and the ABI 6 scopes: abstract unix sockets and signals);
/// newer kernels are used at this level, older ones at theirs (best effort, see
/// [`status`]).
#[cfg(target_os = "linux")]
const ABI: landlock::ABI = landlock::ABI::V6;

/// Device files every sandboxed command may read and write (no `ioctl` on them, where
/// the kernel's Landlock has that right, ABI 5). The rest of `/dev` is not readable: a
/// disk's block device (`/dev/vda`, readable by root and the `disk` group) would hand out
/// every file outside the workspace, and a terminal (`/dev/tty`, `/dev/pts/N`) would let
/// a command type into the user's shell (`TIOCSTI`). `/dev/stdin`, `/dev/fd/N` and the
/// like are links into `/proc/self/fd`, which stays readable.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Variables that hand a command the user's credential agents (ssh-agent, gpg-agent):
/// removed from every command's environment unless named in `agent.shell_env.keep`.
pub const AGENT_VARS: &[&str] = &["SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO"];

/// System directories commands may read and execute from.
const SYSTEM_READ: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
    "/proc", "/sys", "/run",
];

/// Toolchain locations in `$HOME` commands may read and execute from (never written).
const HOME_READ: &[&str] = &[
    ".cargo",
    ".rustup",
    ".local/bin",
    ".local/lib",
    ".nvm",
    ".pyenv",
    ".rbenv",
    ".asdf",
    ".sdkman",
    "go/bin",
    ".gitconfig",
    ".config/git",
];

/// Per-conversation sandbox and environment settings (from `agent.sandbox` and
/// `agent.shell_env`, both user-owned).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxSettings {
    /// Extra directories commands may read (`agent.sandbox.readable_roots`).
    pub readable_roots: Vec<PathBuf>,
    /// Extra directories commands may write (`agent.sandbox.writable_roots`; ignored in
    /// `read_only`).
    pub writable_roots: Vec<PathBuf>,
    /// Variables passed through although they look secret (`agent.shell_env.keep`).
    pub env_keep: Vec<String>,
    /// Variables always removed: the `api_key_env` of every configured provider.
    pub env_remove: Vec<String>,
    /// The wuu home whose store records each command's process group (`process`);
    /// None = not recorded.
    pub process_ledger: Option<PathBuf>,
    /// Host-owned paths no command may see even when they lie inside a root (the wuu
    /// home with its database, traces and config; the user config file): covered with
    /// an empty read-only directory or file in the command's mount namespace, and the
    /// command is refused when there is none (see the README).
    pub hidden: Vec<PathBuf>,
}

impl SandboxSettings {
    /// The settings of `cfg`: `agent.sandbox` roots (absolute or `~/…`; others are
    /// skipped with a warning), `agent.shell_env.keep`, and the `api_key_env` of every
    /// configured provider.
    pub fn from_config(cfg: &crate::config::LoadedConfig) -> SandboxSettings {
        let agent = cfg.agent();
        let roots = |list: Option<Vec<String>>| -> Vec<PathBuf> {
            list.unwrap_or_default()
                .into_iter()
                .filter_map(|r| {
                    let p = match (r.strip_prefix("~/"), home()) {
                        (Some(rest), Some(h)) => h.join(rest),
                        _ => PathBuf::from(&r),
                    };
                    if p.is_absolute() {
                        Some(p)
                    } else {
                        log::warn!("agent.sandbox: `{r}` is not an absolute path; ignored");
                        None
                    }
                })
                .collect()
        };
        let sb = agent.sandbox.clone().unwrap_or_default();
        SandboxSettings {
            readable_roots: roots(sb.readable_roots),
            writable_roots: roots(sb.writable_roots),
            env_keep: agent.shell_env.and_then(|e| e.keep).unwrap_or_default(),
            env_remove: cfg
                .config
                .providers
                .iter()
                .flatten()
                .filter_map(|(_, p)| p.api_key_env.clone())
                .collect(),
            process_ledger: None,
            hidden: vec![cfg.config_path.clone()],
        }
    }
}

/// Whether Landlock can confine commands on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Landlock works; the ABI level used (1…5).
    Available(i32),
    /// It does not; why.
    Unavailable(String),
}

/// Probes Landlock once per process (creating a ruleset, never restricting the host).
/// `WUU_SANDBOX_UNAVAILABLE=1` in the host's environment simulates a kernel without
/// Landlock (tests of the fail-closed path; it can only make the host refuse more).
pub fn status() -> &'static Status {
    static STATUS: OnceLock<Status> = OnceLock::new();
    STATUS.get_or_init(|| {
        if std::env::var_os("WUU_SANDBOX_UNAVAILABLE").is_some_and(|v| v == "1") {
            return Status::Unavailable(
                "Landlock is disabled for this process (WUU_SANDBOX_UNAVAILABLE=1)".into(),
            );
        }
        probe()
    })
}

#[cfg(target_os = "linux")]
fn probe() -> Status {
    use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope, ABI};
    let scoped = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V6))
        .and_then(|r| r.scope(Scope::from_all(ABI::V6)))
        .and_then(|r| r.create());
    if scoped.is_ok() {
        return Status::Available(6);
    }
    for (abi, n) in [
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ] {
        let created = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create());
        if created.is_ok() {
            return Status::Available(n);
        }
    }
    Status::Unavailable(
        "this kernel does not offer Landlock (Linux 5.13 or newer with Landlock enabled, e.g. `lsm=landlock,…` on the kernel command line)".into(),
    )
}

#[cfg(not(target_os = "linux"))]
fn probe() -> Status {
    Status::Unavailable("the command sandbox needs Linux Landlock".into())
}

/// The text of the `sandbox_unavailable` readiness issue, or None when commands can be
/// confined.
pub fn unavailable_issue() -> Option<String> {
    match status() {
        Status::Available(_) => None,
        Status::Unavailable(why) => Some(format!(
            "commands cannot be confined: {why}. In standard and read_only mode `bash` is refused; choose permission mode `unconfined` to run commands without the sandbox"
        )),
    }
}

/// The launcher executable: this binary when it is `wuu`; otherwise (unit tests run in
/// a test harness binary) the `wuu` binary of the same build directory.
pub(crate) fn launcher() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the wuu executable: {e}"))?;
        if exe.file_stem() == Some(OsStr::new("wuu")) {
            return Ok(exe);
        }
        exe.parent()
            .and_then(Path::parent)
            .map(|d| d.join("wuu"))
            .filter(|p| p.is_file())
            .ok_or_else(|| format!("cannot find the wuu executable next to {}", exe.display()))
    })
    .clone()
}

/// Whether a variable name looks like it holds a secret: contains `KEY`, `TOKEN`,
/// `SECRET` or `PASSWORD` (case-insensitive).
pub fn looks_secret(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| up.contains(w))
}

/// The environment a command gets: the host's, minus every variable named in
/// `env_remove`, every name that [`looks_secret`] and the credential agents' sockets
/// ([`AGENT_VARS`]), except those in `env_keep`; plus `TMPDIR` (the conversation's
/// private temp dir) and `WUU_SANDBOX` (the mode).
pub fn command_env(ctx: &ToolContext) -> Vec<(OsString, OsString)> {
    let s = &ctx.sandbox;
    let mut out: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            if s.env_keep.iter().any(|keep| *keep == name) {
                return true;
            }
            !(looks_secret(&name)
                || AGENT_VARS.contains(&name.as_ref())
                || s.env_remove.iter().any(|r| *r == name))
        })
        .filter(|(k, _)| k != "TMPDIR" && k != "WUU_SANDBOX")
        .collect();
    out.push(("TMPDIR".into(), ctx.temp_dir.clone().into_os_string()));
    out.push(("WUU_SANDBOX".into(), ctx.permission_mode.as_str().into()));
    out
}

/// Sockets of system daemons that act for whoever connects with the caller's
/// privileges: a container engine (root on the host for its users), the system D-Bus
/// and systemd's private bus (`systemd-run` as root), snapd. Covered in every
/// command's mount namespace (best effort, like the agents' sockets).
const DAEMON_SOCKETS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
    "/run/dbus/system_bus_socket",
    "/run/systemd/private",
];

/// Where the user's credential agents listen, as far as the host can tell: the sockets
/// named by `SSH_AUTH_SOCK` and `GPG_AGENT_INFO` (`path:pid:version`), and the user's
/// runtime dir (`$XDG_RUNTIME_DIR`, `/run/user/UID`: gpg-agent, gcr's ssh agent, the
/// D-Bus session bus, keyrings). A pathname unix socket is reachable through any path
/// (Landlock before the unix-socket right does not confine `connect`), so the command's
/// mount namespace covers these with empty read-only ones.
fn agent_sockets() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(s) = std::env::var_os("SSH_AUTH_SOCK") {
        out.push(s.into());
    }
    if let Ok(g) = std::env::var("GPG_AGENT_INFO") {
        if let Some(path) = g.split(':').next().filter(|p| !p.is_empty()) {
            out.push(path.into());
        }
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        out.push(x.into());
    }
    #[cfg(target_os = "linux")]
    out.push(PathBuf::from(format!(
        "/run/user/{}",
        rustix::process::getuid().as_raw()
    )));
    out.retain(|p| p.is_absolute() && p != Path::new("/"));
    out
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// The `--read` / `--write` roots of a command in `ctx` (see the README):
///
/// - read: [`SYSTEM_READ`], toolchain dirs in `$HOME` ([`HOME_READ`]), the absolute
///   `$PATH` directories, each canonicalized first (symlinks, `..`, `/proc/self/root`
///   resolved; entries that do not resolve are skipped), that are not `/`, `$HOME`,
///   `/tmp`, `/var/tmp` or an ancestor of one of them or of the workspace, and
///   `agent.sandbox.readable_roots`;
/// - write (`standard`): the workspace, the conversation's temp dir and spill dir, and
///   `agent.sandbox.writable_roots`; (`read_only`): the temp dir only, the workspace
///   and the spill dir becoming read roots;
/// - hide: `agent`'s [`SandboxSettings::hidden`] paths and the wuu home
///   (`process_ledger`), canonicalized;
/// - mask: [`DAEMON_SOCKETS`], and the credential agents' sockets ([`agent_sockets`])
///   unless one of [`AGENT_VARS`] is in `agent.shell_env.keep`.
pub(crate) fn policy_args(ctx: &ToolContext) -> Vec<OsString> {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    let home = home();
    if let Some(h) = &home {
        read.extend(HOME_READ.iter().map(|r| h.join(r)));
    }
    let ws = super::paths::workspace_root(ctx);
    if let Some(path) = std::env::var_os("PATH") {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let ws = canonical(&ws);
        let mut protected: Vec<PathBuf> = vec![
            ws.clone(),
            canonical(Path::new("/tmp")),
            canonical(Path::new("/var/tmp")),
        ];
        protected.extend(home.as_deref().map(canonical));
        for d in std::env::split_paths(&path) {
            if !d.is_absolute() {
                continue;
            }
            let Ok(d) = std::fs::canonicalize(&d) else {
                continue;
            };
            // `/` is an ancestor of everything.
            if !protected.iter().any(|p| p.starts_with(&d)) {
                read.push(d);
            }
        }
    }
    read.extend(ctx.sandbox.readable_roots.iter().cloned());
    let mut write = vec![ctx.temp_dir.clone()];
    if ctx.permission_mode == PermissionMode::ReadOnly {
        read.push(ws);
        read.push(ctx.spill_dir.clone());
    } else {
        write.push(ws);
        write.push(ctx.spill_dir.clone());
        write.extend(ctx.sandbox.writable_roots.iter().cloned());
    }
    let mut hide: Vec<PathBuf> = ctx.sandbox.hidden.clone();
    hide.extend(ctx.sandbox.process_ledger.iter().cloned());
    let mut args: Vec<OsString> = Vec::new();
    for h in hide {
        if let Ok(h) = std::fs::canonicalize(&h) {
            args.push("--hide".into());
            args.push(h.into_os_string());
        }
    }
    for m in DAEMON_SOCKETS {
        if let Ok(m) = std::fs::canonicalize(m) {
            args.push("--mask".into());
            args.push(m.into_os_string());
        }
    }
    let agents_kept = AGENT_VARS
        .iter()
        .any(|v| ctx.sandbox.env_keep.iter().any(|k| k == v));
    if !agents_kept {
        for m in agent_sockets() {
            if let Ok(m) = std::fs::canonicalize(&m) {
                args.push("--mask".into());
                args.push(m.into_os_string());
            }
        }
    }
    for r in read {
        args.push("--read".into());
        args.push(r.into_os_string());
    }
    for w in write {
        args.push("--write".into());
        args.push(w.into_os_string());
    }
    args
}

/// Checks that a command may run in `ctx`'s mode: in `standard` and `read_only` the
/// sandbox must be available (fail closed).
pub(crate) fn check(ctx: &ToolContext) -> Result<(), Fail> {
    if ctx.permission_mode == PermissionMode::Unconfined {
        return Ok(());
    }
    match status() {
        Status::Available(_) => Ok(()),
        Status::Unavailable(why) => Err(Fail::Denied(format!(
            "bash cannot run in {} mode: {why}, so the command could not be confined to the workspace. Ask the user to switch this conversation to permission mode `unconfined` to run commands without the sandbox, or use the file tools",
            ctx.permission_mode.as_str()
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// The launcher (runs in its own process).
// ---------------------------------------------------------------------------------------

struct LaunchArgs {
    ppid: Option<u32>,
    mode: String,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    hide: Vec<PathBuf>,
    mask: Vec<PathBuf>,
    /// `--service`: an engine host rather than a command; `SIGTERM` ends its whole tree.
    service: bool,
    program: Vec<OsString>,
}

fn parse_launch(args: Vec<OsString>) -> Result<LaunchArgs, String> {
    let mut a = LaunchArgs {
        ppid: None,
        mode: String::new(),
        read: Vec::new(),
        write: Vec::new(),
        hide: Vec::new(),
        mask: Vec::new(),
        service: false,
        program: Vec::new(),
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg:?} needs a value"));
        match arg.to_str() {
            Some("--ppid") => {
                a.ppid = value()?.to_str().and_then(|v| v.parse().ok());
            }
            Some("--mode") => a.mode = value()?.to_string_lossy().into_owned(),
            Some("--read") => a.read.push(value()?.into()),
            Some("--write") => a.write.push(value()?.into()),
            Some("--hide") => a.hide.push(value()?.into()),
            Some("--mask") => a.mask.push(value()?.into()),
            Some("--service") => a.service = true,
            Some("--") => {
                a.program = it.collect();
                break;
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    if a.program.is_empty() {
        return Err("no program after `--`".into());
    }
    Ok(a)
}

/// Entry point of the hidden [`LAUNCHER_ARG`] subcommand (see the module docs). Exit
/// codes of its own: 125 bad arguments or the host died before the command started,
/// 126 the sandbox could not be applied or the shell could not be started (a
/// `wuu sandbox:` line on stderr says why); otherwise the shell's status.
pub fn launcher_main(args: Vec<OsString>) -> ExitCode {
    // First of all a session of its own: no controlling terminal (a command can neither
    // open `/dev/tty` nor push input into the user's terminal with `TIOCSTI`), and a
    // process group whose id is this pid, which is what the host signals and records.
    if let Err(e) = rustix::process::setsid() {
        eprintln!("wuu sandbox: cannot start a new session: {e}; the command was not run");
        return ExitCode::from(126);
    }
    let a = match parse_launch(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("wuu sandbox: {e}");
            return ExitCode::from(125);
        }
    };
    run_launcher(a)
}

#[cfg(target_os = "linux")]
fn restrict(read: &[PathBuf], write: &[PathBuf]) -> Result<(), String> {
    use landlock::{
        Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
        RulesetStatus, Scope,
    };
    let all = AccessFs::from_all(ABI);
    let read_access = AccessFs::from_read(ABI);
    let file_access = AccessFs::from_file(ABI);
    // Abstract unix sockets and signals stay inside the command's domain (ABI 6): a
    // command cannot signal the host or any other process outside, nor connect to an
    // abstract socket (a desktop session's D-Bus or X11) made outside.
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.scope(Scope::from_all(ABI)))
        .and_then(|r| r.create())
        .map_err(|e| format!("cannot create the Landlock ruleset: {e}"))?;
    let devices: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
    // Device nodes cannot be made anywhere, not even in the workspace (a block device
    // node made there would read the whole disk), and no device may be `ioctl`ed.
    let write_access = all & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
    let device_access = file_access & !AccessFs::IoctlDev;
    let groups: [(&[PathBuf], BitFlags<AccessFs>); 3] = [
        (read, read_access),
        (write, write_access),
        (&devices, device_access),
    ];
    for (paths, access) in groups {
        for p in paths {
            // Missing roots are skipped (a toolchain that is not installed).
            let Ok(meta) = std::fs::metadata(p) else {
                continue;
            };
            let Ok(fd) = PathFd::new(p) else { continue };
            let access = if meta.is_dir() {
                access
            } else {
                access & file_access
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| format!("cannot add a Landlock rule for {}: {e}", p.display()))?;
        }
    }
    let status = ruleset
        .restrict_self()
        .map_err(|e| format!("cannot enforce the Landlock ruleset: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("Landlock is not enforced by this kernel".into());
    }
    Ok(())
}

/// The capabilities a sandboxed command may keep (only root, or a binary with file
/// capabilities, has any): Docker's default set for containers minus `CAP_MKNOD`,
/// `CAP_SETPCAP`, `CAP_FSETID` and `CAP_SETFCAP`, i.e. what package managers and build
/// tools run as root expect (`tar x` and `cp -p` setting owners, modes and times of the
/// files they write, `setuid` for privilege drops, binding low ports, raw sockets for
/// `ping`). `CAP_CHOWN` and `CAP_FOWNER` only reach the write roots: everything else is
/// a read-only mount in the command's namespace (see `mount_ns`); where no namespace
/// could be made they are dropped too ([`FALLBACK_DROPPED`]). `CAP_FSETID` (keep
/// set-id bits on files root modifies) and `CAP_SETFCAP` (plant file capabilities,
/// e.g. in the workspace for a later run outside the sandbox) are not needed by builds.
/// Everything else is removed from the bounding, effective, permitted, inheritable and
/// ambient sets before Landlock is applied, so neither the command nor anything it
/// executes (no-new-privs is set too) can hold it. Dropped among others, because each
/// reaches past a file-system sandbox: `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` and
/// `CAP_PERFMON` (each lets root read another root process's `/proc/PID/environ`,
/// `maps`, `fd/` even when that process is non-dumpable, as measured on Linux 6.18;
/// `CAP_SYS_ADMIN` would also undo the mounts), `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`,
/// `CAP_MKNOD` (device nodes), `CAP_DAC_READ_SEARCH` (`open_by_handle_at`), `CAP_BPF`,
/// `CAP_NET_ADMIN`, `CAP_SYSLOG`. In a user namespace (a non-root caller) every
/// capability is dropped.
#[cfg(target_os = "linux")]
pub(crate) fn kept_capabilities() -> rustix::thread::CapabilitySet {
    use rustix::thread::CapabilitySet as C;
    C::CHOWN
        | C::DAC_OVERRIDE
        | C::FOWNER
        | C::KILL
        | C::SETGID
        | C::SETUID
        | C::NET_BIND_SERVICE
        | C::NET_RAW
        | C::SYS_CHROOT
        | C::AUDIT_WRITE
}

/// Capabilities also dropped when the command runs without its mount namespace: with
/// Landlock alone they would change owners and modes of files outside the workspace.
#[cfg(target_os = "linux")]
const FALLBACK_DROPPED: rustix::thread::CapabilitySet =
    rustix::thread::CapabilitySet::CHOWN.union(rustix::thread::CapabilitySet::FOWNER);

/// Removes every capability outside `keep` (see [`kept_capabilities`] why). As an
/// ordinary user there is nothing to remove: the bounding-set calls fail with `EPERM`
/// (no `CAP_SETPCAP`), which is fine because such a process holds no capability that an
/// `execve` could raise.
#[cfg(target_os = "linux")]
fn drop_capabilities(keep: rustix::thread::CapabilitySet) -> Result<(), String> {
    use rustix::thread::{
        capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities, CapabilitySet,
    };
    for cap in CapabilitySet::all().iter() {
        if keep.contains(cap) || cap.bits().count_ones() != 1 {
            continue;
        }
        // EINVAL: a capability this kernel does not know.
        if !matches!(capability_is_in_bounding_set(cap), Ok(true)) {
            continue;
        }
        match remove_capability_from_bounding_set(cap) {
            Ok(()) | Err(rustix::io::Errno::PERM) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(format!("cannot drop capability {cap:?}: {e}")),
        }
    }
    match clear_ambient_capability_set() {
        Ok(()) | Err(rustix::io::Errno::INVAL) => {}
        Err(e) => return Err(format!("cannot clear the ambient capabilities: {e}")),
    }
    let mut sets = capabilities(None).map_err(|e| format!("cannot read capabilities: {e}"))?;
    if !(keep.contains(sets.effective)
        && keep.contains(sets.permitted)
        && keep.contains(sets.inheritable))
    {
        sets.effective &= keep;
        sets.permitted &= keep;
        sets.inheritable &= keep;
        set_capabilities(None, sets).map_err(|e| format!("cannot drop capabilities: {e}"))?;
    }
    Ok(())
}

/// Canonical forms of the existing paths of `paths`.
fn existing(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect()
}

/// Builds the command's mount namespace (see `mount_ns`). `WUU_SANDBOX_NO_MOUNT_NS=1`
/// in the launcher's environment simulates a machine where none can be made (tests of
/// the Landlock-only path).
#[cfg(target_os = "linux")]
fn enter_mount_ns(a: &LaunchArgs) -> Result<mount_ns::Entered, mount_ns::Error> {
    if std::env::var_os("WUU_SANDBOX_NO_MOUNT_NS").is_some_and(|v| v == "1") {
        return Err(mount_ns::Error::Unavailable(
            "disabled for this process (WUU_SANDBOX_NO_MOUNT_NS=1)".into(),
        ));
    }
    let write: Vec<PathBuf> = existing(&a.write)
        .into_iter()
        .filter(|p| p.is_dir())
        .collect();
    let read: Vec<PathBuf> = existing(&a.read)
        .into_iter()
        .filter(|p| p.is_dir())
        .collect();
    let mut hide = existing(&a.hide);
    // A masked path that is (inside) a write root would hide the workspace itself.
    hide.extend(
        existing(&a.mask)
            .into_iter()
            .filter(|m| !write.iter().any(|w| w.starts_with(m) || m.starts_with(w))),
    );
    hide.sort();
    hide.dedup();
    mount_ns::enter(&write, &read, &hide)
}

/// Marks every descriptor above 2 close-on-exec, so the command inherits only its
/// stdin, stdout and stderr (not what the host inherited from its own parent).
/// `close_range(CLOSE_RANGE_CLOEXEC)` (Linux 5.11), else each entry of `/proc/self/fd`.
#[cfg(target_os = "linux")]
fn cloexec_inherited_fds() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range(2) with CLOSE_RANGE_CLOEXEC only sets a flag on this
    // process's descriptors; it reads and writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl(F_SETFD) on a descriptor number only sets its close-on-exec
        // flag (EBADF for the directory's own, already closed, descriptor).
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn cloexec_inherited_fds() {}
/// The first half of the sandbox of `a.mode` (see the module docs): the mount namespace
/// and the decision which capabilities stay. The second half ([`Prepared::apply`])
/// comes after the PID namespace's `/proc` is mounted. Errors name the reason the
/// command must not run.
#[cfg(target_os = "linux")]
struct Prepared {
    keep: rustix::thread::CapabilitySet,
    /// In a mount namespace of its own (a PID namespace can then have its own `/proc`).
    mount_ns: bool,
    /// For the command's stderr: the view is not what it should be.
    warning: Option<String>,
}

#[cfg(target_os = "linux")]
fn prepare(a: &LaunchArgs) -> Result<Prepared, String> {
    let root = rustix::process::geteuid().is_root();
    let mut keep = kept_capabilities();
    match enter_mount_ns(a) {
        Ok(entered) => {
            if entered.user_ns && !root {
                keep = rustix::thread::CapabilitySet::empty();
            }
            Ok(Prepared {
                keep,
                mount_ns: true,
                warning: None,
            })
        }
        Err(mount_ns::Error::Failed(why)) => Err(why),
        Err(mount_ns::Error::Unavailable(why)) => {
            let roots: Vec<PathBuf> = existing(&a.read)
                .into_iter()
                .chain(existing(&a.write))
                .collect();
            if let Some(h) = existing(&a.hide)
                .into_iter()
                .find(|h| roots.iter().any(|r| h.starts_with(r)))
            {
                return Err(format!(
                    "{} belongs to wuu (its database, traces or config) and lies inside what commands may access, and no mount namespace could hide it ({why}). Move the workspace, or set WUU_HOME / --config outside it",
                    h.display()
                ));
            }
            Ok(Prepared {
                keep: keep.difference(FALLBACK_DROPPED),
                mount_ns: false,
                warning: Some(format!(
                    "wuu sandbox: warning: no mount namespace ({why}); Landlock alone confines this command: file modes, owners, times and extended attributes outside the workspace are not write-protected"
                )),
            })
        }
    }
}

#[cfg(target_os = "linux")]
impl Prepared {
    /// Drops the capabilities and enters the Landlock domain.
    fn apply(&self, a: &LaunchArgs) -> Result<(), String> {
        drop_capabilities(self.keep)?;
        restrict(&a.read, &a.write)
    }
}

/// Enters a PID namespace for the launcher's children (see `reap`), unless
/// `WUU_SANDBOX_NO_PID_NS=1` in the launcher's environment (tests of the subreaper path)
/// or the kernel refuses.
#[cfg(target_os = "linux")]
fn enter_pid_ns() -> bool {
    if std::env::var_os("WUU_SANDBOX_NO_PID_NS").is_some_and(|v| v == "1") {
        return false;
    }
    // SAFETY: see `mount_ns::unshare`: no `CLONE_FILES`, single-threaded.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWPID) }.is_ok()
}

#[cfg(target_os = "linux")]
fn run_launcher(a: LaunchArgs) -> ExitCode {
    let confined = match a.mode.as_str() {
        "standard" | "read_only" => true,
        "unconfined" => false,
        other => {
            eprintln!("wuu sandbox: unknown mode {other:?}; the command was not run");
            return ExitCode::from(125);
        }
    };
    // The mount namespace comes before everything that a change of credentials resets
    // (entering a user namespace clears the dumpable flag and the parent-death signal),
    // and while the process is single-threaded (a user namespace requires it). An
    // unconfined command gets no namespace (its mounts and `/proc` stay the host's):
    // the subreaper ends its processes.
    let prepared = if confined { Some(prepare(&a)) } else { None };
    let pid_ns = matches!(&prepared, Some(Ok(p)) if p.mount_ns) && enter_pid_ns();
    // Non-dumpable: the command (same user, same Landlock domain) cannot ptrace the
    // launcher or read its memory, so it cannot swallow the parent-death signal.
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!(
            "wuu sandbox: cannot make the launcher non-dumpable: {e}; the command was not run"
        );
        return ExitCode::from(126);
    }
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::HUP))
    {
        eprintln!("wuu sandbox: cannot set the parent-death signal: {e}");
        return ExitCode::from(126);
    }
    let host_gone = || {
        let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32);
        a.ppid.is_some() && parent != a.ppid
    };
    if host_gone() {
        return ExitCode::from(125);
    }
    let prepared = match prepared {
        Some(Err(e)) => {
            eprintln!("wuu sandbox: {e}; the command was not run");
            return ExitCode::from(126);
        }
        Some(Ok(p)) => {
            if let Some(w) = &p.warning {
                eprintln!("{w}");
            }
            Some(p)
        }
        None => None,
    };
    cloexec_inherited_fds();
    let Some((program, rest)) = a.program.split_first() else {
        return ExitCode::from(125);
    };
    let confine = || match &prepared {
        Some(p) => p.apply(&a),
        None => Ok(()),
    };
    if pid_ns {
        return reap::run_in_pid_ns(program, rest, super::KILL_GRACE, &confine, &host_gone);
    }
    if let Err(e) = confine() {
        eprintln!("wuu sandbox: {e}; the command was not run");
        return ExitCode::from(126);
    }
    run_as_subreaper(&a, program, rest, &host_gone)
}

/// The launcher without a PID namespace: a child subreaper that ends every descendant
/// when the command ends, when the host dies, and (`--service`) on `SIGTERM`.
#[cfg(target_os = "linux")]
fn run_as_subreaper(
    a: &LaunchArgs,
    program: &OsStr,
    rest: &[OsString],
    host_gone: &dyn Fn() -> bool,
) -> ExitCode {
    use rustix::process::Pid;
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!("wuu sandbox: cannot become a child subreaper: {e}; the command was not run");
        return ExitCode::from(126);
    }
    let mut signals = match signal_hook::iterator::Signals::new([SIGCHLD, SIGHUP, SIGTERM, SIGINT])
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wuu sandbox: cannot install signal handlers: {e}");
            return ExitCode::from(126);
        }
    };
    let child = match std::process::Command::new(program).args(rest).spawn() {
        Ok(c) => Pid::from_child(&c),
        Err(e) => {
            eprintln!(
                "wuu sandbox: cannot start {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::from(126);
        }
    };
    let status = 'run: loop {
        if let Some(st) = reap::reap(Some(child)) {
            break 'run Some(st);
        }
        for sig in signals.wait() {
            if sig != SIGCHLD && host_gone() {
                // The host is gone: nothing may outlive it.
                reap::tear_down(std::time::Duration::ZERO, None);
                let _ = rustix::process::kill_process_group(
                    rustix::process::getpgrp(),
                    rustix::process::Signal::KILL,
                );
                return ExitCode::from(137);
            }
            if sig == SIGTERM && a.service {
                break 'run reap::tear_down(super::KILL_GRACE, Some(child));
            }
        }
    };
    // Background jobs and processes that left the group end with the command.
    let status = reap::tear_down(super::KILL_GRACE, Some(child)).or(status);
    reap::launcher_exit(&reap::encode(status), None)
}

#[cfg(not(target_os = "linux"))]
fn run_launcher(_a: LaunchArgs) -> ExitCode {
    eprintln!("wuu sandbox: the command launcher needs Linux; the command was not run");
    ExitCode::from(126)
}
