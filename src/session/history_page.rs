//! Compact, paged conversation history for clients (seed 003 "分页读取会话历史"; spec
//! `app-server.md` §5.8–§5.9 with the seed's limits: pages of at most
//! [`HISTORY_PAGE_TURNS`] turns and [`HISTORY_PAGE_BYTES`] of serialized items).
//!
//! - **Two kinds of pages.** *Compact* pages (`thread/resume {conversation_history:
//!   true}` and their opaque cursors) fold tool activity (below) and hold ≤
//!   [`HISTORY_PAGE_TURNS`] turns / [`HISTORY_PAGE_BYTES`]. *Item* pages (`history_page:
//!   true`, and every read of a Go-format cursor `turn:<id>` / `item:<base64url [turn,
//!   item]>`) hold every item, ≤ [`ITEM_PAGE_TURNS`] turns / [`ITEM_PAGE_BYTES`], and
//!   answer Go-format cursors. The cursor's format decides the kind of the next page.
//! - **Images.** In both kinds, images over 16 KiB of base64 are sent as `remote_ref`
//!   (see [`super::attachments`]), read with `thread/attachment/read`.
//! - **Folding** (compact pages only). In a finished turn, each run of consecutive tool calls, reasoning and
//!   non-final assistant narration becomes one `process_summary` item (`summary:
//!   {item_count, tool_count, tools, first_item_id, last_item_id}`, `activity:
//!   {last_item_id}`, id `<first_item_id>-summary`). User messages, final answers
//!   (`agent_message` with `terminal`), errors, items carrying attachments and unknown
//!   types stay visible. A running turn keeps its live items. Folding happens before
//!   sizing, so a summary is one element and never split.
//! - **Pages** walk backwards from a boundary, element by element; a page may split a
//!   turn. The cursor (`base64url(JSON [turn_id, item_id | null])`) names the first
//!   retained element; a cursor whose element no longer exists is refused with
//!   `history changed; reopen the conversation`.
//! - **Large items.** An item whose serialized form exceeds [`INLINE_ITEM_BYTES`] is
//!   sent cut (every string longer than [`CUT_TEXT_BYTES`] bytes is cut and ends in `…`;
//!   `arguments`, `content_parts`, `files` cleared; `images` and result content capped
//!   to 4) with `remote_content_ref = "content:" + base64url(JSON [thread_id, turn_id,
//!   item_id, sha256hex])`, the hash being over the full item JSON that
//!   `thread/content/read` serves (the stored item body).
//!
//! Persisted conversations are read from the store turn by turn and item by item
//! (bodies streamed), so the memory to serve a page is bounded by the page, not by the
//! history. Ephemeral conversations, and the live turn of a running conversation, are
//! read from the session's memory.

use super::convert::{item_wire, thread_wire, turn_wire, TurnState};
use super::Session;
use crate::outbound::Responder;
use crate::session::Host;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use wuu_protocol::*;
use wuu_store::{ItemHead, Store, TurnRow};

/// Error text of a cursor whose boundary no longer exists (spec §5.8).
pub const HISTORY_CHANGED: &str = "history changed; reopen the conversation";
/// Error text of a content read whose item changed or vanished (spec §5.9).
pub const CONTENT_CHANGED: &str = "attachment changed or was removed";
/// Most items one `thread/activity/read` page returns (besides the byte limit).
pub const ACTIVITY_PAGE_ITEMS: usize = 200;
/// Chunk size of streamed item bodies.
const STREAM_CHUNK: usize = 64 * 1024;

type Refusal = (ErrorCode, String);

fn internal(e: impl std::fmt::Display) -> Refusal {
    (ErrorCode::InternalError, format!("store: {e}"))
}

fn stale() -> Refusal {
    (ErrorCode::Error, HISTORY_CHANGED.to_owned())
}

// ---------------------------------------------------------------------------------------
// Sources: the store (range reads) with an optional in-memory overlay.
// ---------------------------------------------------------------------------------------

/// Where history is read from: the store for persisted conversations (with the live
/// turns of the session overlaid), or memory only for ephemeral ones.
pub struct Source<'a> {
    thread_id: String,
    store: Option<&'a Store>,
    /// Turns served from memory: all turns (ephemeral) or the live turn (overlay).
    mem: &'a [TurnState],
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

    fn mem_turn(&self, turn_id: &str) -> Option<&'a TurnState> {
        self.mem.iter().find(|t| t.row.id == turn_id)
    }

    fn turn_ordinal(&self, turn_id: &str) -> Result<Option<i64>, Refusal> {
        match self.store {
            Some(st) => st.turn_ordinal(&self.thread_id, turn_id).map_err(internal),
            None => Ok(self
                .mem
                .iter()
                .position(|t| t.row.id == turn_id)
                .map(|i| i as i64 + 1)),
        }
    }

    fn turn_before(&self, before: Option<i64>) -> Result<Option<(i64, TurnRow)>, Refusal> {
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

    fn turn_after(&self, after: i64) -> Result<Option<(i64, TurnRow)>, Refusal> {
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

    fn heads(&self, turn_id: &str) -> Result<Vec<ItemHead>, Refusal> {
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
    fn load(&self, turn_id: &str, head: &ItemHead) -> Result<Option<(ThreadItem, usize)>, Refusal> {
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
fn canonical_json(item: &ThreadItem) -> Vec<u8> {
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `content:` reference (spec §5.9).
pub fn content_ref(thread_id: &str, turn_id: &str, item_id: &str, sha: &str) -> String {
    format!(
        "content:{}",
        URL_SAFE_NO_PAD.encode(json!([thread_id, turn_id, item_id, sha]).to_string())
    )
}

/// Applies the field rules of a cut item (spec §5.8) after its strings were cut.
fn project_cut(item: &mut ThreadItem) {
    item.arguments = None;
    item.content_parts = None;
    item.files = None;
    if let Some(images) = item.images.as_mut() {
        images.truncate(4);
    }
    if let Some(content) = item
        .result_detail
        .as_mut()
        .and_then(|d| d.get_mut("content"))
        .and_then(Value::as_array_mut)
    {
        content.truncate(4);
    }
}

/// A streaming JSON rewriter that cuts every string value longer than
/// [`CUT_TEXT_BYTES`] (counted in JSON-encoded bytes, never splitting a character or an
/// escape) and ends it with `…`. Output stays valid JSON; its size is bounded by the
/// structure, not by the string lengths.
#[derive(Default)]
pub struct Cutter {
    /// The rewritten JSON so far.
    pub out: Vec<u8>,
    in_str: bool,
    unit: Vec<u8>,
    need: usize,
    str_len: usize,
    cutting: bool,
}

impl Cutter {
    /// Feeds more input bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn emit_unit(&mut self) {
        if !self.cutting {
            if self.str_len + self.unit.len() > CUT_TEXT_BYTES {
                self.cutting = true;
                self.out.extend_from_slice("…".as_bytes());
            } else {
                self.str_len += self.unit.len();
                self.out.extend_from_slice(&self.unit);
            }
        }
        self.unit.clear();
        self.need = 0;
    }

    fn byte(&mut self, b: u8) {
        if !self.in_str {
            self.out.push(b);
            if b == b'"' {
                self.in_str = true;
                self.str_len = 0;
                self.cutting = false;
            }
            return;
        }
        if !self.unit.is_empty() {
            self.unit.push(b);
            if self.unit[0] == b'\\' {
                let n = self.unit.len();
                let done = match n {
                    2 => b != b'u',
                    6 => {
                        let hexs = std::str::from_utf8(&self.unit[2..6]).unwrap_or("0");
                        let cp = u32::from_str_radix(hexs, 16).unwrap_or(0);
                        !(0xD800..0xDC00).contains(&cp)
                    }
                    7 => b != b'\\',
                    8 => b != b'u',
                    12 => true,
                    _ => false,
                };
                if done {
                    self.emit_unit();
                }
            } else if self.unit.len() >= self.need {
                self.emit_unit();
            }
            return;
        }
        match b {
            b'"' => {
                self.in_str = false;
                self.out.push(b);
            }
            b'\\' => self.unit.push(b),
            0x80.. => {
                self.need = match b {
                    0xF0.. => 4,
                    0xE0.. => 3,
                    _ => 2,
                };
                self.unit.push(b);
            }
            _ => {
                self.unit.push(b);
                self.emit_unit();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Folding
// ---------------------------------------------------------------------------------------

/// One element of a folded turn: a visible item or a summary of a run of items.
#[derive(Debug, Clone)]
enum Element {
    Item(ItemHead),
    Summary(Vec<ItemHead>),
}

impl Element {
    fn id(&self) -> String {
        match self {
            Element::Item(h) => h.id.clone(),
            Element::Summary(hs) => summary_id(&hs[0].id),
        }
    }
}

fn summary_id(first: &str) -> String {
    format!("{first}-summary")
}

fn foldable(h: &ItemHead) -> bool {
    if h.attachments {
        return false;
    }
    match h.item_type.as_str() {
        "tool_call" | "reasoning" | "stream_reconnect" => true,
        "agent_message" => !h.terminal,
        _ => false,
    }
}

fn fold(row: &TurnRow, heads: Vec<ItemHead>) -> Vec<Element> {
    if row.status == "in_progress" {
        return heads.into_iter().map(Element::Item).collect();
    }
    let mut out: Vec<Element> = vec![];
    let mut run: Vec<ItemHead> = vec![];
    for h in heads {
        if foldable(&h) {
            run.push(h);
        } else {
            if !run.is_empty() {
                out.push(Element::Summary(std::mem::take(&mut run)));
            }
            out.push(Element::Item(h));
        }
    }
    if !run.is_empty() {
        out.push(Element::Summary(run));
    }
    out
}

/// The `process_summary` item of a folded run.
fn summary_item(heads: &[ItemHead]) -> ThreadItem {
    let first = heads[0].id.clone();
    let last = heads[heads.len() - 1].id.clone();
    let mut tools: Vec<String> = vec![];
    let mut tool_count = 0u32;
    for h in heads.iter().filter(|h| h.item_type == "tool_call") {
        tool_count += 1;
        if let Some(n) = &h.name {
            if !tools.contains(n) {
                tools.push(n.clone());
            }
        }
    }
    let failed = heads.iter().any(|h| h.status.as_deref() == Some("failed"));
    let mut item = ThreadItem::new(summary_id(&first), "process_summary");
    item.status = Some(if failed { "failed" } else { "completed" }.into());
    item.text = Some(if tool_count > 0 {
        format!(
            "{tool_count} tool call{} ({})",
            if tool_count == 1 { "" } else { "s" },
            tools.join(", ")
        )
    } else {
        format!(
            "{} step{}",
            heads.len(),
            if heads.len() == 1 { "" } else { "s" }
        )
    });
    item.summary = serde_json::to_value(ProcessSummary {
        item_count: heads.len() as u32,
        tool_count,
        tools,
        first_item_id: first,
        last_item_id: last.clone(),
    })
    .ok();
    item.activity = Some(ItemActivity { last_item_id: last });
    item
}

// ---------------------------------------------------------------------------------------
// Cursors and pages
// ---------------------------------------------------------------------------------------

/// What a page holds and how its cursors look (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageMode {
    /// Folded activity, ≤ 100 turns / 1 MiB, opaque cursors (`conversation_history`).
    Compact,
    /// Every item, ≤ 20 turns / 256 KiB, Go-format cursors (`history_page`).
    Items,
}

impl PageMode {
    fn max_turns(self) -> usize {
        match self {
            PageMode::Compact => HISTORY_PAGE_TURNS,
            PageMode::Items => ITEM_PAGE_TURNS,
        }
    }

    fn max_bytes(self) -> usize {
        match self {
            PageMode::Compact => HISTORY_PAGE_BYTES,
            PageMode::Items => ITEM_PAGE_BYTES,
        }
    }

    /// The elements of a turn as this kind of page shows them.
    fn elements(self, row: &TurnRow, heads: Vec<ItemHead>) -> Vec<Element> {
        match self {
            PageMode::Compact => fold(row, heads),
            PageMode::Items => heads.into_iter().map(Element::Item).collect(),
        }
    }

    /// The cursor naming the first retained element (`item_id: None` = the turn start).
    pub fn cursor(self, turn_id: &str, item_id: Option<&str>) -> String {
        match (self, item_id) {
            (PageMode::Compact, _) => encode_cursor(turn_id, item_id),
            (PageMode::Items, None) => format!("turn:{turn_id}"),
            (PageMode::Items, Some(i)) => format!(
                "item:{}",
                URL_SAFE_NO_PAD.encode(json!([turn_id, i]).to_string())
            ),
        }
    }
}

/// Encodes a compact-page cursor: `base64url(JSON [turn_id, item_id | null])`.
pub fn encode_cursor(turn_id: &str, item_id: Option<&str>) -> String {
    URL_SAFE_NO_PAD.encode(json!([turn_id, item_id]).to_string())
}

/// Decodes a history cursor of either kind: `(turn_id, item_id, kind of page)`.
/// Errors: `invalid history cursor`.
pub fn decode_any_cursor(cursor: &str) -> Result<(String, Option<String>, PageMode), Refusal> {
    let bad = || {
        (
            ErrorCode::InvalidParams,
            format!(
                "invalid params: invalid history cursor {:?}",
                crate::util::clip(cursor, 80)
            ),
        )
    };
    let c = cursor.trim();
    if let Some(turn) = c.strip_prefix("turn:") {
        if turn.is_empty() {
            return Err(bad());
        }
        return Ok((turn.to_owned(), None, PageMode::Items));
    }
    if let Some(b) = c.strip_prefix("item:") {
        let bytes = URL_SAFE_NO_PAD
            .decode(b.trim_end_matches('='))
            .map_err(|_| bad())?;
        let (turn, item): (String, String) = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        if turn.is_empty() || item.is_empty() {
            return Err(bad());
        }
        return Ok((turn, Some(item), PageMode::Items));
    }
    let (turn, item) = decode_cursor(c)?;
    Ok((turn, item, PageMode::Compact))
}

/// Decodes a compact-page cursor. Errors: `invalid history cursor`.
pub fn decode_cursor(cursor: &str) -> Result<(String, Option<String>), Refusal> {
    let bad = || {
        (
            ErrorCode::InvalidParams,
            format!(
                "invalid params: invalid history cursor {:?}",
                crate::util::clip(cursor, 80)
            ),
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).map_err(|_| bad())?;
    let v: (String, Option<String>) = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.0.is_empty() {
        return Err(bad());
    }
    Ok(v)
}

/// One page: turns oldest first, and the cursor of the next older page.
#[derive(Debug, Clone)]
pub struct Page {
    /// Turns, oldest first (the first may be partial).
    pub turns: Vec<Turn>,
    /// Cursor of the next older page; `None` at the start of the conversation.
    pub cursor: Option<String>,
    /// Serialized size of the page's items, in bytes.
    pub bytes: usize,
}

fn element_item(
    src: &Source<'_>,
    turn_id: &str,
    el: &Element,
) -> Result<(ThreadItem, usize), Refusal> {
    match el {
        Element::Summary(hs) => {
            let item = summary_item(hs);
            let n = serde_json::to_vec(&item).map(|v| v.len()).unwrap_or(0);
            Ok((item, n))
        }
        Element::Item(h) => match src.load(turn_id, h)? {
            Some(x) => Ok(x),
            // Removed between the listing and the read.
            None => Err(stale()),
        },
    }
}

/// Reads the page that ends just before `boundary` (the newest page when `None`).
/// Errors: [`HISTORY_CHANGED`] when the boundary no longer exists.
pub fn read_page(
    src: &Source<'_>,
    boundary: Option<(String, Option<String>)>,
    mode: PageMode,
) -> Result<Page, Refusal> {
    // The turn being walked, its ordinal, its folded elements and how many of them are
    // still to take (elements[..end]).
    let mut cur: Option<(i64, TurnRow, Vec<Element>, usize)> = match boundary {
        None => match src.turn_before(None)? {
            Some((o, row)) => {
                let els = mode.elements(&row, src.heads(&row.id)?);
                let n = els.len();
                Some((o, row, els, n))
            }
            None => None,
        },
        Some((turn_id, item)) => {
            let ord = src.turn_ordinal(&turn_id)?.ok_or_else(stale)?;
            match item {
                None => src.turn_before(Some(ord))?.map(|(o, row)| {
                    (o, row, vec![], usize::MAX) // filled below
                }),
                Some(item_id) => {
                    let Some((o, row)) = src.turn_before(Some(ord + 1))? else {
                        return Err(stale());
                    };
                    if row.id != turn_id {
                        return Err(stale());
                    }
                    let els = mode.elements(&row, src.heads(&row.id)?);
                    let pos = els
                        .iter()
                        .position(|e| e.id() == item_id)
                        .ok_or_else(stale)?;
                    Some((o, row, els, pos))
                }
            }
        }
    };
    if let Some((_, row, els, end)) = cur.as_mut() {
        if *end == usize::MAX {
            *els = mode.elements(row, src.heads(&row.id)?);
            *end = els.len();
        }
    }
    let mut page_turns: Vec<TurnState> = vec![]; // newest first, items newest first
    let mut bytes = 0usize;
    let mut cursor = None;
    'walk: while let Some((ord, row, els, end)) = cur.take() {
        let mut taken: Vec<ThreadItem> = vec![];
        let mut first_taken: Option<usize> = None;
        if page_turns.len() >= mode.max_turns() {
            // Nothing of this turn fits: the page starts at the next newer turn.
            cursor = page_turns.last().map(|t| mode.cursor(&t.row.id, None));
            break 'walk;
        }
        for i in (0..end).rev() {
            let (item, n) = element_item(src, &row.id, &els[i])?;
            if bytes + n > mode.max_bytes() && (bytes > 0 || !page_turns.is_empty()) {
                // Stop: the first retained element is i + 1 of this turn, or the start
                // of the newer turn when nothing of this one was taken.
                cursor = match first_taken {
                    Some(j) => Some(mode.cursor(&row.id, (j > 0).then(|| els[j].id()).as_deref())),
                    None => page_turns.last().map(|t| mode.cursor(&t.row.id, None)),
                };
                if first_taken.is_some() {
                    taken.reverse();
                    page_turns.push(TurnState {
                        row: row.clone(),
                        items: taken,
                    });
                }
                break 'walk;
            }
            bytes += n;
            taken.push(item);
            first_taken = Some(i);
        }
        taken.reverse();
        // A turn with no elements (e.g. an empty continue turn) is shown as such; a
        // boundary at the first element of a turn contributes nothing.
        if !taken.is_empty() || els.is_empty() {
            page_turns.push(TurnState {
                row: row.clone(),
                items: taken,
            });
        }
        cur = match src.turn_before(Some(ord))? {
            Some((o, r)) => {
                let e = mode.elements(&r, src.heads(&r.id)?);
                let n = e.len();
                Some((o, r, e, n))
            }
            None => None,
        };
    }
    page_turns.reverse();
    Ok(Page {
        turns: page_turns.iter().map(turn_wire).collect(),
        cursor,
        bytes,
    })
}

// ---------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------

impl Session {
    /// The compact newest page for `thread/resume {conversation_history: true}`: the
    /// thread snapshot with `turns` = the newest page, `history_paged: true` and
    /// `history_cursor` when older history exists.
    pub fn paged_thread_wire(&self, mode: PageMode) -> Result<Thread, Refusal> {
        let running = self.running.load(Ordering::SeqCst);
        let live: &[TurnState] = match self.turns.last() {
            Some(t) if t.row.status == "in_progress" => std::slice::from_ref(t),
            _ => &[],
        };
        let page = match self.store.as_ref() {
            Some(st) => read_page(&Source::store(&self.id, st, live), None, mode)?,
            None => read_page(&Source::memory(&self.id, &self.turns), None, mode)?,
        };
        let mut thread = thread_wire(&self.thread, &[], running);
        thread.latest_completed_turn_id = if self.history_loaded {
            self.turns
                .iter()
                .rev()
                .find(|t| t.row.status != "in_progress")
                .map(|t| t.row.id.clone())
        } else {
            // Not loaded (a revived session serving a page): the newest page holds the
            // latest turns.
            page.turns
                .iter()
                .rev()
                .find(|t| t.status != "in_progress")
                .map(|t| t.id.clone())
        };
        thread.turns = page.turns;
        thread.history_cursor = page.cursor;
        thread.history_paged = true;
        Ok(thread)
    }
}

/// Serves `thread/history/read`, `thread/activity/read`, `thread/content/read` for a
/// persisted conversation from the catalog pool's store connection (never reviving or
/// blocking its session). Ephemeral conversations are forwarded to their session.
pub fn serve_catalog(shared: &Arc<Host>, store: &Store, req: ClientRequest, reply: Responder) {
    let thread_id = match &req {
        ClientRequest::ThreadHistoryRead(p) => p.thread_id.trim().to_owned(),
        ClientRequest::ThreadActivityRead(p) => p.thread_id.trim().to_owned(),
        ClientRequest::ThreadContentRead(p) => p.thread_id.trim().to_owned(),
        ClientRequest::ThreadPreview(p) => p.thread_id.trim().to_owned(),
        other => {
            return reply.err(
                ErrorCode::InternalError,
                format!("{} is not a history method", other.method()),
            )
        }
    };
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
            super::SessionMsg::Request { req, reply },
        );
    }
    match store.get_thread(&thread_id) {
        Ok(Some(_)) => {}
        Ok(None) => {
            return reply.err(
                ErrorCode::ThreadNotFound,
                format!("thread {thread_id:?} not found"),
            )
        }
        Err(e) => return reply.err(ErrorCode::InternalError, format!("store: {e}")),
    }
    serve(&Source::store(&thread_id, store, &[]), req, reply);
}

/// Serves the history read methods of an ephemeral conversation from its session.
pub fn serve_session(s: &Session, req: ClientRequest, reply: Responder) {
    match s.store.as_ref() {
        Some(st) => serve(&Source::store(&s.id, st, &[]), req, reply),
        None => serve(&Source::memory(&s.id, &s.turns), req, reply),
    }
}

fn serve(src: &Source<'_>, req: ClientRequest, reply: Responder) {
    let result = match req {
        ClientRequest::ThreadHistoryRead(p) => history_read(src, p).map(serde_json::to_value),
        ClientRequest::ThreadActivityRead(p) => activity_read(src, p).map(serde_json::to_value),
        ClientRequest::ThreadContentRead(p) => content_read(src, p).map(serde_json::to_value),
        ClientRequest::ThreadPreview(p) => preview(src, &p).map(serde_json::to_value),
        ClientRequest::ThreadAttachmentRead(p) => {
            let item = src
                .mem
                .iter()
                .find(|t| t.row.id == p.turn_id.trim())
                .and_then(|t| t.items.iter().find(|i| i.id == p.item_id.trim()));
            match item {
                Some(i) => super::attachments::read_from_item(i, &p).map(serde_json::to_value),
                None => Err((
                    ErrorCode::Error,
                    super::attachments::ATTACHMENT_CHANGED.to_owned(),
                )),
            }
        }
        other => Err((
            ErrorCode::InternalError,
            format!("{} is not a history method", other.method()),
        )),
    };
    match result {
        Ok(Ok(v)) => reply.ok(&v),
        Ok(Err(e)) => reply.err(ErrorCode::InternalError, e.to_string()),
        Err((c, m)) => reply.err(c, m),
    }
}

/// Default and most turns of `thread/preview`.
pub const PREVIEW_TURNS: (u32, u32) = (3, 20);

/// `thread/preview`: the first turns, oldest first, every item (projected as in an item
/// page), within [`ITEM_PAGE_BYTES`] (a turn that does not fit is cut at an item).
pub fn preview(src: &Source<'_>, p: &ThreadPreviewParams) -> Result<ThreadPreviewResult, Refusal> {
    let limit = p.limit.unwrap_or(PREVIEW_TURNS.0).clamp(1, PREVIEW_TURNS.1) as usize;
    let mut turns = vec![];
    let mut bytes = 0usize;
    let mut after = 0i64;
    'turns: while turns.len() < limit {
        let Some((ord, row)) = src.turn_after(after)? else {
            break;
        };
        after = ord;
        let mut items = vec![];
        for h in src.heads(&row.id)? {
            let Some((item, n)) = src.load(&row.id, &h)? else {
                continue;
            };
            if bytes + n > ITEM_PAGE_BYTES && bytes > 0 {
                turns.push(turn_wire(&TurnState { row, items }));
                break 'turns;
            }
            bytes += n;
            items.push(item);
        }
        turns.push(turn_wire(&TurnState { row, items }));
    }
    Ok(ThreadPreviewResult { turns })
}

/// `thread/history/read`: the page older than `cursor`.
pub fn history_read(src: &Source<'_>, p: HistoryReadParams) -> Result<HistoryReadResult, Refusal> {
    let (turn, item, mode) = decode_any_cursor(&p.cursor)?;
    let page = read_page(src, Some((turn, item)), mode)?;
    Ok(HistoryReadResult {
        thread_id: src.thread_id.clone(),
        cursor: p.cursor,
        turns: page.turns,
        history_cursor: page.cursor,
    })
}

/// `thread/activity/read`: one page of the items folded behind a summary, oldest
/// first; `next_cursor` = `base64url(JSON [turn_id, item_id])` of the next item.
pub fn activity_read(
    src: &Source<'_>,
    p: ActivityReadParams,
) -> Result<ActivityReadResult, Refusal> {
    let turn_id = p.turn_id.trim();
    let ord = src.turn_ordinal(turn_id)?.ok_or_else(stale)?;
    let (_, row) = src.turn_before(Some(ord + 1))?.ok_or_else(stale)?;
    if row.id != turn_id {
        return Err(stale());
    }
    let first = p.item_id.trim();
    let first = first.strip_suffix("-summary").unwrap_or(first);
    let heads = src.heads(turn_id)?;
    let start = heads.iter().position(|h| h.id == first).ok_or_else(stale)?;
    let last = heads
        .iter()
        .position(|h| h.id == p.last_item_id.trim())
        .ok_or_else(stale)?;
    if last < start {
        return Err(stale());
    }
    let mut from = start;
    if let Some(c) = p.cursor.as_deref().filter(|c| !c.trim().is_empty()) {
        let (ct, ci) = decode_cursor(c)?;
        let ci = ci.ok_or_else(|| {
            (
                ErrorCode::InvalidParams,
                "invalid params: invalid activity cursor".to_owned(),
            )
        })?;
        if ct != turn_id {
            return Err((
                ErrorCode::InvalidParams,
                "invalid params: the cursor belongs to another turn".to_owned(),
            ));
        }
        from = heads.iter().position(|h| h.id == ci).ok_or_else(stale)?;
        if from < start || from > last {
            return Err(stale());
        }
    }
    let mut items = vec![];
    let mut bytes = 0usize;
    let mut next = None;
    for (i, h) in heads.iter().enumerate().take(last + 1).skip(from) {
        let (item, n) = src.load(turn_id, h)?.ok_or_else(stale)?;
        if !items.is_empty()
            && (bytes + n > HISTORY_PAGE_BYTES || items.len() >= ACTIVITY_PAGE_ITEMS)
        {
            next = Some(encode_cursor(turn_id, Some(&heads[i].id)));
            break;
        }
        bytes += n;
        items.push(item);
    }
    Ok(ActivityReadResult {
        turn: turn_wire(&TurnState { row, items }),
        next_cursor: next,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(s: &str) -> String {
        let mut c = Cutter::default();
        for chunk in s.as_bytes().chunks(7) {
            c.feed(chunk);
        }
        String::from_utf8(c.out).unwrap()
    }

    #[test]
    fn cutter_keeps_short_strings_and_cuts_long_ones_validly() {
        let v = json!({"a": "short", "b": "x".repeat(5000), "c": [1, "é".repeat(3000)],
            "d": "\u{1F600}".repeat(1000), "e": "\"\\\n".repeat(2000)});
        let out = cut(&v.to_string());
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["a"], "short");
        for s in [&back["b"], &back["c"][1], &back["d"], &back["e"]] {
            let s = s.as_str().unwrap();
            assert!(s.ends_with('…'), "{s}");
            assert!(s.len() <= CUT_TEXT_BYTES + 4);
        }
        assert!(out.len() < 12_000);
    }

    #[test]
    fn cursor_round_trip_and_garbage() {
        let c = encode_cursor("t1", Some("t1-item-0002"));
        assert_eq!(
            decode_cursor(&c).unwrap(),
            ("t1".to_owned(), Some("t1-item-0002".to_owned()))
        );
        let c = encode_cursor("t1", None);
        assert_eq!(decode_cursor(&c).unwrap(), ("t1".to_owned(), None));
        assert!(decode_cursor("nope!").is_err());
        assert!(decode_cursor(&URL_SAFE_NO_PAD.encode("[1,2]")).is_err());
    }

    fn head(id: &str, ty: &str, terminal: bool) -> ItemHead {
        ItemHead {
            id: id.into(),
            item_type: ty.into(),
            status: Some("completed".into()),
            seq: 0,
            len: 10,
            terminal,
            name: Some("bash".into()).filter(|_| ty == "tool_call"),
            attachments: false,
            large: false,
        }
    }

    #[test]
    fn folding_keeps_replies_and_folds_runs() {
        let row = TurnRow::new("th", "t", "user", 0);
        let mut done = row.clone();
        done.status = "completed".into();
        let heads = vec![
            head("u", "user_message", false),
            head("r", "reasoning", false),
            head("c1", "tool_call", false),
            head("n", "agent_message", false),
            head("c2", "tool_call", false),
            head("a", "agent_message", true),
            head("e", "error", false),
        ];
        let els = fold(&done, heads.clone());
        let ids: Vec<String> = els.iter().map(Element::id).collect();
        assert_eq!(ids, ["u", "r-summary", "a", "e"]);
        let Element::Summary(hs) = &els[1] else {
            panic!()
        };
        let s = summary_item(hs);
        assert_eq!(s.activity.as_ref().unwrap().last_item_id, "c2");
        assert_eq!(s.summary.as_ref().unwrap()["tool_count"], 2);
        assert_eq!(s.summary.as_ref().unwrap()["tools"], json!(["bash"]));
        // A running turn keeps its live items.
        assert_eq!(fold(&row, heads).len(), 7);
    }
}
