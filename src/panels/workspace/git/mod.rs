//! The git views: `workspace/git/status`, `workspace/git/changes` and
//! `workspace/git/diff` (spec `app-server.md`, workspace/git/*). Git runs confined and
//! bounded ([`command`]). A workspace that is not inside a repository answers
//! `is_repo: false` with empty views, as the Go server does; a repository whose top
//! level, git directory or common directory lies outside the workspace (a `.git` file
//! `gitdir: /elsewhere`, a worktree of an outside repository) is refused.

mod changes;
mod command;

use super::erased::Ser;
use super::fence::{io_refusal, refuse_fenced, relative, View};
use super::files::{preview, slash};
use super::{err, Refusal, GIT_LIST_BYTES, PREVIEW_BYTES};
use crate::beneath::{self, Kind};
use crate::session::Host;
use changes::{changes, numstat, totals};
use command::{git, git_list, Git};
use std::path::PathBuf;
use wuu_protocol::*;

/// Which git view a request asks for.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum GitKind {
    Status,
    Changes,
    Diff,
}

/// The repository a view reads: its top level inside the workspace and the baseline
/// the changes are listed against (`HEAD`, or the empty tree before the first commit).
struct Repo {
    /// The top level relative to the workspace.
    top_rel: PathBuf,
    /// The top level as the workspace path joined with `top_rel`.
    top_path: PathBuf,
    /// `HEAD` or the empty tree's hash.
    baseline: String,
}

/// Serves one git view.
pub(super) fn view(
    shared: &Host,
    p: &WorkspaceViewParams,
    kind: GitKind,
) -> Result<serde_json::Value, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let g = &Git::new(shared);
    let Some(repo) = open_repo(shared, &view, g)? else {
        return Ok(match kind {
            GitKind::Status => GitStatusResult::default().value(),
            GitKind::Changes => GitChangesResult::default().value(),
            GitKind::Diff => GitDiffResult {
                change: GitChange {
                    path: p.path.clone().unwrap_or_default(),
                    status: "unknown".into(),
                    ..Default::default()
                },
                ..Default::default()
            }
            .value(),
        });
    };
    match kind {
        GitKind::Changes => Ok(GitChangesResult {
            is_repo: true,
            root: Some(repo.top_path.to_string_lossy().into_owned()),
            files: changes(&repo.top_path, g, &repo.baseline)?,
        }
        .value()),
        GitKind::Status => Ok(status(&repo, g)?.value()),
        GitKind::Diff => Ok(diff(shared, view, &repo, g, p)?.value()),
    }
}

/// The repository around the view's root, checked to lie inside the workspace; `None`
/// when the root is not inside a repository.
fn open_repo(shared: &Host, view: &View, g: &Git) -> Result<Option<Repo>, Refusal> {
    let top = git(
        &view.shown,
        g,
        GIT_LIST_BYTES,
        &["rev-parse", "--show-toplevel"],
    )?;
    if top.code != Some(0) {
        if top.stderr.contains("not a git repository") {
            return Ok(None);
        }
        // Missing git, permissions, a corrupt repository must not look clean.
        return Err(err(format!(
            "git rev-parse: {} (exit {:?})",
            top.stderr, top.code
        )));
    }
    let top = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim_end_matches('\n'));
    let workdir_real =
        std::fs::canonicalize(&shared.opts.workdir).unwrap_or_else(|_| shared.opts.workdir.clone());
    let Some(top_rel) = beneath::rel_beneath(&workdir_real, &top) else {
        return Err(err(format!(
            "the repository root {} is outside the workspace",
            top.display()
        )));
    };
    // A `.git` file (`gitdir: …`), `commondir` or alternates could make git read another
    // repository's objects: the git directory and the common directory must be inside the
    // workspace too (a worktree of a repository outside it is refused).
    let dirs = git_list(
        &top,
        g,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
        ],
    )?;
    for d in String::from_utf8_lossy(&dirs)
        .lines()
        .filter(|l| !l.is_empty())
    {
        let real = std::fs::canonicalize(d).unwrap_or_else(|_| PathBuf::from(d));
        if beneath::rel_beneath(&workdir_real, &real).is_none() {
            return Err(err(format!(
                "the repository's git directory {} is outside the workspace; it is not read",
                real.display()
            )));
        }
    }
    let top_path = shared.opts.workdir.join(&top_rel);
    let baseline = match git(
        &top_path,
        g,
        4096,
        &["rev-parse", "--verify", "--quiet", "HEAD"],
    )? {
        o if o.code == Some(0) => "HEAD".to_owned(),
        o if o.code == Some(1) => {
            let h = git_list(&top_path, g, &["hash-object", "-t", "tree", "--stdin"])?;
            String::from_utf8_lossy(&h).trim().to_owned()
        }
        o => return Err(err(format!("git rev-parse HEAD: {}", o.stderr))),
    };
    Ok(Some(Repo {
        top_rel,
        top_path,
        baseline,
    }))
}

/// `workspace/git/status`: branch (or short hash when detached), local branches by
/// recent commit, change totals, dirty entries and staged totals.
fn status(repo: &Repo, g: &Git) -> Result<GitStatusResult, Refusal> {
    let (top_path, baseline) = (&repo.top_path, &repo.baseline);
    let mut r = GitStatusResult {
        is_repo: true,
        ..Default::default()
    };
    let b = git_list(top_path, g, &["branch", "--show-current"])?;
    let mut branch = String::from_utf8_lossy(&b).trim().to_owned();
    r.detached = branch.is_empty();
    if r.detached && baseline == "HEAD" {
        let h = git_list(top_path, g, &["rev-parse", "--short", "HEAD"])?;
        branch = String::from_utf8_lossy(&h).trim().to_owned();
    }
    r.branch = (!branch.is_empty()).then_some(branch);
    let refs = git_list(
        top_path,
        g,
        &[
            "for-each-ref",
            "--sort=-committerdate",
            "--format=%(refname:short)",
            "refs/heads/",
        ],
    )?;
    r.branches = String::from_utf8_lossy(&refs)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    r.diff = totals(&changes(top_path, g, baseline)?);
    let st = git_list(
        top_path,
        g,
        &["status", "--porcelain=v1", "-z", "--untracked-files=normal"],
    )?;
    let text = String::from_utf8_lossy(&st);
    let recs: Vec<&str> = text.split('\0').collect();
    let mut i = 0;
    while i < recs.len() {
        let e = recs[i];
        i += 1;
        if e.len() < 3 {
            continue;
        }
        r.dirty_count += 1;
        if e.get(..2).is_some_and(|x| x.contains(['R', 'C'])) {
            i += 1;
        }
    }
    let staged = git_list(
        top_path,
        g,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--cached",
            "--numstat",
            "-z",
            baseline,
            "--",
        ],
    )?;
    r.staged_diff = totals(&numstat(&staged)?);
    Ok(r)
}

/// `workspace/git/diff`: the patch of one changed file with its original text (at the
/// baseline) and its modified text (in the workspace, read beneath it).
fn diff(
    shared: &Host,
    view: View,
    repo: &Repo,
    g: &Git,
    p: &WorkspaceViewParams,
) -> Result<GitDiffResult, Refusal> {
    let (top_rel, top_path, baseline) = (&repo.top_rel, &repo.top_path, &repo.baseline);
    let rel = relative(p.path.as_deref(), false)?;
    refuse_fenced(&view.ws, &top_rel.join(&rel))?;
    let path = slash(&rel);
    let files = changes(top_path, g, baseline)?;
    let Some(change) = files.into_iter().find(|c| c.path == path) else {
        return Err(err("file is not in the current repository changes"));
    };
    let mut args: Vec<&str> = vec![
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--find-renames",
        baseline,
        "--",
        &path,
    ];
    if let Some(old) = change.old_path.as_deref() {
        args.push(old);
    }
    if change.status == "untracked" {
        args = vec![
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-index",
            "--",
            "/dev/null",
            &path,
        ];
    }
    let patch = git(top_path, g, PREVIEW_BYTES, &args)?;
    if patch.code != Some(0) && !(change.status == "untracked" && patch.code == Some(1)) {
        return Err(err(format!("git diff: {}", patch.stderr)));
    }
    let mut r = GitDiffResult {
        is_repo: true,
        patch: String::from_utf8_lossy(&patch.stdout).into_owned(),
        truncated: patch.truncated,
        change,
        ..Default::default()
    };
    if r.change.binary {
        return Ok(r);
    }
    if r.change.status != "untracked" && r.change.status != "added" {
        let orig = r.change.old_path.clone().unwrap_or_else(|| path.clone());
        let spec = format!("{baseline}:{orig}");
        let o = git(top_path, g, PREVIEW_BYTES, &["show", &spec])?;
        if o.code != Some(0) {
            return Err(err(format!("git show: {}", o.stderr)));
        }
        r.truncated |= o.truncated;
        r.original_text = Some(String::from_utf8_lossy(&o.stdout).into_owned());
    } else {
        r.original_text = Some(String::new());
    }
    if r.change.status == "deleted" {
        r.modified_text = Some(String::new());
    } else {
        // Read through the workspace root, never following a link out of it.
        let in_ws = top_rel.join(&rel);
        let st = view.ws.lstat(&in_ws).map_err(io_refusal)?;
        match st.kind {
            Kind::Symlink => {
                // Review the link itself, never its target.
                let target = std::fs::read_link(shared.opts.workdir.join(&in_ws))
                    .map_err(|e| err(e.to_string()))?;
                r.modified_text = Some(target.to_string_lossy().into_owned());
            }
            Kind::File => {
                let v = View {
                    ws: view.ws,
                    prefix: top_rel.clone(),
                    shown: top_path.clone(),
                };
                let pv = preview(&v, &rel)?;
                r.binary_from_preview(pv);
            }
            _ => {}
        }
    }
    Ok(r)
}

trait FromPreview {
    fn binary_from_preview(&mut self, pv: FileReadResult);
}

impl FromPreview for GitDiffResult {
    fn binary_from_preview(&mut self, pv: FileReadResult) {
        self.modified_text = pv.text;
        self.change.binary = pv.binary;
        self.truncated |= pv.truncated;
    }
}
