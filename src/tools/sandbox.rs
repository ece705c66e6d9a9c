//! The process sandbox of `bash` and the launcher that applies it.
//!
//! The host never restricts itself and never runs code between `fork` and `exec` (it is
//! multi-threaded; allocating there is unsound). Instead every command is started
//! through the host's own binary as a small launcher, the hidden subcommand
//! [`LAUNCHER_ARG`] (as Codex does with its Linux sandbox helper):
//!
//! ```text
//! wuu __sandbox --ppid PID --mode standard|read_only|unconfined [--service] [--tty]
//!               [--read DIR]… [--write DIR]… [--hide PATH]… [--mask PATH]…
//!               -- SHELL -c COMMAND
//! ```
//!
//! The launcher, a fresh single-threaded process:
//!
//! 1. starts a session of its own (`setsid`, its very first act): it becomes session and
//!    process group leader (the group id the host signals and records is its pid), and
//!    the command has no controlling terminal (no `/dev/tty`, no `TIOCSTI`), except,
//!    with `--tty`, the pseudo-terminal the host made for it (a background process);
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
//!    [`confine::kept_capabilities`] (only root has any; in a user namespace all of
//!    them) and restricts itself with Landlock ([`landlock`] crate, best effort up to
//!    ABI 6): reading and executing only beneath the `--read` and `--write` roots,
//!    writing (creating, removing, renaming, linking, truncating) only beneath the
//!    `--write` roots, plus reading and writing a few device files
//!    ([`confine::DEVICES`], no `ioctl`); no device node can be made; no signal and no
//!    abstract unix socket reaches outside the domain (ABI 6 scopes). A Landlock domain also keeps the command from ptracing
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
//!
//! Layout (spec: README § "Permission modes and the sandbox"): the host side is
//! `settings` (a conversation's sandbox settings), `env` (a command's environment) and
//! `policy` (its roots); the launcher side is `launch` (the process and its steps),
//! `confine` (Landlock and capabilities, and the host's Landlock probe), `mount_ns` and
//! `reap`.

mod confine;
mod env;
mod launch;
#[cfg(target_os = "linux")]
mod mount_ns;
mod policy;
#[cfg(target_os = "linux")]
mod reap;
mod settings;

// The sandbox's face to the host: settings, the environment and roots of a command, the
// Landlock probe, and the launcher's entry point.
pub use confine::{status, unavailable_issue, Status};
pub use env::{command_env, looks_secret, AGENT_VARS};
pub use launch::launcher_main;
pub(crate) use policy::policy_args;
pub use settings::SandboxSettings;

use super::{Fail, PermissionMode, ToolContext};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The hidden subcommand that runs the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox";

/// Makes the host process non-dumpable (`PR_SET_DUMPABLE 0`, as ssh-agent does): its
/// `/proc/PID/environ` and memory, which hold the provider keys, can then be read only
/// with `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` or `CAP_PERFMON`, which sandboxed commands do
/// not have (not even as root, see [`confine::kept_capabilities`]).
/// Reset by `execve`, so commands and the launcher are unaffected. Call once at startup.
pub fn protect_host() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        log::warn!("cannot make the host non-dumpable: {e}");
    }
}

/// Set by the host binary's `main` ([`host_binary_started`]): this process's
/// executable is the host, whatever its file is called.
static HOST_BINARY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this process as the host binary, so that the launcher is this executable
/// under any file name (a copy installed as `wuu-1.2` or `agent-host`). Call once at
/// startup, from the binary's `main`.
pub fn host_binary_started() {
    HOST_BINARY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The launcher executable: this binary when it is the host ([`host_binary_started`])
/// or is called `wuu`; otherwise (unit tests run in a test harness binary) the `wuu`
/// binary of the same build directory.
pub(crate) fn launcher() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the wuu executable: {e}"))?;
        if HOST_BINARY.load(std::sync::atomic::Ordering::Relaxed)
            || exe.file_stem() == Some(OsStr::new("wuu"))
        {
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
