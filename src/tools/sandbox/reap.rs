//! Nothing a command starts outlives it: the launcher's two ways to end every process of
//! a command, whatever session or process group they made (see the parent module).
//!
//! - **A PID namespace** (with a mount namespace, for its own `/proc`): the launcher
//!   forks an init ([`run_init`]), the namespace's pid 1, which starts the command and
//!   reaps everything orphaned inside. When the command's shell ends, the init ends the
//!   rest ([`tear_down`]) and exits; the kernel then kills whatever is still in the
//!   namespace. The init dies with the launcher (`PR_SET_PDEATHSIG` `SIGKILL`), and the
//!   launcher with the host, so `setsid` and double forks escape nothing.
//! - **A child subreaper** (`PR_SET_CHILD_SUBREAPER`), where no namespace can be had and
//!   in `unconfined` mode: every orphan of the command is reparented to the launcher,
//!   which ends all its descendants (found through the parent links in `/proc`) when the
//!   command ends or the host dies. Only a `SIGKILL` of the launcher itself leaves them
//!   to the store's sweep by token (`process`).

use rustix::process::{Pid, Signal, WaitOptions, WaitStatus};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::tools::TERM_AGAIN;

/// How often a tear-down looks again.
const TICK: Duration = Duration::from_millis(20);
/// After `SIGKILL`, how long a tear-down waits for the last processes (e.g. in
/// uninterruptible sleep) before giving up on them.
const KILL_WAIT: Duration = Duration::from_secs(3);

/// Whether `/proc` describes this process's own PID namespace (its `self` link names
/// our pid): else its pids mean other processes and must not be signalled.
fn proc_is_ours() -> bool {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<i32>().ok()))
        == Some(me)
}

/// The live descendants of this process (zombies left out), from the parent links of
/// `/proc/PID/stat`; empty when `/proc` is not this namespace's.
pub(crate) fn descendants() -> Vec<Pid> {
    if !proc_is_ours() {
        return Vec::new();
    }
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut children: HashMap<i32, Vec<(i32, bool)>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("");
        let Some(ppid) = fields.next().and_then(|f| f.parse::<i32>().ok()) else {
            continue;
        };
        let live = state != "Z" && state != "X";
        children.entry(ppid).or_default().push((pid, live));
    }
    let mut out = Vec::new();
    let mut queue = vec![me];
    while let Some(p) = queue.pop() {
        for &(c, live) in children.get(&p).into_iter().flatten() {
            if c == me {
                continue;
            }
            queue.push(c);
            if live {
                out.extend(Pid::from_raw(c));
            }
        }
    }
    out
}

/// Reaps every child that has ended, without blocking; returns the status of `watch`
/// when it was among them.
pub(crate) fn reap(watch: Option<Pid>) -> Option<WaitStatus> {
    let mut found = None;
    while let Ok(Some((pid, st))) = rustix::process::wait(WaitOptions::NOHANG) {
        if Some(pid) == watch {
            found = Some(st);
        }
    }
    found
}

/// Ends every descendant: `SIGTERM` (unless `grace` is zero; at once to a process that
/// appears meanwhile, and again to all every [`TERM_AGAIN`]), then `SIGKILL` to what is
/// left after `grace`, reaping meanwhile. Returns once none is left (or, after
/// `SIGKILL`, [`KILL_WAIT`] passed). The status of `watch`, if it was reaped here.
pub(crate) fn tear_down(grace: Duration, watch: Option<Pid>) -> Option<WaitStatus> {
    let start = Instant::now();
    let mut status = None;
    // The processes sent SIGTERM, and when all of them last were: one forked after a
    // round (a shell starting its next command) gets it at once, and every one again
    // each [`TERM_AGAIN`] (one that ignored only the first).
    let mut termed: std::collections::HashSet<Pid> = Default::default();
    let mut termed_at: Option<Instant> = None;
    let mut killed_at: Option<Instant> = None;
    loop {
        if let Some(st) = reap(watch) {
            status = Some(st);
        }
        let left = descendants();
        if left.is_empty() || killed_at.is_some_and(|k| k.elapsed() >= KILL_WAIT) {
            return status;
        }
        if start.elapsed() >= grace {
            killed_at.get_or_insert_with(Instant::now);
            for p in left {
                let _ = rustix::process::kill_process(p, Signal::KILL);
            }
        } else {
            let again = termed_at.is_none_or(|t| t.elapsed() >= TERM_AGAIN);
            if again {
                termed_at = Some(Instant::now());
            }
            for p in left {
                if again || !termed.contains(&p) {
                    let _ = rustix::process::kill_process(p, Signal::TERM);
                    termed.insert(p);
                }
            }
        }
        std::thread::sleep(TICK);
    }
}

/// The shell's end, as the init reports it to the launcher over a pipe.
pub(crate) fn encode(st: Option<WaitStatus>) -> [u8; 2] {
    match st {
        Some(st) => match (st.exit_status(), st.terminating_signal()) {
            (Some(c), _) => [b'x', c.clamp(0, 255) as u8],
            (None, Some(s)) => [b's', s.clamp(0, 255) as u8],
            _ => [b'?', 0],
        },
        None => [b'?', 0],
    }
}

/// The exit code of the launcher for the init's report (`report`, from [`encode`]) and
/// its own `init_status`: the shell's exit code, or the shell's signal re-raised.
pub(crate) fn launcher_exit(report: &[u8], init_status: Option<WaitStatus>) -> ExitCode {
    match report {
        [b'x', c] => ExitCode::from(*c),
        [b's', s] => {
            let _ = signal_hook::low_level::emulate_default_handler(i32::from(*s));
            ExitCode::from(128u8.wrapping_add(*s))
        }
        _ => match init_status.and_then(|s| s.exit_status()) {
            Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
            None => ExitCode::from(126),
        },
    }
}

/// Forks this (single-threaded) launcher. `Ok(None)` in the child.
///
/// `fork` has no safe wrapper in std, rustix or libc; the launcher is single-threaded
/// when it calls this (no thread is ever started in it, signal handlers come after), so
/// the child may run any code, allocation included.
fn fork() -> std::io::Result<Option<Pid>> {
    // SAFETY: fork(2) takes no arguments and touches no memory of ours; the process is
    // single-threaded (see above), so no lock is held by a thread that would be missing
    // in the child.
    let r = unsafe { libc::fork() };
    match r {
        0 => Ok(None),
        n if n > 0 => Ok(Pid::from_raw(n)),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// What the init does before it starts the shell, after it mounted `/proc`: the
/// confinement (capabilities, Landlock) that must come after that mount.
pub(crate) type Confine<'a> = &'a dyn Fn() -> Result<(), String>;

/// Runs `program` as the only child of a new init, the first process of the PID
/// namespace this launcher unshared (`unshare(CLONE_NEWPID)` must have succeeded, and
/// the launcher must be in its own mount namespace). The launcher stays outside: it
/// waits for the init and, when `host_gone` says the host died, kills its own process
/// group (the init with it, and so the namespace). Returns the launcher's exit code.
pub(crate) fn run_in_pid_ns(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    grace: Duration,
    confine: Confine<'_>,
    host_gone: &dyn Fn() -> bool,
) -> ExitCode {
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM};
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map(|(r, w)| (std::fs::File::from(r), std::fs::File::from(w)))
    };
    let pipes = pipe().and_then(|l| pipe().map(|s| (l, s)));
    let ((lifeline_r, lifeline_w), (status_r, status_w)) = match pipes {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wuu sandbox: cannot make a pipe: {e}; the command was not run");
            return ExitCode::from(126);
        }
    };
    let init = match fork() {
        Ok(Some(pid)) => pid,
        Ok(None) => {
            drop(lifeline_w);
            drop(status_r);
            let code = run_init(program, args, grace, confine, lifeline_r, status_w);
            std::process::exit(code);
        }
        Err(e) => {
            eprintln!(
                "wuu sandbox: cannot start the namespace's init: {e}; the command was not run"
            );
            return ExitCode::from(126);
        }
    };
    drop(lifeline_r);
    drop(status_w);
    // Held open until the launcher ends: the init reads end-of-file if it died early.
    let _lifeline = lifeline_w;
    let mut signals = match signal_hook::iterator::Signals::new([SIGCHLD, SIGHUP, SIGTERM, SIGINT])
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wuu sandbox: cannot install signal handlers: {e}");
            let _ = rustix::process::kill_process(init, Signal::KILL);
            return ExitCode::from(126);
        }
    };
    loop {
        match rustix::process::waitpid(Some(init), WaitOptions::NOHANG) {
            Ok(Some((_, st))) => {
                let mut report = Vec::new();
                let _ = (&status_r).take(2).read_to_end(&mut report);
                return launcher_exit(&report, Some(st));
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("wuu sandbox: waiting for the command failed: {e}");
                return ExitCode::from(126);
            }
        }
        for sig in signals.wait() {
            if sig != SIGCHLD && host_gone() {
                // The host is gone: nothing may outlive it. SIGKILL of the init ends
                // the whole namespace.
                let _ = rustix::process::kill_process(init, Signal::KILL);
                let _ =
                    rustix::process::kill_process_group(rustix::process::getpgrp(), Signal::KILL);
            }
        }
    }
}

/// The init (pid 1 of the namespace). Returns its exit code.
fn run_init(
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    grace: Duration,
    confine: Confine<'_>,
    lifeline: std::fs::File,
    mut status: std::fs::File,
) -> i32 {
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        eprintln!("wuu sandbox: cannot set the parent-death signal: {e}");
        return 126;
    }
    // The launcher may have died before the line above: its end of the lifeline is
    // then closed (end-of-file), else reading would block.
    let nonblocking = rustix::fs::fcntl_getfl(&lifeline)
        .and_then(|f| rustix::fs::fcntl_setfl(&lifeline, f | rustix::fs::OFlags::NONBLOCK));
    if nonblocking.is_err() || matches!((&lifeline).read(&mut [0u8; 1]), Ok(0)) {
        return 125;
    }
    drop(lifeline);
    // Its own /proc, so that pids the command sees (`$$`, `ps`, `/proc/PID`) are the
    // namespace's. Read-only and without set-id, devices or execution, like the rest.
    use rustix::mount::MountFlags;
    if let Err(e) = rustix::mount::mount(
        "proc",
        "/proc",
        "proc",
        MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    ) {
        eprintln!(
            "wuu sandbox: warning: cannot mount /proc for the command's PID namespace ({e}); /proc shows the host's processes"
        );
    }
    if let Err(e) = confine() {
        eprintln!("wuu sandbox: {e}; the command was not run");
        return 126;
    }
    let shell = match std::process::Command::new(program).args(args).spawn() {
        Ok(c) => Pid::from_child(&c),
        Err(e) => {
            eprintln!(
                "wuu sandbox: cannot start {}: {e}",
                program.to_string_lossy()
            );
            return 126;
        }
    };
    // Pid 1 reaps every orphan of the namespace until the shell ends.
    let st = loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, st))) if pid == shell => break Some(st),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break None,
        }
    };
    // Background jobs and escaped sessions get SIGTERM and the grace period; whatever
    // is left when the init exits the kernel kills.
    tear_down(grace, None);
    let report = encode(st);
    let _ = status.write_all(&report);
    match report {
        [b'x', c] => i32::from(c),
        [b's', s] => 128 + i32::from(s),
        _ => 126,
    }
}
