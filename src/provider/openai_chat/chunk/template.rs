//! The shape of the last text chunk of a stream, to read the next ones by comparing
//! bytes (spec `providers.md` §0).
//!
//! A service sends its text deltas as chunks that differ only in the text: the same id,
//! model, creation time, keys and order around one string. [`Template`] keeps the bytes
//! of the last chunk the scanner read before and after its text value; a chunk that has
//! exactly those bytes around one string token is read as that chunk with the new text,
//! without scanning the rest. The scanner is deterministic and looks nowhere into a delta's
//! text, so the same bytes around another string read the same way (same id, no finish
//! reason, no tool calls): the answer is the scan's answer. Anything else (other bytes
//! around, two tokens where the text was, a text with an escaped id...) takes the full
//! scan, which records the template again — up to [`MAX_RECORDS`] times in a row: a
//! stream whose chunks all differ elsewhere too (random padding in each) stops paying
//! for the copies.

use std::borrow::Cow;

use super::{Choice, Chunk, Delta, ScannedChoice};
use crate::provider::scan::{Scan, Str, Texts};

/// Most templates recorded in a row without one read through (then the stream's chunks
/// take the full scan alone).
const MAX_RECORDS: u8 = 8;

/// Where a string of the last chunk lies: before its text (offsets in the chunk) or
/// after it (offsets from the text's end).
#[derive(Debug, Clone, Copy)]
enum Place {
    Before(usize, usize),
    After(usize, usize),
}

/// The bytes around the text of the last text chunk scanned (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Template {
    /// The chunk up to the text's opening quote.
    before: String,
    /// The chunk from just after the text's closing quote.
    after: String,
    /// The text is reasoning (`reasoning_content` or `reasoning`), not `content`.
    reasoning: bool,
    /// The chunk's `id`, when a string.
    id: Option<Place>,
    /// `before` and `after` hold a chunk.
    set: bool,
    /// Templates recorded since the last chunk read through one.
    records: u8,
}

impl Template {
    /// Reads `data` as the last chunk with another text: `(id, text, reasoning)`, the
    /// strings in `data` or unescaped into `scratch`; `None` when `data` has other bytes
    /// around one string token.
    pub(super) fn read(
        &mut self,
        data: &str,
        scratch: &mut String,
    ) -> Option<(Option<Str>, Str, bool)> {
        if !self.set {
            return None;
        }
        let (bytes, before, after) = (
            data.as_bytes(),
            self.before.as_bytes(),
            self.after.as_bytes(),
        );
        let end = bytes.len().checked_sub(after.len())?;
        if end < before.len() || !bytes.starts_with(before) || !bytes.ends_with(after) {
            return None;
        }
        let mut s = Scan::at(data, before.len(), scratch);
        let text = s.string()?;
        if s.pos() != end {
            return None;
        }
        let id = self.id.map(|p| match p {
            Place::Before(a, b) => Str::Input(a, b),
            Place::After(a, b) => Str::Input(end + a, end + b),
        });
        self.records = 0;
        Some((id, text, self.reasoning))
    }

    /// Keeps the shape of `data`, scanned as `id` and `choice`, when it is a text chunk
    /// (a delta with one text, plain in `data`, no tool calls, no finish reason, a plain
    /// id or none); forgets the last one otherwise, and records none after
    /// [`MAX_RECORDS`] in a row that nothing was read through.
    pub(super) fn record(&mut self, data: &str, id: Option<Str>, choice: Option<&ScannedChoice>) {
        self.set = false;
        if self.records >= MAX_RECORDS {
            return;
        }
        let Some(c) = choice.filter(|c| c.finish_reason.is_none()) else {
            return;
        };
        let Some(d) = c.delta.as_ref().filter(|d| d.tool_calls.is_empty()) else {
            return;
        };
        let ((a, b), reasoning) = match (d.content, d.reasoning_content.or(d.reasoning)) {
            (Some(Str::Input(a, b)), None) => ((a, b), false),
            (None, Some(Str::Input(a, b))) => ((a, b), true),
            _ => return,
        };
        // The token: the text and its quotes.
        let (Some(start), end) = (a.checked_sub(1), b + 1) else {
            return;
        };
        let bytes = data.as_bytes();
        if bytes.get(start) != Some(&b'"') || bytes.get(b) != Some(&b'"') {
            return;
        }
        let id = match id {
            None => None,
            Some(Str::Input(x, y)) if y < start => Some(Place::Before(x, y)),
            Some(Str::Input(x, y)) if x > end => Some(Place::After(x - end, y - end)),
            Some(_) => return,
        };
        let (Some(before), Some(after)) = (data.get(..start), data.get(end..)) else {
            return;
        };
        self.before.clear();
        self.before.push_str(before);
        self.after.clear();
        self.after.push_str(after);
        self.reasoning = reasoning;
        self.id = id;
        self.set = true;
        self.records += 1;
    }
}

/// The chunk [`Template::read`] read: a delta with the one text.
pub(super) fn text_chunk<'a>(
    t: Texts<'a>,
    id: Option<Str>,
    text: Str,
    reasoning: bool,
) -> Chunk<'a> {
    let text = Some(Cow::Borrowed(t.get(text)));
    let (reasoning, content) = if reasoning {
        (text, None)
    } else {
        (None, text)
    };
    Chunk {
        id: id.map(|i| Cow::Borrowed(t.get(i))),
        usage: None,
        choice: Some(Choice {
            delta: Some(Delta {
                reasoning,
                content,
                tool_calls: Vec::new(),
            }),
            finish_reason: None,
        }),
    }
}
