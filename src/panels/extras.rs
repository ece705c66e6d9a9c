//! The clients' remaining calls (wire types in `wuu_protocol::extras`, spec
//! `app-server.md` §3.1, §3.6, §3.7): `thread/textSnapshot` (the text-only copy of a
//! stored conversation the desktop's history sync uploads), `config/codex/credentials`
//! (whether a Codex login exists for the Codex engine; never the credential), and the
//! legacy or remote-only methods, which answer the error the Go server answers.

use crate::outbound::Responder;
use crate::session::Host;
use std::sync::Arc;
use wuu_protocol::*;

/// `thread/textSnapshot`: user and agent message text of a stored conversation.
/// Errors: `thread_not_found` (unknown or ephemeral), store errors.
pub fn text_snapshot(shared: &Arc<Host>, p: TextSnapshotParams, reply: Responder) {
    let id = p.thread_id.trim();
    if id.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: thread_id is required",
        );
    }
    if let Err(m) = crate::util::check_thread_id("thread_id", id) {
        return reply.err(ErrorCode::InvalidParams, m);
    }
    let store = match shared.connections.take() {
        Ok(s) => s,
        Err(e) => {
            let (c, m) = crate::session::host::store_error(shared, &e);
            return reply.err(c, m);
        }
    };
    let thread = match store.get_thread(id) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return reply.err(
                ErrorCode::ThreadNotFound,
                format!("thread not found: {id} (conversation unavailable)"),
            )
        }
        Err(e) => {
            let (c, m) = crate::session::host::store_error(shared, &e);
            return reply.err(c, m);
        }
    };
    let history = match store.load_history(id) {
        Ok(h) => h,
        Err(e) => {
            let (c, m) = crate::session::host::store_error(shared, &e);
            return reply.err(c, m);
        }
    };
    drop(store);
    let running = history
        .last()
        .is_some_and(|t| t.turn.status == "in_progress");
    let mut messages = vec![];
    for t in &history {
        for item in &t.items {
            let role = match item.item_type.as_str() {
                "user_message" => "user",
                "agent_message" => "assistant",
                _ => continue,
            };
            let Some(text) = item.body.get("text").and_then(|v| v.as_str()) else {
                continue;
            };
            if text.is_empty() {
                continue;
            }
            messages.push(TextSnapshotMessage {
                id: item.id.clone(),
                turn_id: t.turn.id.clone(),
                role: role.into(),
                text: text.to_owned(),
            });
        }
    }
    reply.ok(&TextSnapshotResult {
        id: thread.id,
        title: thread.title.unwrap_or_default(),
        updated_at: crate::util::rfc3339(thread.updated_at_ms),
        status: Some(if running { "running" } else { "idle" }.into()),
        messages,
    })
}

/// `config/codex/credentials`: looks for `$CODEX_HOME/auth.json` (else
/// `~/.codex/auth.json`), then `OPENAI_API_KEY` / `CODEX_API_KEY` in the environment.
/// Reads only the login file's `auth_mode` / key names to tell the mode; the secret
/// values never leave this function.
pub fn codex_credentials(_shared: &Arc<Host>, reply: Responder) {
    reply.ok(&codex_credentials_now())
}

fn codex_credentials_now() -> CodexCredentialsResult {
    let dir = match std::env::var_os("CODEX_HOME").filter(|d| !d.is_empty()) {
        Some(d) => Some(std::path::PathBuf::from(d)),
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| std::path::PathBuf::from(h).join(".codex")),
    };
    if let Some(path) = dir.map(|d| d.join("auth.json")) {
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.is_file() && meta.len() > 0 && meta.len() < 1024 * 1024 {
                let parsed = std::fs::read(&path)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
                let mode = parsed.as_ref().and_then(|v| {
                    if v.get("tokens").is_some_and(|t| t.is_object()) {
                        Some("chatgpt".to_owned())
                    } else if v
                        .get("OPENAI_API_KEY")
                        .and_then(|k| k.as_str())
                        .is_some_and(|k| !k.is_empty())
                    {
                        Some("api_key".to_owned())
                    } else {
                        None
                    }
                });
                return CodexCredentialsResult {
                    available: true,
                    reusable: mode.is_some(),
                    source: Some("auth_file".into()),
                    auth_mode: mode,
                    path: Some(path.to_string_lossy().into_owned()),
                };
            }
        }
    }
    let env_key = ["OPENAI_API_KEY", "CODEX_API_KEY"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
    if env_key {
        return CodexCredentialsResult {
            available: true,
            reusable: true,
            source: Some("env".into()),
            auth_mode: Some("api_key".into()),
            path: None,
        };
    }
    CodexCredentialsResult::default()
}

/// The error a legacy or remote-only method answers (the newest Go server's text).
pub fn legacy(req: &ClientRequest) -> String {
    match req {
        ClientRequest::ThreadControlTake(_) => {
            "project takeover is no longer supported; send a message or stop the current turn instead".into()
        }
        ClientRequest::ThreadControlReturn(_) => {
            "returning project control is no longer supported; project membership remains active after user intervention".into()
        }
        ClientRequest::DevicePushRegister(_) | ClientRequest::DevicePushUnregister(_) => {
            "device push registration is only available from a remote device session".into()
        }
        ClientRequest::ProjectWork(p) => {
            let op = p.0.get("operation").and_then(|v| v.as_str()).unwrap_or("");
            match op {
                "list" | "get" | "stop" | "resume" => {
                    "project not found: this server has no projects (project work is managed by the desktop's project host)".into()
                }
                _ => "desktop work control supports list, get, stop and resume".into(),
            }
        }
        ClientRequest::ProjectSession(_) => {
            "project not found: this server has no projects (project sessions are managed by the desktop's project host)".into()
        }
        other => format!("{} is not a legacy method", other.method()),
    }
}

/// Largest image `message/image/read` serves, bytes.
pub const MESSAGE_IMAGE_MAX_BYTES: u64 = 12 * 1024 * 1024;

/// Image destinations of the Markdown images (`![alt](dest)`, `![alt](<dest>)`) in
/// `body`, outside code spans and fenced blocks; at most 8, each at most 4096 bytes.
pub fn markdown_image_sources(body: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    if body.len() > 128 * 1024 || !body.contains("![") {
        return out;
    }
    let mut in_fence = false;
    for line in body.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code spans.
        let mut plain = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("![") {
            rest = rest.get(i + 2..).unwrap_or("");
            let Some(close) = rest.find("](") else { break };
            let after = rest.get(close + 2..).unwrap_or("");
            let (dest, tail) = if let Some(a) = after.strip_prefix('<') {
                match a.find('>') {
                    Some(e) => (a.get(..e).unwrap_or(""), a.get(e + 1..).unwrap_or("")),
                    None => break,
                }
            } else {
                let end = after
                    .find(|c: char| c == ')' || c.is_whitespace())
                    .unwrap_or(after.len());
                (
                    after.get(..end).unwrap_or(""),
                    after.get(end..).unwrap_or(""),
                )
            };
            if !dest.is_empty() && dest.len() <= 4096 && !out.iter().any(|d| d == dest) {
                out.push(dest.to_owned());
                if out.len() == 8 {
                    return out;
                }
            }
            rest = tail;
        }
    }
    out
}

/// The media type of an image destination by its extension (`""` for remote URLs and
/// other files).
fn image_media(source: &str) -> &'static str {
    let path = match source.split_once("://") {
        Some(("file", rest)) => rest.strip_prefix("localhost").unwrap_or(rest),
        Some(_) => return "",
        None => source,
    };
    let ext = path.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "",
    }
}

fn sniff(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        "image/jpeg"
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        "image/gif"
    } else if bytes.len() > 12 && bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        "image/webp"
    } else {
        ""
    }
}

/// `message/image/read`: a chunk (or a preview) of an image embedded in a stored agent
/// message. The `source` must be one of that message's Markdown image destinations (so a
/// reference grants access to what the message shows, never to an arbitrary path); a
/// relative path resolves against the conversation's directory, `~/` against `$HOME`;
/// only an image beneath the conversation's directory or the wuu home is read.
pub fn message_image(shared: &Arc<Host>, p: MessageImageReadParams, reply: Responder) {
    let r = (|| -> Result<MessageImageReadResult, (ErrorCode, String)> {
        let invalid = |m: &str| (ErrorCode::InvalidParams, format!("invalid params: {m}"));
        if p.kind != "thread" {
            return Err(invalid(
                "kind: only \"thread\" images are served by this server",
            ));
        }
        let id = p.scope_id.trim();
        crate::util::check_thread_id("scope_id", id).map_err(|m| (ErrorCode::InvalidParams, m))?;
        if let Some(h) = &p.sha256 {
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid("sha256: expected 64 hex digits"));
            }
        }
        let store = shared
            .connections
            .take()
            .map_err(|e| crate::session::host::store_error(shared, &e))?;
        let thread = store
            .get_thread(id)
            .map_err(|e| crate::session::host::store_error(shared, &e))?
            .ok_or_else(|| (ErrorCode::ThreadNotFound, format!("thread not found: {id}")))?;
        let item = store
            .get_item(id, p.message_id.trim())
            .map_err(|e| crate::session::host::store_error(shared, &e))?;
        drop(store);
        let body = item
            .filter(|i| i.item_type == "agent_message" && i.turn_id == p.turn_id.trim())
            .and_then(|i| {
                i.body
                    .get("text")
                    .and_then(|t| t.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let media = image_media(&p.source);
        if media.is_empty() || !markdown_image_sources(&body).contains(&p.source) {
            return Err((
                ErrorCode::Error,
                "image is not attached to this reply".into(),
            ));
        }
        let raw = p
            .source
            .strip_prefix("file://localhost")
            .or_else(|| p.source.strip_prefix("file://"))
            .unwrap_or(&p.source);
        let path = if let Some(rest) = raw.strip_prefix("~/") {
            let home = std::env::var_os("HOME")
                .ok_or((ErrorCode::Error, "no home directory".to_owned()))?;
            std::path::PathBuf::from(home).join(rest)
        } else {
            let p = std::path::PathBuf::from(raw);
            if p.is_absolute() {
                p
            } else {
                std::path::PathBuf::from(&thread.cwd).join(p)
            }
        };
        let unavailable = || {
            (
                ErrorCode::Error,
                "image is unavailable or exceeds 12 MB".to_owned(),
            )
        };
        // Only images beneath the conversation's directory or the wuu home (where the
        // host keeps attachments) are served: the check is lexical, before any disk
        // access, and the read resolves beneath that root (no symlink out of it).
        let cwd = std::path::PathBuf::from(&thread.cwd);
        let (root, rel) = [cwd.as_path(), shared.opts.home.as_path()]
            .into_iter()
            .filter(|r| r.is_absolute())
            .find_map(|r| crate::beneath::rel_beneath(r, &path).map(|rel| (r, rel)))
            .ok_or_else(|| {
                (
                    ErrorCode::Error,
                    "image is outside the conversation's directory".to_owned(),
                )
            })?;
        let bytes = crate::beneath::Root::open(root)
            .map_err(|_| unavailable())?
            .read_capped(&rel, MESSAGE_IMAGE_MAX_BYTES)
            .map_err(|_| unavailable())?;
        if bytes.is_empty() {
            return Err(unavailable());
        }
        if sniff(&bytes) != media {
            return Err((ErrorCode::Error, "invalid image contents".into()));
        }
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let digest = crate::outbound::deferred::image_sha(media, &data);
        if p.sha256
            .as_deref()
            .is_some_and(|h| h.to_ascii_lowercase() != digest)
        {
            return Err((
                ErrorCode::Error,
                "image changed while reading; try again".into(),
            ));
        }
        let (full, content_type) = if p.preview == Some(true) {
            let prev = crate::session::attachments::preview_jpeg(&data)
                .map_err(|e| (ErrorCode::Error, e))?;
            (prev, "image/jpeg")
        } else {
            (data, media)
        };
        let total = full.len() as u64;
        let offset = p.offset.unwrap_or(0);
        if offset > total {
            return Err(invalid(&format!(
                "offset {offset} is beyond the image ({total} characters)"
            )));
        }
        let start = offset as usize;
        let end = (start + ATTACHMENT_CHUNK_CHARS).min(full.len());
        Ok(MessageImageReadResult {
            data: full.get(start..end).unwrap_or("").to_owned(),
            total,
            offset,
            content_type: content_type.into(),
            media_type: content_type.into(),
            sha256: digest,
        })
    })();
    match r {
        Ok(v) => reply.ok(&v),
        Err((c, m)) => reply.err(c, m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_images_outside_code_only() {
        let body = "See ![chart](out/chart.png) and `![x](secret.png)`\n\
                    ```\n![y](/etc/passwd.png)\n```\n![z](<a b.jpg>) [link](l.png)";
        assert_eq!(
            markdown_image_sources(body),
            vec!["out/chart.png", "a b.jpg"]
        );
        assert_eq!(image_media("https://x/y.png"), "");
        assert_eq!(image_media("file:///tmp/a.PNG"), "image/png");
    }
}
