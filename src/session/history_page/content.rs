//! `thread/content/read` (spec `app-server.md` §5.9): serves the full JSON of an item
//! that a page sent cut, as base64 slices, after checking that the item still hashes to
//! the sha256 of its `content:` reference. The hash of a stored body is cached so a
//! chunked read does not rehash a large body for every chunk.

use super::source::{canonical_json, hex, Source};
use super::{internal, Refusal, CONTENT_CHANGED, STREAM_CHUNK};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::OnceLock;
use wuu_protocol::{ContentReadParams, ContentReadResult, ErrorCode, CONTENT_CHUNK_CHARS};

type ShaKey = (String, String, u64, Vec<u8>);

fn sha_cache() -> &'static Mutex<HashMap<ShaKey, String>> {
    static CACHE: OnceLock<Mutex<HashMap<ShaKey, String>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// `thread/content/read`: a base64 slice (≤ [`CONTENT_CHUNK_CHARS`]) of the full item
/// JSON. The hash of a stored item is cached per (item, size, first and last 256 bytes),
/// so a chunked read does not rehash a large body for every chunk.
pub fn content_read(src: &Source<'_>, p: ContentReadParams) -> Result<ContentReadResult, Refusal> {
    let changed = || (ErrorCode::Error, CONTENT_CHANGED.to_owned());
    let (turn_id, item_id) = (p.turn_id.trim(), p.item_id.trim());
    let want = p.sha256.trim().to_ascii_lowercase();
    let offset = p.offset.unwrap_or(0);
    let (total_bytes, full): (u64, Option<Vec<u8>>) = match (src.mem_turn(turn_id), src.store) {
        (None, None) => return Err(changed()),
        (Some(t), _) => {
            let item = t
                .items
                .iter()
                .find(|i| i.id == item_id)
                .ok_or_else(changed)?;
            let bytes = canonical_json(item);
            if hex(&Sha256::digest(&bytes)) != want {
                return Err(changed());
            }
            (bytes.len() as u64, Some(bytes))
        }
        (None, Some(st)) => {
            let (owner, len) = st
                .item_locator(&src.thread_id, item_id)
                .map_err(internal)?
                .ok_or_else(changed)?;
            if owner != turn_id {
                return Err(changed());
            }
            let head = st
                .item_body_range(&src.thread_id, item_id, 0, 256)
                .map_err(internal)?
                .map(|x| x.0)
                .unwrap_or_default();
            let tail = st
                .item_body_range(&src.thread_id, item_id, len.saturating_sub(256), 256)
                .map_err(internal)?
                .map(|x| x.0)
                .unwrap_or_default();
            let key = (
                src.thread_id.clone(),
                item_id.to_owned(),
                len,
                [head, tail].concat(),
            );
            let cached = sha_cache().lock().get(&key).cloned();
            let sha = match cached {
                Some(s) => s,
                None => {
                    let mut h = Sha256::new();
                    let found = st
                        .stream_item_body(&src.thread_id, item_id, STREAM_CHUNK, |b| h.update(b))
                        .map_err(internal)?;
                    if !found {
                        return Err(changed());
                    }
                    let s = hex(&h.finalize());
                    let mut c = sha_cache().lock();
                    if c.len() >= 256 {
                        c.clear();
                    }
                    c.insert(key, s.clone());
                    s
                }
            };
            if sha != want {
                return Err(changed());
            }
            (len, None)
        }
    };
    let total = total_bytes.div_ceil(3) * 4;
    if offset > total {
        return Err((
            ErrorCode::InvalidParams,
            format!("invalid params: offset {offset} is beyond the content ({total} characters)"),
        ));
    }
    let chars = (CONTENT_CHUNK_CHARS as u64).min(total - offset) as usize;
    let skip = (offset % 4) as usize;
    let byte_start = offset / 4 * 3;
    let byte_len = (skip + chars).div_ceil(4) * 3;
    let bytes = match (full, src.store) {
        (Some(b), _) => {
            let s = (byte_start as usize).min(b.len());
            b[s..(s + byte_len).min(b.len())].to_vec()
        }
        (None, Some(st)) => {
            st.item_body_range(&src.thread_id, item_id, byte_start, byte_len)
                .map_err(internal)?
                .ok_or_else(changed)?
                .0
        }
        (None, None) => return Err(changed()),
    };
    let enc = STANDARD.encode(&bytes);
    let data = enc
        .get(skip..(skip + chars).min(enc.len()))
        .unwrap_or("")
        .to_owned();
    Ok(ContentReadResult {
        data,
        total,
        offset,
        content_type: "application/json".into(),
    })
}
