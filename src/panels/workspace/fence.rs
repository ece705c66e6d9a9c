//! Containment and secret fencing of the workspace views (spec `app-server.md`,
//! workspace/*).
//!
//! Containment: every file access goes through [`crate::beneath::Root`] opened on
//! the server's workspace, in every permission mode: paths are resolved by the kernel
//! beneath the workspace (`openat2` `RESOLVE_BENEATH`), so `..`, absolute paths and links
//! that lead out of it fail, and a link swapped in after a check cannot redirect a read.
//! `root` must be the workspace or a directory inside it; it is only ever used as a
//! prefix of paths resolved beneath the workspace. Hard links inside the workspace are
//! the user's own files and are read like any file, except the host's own files: the wuu
//! home (when the workspace holds it) and the user config file are fenced off exactly as
//! for the file tools ([`Root::fenced_host`]), by any name or link.
//!
//! Secrets: text answers pass the redactor with every frame, but base64 hides a secret
//! from it, so a chunk whose bytes (or the bytes around its edges) contain a configured
//! secret is refused ([`carries_secret`]), and an image or PDF that contains one gets no
//! data URL (`renderable_withheld` says why).

use super::{err, invalid, Refusal};
use crate::beneath::{self, Kind, Root};
use crate::session::Host;
use std::path::{Path, PathBuf};

pub(super) fn io_refusal(e: beneath::Error) -> Refusal {
    match e {
        beneath::Error::Outside => err("path must stay inside the workspace"),
        beneath::Error::Io(e) => err(e.to_string()),
    }
}

/// The view's root: the workspace `Root` and the prefix of the requested `root` inside
/// it (empty for the workspace itself), plus the absolute root path shown to clients.
pub(super) struct View {
    pub(super) ws: Root,
    pub(super) prefix: PathBuf,
    pub(super) shown: PathBuf,
}

impl View {
    pub(super) fn open(shared: &Host, requested: Option<&str>) -> Result<View, Refusal> {
        let workdir = &shared.opts.workdir;
        let requested = requested.map(str::trim).filter(|r| !r.is_empty());
        let prefix = match requested {
            None => PathBuf::new(),
            Some(r) => {
                let p = Path::new(r);
                if !p.is_absolute() {
                    return Err(invalid("root: must be absolute"));
                }
                beneath::rel_beneath(workdir, p)
                    .or_else(|| {
                        // The client may name the workspace through its real path.
                        let real = std::fs::canonicalize(workdir).ok()?;
                        beneath::rel_beneath(&real, p)
                    })
                    .ok_or_else(|| {
                        err(format!(
                            "root {r:?} is not this server's workspace or a directory inside it"
                        ))
                    })?
            }
        };
        // The wuu home and the user config file are never served, as for the file tools.
        let ws = Root::open(workdir)
            .map_err(|e| err(format!("cannot open the workspace: {e}")))?
            .fenced_host(&shared.opts.home, &[shared.config().config_path.clone()]);
        if !prefix.as_os_str().is_empty() {
            let st = ws.stat(&prefix).map_err(io_refusal)?;
            if st.kind != Kind::Dir {
                return Err(err("root is not a directory"));
            }
        }
        let shown = workdir.join(&prefix);
        Ok(View { ws, prefix, shown })
    }

    pub(super) fn rel(&self, path: &Path) -> PathBuf {
        self.prefix.join(path)
    }
}

/// A client path relative to the view's root: `/` separators, no `..`, not absolute.
pub(super) fn relative(path: Option<&str>, directory: bool) -> Result<PathBuf, Refusal> {
    let p = path.unwrap_or("").replace('\\', "/");
    let p = p.trim_start_matches("./");
    if p.is_empty() || p == "." {
        return if directory {
            Ok(PathBuf::new())
        } else {
            Err(invalid("path is required"))
        };
    }
    if p.starts_with('/') || p.contains('\0') || p.split('/').any(|c| c == "..") {
        return Err(err("path must stay inside the workspace"));
    }
    Ok(p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect())
}

/// Refuses `rel` when it or a directory above it is fenced (the wuu home, the user
/// config file): also a file that no longer exists, reached through its directory.
pub(super) fn refuse_fenced(ws: &Root, rel: &Path) -> Result<(), Refusal> {
    for a in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        if let Err(e) = ws.lstat(a) {
            if e.is_fenced() {
                return Err(io_refusal(e));
            }
        }
    }
    Ok(())
}

/// Whether the chunk `data` read at `offset` of `f` (of `size` bytes) holds a configured
/// secret, or part of one that crosses either of its edges (the bytes around it, up to
/// the longest pattern's length, are looked at too). A read error counts as a secret.
pub(super) fn carries_secret(f: &std::fs::File, data: &[u8], offset: u64, size: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let reach = crate::secrets::longest_pattern().saturating_sub(1) as u64;
    if reach == 0 {
        return false;
    }
    let start = offset.saturating_sub(reach);
    let end = (offset + data.len() as u64).saturating_add(reach).min(size);
    let mut window = vec![0u8; (end - start) as usize];
    let mut got = 0;
    while got < window.len() {
        match f.read_at(&mut window[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(_) => return true,
        }
    }
    window.truncate(got);
    crate::secrets::contains_secret(&window) || crate::secrets::contains_secret(data)
}
