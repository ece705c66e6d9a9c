//! Images by reference (spec `app-server.md` §5.8–§5.9): projection of large images to
//! `remote_ref` in history pages and deferred-content frames, and
//! `thread/attachment/read` (base64 slices, or a JPEG preview).
//!
//! - **Projection.** An image whose base64 `data` is longer than
//!   [`INLINE_IMAGE_CHARS`] — in an item's `images[index]`, or an image part of its
//!   `result_detail.content[index]` — is sent with `data: ""` and `remote_ref =
//!   "thread:" + base64url(JSON [thread_id, turn_id, item_id, index, sha256hex])` (plus a
//!   trailing `"result"` for result parts). The hash is over `media_type + "\0" + data`
//!   of the stored image. An image whose location is not known (e.g. of a queued input,
//!   which has no item yet) stays inline.
//! - **Reads.** `thread/attachment/read` finds the stored item, checks the hash
//!   (`attachment changed or was removed` otherwise) and returns a slice of at most
//!   [`ATTACHMENT_CHUNK_CHARS`] of the base64 payload (a `data:` URL prefix is not part of
//!   the payload), or with `preview: true` a JPEG no larger than [`PREVIEW_MAX_SIDE`] px
//!   at quality [`PREVIEW_QUALITY`] (lower if needed to fit one slice).

use super::convert::item_wire;
use crate::server::{Responder, Shared};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};
use wuu_protocol::*;
use wuu_store::Store;

type Refusal = (ErrorCode, String);

/// Error text of a read whose image changed or vanished (spec §5.9).
pub const ATTACHMENT_CHANGED: &str = "attachment changed or was removed";

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
fn image_parts(v: &Value) -> Option<(&str, &str)> {
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

/// The base64 payload of an image's data (a `data:…;base64,` prefix removed).
fn payload(data: &str) -> &str {
    match data.strip_prefix("data:") {
        Some(rest) => rest.split_once(',').map(|(_, p)| p).unwrap_or(""),
        None => data,
    }
}

/// Recent previews: (image sha256, base64 JPEG).
type PreviewCache = Mutex<Vec<(String, Arc<String>)>>;

fn preview_cache() -> &'static PreviewCache {
    static C: OnceLock<PreviewCache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(vec![]))
}

/// A JPEG thumbnail (≤ [`PREVIEW_MAX_SIDE`] px on its longest side; never upscaled) of
/// the base64 image `b64`, as base64 no longer than [`ATTACHMENT_CHUNK_CHARS`].
/// Errors name why (undecodable base64 or image, unsupported format).
pub fn preview_jpeg(b64: &str) -> Result<String, String> {
    let bytes = STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("the image data is not valid base64: {e}"))?;
    let img =
        image::load_from_memory(&bytes).map_err(|e| format!("the image cannot be decoded: {e}"))?;
    let (w, h) = (img.width(), img.height());
    let img = if w.max(h) > PREVIEW_MAX_SIDE {
        img.thumbnail(PREVIEW_MAX_SIDE, PREVIEW_MAX_SIDE)
    } else {
        img
    };
    // JPEG has no alpha channel.
    let rgb = image::DynamicImage::ImageRgb8(img.to_rgb8());
    let mut quality = PREVIEW_QUALITY;
    loop {
        let mut out = Vec::with_capacity(64 * 1024);
        let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality);
        rgb.write_with_encoder(enc)
            .map_err(|e| format!("the preview cannot be encoded: {e}"))?;
        let b = STANDARD.encode(&out);
        if b.len() <= ATTACHMENT_CHUNK_CHARS || quality <= 30 {
            return Ok(b);
        }
        quality -= 15;
    }
}

/// Reads the stored item of an attachment reference. Ephemeral conversations are
/// answered by their session ([`read_from_item`]).
pub fn serve_catalog(
    shared: &Arc<Shared>,
    store: &Store,
    p: AttachmentReadParams,
    reply: Responder,
) {
    let thread_id = p.thread_id.trim().to_owned();
    if thread_id.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: thread_id is required",
        );
    }
    if thread_id.starts_with("ephemeral-") {
        return shared.registry.dispatch(
            shared,
            &thread_id,
            super::SessionMsg::Request {
                req: ClientRequest::ThreadAttachmentRead(p),
                reply,
            },
        );
    }
    let result = (|| -> Result<AttachmentReadResult, Refusal> {
        match store.get_thread(&thread_id) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err((
                    ErrorCode::ThreadNotFound,
                    format!("thread {thread_id:?} not found"),
                ))
            }
            Err(e) => return Err((ErrorCode::InternalError, format!("store: {e}"))),
        }
        let row = store
            .get_item(&thread_id, p.item_id.trim())
            .map_err(|e| (ErrorCode::InternalError, format!("store: {e}")))?
            .filter(|r| r.turn_id == p.turn_id.trim())
            .ok_or_else(|| (ErrorCode::Error, ATTACHMENT_CHANGED.to_owned()))?;
        read_from_item(&item_wire(&row), &p)
    })();
    match result {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

/// `thread/attachment/read` against a loaded item.
pub fn read_from_item(
    item: &ThreadItem,
    p: &AttachmentReadParams,
) -> Result<AttachmentReadResult, Refusal> {
    let changed = || (ErrorCode::Error, ATTACHMENT_CHANGED.to_owned());
    let kind = p.kind.as_deref().map(str::trim).unwrap_or("");
    let index = p.index as usize;
    let img: &Value = match kind {
        "" => item.images.as_ref().and_then(|i| i.get(index)),
        "result" => item
            .result_detail
            .as_ref()
            .and_then(|d| d.get("content"))
            .and_then(Value::as_array)
            .and_then(|c| c.get(index)),
        other => {
            return Err((
                ErrorCode::InvalidParams,
                format!("invalid params: kind: {other:?} is not \"\" or \"result\""),
            ))
        }
    }
    .ok_or_else(changed)?;
    let (media, data) = image_parts(img).ok_or_else(changed)?;
    if image_sha(media, data) != p.sha256.trim().to_ascii_lowercase() {
        return Err(changed());
    }
    let offset = p.offset.unwrap_or(0);
    let (full, content_type): (Arc<String>, String) = if p.preview == Some(true) {
        let key = p.sha256.trim().to_ascii_lowercase();
        let cached = preview_cache()
            .lock()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone());
        let b = match cached {
            Some(b) => b,
            None => {
                let b = Arc::new(preview_jpeg(payload(data)).map_err(|e| (ErrorCode::Error, e))?);
                let mut c = preview_cache().lock();
                if c.len() >= 64 {
                    c.remove(0);
                }
                c.push((key, b.clone()));
                b
            }
        };
        (b, "image/jpeg".into())
    } else {
        (Arc::new(payload(data).to_owned()), media.to_owned())
    };
    let total = full.len() as u64;
    if offset > total {
        return Err((
            ErrorCode::InvalidParams,
            format!(
                "invalid params: offset {offset} is beyond the attachment ({total} characters)"
            ),
        ));
    }
    let start = offset as usize;
    let end = (start + ATTACHMENT_CHUNK_CHARS).min(full.len());
    Ok(AttachmentReadResult {
        data: full.get(start..end).unwrap_or("").to_owned(),
        total,
        offset,
        content_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big_png() -> String {
        let img = image::RgbaImage::from_fn(1200, 800, |x, y| {
            image::Rgba([(x % 256) as u8, (y % 256) as u8, ((x * y) % 256) as u8, 255])
        });
        let mut out = std::io::Cursor::new(vec![]);
        image::DynamicImage::ImageRgba8(img)
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        STANDARD.encode(out.into_inner())
    }

    #[test]
    fn projects_large_images_and_keeps_small_ones() {
        let big = "A".repeat(INLINE_IMAGE_CHARS + 1);
        let mut item = ThreadItem::new("it1", "user_message");
        item.images = Some(vec![
            json!({"media_type": "image/png", "data": big}),
            json!({"media_type": "image/png", "data": "AAAA"}),
        ]);
        item.result_detail = Some(json!({"content": [{"type": "text", "text": "x"},
            {"type": "image", "mime_type": "image/jpeg", "data": big}]}));
        assert!(project_item(&mut item, "th", "tu"));
        let imgs = item.images.as_ref().unwrap();
        assert_eq!(imgs[0]["data"], "");
        let r = imgs[0]["remote_ref"].as_str().unwrap();
        let dec: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(r.strip_prefix("thread:").unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            dec,
            json!(["th", "tu", "it1", 0, image_sha("image/png", &big)])
        );
        assert_eq!(imgs[1]["data"], "AAAA");
        let part = &item.result_detail.as_ref().unwrap()["content"][1];
        let r = part["remote_ref"].as_str().unwrap();
        let dec: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(r.strip_prefix("thread:").unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(dec[3], 1);
        assert_eq!(dec[5], "result");
    }

    #[test]
    fn frames_are_projected_only_where_the_location_is_known() {
        let big = "B".repeat(INLINE_IMAGE_CHARS + 10);
        let mut frame = json!({"thread_id": "th", "turn": {"id": "tu", "items": [
            {"id": "i1", "type": "user_message", "images": [{"media_type": "image/png", "data": big}]}]}});
        assert!(project_frame(&mut frame));
        assert_eq!(frame["turn"]["items"][0]["images"][0]["data"], "");
        let mut queued = json!({"message": {"id": "q1", "thread_id": "th", "images": [{"media_type": "image/png", "data": big}]}});
        assert!(!project_frame(&mut queued));
    }

    #[test]
    fn reads_slices_and_previews_and_refuses_a_changed_image() {
        let png = big_png();
        let mut item = ThreadItem::new("it", "user_message");
        item.images = Some(vec![
            json!({"media_type": "image/png", "data": format!("data:image/png;base64,{png}")}),
        ]);
        let sha = image_sha(
            "image/png",
            item.images.as_ref().unwrap()[0]["data"].as_str().unwrap(),
        );
        let mut p = AttachmentReadParams {
            thread_id: "th".into(),
            turn_id: "tu".into(),
            item_id: "it".into(),
            index: 0,
            kind: None,
            sha256: sha.clone(),
            offset: None,
            preview: None,
        };
        let mut got = String::new();
        loop {
            p.offset = Some(got.len() as u64);
            let r = read_from_item(&item, &p).unwrap();
            assert_eq!(r.content_type, "image/png");
            assert!(r.data.len() <= ATTACHMENT_CHUNK_CHARS);
            got.push_str(&r.data);
            if got.len() as u64 == r.total {
                break;
            }
        }
        assert_eq!(got, png);
        p.offset = None;
        p.preview = Some(true);
        let r = read_from_item(&item, &p).unwrap();
        assert_eq!(r.content_type, "image/jpeg");
        assert_eq!(r.total as usize, r.data.len());
        let jpeg = image::load_from_memory(&STANDARD.decode(&r.data).unwrap()).unwrap();
        assert_eq!((jpeg.width(), jpeg.height()), (384, 256));
        p.sha256 = "0".repeat(64);
        assert_eq!(read_from_item(&item, &p).unwrap_err().1, ATTACHMENT_CHANGED);
        p.sha256 = sha;
        p.index = 3;
        assert_eq!(read_from_item(&item, &p).unwrap_err().1, ATTACHMENT_CHANGED);
    }
}
