//! A provider read its consumer's thread can be woken from (spec `providers.md` §6.1,
//! §6.6): the built-in engine reads its provider stream on its conversation's session
//! thread, which must also serve that session's mailbox. While a streaming body is
//! read, the HTTP transport ([`super::transport`]) of that request's connection
//! ([`ReadWake`], armed) waits for the socket and for this wake together; a wake ends
//! the read with [`std::io::ErrorKind::WouldBlock`] without touching the stream, so the
//! reader serves what woke it and reads on from where it was. Before that, while the
//! request waits for its response head on a pool thread ([`super::head`]), the reader
//! parks on this wake and that result, serving what wakes it the same way.
//!
//! Whoever posts to the mailbox calls [`Wake::signal`]: an atomic store, plus one
//! `eventfd` write only while the reader is parked in such a read. The reader checks
//! the signal after announcing it parks, so a post racing with the park is never
//! missed. A run deadline ([`Wake::set_deadline`]) wakes the read too. A thread that
//! waits on channels instead (for a tool) selects over [`Wake::bell`].

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};

/// The wake of one consumer thread (a session): long-lived, shared by the posters and
/// the reader. The `eventfd` is created at the first park.
#[derive(Debug)]
pub struct Wake {
    /// Rung by every signal (one pending ring at most), for waits on channels.
    bell: (
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    ),
    fd: OnceLock<OwnedFd>,
    /// The reader is parked (or about to) in a read that a signal ends.
    parked: AtomicBool,
    /// Something was posted since the reader last returned for a wake.
    signalled: AtomicBool,
    /// The reader serves what wakes it (it waits for a response head on the pool, or
    /// reads a streaming body whose reads return on a wake).
    listening: AtomicBool,
    /// When the reader must return anyway, in ms since the Unix epoch (0 = never).
    deadline_ms: AtomicI64,
}

/// What a park ([`Wake::park`]) ended on.
#[derive(Debug, PartialEq, Eq)]
pub enum Parked {
    /// The socket has input (or an error or end of file to report).
    Readable,
    /// A post (or the deadline) wants the reader's thread.
    Woken,
    /// Neither came within the read timeout.
    TimedOut,
}

/// Unsets [`Wake::listen`] when dropped.
pub struct Listening<'a>(&'a Wake);

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.listening.store(false, Ordering::SeqCst);
    }
}

/// A [`Wake`] as one request's connection sees it ([`super::transport`]): its reads
/// return on a wake only once armed, when its body is read on the thread the wake
/// serves. Before, its head may be read on a pool thread ([`super::head`]), whose
/// reads must block as plain reads and leave the wake's signals to that thread; a
/// request given up there never arms it.
#[derive(Debug)]
pub struct ReadWake {
    wake: Arc<Wake>,
    armed: AtomicBool,
}

impl ReadWake {
    /// Not armed.
    pub fn new(wake: Arc<Wake>) -> Self {
        ReadWake {
            wake,
            armed: AtomicBool::new(false),
        }
    }

    /// From now on the connection's reads return on a wake (call on the reader's
    /// thread, which then serves it).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The wake, once armed.
    pub fn armed(&self) -> Option<&Wake> {
        self.armed.load(Ordering::SeqCst).then_some(&*self.wake)
    }
}

impl Default for Wake {
    fn default() -> Self {
        Wake {
            bell: crossbeam_channel::bounded(1),
            fd: OnceLock::new(),
            parked: AtomicBool::new(false),
            signalled: AtomicBool::new(false),
            listening: AtomicBool::new(false),
            deadline_ms: AtomicI64::new(0),
        }
    }
}

impl Wake {
    /// A wake with nothing signalled.
    pub fn new() -> Self {
        Self::default()
    }

    /// A channel that has a message after a signal (a ring may be stale: a waiter
    /// that wakes on it serves what there is, maybe nothing).
    pub fn bell(&self) -> &crossbeam_channel::Receiver<()> {
        &self.bell.1
    }

    /// How long until the deadline ([`Wake::set_deadline`]), if one is set and not
    /// passed.
    pub fn until_deadline(&self) -> Option<Duration> {
        match self.deadline_ms.load(Ordering::SeqCst) {
            0 => None,
            d => {
                let left = d - crate::util::now_ms();
                (left > 0).then(|| Duration::from_millis(left as u64))
            }
        }
    }

    /// Tells the reader something was posted: it returns from the read it is parked
    /// in (or from its next one). Costs one `eventfd` write only while it is parked.
    pub fn signal(&self) {
        self.signalled.store(true, Ordering::SeqCst);
        let _ = self.bell.0.try_send(());
        if self.parked.load(Ordering::SeqCst) {
            if let Some(fd) = self.fd.get() {
                // A full counter (never in practice) is already a pending wake.
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    /// The reader serves what wakes it until the guard drops (a waiting response head,
    /// or a streaming body read through an armed [`ReadWake`]).
    pub fn listen(&self) -> Listening<'_> {
        self.listening.store(true, Ordering::SeqCst);
        Listening(self)
    }

    /// Whether the reader serves what wakes it ([`Wake::listen`]); when not, a post
    /// that must end its request cuts it from outside instead.
    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }

    /// Sets (or with `None` clears) the time a parked read returns at, in ms since
    /// the Unix epoch; it wakes one park, then is cleared.
    pub fn set_deadline(&self, deadline_ms: Option<i64>) {
        self.deadline_ms
            .store(deadline_ms.unwrap_or(0).max(0), Ordering::SeqCst);
    }

    /// Waits until `socket` (if any) is readable, a signal arrives or the deadline
    /// passes, at most `timeout` (`None` = no timeout). A wake is consumed: the next
    /// park waits again until something new is posted. Errors: the `eventfd` cannot be
    /// created, or `poll` fails.
    pub fn park(
        &self,
        socket: Option<BorrowedFd<'_>>,
        timeout: Option<Duration>,
    ) -> io::Result<Parked> {
        let efd = match self.fd.get() {
            Some(fd) => fd,
            None => {
                let fd = rustix::event::eventfd(
                    0,
                    rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
                )?;
                self.fd.get_or_init(|| fd)
            }
        };
        let started = std::time::Instant::now();
        self.parked.store(true, Ordering::SeqCst);
        let outcome = self.poll(socket, efd.as_fd(), timeout, started);
        self.parked.store(false, Ordering::SeqCst);
        match outcome? {
            Parked::Woken => {
                self.signalled.store(false, Ordering::SeqCst);
                Ok(Parked::Woken)
            }
            other => Ok(other),
        }
    }

    fn poll(
        &self,
        socket: Option<BorrowedFd<'_>>,
        efd: BorrowedFd<'_>,
        timeout: Option<Duration>,
        started: std::time::Instant,
    ) -> io::Result<Parked> {
        loop {
            if self.signalled.load(Ordering::SeqCst) {
                return Ok(Parked::Woken);
            }
            let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
            let to_deadline = match self.deadline_ms.load(Ordering::SeqCst) {
                0 => None,
                d => Some(Duration::from_millis(
                    (d - crate::util::now_ms()).max(0) as u64
                )),
            };
            if to_deadline.is_some_and(|d| d.is_zero()) {
                // Once: the woken thread acts on the deadline itself.
                self.deadline_ms.store(0, Ordering::SeqCst);
                return Ok(Parked::Woken);
            }
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(Parked::TimedOut);
            }
            let wait = match (left, to_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let ts = wait.and_then(|w| rustix::event::Timespec::try_from(w).ok());
            let mut fds = [
                PollFd::from_borrowed_fd(efd, PollFlags::IN),
                PollFd::from_borrowed_fd(socket.unwrap_or(efd), PollFlags::IN),
            ];
            let n = if socket.is_some() { 2 } else { 1 };
            match rustix::event::poll(&mut fds[..n], ts.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[0].revents().is_empty() {
                // Reset the counter: the signal flag says whether a post is pending.
                let mut buf = [0u8; 8];
                let _ = rustix::io::read(efd, &mut buf);
            }
            if n == 2 && !fds[1].revents().is_empty() {
                return Ok(Parked::Readable);
            }
            // A wake, the deadline or the timeout: the loop's checks tell which.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn a_signal_wakes_a_park_once_and_input_is_readable() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let wake = Arc::new(Wake::new());
        // Signalled before the park: the park returns at once, and only once.
        wake.signal();
        assert_eq!(wake.park(Some(a.as_fd()), None).unwrap(), Parked::Woken);
        let short = Some(Duration::from_millis(30));
        assert_eq!(wake.park(Some(a.as_fd()), short).unwrap(), Parked::TimedOut);
        // Signalled while parked.
        let w = wake.clone();
        let poster = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.signal();
        });
        let long = Some(Duration::from_secs(30));
        assert_eq!(wake.park(Some(a.as_fd()), long).unwrap(), Parked::Woken);
        poster.join().unwrap();
        b.write_all(b"x").unwrap();
        assert_eq!(wake.park(Some(a.as_fd()), long).unwrap(), Parked::Readable);
    }

    #[test]
    fn a_passed_deadline_wakes_a_park() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let wake = Wake::new();
        wake.set_deadline(Some(crate::util::now_ms() + 20));
        let long = Some(Duration::from_secs(30));
        assert_eq!(wake.park(Some(a.as_fd()), long).unwrap(), Parked::Woken);
        wake.set_deadline(None);
        let short = Some(Duration::from_millis(30));
        assert_eq!(wake.park(Some(a.as_fd()), short).unwrap(), Parked::TimedOut);
    }
}
