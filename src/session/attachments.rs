//! Images by reference (spec `app-server.md` §5.9): `thread/attachment/read` (base64
//! slices, or a JPEG preview) of a `remote_ref` that [`crate::outbound::deferred`] made.
//!
//! - **Reads.** `thread/attachment/read` finds the stored item, checks the hash
//!   (`attachment changed or was removed` otherwise) and returns a slice of at most
//!   [`ATTACHMENT_CHUNK_CHARS`] of the base64 payload (a `data:` URL prefix is not part of
//!   the payload), or with `preview: true` a JPEG no larger than [`PREVIEW_MAX_SIDE`] px
//!   at quality [`PREVIEW_QUALITY`] (lower if needed to fit one slice).

use super::convert::item_wire;
use crate::outbound::deferred::{image_parts, image_sha};
use crate::outbound::Responder;
use crate::session::Host;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use wuu_protocol::*;
use wuu_store::Store;

type Refusal = (ErrorCode, String);

/// Error text of a read whose image changed or vanished (spec §5.9).
pub const ATTACHMENT_CHANGED: &str = "attachment changed or was removed";

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
    let img = super::preview::decode_rgb(&bytes, super::preview::MAX_DECODED_BYTES)
        .map_err(|e| format!("the image cannot be decoded: {e}"))?;
    let (w, h) = super::preview::fit(img.width, img.height, PREVIEW_MAX_SIDE);
    let img = if (w, h) == (img.width, img.height) {
        img
    } else {
        super::preview::shrink(&img, w, h)
    };
    let mut quality = PREVIEW_QUALITY;
    loop {
        let out = super::preview::encode_jpeg(&img, quality)
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
pub fn serve_catalog(shared: &Arc<Host>, store: &Store, p: AttachmentReadParams, reply: Responder) {
    let thread_id = p.thread_id.trim().to_owned();
    if thread_id.is_empty() {
        return reply.err(
            ErrorCode::InvalidParams,
            "invalid params: thread_id is required",
        );
    }
    if crate::util::is_ephemeral(&thread_id) {
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
    use crate::outbound::deferred::{project_frame, project_item};
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

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
