//! The file views: `workspace/directory/list`, `workspace/file/read` (text preview or
//! data URL), `workspace/file/chunk` (base64 download in versioned chunks) and
//! `workspace/file/resolve` (a reference in the conversation to a workspace file), spec
//! `app-server.md`, workspace/*. Every access goes through [`super::fence`].

use super::fence::{carries_secret, io_refusal, relative, View};
use super::{
    err, invalid, Refusal, CHUNK_BYTES, CHUNK_FILE_MAX, DIRECTORY_ENTRIES, MEDIA_BYTES,
    PREVIEW_BYTES, REFERENCE_VISITS,
};
use crate::beneath::{self, Kind};
use crate::session::Host;
use base64::Engine as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use wuu_protocol::*;

pub(super) fn slash(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}

fn ignored(name: &str, directory: bool) -> bool {
    name == ".DS_Store"
        || (directory
            && matches!(
                name,
                ".git"
                    | ".next"
                    | ".turbo"
                    | ".vite"
                    | "coverage"
                    | "dist"
                    | "node_modules"
                    | "out"
                    | "target"
            ))
}

/// Media type from the first bytes (the types the renderer can show, else text or
/// octet-stream).
fn sniff(head: &[u8]) -> &'static str {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if head.starts_with(b"\xff\xd8\xff") {
        "image/jpeg"
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        "image/gif"
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        "image/webp"
    } else if head.starts_with(b"%PDF-") {
        "application/pdf"
    } else if !head.contains(&0) && std::str::from_utf8(head).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

pub(super) fn list_directory(
    shared: &Host,
    p: &WorkspaceViewParams,
) -> Result<DirectoryListResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), true)?;
    let entries = view.ws.read_dir(&view.rel(&rel)).map_err(io_refusal)?;
    let truncated = entries.len() > DIRECTORY_ENTRIES;
    let mut out: Vec<WorkspaceFileEntry> = entries
        .iter()
        .take(DIRECTORY_ENTRIES)
        .filter_map(|e| {
            // A name that is not UTF-8 could not be sent back to open it: skipped.
            let name = e.name.to_str()?.to_owned();
            let dir = e.kind == Kind::Dir;
            if ignored(&name, dir) || e.kind == Kind::Other {
                return None;
            }
            let mut path = slash(&rel.join(&name));
            if dir {
                path.push('/');
            }
            Some(WorkspaceFileEntry {
                name,
                path,
                // A symlink is reported as such and never followed (the Go server
                // lists it as "file", which hid links to directories).
                kind: match e.kind {
                    Kind::Dir => "directory",
                    Kind::Symlink => "symlink",
                    _ => "file",
                }
                .into(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.kind != "directory", &a.name).cmp(&(b.kind != "directory", &b.name)));
    Ok(DirectoryListResult {
        root: view.shown.to_string_lossy().into_owned(),
        path: slash(&rel),
        entries: out,
        truncated,
    })
}

fn mtime_ms(m: &std::fs::Metadata) -> f64 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as f64 / 1e6)
        .unwrap_or(0.0)
}

pub(super) fn preview(view: &View, rel: &Path) -> Result<FileReadResult, Refusal> {
    let mut f = view.ws.open_read(&view.rel(rel)).map_err(io_refusal)?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    let mut data = Vec::new();
    (&mut f)
        .take(MEDIA_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| err(e.to_string()))?;
    let cut = data.len().min(PREVIEW_BYTES);
    let shown = &data[..cut];
    let binary = shown.contains(&0);
    let mime = sniff(&data[..data.len().min(512)]);
    let kind = match mime {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" => Some("image"),
        "application/pdf" => Some("pdf"),
        _ => None,
    };
    let renderable = kind.is_some() && data.len() <= MEDIA_BYTES;
    // The redactor cannot see into base64: a file carrying a secret gets no data URL.
    let withheld = (renderable && crate::secrets::contains_secret(&data)).then(|| {
        format!(
            "`{}` contains a configured secret; it is not rendered (a data URL would carry it unmasked)",
            slash(rel)
        )
    });
    let url = (renderable && withheld.is_none()).then(|| {
        format!(
            "data:{mime};base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&data)
        )
    });
    use sha2::Digest;
    Ok(FileReadResult {
        root: view.shown.to_string_lossy().into_owned(),
        path: slash(rel),
        absolute_path: view.shown.join(rel).to_string_lossy().into_owned(),
        size_bytes: meta.len(),
        mtime_ms: mtime_ms(&meta),
        sha256: sha2::Sha256::digest(shown)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        binary,
        truncated: data.len() > PREVIEW_BYTES,
        text: (!binary).then(|| String::from_utf8_lossy(shown).into_owned()),
        renderable_url: url,
        renderable_kind: kind.map(str::to_owned),
        renderable_withheld: withheld,
    })
}

pub(super) fn read_file(shared: &Host, p: &WorkspaceViewParams) -> Result<FileReadResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), false)?;
    preview(&view, &rel)
}

fn version_of(m: &std::fs::Metadata) -> String {
    let ns = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{ns}:{}", m.len())
}

pub(super) fn read_chunk(
    shared: &Host,
    p: &WorkspaceViewParams,
) -> Result<FileChunkResult, Refusal> {
    use std::os::unix::fs::FileExt;
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), false)?;
    let f = view.ws.open_read(&view.rel(&rel)).map_err(io_refusal)?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if meta.len() > CHUNK_FILE_MAX {
        return Err(err("file must be regular and at most 64 MB"));
    }
    let version = version_of(&meta);
    let offset = p.offset.unwrap_or(0);
    let asked = p.version.as_deref().unwrap_or("");
    if offset < 0 || offset as u64 > meta.len() || (offset > 0 && asked.is_empty()) {
        return Err(invalid("invalid file offset or missing version"));
    }
    if !asked.is_empty() && asked != version {
        return Err(err("file changed; restart the download"));
    }
    let mut head = [0u8; 512];
    let n = f.read_at(&mut head, 0).unwrap_or(0);
    let mime = sniff(&head[..n]);
    let want = CHUNK_BYTES.min((meta.len() - offset as u64) as usize);
    let mut data = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match f.read_at(&mut data[got..], offset as u64 + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) => return Err(err(e.to_string())),
        }
    }
    let after = f.metadata().map_err(|e| err(e.to_string()))?;
    if version_of(&after) != version || got != want {
        return Err(err("file changed; restart the download"));
    }
    if carries_secret(&f, &data, offset as u64, meta.len()) {
        return Err(err(format!(
            "`{}` contains a configured secret; workspace/file/chunk does not serve it (base64 would carry it unmasked; workspace/file/read shows its text masked)",
            slash(&rel)
        )));
    }
    Ok(FileChunkResult {
        data: base64::engine::general_purpose::STANDARD.encode(&data),
        offset: offset as u64,
        size: meta.len(),
        version,
        mime: mime.split(';').next().unwrap_or(mime).to_owned(),
    })
}

pub(super) fn resolve(
    shared: &Host,
    p: &WorkspaceViewParams,
) -> Result<FileResolveResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let reference = p.reference.clone().unwrap_or_default();
    let mut result = FileResolveResult {
        root: view.shown.to_string_lossy().into_owned(),
        reference: reference.clone(),
        status: "invalid".into(),
        ..Default::default()
    };
    let mut path = reference.trim().to_owned();
    for (a, b) in [("`", "`"), ("<", ">"), ("\"", "\""), ("'", "'")] {
        if path.len() >= 2 && path.starts_with(a) && path.ends_with(b) {
            path = path[a.len()..path.len() - b.len()].trim().to_owned();
            break;
        }
    }
    static SUFFIX: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let suffix = SUFFIX.get_or_init(|| {
        regex::Regex::new(r"(?i)(:\d+(?:[-:–—]\d+)?|\s+\((?:line|lines)\s+\d+(?:[-:–—]\d+)?\))$")
            .expect("regex")
    });
    let mut path = suffix.replace(&path, "").replace('\\', "/");
    if path.is_empty() || path.contains('\0') || path.contains("://") {
        return Ok(result);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            path = Path::new(&home).join(rest).to_string_lossy().into_owned();
        }
    }
    let qualified = path.contains('/');
    if Path::new(&path).is_absolute() {
        match beneath::rel_beneath(&view.shown, Path::new(&path)) {
            Some(r) => path = slash(&r),
            None => return Ok(result),
        }
    }
    let Ok(rel) = relative(Some(&path), false) else {
        return Ok(result);
    };
    result.status = "missing".into();
    let regular = |r: &Path| {
        view.ws
            .stat(&view.rel(r))
            .is_ok_and(|s| s.kind == Kind::File)
    };
    let found = |result: &mut FileResolveResult, r: &Path| {
        result.status = "resolved".into();
        result.path = Some(slash(r));
        result.absolute_path = Some(view.shown.join(r).to_string_lossy().into_owned());
    };
    if qualified {
        if regular(&rel) {
            found(&mut result, &rel);
        }
        return Ok(result);
    }
    let name = slash(&rel);
    let mut matches: Vec<PathBuf> = vec![];
    let mut visits = 0usize;
    let mut truncated = false;
    let _ = view.ws.walk(&view.prefix, None, &mut |e| {
        visits += 1;
        if visits > REFERENCE_VISITS {
            truncated = true;
            return beneath::Visit::Stop;
        }
        let n = e.entry.name.to_string_lossy();
        let dir = e.entry.kind == Kind::Dir;
        if ignored(&n, dir) {
            return beneath::Visit::Skip;
        }
        if e.entry.kind == Kind::File && n == name.as_str() {
            let r = e
                .rel
                .strip_prefix(&view.prefix)
                .unwrap_or(e.rel)
                .to_path_buf();
            matches.push(r);
            if matches.len() > 1 {
                return beneath::Visit::Stop;
            }
        }
        beneath::Visit::Continue
    });
    if matches.len() > 1 || truncated {
        result.status = "ambiguous".into();
        result.matches = matches.iter().map(|m| slash(m)).collect();
    } else if let Some(m) = matches.first() {
        found(&mut result, m);
    }
    Ok(result)
}
