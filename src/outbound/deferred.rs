//! Deferred content (spec `app-server.md` §5.8): a large image in a frame is sent by
//! reference. An image whose base64 `data` is longer than [`INLINE_IMAGE_CHARS`] — in
//! an item's `images[index]`, or an image part of its `result_detail.content[index]` — is
//! sent with `data: ""` and `remote_ref = "thread:" + base64url(JSON [thread_id,
//! turn_id, item_id, index, sha256hex])` (plus a trailing `"result"` for result parts).
//! The hash is over `media_type + "\0" + data` of the stored image. An image whose
//! location is not known (e.g. of a queued input, which has no item yet) stays inline.
//! `thread/attachment/read` (in `session::attachments`) reads such a reference back.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use wuu_protocol::{ThreadItem, INLINE_IMAGE_CHARS};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 (hex) of `media_type + "\0" + data` (spec §5.9).
pub fn image_sha(media_type: &str, data: &str) -> String {
    let mut h = Sha256::new();
    h.update(media_type.as_bytes());
    h.update([0u8]);
    h.update(data.as_bytes());
    hex(&h.finalize())
}

/// The `thread:` reference of an image.
pub fn attachment_ref(
    thread_id: &str,
    turn_id: &str,
    item_id: &str,
    index: usize,
    sha: &str,
    result: bool,
) -> String {
    let v = if result {
        json!([thread_id, turn_id, item_id, index, sha, "result"])
    } else {
        json!([thread_id, turn_id, item_id, index, sha])
    };
    format!("thread:{}", URL_SAFE_NO_PAD.encode(v.to_string()))
}

/// `(media_type, data)` of an image value (`media_type` or MCP's `mime_type`), when it
/// is an image with string data.
pub fn image_parts(v: &Value) -> Option<(&str, &str)> {
    let m = v.as_object()?;
    let media = m
        .get("media_type")
        .or_else(|| m.get("mime_type"))
        .and_then(Value::as_str)?;
    if !media.starts_with("image/") {
        return None;
    }
    Some((media, m.get("data")?.as_str()?))
}

fn project_one(
    v: &mut Value,
    thread_id: &str,
    turn_id: &str,
    item_id: &str,
    i: usize,
    result: bool,
) -> bool {
    let Some((media, data)) = image_parts(v) else {
        return false;
    };
    if data.len() <= INLINE_IMAGE_CHARS {
        return false;
    }
    let sha = image_sha(media, data);
    let r = attachment_ref(thread_id, turn_id, item_id, i, &sha, result);
    if let Some(m) = v.as_object_mut() {
        m.insert("data".into(), Value::String(String::new()));
        m.insert("remote_ref".into(), Value::String(r));
    }
    true
}

/// Projects the large images of one item (its `images` and the image parts of
/// `result_detail.content`). Returns whether anything changed.
pub fn project_media(
    images: Option<&mut Vec<Value>>,
    result_detail: Option<&mut Value>,
    thread_id: &str,
    turn_id: &str,
    item_id: &str,
) -> bool {
    let mut changed = false;
    if let Some(images) = images {
        for (i, img) in images.iter_mut().enumerate() {
            changed |= project_one(img, thread_id, turn_id, item_id, i, false);
        }
    }
    if let Some(content) = result_detail
        .and_then(|d| d.get_mut("content"))
        .and_then(Value::as_array_mut)
    {
        for (i, part) in content.iter_mut().enumerate() {
            changed |= project_one(part, thread_id, turn_id, item_id, i, true);
        }
    }
    changed
}

/// [`project_media`] for a typed item.
pub fn project_item(item: &mut ThreadItem, thread_id: &str, turn_id: &str) -> bool {
    let id = item.id.clone();
    project_media(
        item.images.as_mut(),
        item.result_detail.as_mut(),
        thread_id,
        turn_id,
        &id,
    )
}

/// Whether an item carries an image (inline or not) that projection might replace.
pub fn has_media(item: &ThreadItem) -> bool {
    item.images.as_ref().is_some_and(|i| !i.is_empty())
        || item
            .result_detail
            .as_ref()
            .and_then(|d| d.get("content"))
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|p| image_parts(p).is_some()))
}

/// Projects every locatable large image in a frame (deferred notification content): an
/// object with `thread_id` sets the conversation, a thread (`id` + `turns`) too, a turn
/// (`id` + `items`) or a `turn_id` sets the turn, and an item (`id` + `type`) with
/// `images` or `result_detail` is projected in place. Returns whether anything changed.
pub fn project_frame(v: &mut Value) -> bool {
    walk(v, None, None)
}

/// [`project_frame`] with the conversation known from the request (a `turn/start`
/// result names no thread).
pub fn project_frame_at(v: &mut Value, thread_id: Option<&str>) -> bool {
    walk(v, thread_id, None)
}

fn walk(v: &mut Value, thread: Option<&str>, turn: Option<&str>) -> bool {
    match v {
        Value::Array(a) => {
            let mut changed = false;
            for x in a {
                changed |= walk(x, thread, turn);
            }
            changed
        }
        Value::Object(m) => {
            let id = m.get("id").and_then(Value::as_str).map(str::to_owned);
            let mut thread = m
                .get("thread_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(thread.map(str::to_owned));
            if m.get("turns").is_some_and(Value::is_array) && id.is_some() {
                thread = id.clone();
            }
            let mut turn = m
                .get("turn_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(turn.map(str::to_owned));
            if m.get("items").is_some_and(Value::is_array) && id.is_some() {
                turn = id.clone();
            }
            let is_item = id.is_some()
                && m.get("type").is_some_and(Value::is_string)
                && (m.contains_key("images") || m.contains_key("result_detail"));
            let mut changed = false;
            if let (true, Some(th), Some(tu), Some(item_id)) =
                (is_item, thread.as_deref(), turn.as_deref(), id.as_deref())
            {
                let mut images = m.remove("images");
                let mut detail = m.remove("result_detail");
                let imgs = match images.as_mut() {
                    Some(Value::Array(a)) => Some(a),
                    _ => None,
                };
                changed |= project_media(imgs, detail.as_mut(), th, tu, item_id);
                if let Some(i) = images {
                    m.insert("images".into(), i);
                }
                if let Some(d) = detail {
                    m.insert("result_detail".into(), d);
                }
                return changed;
            }
            for (_, x) in m.iter_mut() {
                changed |= walk(x, thread.as_deref(), turn.as_deref());
            }
            changed
        }
        _ => false,
    }
}
