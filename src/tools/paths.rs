//! Path resolution and the permission check for file paths.
//!
//! A path from the model is joined to `ctx.cwd` (unless absolute), normalized lexically
//! (`.` and `..` removed), then resolved against the file system: the deepest existing
//! ancestor is canonicalized (following symlinks, including a dangling symlink's target)
//! and the not-yet-existing rest appended. The tools then operate on that resolved path,
//! so what was checked is what is touched. In `standard` and `read_only` mode the
//! resolved path must lie inside the canonical workspace root.

use super::{Fail, PermissionMode, ToolContext};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// What the caller wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read (allowed in every mode; confined to the workspace unless `unconfined`).
    Read,
    /// Write (refused in `read_only`; confined unless `unconfined`).
    Write,
}

/// Removes `.` and `..` lexically. `..` at the root stays at the root.
pub(crate) fn normalize(path: &Path) -> PathBuf {
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
