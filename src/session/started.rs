//! Conversations started on this process whose session thread parked before their
//! first request (a `thread/start` nothing followed yet; spec `app-server.md` §3.1): the
//! row the session held, kept so that the first request revives the session from
//! memory, as if it had stayed live, instead of from the store. A revival from the store
//! checks the conversation exists, reads its row, takes over a dead owner's lease, holds
//! the inputs a previous process left pending, recovers its workers and loads its
//! history; a conversation this process created a moment ago has none of that, and a
//! live session already re-reads its row before each message (another process's
//! change is found the same way). Bounded: past [`STARTED_ROWS`] the oldest entry goes,
//! and its revival reads the store as any other.

use std::collections::HashMap;
use wuu_store::ThreadRow;

/// Rows kept at most (about 1.4 KiB each with their strings, measured: 0.35 MiB in
/// all; a client's burst of starts beyond it revives the oldest from the store).
pub const STARTED_ROWS: usize = 256;

/// Rows of started, never-served conversations by id, oldest first out.
#[derive(Default)]
pub struct StartedRows {
    rows: HashMap<String, (u64, ThreadRow)>,
    next: u64,
}

impl StartedRows {
    /// Keeps `row` (replacing an older one of the same id); drops the oldest row when
    /// [`STARTED_ROWS`] are kept.
    pub fn keep(&mut self, row: ThreadRow) {
        if self.rows.len() >= STARTED_ROWS && !self.rows.contains_key(&row.id) {
            let oldest = self
                .rows
                .iter()
                .min_by_key(|(_, (n, _))| *n)
                .map(|(id, _)| id.clone());
            if let Some(id) = oldest {
                self.rows.remove(&id);
            }
        }
        self.next += 1;
        self.rows.insert(row.id.clone(), (self.next, row));
    }

    /// Takes the row of `id` out, if kept.
    pub fn take(&mut self, id: &str) -> Option<ThreadRow> {
        self.rows.remove(id).map(|(_, row)| row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_taken_once_and_the_oldest_goes_past_the_bound() {
        let mut kept = StartedRows::default();
        for i in 0..STARTED_ROWS + 2 {
            kept.keep(ThreadRow::new(format!("t{i}"), "/w", 1));
        }
        assert_eq!(kept.rows.len(), STARTED_ROWS);
        assert!(kept.take("t0").is_none());
        assert!(kept.take("t1").is_none());
        assert_eq!(kept.take("t2").map(|r| r.id), Some("t2".to_owned()));
        assert!(kept.take("t2").is_none());
        let last = format!("t{}", STARTED_ROWS + 1);
        assert_eq!(kept.take(&last).map(|r| r.id), Some(last.clone()));
        // Kept again: replaces, does not evict.
        kept.keep(ThreadRow::new("t3", "/w", 2));
        assert_eq!(kept.rows.len(), STARTED_ROWS - 2);
        assert_eq!(kept.take("t3").map(|r| r.created_at_ms), Some(2));
    }
}
