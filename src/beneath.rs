//! Race-free file access beneath a directory (Linux `openat2`).
//!
//! A [`Root`] holds a file descriptor of a directory (the workspace root). Every path
//! given to it is *relative* and is resolved by the kernel with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: `..` and symbolic links are followed only
//! while they stay beneath the root, `/proc/self/fd/N`-style magic links are refused,
//! and an escape fails with `EXDEV` ([`Error::Outside`]). Because the resolution and the
//! open are one system call, a symlink swapped in after a check cannot redirect the
//! operation: callers open once and then work on the returned descriptor.
//!
//! Writes ([`Root::write_atomic`]) never write into an existing inode: the bytes go to a
//! temporary file created (`O_EXCL | O_NOFOLLOW`) in the target's directory, which is
//! then renamed over the name. Writing through a name that is a hard link therefore
//! replaces that name only; the file's other names (possibly outside the root) keep the
//! old content. A final symlink is followed (beneath the root) to the name it points
//! at, so editing `link -> real.txt` replaces `real.txt` and keeps the link.
//!
//! [`Root::walk`] lists a tree without ever following a symlink (each directory is
//! opened relative to its parent's descriptor with `O_NOFOLLOW`), so a directory
//! swapped for a link during the walk is skipped, never entered.
//!
//! Kernel: `openat2` needs Linux 5.6; on older kernels (`ENOSYS`) every operation fails
//! with an error that says so (fail closed).
//!
//! Paths: `rel` is relative to the root; `""` and `"."` name the root itself. An absolute
//! `rel` is refused ([`Error::Outside`]); use [`rel_beneath`] to turn an absolute path
//! into a relative one.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Removes `.` and `..` lexically. `..` at the root stays at the root.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Why an operation beneath a root failed.
#[derive(Debug)]
pub enum Error {
    /// The path leads outside the root (through `..`, an absolute path, a symlink, or a
    /// magic link), or the kernel refused to resolve it beneath the root.
    Outside,
    /// Any other OS error (not found, permission, not a directory, …).
    Io(io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Outside => f.write_str("the path leads outside the workspace"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// The `io::ErrorKind` (`Outside` counts as `PermissionDenied`).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Outside => io::ErrorKind::PermissionDenied,
            Error::Io(e) => e.kind(),
        }
    }

    /// Whether the file or a directory on its path does not exist.
    pub fn is_not_found(&self) -> bool {
        self.kind() == io::ErrorKind::NotFound
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        match e {
            rustix::io::Errno::XDEV => Error::Outside,
            rustix::io::Errno::NOSYS => Error::Io(io::Error::other(
                "this kernel lacks openat2 (Linux 5.6 or newer), which confined file access needs",
            )),
            e => Error::Io(e.into()),
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Result of the operations in this module.
pub type Result<T> = std::result::Result<T, Error>;

/// What an entry is (symlinks are never followed to decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// Anything else (FIFO, socket, device).
    Other,
}

impl Kind {
    fn of(t: FileType) -> Kind {
        match t {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

/// One directory entry from [`Root::read_dir`] or [`Root::walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name (one path component).
    pub name: OsString,
    /// Its kind, from `lstat` semantics (a symlink is `Symlink`).
    pub kind: Kind,
}

/// The `lstat`/`stat` facts callers need, from `fstat` on a descriptor opened beneath
/// the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// What the path is.
    pub kind: Kind,
    /// Size in bytes.
    pub len: u64,
    /// Modification time, seconds since the Unix epoch.
    pub mtime_s: i64,
    /// Nanoseconds part of the modification time.
    pub mtime_ns: u32,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u64,
    /// Device and inode (identity of the file).
    pub dev_ino: (u64, u64),
}

impl Stat {
    fn from_fd(fd: BorrowedFd<'_>) -> Result<Stat> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Stat {
            kind: Kind::of(FileType::from_raw_mode(st.st_mode)),
            len: st.st_size.max(0) as u64,
            mtime_s: st.st_mtime,
            mtime_ns: st.st_mtime_nsec.clamp(0, 999_999_999) as u32,
            mode: st.st_mode & 0o7777,
            nlink: st.st_nlink,
            dev_ino: (st.st_dev, st.st_ino),
        })
    }

    /// The modification time as a `SystemTime`.
    pub fn modified(&self) -> std::time::SystemTime {
        let base = std::time::UNIX_EPOCH;
        if self.mtime_s >= 0 {
            base + std::time::Duration::new(self.mtime_s as u64, self.mtime_ns)
        } else {
            base
        }
    }
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Symlinks followed by hand in [`Root::write_atomic`] before giving up (as the kernel).
const MAX_HOPS: usize = 40;

/// A directory every operation stays beneath. Cheap to share (`&Root` is `Sync`).
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
    resolve: ResolveFlags,
    fences: Vec<Fence>,
}

/// The payload of the `PermissionDenied` error of a fenced path ([`Root::fenced`]).
#[derive(Debug)]
pub struct Fenced(String);

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fenced {}

impl Error {
    /// Whether this is the refusal of a fenced path ([`Root::fenced`]).
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Io(e) if e.get_ref().is_some_and(|i| i.is::<Fenced>()))
    }
}

/// A directory or file inside a root that no operation may reach ([`Root::fenced`]).
#[derive(Debug, Clone)]
struct Fence {
    /// Its canonical path.
    path: PathBuf,
    /// Its device and inode.
    dev_ino: (u64, u64),
    /// What it is, for the error (`inside the wuu home`).
    what: String,
}

/// Refuses `fd` when it lies in a fenced directory or is a fenced file: by its path as
/// the kernel knows it (`/proc/self/fd/N`: the name the open actually resolved to, so no
/// symbolic link can route around the check) and by its device and inode (a hard link).
/// Fails closed when `/proc` cannot be read.
fn check_fences(fences: &[Fence], fd: BorrowedFd<'_>) -> Result<()> {
    use std::os::fd::AsRawFd;
    if fences.is_empty() {
        return Ok(());
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let real = std::fs::read_link(&link).map_err(|e| {
        Error::Io(io::Error::new(
            e.kind(),
            format!("cannot check the path against the fenced paths: {e}"),
        ))
    })?;
    let st = rustix::fs::fstat(fd)?;
    for f in fences {
        if real.starts_with(&f.path) || (st.st_dev, st.st_ino) == f.dev_ino {
            return Err(f.refusal());
        }
    }
    Ok(())
}

/// Whether entry `name` of directory `dir` (of kind `kind`) is a fenced path itself.
fn is_fenced_entry(fences: &[Fence], dir: BorrowedFd<'_>, name: &OsStr, kind: Kind) -> bool {
    if fences.is_empty() || !matches!(kind, Kind::Dir | Kind::File) {
        return false;
    }
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| fences.iter().any(|f| (st.st_dev, st.st_ino) == f.dev_ino))
}

impl Fence {
    fn refusal(&self) -> Error {
        Error::Io(io::Error::new(
            io::ErrorKind::PermissionDenied,
            Fenced(format!(
                "it is {} ({}), which file tools and workspace views never touch",
                self.what,
                self.path.display()
            )),
        ))
    }
}

/// Splits `path` into its normal components after checking that it is relative and
/// normalizing `.` and `..` lexically (`..` above the start is an escape).
fn components(rel: &Path) -> Result<Vec<&OsStr>> {
    let mut out: Vec<&OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if out.pop().is_none() {
                    return Err(Error::Outside);
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(Error::Outside),
        }
    }
    Ok(out)
}

fn join(comps: &[&OsStr]) -> PathBuf {
    if comps.is_empty() {
        return PathBuf::from(".");
    }
    comps.iter().collect()
}

/// `path` relative to `root` when it lies lexically inside it (after removing `.` and
/// `..`), else `None`. Both should be absolute; symlinks are not looked at (the
/// operations on [`Root`] enforce the boundary).
pub fn rel_beneath(root: &Path, path: &Path) -> Option<PathBuf> {
    let norm = normalize(path);
    let root = normalize(root);
    norm.strip_prefix(&root).ok().map(|r| {
        if r.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            r.to_path_buf()
        }
    })
}

/// Reads the regular file at `path` (anywhere; symlinks followed: for files the user
/// owns, such as the user config) whole, at most `cap` bytes. Opened `O_NONBLOCK`, so a
/// FIFO or a device is refused (`InvalidInput`, "not a regular file") before any read
/// could block; a larger file is `InvalidData` ("larger than CAP bytes").
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    require_regular(fd.as_fd())?;
    read_to_cap(File::from(fd), cap)
}

/// Refuses anything but a regular file open at `fd`: a directory is
/// `IsADirectory`, any other kind (FIFO, device, socket) `InvalidInput`.
fn require_regular(fd: BorrowedFd<'_>) -> Result<()> {
    match Stat::from_fd(fd)?.kind {
        Kind::File => Ok(()),
        Kind::Dir => Err(Error::Io(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ))),
        _ => Err(Error::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ))),
    }
}

/// Reads `f` whole, at most `cap` bytes; more is `InvalidData` ("larger than CAP bytes").
fn read_to_cap(f: File, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(Error::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {cap} bytes"),
        )));
    }
    Ok(buf)
}

impl Root {
    /// Opens `path` (a directory; symlinks followed) as a root.
    pub fn open(path: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root {
            fd,
            path: path.to_path_buf(),
            resolve: RESOLVE,
            fences: Vec::new(),
        })
    }

    /// This root with `path` (a directory and everything beneath it, or a file) fenced
    /// off: every operation that reaches it, through any name, symbolic link or hard
    /// link, fails with `Io(PermissionDenied, "it is WHAT (PATH), which file tools and
    /// workspace views never touch")` (checked on each opened descriptor: its kernel path and its inode), and
    /// [`Root::walk`] and [`Root::read_dir`] leave it out. Used for the wuu home and the
    /// user config file when they lie inside the workspace. A `path` that does not exist
    /// fences nothing. May be called more than once.
    pub fn fenced(mut self, path: &Path, what: &str) -> Root {
        if let Ok(real) = std::fs::canonicalize(path) {
            if let Ok(st) = rustix::fs::stat(&real) {
                self.fences.push(Fence {
                    path: real,
                    dev_ino: (st.st_dev, st.st_ino),
                    what: what.to_owned(),
                });
            }
        }
        self
    }

    /// This root with the host's own files fenced off ([`Root::fenced`]) as the file
    /// tools and the workspace views see them: `home` (the wuu home: its database,
    /// traces, and the user config that sets the permission mode) when it lies inside
    /// the root (a workspace of `~` with the default `~/.wuu`), and each of `hidden` (the
    /// user config file, `--config FILE`) that lies inside it.
    pub fn fenced_host(self, home: &Path, hidden: &[PathBuf]) -> Root {
        let Ok(root) = std::fs::canonicalize(&self.path) else {
            return self;
        };
        let inside = |p: &Path| std::fs::canonicalize(p).is_ok_and(|h| h.starts_with(&root));
        let mut out = self;
        if inside(home) {
            out = out.fenced(home, "inside the wuu home");
        }
        for h in hidden {
            if inside(h) {
                out = out.fenced(h, "the user config file");
            }
        }
        out
    }

    /// The file system root `/` with no resolution limits (`unconfined` mode): the same
    /// API (atomic writes, walks that do not follow links), but symlinks, including
    /// absolute ones, are followed anywhere.
    pub fn anywhere() -> io::Result<Root> {
        let mut r = Root::open(Path::new("/"))?;
        r.resolve = ResolveFlags::empty();
        Ok(r)
    }

    /// The path the root was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_raw(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd> {
        let comps = components(rel)?;
        let p = join(&comps);
        // openat2 is strict: O_PATH accepts only O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
        let extra = if flags.contains(OFlags::PATH) {
            OFlags::CLOEXEC
        } else {
            OFlags::CLOEXEC | OFlags::NOCTTY
        };
        loop {
            match rustix::fs::openat2(&self.fd, &p, flags | extra, Mode::empty(), self.resolve) {
                Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
                // `RESOLVE_NO_MAGICLINKS` reports a magic link as ELOOP.
                Err(rustix::io::Errno::LOOP) if is_magic(&p) => return Err(Error::Outside),
                r => {
                    let fd = r?;
                    check_fences(&self.fences, fd.as_fd())?;
                    return Ok(fd);
                }
            }
        }
    }

    /// Opens the regular file `rel` for reading (symlinks followed beneath the root).
    /// Errors: `Outside`; a directory or a non-regular file (FIFO, device) is refused
    /// with `InvalidInput` before any read could block.
    pub fn open_read(&self, rel: &Path) -> Result<File> {
        let fd = self.open_raw(rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
        require_regular(fd.as_fd())?;
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
    }

    /// Reads the regular file `rel` whole (see [`Root::open_read`]: resolved beneath the
    /// root, no magic links; a FIFO, device or socket is refused before any read could
    /// block), at most `cap` bytes. This is how the host itself reads workspace files
    /// (`AGENTS.md`, project config layers, project skills). Errors: those of
    /// `open_read`; a file larger than `cap` bytes is `Io(InvalidData, "larger than
    /// CAP bytes")`.
    pub fn read_capped(&self, rel: &Path, cap: u64) -> Result<Vec<u8>> {
        read_to_cap(self.open_read(rel)?, cap)
    }

    /// `stat` of `rel`, following symlinks beneath the root.
    pub fn stat(&self, rel: &Path) -> Result<Stat> {
        let fd = self.open_raw(rel, OFlags::PATH)?;
        Stat::from_fd(fd.as_fd())
    }

    /// `lstat` of `rel`: a final symlink is described itself (its parents are still
    /// resolved beneath the root).
    pub fn lstat(&self, rel: &Path) -> Result<Stat> {
        let fd = self.open_raw(rel, OFlags::PATH | OFlags::NOFOLLOW)?;
        Stat::from_fd(fd.as_fd())
    }

    /// Opens the directory `rel` (symlinks followed beneath the root) for listing.
    fn open_dir(&self, rel: &Path) -> Result<OwnedFd> {
        self.open_raw(rel, OFlags::RDONLY | OFlags::DIRECTORY)
    }

    /// The entries of directory `rel`, sorted by name, without `.` and `..`.
    pub fn read_dir(&self, rel: &Path) -> Result<Vec<Entry>> {
        let fd = self.open_dir(rel)?;
        let mut list = list_fd(fd.as_fd())?;
        list.retain(|e| !is_fenced_entry(&self.fences, fd.as_fd(), &e.name, e.kind));
        Ok(list)
    }

    /// Creates directory `rel` and its missing parents beneath the root (`mode` 0o777
    /// minus the umask). An existing directory is fine.
    pub fn create_dir_all(&self, rel: &Path) -> Result<()> {
        let comps = components(rel)?;
        self.dir_fd_creating(&comps, true).map(|_| ())
    }

    /// Opens the directory named by `comps` (as an `O_PATH` descriptor), creating
    /// missing components when `create`.
    fn dir_fd_creating(&self, comps: &[&OsStr], create: bool) -> Result<OwnedFd> {
        match self.open_raw(&join(comps), OFlags::PATH | OFlags::DIRECTORY) {
            Err(e) if create && e.is_not_found() && !comps.is_empty() => {}
            r => return r,
        }
        // Create from the deepest existing ancestor down.
        let mut have = comps.len();
        while have > 0 {
            have -= 1;
            match self.open_raw(&join(&comps[..have]), OFlags::PATH | OFlags::DIRECTORY) {
                Ok(_) => break,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            }
        }
        for i in have..comps.len() {
            let parent = self.open_raw(&join(&comps[..i]), OFlags::PATH | OFlags::DIRECTORY)?;
            match rustix::fs::mkdirat(&parent, comps[i], Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.open_raw(&join(comps), OFlags::PATH | OFlags::DIRECTORY)
    }

    /// Follows a final symlink of `rel` by hand (each hop resolved beneath the root) and
    /// returns the components of the name to replace. A link leading outside is
    /// `Outside`; a dangling link yields the (missing) name it points at.
    fn final_name(&self, rel: &Path) -> Result<Vec<OsString>> {
        let mut comps: Vec<OsString> = components(rel)?
            .into_iter()
            .map(OsStr::to_os_string)
            .collect();
        for _ in 0..MAX_HOPS {
            let Some((name, parent)) = comps.split_last() else {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "is a directory",
                )));
            };
            let parent_refs: Vec<&OsStr> = parent.iter().map(OsString::as_os_str).collect();
            let dir = match self.open_raw(&join(&parent_refs), OFlags::PATH | OFlags::DIRECTORY) {
                Ok(d) => d,
                Err(e) if e.is_not_found() => return Ok(comps),
                Err(e) => return Err(e),
            };
            let st = match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(comps),
                Err(e) => return Err(e.into()),
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                return Ok(comps);
            }
            let target = rustix::fs::readlinkat(&dir, name.as_os_str(), Vec::new())?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            let next = if target.is_absolute() {
                rel_beneath(&self.path, &normalize(&target)).ok_or(Error::Outside)?
            } else {
                join(&parent_refs).join(target)
            };
            comps = components(&next)?
                .into_iter()
                .map(OsStr::to_os_string)
                .collect();
        }
        Err(Error::Io(io::Error::from_raw_os_error(
            rustix::io::Errno::LOOP.raw_os_error(),
        )))
    }

    /// Replaces (or creates) the file `rel` with `bytes`, atomically: a temporary file
    /// in the same directory, then `rename(2)` over the name. A final symlink is
    /// followed beneath the root (the link stays; its target is replaced). The
    /// existing file's permission bits are kept (new files: 0o666 minus the umask).
    /// With `create_parents`, missing directories are created. Errors: `Outside`, a
    /// directory at `rel` (`IsADirectory`), I/O errors (the temporary file is removed).
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8], create_parents: bool) -> Result<()> {
        let comps = self.final_name(rel)?;
        let Some((name, parent)) = comps.split_last() else {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )));
        };
        let parent_refs: Vec<&OsStr> = parent.iter().map(OsString::as_os_str).collect();
        let dir = self.dir_fd_creating(&parent_refs, create_parents)?;
        let old = match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Some(st),
            Err(rustix::io::Errno::NOENT) => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(st) = &old {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "is a directory",
                )));
            }
        }
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".wuu-{}.tmp", uuid::Uuid::new_v4().simple()));
        let fd = rustix::fs::openat(
            &dir,
            tmp_name.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?;
        let written = (|| -> Result<()> {
            if let Some(st) = &old {
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(st.st_mode & 0o7777))?;
                if rustix::process::geteuid().is_root() {
                    // Best effort: keep the owner when we are allowed to.
                    let _ = rustix::fs::fchown(
                        &fd,
                        Some(rustix::fs::Uid::from_raw(st.st_uid)),
                        Some(rustix::fs::Gid::from_raw(st.st_gid)),
                    );
                }
            }
            let mut f = File::from(fd);
            f.write_all(bytes)?;
            f.flush()?;
            rustix::fs::renameat(&dir, tmp_name.as_os_str(), &dir, name.as_os_str())?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp_name.as_os_str(), AtFlags::empty());
        }
        written
    }

    /// Removes the file `rel` (a final symlink is removed itself, not its target).
    pub fn remove_file(&self, rel: &Path) -> Result<()> {
        let comps = components(rel)?;
        let Some((name, parent)) = comps.split_last() else {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )));
        };
        let dir = self.open_raw(&join(parent), OFlags::PATH | OFlags::DIRECTORY)?;
        Ok(rustix::fs::unlinkat(&dir, *name, AtFlags::empty())?)
    }

    /// Walks the tree below directory `rel` (the start itself is not yielded),
    /// depth-first in name order, never following a symlink. `visit` gets each entry
    /// with its path relative to the root, its depth (1 = a child of the start) and a
    /// [`Walker`] handle; it returns [`Visit`] to descend, skip, or stop. Directories
    /// that cannot be opened are skipped. At most `max_depth` levels (None =
    /// unlimited).
    pub fn walk(
        &self,
        rel: &Path,
        max_depth: Option<usize>,
        visit: &mut dyn FnMut(&WalkEntry<'_>) -> Visit,
    ) -> Result<()> {
        let comps = components(rel)?;
        let start = join(&comps);
        let fd = self.open_dir(&start)?;
        let mut stop = false;
        walk_dir(fd, &start, 1, max_depth, &self.fences, visit, &mut stop);
        Ok(())
    }
}

/// What [`Root::walk`]'s visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on (and descend into this entry if it is a directory).
    Continue,
    /// Do not descend into this directory (no effect on files).
    Skip,
    /// End the walk.
    Stop,
}

/// One entry seen by [`Root::walk`].
pub struct WalkEntry<'a> {
    /// Path relative to the root.
    pub rel: &'a Path,
    /// Depth below the walk's start (1 = a direct child).
    pub depth: usize,
    /// Name and kind.
    pub entry: &'a Entry,
    dir: BorrowedFd<'a>,
}

impl WalkEntry<'_> {
    /// Opens this entry for reading when it is a regular file (`O_NOFOLLOW`, relative
    /// to its directory's descriptor: it cannot be redirected by a swapped symlink).
    pub fn open_file(&self) -> Result<File> {
        let fd = rustix::fs::openat(
            self.dir,
            self.entry.name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )?;
        let st = Stat::from_fd(fd.as_fd())?;
        if st.kind != Kind::File {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
    }

    /// `lstat` of this entry.
    pub fn stat(&self) -> Result<Stat> {
        let fd = rustix::fs::openat(
            self.dir,
            self.entry.name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Stat::from_fd(fd.as_fd())
    }
}

fn list_fd(fd: BorrowedFd<'_>) -> Result<Vec<Entry>> {
    let dup = rustix::io::fcntl_dupfd_cloexec(fd, 0)?;
    let mut dir = rustix::fs::Dir::new(dup)?;
    let mut out = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = ent?;
        let name = OsStr::from_bytes(ent.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let kind = match ent.file_type() {
            FileType::Unknown => rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| Kind::of(FileType::from_raw_mode(st.st_mode)))
                .unwrap_or(Kind::Other),
            t => Kind::of(t),
        };
        out.push(Entry {
            name: name.to_os_string(),
            kind,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn walk_dir(
    fd: OwnedFd,
    rel: &Path,
    depth: usize,
    max_depth: Option<usize>,
    fences: &[Fence],
    visit: &mut dyn FnMut(&WalkEntry<'_>) -> Visit,
    stop: &mut bool,
) {
    let Ok(entries) = list_fd(fd.as_fd()) else {
        return;
    };
    for entry in &entries {
        if *stop {
            return;
        }
        if is_fenced_entry(fences, fd.as_fd(), &entry.name, entry.kind) {
            continue;
        }
        let child_rel = if rel == Path::new(".") {
            PathBuf::from(&entry.name)
        } else {
            rel.join(&entry.name)
        };
        let we = WalkEntry {
            rel: &child_rel,
            depth,
            entry,
            dir: fd.as_fd(),
        };
        match visit(&we) {
            Visit::Stop => {
                *stop = true;
                return;
            }
            Visit::Skip => continue,
            Visit::Continue => {}
        }
        if entry.kind != Kind::Dir || max_depth.is_some_and(|m| depth >= m) {
            continue;
        }
        // O_NOFOLLOW: a directory swapped for a symlink since the listing is not entered.
        let Ok(child) = rustix::fs::openat(
            &fd,
            entry.name.as_os_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        walk_dir(child, &child_rel, depth + 1, max_depth, fences, visit, stop);
    }
}

fn is_magic(p: &Path) -> bool {
    // ELOOP is also the answer for a genuine symlink loop; both are refused, but only a
    // path through /proc is reported as an escape.
    p.components().any(|c| c.as_os_str() == "proc")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(d.path()).unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret.txt"), "SECRET").unwrap();
        fs::write(ws.join("in.txt"), "inside").unwrap();
        (d, ws, outside)
    }

    fn read(root: &Root, rel: &str) -> Result<String> {
        let mut s = String::new();
        root.open_read(Path::new(rel))?.read_to_string(&mut s)?;
        Ok(s)
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, ws, outside) = setup();
        symlink(&outside, ws.join("out")).unwrap();
        symlink("../outside/secret.txt", ws.join("rel")).unwrap();
        symlink("sub/../in.txt", ws.join("ok")).unwrap();
        let root = Root::open(&ws).unwrap();
        assert_eq!(read(&root, "in.txt").unwrap(), "inside");
        assert_eq!(read(&root, "ok").unwrap(), "inside");
        assert!(matches!(read(&root, "out/secret.txt"), Err(Error::Outside)));
        assert!(matches!(read(&root, "rel"), Err(Error::Outside)));
        assert!(matches!(
            read(&root, "../outside/secret.txt"),
            Err(Error::Outside)
        ));
        assert!(matches!(read(&root, "/etc/passwd"), Err(Error::Outside)));
        assert!(matches!(root.stat(Path::new("out")), Err(Error::Outside)));
        assert_eq!(root.lstat(Path::new("out")).unwrap().kind, Kind::Symlink);
        assert!(read(&root, "missing").unwrap_err().is_not_found());
        assert!(matches!(
            root.write_atomic(Path::new("out/new.txt"), b"x", true),
            Err(Error::Outside)
        ));
        assert!(matches!(
            root.write_atomic(Path::new("rel"), b"x", true),
            Err(Error::Outside)
        ));
        assert!(!outside.join("new.txt").exists());
        assert_eq!(
            fs::read_to_string(outside.join("secret.txt")).unwrap(),
            "SECRET"
        );
        let names: Vec<_> = root
            .read_dir(Path::new("."))
            .unwrap()
            .into_iter()
            .map(|e| (e.name.to_string_lossy().into_owned(), e.kind))
            .collect();
        assert!(names.contains(&("out".into(), Kind::Symlink)), "{names:?}");
        assert!(names.contains(&("sub".into(), Kind::Dir)), "{names:?}");
        assert!(matches!(
            root.read_dir(Path::new("out")),
            Err(Error::Outside)
        ));
    }

    #[test]
    fn atomic_write_replaces_the_name_only() {
        let (_d, ws, outside) = setup();
        fs::hard_link(outside.join("secret.txt"), ws.join("hard.txt")).unwrap();
        let root = Root::open(&ws).unwrap();
        root.write_atomic(Path::new("hard.txt"), b"new", false)
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("hard.txt")).unwrap(), "new");
        assert_eq!(
            fs::read_to_string(outside.join("secret.txt")).unwrap(),
            "SECRET"
        );
        // A link inside the workspace: the target is replaced, the link kept.
        symlink("in.txt", ws.join("link")).unwrap();
        root.write_atomic(Path::new("link"), b"via link", false)
            .unwrap();
        assert!(fs::symlink_metadata(ws.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(ws.join("in.txt")).unwrap(), "via link");
        // Parents are created; modes are kept.
        root.write_atomic(Path::new("a/b/c.txt"), b"deep", true)
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("a/b/c.txt")).unwrap(), "deep");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(ws.join("in.txt"), fs::Permissions::from_mode(0o751)).unwrap();
        root.write_atomic(Path::new("in.txt"), b"m", false).unwrap();
        let mode = fs::metadata(ws.join("in.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o751);
        assert!(root.write_atomic(Path::new("sub"), b"x", false).is_err());
        assert!(root
            .write_atomic(Path::new("none/x"), b"x", false)
            .unwrap_err()
            .is_not_found());
        // No temporary files are left behind.
        let left: Vec<_> = fs::read_dir(&ws)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".wuu-"))
            .collect();
        assert!(left.is_empty());
        root.remove_file(Path::new("link")).unwrap();
        assert!(ws.join("in.txt").exists());
    }

    #[test]
    fn walk_never_follows_links_and_refuses_fifos() {
        let (_d, ws, outside) = setup();
        symlink(&outside, ws.join("sub/out")).unwrap();
        fs::write(ws.join("sub/a.txt"), "a").unwrap();
        let root = Root::open(&ws).unwrap();
        let mut seen = Vec::new();
        root.walk(Path::new("."), None, &mut |e| {
            seen.push((e.rel.to_string_lossy().into_owned(), e.entry.kind));
            if e.entry.kind == Kind::File {
                assert!(e.open_file().is_ok());
            }
            Visit::Continue
        })
        .unwrap();
        assert!(
            seen.contains(&("sub/out".into(), Kind::Symlink)),
            "{seen:?}"
        );
        assert!(!seen.iter().any(|(p, _)| p.contains("secret")), "{seen:?}");
        let fifo = ws.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(read(&root, "fifo").is_err());
    }

    #[test]
    fn fenced_paths_are_refused_by_any_name_and_left_out_of_listings() {
        let (_d, ws, _outside) = setup();
        fs::create_dir_all(ws.join("home")).unwrap();
        fs::write(ws.join("home/db"), "DB").unwrap();
        fs::write(ws.join("cfg.json"), "CFG").unwrap();
        symlink("home", ws.join("h")).unwrap();
        symlink("home/db", ws.join("dblink")).unwrap();
        fs::hard_link(ws.join("cfg.json"), ws.join("hard.json")).unwrap();
        let root = Root::open(&ws)
            .unwrap()
            .fenced(&ws.join("home"), "inside the home")
            .fenced(&ws.join("cfg.json"), "the config");
        for rel in ["home/db", "h/db", "dblink", "home", "cfg.json", "hard.json"] {
            let e = read(&root, rel).unwrap_err();
            assert!(e.is_fenced(), "{rel}: {e}");
        }
        assert!(root
            .write_atomic(Path::new("h/new"), b"x", false)
            .unwrap_err()
            .is_fenced());
        assert!(!ws.join("home/new").exists());
        assert_eq!(read(&root, "in.txt").unwrap(), "inside");
        let names: Vec<_> = root
            .read_dir(Path::new("."))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(!names
            .iter()
            .any(|n| n == "home" || n == "cfg.json" || n == "hard.json"));
        let mut walked = vec![];
        root.walk(Path::new("."), None, &mut |e| {
            walked.push(e.rel.to_path_buf());
            Visit::Continue
        })
        .unwrap();
        assert!(!walked
            .iter()
            .any(|p| p.starts_with("home") || p == Path::new("cfg.json")));
        assert!(walked.iter().any(|p| p == Path::new("in.txt")));
    }
}
