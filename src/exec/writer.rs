//! The stdout writer of `wuu exec`: the one place that prints JSONL (and, in human mode,
//! the final message). Spec `exec.md` §7.4, improved:
//!
//! - writes happen on a dedicated thread fed by a queue bounded at [`QUEUE_LINES`] lines,
//!   so the main thread never blocks in `write(2)`: it waits for room in the queue while
//!   also watching signals and the deadline, and can always give up and exit;
//! - a write error (EPIPE, …) poisons the writer; later lines are discarded, and the
//!   error is reported once ([`Writer::error`]) so the run ends with exit 6;
//! - the writer flushes whenever its queue is momentarily empty (bursts are batched).

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// Lines the writer queue holds before the producer waits.
pub const QUEUE_LINES: usize = 256;

/// Why a line could not be queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// A signal or the deadline arrived while the queue was full.
    Cancelled,
    /// The wait reached the caller's limit.
    TimedOut,
}

/// Handle of the writer thread.
pub struct Writer {
    tx: Option<Sender<Vec<u8>>>,
    done: Receiver<()>,
    error: Arc<Mutex<Option<String>>>,
}

impl Writer {
    /// Starts the writer thread over stdout.
    pub fn stdout() -> Writer {
        Self::start(|| Box::new(std::io::stdout().lock()))
    }

    /// Starts the writer thread over the writer `open` makes on that thread.
    pub fn start(open: impl FnOnce() -> Box<dyn Write> + Send + 'static) -> Writer {
        let (tx, rx) = bounded::<Vec<u8>>(QUEUE_LINES);
        let (done_tx, done) = bounded::<()>(1);
        let error = Arc::new(Mutex::new(None));
        let err2 = error.clone();
        let spawned = crate::util::spawn("wuu-exec-stdout".into(), move || {
            let mut out = std::io::BufWriter::with_capacity(64 * 1024, open());
            let mut poisoned = false;
            while let Ok(line) = rx.recv() {
                if poisoned {
                    continue;
                }
                let line = crate::secrets::redact_vec(line);
                let mut r = out.write_all(&line);
                if r.is_ok() && rx.is_empty() {
                    r = out.flush();
                }
                if let Err(e) = r {
                    poisoned = true;
                    *err2.lock() = Some(format!("write exec output: {e}"));
                }
            }
            if !poisoned {
                if let Err(e) = out.flush() {
                    *err2.lock() = Some(format!("write exec output: {e}"));
                }
            }
            let _ = done_tx.send(());
        });
        if let Err(e) = spawned {
            *error.lock() = Some(format!("cannot start the output writer: {e}"));
        }
        Writer {
            tx: Some(tx),
            done,
            error,
        }
    }

    /// The first write error, if any (`write exec output: …`).
    pub fn error(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Queues `bytes` (a whole line including its `\n`), waiting for room until `limit`
    /// or until `cancel` yields. Lines after a write error are accepted and discarded.
    pub fn send(
        &self,
        bytes: Vec<u8>,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> Result<(), Blocked> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let timer = match limit {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        };
        crossbeam_channel::select! {
            send(tx, bytes) -> _ => Ok(()),
            recv(cancel) -> _ => Err(Blocked::Cancelled),
            recv(timer) -> _ => Err(Blocked::TimedOut),
        }
    }

    /// Closes the queue and waits until everything queued was written, or until `limit`
    /// or `cancel`. Returns whether the writer finished, and the first write error.
    pub fn finish(
        mut self,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> (bool, Option<String>) {
        self.tx.take();
        let timer = match limit {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        };
        let done = crossbeam_channel::select! {
            recv(self.done) -> _ => true,
            recv(cancel) -> _ => false,
            recv(timer) -> _ => false,
        };
        (done, self.error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    struct Stuck;
    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_secs(3600));
            Ok(0)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "pipe"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_consumer_cannot_hold_the_caller() {
        let w = Writer::start(|| Box::new(Stuck));
        let never = crossbeam_channel::never();
        let limit = Instant::now() + Duration::from_millis(300);
        let mut blocked = false;
        for _ in 0..(QUEUE_LINES + 10) {
            // 64 KiB lines: the BufWriter passes them straight to the stuck writer.
            if w.send(vec![b'x'; 70_000], &never, Some(limit)).is_err() {
                blocked = true;
                break;
            }
        }
        assert!(blocked);
        let t = Instant::now();
        assert!(
            !w.finish(&never, Some(Instant::now() + Duration::from_millis(100)))
                .0
        );
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn write_errors_poison_and_report() {
        let w = Writer::start(|| Box::new(Broken));
        let never = crossbeam_channel::never();
        w.send(b"a\n".to_vec(), &never, None).unwrap();
        w.send(b"b\n".to_vec(), &never, None).unwrap();
        let (done, e) = w.finish(&never, None);
        assert!(done);
        assert!(e.unwrap_or_default().contains("write exec output"));
    }
}
