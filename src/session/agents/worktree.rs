//! Git-worktree isolation of a worker (spec `subagents.md` §1.2 `isolation`): a fresh
//! worktree of the root's repository on a new branch `wuu-agent/<id>` under
//! `$WUU_HOME/worktrees/`; removed (with its branch) when its worker is closed and the
//! worktree is clean.

use super::Rec;
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(cwd: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .current_dir(cwd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Creates the worktree of worker `id` from the repository that holds `cwd`: its path
/// and the repository's top directory.
/// Errors: `cwd` is not in a git repository, or git refused.
pub fn create(home: &Path, cwd: &Path, id: &str) -> Result<(PathBuf, PathBuf), String> {
    let top = git(cwd, &["rev-parse", "--show-toplevel"])
        .map_err(|_| "isolation \"worktree\" needs a git repository".to_owned())?;
    let top = PathBuf::from(top.trim());
    let name = crate::util::name_tail(id, 120);
    let path = home.join("worktrees").join(&name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
    }
    let branch = format!("wuu-agent/{name}");
    let p = path.to_string_lossy().into_owned();
    git(&top, &["worktree", "add", "-b", &branch, &p, "HEAD"])
        .map_err(|e| format!("git worktree add failed: {e}"))?;
    Ok((path, top))
}

/// Removes a closed worker's worktree and branch when it has no changes (a dirty one is
/// kept for the user, and logged).
pub fn remove_if_clean(rec: &Rec) {
    let Some(path) = rec.worktree_path.as_deref().map(PathBuf::from) else {
        return;
    };
    if !path.exists() {
        return;
    }
    match git(&path, &["status", "--porcelain"]) {
        Ok(s) if s.trim().is_empty() => {
            let p = path.to_string_lossy().into_owned();
            let repo = rec.repo.as_deref().map(Path::new).unwrap_or(&path);
            if let Err(e) = git(repo, &["worktree", "remove", &p]) {
                log::warn!("removing worktree {p}: {e}");
                return;
            }
            let branch = format!("wuu-agent/{}", crate::util::name_tail(&rec.id, 120));
            if let Some(repo) = rec.repo.as_deref() {
                if let Err(e) = git(Path::new(repo), &["branch", "-D", &branch]) {
                    log::warn!("deleting branch {branch}: {e}");
                }
            }
        }
        Ok(_) => log::info!("worktree {} has changes; kept", path.display()),
        Err(e) => log::warn!("checking worktree {}: {e}", path.display()),
    }
}
