//! The head phase of a provider request on a pool of long-lived threads (spec
//! `providers.md` §6.1, §6.6): connect, TLS, write the request and read the response
//! head (status line and headers) cannot be resumed by ureq once begun, so a thread
//! that must also serve its session's mailbox ([`super::wake`]) hands that phase to a
//! `wuu-provider-head` thread and waits on its wake and the result meanwhile; the body
//! is then read on the session's thread. The pool grows only when every thread is
//! busy, up to [`MAX_THREADS`]; a thread idle for [`IDLE_EXIT`] ends unless only
//! [`KEEP_THREADS`] are left. When all [`MAX_THREADS`] are busy, [`HeadPool::run`]
//! hands the job back and the caller runs the phase itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// Head phases running at once on the pool, at most (more run on their callers).
pub const MAX_THREADS: usize = 64;
/// Idle threads kept however long they stay idle.
pub const KEEP_THREADS: usize = 4;
/// How long a thread over [`KEEP_THREADS`] waits for a job before it ends (10 s).
pub const IDLE_EXIT: Duration = Duration::from_secs(10);

/// One head phase: it sends its result (and rings its caller's wake) itself.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// A pool of `wuu-provider-head` threads.
#[derive(Debug)]
pub struct HeadPool {
    jobs: (Sender<Job>, Receiver<Job>),
    /// Threads waiting for a job, less the jobs sent to them and not yet taken.
    idle: AtomicUsize,
    /// Threads alive.
    threads: AtomicUsize,
    max: usize,
    keep: usize,
    idle_exit: Duration,
}

/// The process's pool ([`MAX_THREADS`], [`KEEP_THREADS`], [`IDLE_EXIT`]).
pub fn pool() -> &'static HeadPool {
    static POOL: OnceLock<HeadPool> = OnceLock::new();
    POOL.get_or_init(|| HeadPool::new(MAX_THREADS, KEEP_THREADS, IDLE_EXIT))
}

impl HeadPool {
    /// An empty pool of at most `max` threads, keeping `keep` idle ones.
    pub fn new(max: usize, keep: usize, idle_exit: Duration) -> Self {
        HeadPool {
            // Holds at most one job per idle thread (each send follows a reservation
            // of one, see `run`): bounded by the threads, whatever its capacity.
            jobs: crossbeam_channel::unbounded(),
            idle: AtomicUsize::new(0),
            threads: AtomicUsize::new(0),
            max,
            keep,
            idle_exit,
        }
    }

    /// Threads alive (idle or running a job).
    #[cfg(test)]
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::SeqCst)
    }

    /// Runs `job` on an idle thread, else on a new one while there are fewer than the
    /// pool's maximum; `Err(job)` when every thread is busy (or none can be started):
    /// the caller runs it.
    pub fn run(&'static self, job: Job) -> Result<(), Job> {
        // Reserve an idle thread: it takes the job from the channel.
        let reserved = self
            .idle
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if reserved {
            return self.jobs.0.send(job).map_err(|e| e.0);
        }
        let grown = self
            .threads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if !grown {
            return Err(job);
        }
        // The job goes to the new thread through a channel, so that it comes back
        // when the thread cannot start (the spawn drops its closure).
        let (tx, rx) = crossbeam_channel::bounded::<Job>(1);
        let back = rx.clone();
        let _ = tx.send(job);
        let spawned = std::thread::Builder::new()
            .name("wuu-provider-head".into())
            .spawn(move || {
                if let Ok(first) = rx.recv() {
                    self.work(first);
                }
            });
        match spawned {
            Ok(_) => Ok(()),
            Err(e) => {
                log::warn!("cannot start a provider head thread: {e}");
                self.threads.fetch_sub(1, Ordering::SeqCst);
                match back.try_recv() {
                    Ok(job) => Err(job),
                    // Taken by the thread after all.
                    Err(_) => Ok(()),
                }
            }
        }
    }

    /// A thread's life: its first job, then jobs from the channel until it has been
    /// idle for `idle_exit` while more than `keep` threads live.
    fn work(&self, first: Job) {
        let run = |job: Job| {
            // A panic in a job loses that request only (its caller sees the result
            // channel close), not the thread.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                log::error!("a provider head job panicked");
            }
        };
        run(first);
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            loop {
                match self.jobs.1.recv_timeout(self.idle_exit) {
                    Ok(job) => {
                        run(job);
                        break;
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        if self.threads.load(Ordering::SeqCst) <= self.keep {
                            continue;
                        }
                        // Leave only if no job is on its way to the idle threads.
                        let left = self
                            .idle
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if left {
                            self.threads.fetch_sub(1, Ordering::SeqCst);
                            return;
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    fn leak(p: HeadPool) -> &'static HeadPool {
        Box::leak(Box::new(p))
    }

    /// Waits until `f` holds (at most 10 s).
    fn until(f: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while !f() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        f()
    }

    #[test]
    fn jobs_one_after_another_reuse_one_thread() {
        let pool = leak(HeadPool::new(8, 1, Duration::from_secs(60)));
        let names = Arc::new(Mutex::new(HashSet::new()));
        for _ in 0..20 {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let n = names.clone();
            let job: Job = Box::new(move || {
                let me = std::thread::current();
                n.lock().unwrap().insert(format!("{:?}", me.id()));
                assert_eq!(me.name(), Some("wuu-provider-head"));
                let _ = tx.send(());
            });
            assert!(pool.run(job).is_ok());
            rx.recv().unwrap();
            // The thread is idle again before the next job is handed out.
            assert!(until(|| pool.idle.load(Ordering::SeqCst) == 1));
        }
        assert_eq!(names.lock().unwrap().len(), 1);
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn the_pool_grows_to_its_cap_then_hands_jobs_back_and_shrinks_when_idle() {
        let pool = leak(HeadPool::new(3, 1, Duration::from_millis(100)));
        let (release_tx, release_rx) = crossbeam_channel::unbounded::<()>();
        let (started_tx, started_rx) = crossbeam_channel::unbounded::<()>();
        for _ in 0..3 {
            let (r, s) = (release_rx.clone(), started_tx.clone());
            let job: Job = Box::new(move || {
                let _ = s.send(());
                let _ = r.recv();
            });
            assert!(pool.run(job).is_ok());
        }
        for _ in 0..3 {
            started_rx.recv().unwrap();
        }
        assert_eq!(pool.threads(), 3);
        // All three busy: the fourth is handed back to run on the caller.
        assert!(pool.run(Box::new(|| {})).is_err());
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        // Idle past `idle_exit`: back to the one kept.
        assert!(
            until(|| pool.threads() == 1 && pool.idle.load(Ordering::SeqCst) == 1),
            "{}",
            pool.threads()
        );
        let (tx, rx) = crossbeam_channel::bounded(1);
        assert!(pool.run(Box::new(move || tx.send(()).unwrap())).is_ok());
        rx.recv().unwrap();
        assert_eq!(pool.threads(), 1);
    }

    #[test]
    fn a_panicking_job_leaves_the_thread_serving() {
        let pool = leak(HeadPool::new(1, 1, Duration::from_secs(60)));
        assert!(pool.run(Box::new(|| panic!("boom"))).is_ok());
        assert!(until(|| pool.idle.load(Ordering::SeqCst) == 1));
        let (tx, rx) = crossbeam_channel::bounded(1);
        assert!(pool.run(Box::new(move || tx.send(()).unwrap())).is_ok());
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(pool.threads(), 1);
    }
}
