//! Paged conversation history for clients (spec `app-server.md` §5.8–§5.9, with the
//! seed's limits for compact pages: at most [`HISTORY_PAGE_TURNS`] turns and
//! [`HISTORY_PAGE_BYTES`] of serialized items). This module walks pages and serves the
//! history read methods; where history is read from is in `source`, folding in
//! `fold`, cutting large items in `cut`, the cursor formats in `cursor` and
//! `thread/content/read` in `content`.
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

mod content;
mod cursor;
mod cut;
mod fold;
mod source;

pub use content::content_read;
pub use cursor::{decode_any_cursor, decode_cursor, encode_cursor};
pub use cut::{content_ref, Cutter};
pub use source::Source;

use super::convert::{thread_wire, turn_wire, TurnState};
use super::Session;
use crate::outbound::Responder;
use crate::session::Host;
use fold::{fold, summary_item, Element};
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
// Pages
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
        match self {
            PageMode::Compact => encode_cursor(turn_id, item_id),
            PageMode::Items => cursor::encode_item_cursor(turn_id, item_id),
        }
    }
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
