//! Frame building: the bytes of one protocol line, written straight from borrowed values
//! where the hot paths need it (results, streaming deltas) and byte for byte what
//! serde_json writes for the same envelope (spec `app-server.md` §1).

use serde::Serialize;
use wuu_protocol::{RequestId, ServerNotification};

/// A notification frame `{"method":M,"params":…}`, the params serialized once, straight
/// into the frame (the bytes the envelope `Notification` writes).
pub fn notification_frame<N: ServerNotification + Serialize>(n: &N) -> Vec<u8> {
    let mut frame = Vec::with_capacity(256);
    frame.extend_from_slice(b"{\"method\":");
    push_json_str(&mut frame, N::METHOD);
    frame.extend_from_slice(b",\"params\":");
    // Serializing a protocol struct into a Vec cannot fail.
    serde_json::to_writer(&mut frame, n).expect("serialize notification");
    frame.push(b'}');
    frame
}

/// A success frame `{"id":ID,"result":…}` (the envelope `Response` writes), the result's
/// JSON written by `result`; `size` is its expected length.
pub fn ok_frame(id: &RequestId, size: usize, result: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut frame = Vec::with_capacity(size + 48);
    frame.extend_from_slice(b"{\"id\":");
    // Serializing an id (a string or a number) into a Vec cannot fail.
    serde_json::to_writer(&mut frame, id).expect("serialize id");
    frame.extend_from_slice(b",\"result\":");
    result(&mut frame);
    frame.push(b'}');
    frame
}

/// One streaming delta notification (`item/agentMessage/delta`, `item/reasoning/delta`,
/// `item/toolCall/delta`, `item/toolCall/outputDelta`), appended to `frame`:
/// `{"method":M,"params":{"thread_id":…,"turn_id":…,"item_id":…,"delta":…[,"stream":…]}}`,
/// byte for byte what `Outbox::notify` writes for the protocol's delta structs
/// (field order and escaping included; a unit test compares them). Written by hand from
/// borrowed strings: the hottest frame of the server, it skips serde and the
/// per-delta copies of the ids. Sent through an outbox lane (`Outbox::send_lane`).
pub fn delta_frame_into(
    frame: &mut Vec<u8>,
    method: &str,
    ids: [&str; 3],
    delta: &str,
    stream: Option<&str>,
) {
    let [thread_id, turn_id, item_id] = ids;
    frame
        .reserve(80 + method.len() + thread_id.len() + turn_id.len() + item_id.len() + delta.len());
    frame.extend_from_slice(b"{\"method\":");
    push_json_str(frame, method);
    frame.extend_from_slice(b",\"params\":{\"thread_id\":");
    push_json_str(frame, thread_id);
    frame.extend_from_slice(b",\"turn_id\":");
    push_json_str(frame, turn_id);
    frame.extend_from_slice(b",\"item_id\":");
    push_json_str(frame, item_id);
    frame.extend_from_slice(b",\"delta\":");
    push_json_str(frame, delta);
    if let Some(stream) = stream {
        frame.extend_from_slice(b",\"stream\":");
        push_json_str(frame, stream);
    }
    frame.extend_from_slice(b"}}");
}

/// Appends `s` as a JSON string exactly as serde_json writes it. serde_json escapes only
/// `"`, `\\` and bytes below 0x20; a string without them (the common case, checked eight
/// bytes at a time) is copied as is, any other goes through serde_json itself.
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    if needs_json_escape(s.as_bytes()) {
        // Serializing a string into a Vec cannot fail.
        serde_json::to_writer(&mut *out, s).expect("serialize string");
    } else {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    }
}

/// Whether `b` holds a byte serde_json escapes (`"`, `\\`, or below 0x20). Never
/// answers false for such a string (a rare false positive only takes the slow path).
fn needs_json_escape(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Nonzero iff some byte of `x` is below `n` (exact for n <= 0x80).
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let Ok(word) = <[u8; 8]>::try_from(c) else {
            return true;
        };
        let x = u64::from_le_bytes(word);
        if below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1)
            != 0
        {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&c| c < 0x20 || c == b'"' || c == b'\\')
}

#[cfg(test)]
mod json_str_tests {
    use super::push_json_str;

    fn check(s: &str) {
        let mut out = b"x".to_vec();
        push_json_str(&mut out, s);
        assert_eq!(&out[1..], serde_json::to_vec(s).unwrap(), "{s:?}");
    }

    #[test]
    fn push_json_str_matches_serde_json() {
        // Every character below 0x80 alone, at every position of a 17-byte string (both
        // sides of the 8-byte words), and a spread of multi-byte characters.
        for c in (0u8..0x80)
            .map(char::from)
            .chain("é€你🎉\u{7f}\u{80}\u{2028}\u{feff}".chars())
        {
            check(&c.to_string());
            for at in 0..17 {
                let mut s: String = "abcdefghijklmnopq".chars().take(at).collect();
                s.push(c);
                s.push_str(&"rstuvwxyz0123456"[..16 - at.min(16)]);
                check(&s);
            }
        }
        check("");
        check("plain text of some length, no escapes at all here, just words");
        check("ends with a quote\"");
        check("\\\\\\\"\"\n\n\t");
    }
}

#[cfg(test)]
mod delta_frame_tests {
    use super::delta_frame_into;
    use wuu_protocol::*;

    fn delta_frame(method: &str, ids: [&str; 3], delta: &str, stream: Option<&str>) -> Vec<u8> {
        let mut frame = vec![];
        delta_frame_into(&mut frame, method, ids, delta, stream);
        frame
    }

    fn serde_frame<N: ServerNotification>(n: &N) -> Vec<u8> {
        let mut frame = b"{\"method\":".to_vec();
        serde_json::to_writer(&mut frame, N::METHOD).unwrap();
        frame.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut frame, n).unwrap();
        frame.push(b'}');
        frame
    }

    #[test]
    fn delta_frames_are_the_serde_frames_byte_for_byte() {
        let texts = [
            "",
            "tok ",
            "line\nbreak \"quoted\" back\\slash \u{1} \u{1f} \u{7f} é 漢字 🦀",
            "</script>\t\r",
        ];
        for (i, text) in texts.iter().enumerate() {
            let (t, u, it) = (
                format!("th\"{i}"),
                "turn-1".to_owned(),
                format!("item\n{i}"),
            );
            let ids = [t.as_str(), u.as_str(), it.as_str()];
            let m = AgentMessageDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(AgentMessageDelta::METHOD, ids, text, None),
                serde_frame(&m)
            );
            let r = ReasoningDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(ReasoningDelta::METHOD, ids, text, None),
                serde_frame(&r)
            );
            let c = ToolCallDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(ToolCallDelta::METHOD, ids, text, None),
                serde_frame(&c)
            );
            for stream in [None, Some("stdout"), Some("std\"err")] {
                let o = ToolCallOutputDelta {
                    thread_id: t.clone(),
                    turn_id: u.clone(),
                    item_id: it.clone(),
                    delta: text.to_string(),
                    stream: stream.map(str::to_owned),
                };
                assert_eq!(
                    delta_frame(ToolCallOutputDelta::METHOD, ids, text, stream),
                    serde_frame(&o)
                );
            }
        }
    }
}
