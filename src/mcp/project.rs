//! MCP tools as model tools: their names (`mcp__<server>__<tool>`, characters outside
//! `[A-Za-z0-9_-]` replaced by `_`, at most [`MAX_NAME`] characters, unique) and the
//! projection of a `tools/call` result (MCP 2025-06-18 `CallToolResult`: `content` of
//! `text`, `image`, `audio`, `resource`, `resource_link`; `structuredContent`;
//! `isError`) into a [`ToolOutcome`]: the model reads `output` (text, bounded), clients
//! read `detail` `{server, tool, content: [...], structured_content?}` where images keep
//! their data (up to [`MAX_IMAGE_CHARS`]) as `{type: "image", mime_type, data}` (the
//! session makes `content` the item's `result_detail.content`).

use crate::tools::ToolOutcome;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// Longest model tool name (the providers' limit).
pub const MAX_NAME: usize = 64;
/// Largest image (base64 characters) kept in a result's `detail`.
pub const MAX_IMAGE_CHARS: usize = 8 * 1024 * 1024;

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn short_hash(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The model name of `tool` of `server`, unique among `taken` (which it joins).
pub fn model_name(server: &str, tool: &str, taken: &mut HashSet<String>) -> String {
    let full = format!("mcp__{}__{}", sanitize(server), sanitize(tool));
    let mut name = if full.len() > MAX_NAME {
        // ASCII only after sanitising: byte slicing is safe.
        format!(
            "{}_{}",
            &full[..MAX_NAME - 9],
            short_hash(&format!("{server}\0{tool}"))
        )
    } else {
        full
    };
    let mut n = 2;
    while taken.contains(&name) {
        let suffix = format!("_{n}");
        let keep = name.len().min(MAX_NAME - suffix.len());
        name = format!("{}{suffix}", &name[..keep]);
        n += 1;
    }
    taken.insert(name.clone());
    name
}

/// Keeps at most `cap` bytes of `s` (head and tail, with a marker between).
pub fn bound(s: String, cap: usize) -> String {
    if s.len() <= cap || cap == 0 {
        return s;
    }
    let half = cap / 2;
    let mut head = half;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - half;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[… {} bytes omitted …]\n{}",
        &s[..head],
        tail - head,
        &s[tail..]
    )
}

/// Projects a `tools/call` result of `tool` on `server` (see the module docs); the
/// text the model reads is at most `cap` bytes and never holds a configured secret.
pub fn outcome(server: &str, tool: &str, result: &Value, cap: usize) -> ToolOutcome {
    let red = |s: &str| crate::secrets::redact(s).into_owned();
    let mut text = String::new();
    let mut parts = vec![];
    let push = |text: &mut String, s: &str| {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(s);
    };
    let empty = vec![];
    let content = result
        .get("content")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    for c in content {
        let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => {
                push(&mut text, s("text"));
                parts.push(json!({"type": "text", "text": red(&bound(s("text").to_owned(), cap))}));
            }
            "image" | "audio" => {
                let kind = s("type");
                let mime = s("mimeType");
                let data = s("data");
                push(
                    &mut text,
                    &format!("[{kind} {mime}, {} bytes base64]", data.len()),
                );
                if kind == "image" && data.len() <= MAX_IMAGE_CHARS {
                    parts.push(json!({"type": "image", "mime_type": mime, "data": data}));
                } else {
                    parts.push(
                        json!({"type": kind, "mime_type": mime, "omitted_bytes": data.len()}),
                    );
                }
            }
            "resource" => {
                let r = c.get("resource").cloned().unwrap_or(Value::Null);
                let rs = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
                let body = rs("text");
                if body.is_empty() {
                    push(
                        &mut text,
                        &format!(
                            "[resource {} ({}), {} bytes base64]",
                            rs("uri"),
                            rs("mimeType"),
                            rs("blob").len()
                        ),
                    );
                } else {
                    push(&mut text, &format!("[resource {}]\n{body}", rs("uri")));
                }
                parts.push(json!({
                    "type": "resource", "uri": red(rs("uri")), "mime_type": rs("mimeType"),
                    "text": red(&bound(body.to_owned(), cap)),
                }));
            }
            "resource_link" => {
                push(
                    &mut text,
                    &format!("[resource link {} {}]", s("name"), s("uri")),
                );
                parts.push(
                    json!({"type": "resource_link", "uri": red(s("uri")), "name": red(s("name"))}),
                );
            }
            other => {
                push(&mut text, &format!("[{other} content]"));
                parts.push(json!({"type": other}));
            }
        }
    }
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    if content.is_empty() {
        if let Some(v) = structured {
            text = v.to_string();
        }
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if text.is_empty() {
        text = if is_error {
            "the tool failed without a message".into()
        } else {
            "(no output)".into()
        };
    }
    let mut detail = json!({"server": server, "tool": tool, "content": parts});
    if let Some(v) = structured {
        let s = red(&bound(v.to_string(), cap));
        detail["structured_content"] = serde_json::from_str(&s).unwrap_or(Value::String(s));
    }
    ToolOutcome {
        output: red(&bound(text, cap)),
        is_error,
        permission_denied: false,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_capped_and_unique() {
        let mut taken = HashSet::new();
        assert_eq!(
            model_name("every thing", "echo", &mut taken),
            "mcp__every_thing__echo"
        );
        assert_eq!(
            model_name("every.thing", "echo", &mut taken),
            "mcp__every_thing__echo_2"
        );
        let long = model_name("s", &"x".repeat(100), &mut taken);
        assert!(long.len() <= MAX_NAME, "{long}");
        let long2 = model_name("s", &"x".repeat(101), &mut taken);
        assert_ne!(long, long2);
        assert!(model_name("ü", "ö", &mut taken).is_ascii());
    }

    #[test]
    fn results_are_projected_and_bounded() {
        let r = json!({"content": [
            {"type": "text", "text": "a".repeat(1000)},
            {"type": "image", "mimeType": "image/png", "data": "iVBOR"},
        ], "isError": true});
        let o = outcome("s", "t", &r, 100);
        assert!(o.is_error);
        assert!(o.output.len() < 200, "{}", o.output);
        assert!(o.output.contains("bytes omitted"));
        assert_eq!(o.detail["content"][1]["data"], "iVBOR");
    }
}
