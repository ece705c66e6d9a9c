//! Notifications to the client (spec `app-server.md` §1, §5): a notification is serialized
//! once, straight into its frame, and queued within [`NOTIFY_DEADLINE`]; a frame whose
//! large images the client asked to receive by reference ([`super::deferred`]) is
//! projected first; a turn's delta frames go through its lane as one hand-off.

use super::transport::{Lane, Lines, Outbox, Overflow, NOTIFY_DEADLINE};
use wuu_protocol::{Notification, ServerNotification};

impl Outbox {
    /// Sends a notification, waiting at most [`NOTIFY_DEADLINE`] for room.
    /// Errors: [`Overflow`] when the client has not read for that long.
    pub fn notify<N: ServerNotification>(&self, n: &N) -> Result<(), Overflow> {
        self.send_notification(super::frames::notification_frame(n))
    }

    /// Sends a notification frame, projecting its large images first when the client
    /// asked for deferred content (the frame read back as a `Value`: one decoder for every
    /// notification type instead of a `Value` serializer per type).
    fn send_notification(&self, mut frame: Vec<u8>) -> Result<(), Overflow> {
        if self.defer_content() && frame.len() > wuu_protocol::INLINE_IMAGE_CHARS {
            if let Ok(mut n) = serde_json::from_slice::<Notification>(&frame) {
                if super::deferred::project_frame(&mut n.params) {
                    frame = serde_json::to_vec(&n).expect("serialize notification");
                }
            }
        }
        self.send_within(frame, NOTIFY_DEADLINE)
    }

    /// Sends a notification given as a method and params. Errors: [`Overflow`].
    pub fn notify_raw(&self, method: &str, params: serde_json::Value) -> Result<(), Overflow> {
        let n = Notification {
            method: method.to_owned(),
            params,
        };
        let frame = serde_json::to_vec(&n).expect("serialize notification");
        self.send_within(frame, NOTIFY_DEADLINE)
    }

    /// Hands the delta frames gathered in `lines` ([`super::frames::delta_frame_into`])
    /// to the outbox through the turn's `lane` (its fair share of the outbox) as one
    /// hand-off, and leaves `lines` empty. Errors: [`Overflow`] when the client has not
    /// read for [`NOTIFY_DEADLINE`].
    pub fn send_deltas(&self, lane: &Lane, lines: &mut Lines) -> Result<(), Overflow> {
        self.send_lane(lane, lines, NOTIFY_DEADLINE)
    }
}
