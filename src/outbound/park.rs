//! The outbox's two waits, without spinning: the writer sleeps while the outbox is empty
//! and a burst of hand-offs wakes it once ([`WriterSleep`]); producers that find the
//! outbox full queue up and sleep until the writer has emptied it down to a low-water
//! mark, then are admitted in the order they came, as many as the freed room holds, each
//! with its slot reserved ([`Room`]). Crossbeam's blocking `send` and `recv` spin and
//! call `sched_yield` before they sleep, and wake one waiter per slot; with hundreds of
//! session threads on a few CPUs each yield and each wake-up is a context switch. The
//! queue itself stays crossbeam's lock-free bounded channel, used only through
//! `try_send` / `try_recv`. See DESIGN.md (threads, bounded queues, backpressure) and
//! [`super::transport`].

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The writer's sleep. The writer parks only after it found the outbox empty and raised
/// `idle` (then looked once more); a producer that enqueued unparks it only when it takes
/// that flag down, so a burst of hand-offs costs one wake-up.
#[derive(Default)]
pub(super) struct WriterSleep {
    idle: AtomicBool,
    writer: OnceLock<Thread>,
}

impl WriterSleep {
    /// Names the thread to wake (once, before any producer exists).
    pub(super) fn set_writer(&self, t: Thread) {
        let _ = self.writer.set(t);
    }

    /// Called after an enqueue: unparks the writer if it is (about to be) asleep.
    pub(super) fn enqueued(&self) {
        // Pairs with the fence in `next` between raising `idle` and the last look at the
        // queue: either the writer sees this frame or this sees its flag.
        fence(SeqCst);
        if self.idle.load(SeqCst) && self.idle.swap(false, SeqCst) {
            self.unpark();
        }
    }

    /// Unparks the writer unconditionally (the last producer is gone).
    pub(super) fn unpark(&self) {
        if let Some(t) = self.writer.get() {
            t.unpark();
        }
    }

    /// The writer's wait for its next slot; `None` once every sender is gone and the
    /// queue is empty.
    pub(super) fn next<T>(&self, rx: &Receiver<T>) -> Option<T> {
        loop {
            match rx.try_recv() {
                Ok(f) => return Some(f),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {}
            }
            self.idle.store(true, SeqCst);
            fence(SeqCst);
            match rx.try_recv() {
                Ok(f) => {
                    self.idle.store(false, SeqCst);
                    return Some(f);
                }
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {
                    std::thread::park();
                    self.idle.store(false, SeqCst);
                }
            }
        }
    }
}

/// Why [`Room::send`] did not enqueue (the item is dropped).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Still full when the deadline passed.
    Full,
    /// The writer is gone.
    Closed,
}

/// The producers' wait for room in the outbox: a line of sleepers admitted in order.
///
/// The room counts claimed slots itself (`used`: slots in the queue, plus slots reserved
/// for admitted producers about to enqueue), so the channel under it is never found full.
/// A producer claims a slot without a lock while nobody waits. One that finds no room, or
/// finds others already waiting, joins the back of the line and sleeps on its own parker.
/// The writer, each time it has taken slots and the outbox holds `low` slots or fewer,
/// admits the sleepers from the front of the line as long as there is room, reserving a
/// slot for each before it wakes it: a sleeper woken is never beaten to its room by a
/// producer that arrived later, and one that came first is admitted first. So the room
/// is handed out in the producers' order, and there is one round of wake-ups per drained
/// batch, not a wake-up per slot and not a stampede of all sleepers for the same room.
pub(super) struct Room {
    /// Slots the queue may hold.
    cap: usize,
    /// Sleepers are admitted when `used` is at most this.
    low: usize,
    /// Slots claimed: queued, or reserved for an admitted sleeper.
    used: AtomicUsize,
    /// Sleepers in the line (read without the lock by producers looking for room).
    waiting: AtomicUsize,
    line: parking_lot::Mutex<Line>,
}

/// The sleepers, first come first.
#[derive(Default)]
struct Line {
    sleepers: VecDeque<Arc<Sleeper>>,
    /// The writer is gone: nobody is admitted any more.
    closed: bool,
}

/// One parked producer: its thread, and what it was told (set under the line's lock).
struct Sleeper {
    thread: std::thread::Thread,
    told: AtomicU8,
}

/// [`Sleeper::told`]: still waiting, admitted with a slot reserved, the writer is gone.
const WAITING: u8 = 0;
const ADMITTED: u8 = 1;
const CLOSED: u8 = 2;

impl Room {
    /// Room for a queue of `cap` slots whose sleepers are admitted once it holds `low`
    /// slots or fewer (`low < cap`).
    pub(super) fn new(cap: usize, low: usize) -> Self {
        Room {
            cap,
            low: low.min(cap.saturating_sub(1)),
            used: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            line: Default::default(),
        }
    }

    /// Sleepers in the line now.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(SeqCst)
    }

    /// Claims a slot if there is room.
    fn claim(&self) -> bool {
        let mut used = self.used.load(SeqCst);
        while used < self.cap {
            match self
                .used
                .compare_exchange_weak(used, used + 1, SeqCst, SeqCst)
            {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
        false
    }

    /// Enqueues `item` on `tx`, a queue of at least `cap` slots that only this room's
    /// producers send on, waiting while there is no room or others wait before it (at
    /// most `deadline`; `None`: as long as it takes). On a refusal the item is dropped.
    pub(super) fn send<T>(
        &self,
        tx: &Sender<T>,
        item: T,
        deadline: Option<Duration>,
    ) -> Result<(), Refused> {
        if self.waiting.load(SeqCst) == 0 && self.claim() {
            return self.put(tx, item);
        }
        let me = {
            let mut line = self.line.lock();
            if line.closed {
                return Err(Refused::Closed);
            }
            if line.sleepers.is_empty() && self.claim() {
                drop(line);
                return self.put(tx, item);
            }
            let me = Arc::new(Sleeper {
                thread: std::thread::current(),
                told: AtomicU8::new(WAITING),
            });
            line.sleepers.push_back(me.clone());
            // Pairs with `taken` (both SeqCst): either the writer sees this sleeper, or
            // this sees the room the writer freed and admits the line itself.
            self.waiting.fetch_add(1, SeqCst);
            let wake = self.admit(&mut line);
            drop(line);
            unpark(wake, &me);
            me
        };
        let end = deadline.map(|d| Instant::now() + d);
        loop {
            match me.told.load(SeqCst) {
                ADMITTED => return self.put(tx, item),
                CLOSED => return Err(Refused::Closed),
                _ => {}
            }
            match end {
                None => std::thread::park(),
                Some(end) => {
                    let now = Instant::now();
                    if now < end {
                        std::thread::park_timeout(end - now);
                        continue;
                    }
                    let mut line = self.line.lock();
                    match me.told.load(SeqCst) {
                        ADMITTED => {
                            drop(line);
                            return self.put(tx, item);
                        }
                        CLOSED => return Err(Refused::Closed),
                        _ => {
                            line.sleepers.retain(|s| !Arc::ptr_eq(s, &me));
                            self.waiting.fetch_sub(1, SeqCst);
                            return Err(Refused::Full);
                        }
                    }
                }
            }
        }
    }

    /// Enqueues `item` in the slot claimed for it.
    fn put<T>(&self, tx: &Sender<T>, item: T) -> Result<(), Refused> {
        match tx.try_send(item) {
            Ok(()) => Ok(()),
            // Not while the claims hold (the queue has `cap` slots or more); should it
            // happen anyway, the producer waits as crossbeam makes it.
            Err(TrySendError::Full(item)) => tx.send(item).map_err(|_| {
                self.taken(1);
                Refused::Closed
            }),
            Err(TrySendError::Disconnected(_)) => {
                self.taken(1);
                Err(Refused::Closed)
            }
        }
    }

    /// Admits sleepers from the front of the line while there is room, if the queue is
    /// down to the low-water mark. Returns the threads to wake (after the lock is let go).
    fn admit(&self, line: &mut Line) -> Vec<Arc<Sleeper>> {
        let mut wake = Vec::new();
        if line.closed || self.used.load(SeqCst) > self.low {
            return wake;
        }
        while !line.sleepers.is_empty() && self.claim() {
            if let Some(s) = line.sleepers.pop_front() {
                s.told.store(ADMITTED, SeqCst);
                wake.push(s);
            }
        }
        self.waiting.fetch_sub(wake.len(), SeqCst);
        wake
    }

    /// The writer took `n` slots out of the queue (or a claim was given back): admits
    /// sleepers when the queue is down to the low-water mark.
    pub(super) fn taken(&self, n: usize) {
        let used = self.used.fetch_sub(n, SeqCst) - n;
        // Pairs with the sleeper's `waiting` increment (see `send`).
        if used <= self.low && self.waiting.load(SeqCst) > 0 {
            let wake = {
                let mut line = self.line.lock();
                self.admit(&mut line)
            };
            for s in wake {
                s.thread.unpark();
            }
        }
    }

    /// The writer is gone: wakes every sleeper (each then finds the queue closed).
    pub(super) fn close(&self) {
        let wake: Vec<Arc<Sleeper>> = {
            let mut line = self.line.lock();
            line.closed = true;
            self.waiting.store(0, SeqCst);
            line.sleepers
                .drain(..)
                .inspect(|s| s.told.store(CLOSED, SeqCst))
                .collect()
        };
        for s in wake {
            s.thread.unpark();
        }
    }
}

/// Wakes the admitted sleepers, except `me` (admitted by its own look at the room).
fn unpark(wake: Vec<Arc<Sleeper>>, me: &Arc<Sleeper>) {
    for s in wake {
        if !Arc::ptr_eq(&s, me) {
            s.thread.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::thread::JoinHandle;

    /// Waits (at most 5 s) until `done` holds.
    fn wait_until(done: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(5);
        while !done() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(done(), "timed out");
    }

    /// A producer that sends `item` through `room` on its own thread, once the line holds
    /// `ahead` sleepers (so the producers join the line in the test's order).
    fn sleeper(
        room: &Arc<Room>,
        tx: &Sender<u32>,
        item: u32,
        deadline: Option<Duration>,
    ) -> JoinHandle<Result<(), Refused>> {
        let ahead = room.waiting();
        let (room2, tx2) = (room.clone(), tx.clone());
        let h = std::thread::spawn(move || room2.send(&tx2, item, deadline));
        wait_until(|| room.waiting() == ahead + 1);
        h
    }

    /// The test as the writer: takes one slot out of the queue.
    fn take(room: &Room, rx: &Receiver<u32>) -> u32 {
        let item = rx.recv_timeout(Duration::from_secs(5)).expect("an item");
        room.taken(1);
        item
    }

    #[test]
    fn the_producer_that_waited_first_is_admitted_first() {
        // One slot: every producer after the first waits; they get the slot one by one
        // in the order they came, whatever order the scheduler wakes them in.
        let room = Arc::new(Room::new(1, 0));
        let (tx, rx) = bounded(1);
        room.send(&tx, 0, None).unwrap();
        let waiting: Vec<_> = (1..=5).map(|i| sleeper(&room, &tx, i, None)).collect();
        for want in 0..=5 {
            assert_eq!(take(&room, &rx), want, "admitted in arrival order");
        }
        for h in waiting {
            assert_eq!(h.join().unwrap(), Ok(()));
        }
        assert_eq!(room.waiting(), 0);
    }

    #[test]
    fn a_newcomer_queues_behind_the_sleepers_and_the_reserved_room_is_not_taken() {
        // Capacity 4, admitted at 2 or fewer: three sleepers wait on a full queue. When
        // the writer takes two slots, the first two sleepers get them (reserved for them);
        // a producer arriving then finds no room and queues behind the third.
        let room = Arc::new(Room::new(4, 2));
        let (tx, rx) = bounded(4);
        for i in 0..4 {
            room.send(&tx, i, Some(Duration::from_millis(10))).unwrap();
        }
        let first = sleeper(&room, &tx, 10, None);
        let second = sleeper(&room, &tx, 11, None);
        let third = sleeper(&room, &tx, 12, None);
        assert_eq!(take(&room, &rx), 0);
        assert_eq!(
            room.waiting(),
            3,
            "above the low-water mark: nobody admitted"
        );
        assert_eq!(take(&room, &rx), 1);
        assert_eq!(room.waiting(), 1, "the first two admitted");
        assert_eq!(
            room.send(&tx, 99, Some(Duration::from_millis(50))),
            Err(Refused::Full),
            "a newcomer does not take the room reserved for the admitted"
        );
        assert_eq!(first.join().unwrap(), Ok(()));
        assert_eq!(second.join().unwrap(), Ok(()));
        let got: Vec<u32> = (0..4).map(|_| take(&room, &rx)).collect();
        let mut admitted = got[2..].to_vec();
        admitted.sort();
        assert_eq!(got[..2], [2, 3]);
        assert_eq!(admitted, [10, 11], "the first two sleepers, then the third");
        assert_eq!(third.join().unwrap(), Ok(()));
        assert_eq!(take(&room, &rx), 12);
    }

    #[test]
    fn a_sleeper_past_its_deadline_leaves_the_line_and_the_next_one_gets_the_room() {
        let room = Arc::new(Room::new(1, 0));
        let (tx, rx) = bounded(1);
        room.send(&tx, 0, None).unwrap();
        let early = sleeper(&room, &tx, 1, Some(Duration::from_millis(30)));
        let late = sleeper(&room, &tx, 2, None);
        assert_eq!(early.join().unwrap(), Err(Refused::Full));
        assert_eq!(room.waiting(), 1, "the timed-out sleeper left the line");
        assert_eq!(take(&room, &rx), 0);
        assert_eq!(take(&room, &rx), 2);
        assert_eq!(late.join().unwrap(), Ok(()));
    }

    #[test]
    fn closing_wakes_every_sleeper_and_refuses_the_next() {
        let room = Arc::new(Room::new(1, 0));
        let (tx, rx) = bounded(1);
        room.send(&tx, 0, None).unwrap();
        let a = sleeper(&room, &tx, 1, None);
        let b = sleeper(&room, &tx, 2, Some(Duration::from_secs(10)));
        drop(rx);
        room.close();
        assert_eq!(a.join().unwrap(), Err(Refused::Closed));
        assert_eq!(b.join().unwrap(), Err(Refused::Closed));
        assert_eq!(room.send(&tx, 3, None), Err(Refused::Closed));
        assert_eq!(room.waiting(), 0);
    }

    #[test]
    fn many_producers_with_and_without_deadlines_lose_no_wake_up() {
        // 32 producers through a queue of 3 slots, some with deadlines so short that they
        // leave the line now and then: every item not refused arrives, each producer's in
        // its order, and nobody waits forever (a lost wake-up would hang the test).
        const PRODUCERS: u32 = 32;
        const EACH: u32 = 2000;
        let room = Arc::new(Room::new(3, 1));
        let (tx, rx) = bounded::<u32>(3);
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (room, tx) = (room.clone(), tx.clone());
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    for i in 0..EACH {
                        let deadline = match p % 4 {
                            0 => Some(Duration::from_micros(50)),
                            1 => Some(Duration::from_secs(30)),
                            _ => None,
                        };
                        match room.send(&tx, p * EACH + i, deadline) {
                            Ok(()) => sent.push(i),
                            Err(Refused::Full) => assert_eq!(p % 4, 0, "only short deadlines"),
                            Err(Refused::Closed) => panic!("closed"),
                        }
                    }
                    sent
                })
            })
            .collect();
        drop(tx);
        let writer = {
            let room = room.clone();
            std::thread::spawn(move || {
                let mut got = vec![Vec::new(); PRODUCERS as usize];
                let mut n = 0u32;
                while let Ok(item) = rx.recv_timeout(Duration::from_secs(20)) {
                    let mut batch = vec![item];
                    batch.extend(rx.try_iter().take(2));
                    room.taken(batch.len());
                    for item in batch {
                        got[(item / EACH) as usize].push(item % EACH);
                    }
                    n += 1;
                    if n % 101 == 0 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                got
            })
        };
        let sent: Vec<Vec<u32>> = producers.into_iter().map(|p| p.join().unwrap()).collect();
        let got = writer.join().unwrap();
        assert_eq!(
            got, sent,
            "every item sent arrived, in each producer's order"
        );
        assert!(sent
            .iter()
            .skip(1)
            .step_by(4)
            .all(|s| s.len() == EACH as usize));
        assert_eq!(room.waiting(), 0);
    }
}
