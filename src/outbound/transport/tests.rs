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
    small_gated_writer(OUTBOX_CAPACITY)
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
        tx: Arc::new(Producers {
            tx,
            sleep: Default::default(),
            room: Arc::new(Room::new(OUTBOX_CAPACITY, OUTBOX_CAPACITY / 2)),
        }),
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
    assert_eq!(lane.0.count().lines, LANE_FRAMES);
    drop(outbox);
    drop(rx);
    assert_eq!(
        lane.0.count(),
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
        a.0.count(),
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
    wait_until(|| a.0.count() == LaneCount::default());
    assert_eq!(a.0.count(), LaneCount::default(), "claims given back");
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

#[test]
fn an_idle_writer_wakes_for_the_next_frame_and_ends_with_the_last_outbox() {
    // The writer parks once the outbox is empty; a frame sent long after is still
    // written, and dropping every outbox clone lets the parked writer end.
    let (tx, rx) = crossbeam_channel::unbounded();
    let (outbox, join) = start_writer(Box::new(ChannelSink(tx)), Box::new(|| {}));
    let lane = Lane::default();
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(20));
        let clone = outbox.clone();
        clone
            .send_lane(&lane, &mut one(&format!("r{round}")), SHORT)
            .unwrap();
        let got = rx.recv_timeout(Duration::from_secs(5)).expect("written");
        assert_eq!(got, format!("r{round}").into_bytes());
    }
    drop(outbox);
    wait_until(|| join.is_finished());
    assert!(join.is_finished(), "the writer ends with the last outbox");
}

/// A gated writer over an outbox of `capacity` slots.
fn small_gated_writer(
    capacity: usize,
) -> (Outbox, Sender<()>, crossbeam_channel::Receiver<Vec<u8>>) {
    let (gate_tx, gate) = bounded(0);
    let (out, out_rx) = crossbeam_channel::unbounded();
    let sink = GatedSink {
        gate,
        open: false,
        out,
    };
    let (outbox, _join) = start_writer_with(capacity, Box::new(sink), Box::new(|| {}));
    (outbox, gate_tx, out_rx)
}

#[test]
fn a_producer_parked_on_a_full_outbox_resumes_when_the_writer_drains() {
    // Capacity 4: the writer holds f0 at the gate, f1..f4 fill the queue; the fifth
    // producer parks until the writer has taken the queue down to the low-water mark.
    let (outbox, gate, out) = small_gated_writer(4);
    outbox.send_within(b"f0".to_vec(), SHORT).unwrap();
    wait_queued(&outbox, 0);
    for i in 1..=4 {
        outbox
            .send_within(format!("f{i}").into_bytes(), SHORT)
            .unwrap();
    }
    wait_queued(&outbox, 4);
    let outbox2 = outbox.clone();
    let producer =
        std::thread::spawn(move || outbox2.send_within(b"f5".to_vec(), Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(50));
    assert!(!producer.is_finished(), "parked while the outbox is full");
    drop(gate); // the writer drains
    assert_eq!(producer.join().unwrap(), Ok(()));
    let got = written(&out, 6);
    let want: Vec<String> = (0..6).map(|i| format!("f{i}")).collect();
    assert_eq!(got, want, "order kept");
}

#[test]
fn a_full_outbox_still_gives_overflow_at_the_deadline_and_drops_only_that_frame() {
    let (outbox, gate, out) = small_gated_writer(2);
    let lane = Lane::default();
    outbox.send_lane(&lane, &mut one("g0"), SHORT).unwrap();
    wait_queued(&outbox, 0);
    outbox.send_lane(&lane, &mut one("g1"), SHORT).unwrap();
    outbox.send_lane(&lane, &mut one("g2"), SHORT).unwrap();
    let start = Instant::now();
    assert_eq!(
        outbox.send_lane(&lane, &mut one("late"), SHORT),
        Err(Overflow),
        "a full outbox past the deadline"
    );
    assert!(start.elapsed() >= SHORT, "waited for the deadline");
    assert_eq!(
        lane.0.count().lines,
        2,
        "g1 and g2 queued (g0 taken): the refused frame gave its claim back"
    );
    drop(gate);
    outbox.send_lane(&lane, &mut one("g3"), SHORT).unwrap();
    assert_eq!(written(&out, 4), ["g0", "g1", "g2", "g3"]);
}

#[test]
fn a_response_waits_for_room_without_a_deadline() {
    // `send` (responses) waits as long as it takes, parked, and is written in order.
    let (outbox, gate, out) = small_gated_writer(2);
    outbox.send(b"r0".to_vec());
    wait_queued(&outbox, 0); // the writer holds r0 at the gate
    outbox.send(b"r1".to_vec());
    outbox.send(b"r2".to_vec());
    let outbox2 = outbox.clone();
    let producer = std::thread::spawn(move || outbox2.send(b"r3".to_vec()));
    std::thread::sleep(Duration::from_millis(150));
    assert!(!producer.is_finished(), "no deadline: still waiting");
    drop(gate);
    producer.join().unwrap();
    assert_eq!(written(&out, 4), ["r0", "r1", "r2", "r3"]);
}

/// A sink that yields now and then, so that the queue fills and drains unevenly.
struct SlowSink {
    out: Sender<Vec<u8>>,
    n: usize,
}

impl FrameSink for SlowSink {
    fn write_frame(&mut self, frame: &[u8]) -> io::Result<()> {
        self.n += 1;
        if self.n % 97 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = self.out.send(frame.to_vec());
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn many_producers_on_a_tiny_outbox_lose_no_wake_up_and_no_frame() {
    // 24 producers, 3 kinds of hand-off each, through an outbox of 3 slots: every
    // producer's frames arrive, in its order, and no producer waits out its deadline
    // (a lost wake-up of a parked producer, or of the parked writer, would).
    const PRODUCERS: usize = 24;
    const EACH: usize = 600;
    let (tx, rx) = crossbeam_channel::unbounded();
    let (outbox, join) =
        start_writer_with(3, Box::new(SlowSink { out: tx, n: 0 }), Box::new(|| {}));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let outbox = outbox.clone();
            std::thread::spawn(move || {
                let lane = Lane::default();
                for i in 0..EACH {
                    let frame = format!("{p}:{i}");
                    let r = match i % 3 {
                        0 => outbox.send_within(frame.into_bytes(), Duration::from_secs(20)),
                        1 => outbox.send_lane(&lane, &mut one(&frame), Duration::from_secs(20)),
                        _ => {
                            outbox.send(frame.into_bytes());
                            Ok(())
                        }
                    };
                    assert_eq!(r, Ok(()), "producer {p} frame {i}");
                    if i % 50 == 0 {
                        // Let the writer find the outbox empty and park now and then.
                        std::thread::sleep(Duration::from_micros(300));
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    outbox.flush();
    drop(outbox);
    let mut next = [0usize; PRODUCERS];
    for frame in rx.try_iter() {
        let text = String::from_utf8(frame).unwrap();
        let (p, i) = text.split_once(':').unwrap();
        let (p, i): (usize, usize) = (p.parse().unwrap(), i.parse().unwrap());
        assert_eq!(i, next[p], "producer {p}'s frames in order");
        next[p] += 1;
    }
    assert_eq!(next, [EACH; PRODUCERS], "every frame written");
    wait_until(|| join.is_finished());
    assert!(join.is_finished());
}

#[test]
fn queued_slots_leave_in_one_vectored_write() {
    let mut sink = WriteSink(Recording {
        writes: vec![],
        max: usize::MAX,
    });
    sink.write_slots(&[b"{\"a\":1}", b"{\"b\":2}\n{\"c\":3}", b"{}"])
        .unwrap();
    assert_eq!(sink.0.writes.len(), 1, "one write for three slots");
    assert_eq!(
        sink.0.writes[0],
        b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n{}\n".to_vec()
    );
    let mut short = WriteSink(Recording {
        writes: vec![],
        max: 5,
    });
    short.write_slots(&[b"abcdefgh", b"ij"]).unwrap();
    assert_eq!(short.0.writes.concat(), b"abcdefgh\nij\n");
}

#[test]
fn producers_parked_on_a_full_outbox_are_written_in_the_order_they_parked() {
    // One slot: the writer holds p0 at the gate and p1 fills the outbox; five producers
    // park one after another, each on its own thread. However the scheduler wakes them,
    // the outbox admits them first come first, so their frames leave in that order.
    let (outbox, gate, out) = small_gated_writer(1);
    outbox.send_within(b"p0".to_vec(), SHORT).unwrap();
    wait_queued(&outbox, 0);
    outbox.send_within(b"p1".to_vec(), SHORT).unwrap();
    let parked: Vec<_> = (2..7)
        .map(|i| {
            let outbox2 = outbox.clone();
            let h = std::thread::spawn(move || {
                outbox2.send_within(format!("p{i}").into_bytes(), Duration::from_secs(10))
            });
            wait_until(|| outbox.tx.room.waiting() == i - 1);
            assert_eq!(outbox.tx.room.waiting(), i - 1, "p{i} parked");
            h
        })
        .collect();
    drop(gate);
    for h in parked {
        assert_eq!(h.join().unwrap(), Ok(()));
    }
    let want: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
    assert_eq!(written(&out, 7), want);
}
