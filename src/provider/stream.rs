//! The streaming helper thread (spec `providers.md` §6.1): [`start_stream`] runs one
//! provider request on its own thread and hands its normalized events to the consumer
//! in bounded batches ([`StreamHandle`]), so a session thread can `select!` over the
//! stream and its mailbox.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::chat::{ChatRequest, FailureKind, ProviderError, StreamEvent};
use super::{CancelToken, Provider, StreamSink};

/// Most events in one batch of a [`StreamHandle`]. A provider thread with much of an
/// answer in its socket buffer (a fast server, a replayed stream) hands on at most this
/// many deltas at once. One read of a busy stream carries about a hundred deltas: a
/// batch that holds them all costs one hand-off per read instead of several (each a
/// possible wake-up of the consumer), which is most of the cost per delta when many
/// conversations stream at once.
pub const STREAM_BATCH_EVENTS: usize = 256;

/// Capacity of the [`StreamHandle`] batch channel, in batches: with
/// [`STREAM_BATCH_EVENTS`] at most 1,024 events wait for the consumer. Small enough that a
/// provider thread with a whole answer in its socket parses a slice of it and yields,
/// instead of the entire answer in one go while many other conversations wait for a
/// CPU to start theirs (with a much larger channel the first streams to be scheduled
/// finished before the last ones began).
pub const STREAM_CHANNEL_CAPACITY: usize = 4;

/// A provider stream running on a helper thread.
///
/// Events arrive in order on `batches` (bounded, [`STREAM_CHANNEL_CAPACITY`] batches of
/// 1..=[`STREAM_BATCH_EVENTS`] events; a full channel blocks the helper — backpressure,
/// never drops). A batch is what one read of the provider's stream delivered, cut at
/// the batch size and after every event that is not a delta; it is sent before the
/// helper waits for more input, so grouping never delays an event. The channel
/// disconnects when the helper ends: after the terminal `Done`/`Failed`, or promptly
/// after [`StreamHandle::cancel`]. Dropping the handle cancels.
///
/// [`StreamHandle::recv_timeout`] reads event by event; `select!` over `batches` reads
/// batch by batch (not both on one handle: a batch taken by `select!` is the caller's).
#[derive(Debug)]
pub struct StreamHandle {
    /// Normalized events of the request, in batches (never empty).
    pub batches: Receiver<Vec<StreamEvent>>,
    /// The rest of the batch [`StreamHandle::recv_timeout`] is reading.
    pending: std::vec::IntoIter<StreamEvent>,
    cancel: CancelToken,
}

impl StreamHandle {
    /// The next event, waiting up to `timeout` for the next batch. Errors: `Timeout`, or
    /// `Disconnected` once the helper ended and every event was read.
    pub fn recv_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<StreamEvent, crossbeam_channel::RecvTimeoutError> {
        loop {
            if let Some(ev) = self.pending.next() {
                return Ok(ev);
            }
            self.pending = self.batches.recv_timeout(timeout)?.into_iter();
        }
    }

    /// Every event until the helper ends (blocking).
    pub fn events(&mut self) -> impl Iterator<Item = StreamEvent> + '_ {
        std::mem::take(&mut self.pending).chain(self.batches.iter().flatten())
    }

    /// Stops the helper at its next event or read (a blocked socket read is interrupted);
    /// no terminal event follows.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The token, e.g. to cancel from another thread.
    pub fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The helper thread's sink: groups deltas into batches of up to
/// [`STREAM_BATCH_EVENTS`] and sends them over the bounded channel.
struct Batcher {
    tx: Sender<Vec<StreamEvent>>,
    token: CancelToken,
    wake: Receiver<()>,
    batch: Vec<StreamEvent>,
}

impl Batcher {
    /// Sends the batch (waiting while the channel is full); false = stop.
    fn send(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        if self.token.is_cancelled() {
            return false;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(STREAM_BATCH_EVENTS));
        // Room in the channel (the usual case): no select.
        let batch = match self.tx.try_send(batch) {
            Ok(()) => return true,
            Err(crossbeam_channel::TrySendError::Full(b)) => b,
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => return false,
        };
        crossbeam_channel::select! {
            send(self.tx, batch) -> r => r.is_ok(),
            recv(self.wake) -> _ => false,
        }
    }
}

impl StreamSink for Batcher {
    fn event(&mut self, ev: StreamEvent) -> bool {
        if self.token.is_cancelled() {
            return false;
        }
        let delta = ev.is_delta();
        self.batch.push(ev);
        if delta && self.batch.len() < STREAM_BATCH_EVENTS {
            return true;
        }
        self.send()
    }

    fn flush(&mut self) -> bool {
        self.send()
    }
}

/// Runs `p.stream(req)` on a helper thread (named `provider-<id>`); see [`StreamHandle`].
pub fn start_stream(p: Arc<dyn Provider>, req: ChatRequest) -> StreamHandle {
    let (tx, rx) = crossbeam_channel::bounded(STREAM_CHANNEL_CAPACITY);
    let cancel = CancelToken::new();
    let token = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("provider-{}", p.id()))
        .spawn(move || {
            let mut sink = Batcher {
                tx,
                wake: token.wake_receiver().clone(),
                token: token.clone(),
                batch: Vec::with_capacity(STREAM_BATCH_EVENTS),
            };
            p.stream_with_cancel(&req, &token, &mut sink);
            // A provider that returned without a last flush (stopped early).
            sink.flush();
        });
    if let Err(e) = spawned {
        log::error!("cannot spawn provider thread: {e}");
        let (tx2, rx2) = crossbeam_channel::bounded(1);
        let _ = tx2.send(vec![StreamEvent::Failed {
            error: ProviderError {
                kind: FailureKind::Network,
                message: format!("cannot spawn provider thread: {e}"),
                status_code: None,
                attempts: 0,
                max_attempts: 0,
                stop_reason: "non_retryable".into(),
            },
        }]);
        return StreamHandle {
            batches: rx2,
            pending: Vec::new().into_iter(),
            cancel,
        };
    }
    StreamHandle {
        batches: rx,
        pending: Vec::new().into_iter(),
        cancel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::Usage;

    /// Emits `deltas` text deltas, flushes, waits for `gate`, then a tool call start and
    /// `Done`.
    struct Gated {
        deltas: usize,
        gate: Receiver<()>,
    }

    impl Provider for Gated {
        fn id(&self) -> &str {
            "gated"
        }
        fn protocol(&self) -> &'static str {
            "replay"
        }
        fn stream_with_cancel(
            &self,
            _req: &ChatRequest,
            _cancel: &CancelToken,
            sink: &mut dyn StreamSink,
        ) {
            for i in 0..self.deltas {
                if !sink.event(StreamEvent::TextDelta {
                    text: i.to_string(),
                }) {
                    return;
                }
            }
            if !sink.flush() || self.gate.recv().is_err() {
                return;
            }
            sink.event(StreamEvent::ToolCallStart {
                id: "c".into(),
                name: "t".into(),
            });
            sink.event(StreamEvent::TextDelta { text: "x".into() });
            sink.event(StreamEvent::Done {
                usage: Usage::default(),
                stop_reason: None,
                truncated: false,
                response_id: None,
                message_item_id: None,
            });
        }
        fn list_models(&self) -> Result<Vec<String>, ProviderError> {
            Ok(vec![])
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            ..Default::default()
        }
    }

    #[test]
    fn stream_batches_are_bounded_in_order_and_a_flush_hands_them_over() {
        let n = STREAM_BATCH_EVENTS * 2 + 5;
        let (gate_tx, gate) = crossbeam_channel::bounded(1);
        let h = start_stream(Arc::new(Gated { deltas: n, gate }), request());
        // All the deltas arrive while the provider waits at its gate (after its flush).
        let mut texts = vec![];
        while texts.len() < n {
            let batch = h
                .batches
                .recv_timeout(Duration::from_secs(10))
                .expect("the flushed deltas arrive without the end of the stream");
            assert!(!batch.is_empty() && batch.len() <= STREAM_BATCH_EVENTS);
            for ev in batch {
                match ev {
                    StreamEvent::TextDelta { text } => texts.push(text),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let expected: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        assert_eq!(texts, expected);
        assert!(h.batches.is_empty());
        gate_tx.send(()).unwrap();
        // A non-delta event ends its batch at once; the delta after it travels with `Done`.
        let b1 = h.batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(b1.as_slice(), [StreamEvent::ToolCallStart { .. }]),
            "{b1:?}"
        );
        let b2 = h.batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(
                b2.as_slice(),
                [StreamEvent::TextDelta { .. }, StreamEvent::Done { .. }]
            ),
            "{b2:?}"
        );
        assert!(matches!(
            h.batches.recv_timeout(Duration::from_secs(10)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ));
    }
}
