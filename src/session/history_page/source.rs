//! Where history is read from (spec `app-server.md` §5.8): the store for persisted
//! conversations, turn by turn and item by item with bodies streamed, with the live turn
//! of a running session overlaid from memory; or memory alone for ephemeral
//! conversations. Also projects one item the way a page carries it (images by
//! reference, large items cut with a `content:` reference).

use super::cut::{content_ref, project_cut, Cutter};
use super::{internal, Refusal, STREAM_CHUNK};
use crate::session::convert::{item_wire, TurnState};
use sha2::{Digest, Sha256};
use wuu_protocol::{ThreadItem, INLINE_ITEM_BYTES};
use wuu_store::{ItemHead, Store, TurnRow};

/// Where history is read from: the store for persisted conversations (with the live
/// turns of the session overlaid), or memory only for ephemeral ones.
pub struct Source<'a> {
    pub(super) thread_id: String,
    pub(super) store: Option<&'a Store>,
    /// Turns served from memory: all turns (ephemeral) or the live turn (overlay).
    pub(super) mem: &'a [TurnState],
}

impl<'a> Source<'a> {
    /// Reads `thread_id` from `store`, except turns present in `overlay` (served from
    /// memory).
    pub fn store(thread_id: &str, store: &'a Store, overlay: &'a [TurnState]) -> Self {
        Source {
            thread_id: thread_id.to_owned(),
            store: Some(store),
            mem: overlay,
        }
    }

    /// Reads an in-memory history (ephemeral conversations).
    pub fn memory(thread_id: &str, turns: &'a [TurnState]) -> Self {
        Source {
            thread_id: thread_id.to_owned(),
            store: None,
            mem: turns,
        }
    }

    pub(super) fn mem_turn(&self, turn_id: &str) -> Option<&'a TurnState> {
        self.mem.iter().find(|t| t.row.id == turn_id)
    }

    pub(super) fn turn_ordinal(&self, turn_id: &str) -> Result<Option<i64>, Refusal> {
        match self.store {
            Some(st) => st.turn_ordinal(&self.thread_id, turn_id).map_err(internal),
            None => Ok(self
                .mem
                .iter()
                .position(|t| t.row.id == turn_id)
                .map(|i| i as i64 + 1)),
        }
    }

    pub(super) fn turn_before(
        &self,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>, Refusal> {
        match self.store {
            Some(st) => {
                let found = st.turn_before(&self.thread_id, before).map_err(internal)?;
                Ok(found.map(|(o, row)| match self.mem_turn(&row.id) {
                    Some(live) => (o, live.row.clone()),
                    None => (o, row),
                }))
            }
            None => {
                let end = before
                    .map(|b| (b - 1).max(0) as usize)
                    .unwrap_or(self.mem.len())
                    .min(self.mem.len());
                Ok(end
                    .checked_sub(1)
                    .map(|i| (i as i64 + 1, self.mem[i].row.clone())))
            }
        }
    }

    pub(super) fn turn_after(&self, after: i64) -> Result<Option<(i64, TurnRow)>, Refusal> {
        match self.store {
            Some(st) => {
                let found = st.turn_after(&self.thread_id, after).map_err(internal)?;
                Ok(found.map(|(o, row)| match self.mem_turn(&row.id) {
                    Some(live) => (o, live.row.clone()),
                    None => (o, row),
                }))
            }
            None => Ok(self
                .mem
                .get(after.max(0) as usize)
                .map(|t| (after.max(0) + 1, t.row.clone()))),
        }
    }

    pub(super) fn heads(&self, turn_id: &str) -> Result<Vec<ItemHead>, Refusal> {
        if let Some(t) = self.mem_turn(turn_id) {
            return Ok(t.items.iter().map(mem_head).collect());
        }
        let Some(st) = self.store else {
            return Ok(vec![]);
        };
        let mut heads = st.item_heads(&self.thread_id, turn_id).map_err(internal)?;
        // Large bodies: read the flags from a cut copy (streamed, bounded).
        for h in heads.iter_mut().filter(|h| h.large) {
            if let Some((_, cut)) = self.cut_stream(turn_id, &h.id)? {
                if let Ok(item) = serde_json::from_slice::<ThreadItem>(&cut) {
                    h.terminal = item.terminal;
                    h.name = item.name.clone();
                    h.attachments = item.images.is_some() || item.files.is_some();
                }
            }
        }
        Ok(heads)
    }

    /// Streams the full item JSON to `f`. `Ok(false)` when the item is gone.
    fn stream_full(
        &self,
        turn_id: &str,
        item_id: &str,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Refusal> {
        if let Some(t) = self.mem_turn(turn_id) {
            return Ok(match t.items.iter().find(|i| i.id == item_id) {
                Some(item) => {
                    f(&canonical_json(item));
                    true
                }
                None => false,
            });
        }
        match self.store {
            Some(st) => st
                .stream_item_body(&self.thread_id, item_id, STREAM_CHUNK, |b| f(b))
                .map_err(internal),
            None => Ok(false),
        }
    }

    /// Streams an item through the string cutter: `(sha256hex of the full JSON, cut
    /// JSON)`.
    fn cut_stream(
        &self,
        turn_id: &str,
        item_id: &str,
    ) -> Result<Option<(String, Vec<u8>)>, Refusal> {
        let mut hasher = Sha256::new();
        let mut cutter = Cutter::default();
        let found = self.stream_full(turn_id, item_id, &mut |b| {
            hasher.update(b);
            cutter.feed(b);
        })?;
        Ok(found.then(|| (hex(&hasher.finalize()), cutter.out)))
    }

    /// The full item of `head`, from memory or the store.
    fn full_item(&self, turn_id: &str, item_id: &str) -> Result<Option<ThreadItem>, Refusal> {
        Ok(match self.mem_turn(turn_id) {
            Some(t) => t.items.iter().find(|i| i.id == item_id).cloned(),
            None => match self.store {
                Some(st) => st
                    .get_item(&self.thread_id, item_id)
                    .map_err(internal)?
                    .map(|r| item_wire(&r)),
                None => None,
            },
        })
    }

    /// The wire item of `head` as a page carries it, and its serialized size: large
    /// images as `remote_ref`, then — if still larger than [`INLINE_ITEM_BYTES`] — cut,
    /// with a `remote_content_ref` to the full stored item.
    pub(super) fn load(
        &self,
        turn_id: &str,
        head: &ItemHead,
    ) -> Result<Option<(ThreadItem, usize)>, Refusal> {
        let mut cut: Option<(String, Vec<u8>)> = None;
        let mut full: Option<ThreadItem> = None;
        if !head.large {
            full = self.full_item(turn_id, &head.id)?;
            if full.is_none() {
                return Ok(None);
            }
        } else {
            let Some((sha, bytes)) = self.cut_stream(turn_id, &head.id)? else {
                return Ok(None);
            };
            // An item carrying images: its images go by reference, which may leave it
            // small enough to send whole (the cut copy would have cut the image data).
            let media = serde_json::from_slice::<ThreadItem>(&bytes)
                .map(|i| crate::outbound::deferred::has_media(&i))
                .unwrap_or(false);
            if media {
                full = self.full_item(turn_id, &head.id)?;
            }
            cut = Some((sha, bytes));
        }
        if let Some(mut item) = full {
            crate::outbound::deferred::project_item(&mut item, &self.thread_id, turn_id);
            let bytes = serde_json::to_vec(&item).unwrap_or_default();
            if bytes.len() <= INLINE_ITEM_BYTES {
                return Ok(Some((item, bytes.len())));
            }
            // Still large: cut the projected item; the reference names the stored one.
            let sha = match cut.take() {
                Some((sha, _)) => sha,
                None => {
                    let mut h = Sha256::new();
                    if !self.stream_full(turn_id, &head.id, &mut |b| h.update(b))? {
                        return Ok(None);
                    }
                    hex(&h.finalize())
                }
            };
            let mut cutter = Cutter::default();
            cutter.feed(&bytes);
            cut = Some((sha, cutter.out));
        }
        let Some((sha, cut)) = cut else {
            return Ok(None);
        };
        let mut item = serde_json::from_slice::<ThreadItem>(&cut).unwrap_or_else(|e| {
            let mut i = ThreadItem::new(head.id.clone(), &head.item_type);
            i.status = Some(wuu_store::item_damage::STATUS.into());
            i.error = Some(format!("stored item could not be read: {e}"));
            i
        });
        item.seq = Some(head.seq).filter(|s| *s > 0);
        project_cut(&mut item);
        item.remote_content_ref = Some(content_ref(&self.thread_id, turn_id, &head.id, &sha));
        let size = serde_json::to_vec(&item).map(|v| v.len()).unwrap_or(0);
        Ok(Some((item, size)))
    }
}

/// The JSON of an in-memory item as the store keeps it (`serde_json::Value` text).
pub(super) fn canonical_json(item: &ThreadItem) -> Vec<u8> {
    let mut item = item.clone();
    item.seq = None;
    serde_json::to_value(&item)
        .map(|v| v.to_string().into_bytes())
        .unwrap_or_default()
}

fn mem_head(item: &ThreadItem) -> ItemHead {
    let len = canonical_json(item).len() as u64;
    ItemHead {
        id: item.id.clone(),
        item_type: item.item_type.clone(),
        status: item.status.clone(),
        seq: item.seq.unwrap_or(0),
        len,
        terminal: item.terminal,
        name: item.name.clone(),
        attachments: item.images.is_some() || item.files.is_some(),
        large: len > INLINE_ITEM_BYTES as u64,
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
