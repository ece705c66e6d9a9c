//! Line transport: the bounded line reader (64 MiB cap), the outbox (a bounded channel of
//! serialized frames) and the writer thread that alone owns the output. Every frame
//! entering the outbox passes the secret redactor (`crate::secrets`) and has U+2028,
//! U+2029 and U+0085 escaped (`crate::util::escape_line_separators`).
//!
//! Framing follows spec `app-server.md` §1.1: one JSON object per line; `\r\n` accepted;
//! blank lines ignored. A line over the cap is reported as [`LineRead::TooLong`] after
//! the rest of it has been drained, so memory stays bounded and the next line is served.

use crossbeam_channel::{bounded, Receiver, SendTimeoutError, Sender};
use std::io::{self, BufRead, Write};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest accepted line, in bytes (spec §1.1: 64 MiB).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Frames the outbox holds at most before producers wait (backpressure): room for 256
/// lanes of [`LANE_FRAMES`] each; past that the bound itself, not the lanes, decides who
/// goes next. (Delta frames are ~200 bytes: a full outbox is ~13 MiB, reached only while
/// the client does not read.)
pub const OUTBOX_FRAMES: usize = 65536;

/// Slots of the outbox queue. A slot holds one frame, or one [`Lines`] hand-off of up to
/// [`LANE_CHUNK_LINES`] frames, so a full queue holds at most [`OUTBOX_FRAMES`] frames.
pub const OUTBOX_CAPACITY: usize = OUTBOX_FRAMES / LANE_CHUNK_LINES;

/// How many of one [`Lane`]'s frames may wait in the outbox while other producers'
/// frames wait there too. A lane past it waits until half of its frames were written.
pub const LANE_FRAMES: usize = 256;

/// One producer's fair share of the outbox, so that many conversations streaming at
/// once share it fairly. Sent through [`Outbox::send_lane`], at most [`LANE_FRAMES`] of a lane's frames
/// are queued while the outbox also holds other frames; past that the producer waits
/// until half of them were written, then enqueues its next ones behind everyone
/// else's. The queue stays one FIFO, so the order of frames is what it was; the lane
/// only delays a flooding producer's next enqueue. Without it whichever conversation's
/// thread is on a CPU fills the queue with its whole stream (one scheduler time slice
/// is more than a thousand deltas), and the others wait behind it. A lane alone in the
/// outbox is not held back (one conversation streams at the full rate).
///
/// Cheap to clone; a clone is the same lane.
#[derive(Clone, Default)]
pub struct Lane(Arc<LaneState>);

#[derive(Default)]
struct LaneState {
    /// The lane's frames in the outbox (enqueued, not yet written or dropped).
    queued: parking_lot::Mutex<LaneCount>,
    /// Signalled when `queued.lines` falls to half of [`LANE_FRAMES`].
    room: parking_lot::Condvar,
}

/// What one lane has in the outbox: frames (lines), and the outbox slots that hold them
/// (a slot holds one [`Lines`] hand-off).
#[derive(Default, Debug, PartialEq, Eq, Clone, Copy)]
struct LaneCount {
    lines: usize,
    slots: usize,
}

/// A lane's claim on one queued slot of `lines` frames, given back when the writer is
/// done with it (written, or discarded after the output broke) and when it is dropped
/// unwritten (an enqueue that timed out, an outbox dropped with frames in it).
struct Ticket {
    lane: Arc<LaneState>,
    lines: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = self.lane.queued.lock();
        let before = q.lines;
        q.lines = q.lines.saturating_sub(self.lines);
        q.slots = q.slots.saturating_sub(1);
        if before > LANE_FRAMES / 2 && q.lines <= LANE_FRAMES / 2 {
            self.lane.room.notify_all();
        }
    }
}

/// The most frames one [`Lines`] hand-off carries: half a lane, so a lane always has
/// room for its next hand-off once it was let go on. Producers hand off before they
/// reach it (a debug assertion in [`Outbox::send_lane`] checks).
pub const LANE_CHUNK_LINES: usize = LANE_FRAMES / 2;

/// Frames of one producer gathered for one hand-off to the outbox
/// ([`Outbox::send_lane`]): JSON lines joined by `\n`, no newline after the last. One
/// hand-off costs one channel slot, one allocation and one lane claim however many
/// frames it carries (a streaming conversation hands its deltas over a batch at a time
/// instead of one by one). Each frame must be one line (no raw `\n`), which
/// every serde_json frame is.
#[derive(Default, Debug)]
pub struct Lines {
    bytes: Vec<u8>,
    count: usize,
}

impl Lines {
    /// Starts the next frame and returns the buffer to write it into (its end).
    pub fn next_frame(&mut self) -> &mut Vec<u8> {
        if self.count > 0 {
            self.bytes.push(b'\n');
        }
        self.count += 1;
        &mut self.bytes
    }

    /// Frames gathered.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no frame was gathered.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The joined frames (what [`Outbox::send_lane`] hands over).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Takes the frames out, leaving an empty set with room for as many bytes (at most
    /// 64 KiB: one huge frame does not leave a huge buffer behind).
    fn take(&mut self) -> (Vec<u8>, usize) {
        let cap = self.bytes.len().min(64 * 1024);
        let bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(cap));
        (bytes, std::mem::take(&mut self.count))
    }
}

/// One read from a [`LineSource`].
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A complete line is in the buffer (line end stripped, may be blank).
    Line,
    /// The line exceeded the cap; it was drained and discarded. Holds its length.
    TooLong(usize),
    /// End of input.
    Eof,
}

/// A source of input lines.
pub trait LineSource: Send {
    /// Reads the next line into `buf` (cleared first). See [`LineRead`].
    fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<LineRead>;
}

/// Reads lines from any `BufRead` with a byte cap per line.
pub struct CappedLines<R> {
    inner: R,
    cap: usize,
}

impl<R: BufRead> CappedLines<R> {
    /// Wraps `inner`; lines longer than `cap` bytes are drained and reported.
    pub fn new(inner: R, cap: usize) -> Self {
        CappedLines { inner, cap }
    }
}

impl<R: BufRead + Send> LineSource for CappedLines<R> {
    fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<LineRead> {
        buf.clear();
        let mut total = 0usize;
        let mut too_long = false;
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                if total == 0 {
                    return Ok(LineRead::Eof);
                }
                break;
            }
            let (take, done) = match memchr_newline(chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            total += take;
            if !too_long {
                if total > self.cap + 2 {
                    too_long = true;
                    buf.clear();
                    buf.shrink_to(64 * 1024);
                } else {
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.inner.consume(take);
            if done {
                break;
            }
        }
        if too_long {
            return Ok(LineRead::TooLong(total));
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        if buf.len() > self.cap {
            buf.clear();
            return Ok(LineRead::TooLong(total));
        }
        Ok(LineRead::Line)
    }
}

/// What every frame goes through on its way to the outbox: the secret redactor, then
/// the escaping of U+2028, U+2029 and U+0085 (`crate::util::escape_line_separators`),
/// so no line splitter cuts a frame.
fn outgoing(frame: Vec<u8>) -> Vec<u8> {
    crate::util::escape_line_separators(crate::secrets::redact_vec(frame))
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Lines delivered over a channel (in-memory connections: `wuu exec`, tests, benches).
pub struct ChannelLines(pub Receiver<Vec<u8>>);

impl LineSource for ChannelLines {
    fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<LineRead> {
        match self.0.recv() {
            Ok(line) => {
                buf.clear();
                buf.extend_from_slice(&line);
                while matches!(buf.last(), Some(b'\n' | b'\r')) {
                    buf.pop();
                }
                Ok(LineRead::Line)
            }
            Err(_) => Ok(LineRead::Eof),
        }
    }
}

/// Where the writer puts frames.
pub trait FrameSink: Send {
    /// Writes one frame (a JSON line without its `\n`).
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Writes frames joined by `\n` (a [`Lines`] hand-off; no newline after the last).
    /// By default one [`FrameSink::write_frame`] per frame.
    fn write_lines(&mut self, lines: &[u8]) -> io::Result<()> {
        lines
            .split(|&b| b == b'\n')
            .try_for_each(|f| self.write_frame(f))
    }
    /// Flushes buffered frames.
    fn flush(&mut self) -> io::Result<()>;
}

/// A sink over any writer (stdout): frame + `\n`, given to the writer together (one
/// vectored write: a frame larger than a `BufWriter`'s buffer goes out with its newline
/// in one system call, so the client is not woken twice).
pub struct WriteSink<W: Write + Send>(pub W);

impl<W: Write + Send> FrameSink for WriteSink<W> {
    /// Joined frames are already lines: written as they are, with the last newline.
    fn write_lines(&mut self, lines: &[u8]) -> io::Result<()> {
        self.write_frame(lines)
    }
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        let mut parts = [io::IoSlice::new(frame), io::IoSlice::new(b"\n")];
        let mut parts = &mut parts[..];
        while !parts.is_empty() {
            match self.0.write_vectored(parts) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A sink that sends each frame over a bounded channel (in-memory connections). A full
/// channel blocks the writer, which fills the outbox: backpressure reaches producers.
pub struct ChannelSink(pub Sender<Vec<u8>>);

impl FrameSink for ChannelSink {
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        self.0
            .send(frame.to_vec())
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "client disconnected"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Frame {
    /// A frame to write.
    Line(Vec<u8>),
    /// Frames joined by `\n` ([`Lines`]), with their lane's claim.
    Lines(Vec<u8>, Ticket),
    Flush(Sender<()>),
}

/// The outbox could not take a frame within the producer's deadline: the client is not
/// reading. The affected run fails with a protocol error; nothing is dropped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow;

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("subscription overflow: the client is not reading the output stream")
    }
}

/// Producer side of the outbox. Cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    tx: Sender<Frame>,
    inflight: std::sync::Arc<InFlight>,
    out: std::sync::Arc<Output>,
    /// The client asked for deferred content (`capabilities.deferred_notification_content`):
    /// large images go by reference in responses and notifications.
    defer: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The sink, shared by the writer thread and uncontended direct writes
/// ([`Outbox::send_direct`]). `queued` counts line frames enqueued but not yet written,
/// changed only under the sink lock by the writer, so a direct write can never overtake
/// a queued frame.
struct Output {
    sink: parking_lot::Mutex<Box<dyn FrameSink>>,
    queued: std::sync::atomic::AtomicUsize,
    broken: std::sync::atomic::AtomicBool,
}

/// Requests read but not yet answered (so shutdown can wait for their answers).
#[derive(Default)]
struct InFlight {
    count: parking_lot::Mutex<usize>,
    idle: parking_lot::Condvar,
}

/// How long a notification producer waits for room before declaring [`Overflow`].
pub const NOTIFY_DEADLINE: Duration = Duration::from_secs(30);

impl Outbox {
    /// Turns deferred content on or off (`initialize`).
    pub fn set_defer_content(&self, on: bool) {
        self.defer.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether large images go by reference in frames.
    pub fn defer_content(&self) -> bool {
        self.defer.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Enqueues a serialized frame, waiting at most `deadline` for room.
    pub fn send_within(&self, frame: Vec<u8>, deadline: Duration) -> Result<(), Overflow> {
        let frame = outgoing(frame);
        self.enqueue_within(Frame::Line(frame), deadline)
    }

    /// Hands the frames gathered in `lines` to the outbox as one slot of `lane`, and
    /// leaves `lines` empty. First waits (within `deadline`) while the lane has
    /// [`LANE_FRAMES`] frames queued among others' frames. Nothing is sent for an empty
    /// set. Errors: [`Overflow`] when the deadline passes (the client is not reading);
    /// the frames are dropped then (the turn fails).
    pub fn send_lane(
        &self,
        lane: &Lane,
        lines: &mut Lines,
        deadline: Duration,
    ) -> Result<(), Overflow> {
        let (bytes, n) = lines.take();
        if n == 0 {
            return Ok(());
        }
        debug_assert!(n <= LANE_CHUNK_LINES, "a hand-off of {n} frames");
        // The clock is read only by a lane that has to wait (the hot path of every
        // hand-off does not).
        let mut until: Option<Instant> = None;
        {
            let mut q = lane.0.queued.lock();
            while q.lines >= LANE_FRAMES && self.tx.len() > q.slots {
                let end = *until.get_or_insert_with(|| Instant::now() + deadline);
                if lane.0.room.wait_until(&mut q, end).timed_out()
                    && q.lines >= LANE_FRAMES
                    && self.tx.len() > q.slots
                {
                    return Err(Overflow);
                }
            }
            q.lines += n;
            q.slots += 1;
        }
        let ticket = Ticket {
            lane: lane.0.clone(),
            lines: n,
        };
        let left = match until {
            Some(end) => end.saturating_duration_since(Instant::now()),
            None => deadline,
        };
        let bytes = outgoing(bytes);
        self.enqueue_within(Frame::Lines(bytes, ticket), left)
    }

    fn enqueue_within(&self, frame: Frame, deadline: Duration) -> Result<(), Overflow> {
        use std::sync::atomic::Ordering::SeqCst;
        self.out.queued.fetch_add(1, SeqCst);
        match self.tx.send_timeout(frame, deadline) {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Timeout(_)) => {
                self.out.queued.fetch_sub(1, SeqCst);
                Err(Overflow)
            }
            // The writer is gone (output closed): nothing can be delivered any more.
            Err(SendTimeoutError::Disconnected(_)) => {
                self.out.queued.fetch_sub(1, SeqCst);
                Ok(())
            }
        }
    }

    /// Enqueues a frame, waiting as long as it takes (responses: the client asked).
    pub fn send(&self, frame: Vec<u8>) {
        use std::sync::atomic::Ordering::SeqCst;
        let frame = outgoing(frame);
        self.out.queued.fetch_add(1, SeqCst);
        if self.tx.send(Frame::Line(frame)).is_err() {
            self.out.queued.fetch_sub(1, SeqCst);
        }
    }

    /// Writes a response frame at once when the output is idle (nothing queued, the
    /// writer not writing), saving the hand-off to the writer thread; otherwise
    /// enqueues it behind what is queued. Order is kept either way.
    pub fn send_direct(&self, frame: Vec<u8>) {
        use std::sync::atomic::Ordering::SeqCst;
        let frame = outgoing(frame);
        if let Some(mut sink) = self.out.sink.try_lock() {
            if self.out.queued.load(SeqCst) == 0 && !self.out.broken.load(SeqCst) {
                log::trace!("out: {}", String::from_utf8_lossy(&frame));
                let r = sink.write_frame(&frame).and_then(|_| sink.flush());
                if let Err(e) = r {
                    log::warn!("output closed: {e}");
                    self.out.broken.store(true, SeqCst);
                }
                return;
            }
            log::trace!(
                "direct write deferred: {} frame(s) queued",
                self.out.queued.load(SeqCst)
            );
        } else {
            log::trace!("direct write deferred: the writer is busy");
        }
        self.send(frame);
    }

    /// Whether a write to the output failed (the client closed its end: EPIPE). Once
    /// true it stays true; later frames are discarded.
    pub fn is_broken(&self) -> bool {
        self.out.broken.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Counts a request that will be answered (see [`Outbox::answered`]).
    pub fn begin_request(&self) {
        *self.inflight.count.lock() += 1;
    }

    /// Counts the answer of a request counted by [`Outbox::begin_request`].
    pub fn answered(&self) {
        let mut n = self.inflight.count.lock();
        *n = n.saturating_sub(1);
        self.inflight.idle.notify_all();
    }

    /// Waits (at most `limit`) until at most `keep` counted requests are unanswered (the
    /// caller's own, e.g. `shutdown`); returns how many are unanswered then.
    pub fn wait_answered(&self, keep: usize, limit: Duration) -> usize {
        let deadline = std::time::Instant::now() + limit;
        let mut n = self.inflight.count.lock();
        while *n > keep {
            if self.inflight.idle.wait_until(&mut n, deadline).timed_out() {
                break;
            }
        }
        *n
    }

    /// Waits until every frame enqueued before this call has been written and flushed.
    pub fn flush(&self) {
        let (tx, rx) = bounded(1);
        if self.tx.send(Frame::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }
}

/// Starts the writer thread over `sink`. It writes frames in order and flushes whenever
/// the outbox is momentarily empty (bursts are batched). A write error (the client
/// closed the stream) is logged once; later frames are discarded so producers never block
/// on a dead client. `on_closed` runs once when that happens.
pub fn start_writer(
    sink: Box<dyn FrameSink>,
    on_closed: Box<dyn Fn() + Send>,
) -> (Outbox, JoinHandle<()>) {
    use std::sync::atomic::Ordering::SeqCst;
    let (tx, rx) = bounded::<Frame>(OUTBOX_CAPACITY);
    let out = std::sync::Arc::new(Output {
        sink: parking_lot::Mutex::new(sink),
        queued: Default::default(),
        broken: Default::default(),
    });
    let out2 = out.clone();
    let handle = std::thread::Builder::new()
        .name("wuu-writer".into())
        .spawn(move || {
            let mut told = false;
            // Writes one slot (one frame, or joined frames), flushing when the outbox
            // is empty.
            let write = |bytes: &[u8], joined: bool| {
                let mut sink = out2.sink.lock();
                if !out2.broken.load(SeqCst) {
                    // One record per frame: a joined hand-off logged whole would put
                    // its later frames on stderr as bare protocol lines.
                    if log::log_enabled!(log::Level::Trace) {
                        for frame in bytes.split(|&b| b == b'\n') {
                            log::trace!("out: {}", String::from_utf8_lossy(frame));
                        }
                    }
                    let mut r = if joined {
                        sink.write_lines(bytes)
                    } else {
                        sink.write_frame(bytes)
                    };
                    if r.is_ok() && rx.is_empty() {
                        r = sink.flush();
                    }
                    if let Err(e) = r {
                        log::warn!("output closed: {e}");
                        out2.broken.store(true, SeqCst);
                    }
                }
                out2.queued.fetch_sub(1, SeqCst);
            };
            for frame in rx.iter() {
                match frame {
                    Frame::Line(bytes) => write(&bytes, false),
                    Frame::Lines(bytes, ticket) => {
                        write(&bytes, true);
                        drop(ticket);
                    }
                    Frame::Flush(ack) => {
                        if !out2.broken.load(SeqCst) {
                            let _ = out2.sink.lock().flush();
                        }
                        let _ = ack.send(());
                    }
                }
                if out2.broken.load(SeqCst) && !told {
                    told = true;
                    on_closed();
                }
            }
            if !out2.broken.load(SeqCst) {
                let _ = out2.sink.lock().flush();
            }
        })
        .expect("spawn writer thread");
    (
        Outbox {
            tx,
            inflight: Default::default(),
            out,
            defer: Default::default(),
        },
        handle,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn lines(input: &[u8], cap: usize) -> Vec<Result<String, usize>> {
        let mut src = CappedLines::new(Cursor::new(input.to_vec()), cap);
        let mut out = vec![];
        let mut buf = vec![];
        loop {
            match src.next_line(&mut buf).unwrap() {
                LineRead::Line => out.push(Ok(String::from_utf8(buf.clone()).unwrap())),
                LineRead::TooLong(n) => out.push(Err(n)),
                LineRead::Eof => return out,
            }
        }
    }

    #[test]
    fn crlf_blank_and_last_line_without_newline() {
        assert_eq!(
            lines(b"a\r\n\r\n  \nb", 100),
            vec![
                Ok("a".into()),
                Ok("".into()),
                Ok("  ".into()),
                Ok("b".into())
            ]
        );
    }

    #[test]
    fn too_long_is_drained_and_next_line_served() {
        let mut input = vec![b'x'; 50];
        input.extend_from_slice(b"\nok\n");
        let got = lines(&input, 10);
        assert_eq!(got, vec![Err(51), Ok("ok".into())]);
    }

    #[test]
    fn exactly_cap_is_accepted() {
        let mut input = vec![b'y'; 10];
        input.extend_from_slice(b"\r\n");
        assert_eq!(lines(&input, 10), vec![Ok("y".repeat(10))]);
    }

    /// A sink that holds every write until the test opens its gate, and records frames.
    struct GatedSink {
        gate: crossbeam_channel::Receiver<()>,
        open: bool,
        out: Sender<Vec<u8>>,
    }

    impl FrameSink for GatedSink {
        fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
            if !self.open && self.gate.recv().is_err() {
                self.open = true;
            }
            let _ = self.out.send(frame.to_vec());
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Frames in, a gate that lets one write through per `()` (drop it: all), frames out.
    fn gated_writer() -> (Outbox, Sender<()>, crossbeam_channel::Receiver<Vec<u8>>) {
        let (gate_tx, gate) = bounded(0);
        let (out, out_rx) = crossbeam_channel::unbounded();
        let sink = GatedSink {
            gate,
            open: false,
            out,
        };
        let (outbox, _join) = start_writer(Box::new(sink), Box::new(|| {}));
        (outbox, gate_tx, out_rx)
    }

    /// A hand-off of one frame.
    fn one(frame: &str) -> Lines {
        let mut l = Lines::default();
        l.next_frame().extend_from_slice(frame.as_bytes());
        l
    }

    /// A hand-off of `frames`.
    fn joined(frames: &[String]) -> Lines {
        let mut l = Lines::default();
        for f in frames {
            l.next_frame().extend_from_slice(f.as_bytes());
        }
        l
    }

    /// Waits (at most 5 s) until `done` holds.
    fn wait_until(done: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(5);
        while !done() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn wait_queued(outbox: &Outbox, n: usize) {
        wait_until(|| outbox.tx.len() == n);
        assert_eq!(outbox.tx.len(), n, "frames queued");
    }

    /// Short producer deadline of the lane tests.
    const SHORT: Duration = Duration::from_millis(100);

    /// A gated writer stuck on lane B's frame `b0`, with `b1` queued behind it: the
    /// outbox holds another producer's frame, so lane A gets only its share.
    fn stuck_on_b() -> (
        Outbox,
        Sender<()>,
        crossbeam_channel::Receiver<Vec<u8>>,
        Lane,
        Lane,
    ) {
        let (outbox, gate, out) = gated_writer();
        let (a, b) = (Lane::default(), Lane::default());
        outbox.send_lane(&b, &mut one("b0"), SHORT).unwrap();
        wait_queued(&outbox, 0); // the writer holds b0 at the gate
        outbox.send_lane(&b, &mut one("b1"), SHORT).unwrap();
        (outbox, gate, out, a, b)
    }

    /// The next `n` frames written, as text.
    fn written(out: &crossbeam_channel::Receiver<Vec<u8>>, n: usize) -> Vec<String> {
        out.iter()
            .take(n)
            .map(|f| String::from_utf8(f).unwrap())
            .collect()
    }

    #[test]
    fn a_lane_alone_is_not_held_back() {
        // One conversation streaming by itself fills the outbox as before.
        let (outbox, gate, out) = gated_writer();
        let lane = Lane::default();
        // Well past the lane's share, within the outbox's slots (one frame a slot).
        let n = LANE_FRAMES * 3 / 2;
        assert!(n < OUTBOX_CAPACITY);
        for i in 0..n {
            outbox
                .send_lane(
                    &lane,
                    &mut one(&format!("a{i}")),
                    Duration::from_millis(200),
                )
                .expect("a lane alone never waits");
        }
        drop(gate);
        let got: Vec<Vec<u8>> = out.iter().take(n).collect();
        assert_eq!(got.last(), Some(&format!("a{}", n - 1).into_bytes()));
    }

    #[test]
    fn a_flooding_lane_waits_behind_the_others_and_order_is_kept() {
        // The writer is stuck on frame b0 and b1 waits; lane A may queue
        // LANE_FRAMES frames beside b1, not one more, until half of them are written.
        let (outbox, gate, out, a, _b) = stuck_on_b();
        for i in 0..LANE_FRAMES {
            outbox
                .send_lane(&a, &mut one(&format!("a{i}")), SHORT)
                .unwrap();
        }
        assert_eq!(
            outbox.send_lane(&a, &mut one("late"), SHORT),
            Err(Overflow),
            "a lane with LANE_FRAMES queued among others' frames waits"
        );
        // A producer on another thread waits for room and goes on once half of A's
        // frames were written.
        let (outbox2, a2) = (outbox.clone(), a.clone());
        let producer = std::thread::spawn(move || {
            outbox2.send_lane(&a2, &mut one("a-next"), Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!producer.is_finished(), "waits while its lane is full");
        for _ in 0..2 + LANE_FRAMES / 2 {
            gate.send(()).unwrap(); // b0 (held), b1, then A's frames one by one
        }
        assert_eq!(producer.join().unwrap(), Ok(()));
        drop(gate);
        let got = written(&out, 3 + LANE_FRAMES);
        let mut want = vec!["b0".to_owned(), "b1".to_owned()];
        want.extend((0..LANE_FRAMES).map(|i| format!("a{i}")));
        want.push("a-next".into());
        assert_eq!(
            got, want,
            "one FIFO: frames leave in the order they entered"
        );
    }

    #[test]
    fn a_lane_gets_its_claims_back_from_frames_never_written() {
        // Frames that are never written (the outbox is dropped with them queued) still
        // give their lane's claims back.
        let (tx, rx) = bounded::<Frame>(OUTBOX_CAPACITY);
        let outbox = Outbox {
            tx,
            inflight: Default::default(),
            out: std::sync::Arc::new(Output {
                sink: parking_lot::Mutex::new(Box::new(WriteSink(io::sink()))),
                queued: Default::default(),
                broken: Default::default(),
            }),
            defer: Default::default(),
        };
        let lane = Lane::default();
        for _ in 0..LANE_FRAMES {
            outbox
                .send_lane(&lane, &mut one("x"), Duration::from_millis(100))
                .unwrap();
        }
        assert_eq!(lane.0.queued.lock().lines, LANE_FRAMES);
        drop(outbox);
        drop(rx);
        assert_eq!(
            *lane.0.queued.lock(),
            LaneCount::default(),
            "dropped frames give their claims back"
        );
    }

    #[test]
    fn joined_frames_leave_one_by_one_and_a_lane_counts_each() {
        // A hand-off of several frames takes one slot but counts as that many frames
        // of its lane, and reaches a frame sink (in-memory connections) as separate
        // frames, in order, between the frames around it.
        let (outbox, gate, out, a, b) = stuck_on_b();
        let first: Vec<String> = (0..LANE_CHUNK_LINES).map(|i| format!("a{i}")).collect();
        let second: Vec<String> = (LANE_CHUNK_LINES..LANE_FRAMES)
            .map(|i| format!("a{i}"))
            .collect();
        let mut lines = joined(&first);
        outbox.send_lane(&a, &mut lines, SHORT).unwrap();
        assert!(lines.is_empty(), "a hand-off empties the set");
        outbox.send_lane(&a, &mut joined(&second), SHORT).unwrap();
        assert_eq!(
            *a.0.queued.lock(),
            LaneCount {
                lines: LANE_FRAMES,
                slots: 2
            }
        );
        wait_queued(&outbox, 3);
        assert_eq!(
            outbox.send_lane(&a, &mut one("late"), SHORT),
            Err(Overflow),
            "LANE_FRAMES frames in two slots fill the lane"
        );
        outbox.send_lane(&b, &mut one("b2"), SHORT).unwrap();
        outbox.send_lane(&a, &mut Lines::default(), SHORT).unwrap();
        wait_queued(&outbox, 4);
        drop(gate);
        let got = written(&out, 3 + LANE_FRAMES);
        let mut want = vec!["b0".to_owned(), "b1".to_owned()];
        want.extend(first);
        want.extend(second);
        want.push("b2".into());
        assert_eq!(got, want);
        wait_until(|| *a.0.queued.lock() == LaneCount::default());
        assert_eq!(
            *a.0.queued.lock(),
            LaneCount::default(),
            "claims given back"
        );
    }

    #[test]
    fn joined_frames_are_written_as_lines() {
        let mut lines = joined(&["{\"a\":1}".into(), "{\"b\":2}".into()]);
        assert_eq!(lines.len(), 2);
        let mut sink = WriteSink(Recording {
            writes: vec![],
            max: usize::MAX,
        });
        sink.write_lines(lines.as_bytes()).unwrap();
        assert_eq!(sink.0.writes.concat(), b"{\"a\":1}\n{\"b\":2}\n");
        let (bytes, n) = lines.take();
        assert_eq!((bytes.len(), n), (15, 2));
        assert!(lines.is_empty() && lines.as_bytes().is_empty());
    }

    /// Records every write it gets; takes at most `max` bytes per call.
    struct Recording {
        writes: Vec<Vec<u8>>,
        max: usize,
    }

    impl Write for Recording {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[io::IoSlice::new(buf)])
        }
        fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = all.len().min(self.max);
            self.writes.push(all[..n].to_vec());
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_large_frame_leaves_with_its_newline_in_one_write() {
        // (A `BufWriter` over a vectored writer such as a `File` passes both parts on
        // in one call when they exceed its buffer.)
        let frame = vec![b'x'; 100];
        let mut sink = WriteSink(Recording {
            writes: vec![],
            max: usize::MAX,
        });
        sink.write_frame(&frame).unwrap();
        let writes = &sink.0.writes;
        assert_eq!(writes.len(), 1, "one write, not frame then newline");
        assert_eq!(writes[0].len(), 101);
        assert_eq!(writes[0].last(), Some(&b'\n'));
    }

    #[test]
    fn short_writes_still_deliver_the_whole_frame() {
        let mut sink = WriteSink(Recording {
            writes: vec![],
            max: 3,
        });
        sink.write_frame(b"{\"id\":1}").unwrap();
        assert_eq!(sink.0.writes.concat(), b"{\"id\":1}\n");
    }
}
