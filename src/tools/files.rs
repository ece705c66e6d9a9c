//! `read_file`, `write_file`, `edit_file`.

use super::args::{EditFileArgs, ReadFileArgs, WriteFileArgs};
use super::paths::{self, Access, Target};
use super::revision::{self, sha256_hex, sha_opt};
use super::{Fail, ToolContext, ToolOutcome};
use serde_json::json;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

/// Default number of lines `read_file` returns.
pub(crate) const READ_DEFAULT_LIMIT: u64 = 2000;
/// Longest line (in chars) `read_file` shows before cutting it.
pub(crate) const READ_MAX_LINE_CHARS: usize = 2000;
/// Total bytes of text `read_file` returns before stopping early.
pub(crate) const READ_MAX_BYTES: usize = 256 * 1024;
/// Bytes sniffed for a NUL byte to decide that a file is binary.
pub(crate) const BINARY_SNIFF_BYTES: usize = 8192;

/// Bytes of one line kept in memory by `read_file` and `grep` (the rest of a longer
/// line is skipped).
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;

/// Reads one line (through `\n`) into `buf`, keeping at most `max` bytes of it and
/// skipping the rest. Returns the bytes consumed (0 at end of file).
pub(crate) fn read_line_capped<R: BufRead>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    let mut consumed = 0;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(consumed);
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        r.consume(take);
        consumed += take;
        if done {
            return Ok(consumed);
        }
    }
}

/// Whether the first bytes of a file look binary (contain a NUL byte).
pub(crate) fn looks_binary(head: &[u8]) -> bool {
    head.contains(&0)
}

fn io_err(what: &str, shown: &str, e: &io::Error) -> Fail {
    let hint = match e.kind() {
        io::ErrorKind::NotFound => " (no such file)",
        io::ErrorKind::PermissionDenied => " (the OS denied access)",
        _ => "",
    };
    Fail::Error(format!("cannot {what} `{shown}`: {e}{hint}"))
}

fn is_dir_error(e: &crate::beneath::Error) -> bool {
    e.kind() == io::ErrorKind::IsADirectory
}

/// `read_file`: numbered lines (`{:>6}\t{text}`), 1-based `offset`, `limit` lines.
pub(crate) fn read_file(a: ReadFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, Fail> {
    let t = paths::target(ctx, &a.path, Access::Read)?;
    let file = match t.root.open_read(&t.rel) {
        Ok(f) => f,
        Err(e) if is_dir_error(&e) => {
            return Err(Fail::Error(format!(
                "`{}` is a directory; use list_files to see its contents",
                a.path
            )))
        }
        Err(e) => return Err(t.fail("read", e)),
    };
    let meta = file.metadata().map_err(|e| io_err("read", &a.path, &e))?;
    let path = t.abs.clone();
    let offset = a.offset.unwrap_or(1).max(1);
    let limit = match a.limit {
        Some(0) => return Err(Fail::Error("limit must be at least 1".into())),
        Some(n) => n,
        None => READ_DEFAULT_LIMIT,
    };
    let mut reader = BufReader::new(file);
    {
        let head = reader.fill_buf().map_err(|e| io_err("read", &a.path, &e))?;
        let sniff = &head[..head.len().min(BINARY_SNIFF_BYTES)];
        if looks_binary(sniff) {
            return Err(Fail::Error(format!(
                "`{}` looks like a binary file ({} bytes); read_file only shows text",
                a.path,
                meta.len()
            )));
        }
    }
    let mut out = String::new();
    let mut line_no: u64 = 0;
    let mut shown: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut cut_lines = 0u64;
    let mut lossy = false;
    let mut byte_capped = false;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = read_line_capped(&mut reader, &mut buf, MAX_LINE_BYTES)
            .map_err(|e| io_err("read", &a.path, &e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line_no < offset || shown >= limit || byte_capped {
            continue;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        let text = if buf.len() >= MAX_LINE_BYTES {
            String::from_utf8_lossy(super::shell::trim_incomplete_end(&buf))
        } else {
            String::from_utf8_lossy(&buf)
        };
        if matches!(text, std::borrow::Cow::Owned(_)) {
            lossy = true;
        }
        let mut text = text.into_owned();
        if text.chars().count() > READ_MAX_LINE_CHARS {
            text = text.chars().take(READ_MAX_LINE_CHARS).collect();
            text.push_str(" … [line cut]");
            cut_lines += 1;
        }
        let rendered = format!("{line_no:>6}\t{text}\n");
        if out.len() + rendered.len() > READ_MAX_BYTES && shown > 0 {
            byte_capped = true;
            continue;
        }
        out.push_str(&rendered);
        shown += 1;
        last_shown = line_no;
    }
    let total = line_no;
    if total == 0 {
        out.push_str("(empty file)\n");
    } else if offset > total {
        return Err(Fail::Error(format!(
            "offset {offset} is past the end of `{}` ({total} lines)",
            a.path
        )));
    }
    let mut notes = Vec::new();
    if last_shown < total && total > 0 {
        notes.push(format!(
            "showing lines {offset}-{last_shown} of {total}; use offset={} to read more",
            last_shown + 1
        ));
    }
    if cut_lines > 0 {
        notes.push(format!(
            "{cut_lines} line(s) longer than {READ_MAX_LINE_CHARS} chars were cut"
        ));
    }
    if lossy {
        notes.push("invalid UTF-8 bytes were replaced with U+FFFD".into());
    }
    for n in &notes {
        out.push_str(&format!("[{n}]\n"));
    }
    Ok(ToolOutcome::ok(
        out,
        json!({
            "path": paths::display(ctx, &path),
            "total_lines": total,
            "first_line": if shown > 0 { offset } else { 0 },
            "last_line": last_shown,
            "lossy_utf8": lossy,
        }),
    ))
}

/// Reads the current bytes of `t` (None when it, or a directory on its path, does not
/// exist; a dangling symlink counts as absent). Errors on directories, escapes and
/// unreadable files.
pub(crate) fn read_existing(t: &Target) -> Result<Option<Vec<u8>>, Fail> {
    let mut f = match t.root.open_read(&t.rel) {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) if is_dir_error(&e) => {
            return Err(Fail::Error(format!("`{}` is a directory", t.shown)))
        }
        Err(e) => return Err(t.fail("read", e)),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| io_err("read", &t.shown, &e))?;
    Ok(Some(bytes))
}

/// Replaces `t` with `bytes` atomically (temporary file + rename in its directory),
/// creating parent directories. A hard-linked name is replaced, its other names keep
/// their content.
pub(crate) fn write_bytes(t: &Target, bytes: &[u8]) -> Result<(), Fail> {
    t.root
        .write_atomic(&t.rel, bytes, true)
        .map_err(|e| t.fail("write", e))
}

/// Builds the `detail` of a single-file change and records it in the revision.
fn file_detail(
    ctx: &ToolContext,
    path: &Path,
    action: &str,
    old: Option<&[u8]>,
    new: &[u8],
) -> serde_json::Value {
    let new_sha = sha256_hex(new);
    let (added, removed) = super::diffstat::line_counts(old, Some(new));
    let rev = revision::record(
        &paths::workspace_root(ctx),
        &[(path.to_path_buf(), new_sha.clone())],
    );
    json!({
        "path": paths::display(ctx, path),
        "action": action,
        "old_file_sha": sha_opt(old),
        "new_file_sha": new_sha,
        "workspace_revision": rev,
        "lines_added": added,
        "lines_removed": removed,
    })
}

/// `write_file`: creates or replaces a file (parents created).
pub(crate) fn write_file(a: WriteFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, Fail> {
    let t = paths::target(ctx, &a.path, Access::Write)?;
    let path = t.abs.clone();
    let _guard = revision::write_lock();
    let old = read_existing(&t)?;
    write_bytes(&t, a.content.as_bytes())?;
    let action = if old.is_some() { "modified" } else { "created" };
    let detail = file_detail(ctx, &path, action, old.as_deref(), a.content.as_bytes());
    let lines = a.content.lines().count();
    Ok(ToolOutcome::ok(
        format!(
            "Wrote {} bytes ({lines} lines) to {} ({action}).",
            a.content.len(),
            paths::display(ctx, &path)
        ),
        detail,
    ))
}

/// `edit_file`: exact string replacement.
pub(crate) fn edit_file(a: EditFileArgs, ctx: &ToolContext) -> Result<ToolOutcome, Fail> {
    let t = paths::target(ctx, &a.path, Access::Write)?;
    let path = t.abs.clone();
    if a.old_string.is_empty() {
        return Err(Fail::Error(
            "old_string must not be empty; use write_file to create or replace a whole file".into(),
        ));
    }
    if a.old_string == a.new_string {
        return Err(Fail::Error(
            "old_string and new_string are identical; nothing to change".into(),
        ));
    }
    let _guard = revision::write_lock();
    let Some(old_bytes) = read_existing(&t)? else {
        return Err(Fail::Error(format!(
            "cannot edit `{}`: no such file (use write_file to create it)",
            a.path
        )));
    };
    let Ok(text) = std::str::from_utf8(&old_bytes) else {
        return Err(Fail::Error(format!(
            "cannot edit `{}`: it is not valid UTF-8 text",
            a.path
        )));
    };
    let count = text.matches(a.old_string.as_str()).count();
    if count == 0 {
        let hint = if text.contains(a.old_string.trim()) && !a.old_string.trim().is_empty() {
            " (it matches when leading/trailing whitespace is trimmed: check indentation and newlines)"
        } else {
            " (read the file again: the text must match exactly, including whitespace)"
        };
        return Err(Fail::Error(format!(
            "old_string was not found in `{}`{hint}",
            a.path
        )));
    }
    if count > 1 && !a.replace_all {
        return Err(Fail::Error(format!(
            "old_string occurs {count} times in `{}`; add surrounding context to make it unique, or set replace_all to true",
            a.path
        )));
    }
    let new_text = if a.replace_all {
        text.replace(a.old_string.as_str(), &a.new_string)
    } else {
        text.replacen(a.old_string.as_str(), &a.new_string, 1)
    };
    write_bytes(&t, new_text.as_bytes())?;
    let detail = file_detail(
        ctx,
        &path,
        "modified",
        Some(&old_bytes),
        new_text.as_bytes(),
    );
    Ok(ToolOutcome::ok(
        format!(
            "Edited {}: replaced {count} occurrence{}.",
            paths::display(ctx, &path),
            if count == 1 { "" } else { "s" }
        ),
        detail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_line_capped_skips_the_rest_of_long_lines() {
        let data = b"abcdefgh\nxy\nlast";
        let mut r = BufReader::with_capacity(3, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut r, &mut buf, 4).unwrap(), 9);
        assert_eq!(buf, b"abcd");
        buf.clear();
        assert_eq!(read_line_capped(&mut r, &mut buf, 4).unwrap(), 3);
        assert_eq!(buf, b"xy\n");
        buf.clear();
        assert_eq!(read_line_capped(&mut r, &mut buf, 4).unwrap(), 4);
        assert_eq!(buf, b"last");
        buf.clear();
        assert_eq!(read_line_capped(&mut r, &mut buf, 4).unwrap(), 0);
    }
}
