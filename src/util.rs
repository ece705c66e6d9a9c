//! Small shared helpers: clocks, timestamps and ids.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 UTC timestamp (millisecond precision) of Unix milliseconds, e.g.
/// `2026-05-01T10:00:00.123Z`.
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
    }
}

/// A new time-ordered opaque id with a prefix, e.g. `thr_0193…` (UUID v7, simple form).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// First `max` characters of `s` on one line (whitespace runs folded), for previews.
pub fn preview(s: &str, max: usize) -> String {
    let folded: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= max {
        folded
    } else {
        let mut t: String = folded.chars().take(max).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert!(super::new_id("thr").starts_with("thr_"));
        assert_eq!(super::preview("a \n b", 10), "a b");
        assert_eq!(super::preview("abcdef", 3), "abc…");
    }
}
