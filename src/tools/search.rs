//! `list_files`, `grep`, `glob`: walks that respect `.gitignore` (also outside git
//! repositories), include hidden files, and never descend into `.git`.

use super::args::{GlobArgs, GrepArgs, ListFilesArgs};
use super::files::{looks_binary, read_line_capped, BINARY_SNIFF_BYTES, MAX_LINE_BYTES};
use super::paths::{self, Access};
use super::{Cancel, Fail, ToolContext, ToolOutcome};
use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, WalkBuilder};
use serde_json::json;
use std::fs;
use std::io::{BufRead, BufReader};
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

fn walker(root: &Path, max_depth: Option<usize>) -> WalkBuilder {
    let mut b = WalkBuilder::new(root);
    b.hidden(false)
        .require_git(false)
        .max_depth(max_depth)
        .filter_entry(|e| e.file_name() != ".git")
        .sort_by_file_name(|a, b| a.cmp(b));
    b
}

fn interrupted(what: &str) -> Fail {
    Fail::Error(format!("{what} interrupted"))
}

fn resolve_dir_or_cwd(ctx: &ToolContext, raw: Option<&str>) -> Result<PathBuf, Fail> {
    match raw {
        Some(p) if !p.trim().is_empty() => paths::resolve(ctx, p, Access::Read),
        _ => paths::resolve(ctx, ".", Access::Read),
    }
}

/// `list_files`: an indented tree, directories suffixed with `/`, sorted by name.
pub(crate) fn list_files(
    a: ListFilesArgs,
    ctx: &ToolContext,
    cancel: &Cancel,
) -> Result<ToolOutcome, Fail> {
    let root = resolve_dir_or_cwd(ctx, a.path.as_deref())?;
    let shown_root = a.path.clone().unwrap_or_else(|| ".".into());
    let meta =
        fs::metadata(&root).map_err(|e| Fail::Error(format!("cannot list `{shown_root}`: {e}")))?;
    if !meta.is_dir() {
        return Err(Fail::Error(format!(
            "`{shown_root}` is not a directory; use read_file to read a file"
        )));
    }
    let depth = match a.depth {
        Some(0) => return Err(Fail::Error("depth must be at least 1".into())),
        Some(d) => d.min(LIST_MAX_DEPTH),
        None => LIST_DEFAULT_DEPTH,
    };
    let mut out = format!("{}/\n", paths::display_rel(&paths::cwd(ctx), &root));
    let mut count = 0usize;
    let mut truncated = false;
    for entry in walker(&root, Some(depth as usize)).build() {
        if cancel.is_set() {
            return Err(interrupted("list_files"));
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        if count >= LIST_MAX_ENTRIES {
            truncated = true;
            break;
        }
        count += 1;
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        out.push_str(&"  ".repeat(entry.depth()));
        out.push_str(&entry.file_name().to_string_lossy());
        if is_dir {
            out.push('/');
        }
        out.push('\n');
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
pub(crate) fn grep(a: GrepArgs, ctx: &ToolContext, cancel: &Cancel) -> Result<ToolOutcome, Fail> {
    let re = regex::Regex::new(&a.pattern)
        .map_err(|e| Fail::Error(format!("invalid regex `{}`: {e}", a.pattern)))?;
    let root = resolve_dir_or_cwd(ctx, a.path.as_deref())?;
    let filter = a.glob.as_deref().map(NameFilter::new).transpose()?;
    let cwd = paths::cwd(ctx);
    let meta = fs::metadata(&root).map_err(|e| {
        Fail::Error(format!(
            "cannot search `{}`: {e}",
            a.path.as_deref().unwrap_or(".")
        ))
    })?;
    let mut out = String::new();
    let mut matches = 0usize;
    let mut files_matched = 0usize;
    let mut truncated = false;
    let mut search_file = |path: &Path| -> bool {
        // Returns false when the match cap was reached.
        let Ok(f) = fs::File::open(path) else {
            return true;
        };
        let mut r = BufReader::new(f);
        match r.fill_buf() {
            Ok(head) if looks_binary(&head[..head.len().min(BINARY_SNIFF_BYTES)]) => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
        let shown = paths::display_rel(&cwd, path);
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
    if meta.is_file() {
        search_file(&root);
    } else {
        for entry in walker(&root, None).build() {
            if cancel.is_set() {
                return Err(interrupted("grep"));
            }
            let Ok(entry) = entry else { continue };
            if !is_file(&entry) {
                continue;
            }
            if let Some(f) = &filter {
                if !f.matches(&root, entry.path()) {
                    continue;
                }
            }
            if !search_file(entry.path()) {
                break;
            }
        }
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

fn is_file(entry: &DirEntry) -> bool {
    entry.file_type().is_some_and(|t| t.is_file())
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
    if base.is_dir() {
        // Stay inside the workspace in confined modes.
        paths::resolve(ctx, &base.to_string_lossy(), Access::Read)?;
        for entry in walker(&base, max_depth).build() {
            if cancel.is_set() {
                return Err(interrupted("glob"));
            }
            let Ok(entry) = entry else { continue };
            if !is_file(&entry) {
                continue;
            }
            let rel = entry.path().strip_prefix(&cwd).unwrap_or(entry.path());
            if matcher.is_match(rel) {
                let mtime = entry
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((mtime, rel.to_string_lossy().into_owned()));
            }
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
