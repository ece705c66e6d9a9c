//! Stored history → provider-neutral messages, normalized before every request without
//! mutating what is stored (providers.md §6.2):
//! - items of one provider step become one assistant message (reasoning, text, calls)
//!   followed by the tool results of its calls, in call order;
//! - a tool call without a result (interrupted, crashed) gets an `aborted` error result,
//!   so every call is paired;
//! - reasoning is replayed only to the provider and model that produced it;
//! - fragments marked `incomplete_stream_fragment` never reach the model;
//! - `meta/turn_continue` display markers never reach the model;
//! - after a `context_compaction` item (the newest completed one), the model reads its
//!   summary followed by the history from the item's kept boundary on
//!   ([`super::compaction`]); the `/compact` prompt of a compact turn is not sent.

use super::TurnState;
use crate::provider::chat::{ChatMessage, ImageInput, ReasoningBlock, Role, ToolCall};
use wuu_protocol::ThreadItem;

/// Result text given to the model for a call whose outcome was never recorded.
pub const ABORTED_RESULT: &str = "{\"error\":\"aborted: the tool call did not complete\"}";

/// Where a message of [`to_messages_with_origins`] comes from: `(turn index, item
/// index)` of the first stored item of its group; `None` for a compaction summary.
pub type Origin = Option<(usize, usize)>;

/// The output: messages and, index for index, their origins.
#[derive(Default)]
struct Out {
    messages: Vec<ChatMessage>,
    origins: Vec<Origin>,
}

impl Out {
    fn push(&mut self, m: ChatMessage, origin: Origin) {
        self.messages.push(m);
        self.origins.push(origin);
    }
}

#[derive(Default)]
struct Group {
    step: Option<(usize, u32)>,
    origin: Origin,
    assistant: Option<ChatMessage>,
    results: Vec<ChatMessage>,
}

impl Group {
    fn flush(&mut self, out: &mut Out) {
        if let Some(a) = self.assistant.take() {
            let empty = a.content.is_empty() && a.tool_calls.is_empty() && a.reasoning.is_empty();
            if !empty {
                out.push(a, self.origin);
                for r in self.results.drain(..) {
                    out.push(r, self.origin);
                }
            }
        }
        self.results.clear();
        self.step = None;
        self.origin = None;
    }
}

/// The newest completed compaction of `turns`: its summary and the position where the
/// kept history starts (the compaction's own position when it kept nothing or its
/// boundary is not found).
fn last_compaction(turns: &[TurnState]) -> Option<(String, (usize, usize))> {
    for (ti, turn) in turns.iter().enumerate().rev() {
        for (ii, item) in turn.items.iter().enumerate().rev() {
            if item.item_type != "context_compaction" || item.status.as_deref() != Some("completed")
            {
                continue;
            }
            let Some(summary) = item.summary.as_ref().and_then(|s| s.as_str()) else {
                continue;
            };
            let kept = item
                .result_detail
                .as_ref()
                .and_then(|d| d.get("kept_from"))
                .and_then(|k| {
                    let t = k.get("turn_id")?.as_str()?;
                    let i = k.get("item_id")?.as_str()?;
                    let kt = turns.iter().position(|x| x.row.id == t)?;
                    let ki = turns.get(kt)?.items.iter().position(|x| x.id == i)?;
                    ((kt, ki) <= (ti, ii)).then_some((kt, ki))
                })
                .unwrap_or((ti, ii));
            return Some((summary.to_owned(), kept));
        }
    }
    None
}

fn assistant(provider: &str, model: &str) -> ChatMessage {
    let mut m = ChatMessage::text(Role::Assistant, "");
    m.provider = Some(provider.to_owned());
    m.model = Some(model.to_owned());
    m
}

/// Decodes stored image attachments (`{media_type, data}`; data may be a `data:` URL).
pub fn images_of(item: &ThreadItem) -> Vec<ImageInput> {
    item.images
        .iter()
        .flatten()
        .filter_map(|v| {
            let data = v.get("data")?.as_str()?;
            let mut media = v
                .get("media_type")
                .and_then(|m| m.as_str())
                .unwrap_or("image/png")
                .to_owned();
            let data = match data.strip_prefix("data:") {
                Some(rest) => {
                    let (head, payload) = rest.split_once(',')?;
                    if let Some(m) = head.strip_suffix(";base64") {
                        media = m.to_owned();
                    }
                    payload
                }
                None => data,
            };
            Some(ImageInput {
                media_type: media,
                data: data.to_owned(),
            })
        })
        .collect()
}

/// What the model reads in place of a damaged stored item.
pub fn damaged_note(item_type: &str) -> String {
    format!(
        "[wuu: a {item_type} item of this conversation is damaged in the store and could not be read; its content is missing from this history]"
    )
}

/// Builds the messages for a request to `provider`/`model` from the conversation's
/// turns (oldest first).
pub fn to_messages(turns: &[TurnState], provider: &str, model: &str) -> Vec<ChatMessage> {
    to_messages_with_origins(turns, provider, model).0
}

/// [`to_messages`] plus, for each message, where it comes from ([`Origin`]).
pub fn to_messages_with_origins(
    turns: &[TurnState],
    provider: &str,
    model: &str,
) -> (Vec<ChatMessage>, Vec<Origin>) {
    let mut out = Out::default();
    let mut g = Group::default();
    let mut start = (0, 0);
    if let Some((summary, kept)) = last_compaction(turns) {
        out.push(super::compaction::summary_message(&summary), None);
        start = kept;
    }
    for (ti, turn) in turns.iter().enumerate().skip(start.0) {
        let turn_provider = turn.row.provider.as_str();
        let turn_model = turn.row.model.as_str();
        let compact_turn = turn.row.kind == "compact";
        let skip = if ti == start.0 { start.1 } else { 0 };
        for (ii, item) in turn.items.iter().enumerate().skip(skip) {
            if item.status.as_deref() == Some(wuu_store::item_damage::STATUS) {
                // A damaged stored item is never dropped silently: the model is told
                // that part of the history is missing.
                g.flush(&mut out);
                out.push(
                    ChatMessage::text(Role::User, damaged_note(&item.item_type)),
                    Some((ti, ii)),
                );
                continue;
            }
            match item.item_type.as_str() {
                "context_compaction" => g.flush(&mut out),
                "user_message" => {
                    g.flush(&mut out);
                    if item.cause.as_deref() == Some("meta/turn_continue") || compact_turn {
                        continue;
                    }
                    let mut m =
                        ChatMessage::text(Role::User, item.text.clone().unwrap_or_default());
                    m.images = images_of(item);
                    if !m.content.is_empty() || !m.images.is_empty() {
                        out.push(m, Some((ti, ii)));
                    }
                }
                "reasoning" | "agent_message" | "tool_call" => {
                    if item.cause.as_deref() == Some("incomplete_stream_fragment") {
                        continue;
                    }
                    let key = (ti, item.step.unwrap_or(0));
                    if g.step != Some(key) {
                        g.flush(&mut out);
                        g.step = Some(key);
                        g.origin = Some((ti, ii));
                        g.assistant = Some(assistant(turn_provider, turn_model));
                    }
                    let a = g.assistant.as_mut().expect("group has an assistant");
                    match item.item_type.as_str() {
                        "reasoning" => {
                            let block = item.result_detail.as_ref().and_then(|d| {
                                serde_json::from_value::<ReasoningBlock>(d.clone()).ok()
                            });
                            if let Some(b) = block {
                                if b.provider == provider && b.model == model {
                                    a.reasoning.push(b);
                                }
                            }
                        }
                        "agent_message" => {
                            if let Some(t) = item.text.as_deref().filter(|t| !t.is_empty()) {
                                a.content.push_str(t);
                            }
                        }
                        _ => {
                            let Some(call_id) = item.call_id.clone() else {
                                continue;
                            };
                            a.tool_calls.push(ToolCall {
                                id: call_id.clone(),
                                name: item.name.clone().unwrap_or_default(),
                                arguments: item
                                    .arguments
                                    .clone()
                                    .filter(|s| !s.trim().is_empty())
                                    .unwrap_or_else(|| "{}".into()),
                                item_id: None,
                            });
                            let (content, is_error) = match &item.result {
                                Some(r) => (r.clone(), item.status.as_deref() == Some("failed")),
                                None => (
                                    item.error
                                        .clone()
                                        .map(|e| {
                                            format!(
                                                "{{\"error\":{}}}",
                                                serde_json::Value::String(e)
                                            )
                                        })
                                        .unwrap_or_else(|| ABORTED_RESULT.to_owned()),
                                    true,
                                ),
                            };
                            let mut r = ChatMessage::text(Role::Tool, content);
                            r.tool_call_id = Some(call_id);
                            r.is_error = is_error;
                            g.results.push(r);
                        }
                    }
                }
                _ => {}
            }
        }
        g.flush(&mut out);
    }
    g.flush(&mut out);
    (out.messages, out.origins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wuu_store::TurnRow;

    fn item(id: &str, ty: &str, step: Option<u32>) -> ThreadItem {
        let mut i = ThreadItem::new(id, ty);
        i.step = step;
        i.status = Some("completed".into());
        i
    }

    fn turn(id: &str, kind: &str, items: Vec<ThreadItem>) -> TurnState {
        TurnState {
            row: TurnRow {
                provider: "p".into(),
                model: "m".into(),
                ..TurnRow::new("t", id, kind, 0)
            },
            items,
        }
    }

    fn user(id: &str, text: &str) -> ThreadItem {
        let mut u = item(id, "user_message", None);
        u.text = Some(text.into());
        u
    }

    #[test]
    fn a_compaction_replaces_the_history_before_its_kept_boundary() {
        let mut k = item("k", "context_compaction", None);
        k.summary = Some(serde_json::json!("S"));
        k.result_detail =
            Some(serde_json::json!({"kept_from": {"turn_id": "t2", "item_id": "u2"}}));
        let turns = vec![
            turn("t1", "user", vec![user("u1", "one")]),
            turn("t2", "user", vec![user("u2", "two")]),
            turn("t3", "compact", vec![user("c", "/compact"), k]),
            turn("t4", "user", vec![user("u4", "four")]),
        ];
        let (msgs, origins) = to_messages_with_origins(&turns, "p", "m");
        let texts: Vec<&str> = msgs.iter().map(|m| m.content.as_str()).collect();
        assert!(texts[0].starts_with(super::super::compaction::SUMMARY_PREFIX));
        assert!(texts[0].ends_with("\n\nS"));
        assert_eq!(&texts[1..], ["two", "four"]);
        assert_eq!(origins, vec![None, Some((1, 0)), Some((3, 0))]);
        // A failed compaction changes nothing.
        let mut failed = turns.clone();
        failed[2].items[1].status = Some("failed".into());
        let texts: Vec<String> = to_messages(&failed, "p", "m")
            .into_iter()
            .map(|m| m.content)
            .collect();
        assert_eq!(texts, ["one", "two", "four"]);
    }

    #[test]
    fn pairs_calls_and_aborts_missing_results() {
        let mut user = item("u", "user_message", None);
        user.text = Some("hi".into());
        let mut text = item("a", "agent_message", Some(1));
        text.text = Some("let me look".into());
        let mut c1 = item("c1", "tool_call", Some(1));
        c1.call_id = Some("call_1".into());
        c1.name = Some("read_file".into());
        c1.arguments = Some("{\"path\":\"x\"}".into());
        c1.result = Some("contents".into());
        let mut c2 = item("c2", "tool_call", Some(1));
        c2.call_id = Some("call_2".into());
        c2.name = Some("bash".into());
        c2.status = Some("in_progress".into());
        let mut fin = item("f", "agent_message", Some(2));
        fin.text = Some("done".into());
        let turn = TurnState {
            row: TurnRow {
                provider: "p".into(),
                model: "m".into(),
                ..TurnRow::new("t", "turn", "user", 0)
            },
            items: vec![user, text, c1, c2, fin],
        };
        let msgs = to_messages(&[turn], "p", "m");
        let roles: Vec<Role> = msgs.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant
            ]
        );
        assert_eq!(msgs[1].tool_calls.len(), 2);
        assert_eq!(msgs[3].content, ABORTED_RESULT);
        assert!(msgs[3].is_error);
    }
}
