//! Confinement inside the launcher: the Landlock ruleset ([`restrict`]) and the
//! capabilities a command keeps ([`kept_capabilities`]), and the host's probe of whether
//! Landlock works here at all ([`status`]) (spec: README § "Permission modes and the
//! sandbox").

#[cfg(target_os = "linux")]
use std::path::PathBuf;
use std::sync::OnceLock;

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

#[cfg(target_os = "linux")]
pub(super) fn restrict(read: &[PathBuf], write: &[PathBuf]) -> Result<(), String> {
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
pub(super) const FALLBACK_DROPPED: rustix::thread::CapabilitySet =
    rustix::thread::CapabilitySet::CHOWN.union(rustix::thread::CapabilitySet::FOWNER);

/// Removes every capability outside `keep` (see [`kept_capabilities`] why). As an
/// ordinary user there is nothing to remove: the bounding-set calls fail with `EPERM`
/// (no `CAP_SETPCAP`), which is fine because such a process holds no capability that an
/// `execve` could raise.
#[cfg(target_os = "linux")]
pub(super) fn drop_capabilities(keep: rustix::thread::CapabilitySet) -> Result<(), String> {
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
