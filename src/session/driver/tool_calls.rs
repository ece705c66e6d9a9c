//! The projection of tool calls: a call's item opens when the model starts it, takes
//! its streamed arguments and output, is re-announced once its arguments are complete,
//! and completes with the tool's result, or is withdrawn when it will never run (spec
//! `app-server.md` §4.5, §4.9).

use super::deltas::DeltaKind;
use super::Driver;
use serde_json::{json, Value};

impl Driver<'_> {
    /// The turn's item of tool call `call_id` (the last one with that id).
    pub(super) fn find_call(&self, call_id: &str) -> Option<usize> {
        self.s.turns[self.turn_idx]
            .items
            .iter()
            .rposition(|i| i.item_type == "tool_call" && i.call_id.as_deref() == Some(call_id))
    }

    /// The model started a tool call: the open message and reasoning are complete, and
    /// the call's item opens.
    pub(super) fn tool_start(&mut self, call_id: String, name: String, arguments: Option<String>) {
        if let Some(i) = self.agent_item.take() {
            self.complete_item(i, "completed");
        }
        if let Some(i) = self.reasoning_item.take() {
            self.complete_item(i, "completed");
        }
        let i = self.new_item("tool_call");
        self.item(i).call_id = Some(call_id);
        self.item(i).name = Some(name);
        self.item(i).arguments = Some(arguments.unwrap_or_default());
        self.announce_started(i);
    }

    /// A piece of a call's arguments as the model streams them.
    pub(super) fn tool_args_delta(&mut self, call_id: &str, delta: String) {
        if let Some(i) = self.find_call(call_id) {
            self.item(i)
                .arguments
                .get_or_insert_with(String::new)
                .push_str(&delta);
            self.send_delta(i, DeltaKind::Arguments, &delta);
        }
    }

    /// A call's whole arguments (its item opens now if it was never started).
    pub(super) fn tool_args(&mut self, call_id: String, name: String, arguments: String) {
        let i = match self.find_call(&call_id) {
            Some(i) => i,
            None => {
                if let Some(a) = self.agent_item.take() {
                    self.complete_item(a, "completed");
                }
                let i = self.new_item("tool_call");
                self.item(i).call_id = Some(call_id);
                self.item(i).name = Some(name);
                self.announce_started(i);
                i
            }
        };
        self.flush_deltas(i, |k| *k == DeltaKind::Arguments);
        self.item(i).arguments = Some(arguments);
    }

    /// The call is about to run: its item is stored with its complete arguments and
    /// announced again. Returns whether it was stored (an at-most-once tool runs only
    /// then).
    pub(super) fn tool_ready(&mut self, call_id: &str, at_most_once: bool) -> bool {
        let Some(idx) = self.find_call(call_id) else {
            return false;
        };
        self.flush_deltas(idx, |k| *k == DeltaKind::Arguments);
        let item = self.s.turns[self.turn_idx].items[idx].clone();
        let stored = self.persist_item(&item);
        if stored || !at_most_once {
            // Re-announce the item (upsert, spec §4.3) now that its arguments
            // are complete: the first `item/started` went out before they
            // streamed.
            self.announce_started(idx);
        }
        stored
    }

    /// A piece of a running call's output (of one output stream).
    pub(super) fn tool_output(&mut self, call_id: &str, stream: Option<String>, text: String) {
        if let Some(i) = self.find_call(call_id) {
            self.send_delta(i, DeltaKind::Output(stream), &text);
        }
    }

    /// The call finished: its result (a refusal by the permission mode is recorded as a
    /// denial of the turn) and its item completes, failed on error.
    pub(super) fn tool_end(
        &mut self,
        call_id: &str,
        output: Option<String>,
        detail: Option<Value>,
        is_error: bool,
        error: Option<String>,
        permission_denied: bool,
    ) {
        let Some(idx) = self.find_call(call_id) else {
            return;
        };
        if permission_denied {
            let it = &self.s.turns[self.turn_idx].items[idx];
            self.denials.push(json!({
                "item_id": it.id, "tool": it.name.clone().unwrap_or_default(),
                "reason": output.clone().unwrap_or_default(),
            }));
        }
        let it = self.item(idx);
        if let Some(out) = output {
            it.result = Some(out);
            let mut detail = detail.unwrap_or(Value::Null);
            // An MCP result's content parts (text, images, resources) are the item's
            // `result_detail.content`, where large images go by reference.
            let content = it
                .name
                .as_deref()
                .filter(|n| crate::mcp::is_mcp_tool(n))
                .and_then(|_| detail.as_object_mut()?.remove("content"))
                .filter(Value::is_array);
            let mut rd = json!({"structured_content": detail, "is_error": is_error});
            if let Some(c) = content {
                rd["content"] = c;
            }
            it.result_detail = Some(rd);
        }
        if error.is_some() {
            it.error = error;
        }
        self.complete_item(idx, if is_error { "failed" } else { "completed" });
    }

    /// A started call will never run (its arguments were cut off): its item goes.
    pub(super) fn tool_withdrawn(&mut self, call_id: &str, reason: &str) {
        log::info!("tool call {call_id} withdrawn: {reason}");
        if let Some(i) = self.find_call(call_id) {
            self.remove_item(i);
        }
    }
}
