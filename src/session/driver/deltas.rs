//! Delta batching: the streamed deltas of an item (`item/agentMessage/delta`,
//! `item/reasoning/delta`, `item/toolCall/delta`, `item/toolCall/outputDelta`) are masked
//! for secrets split across deltas, rendered straight into the turn's [`Lines`] and
//! handed to its outbox lane once per engine batch (or per lane chunk of a long one),
//! always before any other frame of the turn (spec `app-server.md` §4.5, §4.9).
//!
//! [`Lines`]: crate::outbound::transport::Lines

use super::{Driver, Stop};
use crate::engine::{EngineEvent, TextDeltas};
use crate::outbound::transport::Overflow;
use wuu_protocol::*;

/// The delta streams of an item (`item/agentMessage/delta`, `item/reasoning/delta`,
/// `item/toolCall/delta`, `item/toolCall/outputDelta` of one output stream).
#[derive(Clone, PartialEq)]
pub(super) enum DeltaKind {
    Message,
    Reasoning,
    Arguments,
    Output(Option<String>),
}

impl Driver<'_> {
    /// Projects the events of one engine batch in order: its delta frames go to the
    /// outbox together, and any other event first sends those gathered before it,
    /// whatever it sends itself.
    pub(super) fn project_batch(&mut self, evs: Vec<EngineEvent>) {
        let outer = std::mem::replace(&mut self.batching, true);
        for ev in evs {
            if !ev.is_delta() {
                self.send_deltas();
            }
            self.project_event(ev);
        }
        self.batching = outer;
        if !outer {
            self.send_deltas();
        }
    }

    /// Projects a batch of text deltas in order ([`EngineEvent::Deltas`]), each as a
    /// `ContentDelta` / `ThinkingDelta`; their frames go to the outbox together.
    pub(super) fn project_deltas(&mut self, deltas: &TextDeltas) {
        let outer = std::mem::replace(&mut self.batching, true);
        for (reasoning, text) in deltas.iter() {
            self.append_text(reasoning, text);
        }
        self.batching = outer;
        if !outer {
            self.send_deltas();
        }
    }

    /// Announces one delta of item `idx`, masked: a tail that may be the start of a
    /// secret split across deltas is held back (crate::secrets::DeltaStreams) and sent
    /// with the next delta or by [`Self::flush_deltas`]. The deltas sent for a stream
    /// add up to the redacted text of the item.
    pub(super) fn send_delta(&mut self, idx: usize, kind: DeltaKind, delta: &str) {
        let turn = &self.s.turns[self.turn_idx];
        let item_id = &turn.items[idx].id;
        let delta = self.masks.push_by(
            |(i, k)| i == item_id && *k == kind,
            || (item_id.clone(), kind.clone()),
            delta,
        );
        if delta.is_empty() {
            return;
        }
        render_delta(
            &mut self.deltas,
            [self.s.id.as_str(), turn.row.id.as_str(), item_id.as_str()],
            &kind,
            &delta,
        );
        self.delta_rendered();
    }

    /// Sends the held-back tails of item `idx`'s delta streams that `which` selects
    /// (before the item is announced with its whole text: complete, or arguments done).
    pub(super) fn flush_deltas(&mut self, idx: usize, which: impl Fn(&DeltaKind) -> bool) {
        if self.masks.is_empty() {
            return;
        }
        let id = self.s.turns[self.turn_idx].items[idx].id.clone();
        for ((item_id, kind), delta) in self.masks.finish(|(i, k)| *i == id && which(k)) {
            self.notify_delta(item_id, kind, delta);
        }
    }

    /// Gathers one delta frame; it is handed to the outbox with the rest of its engine
    /// batch ([`Self::send_deltas`]), at once outside a batch.
    fn notify_delta(&mut self, item_id: String, kind: DeltaKind, delta: String) {
        let turn = &self.s.turns[self.turn_idx];
        render_delta(
            &mut self.deltas,
            [self.s.id.as_str(), turn.row.id.as_str(), item_id.as_str()],
            &kind,
            &delta,
        );
        self.delta_rendered();
    }

    /// A delta frame was gathered: outside a batch, or once a lane chunk is full, the
    /// frames go to the outbox.
    fn delta_rendered(&mut self) {
        if !self.batching || self.deltas.len() >= crate::outbound::transport::LANE_CHUNK_LINES {
            self.send_deltas();
        }
    }

    /// Hands the gathered delta frames to the outbox (before any other frame of the
    /// turn, so the order is kept).
    pub(super) fn send_deltas(&mut self) {
        if self.deltas.is_empty() {
            return;
        }
        if let Err(Overflow) = self
            .s
            .shared
            .outbox
            .send_deltas(&self.lane, &mut self.deltas)
        {
            log::error!("outbox overflow in {}; failing the turn", self.s.id);
            self.stop.get_or_insert(Stop::Overflow);
        }
    }
}

/// Renders one delta frame of the item named by `ids` (thread, turn, item) into the
/// next line of `lines`.
fn render_delta(
    lines: &mut crate::outbound::transport::Lines,
    ids: [&str; 3],
    kind: &DeltaKind,
    delta: &str,
) {
    let (method, stream) = match kind {
        DeltaKind::Message => (AgentMessageDelta::METHOD, None),
        DeltaKind::Reasoning => (ReasoningDelta::METHOD, None),
        DeltaKind::Arguments => (ToolCallDelta::METHOD, None),
        DeltaKind::Output(stream) => (ToolCallOutputDelta::METHOD, stream.as_deref()),
    };
    crate::outbound::frames::delta_frame_into(lines.next_frame(), method, ids, delta, stream);
}
