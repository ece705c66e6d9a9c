//! `apply_patch`: the Codex `*** Begin Patch` format, applied all-or-nothing.
//!
//! Grammar (one operation per `*** … File:` header):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: <path>        then lines `+text` (the new file's lines)
//! *** Delete File: <path>
//! *** Update File: <path>
//! *** Move to: <path>         (optional, right after Update File)
//! @@ [anchor text]            (optional for the first hunk)
//!  context / -removed / +added lines (an empty line counts as empty context)
//! *** End of File             (optional: the hunk must match at the end of the file)
//! *** End Patch
//! ```
//!
//! Every hunk is located first (exact match, then ignoring trailing whitespace), on an
//! in-memory view of all touched files; only when all operations validate are files
//! written. A write failure midway restores the files already written (best effort).
//! Files with CRLF line endings keep them. Updated files always end with a newline.

use super::args::ApplyPatchArgs;
use super::files::{read_existing, write_bytes};
use super::paths::{self, Access, Target};
use super::revision::{self, sha_opt};
use super::{Fail, ToolContext, ToolOutcome};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use std::path::PathBuf;

/// One parsed operation.
#[derive(Debug, Clone, PartialEq)]
enum Op {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One `@@` hunk of an update.
#[derive(Debug, Clone, PartialEq, Default)]
struct Hunk {
    /// Text after `@@`, used to anchor the hunk (a line to find first).
    anchor: Option<String>,
    /// Context and removed lines, in order.
    old: Vec<String>,
    /// Context and added lines, in order.
    new: Vec<String>,
    /// For each line of `new`: the index in `old` when it is a context line (the file's
    /// own text is kept for it, so loosely matched whitespace is preserved).
    new_ctx: Vec<Option<usize>>,
    /// `*** End of File` followed the hunk.
    eof: bool,
}

fn perr(line_no: usize, msg: impl std::fmt::Display) -> Fail {
    Fail::Error(format!(
        "invalid patch (line {line_no}): {msg}. Expected `*** Begin Patch`, then `*** Add File: p` / `*** Delete File: p` / `*** Update File: p` sections, then `*** End Patch`"
    ))
}

/// Parses patch text into operations.
fn parse(text: &str) -> Result<Vec<Op>, Fail> {
    let lines: Vec<&str> = text
        .trim()
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let Some(first) = lines.first() else {
        return Err(perr(1, "the patch is empty"));
    };
    if first.trim() != "*** Begin Patch" {
        return Err(perr(1, "the first line must be `*** Begin Patch`"));
    }
    let last_idx = lines.len() - 1;
    if last_idx == 0 || lines[last_idx].trim() != "*** End Patch" {
        return Err(perr(lines.len(), "the last line must be `*** End Patch`"));
    }
    let body = &lines[1..last_idx];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line_no = i + 2;
        let line = body[i];
        if let Some(p) = line.strip_prefix("*** Add File:") {
            let path = header_path(p, line_no)?;
            i += 1;
            let mut content = String::new();
            while i < body.len() && !body[i].starts_with("***") {
                let Some(text) = body[i].strip_prefix('+') else {
                    return Err(perr(
                        i + 2,
                        format!(
                            "lines of an added file must start with `+`, got `{}`",
                            body[i]
                        ),
                    ));
                };
                content.push_str(text);
                content.push('\n');
                i += 1;
            }
            ops.push(Op::Add { path, content });
        } else if let Some(p) = line.strip_prefix("*** Delete File:") {
            ops.push(Op::Delete {
                path: header_path(p, line_no)?,
            });
            i += 1;
        } else if let Some(p) = line.strip_prefix("*** Update File:") {
            let path = header_path(p, line_no)?;
            i += 1;
            let mut move_to = None;
            if let Some(m) = body.get(i).and_then(|l| l.strip_prefix("*** Move to:")) {
                move_to = Some(header_path(m, i + 2)?);
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            let mut cur: Option<Hunk> = None;
            while i < body.len() {
                let l = body[i];
                if l.trim() == "*** End of File" {
                    let Some(mut h) = cur.take() else {
                        return Err(perr(i + 2, "`*** End of File` without a hunk before it"));
                    };
                    h.eof = true;
                    hunks.push(h);
                    i += 1;
                    continue;
                }
                if l.starts_with("***") {
                    break;
                }
                if let Some(anchor) = l.strip_prefix("@@") {
                    if let Some(h) = cur.take() {
                        hunks.push(h);
                    }
                    let anchor = anchor.trim();
                    cur = Some(Hunk {
                        anchor: (!anchor.is_empty()).then(|| anchor.to_string()),
                        ..Hunk::default()
                    });
                    i += 1;
                    continue;
                }
                if cur.is_none() && hunks.is_empty() {
                    // First hunk may omit its `@@` line.
                    cur = Some(Hunk::default());
                }
                let Some(h) = cur.as_mut() else {
                    return Err(perr(
                        i + 2,
                        format!("expected `@@` to start the next hunk, got `{l}`"),
                    ));
                };
                let context = l.strip_prefix(' ').or(l.is_empty().then_some(""));
                if let Some(t) = context {
                    h.new_ctx.push(Some(h.old.len()));
                    h.old.push(t.to_string());
                    h.new.push(t.to_string());
                } else if let Some(t) = l.strip_prefix('-') {
                    h.old.push(t.to_string());
                } else if let Some(t) = l.strip_prefix('+') {
                    h.new_ctx.push(None);
                    h.new.push(t.to_string());
                } else {
                    return Err(perr(
                        i + 2,
                        format!("hunk lines must start with ` `, `-` or `+`, got `{l}`"),
                    ));
                }
                i += 1;
            }
            if let Some(h) = cur.take() {
                hunks.push(h);
            }
            hunks.retain(|h| !(h.old.is_empty() && h.new.is_empty()));
            if hunks.is_empty() && move_to.is_none() {
                return Err(perr(
                    line_no,
                    format!("`*** Update File: {path}` has no hunks"),
                ));
            }
            ops.push(Op::Update {
                path,
                move_to,
                hunks,
            });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(perr(line_no, format!("unexpected line `{line}`")));
        }
    }
    if ops.is_empty() {
        return Err(perr(1, "the patch contains no file operations"));
    }
    Ok(ops)
}

fn header_path(rest: &str, line_no: usize) -> Result<String, Fail> {
    let p = rest.trim();
    if p.is_empty() {
        return Err(perr(line_no, "missing path after the file header"));
    }
    Ok(p.to_string())
}

/// Finds `needle` in `hay` at or after `start`: exact first, then ignoring trailing
/// whitespace. With `eof`, a match ending at the last line is preferred.
fn seek(hay: &[String], needle: &[String], start: usize, eof: bool) -> Option<usize> {
    if needle.is_empty() {
        return Some(start.min(hay.len()));
    }
    if needle.len() > hay.len() {
        return None;
    }
    let last = hay.len() - needle.len();
    let exact = |a: &String, b: &String| a == b;
    let loose = |a: &String, b: &String| a.trim_end() == b.trim_end();
    for eq in [&exact as &dyn Fn(&String, &String) -> bool, &loose] {
        if eof && last >= start && hay[last..].iter().zip(needle).all(|(a, b)| eq(a, b)) {
            return Some(last);
        }
        for s in start..=last {
            if hay[s..s + needle.len()]
                .iter()
                .zip(needle)
                .all(|(a, b)| eq(a, b))
            {
                return Some(s);
            }
        }
    }
    None
}

/// Applies `hunks` to `text`; errors name the hunk that does not apply.
fn apply_hunks(text: &str, hunks: &[Hunk], shown: &str) -> Result<String, Fail> {
    let crlf = text.contains("\r\n");
    let mut lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            if crlf {
                l.strip_suffix('\r').unwrap_or(l).to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut pos = 0usize;
    for (n, h) in hunks.iter().enumerate() {
        let fail = |what: String| {
            Fail::Error(format!(
                "apply_patch failed: hunk {} of `{shown}` does not apply: {what}. No files were changed; read the file and retry with exact context lines",
                n + 1
            ))
        };
        if let Some(anchor) = &h.anchor {
            let found = seek(&lines, std::slice::from_ref(anchor), pos, false).or_else(|| {
                // Tolerate surrounding whitespace in the anchor.
                (pos..lines.len()).find(|&i| lines[i].trim() == anchor.trim())
            });
            match found {
                Some(i) => pos = i + 1,
                None => return Err(fail(format!("anchor line `@@ {anchor}` not found"))),
            }
        }
        if h.old.is_empty() {
            // Pure addition: after the anchor if there was one, else at the end.
            let at = if h.anchor.is_some() { pos } else { lines.len() };
            replacements.push((at, 0, h.new.clone()));
            pos = at;
            continue;
        }
        let mut old: &[String] = &h.old;
        let mut new_len = h.new.len();
        let mut found = seek(&lines, old, pos, h.eof);
        if found.is_none() && old.last().is_some_and(|l| l.is_empty()) {
            // A trailing empty line often stands for the end of the file.
            old = &old[..old.len() - 1];
            if h.new_ctx.last() == Some(&Some(old.len())) {
                new_len -= 1;
            }
            found = seek(&lines, old, pos, h.eof);
        }
        let Some(at) = found else {
            let preview: Vec<String> = h.old.iter().take(8).map(|l| format!("  |{l}")).collect();
            return Err(fail(format!(
                "could not find these lines{}:\n{}",
                if pos > 0 {
                    format!(" after line {pos}")
                } else {
                    String::new()
                },
                preview.join("\n")
            )));
        };
        let new: Vec<String> = h.new[..new_len]
            .iter()
            .zip(&h.new_ctx)
            .map(|(l, ctx)| match ctx {
                Some(i) if *i < old.len() => lines[at + i].clone(),
                _ => l.clone(),
            })
            .collect();
        replacements.push((at, old.len(), new));
        pos = at + old.len();
    }
    for (at, len, new) in replacements.into_iter().rev() {
        lines.splice(at..at + len, new);
    }
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut out = lines.join(eol);
    out.push_str(eol);
    Ok(out)
}

/// File bytes; `None` = the file is absent.
type Content = Option<Vec<u8>>;

/// In-memory view of the files a patch touches.
struct Overlay<'a> {
    /// Absolute path → (target, original content, current content).
    files: BTreeMap<PathBuf, (&'a Target, Content, Content)>,
}

impl<'a> Overlay<'a> {
    fn get(&mut self, t: &'a Target) -> Result<Option<Vec<u8>>, Fail> {
        if let Some((_, _, cur)) = self.files.get(&t.abs) {
            return Ok(cur.clone());
        }
        let orig = read_existing(t)?;
        self.files
            .insert(t.abs.clone(), (t, orig.clone(), orig.clone()));
        Ok(orig)
    }

    fn set(&mut self, t: &'a Target, bytes: Option<Vec<u8>>) -> Result<(), Fail> {
        self.get(t)?;
        if let Some(entry) = self.files.get_mut(&t.abs) {
            entry.2 = bytes;
        }
        Ok(())
    }
}

/// `apply_patch`.
pub(crate) fn run(a: ApplyPatchArgs, ctx: &ToolContext) -> Result<ToolOutcome, Fail> {
    let ops = parse(&a.patch)?;
    // Resolve every path (permission check) before touching anything.
    let mut resolved = Vec::with_capacity(ops.len());
    for op in &ops {
        let (p, m) = match op {
            Op::Add { path, .. } | Op::Delete { path } => (path, None),
            Op::Update { path, move_to, .. } => (path, move_to.as_ref()),
        };
        let rp = paths::target(ctx, p, Access::Write)?;
        let rm = m
            .map(|m| paths::target(ctx, m, Access::Write))
            .transpose()?;
        resolved.push((rp, rm));
    }
    let _guard = revision::write_lock();
    let mut view = Overlay {
        files: BTreeMap::new(),
    };
    let mut summary = Vec::new();
    let mut files: Vec<Value> = Vec::new();
    for (op, (t, move_t)) in ops.iter().zip(&resolved) {
        let path = &t.abs;
        match op {
            Op::Add { content, .. } => {
                let old = view.get(t)?;
                let action = if old.is_some() { "modified" } else { "created" };
                view.set(t, Some(content.clone().into_bytes()))?;
                summary.push(format!(
                    "{} {}",
                    if old.is_some() { "M" } else { "A" },
                    paths::display(ctx, path)
                ));
                let (added, removed) =
                    super::diffstat::line_counts(old.as_deref(), Some(content.as_bytes()));
                files.push(json!({
                    "path": paths::display(ctx, path),
                    "action": action,
                    "old_file_sha": sha_opt(old.as_deref()),
                    "new_file_sha": sha_opt(Some(content.as_bytes())),
                    "lines_added": added,
                    "lines_removed": removed,
                }));
            }
            Op::Delete { path: shown } => {
                let Some(old) = view.get(t)? else {
                    return Err(Fail::Error(format!(
                        "apply_patch failed: cannot delete `{shown}`: no such file. No files were changed"
                    )));
                };
                view.set(t, None)?;
                summary.push(format!("D {}", paths::display(ctx, path)));
                files.push(json!({
                    "path": paths::display(ctx, path),
                    "action": "deleted",
                    "old_file_sha": sha_opt(Some(&old)),
                    "new_file_sha": "",
                    "lines_added": 0,
                    "lines_removed": super::diffstat::line_counts(Some(&old), None).1,
                }));
            }
            Op::Update {
                path: shown,
                move_to,
                hunks,
            } => {
                let Some(old) = view.get(t)? else {
                    return Err(Fail::Error(format!(
                        "apply_patch failed: cannot update `{shown}`: no such file (use `*** Add File:` to create it). No files were changed"
                    )));
                };
                let Ok(text) = String::from_utf8(old.clone()) else {
                    return Err(Fail::Error(format!(
                        "apply_patch failed: `{shown}` is not valid UTF-8 text. No files were changed"
                    )));
                };
                let new_text = if hunks.is_empty() {
                    text
                } else {
                    apply_hunks(&text, hunks, shown)?
                };
                let new_bytes = new_text.into_bytes();
                let (added, removed) = super::diffstat::line_counts(Some(&old), Some(&new_bytes));
                let mut entry = json!({
                    "path": paths::display(ctx, path),
                    "action": "modified",
                    "old_file_sha": sha_opt(Some(&old)),
                    "new_file_sha": sha_opt(Some(&new_bytes)),
                    "lines_added": added,
                    "lines_removed": removed,
                });
                match (move_t, move_to) {
                    (Some(dest_t), Some(_)) if &dest_t.abs != path => {
                        let dest = &dest_t.abs;
                        view.set(t, None)?;
                        view.set(dest_t, Some(new_bytes))?;
                        entry["action"] = json!("moved");
                        entry["move_path"] = json!(paths::display(ctx, dest));
                        summary.push(format!(
                            "R {} -> {}",
                            paths::display(ctx, path),
                            paths::display(ctx, dest)
                        ));
                    }
                    _ => {
                        view.set(t, Some(new_bytes))?;
                        summary.push(format!("M {}", paths::display(ctx, path)));
                    }
                }
                files.push(entry);
            }
        }
    }
    commit(&view)?;
    let changes: Vec<(PathBuf, String)> = view
        .files
        .iter()
        .filter(|(_, (_, orig, cur))| orig != cur)
        .map(|(p, (_, _, cur))| (p.clone(), sha_opt(cur.as_deref())))
        .collect();
    let rev = revision::record(&paths::workspace_root(ctx), &changes);
    Ok(ToolOutcome::ok(
        format!(
            "Success. Updated the following files:\n{}\n",
            summary.join("\n")
        ),
        json!({"files": files, "workspace_revision": rev}),
    ))
}

/// Writes the final state of every changed file (each atomically); on failure restores
/// what was written.
fn commit(view: &Overlay<'_>) -> Result<(), Fail> {
    let mut done: Vec<(&Target, &Content)> = Vec::new();
    let mut result = Ok(());
    for (t, orig, cur) in view.files.values() {
        if orig == cur {
            continue;
        }
        let r = match cur {
            Some(bytes) => write_bytes(t, bytes),
            None => t.root.remove_file(&t.rel).map_err(|e| t.fail("delete", e)),
        };
        match r {
            Ok(()) => done.push((t, orig)),
            Err(Fail::Error(msg)) | Err(Fail::Denied(msg)) => {
                result = Err(Fail::Error(format!(
                    "apply_patch failed while writing: {msg}; files already written were restored"
                )));
                break;
            }
        }
    }
    if result.is_err() {
        for (t, orig) in done {
            let restored = match orig {
                Some(bytes) => t.root.write_atomic(&t.rel, bytes, true),
                None => t.root.remove_file(&t.rel),
            };
            if let Err(e) = restored {
                log::error!("apply_patch: cannot restore {}: {e}", t.abs.display());
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(anchor: Option<&str>, old: &[&str], new: &[&str]) -> Hunk {
        Hunk {
            anchor: anchor.map(String::from),
            old: old.iter().map(|s| s.to_string()).collect(),
            new: new.iter().map(|s| s.to_string()).collect(),
            new_ctx: vec![None; new.len()],
            eof: false,
        }
    }

    #[test]
    fn parses_all_operations() {
        let p = "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n*** Update File: c.txt\n*** Move to: d.txt\n@@ fn x\n ctx\n-old\n+new\n*** End of File\n*** End Patch\n";
        let ops = parse(p).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            Op::Add {
                path: "a.txt".into(),
                content: "one\ntwo\n".into()
            }
        );
        assert_eq!(
            ops[1],
            Op::Delete {
                path: "b.txt".into()
            }
        );
        let mut want = h(Some("fn x"), &["ctx", "old"], &["ctx", "new"]);
        want.new_ctx = vec![Some(0), None];
        want.eof = true;
        assert_eq!(
            ops[2],
            Op::Update {
                path: "c.txt".into(),
                move_to: Some("d.txt".into()),
                hunks: vec![want]
            }
        );
    }

    #[test]
    fn parse_errors_are_clear() {
        let e = parse("hello").unwrap_err();
        assert!(matches!(e, Fail::Error(m) if m.contains("*** Begin Patch")));
        let e = parse("*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch").unwrap_err();
        assert!(matches!(e, Fail::Error(m) if m.contains("must start with `+`")));
        let e = parse("*** Begin Patch\n*** End Patch").unwrap_err();
        assert!(matches!(e, Fail::Error(m) if m.contains("no file operations")));
        let e = parse("*** Begin Patch\n*** Add File: x\n+a\n").unwrap_err();
        assert!(matches!(e, Fail::Error(m) if m.contains("*** End Patch")));
    }

    #[test]
    fn hunks_apply_exact_then_trailing_whitespace() {
        let text = "a\nb  \nc\nd\n";
        let out = apply_hunks(text, &[h(None, &["b", "c"], &["b", "C"])], "f").unwrap();
        assert_eq!(out, "a\nb\nC\nd\n");
        let out = apply_hunks(text, &[h(Some("c"), &[], &["new"])], "f").unwrap();
        assert_eq!(out, "a\nb  \nc\nnew\nd\n");
        let out = apply_hunks(text, &[h(None, &[], &["z"])], "f").unwrap();
        assert_eq!(out, "a\nb  \nc\nd\nz\n");
        assert!(apply_hunks(text, &[h(None, &["x"], &["y"])], "f").is_err());
        assert!(apply_hunks(text, &[h(None, &[" b"], &["y"])], "f").is_err());
    }

    #[test]
    fn hunks_keep_crlf_and_order() {
        let text = "x\r\ny\r\nx\r\n";
        let mut last = h(None, &["x"], &["X"]);
        last.eof = true;
        let out = apply_hunks(text, &[last], "f").unwrap();
        assert_eq!(out, "x\r\ny\r\nX\r\n");
        let out = apply_hunks(
            "1\n2\n1\n2\n",
            &[h(None, &["1"], &["one"]), h(None, &["1"], &["uno"])],
            "f",
        )
        .unwrap();
        assert_eq!(out, "one\n2\nuno\n2\n");
    }
}
