//! Folding tool activity for compact history pages (spec `app-server.md` §5.8; the
//! `process_summary` item and `thread/activity/read`): in a finished turn each run of
//! consecutive tool calls, reasoning and non-final narration becomes one summary
//! element; everything a reader needs to see stays visible (a `context_compaction`
//! item is never folded: clients show it as the "context compacted" divider). A
//! running turn is not folded.

use wuu_protocol::{ItemActivity, ProcessSummary, ThreadItem};
use wuu_store::{ItemHead, TurnRow};

/// One element of a folded turn: a visible item or a summary of a run of items.
#[derive(Debug, Clone)]
pub(super) enum Element {
    Item(ItemHead),
    Summary(Vec<ItemHead>),
}

impl Element {
    pub(super) fn id(&self) -> String {
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

pub(super) fn fold(row: &TurnRow, heads: Vec<ItemHead>) -> Vec<Element> {
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
pub(super) fn summary_item(heads: &[ItemHead]) -> ThreadItem {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn a_compaction_stays_visible_between_folded_runs() {
        let mut done = TurnRow::new("th", "t", "user", 0);
        done.status = "completed".into();
        let heads = vec![
            head("u", "user_message", false),
            head("c1", "tool_call", false),
            head("k", "context_compaction", false),
            head("c2", "tool_call", false),
            head("a", "agent_message", true),
        ];
        let ids: Vec<String> = fold(&done, heads).iter().map(Element::id).collect();
        assert_eq!(ids, ["u", "c1-summary", "k", "c2-summary", "a"]);
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
