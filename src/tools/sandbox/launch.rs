//! The launcher process (`wuu __sandbox`, see the parent module for its steps): parses
//! its arguments, builds the mount namespace, applies the confinement and starts the
//! command in a PID namespace or as a child subreaper (spec: README § "Permission modes
//! and the sandbox").

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
use super::confine::{drop_capabilities, kept_capabilities, restrict, FALLBACK_DROPPED};
#[cfg(target_os = "linux")]
use super::{mount_ns, reap};
#[cfg(target_os = "linux")]
use crate::tools::KILL_GRACE;

struct LaunchArgs {
    ppid: Option<u32>,
    mode: String,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    hide: Vec<PathBuf>,
    mask: Vec<PathBuf>,
    /// `--service`: an engine host rather than a command; `SIGTERM` ends its whole tree.
    service: bool,
    /// `--tty`: stdin is a pseudo-terminal made for the command (a background process
    /// of a terminal panel); it becomes the session's controlling terminal, so the
    /// command gets `SIGWINCH` when a client resizes it.
    tty: bool,
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
        tty: false,
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
            Some("--tty") => a.tty = true,
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

/// Entry point of the hidden [`super::LAUNCHER_ARG`] subcommand (see the parent module's
/// docs). Exit codes of its own: 125 bad arguments or the host died before the command
/// started, 126 the sandbox could not be applied or the shell could not be started (a
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
    if a.tty {
        // Our own terminal (never the user's): best effort, a command without it still
        // runs, it only misses SIGWINCH.
        if let Err(e) = rustix::process::ioctl_tiocsctty(std::io::stdin()) {
            eprintln!("wuu sandbox: cannot take the terminal as controlling terminal: {e}");
        }
    }
    run_launcher(a)
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
        return reap::run_in_pid_ns(program, rest, KILL_GRACE, &confine, &host_gone);
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
                break 'run reap::tear_down(KILL_GRACE, Some(child));
            }
        }
    };
    // Background jobs and processes that left the group end with the command.
    let status = reap::tear_down(KILL_GRACE, Some(child)).or(status);
    reap::launcher_exit(&reap::encode(status), None)
}

#[cfg(not(target_os = "linux"))]
fn run_launcher(_a: LaunchArgs) -> ExitCode {
    eprintln!("wuu sandbox: the command launcher needs Linux; the command was not run");
    ExitCode::from(126)
}
