//! `list_files`, `grep`, `glob`: walks that respect `.gitignore` (also outside git
//! repositories), include hidden files, and never descend into `.git`.

use super::args::{GlobArgs, GrepArgs, ListFilesArgs};
use super::files::{looks_binary, read_line_capped, BINARY_SNIFF_BYTES, MAX_LINE_BYTES};
use super::paths::{self, Access, Target};
use super::{Cancel, Fail, ToolContext, ToolOutcome};
use crate::beneath::{self, Kind, Root, Visit, WalkEntry};
use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Default `list_files` depth.
pub(crate) const LIST_DEFAULT_DEPTH: u64 = 2;
/// Maximum `list_files` depth.
pub(crate) const LIST_MAX_DEPTH: u64 = 32;
/// Entries `list_files` shows at most.
pub(crate) const LIST_MAX_ENTRIES: usize = 1000;
/// Matching lines `grep` shows at most.
pub(crate) const GREP_MAX_MATCHES: usize = 500;
/// Characters of a matching line `grep` shows at most.
pub(crate) const GREP_MAX_LINE_CHARS: usize = 500;
/// Paths `glob` shows at most.
pub(crate) const GLOB_MAX_RESULTS: usize = 1000;
/// Largest ignore file read (bytes); a bigger one is read up to this size.
const MAX_IGNORE_FILE: u64 = 1024 * 1024;

/// `.gitignore` / `.ignore` rules of the directories of a walk, read through the
/// [`Root`] (so they cannot be redirected either) and cached per directory. A path is
/// checked against the rules of its ancestors from the deepest up; the first rule set
/// with an opinion decides (`.ignore` before `.gitignore` in the same directory), as
/// git and ripgrep do. Global excludes are not read.
struct Ignores<'a> {
    root: &'a Root,
    cache: HashMap<PathBuf, Vec<Gitignore>>,
}

impl<'a> Ignores<'a> {
    fn new(root: &'a Root) -> Self {
        Ignores {
            root,
            cache: HashMap::new(),
        }
    }

    fn load(&mut self, dir: &Path) -> &Vec<Gitignore> {
        if !self.cache.contains_key(dir) {
            let mut sets = Vec::new();
            for name in [".ignore", ".gitignore"] {
                let rel = dir.join(name);
                let Ok(f) = self.root.open_read(&rel) else {
                    continue;
                };
                let mut text = String::new();
                if f.take(MAX_IGNORE_FILE).read_to_string(&mut text).is_err() {
                    continue;
                }
                let mut b = GitignoreBuilder::new(self.root.path().join(dir));
                for line in text.lines() {
                    let _ = b.add_line(None, line);
                }
                if let Ok(g) = b.build() {
                    sets.push(g);
                }
            }
            self.cache.insert(dir.to_path_buf(), sets);
        }
        &self.cache[dir]
    }

    /// Whether `rel` (relative to the root) is ignored.
    fn ignored(&mut self, rel: &Path, is_dir: bool) -> bool {
        let abs = self.root.path().join(rel);
        let mut dir = rel.parent().map(Path::to_path_buf);
        while let Some(d) = dir {
            let d_key = if d.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                d.clone()
            };
            for g in self.load(&d_key) {
                match g.matched(&abs, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            if d.as_os_str().is_empty() || d == Path::new(".") {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        false
    }
}

/// Walks below `start` (relative to `root`) like the old `ignore` walker did: hidden
/// files included, `.git` skipped, ignore rules applied, symlinks listed but never
/// followed. `visit` sees every kept entry.
fn walk(
    root: &Root,
    start: &Path,
    max_depth: Option<usize>,
    visit: &mut dyn FnMut(&WalkEntry<'_>) -> Visit,
) -> Result<(), beneath::Error> {
    let mut ignores = Ignores::new(root);
    root.walk(start, max_depth, &mut |e| {
        if e.entry.name == ".git" {
            return Visit::Skip;
        }
        if ignores.ignored(e.rel, e.entry.kind == Kind::Dir) {
            return Visit::Skip;
        }
        visit(e)
    })
}

fn interrupted(what: &str) -> Fail {
    Fail::Error(format!("{what} interrupted"))
}

fn target_dir_or_cwd(ctx: &ToolContext, raw: Option<&str>) -> Result<Target, Fail> {
    match raw {
        Some(p) if !p.trim().is_empty() => paths::target(ctx, p, Access::Read),
        _ => paths::target(ctx, ".", Access::Read),
    }
}

/// `list_files`: an indented tree, directories suffixed with `/`, sorted by name.
/// Symlinks are listed by name and never followed.
pub(crate) fn list_files(
    a: ListFilesArgs,
    ctx: &ToolContext,
    cancel: &Cancel,
) -> Result<ToolOutcome, Fail> {
    let t = target_dir_or_cwd(ctx, a.path.as_deref())?;
    let shown_root = a.path.clone().unwrap_or_else(|| ".".into());
    let st = t.root.stat(&t.rel).map_err(|e| t.fail("list", e))?;
    if st.kind != Kind::Dir {
        return Err(Fail::Error(format!(
            "`{shown_root}` is not a directory; use read_file to read a file"
        )));
    }
    let depth = match a.depth {
        Some(0) => return Err(Fail::Error("depth must be at least 1".into())),
        Some(d) => d.min(LIST_MAX_DEPTH),
        None => LIST_DEFAULT_DEPTH,
    };
    let mut out = format!("{}/\n", paths::display_rel(&paths::cwd(ctx), &t.abs));
    let mut count = 0usize;
    let mut truncated = false;
    let mut was_cancelled = false;
    walk(&t.root, &t.rel, Some(depth as usize), &mut |e| {
        if cancel.is_set() {
            was_cancelled = true;
            return Visit::Stop;
        }
        if count >= LIST_MAX_ENTRIES {
            truncated = true;
            return Visit::Stop;
        }
        count += 1;
        out.push_str(&"  ".repeat(e.depth));
        out.push_str(&e.entry.name.to_string_lossy());
        if e.entry.kind == Kind::Dir {
            out.push('/');
        }
        out.push('\n');
        Visit::Continue
    })
    .map_err(|e| t.fail("list", e))?;
    if was_cancelled {
        return Err(interrupted("list_files"));
    }
    if count == 0 {
        out.push_str("  (empty)\n");
    }
    if truncated {
        out.push_str(&format!(
            "[listing cut at {LIST_MAX_ENTRIES} entries; list a subdirectory or use a smaller depth]\n"
        ));
    }
    Ok(ToolOutcome::ok(
        out,
        json!({"entries": count, "truncated": truncated, "depth": depth}),
    ))
}

/// A glob filter for `grep`: patterns without `/` match the file name, others the path
/// relative to the search root (`*` does not cross `/`).
struct NameFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl NameFilter {
    fn new(pattern: &str) -> Result<Self, Fail> {
        let pattern = pattern.trim().trim_start_matches("./");
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| Fail::Error(format!("invalid glob `{pattern}`: {e}")))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            by_name: !pattern.contains('/'),
        })
    }

    fn matches(&self, root: &Path, path: &Path) -> bool {
        if self.by_name {
            path.file_name()
                .is_some_and(|n| self.matcher.is_match(Path::new(n)))
        } else {
            self.matcher
                .is_match(path.strip_prefix(root).unwrap_or(path))
        }
    }
}

fn cut_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max).collect();
    t.push_str(" …");
    t
}

/// `grep`: regex over text files; `path:line:text`, paths relative to the cwd.
/// Files are opened relative to their directory's descriptor without following
/// symlinks, so the search never reads outside the workspace.
pub(crate) fn grep(a: GrepArgs, ctx: &ToolContext, cancel: &Cancel) -> Result<ToolOutcome, Fail> {
    let re = regex::Regex::new(&a.pattern)
        .map_err(|e| Fail::Error(format!("invalid regex `{}`: {e}", a.pattern)))?;
    let t = target_dir_or_cwd(ctx, a.path.as_deref())?;
    let filter = a.glob.as_deref().map(NameFilter::new).transpose()?;
    let cwd = paths::cwd(ctx);
    let st = t.root.stat(&t.rel).map_err(|e| t.fail("search", e))?;
    let mut out = String::new();
    let mut matches = 0usize;
    let mut files_matched = 0usize;
    let mut truncated = false;
    let mut search_file = |f: std::fs::File, abs: &Path| -> bool {
        // Returns false when the match cap was reached.
        let mut r = BufReader::new(f);
        match r.fill_buf() {
            Ok(head) if looks_binary(&head[..head.len().min(BINARY_SNIFF_BYTES)]) => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
        let shown = paths::display_rel(&cwd, abs);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        let mut any = false;
        loop {
            buf.clear();
            match read_line_capped(&mut r, &mut buf, MAX_LINE_BYTES) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            line_no += 1;
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            if re.is_match(line) {
                if matches >= GREP_MAX_MATCHES {
                    truncated = true;
                    return false;
                }
                matches += 1;
                any = true;
                out.push_str(&format!(
                    "{shown}:{line_no}:{}\n",
                    cut_chars(line, GREP_MAX_LINE_CHARS)
                ));
            }
        }
        if any {
            files_matched += 1;
        }
        true
    };
    let mut was_cancelled = false;
    if st.kind == Kind::File {
        let f = t.root.open_read(&t.rel).map_err(|e| t.fail("search", e))?;
        search_file(f, &t.abs);
    } else {
        let start = t.root.path().join(&t.rel);
        walk(&t.root, &t.rel, None, &mut |e| {
            if cancel.is_set() {
                was_cancelled = true;
                return Visit::Stop;
            }
            if e.entry.kind != Kind::File {
                return Visit::Continue;
            }
            let abs = t.root.path().join(e.rel);
            if let Some(f) = &filter {
                if !f.matches(&start, &abs) {
                    return Visit::Continue;
                }
            }
            let Ok(file) = e.open_file() else {
                return Visit::Continue;
            };
            if search_file(file, &abs) {
                Visit::Continue
            } else {
                Visit::Stop
            }
        })
        .map_err(|e| t.fail("search", e))?;
    }
    if was_cancelled {
        return Err(interrupted("grep"));
    }
    if matches == 0 {
        out.push_str("No matches found.\n");
    }
    if truncated {
        out.push_str(&format!(
            "[stopped after {GREP_MAX_MATCHES} matches; narrow the pattern, path or glob]\n"
        ));
    }
    Ok(ToolOutcome::ok(
        out,
        json!({"matches": matches, "files": files_matched, "truncated": truncated}),
    ))
}

fn has_meta(component: &str) -> bool {
    component.contains(['*', '?', '[', '{'])
}

/// `glob`: files whose cwd-relative path matches; newest first (mtime desc, then path).
pub(crate) fn glob(a: GlobArgs, ctx: &ToolContext, cancel: &Cancel) -> Result<ToolOutcome, Fail> {
    let cwd = paths::cwd(ctx);
    let mut pattern = a.pattern.trim().to_string();
    if pattern.is_empty() {
        return Err(Fail::Error("pattern must not be empty".into()));
    }
    if pattern.starts_with('/') {
        match Path::new(&pattern).strip_prefix(&cwd) {
            Ok(rel) => pattern = rel.to_string_lossy().into_owned(),
            Err(_) => {
                return Err(Fail::Error(format!(
                    "pattern must be relative to the current directory {}",
                    cwd.display()
                )))
            }
        }
    }
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest.to_string();
    }
    if pattern.split('/').any(|c| c == "..") {
        return Err(Fail::Error(
            "pattern must not contain `..`; it is matched below the current directory".into(),
        ));
    }
    let matcher = GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| Fail::Error(format!("invalid glob `{pattern}`: {e}")))?
        .compile_matcher();
    // Walk only below the literal prefix, and only as deep as the pattern reaches.
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let literal = comps.iter().take_while(|c| !has_meta(c)).count();
    let literal = literal.min(comps.len().saturating_sub(1));
    let base = comps[..literal].iter().fold(cwd.clone(), |p, c| p.join(c));
    let max_depth = if pattern.contains("**") {
        None
    } else {
        Some(comps.len() - literal)
    };
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    // Stay inside the workspace in confined modes.
    let t = paths::target_of(
        ctx,
        &crate::beneath::normalize(&base),
        &base.to_string_lossy(),
    )?;
    if t.root.stat(&t.rel).is_ok_and(|st| st.kind == Kind::Dir) {
        let mut was_cancelled = false;
        walk(&t.root, &t.rel, max_depth, &mut |e| {
            if cancel.is_set() {
                was_cancelled = true;
                return Visit::Stop;
            }
            if e.entry.kind != Kind::File {
                return Visit::Continue;
            }
            let abs = t.root.path().join(e.rel);
            let rel = abs.strip_prefix(&cwd).unwrap_or(&abs);
            if matcher.is_match(rel) {
                let mtime = e
                    .stat()
                    .map(|st| st.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((mtime, rel.to_string_lossy().into_owned()));
            }
            Visit::Continue
        })
        .map_err(|e| t.fail("search", e))?;
        if was_cancelled {
            return Err(interrupted("glob"));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let truncated = total > GLOB_MAX_RESULTS;
    let mut out = String::new();
    for (_, p) in found.iter().take(GLOB_MAX_RESULTS) {
        out.push_str(p);
        out.push('\n');
    }
    if total == 0 {
        out.push_str("No files matched.\n");
    }
    if truncated {
        out.push_str(&format!(
            "[showing {GLOB_MAX_RESULTS} of {total} files; use a more specific pattern]\n"
        ));
    }
    Ok(ToolOutcome::ok(
        out,
        json!({"count": total, "truncated": truncated}),
    ))
}
