//! Path resolution and the permission check for file paths.
//!
//! A path from the model is joined to `ctx.cwd` (unless absolute) and normalized
//! lexically (`.` and `..` removed). In `standard` and `read_only` mode it must then lie
//! inside the canonical workspace root (a path spelled through another name of the
//! workspace, e.g. a symlinked parent, is canonicalized first to find out); the result is
//! a [`Target`]: the workspace opened as a [`Root`] plus the path relative to it. Every
//! file operation then goes through the `Root`, so the kernel resolves the path beneath
//! the workspace at the moment of the operation (`openat2` with `RESOLVE_BENEATH`): a
//! symlink that leads out, even one swapped in after this check, makes the operation
//! fail with [`Error::Outside`], reported to the model as a permission refusal.
//! In `unconfined` mode the root is `/` (nothing is out of reach).

use super::{Fail, PermissionMode, ToolContext};
use crate::beneath::{self, normalize, Error, Root};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the caller wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read (allowed in every mode; confined to the workspace unless `unconfined`).
    Read,
    /// Write (refused in `read_only`; confined unless `unconfined`).
    Write,
}

/// Resolves an absolute, normalized path: canonicalizes its deepest existing ancestor
/// (following a dangling final symlink by hand, at most 40 hops) and appends the rest.
pub(crate) fn resolve_fs(path: &Path) -> io::Result<PathBuf> {
    resolve_hops(path, 40)
}

fn resolve_hops(path: &Path, hops: usize) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<OsString> = Vec::new();
    while fs::symlink_metadata(&existing).is_err() {
        match existing.file_name() {
            Some(name) => {
                rest.push(name.to_os_string());
                existing.pop();
            }
            None => break,
        }
    }
    let mut base = match fs::canonicalize(&existing) {
        Ok(c) => c,
        Err(e) => {
            let meta = fs::symlink_metadata(&existing)?;
            if !meta.file_type().is_symlink() || hops == 0 {
                return Err(e);
            }
            // A dangling symlink: resolve its target by hand.
            let target = fs::read_link(&existing)?;
            let parent = existing.parent().unwrap_or(Path::new("/"));
            let parent = fs::canonicalize(parent)?;
            resolve_hops(&normalize(&parent.join(target)), hops - 1)?
        }
    };
    for name in rest.iter().rev() {
        base.push(name);
    }
    Ok(base)
}

/// The canonical workspace root (falls back to the configured one if it cannot be
/// canonicalized).
pub(crate) fn workspace_root(ctx: &ToolContext) -> PathBuf {
    fs::canonicalize(&ctx.workspace_root).unwrap_or_else(|_| normalize(&ctx.workspace_root))
}

/// The canonical current directory (falls back to the configured one).
pub(crate) fn cwd(ctx: &ToolContext) -> PathBuf {
    fs::canonicalize(&ctx.cwd).unwrap_or_else(|_| normalize(&ctx.cwd))
}

/// Resolves `raw` for `access`, applying the permission mode. Errors: empty path
/// (`Fail::Error`), write in `read_only`, or a resolved path outside the workspace in
/// `standard`/`read_only` (`Fail::Denied`).
pub(crate) fn resolve(ctx: &ToolContext, raw: &str, access: Access) -> Result<PathBuf, Fail> {
    if raw.trim().is_empty() {
        return Err(Fail::Error("path must not be empty".into()));
    }
    if access == Access::Write && ctx.permission_mode == PermissionMode::ReadOnly {
        return Err(Fail::Denied(format!(
            "cannot write `{raw}`: the conversation is in read_only mode"
        )));
    }
    let joined = normalize(&ctx.cwd.join(raw));
    let resolved = resolve_fs(&joined);
    if ctx.permission_mode == PermissionMode::Unconfined {
        return Ok(resolved.unwrap_or(joined));
    }
    let root = workspace_root(ctx);
    match resolved {
        Ok(p) if p.starts_with(&root) => Ok(p),
        Ok(p) => Err(Fail::Denied(format!(
            "`{raw}` resolves to {} which is outside the workspace {} ({} mode)",
            p.display(),
            root.display(),
            ctx.permission_mode.as_str()
        ))),
        Err(e) => Err(Fail::Denied(format!(
            "cannot resolve `{raw}` ({e}); only paths inside the workspace {} are allowed",
            root.display()
        ))),
    }
}

/// A path resolved for a file tool: operate on it through `root` and `rel`.
#[derive(Debug)]
pub(crate) struct Target {
    /// The workspace root (or `/` in `unconfined` mode).
    pub root: Root,
    /// The path relative to `root`.
    pub rel: PathBuf,
    /// The absolute path, for display and bookkeeping (never used to open).
    pub abs: PathBuf,
    /// What the model wrote.
    pub shown: String,
}

impl Target {
    /// Turns an error of an operation on this target into a tool failure: an escape is
    /// a permission refusal naming the workspace, anything else an error naming `what`.
    pub(crate) fn fail(&self, what: &str, e: Error) -> Fail {
        match e {
            e if e.is_fenced() => Fail::Denied(format!("cannot {what} `{}`: {e}", self.shown)),
            Error::Outside => Fail::Denied(format!(
                "cannot {what} `{}`: it leads outside the workspace {} (through `..` or a symbolic link); only paths inside the workspace are allowed",
                self.shown,
                self.root.path().display()
            )),
            Error::Io(e) => {
                let hint = match e.kind() {
                    io::ErrorKind::NotFound => " (no such file)",
                    io::ErrorKind::PermissionDenied => " (the OS denied access)",
                    _ => "",
                };
                Fail::Error(format!("cannot {what} `{}`: {e}{hint}", self.shown))
            }
        }
    }
}

/// Resolves `raw` for `access` into a [`Target`], applying the permission mode.
/// Errors: empty path (`Fail::Error`), write in `read_only`, a path outside the
/// workspace in `standard`/`read_only` (`Fail::Denied`), an unopenable root.
pub(crate) fn target(ctx: &ToolContext, raw: &str, access: Access) -> Result<Target, Fail> {
    if raw.trim().is_empty() {
        return Err(Fail::Error("path must not be empty".into()));
    }
    if access == Access::Write && ctx.permission_mode == PermissionMode::ReadOnly {
        return Err(Fail::Denied(format!(
            "cannot write `{raw}`: the conversation is in read_only mode"
        )));
    }
    let joined = normalize(&cwd(ctx).join(raw));
    target_of(ctx, &joined, raw)
}

/// [`target`] for an absolute, normalized path (no write check).
pub(crate) fn target_of(ctx: &ToolContext, abs: &Path, raw: &str) -> Result<Target, Fail> {
    let (root_path, rel) = if ctx.permission_mode == PermissionMode::Unconfined {
        let rel = abs.strip_prefix("/").unwrap_or(abs);
        (PathBuf::from("/"), rel.to_path_buf())
    } else {
        let root = workspace_root(ctx);
        // The canonical spelling when it lies inside (it also covers absolute symlinks
        // that point back inside, which `RESOLVE_BENEATH` refuses on principle, and a
        // workspace reached through another name); else the lexical one, for which
        // the kernel then reports any escape. Either way the operation itself is
        // resolved beneath the root, so a link swapped after this point cannot lead
        // out.
        let rel = resolve_fs(abs)
            .ok()
            .and_then(|p| beneath::rel_beneath(&root, &p))
            .or_else(|| beneath::rel_beneath(&root, abs));
        match rel {
            Some(rel) => (root, rel),
            None => {
                return Err(Fail::Denied(format!(
                    "`{raw}` is outside the workspace {} ({} mode); only paths inside the workspace are allowed",
                    root.display(),
                    ctx.permission_mode.as_str()
                )))
            }
        }
    };
    let opened = if ctx.permission_mode == PermissionMode::Unconfined {
        Root::anywhere()
    } else {
        Root::open(&root_path)
    };
    let mut root = opened.map_err(|e| {
        Fail::Error(format!(
            "cannot open the workspace {}: {e}",
            root_path.display()
        ))
    })?;
    if ctx.permission_mode != PermissionMode::Unconfined {
        // The wuu home and the user config file are never workspace files.
        let home = ctx
            .sandbox
            .process_ledger
            .clone()
            .unwrap_or_else(crate::config::wuu_home);
        root = root.fenced_host(&home, &ctx.sandbox.hidden);
    }
    let abs = normalize(&root_path.join(&rel));
    Ok(Target {
        root,
        rel,
        abs,
        shown: raw.to_string(),
    })
}

/// How a resolved path is shown: relative to `base` when inside it (`.` for `base`
/// itself), else absolute. Always with `/` separators as the OS gives them.
pub(crate) fn display_rel(base: &Path, path: &Path) -> String {
    match path.strip_prefix(base) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

/// How a resolved path is reported in file-tool `detail.path`: relative to the
/// workspace root when inside it, else absolute.
pub(crate) fn display(ctx: &ToolContext, path: &Path) -> String {
    display_rel(&workspace_root(ctx), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_removes_dots() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
    }

    #[test]
    fn resolve_fs_follows_dangling_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        std::os::unix::fs::symlink(root.join("target/none"), root.join("link")).unwrap();
        let r = resolve_fs(&root.join("link/x")).unwrap();
        assert_eq!(r, root.join("target/none/x"));
        std::os::unix::fs::symlink("/tmp/elsewhere-wuu", root.join("out")).unwrap();
        assert_eq!(
            resolve_fs(&root.join("out")).unwrap(),
            PathBuf::from("/tmp/elsewhere-wuu")
        );
    }
}
