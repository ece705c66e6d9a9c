//! The process sandbox of `bash` and the launcher that applies it.
//!
//! The host never restricts itself and never runs code between `fork` and `exec` (it is
//! multi-threaded; allocating there is unsound). Instead every command is started
//! through the host's own binary as a small launcher, the hidden subcommand
//! [`LAUNCHER_ARG`] (as Codex does with its Linux sandbox helper):
//!
//! ```text
//! wuu __sandbox --ppid PID --mode standard|read_only|unconfined
//!               [--read DIR]… [--write DIR]… -- SHELL -c COMMAND
//! ```
//!
//! The launcher, a fresh single-threaded process and the leader of the command's
//! process group:
//!
//! 1. asks for `SIGHUP` when its parent thread dies (`PR_SET_PDEATHSIG`) and checks that
//!    the host (`--ppid`) is still its parent (else it exits: the host died first);
//! 2. in `standard` and `read_only` mode drops every capability outside
//!    [`kept_capabilities`] (only root has any) and restricts itself with Landlock
//!    ([`landlock`] crate, best effort up to ABI 5): reading and executing only beneath
//!    the `--read` and `--write` roots, writing (creating, removing, renaming, linking,
//!    truncating) only beneath the `--write` roots, plus reading and writing a few
//!    device files (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`, `/dev/random`,
//!    `/dev/urandom`); no device node can be made. A Landlock domain also keeps the
//!    command from ptracing processes outside it; with the host non-dumpable and
//!    `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` and `CAP_PERFMON` gone, not even a root command
//!    can read the host's `/proc/PID/environ`, memory or descriptors;
//! 3. starts `SHELL -c COMMAND` as its child (same process group, the restriction is
//!    inherited and cannot be lifted) and waits for it; it exits with the shell's exit
//!    code, or dies by the same signal;
//! 4. when `SIGHUP` arrives and its parent is no longer the host (the host died, or the
//!    host thread that started it ended), it kills its whole process group with
//!    `SIGKILL`: the shell and its background jobs die with the host. A process that
//!    left the group (`setsid`, a daemon) is not reached; the startup sweep of the
//!    store's process ledger (see `process`) does not reach it either.
//!
//! `SIGTERM` / `SIGINT` / `SIGHUP` from the host or the command itself are otherwise
//! ignored by the launcher: the host signals the whole group, so the shell gets them too
//! and the launcher follows the shell.
//!
//! What the roots are is decided by the host ([`policy_args`]); the README lists them.

use super::{Fail, PermissionMode, ToolContext};
use std::ffi::{OsStr, OsString};
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

/// Landlock ABI this host is written and tested against (Linux 6.10); newer kernels are
/// used at this level, older ones at theirs (best effort, see [`status`]).
#[cfg(target_os = "linux")]
const ABI: landlock::ABI = landlock::ABI::V5;

/// Device files every sandboxed command may read and write. The rest of `/dev` is not
/// readable: a disk's block device (`/dev/vda`, readable by root and the `disk` group)
/// would hand out every file outside the workspace. `/dev/stdin`, `/dev/fd/N` and the
/// like are links into `/proc/self/fd`, which stays readable.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

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
    use landlock::{Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, ABI};
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
/// `env_remove` and every name that [`looks_secret`], except those in `env_keep`; plus
/// `TMPDIR` (the conversation's private temp dir) and `WUU_SANDBOX` (the mode).
pub fn command_env(ctx: &ToolContext) -> Vec<(OsString, OsString)> {
    let s = &ctx.sandbox;
    let mut out: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            if s.env_keep.iter().any(|keep| *keep == name) {
                return true;
            }
            !(looks_secret(&name) || s.env_remove.iter().any(|r| *r == name))
        })
        .filter(|(k, _)| k != "TMPDIR" && k != "WUU_SANDBOX")
        .collect();
    out.push(("TMPDIR".into(), ctx.temp_dir.clone().into_os_string()));
    out.push(("WUU_SANDBOX".into(), ctx.permission_mode.as_str().into()));
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
///   `$PATH` directories that are not `/`, `$HOME`, `/tmp`, `/var/tmp` or an ancestor of
///   the workspace, and `agent.sandbox.readable_roots`;
/// - write (`standard`): the workspace, the conversation's temp dir and spill dir, and
///   `agent.sandbox.writable_roots`; (`read_only`): the temp dir only, the workspace
///   and the spill dir becoming read roots.
pub(crate) fn policy_args(ctx: &ToolContext) -> Vec<OsString> {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    let home = home();
    if let Some(h) = &home {
        read.extend(HOME_READ.iter().map(|r| h.join(r)));
    }
    let ws = super::paths::workspace_root(ctx);
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            let bad = !d.is_absolute()
                || d == Path::new("/")
                || home.as_deref() == Some(d.as_path())
                || d == Path::new("/tmp")
                || d == Path::new("/var/tmp")
                || ws.starts_with(&d);
            if !bad {
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
    let mut args: Vec<OsString> = Vec::new();
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
    program: Vec<OsString>,
}

fn parse_launch(args: Vec<OsString>) -> Result<LaunchArgs, String> {
    let mut a = LaunchArgs {
        ppid: None,
        mode: String::new(),
        read: Vec::new(),
        write: Vec::new(),
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
        RulesetStatus,
    };
    let all = AccessFs::from_all(ABI);
    let read_access = AccessFs::from_read(ABI);
    let file_access = AccessFs::from_file(ABI);
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.create())
        .map_err(|e| format!("cannot create the Landlock ruleset: {e}"))?;
    let devices: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
    // Device nodes cannot be made anywhere, not even in the workspace (a block device
    // node made there would read the whole disk).
    let write_access = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let groups: [(&[PathBuf], BitFlags<AccessFs>); 3] = [
        (read, read_access),
        (write, write_access),
        (&devices, file_access),
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
/// capabilities, has any): Docker's default set for containers minus `CAP_MKNOD` and
/// `CAP_SETPCAP`, i.e. what package managers and build tools run as root expect (chown
/// and mode bits of files they write, `setuid` for privilege drops, binding low ports,
/// raw sockets for `ping`). Everything else is removed from the bounding, effective,
/// permitted, inheritable and ambient sets before Landlock is applied, so neither the
/// command nor anything it executes (no-new-privs is set too) can hold it. Dropped among
/// others, because each reaches past a file-system sandbox: `CAP_SYS_PTRACE`,
/// `CAP_SYS_ADMIN` and `CAP_PERFMON` (each lets root read another root process's
/// `/proc/PID/environ`, `maps`, `fd/` even when that process is non-dumpable, as measured
/// on Linux 6.18), `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_MKNOD` (device nodes),
/// `CAP_DAC_READ_SEARCH` (`open_by_handle_at`), `CAP_BPF`, `CAP_NET_ADMIN`, `CAP_SYSLOG`.
#[cfg(target_os = "linux")]
pub(crate) fn kept_capabilities() -> rustix::thread::CapabilitySet {
    use rustix::thread::CapabilitySet as C;
    C::CHOWN
        | C::DAC_OVERRIDE
        | C::FOWNER
        | C::FSETID
        | C::KILL
        | C::SETGID
        | C::SETUID
        | C::SETFCAP
        | C::NET_BIND_SERVICE
        | C::NET_RAW
        | C::SYS_CHROOT
        | C::AUDIT_WRITE
}

/// Removes every capability outside [`kept_capabilities`] (see there why). As an
/// ordinary user there is nothing to remove: the bounding-set calls fail with `EPERM`
/// (no `CAP_SETPCAP`), which is fine because such a process holds no capability that an
/// `execve` could raise.
#[cfg(target_os = "linux")]
fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{
        capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities, CapabilitySet,
    };
    let keep = kept_capabilities();
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

#[cfg(not(target_os = "linux"))]
fn drop_capabilities() -> Result<(), String> {
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn restrict(_read: &[PathBuf], _write: &[PathBuf]) -> Result<(), String> {
    Err("the command sandbox needs Linux Landlock".into())
}

fn run_launcher(a: LaunchArgs) -> ExitCode {
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    use std::os::unix::process::ExitStatusExt;
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::HUP))
    {
        eprintln!("wuu sandbox: cannot set the parent-death signal: {e}");
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
    let host_gone = || {
        let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32);
        a.ppid.is_some() && parent != a.ppid
    };
    if host_gone() {
        return ExitCode::from(125);
    }
    match a.mode.as_str() {
        "standard" | "read_only" => {
            if let Err(e) = drop_capabilities().and_then(|()| restrict(&a.read, &a.write)) {
                eprintln!("wuu sandbox: {e}; the command was not run");
                return ExitCode::from(126);
            }
        }
        "unconfined" => {}
        other => {
            eprintln!("wuu sandbox: unknown mode {other:?}; the command was not run");
            return ExitCode::from(125);
        }
    }
    let Some((program, rest)) = a.program.split_first() else {
        return ExitCode::from(125);
    };
    let mut child = match std::process::Command::new(program).args(rest).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "wuu sandbox: cannot start {}: {e}",
                program.to_string_lossy()
            );
            return ExitCode::from(126);
        }
    };
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                if let Some(sig) = st.signal() {
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                    return ExitCode::from(128u8.wrapping_add(sig as u8));
                }
                return ExitCode::from(st.code().unwrap_or(1).clamp(0, 255) as u8);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("wuu sandbox: waiting for the command failed: {e}");
                return ExitCode::from(126);
            }
        }
        for sig in signals.wait() {
            if sig != SIGCHLD && host_gone() {
                // The host is gone: nothing may outlive it.
                let _ = rustix::process::kill_process_group(
                    rustix::process::getpgrp(),
                    rustix::process::Signal::KILL,
                );
            }
        }
    }
}
