//! Context compaction of the built-in engine (spec `app-server.md` §4.9 rule 7,
//! `providers.md` §6.6): when a request would fill `agent.compact_threshold_pct` of the
//! model's window, when the provider says the context overflowed, or when the user asks
//! (`/compact`, `thread/compact/start`), the older part of the provider history is
//! summarised by the model and replaced by that summary. The most recent
//! `agent.compact_keep_recent_tokens` stay verbatim; the cut is always at the start of a
//! message group (a user message, or an assistant message with the results of its tool
//! calls), so a tool call never loses its result. The stored history is never changed:
//! a `context_compaction` item records the summary and where the kept part starts, and
//! [`super::history::to_messages`] builds the compacted form from it.
//!
//! Token counts here are estimates (4 bytes of JSON text per token, a fixed cost per
//! image); the provider's own count decides overflow, which compacts and retries.

use crate::provider::chat::{ChatMessage, ChatRequest, Role, Tools};

/// Default fraction of the window at which a request triggers compaction.
pub const DEFAULT_THRESHOLD: f64 = 0.8;

/// Default recent tokens kept verbatim (capped by [`CompactionSettings::keep_tokens`]).
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;

/// Estimated tokens of one image (providers bill a few hundred to ~1600).
const IMAGE_TOKENS: u64 = 1_000;

/// Largest share of a tool result copied into the summarisation transcript, in bytes.
const TRANSCRIPT_RESULT_BYTES: usize = 4_000;

/// Opens the message that carries a summary in the compacted history.
pub const SUMMARY_PREFIX: &str = "[wuu: the earlier part of this conversation was compacted to save context. This is a summary of it, written by you; the messages after it follow verbatim.]";

/// The system prompt of the summarisation request.
pub const SUMMARY_SYSTEM: &str = "You are summarising the earlier part of a conversation \
between a user and a coding agent so that the agent can continue the work with only \
your summary and the most recent messages. Write a dense, factual summary for the \
agent itself (not for the user). Keep: the user's goals, requests and constraints, in \
their own words where they matter; decisions made and why; files read, created or \
changed (paths) and what changed; commands run and their important results or errors; \
what is done, what is in progress and the next steps; any identifiers, values or facts \
the agent will need again. Images appear as references such as [image 1: image/png]; \
mention what they showed if the conversation says so. Do not invent anything, do not \
address the user, do not call tools. Answer with the summary only.";

/// Why a compaction runs (stored as the item's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactReason {
    /// The request reached the threshold.
    Auto,
    /// The provider refused the request: context overflow.
    Overflow,
    /// The user asked (`/compact`, `thread/compact/start`).
    Manual,
}

impl CompactReason {
    /// `auto` | `overflow` | `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactReason::Auto => "auto",
            CompactReason::Overflow => "overflow",
            CompactReason::Manual => "manual",
        }
    }
}

/// The compaction settings of one step, read from the live configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactionSettings {
    /// The model's context window in tokens (`turn/usage.context_window_tokens`), if known.
    pub window: Option<u64>,
    /// Fraction of the window at which automatic compaction runs (0 < x ≤ 1).
    pub threshold_pct: f64,
    /// Recent tokens kept verbatim (`agent.compact_keep_recent_tokens`).
    pub keep_recent_tokens: u64,
    /// Automatic compaction is on (`!agent.disable_auto_compact`).
    pub auto: bool,
}

impl CompactionSettings {
    /// The estimated request size (tokens) at which automatic compaction runs; `None`
    /// when it is off or the window is unknown.
    pub fn threshold_tokens(&self) -> Option<u64> {
        let w = self.window.filter(|w| *w > 0)?;
        let pct = if self.threshold_pct > 0.0 && self.threshold_pct <= 1.0 {
            self.threshold_pct
        } else {
            DEFAULT_THRESHOLD
        };
        self.auto.then_some(((w as f64) * pct) as u64)
    }

    /// Tokens of recent history kept verbatim: the setting, but at most a third of the
    /// window (so a compaction always frees room).
    pub fn keep_tokens(&self) -> u64 {
        let keep = if self.keep_recent_tokens > 0 {
            self.keep_recent_tokens
        } else {
            DEFAULT_KEEP_RECENT_TOKENS
        };
        match self.window.filter(|w| *w > 0) {
            Some(w) => keep.min(w / 3),
            None => keep,
        }
    }

    /// Bytes of transcript a summarisation request may carry (half the window, or
    /// 400 KB when the window is unknown).
    pub fn transcript_budget_bytes(&self) -> usize {
        let tokens = self.window.filter(|w| *w > 0).map_or(100_000, |w| w / 2);
        (tokens as usize).saturating_mul(4)
    }
}

/// Estimated tokens of one message.
pub fn estimate_message(m: &ChatMessage) -> u64 {
    let mut bytes = m.content.len() + 16;
    for r in &m.reasoning {
        bytes += r.text.len() + r.signature.as_ref().map_or(0, String::len);
        bytes += r.redacted.as_ref().map_or(0, String::len);
    }
    for c in &m.tool_calls {
        bytes += c.name.len() + c.arguments.len() + c.id.len() + 16;
    }
    bytes as u64 / 4 + m.images.len() as u64 * IMAGE_TOKENS
}

/// Estimated tokens of a whole request: system prompt, messages and tool schemas.
pub fn estimate_request(system: &str, messages: &[ChatMessage], tools: &Tools) -> u64 {
    let tool_bytes = tools.plain_json().len();
    (system.len() + tool_bytes) as u64 / 4 + messages.iter().map(estimate_message).sum::<u64>()
}

/// Where the kept part of `messages` starts: the earliest message that may start it
/// (`can_start`: the first message of a group) such that it and everything after it
/// fit in `keep` tokens, and at least the newest group. `None`
/// when nothing before that point could be summarised (at most a previous summary).
pub fn cut_index(
    messages: &[ChatMessage],
    can_start: impl Fn(usize) -> bool,
    keep: u64,
) -> Option<usize> {
    let mut tail = 0u64;
    let mut cut = messages.len();
    for i in (0..messages.len()).rev() {
        tail += estimate_message(&messages[i]);
        if tail > keep {
            break;
        }
        if can_start(i) {
            cut = i;
        }
    }
    // The newest group is always kept, so the model keeps the request it works on.
    if cut == messages.len() {
        if let Some(last) = (0..messages.len()).rev().find(|i| can_start(*i)) {
            cut = last;
        }
    }
    // Something other than an earlier summary must lie before the cut.
    let summarisable = messages
        .iter()
        .take(cut)
        .any(|m| !m.content.starts_with(SUMMARY_PREFIX));
    summarisable.then_some(cut)
}

/// The message that stands for the summarised part of the history.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::text(Role::User, format!("{SUMMARY_PREFIX}\n\n{summary}"))
}

/// The summarisation request for `older` (the part being replaced, oldest first), as
/// one plain-text transcript: tool calls and results become text (no tool schema is
/// needed and nothing can be unpaired), images become references, long tool results
/// are shortened, and when the transcript exceeds the budget its oldest part is left
/// out (an earlier summary at its start is always kept).
pub fn summary_request(
    model: &str,
    older: &[ChatMessage],
    settings: &CompactionSettings,
    temperature: Option<f64>,
) -> ChatRequest {
    let mut images = 0usize;
    let mut blocks: Vec<String> = older.iter().map(|m| render(m, &mut images)).collect();
    let budget = settings.transcript_budget_bytes();
    let keep_first = older
        .first()
        .is_some_and(|m| m.content.starts_with(SUMMARY_PREFIX));
    let mut total: usize = blocks.iter().map(String::len).sum();
    let first = usize::from(keep_first);
    let mut dropped = 0usize;
    while total > budget && blocks.len() > first + 1 {
        total -= blocks[first].len();
        blocks.remove(first);
        dropped += 1;
    }
    if dropped > 0 {
        blocks.insert(
            first,
            format!("[{dropped} older messages left out: they did not fit in this request]\n"),
        );
    }
    let text = format!(
        "<conversation>\n{}</conversation>\n\nSummarise the conversation above as instructed.",
        blocks.concat()
    );
    ChatRequest {
        model: model.to_owned(),
        system: SUMMARY_SYSTEM.to_owned(),
        messages: vec![ChatMessage::text(Role::User, text)],
        tools: Tools::default(),
        effort: None,
        max_output_tokens: None,
        prompt_cache_key: None,
        output_schema: None,
        temperature,
    }
}

/// One message as transcript text.
fn render(m: &ChatMessage, images: &mut usize) -> String {
    let mut out = String::new();
    match m.role {
        Role::User => {
            out.push_str("USER: ");
            out.push_str(&m.content);
            for img in &m.images {
                *images += 1;
                out.push_str(&format!(" [image {}: {}]", *images, img.media_type));
            }
        }
        Role::Assistant => {
            if !m.content.is_empty() {
                out.push_str("ASSISTANT: ");
                out.push_str(&m.content);
            }
            for c in &m.tool_calls {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&format!("TOOL CALL {} {}", c.name, c.arguments));
            }
        }
        Role::Tool => {
            out.push_str(if m.is_error {
                "TOOL ERROR: "
            } else {
                "TOOL RESULT: "
            });
            out.push_str(&shorten(&m.content, TRANSCRIPT_RESULT_BYTES));
        }
    }
    out.push('\n');
    out
}

/// `text` cut to about `max` bytes (head and tail, on character boundaries).
fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(max / 2);
    let tail = floor(text.len() - max / 2);
    let tail = if tail < head { head } else { tail };
    format!(
        "{} […{} bytes left out…] {}",
        text.get(..head).unwrap_or_default(),
        tail - head,
        text.get(tail..).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::ToolCall;

    fn msg(role: Role, n: usize) -> ChatMessage {
        ChatMessage::text(role, "x".repeat(n))
    }

    #[test]
    fn cut_keeps_recent_groups_and_never_starts_at_a_tool_result() {
        let mut a = msg(Role::Assistant, 40);
        a.tool_calls.push(ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{}".into(),
            item_id: None,
        });
        let msgs = vec![
            msg(Role::User, 400),
            a,
            msg(Role::Tool, 400),
            msg(Role::User, 40),
        ];
        let starts = |i: usize| msgs[i].role != Role::Tool;
        // Room for the last user message and the tool result, not for its call: the
        // cut may not fall between them.
        assert_eq!(cut_index(&msgs, starts, 130), Some(3));
        assert_eq!(cut_index(&msgs, starts, 10_000), None);
        // Not even the newest group fits: it is kept anyway.
        assert_eq!(cut_index(&msgs, starts, 1), Some(3));
    }

    #[test]
    fn the_summary_request_carries_images_by_reference_and_no_tools() {
        let mut u = ChatMessage::text(Role::User, "look at this");
        u.images.push(crate::provider::chat::ImageInput {
            media_type: "image/png".into(),
            data: "QUJDRA==".repeat(1000),
        });
        let mut a = ChatMessage::text(Role::Assistant, "");
        a.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"ls"}"#.into(),
            item_id: None,
        });
        let mut r = ChatMessage::text(Role::Tool, "y".repeat(10_000));
        r.tool_call_id = Some("c1".into());
        let req = summary_request("m", &[u, a, r], &CompactionSettings::default(), None);
        assert!(req.tools.is_empty());
        assert_eq!(req.system, SUMMARY_SYSTEM);
        assert_eq!(req.messages.len(), 1);
        let text = &req.messages[0].content;
        assert!(req.messages[0].images.is_empty());
        assert!(
            text.contains("USER: look at this [image 1: image/png]"),
            "{text}"
        );
        assert!(!text.contains("QUJDRA=="));
        assert!(text.contains(r#"TOOL CALL bash {"command":"ls"}"#));
        assert!(text.contains("bytes left out"));
    }

    #[test]
    fn shorten_respects_char_boundaries() {
        let s = "é".repeat(5000);
        let out = shorten(&s, 101);
        assert!(out.contains("bytes left out"));
    }

    #[test]
    fn threshold_and_keep() {
        let s = CompactionSettings {
            window: Some(16_000),
            threshold_pct: 0.5,
            keep_recent_tokens: 0,
            auto: true,
        };
        assert_eq!(s.threshold_tokens(), Some(8_000));
        assert_eq!(s.keep_tokens(), 5_333);
        let off = CompactionSettings { auto: false, ..s };
        assert_eq!(off.threshold_tokens(), None);
    }
}
