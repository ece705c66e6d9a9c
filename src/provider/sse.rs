//! Server-sent events parser over any [`BufRead`] (providers.md §0).
//!
//! Rules followed:
//! - lines end with `\n`, `\r\n` is accepted (the `\r` is stripped);
//! - `event: <name>` sets the event name, `data: <text>` appends a data line (several data
//!   lines of one event are joined with `\n`), `id:` and `retry:` are accepted and ignored
//!   except that `id` is kept, `: <comment>` lines are ignored (OpenRouter's
//!   `: OPENROUTER PROCESSING`, DeepSeek keep-alives);
//! - exactly one optional space after the colon is stripped; a line without a colon is a
//!   field name with an empty value;
//! - a blank line dispatches the accumulated event (an event with no data lines is not
//!   dispatched);
//! - bytes are read per complete line and only then decoded, so a multi-byte UTF-8
//!   character split across network reads is decoded intact; invalid UTF-8 is replaced
//!   with U+FFFD rather than failing the stream;
//! - at end of input, an event whose data lines were all complete is still dispatched
//!   (lenient: some servers close without the final blank line); a partial last line (no
//!   newline) is discarded.

use std::io::{self, BufRead};

/// Longest accepted line, in bytes (16 MiB). Longer lines fail with
/// [`io::ErrorKind::InvalidData`].
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` name, when the server sent one.
    pub event: Option<String>,
    /// The data lines joined with `\n`.
    pub data: String,
    /// The last `id:` value seen in this event.
    pub id: Option<String>,
}

/// Reads [`SseEvent`]s from a byte stream.
///
/// A line that lies whole in the reader's buffer is parsed in place; only a line split
/// across reads is first gathered in an own buffer. [`SseReader::next_event_ref`] reuses
/// one event's buffers from event to event (no allocation per event once they are grown).
pub struct SseReader<R> {
    inner: R,
    /// The start of a line split across reads.
    partial: Vec<u8>,
    lines: LineState,
    /// The last dispatched event.
    out: SseEvent,
    /// The last `consume` emptied the reader's buffer (or nothing was read yet): the
    /// next `fill_buf` reads the underlying stream.
    drained: bool,
}

/// The event being assembled from its lines.
struct LineState {
    event: String,
    has_event: bool,
    data: String,
    has_data: bool,
    id: String,
    has_id: bool,
    first_line: bool,
}

impl<R: BufRead> SseReader<R> {
    /// Wraps a buffered reader (e.g. `BufReader` over an HTTP body).
    pub fn new(inner: R) -> Self {
        SseReader {
            inner,
            partial: Vec::new(),
            lines: LineState {
                event: String::new(),
                has_event: false,
                data: String::new(),
                has_data: false,
                id: String::new(),
                has_id: false,
                first_line: true,
            },
            out: SseEvent::default(),
            drained: true,
        }
    }

    /// The next event; `Ok(None)` at end of input. I/O errors (including read timeouts)
    /// are returned as they come; the reader should not be used after an error, except
    /// [`io::ErrorKind::WouldBlock`] (a woken read, `super::wake`), after which the
    /// next call goes on where the stream was.
    pub fn next_event(&mut self) -> io::Result<Option<SseEvent>> {
        Ok(if self.advance(&mut || true)? {
            Some(std::mem::take(&mut self.out))
        } else {
            None
        })
    }

    /// [`SseReader::next_event`], lent: the event stays valid until the next call, and
    /// its buffers are reused for the next event.
    pub fn next_event_ref(&mut self) -> io::Result<Option<&SseEvent>> {
        self.next_event_ref_or(&mut || true)
    }

    /// [`SseReader::next_event_ref`] that calls `before_read` before each read of the
    /// underlying stream (one that may wait for the network: everything read so far
    /// was consumed; conservative, as the wrapped reader may still answer it from its
    /// own buffer). When `before_read` returns false, stops with `Ok(None)` without
    /// reading.
    pub fn next_event_ref_or(
        &mut self,
        before_read: &mut dyn FnMut() -> bool,
    ) -> io::Result<Option<&SseEvent>> {
        Ok(if self.advance(before_read)? {
            Some(&self.out)
        } else {
            None
        })
    }

    /// Reads lines until an event is dispatched into `self.out` (true) or the input
    /// ends without one, or `before_read` stopped it (false).
    fn advance(&mut self, before_read: &mut dyn FnMut() -> bool) -> io::Result<bool> {
        loop {
            if self.drained && !before_read() {
                return Ok(false);
            }
            let buf = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                // End of input; a partial last line is dropped.
                self.partial.clear();
                return Ok(self.lines.dispatch(&mut self.out));
            }
            let len = buf.len();
            let (used, dispatched) = if self.partial.is_empty() {
                // Every whole line in the buffer, parsed in place, up to a dispatch; the
                // rest (a line split across reads) is kept for the next read.
                let mut used = 0;
                let mut dispatched = false;
                while let Some(rest) = buf.get(used..) {
                    let Some(i) = memchr::memchr(b'\n', rest) else {
                        check_len(rest.len())?;
                        self.partial.extend_from_slice(rest);
                        used = len;
                        break;
                    };
                    check_len(i + 1)?;
                    used += i + 1;
                    if self
                        .lines
                        .line(rest.get(..i).unwrap_or_default(), &mut self.out)
                    {
                        dispatched = true;
                        break;
                    }
                }
                (used, dispatched)
            } else {
                match memchr::memchr(b'\n', buf) {
                    Some(i) => {
                        check_len(self.partial.len() + i + 1)?;
                        self.partial
                            .extend_from_slice(buf.get(..i).unwrap_or_default());
                        let dispatched = self.lines.line(&self.partial, &mut self.out);
                        self.partial.clear();
                        (i + 1, dispatched)
                    }
                    None => {
                        check_len(self.partial.len() + buf.len())?;
                        self.partial.extend_from_slice(buf);
                        (buf.len(), false)
                    }
                }
            };
            self.inner.consume(used);
            self.drained = used == len;
            if dispatched {
                return Ok(true);
            }
        }
    }
}

/// Fails when a line (with its newline) would exceed [`MAX_LINE_BYTES`].
fn check_len(len: usize) -> io::Result<()> {
    if len > MAX_LINE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("SSE line longer than {MAX_LINE_BYTES} bytes"),
        ));
    }
    Ok(())
}

impl LineState {
    /// Handles one line (without its `\n`); true when it dispatched an event into `out`.
    fn line(&mut self, mut bytes: &[u8], out: &mut SseEvent) -> bool {
        if let Some(rest) = bytes.strip_suffix(b"\r") {
            bytes = rest;
        }
        if self.first_line {
            self.first_line = false;
            if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
                bytes = rest;
            }
        }
        let Some(&first) = bytes.first() else {
            return self.dispatch(out);
        };
        if first == b':' {
            return false; // comment
        }
        let (field, value) = match bytes.iter().position(|&b| b == b':') {
            Some(i) => {
                let (field, rest) = bytes.split_at(i);
                let v = rest.get(1..).unwrap_or_default();
                (field, v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (bytes, &b""[..]),
        };
        let target = match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                &mut self.data
            }
            b"event" => {
                self.has_event = true;
                self.event.clear();
                &mut self.event
            }
            b"id" => {
                self.has_id = true;
                self.id.clear();
                &mut self.id
            }
            _ => return false, // retry: and unknown fields are ignored
        };
        // Valid UTF-8 (every real stream) is checked by the fast validator and copied
        // once; only invalid bytes take the lossy path.
        match std::str::from_utf8(value) {
            Ok(v) => target.push_str(v),
            Err(_) => target.push_str(&String::from_utf8_lossy(value)),
        }
        false
    }

    /// Ends the event at a blank line or the end of input: when it has data, moves it
    /// into `out` (true); the event name and id never outlive their event.
    fn dispatch(&mut self, out: &mut SseEvent) -> bool {
        let (has_event, has_id) = (self.has_event, self.has_id);
        self.has_event = false;
        self.has_id = false;
        if !self.has_data {
            return false;
        }
        self.has_data = false;
        set(&mut out.event, has_event.then_some(self.event.as_str()));
        set(&mut out.id, has_id.then_some(self.id.as_str()));
        std::mem::swap(&mut out.data, &mut self.data);
        self.data.clear();
        true
    }
}

/// Sets `slot` to a copy of `v`, reusing the string already there.
fn set(slot: &mut Option<String>, v: Option<&str>) {
    match (slot.as_mut(), v) {
        (Some(s), Some(v)) => {
            s.clear();
            s.push_str(v);
        }
        (None, Some(v)) => *slot = Some(v.to_owned()),
        (_, None) => *slot = None,
    }
}

impl<R: BufRead> Iterator for SseReader<R> {
    type Item = io::Result<SseEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};

    fn parse(s: &[u8]) -> Vec<SseEvent> {
        SseReader::new(s).map(|e| e.unwrap()).collect()
    }

    #[test]
    fn event_and_data_lines() {
        let evs = parse(b"event: a\ndata: {\"x\":1}\n\ndata: two\n\n");
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].event.as_deref(), Some("a"));
        assert_eq!(evs[0].data, "{\"x\":1}");
        assert_eq!(evs[1].event, None);
        assert_eq!(evs[1].data, "two");
    }

    #[test]
    fn multi_line_data_joined_and_one_space_stripped() {
        let evs = parse(b"data:a\ndata:  b\ndata\n\n");
        assert_eq!(evs[0].data, "a\n b\n");
    }

    #[test]
    fn crlf_comments_id_retry() {
        let evs = parse(b": OPENROUTER PROCESSING\r\n\r\nid: 7\r\nretry: 10\r\ndata: x\r\n\r\n");
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, "x");
        assert_eq!(evs[0].id.as_deref(), Some("7"));
    }

    #[test]
    fn blank_lines_without_data_do_not_dispatch() {
        let evs = parse(b"\n\nevent: ping\n\ndata: y\n\n");
        assert_eq!(evs.len(), 1);
        assert_eq!(
            evs[0].event, None,
            "event name does not leak into the next event"
        );
    }

    #[test]
    fn eof_dispatches_complete_lines_and_drops_partial() {
        assert_eq!(parse(b"data: a\n")[0].data, "a");
        assert!(parse(b"data: a").is_empty());
        let evs = parse(b"data: a\n\ndata: {\"trunc");
        assert_eq!(evs.len(), 1);
    }

    #[test]
    fn bom_is_skipped() {
        assert_eq!(parse(b"\xEF\xBB\xBFdata: a\n\n")[0].data, "a");
    }

    /// A reader returning one byte per read, like a slow network.
    struct OneByte<'a>(&'a [u8]);
    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() || buf.is_empty() {
                return Ok(0);
            }
            buf[0] = self.0[0];
            self.0 = &self.0[1..];
            Ok(1)
        }
    }

    #[test]
    fn multibyte_split_across_reads_is_intact() {
        let body = "data: héllo — 你好 🦀\n\n".as_bytes();
        let r = BufReader::with_capacity(1, OneByte(body));
        let evs: Vec<_> = SseReader::new(r).map(|e| e.unwrap()).collect();
        assert_eq!(evs[0].data, "héllo — 你好 🦀");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let evs = parse(b"data: a\xFFb\n\n");
        assert_eq!(evs[0].data, "a\u{FFFD}b");
    }

    /// Lines parsed in place and lines gathered across reads give the same events,
    /// whatever the read sizes (CRLF split between reads, BOM, comments, multi-line
    /// data, a partial last line).
    #[test]
    fn read_sizes_do_not_change_the_events() {
        let body = "\u{FEFF}: hi\r\nevent: a\r\ndata: {\"x\":\"é 🦀\"}\r\n\r\nid: 7\ndata: one\ndata:two\n\n\
                    data\n\nevent: skipped\n\ndata: last\ndata: {\"trunc"
            .as_bytes();
        let whole: Vec<SseEvent> = parse(body);
        assert_eq!(whole.len(), 4);
        assert_eq!(whole[0].event.as_deref(), Some("a"));
        assert_eq!(whole[0].data, "{\"x\":\"é 🦀\"}");
        assert_eq!(
            (whole[2].data.as_str(), whole[2].event.as_deref()),
            ("", None)
        );
        assert_eq!(whole[3].data, "last");
        assert_eq!(whole[1].data, "one\ntwo");
        assert_eq!(whole[1].id.as_deref(), Some("7"));
        for cap in 1..=body.len() {
            let mut r = SseReader::new(BufReader::with_capacity(cap, OneByteOr(body, cap)));
            let mut got = vec![];
            while let Some(ev) = r.next_event_ref().unwrap() {
                got.push(ev.clone());
            }
            assert_eq!(got, whole, "capacity {cap}");
        }
    }

    /// A reader returning at most `n` bytes per read.
    struct OneByteOr<'a>(&'a [u8], usize);
    impl Read for OneByteOr<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(self.1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn overlong_line_is_refused() {
        let mut body = b"data: ".to_vec();
        body.resize(MAX_LINE_BYTES + 10, b'x');
        body.extend_from_slice(b"\n\n");
        let err = SseReader::new(BufReader::new(&body[..]))
            .next_event()
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut ok = b"data: ".to_vec();
        ok.resize(MAX_LINE_BYTES - 1, b'x');
        ok.extend_from_slice(b"\n\n");
        let ev = SseReader::new(BufReader::new(&ok[..]))
            .next_event()
            .unwrap()
            .unwrap();
        assert_eq!(ev.data.len(), MAX_LINE_BYTES - 7);
    }
}
