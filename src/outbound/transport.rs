//! Line transport: the bounded line reader (64 MiB cap), the outbox (a bounded channel of
//! serialized frames) and the writer thread that alone owns the output. Every frame
//! entering the outbox passes the secret redactor (`crate::secrets`) and has U+2028,
//! U+2029 and U+0085 escaped (`crate::util::escape_line_separators`).
//!
//! Framing follows spec `app-server.md` §1.1: one JSON object per line; `\r\n` accepted;
//! blank lines ignored. A line over the cap is reported as [`LineRead::TooLong`] after
//! the rest of it has been drained, so memory stays bounded and the next line is served.

use super::park::{Refused, Room, WriterSleep};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
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
/// frames wait there too. A lane past it waits until the writer has taken half of them.
pub const LANE_FRAMES: usize = 256;

/// One producer's fair share of the outbox, so that many conversations streaming at
/// once share it fairly. Sent through [`Outbox::send_lane`], at most [`LANE_FRAMES`] of a lane's frames
/// are queued while the outbox also holds other frames; past that the producer waits
/// until the writer has taken half of them, then enqueues its next ones behind everyone
/// else's. The queue stays one FIFO, so the order of frames is what it was; the lane
/// only delays a flooding producer's next enqueue. Without it whichever conversation's
/// thread is on a CPU fills the queue with its whole stream (one scheduler time slice
/// is more than a thousand deltas), and the others wait behind it. A lane alone in the
/// outbox is not held back (one conversation streams at the full rate).
///
/// Cheap to clone; a clone is the same lane.
#[derive(Clone, Default)]
pub struct Lane(Arc<LaneState>);

/// A lane's counts are atomics, so the writer giving claims back never waits for a
/// producer (with hundreds of threads on a few CPUs, a lock holder is often preempted);
/// the lock is taken only by a producer that waits and by the writer waking it.
#[derive(Default)]
struct LaneState {
    /// The lane's frames in the outbox (enqueued, not yet taken by the writer or dropped).
    lines: AtomicUsize,
    /// The outbox slots holding them.
    slots: AtomicUsize,
    /// Held by a waiting producer between its check of the counts and its sleep.
    lock: parking_lot::Mutex<()>,
    /// Signalled when `lines` falls to half of [`LANE_FRAMES`].
    room: parking_lot::Condvar,
}

impl LaneState {
    /// What the lane has in the outbox now.
    fn count(&self) -> LaneCount {
        LaneCount {
            lines: self.lines.load(SeqCst),
            slots: self.slots.load(SeqCst),
        }
    }

    /// Whether a hand-off must wait: the lane has [`LANE_FRAMES`] queued and the outbox
    /// (of `queued` slots) also holds other producers' frames.
    fn full(&self, queued: usize) -> bool {
        let q = self.count();
        q.lines >= LANE_FRAMES && queued > q.slots
    }
}

/// What one lane has in the outbox: frames (lines), and the outbox slots that hold them
/// (a slot holds one [`Lines`] hand-off).
#[derive(Default, Debug, PartialEq, Eq, Clone, Copy)]
struct LaneCount {
    lines: usize,
    slots: usize,
}

/// A lane's claim on one queued slot of `lines` frames, given back when the writer takes
/// the slot out of the outbox (it writes what it took before it takes more) and when it is
/// dropped untaken (an enqueue that timed out, an outbox dropped with frames in it).
struct Ticket {
    lane: Arc<LaneState>,
    lines: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let lane = &self.lane;
        lane.slots.fetch_sub(1, SeqCst);
        let before = lane.lines.fetch_sub(self.lines, SeqCst);
        if before > LANE_FRAMES / 2 && before - self.lines <= LANE_FRAMES / 2 {
            // Under the lock: a producer that saw the lane full is asleep by now.
            let _guard = lane.lock.lock();
            lane.room.notify_all();
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
    /// Writes several slots in order, each as [`FrameSink::write_lines`] takes it (one
    /// frame, or frames joined by `\n`). By default one `write_lines` per slot.
    fn write_slots(&mut self, slots: &[&[u8]]) -> io::Result<()> {
        slots.iter().try_for_each(|s| self.write_lines(s))
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
        self.write_all_vectored(&mut [io::IoSlice::new(frame), io::IoSlice::new(b"\n")])
    }
    /// Every slot with its newline in one vectored write (a `BufWriter` copies them when
    /// they fit its buffer, and passes them on in one `writev` when they do not).
    fn write_slots(&mut self, slots: &[&[u8]]) -> io::Result<()> {
        let mut parts: Vec<io::IoSlice<'_>> = Vec::with_capacity(slots.len() * 2);
        for s in slots {
            parts.push(io::IoSlice::new(s));
            parts.push(io::IoSlice::new(b"\n"));
        }
        self.write_all_vectored(&mut parts)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write + Send> WriteSink<W> {
    /// Writes all of `parts`, retrying short and interrupted writes.
    fn write_all_vectored(&mut self, parts: &mut [io::IoSlice<'_>]) -> io::Result<()> {
        let mut parts = parts;
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
    /// The queue's sender and the waits on it; the last clone's drop ends the writer.
    tx: Arc<Producers>,
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

/// The producers' hold on the outbox queue, with the two waits on it ([`super::park`]).
/// When the last [`Outbox`] clone is dropped, the sender goes and the writer is woken to
/// write what is queued and end.
struct Producers {
    tx: Sender<Frame>,
    sleep: Arc<WriterSleep>,
    room: Arc<Room>,
}

impl Producers {
    /// Slots queued (not yet taken by the writer).
    fn len(&self) -> usize {
        self.tx.len()
    }

    /// Enqueues one slot, waiting while the outbox is full (at most `deadline`; `None`:
    /// as long as it takes), and wakes the writer if it sleeps.
    fn send(&self, frame: Frame, deadline: Option<Duration>) -> Result<(), Refused> {
        self.room.send(&self.tx, frame, deadline)?;
        self.sleep.enqueued();
        Ok(())
    }
}

impl Drop for Producers {
    fn drop(&mut self) {
        drop(std::mem::replace(&mut self.tx, bounded(0).0));
        self.sleep.unpark();
    }
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
        let q = &lane.0;
        if q.full(self.tx.len()) {
            let mut guard = q.lock.lock();
            while q.full(self.tx.len()) {
                let end = *until.get_or_insert_with(|| Instant::now() + deadline);
                if q.room.wait_until(&mut guard, end).timed_out() && q.full(self.tx.len()) {
                    return Err(Overflow);
                }
            }
        }
        // One producer per lane: nothing is added between the check and here.
        q.lines.fetch_add(n, SeqCst);
        q.slots.fetch_add(1, SeqCst);
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
        self.enqueue(frame, Some(deadline))
    }

    /// Enqueues one slot (waiting at most `deadline` for room, `None`: as long as it
    /// takes; parked, see [`super::park::Room`]). A frame that cannot be delivered is
    /// dropped (its lane claim given back).
    fn enqueue(&self, frame: Frame, deadline: Option<Duration>) -> Result<(), Overflow> {
        self.out.queued.fetch_add(1, SeqCst);
        match self.tx.send(frame, deadline) {
            Ok(()) => Ok(()),
            Err(Refused::Full) => {
                self.out.queued.fetch_sub(1, SeqCst);
                Err(Overflow)
            }
            // The writer is gone (output closed): nothing can be delivered any more.
            Err(Refused::Closed) => {
                self.out.queued.fetch_sub(1, SeqCst);
                Ok(())
            }
        }
    }

    /// Enqueues a frame, waiting as long as it takes (responses: the client asked).
    pub fn send(&self, frame: Vec<u8>) {
        let frame = outgoing(frame);
        let _ = self.enqueue(Frame::Line(frame), None);
    }

    /// Writes a response frame at once when the output is idle (nothing queued, the
    /// writer not writing), saving the hand-off to the writer thread; otherwise
    /// enqueues it behind what is queued. Order is kept either way.
    pub fn send_direct(&self, frame: Vec<u8>) {
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
        if self.tx.send(Frame::Flush(tx), None).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }
    }
}

/// The most slots the writer takes for one write (a vectored write of at most twice as
/// many parts), and the most bytes it gathers so.
const WRITER_TAKE: usize = 16;
const WRITER_TAKE_BYTES: usize = 256 * 1024;

/// Starts the writer thread over `sink`. It takes the slots queued (up to
/// [`WRITER_TAKE`] at a time), writes them in order in one vectored write, and flushes
/// whenever the outbox is then momentarily empty (bursts are batched); it sleeps only
/// while the outbox is empty, woken once per burst ([`super::park`]). A write error (the
/// client closed the stream) is logged once; later frames are discarded so producers
/// never block on a dead client. `on_closed` runs once when that happens.
pub fn start_writer(
    sink: Box<dyn FrameSink>,
    on_closed: Box<dyn Fn() + Send>,
) -> (Outbox, JoinHandle<()>) {
    start_writer_with(OUTBOX_CAPACITY, sink, on_closed)
}

/// [`start_writer`] with an outbox of `capacity` slots (tests use small ones).
fn start_writer_with(
    capacity: usize,
    sink: Box<dyn FrameSink>,
    on_closed: Box<dyn Fn() + Send>,
) -> (Outbox, JoinHandle<()>) {
    let (tx, rx) = bounded::<Frame>(capacity);
    let out = Arc::new(Output {
        sink: parking_lot::Mutex::new(sink),
        queued: Default::default(),
        broken: Default::default(),
    });
    let sleep = Arc::new(WriterSleep::default());
    // Producers waiting for room are admitted as soon as one take of the writer's worth
    // of slots is free: under load the line never empties, so the room goes round the
    // producers one slot each in their order (admitting at half let those woken first
    // refill the rest ahead of the line, the same ones round after round).
    let room = Arc::new(Room::new(capacity, capacity.saturating_sub(WRITER_TAKE)));
    let (out2, sleep2, room2) = (out.clone(), sleep.clone(), room.clone());
    let handle = std::thread::Builder::new()
        .name("wuu-writer".into())
        .spawn(move || {
            // However the writer ends, producers waiting for room are woken and find the
            // queue closed.
            struct Gone(Option<Receiver<Frame>>, Arc<Room>);
            impl Drop for Gone {
                fn drop(&mut self) {
                    drop(self.0.take());
                    self.1.close();
                }
            }
            let gone = Gone(Some(rx), room2);
            if let Some(rx) = gone.0.as_ref() {
                run_writer(rx, &sleep2, &gone.1, &out2, on_closed);
            }
        })
        .expect("spawn writer thread");
    sleep.set_writer(handle.thread().clone());
    (
        Outbox {
            tx: Arc::new(Producers { tx, sleep, room }),
            inflight: Default::default(),
            out,
            defer: Default::default(),
        },
        handle,
    )
}

/// The writer thread's loop: takes slots until every producer is gone.
fn run_writer(
    rx: &Receiver<Frame>,
    sleep: &WriterSleep,
    room: &Room,
    out: &Output,
    on_closed: Box<dyn Fn() + Send>,
) {
    let mut told = false;
    let mut taken: Vec<Slot> = Vec::with_capacity(WRITER_TAKE);
    while let Some(first) = sleep.next(rx) {
        let mut bytes = Slot::take(first, &mut taken);
        while taken.len() < WRITER_TAKE && bytes < WRITER_TAKE_BYTES {
            match rx.try_recv() {
                Ok(f) => bytes += Slot::take(f, &mut taken),
                Err(_) => break,
            }
        }
        room.taken(taken.len());
        let mut rest = &taken[..];
        while !rest.is_empty() {
            // The run of frames before the next flush request, written together.
            let n = rest
                .iter()
                .position(|f| matches!(f, Slot::Flush(_)))
                .unwrap_or(rest.len());
            if n > 0 {
                write_run(&rest[..n], n == rest.len() && rx.is_empty(), out);
            }
            if let Some(Slot::Flush(ack)) = rest.get(n) {
                if !out.broken.load(SeqCst) {
                    let _ = out.sink.lock().flush();
                }
                let _ = ack.send(());
            }
            rest = rest.get(n + 1..).unwrap_or_default();
        }
        taken.clear();
        if out.broken.load(SeqCst) && !told {
            told = true;
            on_closed();
        }
    }
    if !out.broken.load(SeqCst) {
        let _ = out.sink.lock().flush();
    }
}

/// A slot the writer took: [`Frame`] without the lane's claim.
enum Slot {
    Line(Vec<u8>),
    Lines(Vec<u8>),
    Flush(Sender<()>),
}

impl Slot {
    /// Takes frame `f` out of the outbox into `taken` (its lane's claim is given back);
    /// returns its length in bytes.
    fn take(f: Frame, taken: &mut Vec<Slot>) -> usize {
        let (slot, n) = match f {
            Frame::Line(b) => {
                let n = b.len();
                (Slot::Line(b), n)
            }
            Frame::Lines(b, ticket) => {
                drop(ticket);
                let n = b.len();
                (Slot::Lines(b), n)
            }
            Frame::Flush(ack) => (Slot::Flush(ack), 0),
        };
        taken.push(slot);
        n
    }
}

/// Writes a run of frame slots (no flush request among them) in one call, flushing after
/// them when `flush` (the outbox is empty), and counts them written.
fn write_run(run: &[Slot], flush: bool, out: &Output) {
    let mut sink = out.sink.lock();
    if !out.broken.load(SeqCst) {
        let slots: Vec<&[u8]> = run
            .iter()
            .filter_map(|f| match f {
                Slot::Line(b) | Slot::Lines(b) => Some(b.as_slice()),
                Slot::Flush(_) => None,
            })
            .collect();
        // One record per frame: a joined hand-off logged whole would put its later
        // frames on stderr as bare protocol lines.
        if log::log_enabled!(log::Level::Trace) {
            for frame in slots.iter().flat_map(|s| s.split(|&b| b == b'\n')) {
                log::trace!("out: {}", String::from_utf8_lossy(frame));
            }
        }
        let mut r = match (run, slots.as_slice()) {
            ([Slot::Line(one)], _) => sink.write_frame(one),
            (_, [one]) => sink.write_lines(one),
            _ => sink.write_slots(&slots),
        };
        if r.is_ok() && flush {
            r = sink.flush();
        }
        if let Err(e) = r {
            log::warn!("output closed: {e}");
            out.broken.store(true, SeqCst);
        }
    }
    out.queued.fetch_sub(run.len(), SeqCst);
}

#[cfg(test)]
mod tests;
