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
pub struct SseReader<R> {
    inner: R,
    line: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
    first_line: bool,
}

impl<R: BufRead> SseReader<R> {
    /// Wraps a buffered reader (e.g. `BufReader` over an HTTP body).
    pub fn new(inner: R) -> Self {
        SseReader {
            inner,
            line: Vec::with_capacity(256),
            event: None,
            data: String::new(),
            has_data: false,
            id: None,
            first_line: true,
        }
    }

    /// The next event; `Ok(None)` at end of input. I/O errors (including read timeouts)
    /// are returned as they come; the reader should not be used after an error.
    pub fn next_event(&mut self) -> io::Result<Option<SseEvent>> {
        loop {
            self.line.clear();
            let n = read_line_limited(&mut self.inner, &mut self.line)?;
            if n == 0 || self.line.last() != Some(&b'\n') {
                // End of input; a partial last line is dropped.
                return Ok(self.take_event());
            }
            self.line.pop();
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let mut bytes: &[u8] = &self.line;
            if self.first_line {
                self.first_line = false;
                if let Some(rest) = bytes.strip_prefix(b"\xEF\xBB\xBF") {
                    bytes = rest;
                }
            }
            if bytes.is_empty() {
                if let Some(ev) = self.take_event() {
                    return Ok(Some(ev));
                }
                continue;
            }
            if bytes[0] == b':' {
                continue; // comment
            }
            let (field, value) = match bytes.iter().position(|&b| b == b':') {
                Some(i) => {
                    let v = &bytes[i + 1..];
                    (&bytes[..i], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (bytes, &b""[..]),
            };
            // Valid UTF-8 (every real stream) is checked by the fast validator and
            // copied once; only invalid bytes take the lossy path.
            let value = match std::str::from_utf8(value) {
                Ok(v) => std::borrow::Cow::Borrowed(v),
                Err(_) => String::from_utf8_lossy(value),
            };
            match field {
                b"data" => {
                    if self.has_data {
                        self.data.push('\n');
                    }
                    self.data.push_str(&value);
                    self.has_data = true;
                }
                b"event" => self.event = Some(value.into_owned()),
                b"id" => self.id = Some(value.into_owned()),
                _ => {} // retry: and unknown fields are ignored
            }
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let id = self.id.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id,
        })
    }
}

impl<R: BufRead> Iterator for SseReader<R> {
    type Item = io::Result<SseEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

/// `read_until(b'\n')` with a length cap.
fn read_line_limited<R: BufRead>(r: &mut R, out: &mut Vec<u8>) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let (done, used) = {
            let buf = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(total);
            }
            match buf.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    out.extend_from_slice(&buf[..=i]);
                    (true, i + 1)
                }
                None => {
                    out.extend_from_slice(buf);
                    (false, buf.len())
                }
            }
        };
        r.consume(used);
        total += used;
        if out.len() > MAX_LINE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("SSE line longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        if done {
            return Ok(total);
        }
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
}
