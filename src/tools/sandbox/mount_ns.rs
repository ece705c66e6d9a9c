//! The launcher's private mount namespace (Linux): the whole file tree read-only, the
//! write roots bound read-write on top of it, and host-owned paths hidden — the way
//! bubblewrap and Codex's Linux sandbox do it.
//!
//! Landlock confines reads and writes of file *contents* and names, but not file
//! metadata: `chmod`, `chown`, `utime` and `setxattr` pass it. A read-only mount refuses
//! all of them (`EROFS`), even for root, so outside the write roots nothing can be
//! changed at all. Steps ([`enter`]):
//!
//! 1. `unshare(CLONE_NEWNS)`; without the privilege for that (an ordinary user, or root
//!    without `CAP_SYS_ADMIN` in a container) `unshare(CLONE_NEWUSER | CLONE_NEWNS)`
//!    with the caller's uid and gid mapped to themselves (`setgroups` denied). Ids other
//!    than the caller's then show as the overflow id (`nobody`) inside;
//! 2. every mount private (`MS_REC | MS_PRIVATE` on `/`), so nothing propagates back;
//! 3. a detached recursive copy (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`) of each
//!    write root, taken while it is still writable;
//! 4. every mount read-only (`mount_setattr(/, AT_RECURSIVE, MOUNT_ATTR_RDONLY)`,
//!    Linux 5.12). Device nodes and FIFOs stay usable on a read-only mount, so
//!    `/dev/null` and pipes work;
//! 5. the copies attached on their roots, and each hidden directory covered with an
//!    empty tmpfs (a hidden file with `/dev/null`), shallowest path first. A root beneath
//!    a hidden directory is attached inside the tmpfs (its mount point is made there
//!    first), so the conversation's temp and spill dirs inside the wuu home stay usable
//!    while the rest of the home (database, traces, config) is gone; the tmpfs is then
//!    made read-only.
//!
//! Failures in steps 1, 2 and 4 leave nothing attached: the caller may go on with
//! Landlock alone ([`Error::Unavailable`]). A failure after step 4 leaves a half-built
//! view, so the command must not run ([`Error::Failed`]).
//!
//! The mounts cannot be undone by the command: it runs with `no_new_privs`, without
//! `CAP_SYS_ADMIN` (dropped after this; in a user namespace every capability is
//! dropped), and inside a Landlock domain, which refuses `mount`, `umount` and
//! `pivot_root` to sandboxed processes.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::CWD;
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags};
use rustix::thread::UnshareFlags;

/// Why the namespace could not be set up.
#[derive(Debug)]
pub(crate) enum Error {
    /// Nothing was changed; commands can still run under Landlock alone.
    Unavailable(String),
    /// The view is half-built; the command must not run.
    Failed(String),
}

/// What [`enter`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entered {
    /// A user namespace was created (the process holds every capability *in it* until
    /// they are dropped; the caller must drop all of them).
    pub user_ns: bool,
}

/// `MOUNT_ATTR_RDONLY` of `linux/mount.h`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// `struct mount_attr` of `linux/mount.h` (`MOUNT_ATTR_SIZE_VER0`, 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(AT_FDCWD, path, flags, {attr_set: set})`: sets mount attributes on the
/// mount at `path` (and with `recursive`, every mount beneath it, atomically).
/// rustix does not wrap this call (Linux 5.12), hence the raw syscall.
fn mount_setattr(path: &Path, recursive: bool, set: u64) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags: libc::c_uint = if recursive {
        libc::AT_RECURSIVE as libc::c_uint
    } else {
        0
    };
    // SAFETY: mount_setattr(2) reads the NUL-terminated `c_path` and
    // `size_of::<MountAttr>()` bytes of `attr`, both alive and valid for the whole call;
    // it keeps no pointer to them and writes no memory of this process.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn unshare(flags: UnshareFlags) -> rustix::io::Result<()> {
    // SAFETY: `flags` never contains `CLONE_FILES` (the only flag that makes unshare
    // unsound for other threads' descriptors), and the launcher is single-threaded.
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

/// Maps the caller's uid and gid to themselves in the new user namespace.
fn write_id_maps(uid: u32, gid: u32) -> io::Result<()> {
    fs::write("/proc/self/setgroups", "deny")?;
    fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

enum Place {
    /// A detached copy of a root, attached at its own path.
    Tree(OwnedFd),
    /// A hidden directory (empty tmpfs) or file (`/dev/null`).
    Hide { dir: bool },
}

fn clone_tree(path: &Path) -> io::Result<OwnedFd> {
    rustix::mount::open_tree(
        CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// Enters a new mount namespace and builds the view described in the module docs.
/// `write`: directories that stay writable; `read`: read roots (only those beneath a
/// hidden directory matter: they are attached again inside it, read-only); `hide`:
/// paths replaced by an empty read-only directory or an empty file. All paths must be
/// canonical and existing (the caller filters). The working directory is entered again
/// afterwards, so it refers to the new mounts.
pub(crate) fn enter(
    write: &[PathBuf],
    read: &[PathBuf],
    hide: &[PathBuf],
) -> Result<Entered, Error> {
    let unavailable =
        |what: &str, e: &dyn std::fmt::Display| Error::Unavailable(format!("{what}: {e}"));
    let failed = |what: String, e: &dyn std::fmt::Display| Error::Failed(format!("{what}: {e}"));
    let cwd = std::env::current_dir()
        .map_err(|e| unavailable("cannot read the working directory", &e))?;
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let user_ns = match unshare(UnshareFlags::NEWNS) {
        Ok(()) => false,
        Err(rustix::io::Errno::PERM) => {
            unshare(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)
                .map_err(|e| unavailable("cannot create a user and mount namespace", &e))?;
            write_id_maps(uid, gid).map_err(|e| unavailable("cannot map the user ids", &e))?;
            true
        }
        Err(e) => return Err(unavailable("cannot create a mount namespace", &e)),
    };
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .map_err(|e| unavailable("cannot make the mounts private", &e))?;
    let mut places: Vec<(PathBuf, Place)> = Vec::new();
    for w in write {
        let fd = clone_tree(w)
            .map_err(|e| unavailable(&format!("cannot copy the mount of {}", w.display()), &e))?;
        places.push((w.clone(), Place::Tree(fd)));
    }
    mount_setattr(Path::new("/"), true, MOUNT_ATTR_RDONLY).map_err(|e| {
        unavailable(
            "cannot make the file tree read-only (mount_setattr, Linux 5.12)",
            &e,
        )
    })?;

    // From here on a failure leaves a half-built view.
    let hide: Vec<(PathBuf, bool)> = hide
        .iter()
        .filter_map(|h| fs::metadata(h).ok().map(|m| (h.clone(), m.is_dir())))
        .collect();
    let hidden_dirs: Vec<&PathBuf> = hide.iter().filter(|(_, d)| *d).map(|(p, _)| p).collect();
    let under_hidden = |p: &Path| {
        hidden_dirs
            .iter()
            .any(|h| p.starts_with(h) && p != h.as_path())
    };
    for r in read.iter().filter(|r| under_hidden(r)) {
        let fd = clone_tree(r)
            .map_err(|e| failed(format!("cannot copy the mount of {}", r.display()), &e))?;
        places.push((r.clone(), Place::Tree(fd)));
    }
    for (h, dir) in &hide {
        // A path inside a hidden directory is hidden with it.
        if !under_hidden(h) {
            places.push((h.clone(), Place::Hide { dir: *dir }));
        }
    }
    // Shallowest first; at the same path the hiding comes last (on top).
    places.sort_by_key(|(p, place)| (p.components().count(), matches!(place, Place::Hide { .. })));
    for (p, place) in &places {
        match place {
            Place::Tree(fd) => {
                if !p.exists() {
                    // Beneath a hidden directory: make the mount point in its tmpfs.
                    fs::create_dir_all(p).map_err(|e| {
                        failed(format!("cannot make the mount point {}", p.display()), &e)
                    })?;
                }
                rustix::mount::move_mount(
                    fd.as_fd(),
                    "",
                    CWD,
                    p,
                    MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
                )
                .map_err(|e| failed(format!("cannot attach {}", p.display()), &e))?;
            }
            Place::Hide { dir: true } => {
                rustix::mount::mount(
                    "tmpfs",
                    p,
                    "tmpfs",
                    MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                    Some(c"mode=0755,size=64k"),
                )
                .map_err(|e| failed(format!("cannot hide {}", p.display()), &e))?;
            }
            Place::Hide { dir: false } => {
                rustix::mount::mount_bind("/dev/null", p)
                    .map_err(|e| failed(format!("cannot hide {}", p.display()), &e))?;
                mount_setattr(p, false, MOUNT_ATTR_RDONLY)
                    .map_err(|e| failed(format!("cannot hide {}", p.display()), &e))?;
            }
        }
    }
    for (p, place) in &places {
        if let Place::Hide { dir: true } = place {
            mount_setattr(p, false, MOUNT_ATTR_RDONLY)
                .map_err(|e| failed(format!("cannot make {} read-only", p.display()), &e))?;
        }
    }
    std::env::set_current_dir(&cwd)
        .map_err(|e| failed(format!("cannot enter {} again", cwd.display()), &e))?;
    Ok(Entered { user_ns })
}
