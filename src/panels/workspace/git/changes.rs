//! The change listing of the git views: tracked changes against the baseline (names,
//! statuses and line counts) plus untracked files, and their totals (spec
//! `app-server.md`, workspace/git/changes).

use super::super::{err, Refusal, GIT_LIST_BYTES, UNTRACKED_STATS};
use super::command::{git, git_list, Git};
use std::path::Path;
use wuu_protocol::{GitChange, GitTotals};

pub(super) fn numstat(data: &[u8]) -> Result<Vec<GitChange>, Refusal> {
    let text = String::from_utf8_lossy(data);
    let records: Vec<&str> = text.split('\0').collect();
    let mut out = vec![];
    let mut i = 0;
    while i < records.len() {
        let rec = records[i];
        i += 1;
        if rec.is_empty() {
            continue;
        }
        let fields: Vec<&str> = rec.splitn(3, '\t').collect();
        if fields.len() != 3 {
            return Err(err("invalid git numstat response"));
        }
        let mut path = fields[2].to_owned();
        if path.is_empty() {
            // A rename: `old\0new\0` follow.
            let Some(new) = records.get(i + 1) else {
                return Err(err("incomplete git rename statistics"));
            };
            path = (*new).to_owned();
            i += 2;
        }
        let binary = fields[0] == "-" || fields[1] == "-";
        out.push(GitChange {
            path,
            additions: if binary {
                0
            } else {
                fields[0].parse().unwrap_or(0)
            },
            deletions: if binary {
                0
            } else {
                fields[1].parse().unwrap_or(0)
            },
            binary,
            ..Default::default()
        });
    }
    Ok(out)
}

pub(super) fn changes(top: &Path, g: &Git, baseline: &str) -> Result<Vec<GitChange>, Refusal> {
    let names = git_list(
        top,
        g,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--name-status",
            "-z",
            "--find-renames",
            baseline,
            "--",
        ],
    )?;
    let counts = git_list(
        top,
        g,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--numstat",
            "-z",
            "--find-renames",
            baseline,
            "--",
        ],
    )?;
    let stats = numstat(&counts)?;
    let text = String::from_utf8_lossy(&names);
    let records: Vec<&str> = text.split('\0').collect();
    let mut files = vec![];
    let mut i = 0;
    while i + 1 < records.len() {
        let (code, path) = (records[i], records[i + 1]);
        i += 2;
        if code.is_empty() {
            break;
        }
        let mut c = GitChange {
            path: path.to_owned(),
            status: "unknown".into(),
            ..Default::default()
        };
        match code.as_bytes().first() {
            Some(b'M' | b'T' | b'U') => c.status = "modified".into(),
            Some(b'A') => c.status = "added".into(),
            Some(b'D') => c.status = "deleted".into(),
            Some(k @ (b'R' | b'C')) => {
                let Some(new) = records.get(i) else {
                    return Err(err("incomplete git rename"));
                };
                c.old_path = Some(path.to_owned());
                c.path = (*new).to_owned();
                i += 1;
                c.status = if *k == b'R' { "renamed" } else { "copied" }.into();
            }
            _ => {}
        }
        if let Some(s) = stats.iter().find(|s| s.path == c.path) {
            c.additions = s.additions;
            c.deletions = s.deletions;
            c.binary = s.binary;
        }
        files.push(c);
    }
    let untracked = git_list(
        top,
        g,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )?;
    let text = String::from_utf8_lossy(&untracked);
    for (n, path) in text.split('\0').filter(|p| !p.is_empty()).enumerate() {
        let mut c = GitChange {
            path: path.to_owned(),
            status: "untracked".into(),
            ..Default::default()
        };
        if n < UNTRACKED_STATS {
            let o = git(
                top,
                g,
                GIT_LIST_BYTES,
                &[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-index",
                    "--numstat",
                    "-z",
                    "--",
                    "/dev/null",
                    path,
                ],
            )?;
            if o.code != Some(0) && o.code != Some(1) {
                return Err(err(format!("git diff --no-index: {}", o.stderr)));
            }
            for s in numstat(&o.stdout)? {
                c.additions += s.additions;
                c.deletions += s.deletions;
                c.binary |= s.binary;
            }
        }
        files.push(c);
    }
    Ok(files)
}

pub(super) fn totals(files: &[GitChange]) -> GitTotals {
    GitTotals {
        files: files.len() as u64,
        additions: files.iter().map(|f| f.additions).sum(),
        deletions: files.iter().map(|f| f.deletions).sum(),
    }
}
