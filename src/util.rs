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

/// `s` cut to at most `max` characters (with `…` when cut), for echoing client input
/// in error messages without echoing megabytes.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// Fault injection for end-to-end tests of failure paths: whether `name` is one of the
/// comma-separated names in the `WUU_FAULTS` environment variable (read once). Names:
/// `session_panic_on_rename` (a session thread panics while handling `thread/rename`).
/// Unset in normal use: every check is then one load of a cached empty list.
pub fn fault(name: &str) -> bool {
    static FAULTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    FAULTS
        .get_or_init(|| {
            std::env::var("WUU_FAULTS")
                .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
                .unwrap_or_default()
        })
        .iter()
        .any(|f| f == name)
}

/// Longest accepted conversation id, in bytes.
pub const MAX_THREAD_ID_BYTES: usize = 256;

/// Checks a conversation id taken from a request (already trimmed): at most
/// [`MAX_THREAD_ID_BYTES`] bytes and no control characters (NUL included). Ids are opaque
/// otherwise. The error is an `invalid params: …` message naming `field` and showing at
/// most 40 characters of the id.
pub fn check_thread_id(field: &str, id: &str) -> Result<(), String> {
    if id.len() > MAX_THREAD_ID_BYTES {
        return Err(format!(
            "invalid params: {field}: {:?} is longer than {MAX_THREAD_ID_BYTES} bytes",
            clip(id, 40)
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(format!(
            "invalid params: {field}: {:?} contains a control character",
            clip(id, 40)
        ));
    }
    Ok(())
}

/// At most the last `max` characters of `s`, keeping only ASCII letters, digits, `-`
/// and `_` (for OS thread names: never a NUL, never a split character).
pub fn name_tail(s: &str, max: usize) -> String {
    let kept: Vec<char> = s
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    kept[kept.len().saturating_sub(max)..].iter().collect()
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
        assert_eq!(super::name_tail("thr_0123456789abcdef", 12), "456789abcdef");
        assert_eq!(super::name_tail("a\u{0}é€x", 12), "ax");
        assert!(super::check_thread_id("thread_id", "a\u{0}").is_err());
        assert!(super::check_thread_id("thread_id", &"x".repeat(257)).is_err());
        assert!(super::check_thread_id("thread_id", "thr_é€").is_ok());
    }
}

/// Best-effort secret redaction of tool arguments and trace text (spec `exec.md` §4.4):
/// bearer tokens, `key=value` / `"key": "value"` secrets (api key, access/refresh/id
/// token, token, authorization, password, passwd, secret), `sk-…` keys and JWT-like
/// strings become `[REDACTED]`.
pub fn redact(text: &str) -> String {
    use std::sync::OnceLock;
    static RES: OnceLock<Vec<(regex::Regex, &'static str)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        [
            (r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}", "${1}[REDACTED]"),
            (
                r#"(?i)((?:api[_-]?key|access[_-]?token|refresh[_-]?token|id[_-]?token|auth[_-]?token|token|authorization|password|passwd|secret)(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)[^\s"'\\,;&}]{4,}"#,
                "${1}[REDACTED]",
            ),
            (r"\bsk-[A-Za-z0-9_-]{8,}", "[REDACTED]"),
            (
                r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}",
                "[REDACTED]",
            ),
        ]
        .into_iter()
        .map(|(p, r)| (regex::Regex::new(p).expect("redaction pattern"), r))
        .collect()
    });
    let mut out = std::borrow::Cow::Borrowed(text);
    for (re, rep) in res {
        if re.is_match(&out) {
            out = std::borrow::Cow::Owned(re.replace_all(&out, *rep).into_owned());
        }
    }
    out.into_owned()
}

/// Hex SHA-256 of `bytes`, shortened to 16 characters (diagnostic hashes).
pub fn short_hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn redacts_common_secrets() {
        let s = redact(
            r#"{"command":"curl -H 'Authorization: Bearer abcdefghijkl' https://x?api_key=12345678 && echo sk-abcdefghijk"}"#,
        );
        assert!(!s.contains("abcdefghijkl"), "{s}");
        assert!(!s.contains("12345678"), "{s}");
        assert!(!s.contains("sk-abcdefghijk"), "{s}");
        assert_eq!(redact("ls -la"), "ls -la");
        let s = redact(r#"{"password": "hunter22"}"#);
        assert!(!s.contains("hunter22"), "{s}");
    }
}
