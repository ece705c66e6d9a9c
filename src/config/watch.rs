//! Change detection for hand edits of the configuration files: a cheap metadata poll.
//!
//! Why a poll and not a file-watching crate: the files are a handful (the user file and
//! four project layer candidates), so one `stat` each per tick costs microseconds; a
//! poll sees files that do not exist yet (a new `.wuu/settings.json`), survives editors
//! that replace files by rename, works the same on every platform and adds no thread
//! and no dependency. It runs on the server's existing lease-heartbeat thread
//! (`server::heartbeat_loop`), every [`TICK`].
//!
//! A file's stamp is `(size, mtime ns, inode, ctime ns)`, or absent. A change is
//! reported only once the stamps have been identical for two consecutive ticks, so a
//! file caught mid-write (or briefly missing during an editor's rename) is not applied
//! half-done. Edits made by this process re-stamp the files ([`Watcher::restamp`]) so
//! they are not reported back as hand edits.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Poll interval.
pub const TICK: Duration = Duration::from_millis(500);

/// Metadata of a file that changes whenever its content is replaced or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
    ctime_ns: i128,
}

/// The stamp of `path`, or `None` when it does not exist (or is not a regular file).
pub fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    if !m.is_file() {
        return None;
    }
    let ns = |t: std::io::Result<std::time::SystemTime>| {
        t.ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0)
    };
    #[cfg(unix)]
    let (ino, ctime_ns) = {
        use std::os::unix::fs::MetadataExt;
        (
            m.ino(),
            i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        )
    };
    #[cfg(not(unix))]
    let (ino, ctime_ns) = (0, 0);
    Some(Stamp {
        len: m.len(),
        mtime_ns: ns(m.modified()),
        ino,
        ctime_ns,
    })
}

#[derive(Debug, Default)]
struct State {
    /// The watched files.
    paths: Vec<PathBuf>,
    /// Stamps of the configuration in force (applied or deliberately rejected).
    settled: Vec<Option<Stamp>>,
    /// Stamps seen at the previous tick while they differed from `settled`.
    pending: Option<Vec<Option<Stamp>>>,
}

/// Watches a fixed list of files.
#[derive(Debug, Default)]
pub struct Watcher {
    state: Mutex<State>,
}

impl Watcher {
    /// Starts watching `paths`; their current stamps are the baseline.
    pub fn new(paths: Vec<PathBuf>) -> Watcher {
        let settled = paths.iter().map(|p| stamp(p)).collect();
        Watcher {
            state: Mutex::new(State {
                paths,
                settled,
                pending: None,
            }),
        }
    }

    /// One poll. Returns the files whose stamps changed and then stayed the same for a
    /// whole tick; they become the new baseline (the caller applies or rejects them).
    pub fn poll(&self) -> Vec<PathBuf> {
        let mut st = self.state.lock();
        let now: Vec<Option<Stamp>> = st.paths.iter().map(|p| stamp(p)).collect();
        if now == st.settled {
            st.pending = None;
            return vec![];
        }
        if st.pending.as_ref() != Some(&now) {
            st.pending = Some(now);
            return vec![];
        }
        let changed = st
            .paths
            .iter()
            .zip(st.settled.iter().zip(now.iter()))
            .filter(|(_, (a, b))| a != b)
            .map(|(p, _)| p.clone())
            .collect();
        st.settled = now;
        st.pending = None;
        changed
    }

    /// Takes the current stamp of `path` as its baseline (after this process wrote it),
    /// so the write is not reported as a hand edit. Other files keep their baselines.
    pub fn restamp(&self, path: &Path) {
        let mut st = self.state.lock();
        let now = stamp(path);
        let State {
            paths,
            settled,
            pending,
        } = &mut *st;
        for (p, s) in paths.iter().zip(settled.iter_mut()) {
            if p == path {
                *s = now;
            }
        }
        *pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_reported_once_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        std::fs::write(&a, "{}").unwrap();
        let w = Watcher::new(vec![a.clone(), b.clone()]);
        assert!(w.poll().is_empty());
        std::fs::write(&a, "{\"x\":1}").unwrap();
        std::fs::write(&b, "{}").unwrap();
        assert!(w.poll().is_empty(), "first sight only arms the change");
        assert_eq!(w.poll(), vec![a.clone(), b.clone()]);
        assert!(w.poll().is_empty());
        std::fs::write(&a, "{\"x\":2}").unwrap();
        w.restamp(&a);
        assert!(w.poll().is_empty());
        assert!(w.poll().is_empty(), "own writes are not hand edits");
        std::fs::remove_file(&b).unwrap();
        w.poll();
        assert_eq!(w.poll(), vec![b]);
    }
}
