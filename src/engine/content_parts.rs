//! Validation of `content_parts` on `turn/start`, `run/start`, `turn/queue`,
//! `turn/update-queued` and `turn/steer` (seed 003 "输入内容分段"; spec `app-server.md`
//! §5.7 and §6 rule 17).
//!
//! Parts are ordered presentation metadata; the model always sees the prompt. Accepted
//! types and fields (unknown fields are dropped from accepted parts):
//! - `text`: `text`.
//! - `pasted_text`: `text`, optional `title`.
//! - `file_selection`: `text`, `id`, `intent` (`comment` | `edit` | `quote`), optional
//!   `comment`, `source: {workspace, path, quote, revision, start_line, start_column,
//!   end_line, end_column}` — 1-based lines and UTF-16 columns, end exclusive, so the end
//!   must come after the start. PDF selections add `source.pdf: {start_page, end_page}`
//!   (1-based, inclusive, ordered) with all four coordinates 0; delivered PDFs also carry
//!   `artifact_uri`, `artifact_sha256` (64 hex), `artifact_thread_id` in `pdf`, and
//!   `revision` must be `sha256:<artifact_sha256>`. The file is never read.
//! - `response_selection`: `text`, `selection: {id, text, comment?, source: {thread_id,
//!   turn_id, item_id, start_offset, end_offset, range_text?}}`; kept only when rule 17
//!   holds, otherwise downgraded to a `text` part with the same text.
//!
//! Parts of unknown type, without a non-empty `text`, or invalid are dropped. Finally
//! the parts are kept only when their concatenated texts, trimmed, equal the trimmed
//! prompt; otherwise all metadata is dropped (the prompt is never changed).

use serde_json::{json, Map, Value};

/// Prefix of a valid `response_selection` part text (spec §6 rule 17).
pub const RESPONSE_SELECTION_PREFIX: &str = "Quoted assistant response (JSON):\n";

/// Normalizes `content_parts` against `prompt` (rules in the module docs). `None` when
/// nothing valid remains or the texts do not match the prompt.
pub fn normalize_content_parts(parts: Option<Vec<Value>>, prompt: &str) -> Option<Vec<Value>> {
    let parts: Vec<Value> = parts?.iter().filter_map(normalize_part).collect();
    if parts.is_empty() {
        return None;
    }
    let joined: String = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    (joined.trim() == prompt.trim()).then_some(parts)
}

fn s<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn non_empty<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    s(v, key).filter(|x| !x.trim().is_empty())
}

fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

/// One part, normalized; `None` drops it.
fn normalize_part(p: &Value) -> Option<Value> {
    let ty = s(p, "type")?;
    let text = s(p, "text").filter(|t| !t.is_empty())?;
    match ty {
        "text" => Some(json!({"type": "text", "text": text})),
        "pasted_text" => {
            let mut out = json!({"type": "pasted_text", "text": text});
            if let Some(t) = s(p, "title") {
                out["title"] = json!(t);
            }
            Some(out)
        }
        "file_selection" => file_selection(p, text),
        "response_selection" => Some(
            response_selection(p, text).unwrap_or_else(|| json!({"type": "text", "text": text})),
        ),
        _ => None,
    }
}

fn file_selection(p: &Value, text: &str) -> Option<Value> {
    let id = non_empty(p, "id")?;
    let intent = s(p, "intent").filter(|i| matches!(*i, "comment" | "edit" | "quote"))?;
    let src = p.get("source").filter(|v| v.is_object())?;
    let workspace = s(src, "workspace")?;
    let path = non_empty(src, "path")?;
    let quote = s(src, "quote")?;
    let revision = non_empty(src, "revision")?;
    let (sl, sc, el, ec) = (
        int(src, "start_line")?,
        int(src, "start_column")?,
        int(src, "end_line")?,
        int(src, "end_column")?,
    );
    let mut source = Map::new();
    source.insert("workspace".into(), json!(workspace));
    source.insert("path".into(), json!(path));
    source.insert("quote".into(), json!(quote));
    source.insert("revision".into(), json!(revision));
    for (k, v) in [
        ("start_line", sl),
        ("start_column", sc),
        ("end_line", el),
        ("end_column", ec),
    ] {
        source.insert(k.into(), json!(v));
    }
    match src.get("pdf") {
        None | Some(Value::Null) => {
            if sl < 1 || sc < 1 || el < 1 || ec < 1 || (el, ec) <= (sl, sc) {
                return None;
            }
        }
        Some(pdf) => {
            if !pdf.is_object() || sl != 0 || sc != 0 || el != 0 || ec != 0 {
                return None;
            }
            let (a, b) = (int(pdf, "start_page")?, int(pdf, "end_page")?);
            if a < 1 || b < a {
                return None;
            }
            let mut out = json!({"start_page": a, "end_page": b});
            let keys = ["artifact_uri", "artifact_sha256", "artifact_thread_id"];
            let present = keys.iter().filter(|k| pdf.get(**k).is_some()).count();
            if present > 0 {
                if present != keys.len() {
                    return None;
                }
                let uri = non_empty(pdf, "artifact_uri")?;
                let sha = non_empty(pdf, "artifact_sha256")?;
                let thread = non_empty(pdf, "artifact_thread_id")?;
                if sha.len() != 64 || !sha.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                if revision != format!("sha256:{sha}") {
                    return None;
                }
                out["artifact_uri"] = json!(uri);
                out["artifact_sha256"] = json!(sha);
                out["artifact_thread_id"] = json!(thread);
            }
            source.insert("pdf".into(), out);
        }
    }
    let mut out = json!({
        "type": "file_selection", "text": text, "id": id, "intent": intent,
        "source": Value::Object(source),
    });
    if let Some(c) = s(p, "comment") {
        out["comment"] = json!(c);
    }
    Some(out)
}

fn response_selection(p: &Value, text: &str) -> Option<Value> {
    let sel = p.get("selection").filter(|v| v.is_object())?;
    let id = non_empty(sel, "id")?;
    let sel_text = non_empty(sel, "text")?;
    let comment = s(sel, "comment");
    let src = sel.get("source").filter(|v| v.is_object())?;
    let (thread_id, turn_id, item_id) = (
        non_empty(src, "thread_id")?,
        non_empty(src, "turn_id")?,
        non_empty(src, "item_id")?,
    );
    let (start, end) = (int(src, "start_offset")?, int(src, "end_offset")?);
    if start < 0 || end <= start {
        return None;
    }
    let range_text = s(src, "range_text");
    let measured = range_text.unwrap_or(sel_text).encode_utf16().count() as i64;
    if end - start != measured {
        return None;
    }
    let body = text
        .strip_prefix(RESPONSE_SELECTION_PREFIX)?
        .strip_suffix('\n')?;
    let quoted: Map<String, Value> = serde_json::from_str(body).ok()?;
    if quoted.len() != 2
        || quoted.get("text").and_then(Value::as_str) != Some(sel_text)
        || quoted.get("comment").and_then(Value::as_str) != Some(comment.unwrap_or(""))
    {
        return None;
    }
    let mut source = json!({"thread_id": thread_id, "turn_id": turn_id, "item_id": item_id,
        "start_offset": start, "end_offset": end});
    if let Some(r) = range_text {
        source["range_text"] = json!(r);
    }
    let mut selection = json!({"id": id, "text": sel_text, "source": source});
    if let Some(c) = comment {
        selection["comment"] = json!(c);
    }
    Some(json!({"type": "response_selection", "text": text, "selection": selection}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs(source: Value) -> Value {
        json!({"type": "file_selection", "text": "T", "id": "s1", "intent": "comment",
            "source": source})
    }

    fn src() -> Value {
        json!({"workspace": "/w", "path": "a.rs", "quote": "x", "revision": "r1",
            "start_line": 1, "start_column": 1, "end_line": 2, "end_column": 1})
    }

    fn one(p: Value) -> Option<Value> {
        let prompt = p["text"].as_str().unwrap_or("").to_owned();
        normalize_content_parts(Some(vec![p]), &prompt).map(|mut v| v.remove(0))
    }

    #[test]
    fn text_and_pasted_text() {
        let parts = vec![
            json!({"type": "text", "text": "hello ", "extra": 1}),
            json!({"type": "pasted_text", "text": "world", "title": "clip"}),
        ];
        let out = normalize_content_parts(Some(parts), "  hello world \n").unwrap();
        assert_eq!(out[0], json!({"type": "text", "text": "hello "}));
        assert_eq!(out[1]["title"], "clip");
    }

    #[test]
    fn mismatch_drops_all_metadata() {
        let parts = vec![json!({"type": "text", "text": "hello"})];
        assert!(normalize_content_parts(Some(parts), "goodbye").is_none());
        assert!(normalize_content_parts(None, "x").is_none());
        assert!(normalize_content_parts(Some(vec![]), "").is_none());
    }

    #[test]
    fn unknown_and_empty_parts_are_dropped() {
        let parts = vec![
            json!({"type": "video", "text": "zz"}),
            json!({"type": "text", "text": ""}),
            json!({"type": "text"}),
            json!("not an object"),
            json!({"type": "text", "text": "kept"}),
        ];
        let out = normalize_content_parts(Some(parts), "kept").unwrap();
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn file_selection_rules() {
        let ok = one(fs(src())).unwrap();
        assert_eq!(ok["source"]["path"], "a.rs");
        // Intent values.
        let mut bad = fs(src());
        bad["intent"] = json!("delete");
        assert!(one(bad).is_none());
        // Required metadata.
        for k in ["workspace", "path", "quote", "revision", "start_line"] {
            let mut s = src();
            s.as_object_mut().unwrap().remove(k);
            assert!(one(fs(s)).is_none(), "{k}");
        }
        let mut no_id = fs(src());
        no_id.as_object_mut().unwrap().remove("id");
        assert!(one(no_id).is_none());
        // Positive coordinates and order (end exclusive).
        let mut s = src();
        s["start_column"] = json!(0);
        assert!(one(fs(s)).is_none());
        let mut s = src();
        s["end_line"] = json!(1);
        s["end_column"] = json!(1);
        assert!(one(fs(s)).is_none(), "empty range");
        let mut s = src();
        s["end_line"] = json!(1);
        s["end_column"] = json!(5);
        assert!(one(fs(s)).is_some());
        // Comment kept.
        let mut c = fs(src());
        c["comment"] = json!("why?");
        assert_eq!(one(c).unwrap()["comment"], "why?");
    }

    #[test]
    fn pdf_selection_rules() {
        let sha = "a".repeat(64);
        let pdf_src = |pdf: Value, rev: &str| {
            json!({"workspace": "/w", "path": "d.pdf", "quote": "x", "revision": rev,
                "start_line": 0, "start_column": 0, "end_line": 0, "end_column": 0, "pdf": pdf})
        };
        assert!(one(fs(pdf_src(json!({"start_page": 2, "end_page": 3}), "r"))).is_some());
        assert!(one(fs(pdf_src(json!({"start_page": 3, "end_page": 2}), "r"))).is_none());
        assert!(one(fs(pdf_src(json!({"start_page": 0, "end_page": 2}), "r"))).is_none());
        let mut lines = pdf_src(json!({"start_page": 1, "end_page": 1}), "r");
        lines["start_line"] = json!(1);
        assert!(one(fs(lines)).is_none(), "coordinates must be 0");
        let delivered = json!({"start_page": 1, "end_page": 1, "artifact_uri": "artifact://x",
            "artifact_sha256": sha, "artifact_thread_id": "thr_1"});
        let rev = format!("sha256:{sha}");
        let ok = one(fs(pdf_src(delivered.clone(), &rev))).unwrap();
        assert_eq!(ok["source"]["pdf"]["artifact_thread_id"], "thr_1");
        assert!(one(fs(pdf_src(delivered.clone(), "sha256:other"))).is_none());
        let mut partial = delivered.clone();
        partial.as_object_mut().unwrap().remove("artifact_uri");
        assert!(one(fs(pdf_src(partial, &rev))).is_none());
    }

    fn rs(text: &str, start: i64, end: i64, range_text: Option<&str>) -> Value {
        let mut source = json!({"thread_id": "th", "turn_id": "tu", "item_id": "it",
            "start_offset": start, "end_offset": end});
        if let Some(r) = range_text {
            source["range_text"] = json!(r);
        }
        json!({"type": "response_selection", "text": text,
            "selection": {"id": "q1", "text": "héllo", "comment": "c", "source": source}})
    }

    #[test]
    fn response_selection_rules() {
        let good = format!(
            "{RESPONSE_SELECTION_PREFIX}{}\n",
            json!({"text": "héllo", "comment": "c"})
        );
        let ok = one(rs(&good, 3, 8, None)).unwrap();
        assert_eq!(ok["type"], "response_selection");
        // Wrong length → downgraded to text, text survives.
        let down = one(rs(&good, 3, 9, None)).unwrap();
        assert_eq!(down, json!({"type": "text", "text": good}));
        // range_text measures instead of text (UTF-16: the emoji counts 2).
        assert_eq!(
            one(rs(&good, 0, 2, Some("😀"))).unwrap()["type"],
            "response_selection"
        );
        // Negative start, empty range.
        assert_eq!(one(rs(&good, -1, 4, None)).unwrap()["type"], "text");
        assert_eq!(one(rs(&good, 3, 3, None)).unwrap()["type"], "text");
        // Text not in the exact quoted form.
        let loose = format!(
            "{RESPONSE_SELECTION_PREFIX}{}",
            json!({"text": "héllo", "comment": "c"})
        );
        assert_eq!(one(rs(&loose, 3, 8, None)).unwrap()["type"], "text");
        let extra = format!(
            "{RESPONSE_SELECTION_PREFIX}{}\n",
            json!({"text": "héllo", "comment": "c", "x": 1})
        );
        assert_eq!(one(rs(&extra, 3, 8, None)).unwrap()["type"], "text");
    }
}
