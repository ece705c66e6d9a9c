//! The built-in engine's provider requests, read inline on the thread that runs the
//! engine (the conversation's session thread; spec `providers.md` §6.1, §6.6): the
//! provider parses its stream straight into a sink here, which hands the deltas of one
//! read to the host as one batch, lets a host on this thread serve its mailbox before
//! each read that may wait (and while the request waits for its response head on the
//! provider's head pool), and looks at the controls between reads. A read blocked on
//! a silent socket is cut through the sink's [`crate::engine::LiveStream`] (shut down
//! by whoever sends the control that ends the stream), so no helper thread stands
//! between the stream and the engine.

use super::{add, provider_failure, Builtin, StepEnd, StepStream};
use crate::engine::{Control, EngineEvent, EventSink, Outcome, TextDeltas};
use crate::provider::chat::{ChatRequest, FailureKind, ProviderError, StreamEvent};
use crate::provider::stream::STREAM_BATCH_EVENTS;
use crate::provider::{CancelToken, Provider, StreamSink};
use crossbeam_channel::{Receiver, TryRecvError};
use std::sync::Arc;
use wuu_protocol::TurnError;

/// What the controls read between two reads of a stream decided.
enum Cut {
    /// A steer: the answer is cut at the visible text.
    Steer,
    /// An interrupt, or the host is gone.
    Interrupt,
}

impl Builtin {
    /// Takes the controls already waiting, between two reads of a stream; `Some` when
    /// one ends the stream (a steer only if `steer_cuts`).
    fn poll_stream(&mut self, controls: &Receiver<Control>, steer_cuts: bool) -> Option<Cut> {
        while !self.host_gone {
            match controls.try_recv() {
                Ok(Control::Steer(_)) if steer_cuts => return Some(Cut::Steer),
                Ok(c) => self.note(Ok(c)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.note(Err(crossbeam_channel::RecvError)),
            }
        }
        self.interrupted.then_some(Cut::Interrupt)
    }

    /// Streams one provider step on this thread. Returns the complete tool calls of the
    /// step (empty = final answer), `None` when a steer cut the stream, or how the turn
    /// ended.
    pub(super) fn stream_step(
        &mut self,
        provider: Arc<dyn Provider>,
        req: ChatRequest,
        provider_id: &str,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> StepEnd {
        // Steer signals that arrived before this step were satisfied by BeginStep.
        self.drain(sink, controls);
        if self.interrupted {
            return Err(Outcome::Interrupted);
        }
        self.cut_off.clear();
        self.step_output = false;
        let token = CancelToken::new();
        sink.live().open(&token, true);
        let mut step = StepSink {
            engine: self,
            step: StepStream::default(),
            provider_id,
            sink,
            controls,
            token: &token,
            text: TextDeltas::default(),
            deltas: Vec::new(),
            end: None,
        };
        // A control sent before the stream was open found nothing to cut: look now.
        if step.poll() {
            // The request may wait long for its response head: a host on this thread
            // lets go of what it need not hold meanwhile (its store connection).
            sink.idle();
            provider.stream_with_cancel(&req, &token, &mut step);
        }
        sink.live().close();
        step.finish()
    }

    /// Runs the summary request to its end on this thread: the summary text, or how it
    /// failed. Steers wait for the next step; an interrupt cancels the request.
    pub(super) fn summarise(
        &mut self,
        chat: ChatRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Result<String, Outcome> {
        self.drain(sink, controls);
        if self.interrupted {
            return Err(Outcome::Interrupted);
        }
        let provider = self.provider.clone();
        let provider_id = provider.id().to_owned();
        let token = CancelToken::new();
        sink.live().open(&token, false);
        let mut summary = SummarySink {
            engine: self,
            provider_id: &provider_id,
            sink,
            controls,
            token: &token,
            text: String::new(),
            end: None,
        };
        if summary.poll() {
            sink.idle();
            provider.stream_with_cancel(&chat, &token, &mut summary);
        }
        sink.live().close();
        if let Some(end) = summary.end.take() {
            return end;
        }
        if summary.poll() {
            return Err(Outcome::Failed(Box::new(TurnError {
                message: "the summary request ended without a result".into(),
                code: Some("incomplete_stream".into()),
                category: Some("network".into()),
                provider: Some(provider_id),
                ..Default::default()
            })));
        }
        summary.end.unwrap_or(Err(Outcome::Interrupted))
    }
}

/// The sink of one step's stream: deltas of one read go to the host as one batch (cut
/// at [`STREAM_BATCH_EVENTS`]), every other event goes on its own after them. Text
/// deltas are copied into a [`TextDeltas`] kept for the whole step (no allocation per
/// delta); argument deltas, rare, travel as events.
struct StepSink<'a> {
    engine: &'a mut Builtin,
    step: StepStream,
    provider_id: &'a str,
    sink: &'a EventSink<'a>,
    controls: &'a Receiver<Control>,
    token: &'a CancelToken,
    /// Text deltas of the read under way, not yet handed to the host.
    text: TextDeltas,
    /// Other deltas of the read under way, not yet handed to the host (at most one of
    /// `text` and `deltas` holds any: a delta of the other kind sends them first).
    deltas: Vec<EngineEvent>,
    /// How the step ended, once known.
    end: Option<StepEnd>,
}

impl StepSink<'_> {
    /// Hands the gathered deltas to the host.
    fn send_deltas(&mut self) {
        self.sink.emit_deltas(&mut self.text);
        if !self.deltas.is_empty() {
            self.sink.emit_all(std::mem::take(&mut self.deltas));
        }
    }

    /// Before an event of the stream: false when the step already ended. Notes the
    /// output, and a successful reconnect when output of a new attempt arrives (a final
    /// failure leaves the reconnect row to be frozen as `failed`, spec §4.9 rules 8, 10).
    fn output(&mut self, ev: Option<&StreamEvent>) -> bool {
        if self.end.is_some() {
            return false;
        }
        let failed = matches!(ev, Some(StreamEvent::Failed { .. }));
        self.engine.step_output |= !failed;
        if self.step.reconnecting && !failed && !matches!(ev, Some(StreamEvent::Retrying { .. })) {
            self.step.reconnecting = false;
            self.send_deltas();
            self.sink.emit(EngineEvent::Connected);
        }
        true
    }

    /// Looks at the controls; false = the stream ends here (the request is cancelled).
    fn poll(&mut self) -> bool {
        if self.end.is_some() {
            return false;
        }
        self.sink.serve();
        match self.engine.poll_stream(self.controls, true) {
            None => return true,
            Some(Cut::Steer) => {
                self.send_deltas();
                self.sink.emit(EngineEvent::StreamCut);
                self.end = Some(Ok(None));
            }
            Some(Cut::Interrupt) => self.end = Some(Err(Outcome::Interrupted)),
        }
        self.token.cancel();
        false
    }

    /// How the step ended once the provider returned.
    fn finish(mut self) -> StepEnd {
        self.send_deltas();
        if let Some(end) = self.end.take() {
            return end;
        }
        // Cancelled by the host: the control that cut the stream waits in the channel.
        if !self.poll() {
            if let Some(end) = self.end.take() {
                return end;
            }
        }
        // Cut for a request the host then refused (a steer or an interrupt it did not
        // take): the answer so far is kept and the next step starts, as after a steer.
        if self.token.is_cancelled() && !self.engine.interrupted {
            self.sink.emit(EngineEvent::StreamCut);
            return Ok(None);
        }
        Err(Outcome::Failed(Box::new(provider_failure(
            self.provider_id,
            ProviderError {
                kind: FailureKind::IncompleteStream,
                message: "the provider stream ended without a result".into(),
                status_code: None,
                attempts: 1,
                max_attempts: 1,
                stop_reason: "recovery_unavailable".into(),
            },
        ))))
    }
}

impl StreamSink for StepSink<'_> {
    fn event(&mut self, ev: StreamEvent) -> bool {
        let delta = match ev {
            StreamEvent::TextDelta { text } => return self.text(false, &text),
            StreamEvent::ReasoningDelta { text } => return self.text(true, &text),
            _ if !self.output(Some(&ev)) => return false,
            StreamEvent::ToolCallDelta { id, delta } => {
                self.sink.emit_deltas(&mut self.text);
                EngineEvent::ToolArgsDelta { call_id: id, delta }
            }
            other => {
                self.send_deltas();
                let end =
                    self.engine
                        .on_stream_event(&mut self.step, other, self.provider_id, self.sink);
                if end.is_some() {
                    self.end = end;
                    return false;
                }
                return self.poll();
            }
        };
        self.deltas.push(delta);
        if self.deltas.len() >= STREAM_BATCH_EVENTS {
            return self.flush();
        }
        true
    }

    fn text(&mut self, reasoning: bool, text: &str) -> bool {
        if !self.output(None) {
            return false;
        }
        if !self.deltas.is_empty() {
            self.send_deltas();
        }
        self.text.push(reasoning, text);
        if self.text.len() >= STREAM_BATCH_EVENTS {
            return self.flush();
        }
        true
    }

    fn flush(&mut self) -> bool {
        self.send_deltas();
        self.sink.idle();
        self.poll()
    }
}

/// The sink of a summary request: gathers the text, ends at `Done` / `Failed`.
struct SummarySink<'a> {
    engine: &'a mut Builtin,
    provider_id: &'a str,
    sink: &'a EventSink<'a>,
    controls: &'a Receiver<Control>,
    token: &'a CancelToken,
    text: String,
    end: Option<Result<String, Outcome>>,
}

impl SummarySink<'_> {
    /// Looks at the controls (steers wait); false = the request ends here.
    fn poll(&mut self) -> bool {
        if self.end.is_some() {
            return false;
        }
        self.sink.serve();
        if self.engine.poll_stream(self.controls, false).is_none() {
            return true;
        }
        self.end = Some(Err(Outcome::Interrupted));
        self.token.cancel();
        false
    }
}

impl StreamSink for SummarySink<'_> {
    fn event(&mut self, ev: StreamEvent) -> bool {
        if self.end.is_some() {
            return false;
        }
        match ev {
            StreamEvent::TextDelta { text } => {
                self.text.push_str(&text);
                return true;
            }
            // A retry starts the answer again.
            StreamEvent::Retrying { .. } => self.text.clear(),
            StreamEvent::Done { usage, .. } => {
                add(&mut self.engine.usage, &usage);
                self.sink.emit(EngineEvent::Usage(usage));
                let text = self.text.trim().to_owned();
                self.end = Some(if text.is_empty() {
                    Err(Outcome::Failed(Box::new(TurnError {
                        message: "the model answered the summary request with no text".into(),
                        code: Some("empty_summary".into()),
                        category: Some("provider".into()),
                        provider: Some(self.provider_id.to_owned()),
                        ..Default::default()
                    })))
                } else {
                    Ok(text)
                });
                return false;
            }
            StreamEvent::Failed { error } => {
                self.end = Some(Err(Outcome::Failed(Box::new(provider_failure(
                    self.provider_id,
                    error,
                )))));
                return false;
            }
            _ => {}
        }
        self.poll()
    }

    fn text(&mut self, reasoning: bool, text: &str) -> bool {
        if self.end.is_some() {
            return false;
        }
        if reasoning {
            return self.poll();
        }
        self.text.push_str(text);
        true
    }

    fn flush(&mut self) -> bool {
        self.sink.idle();
        self.poll()
    }
}
