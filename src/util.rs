//! Small shared helpers: clocks, timestamps, ids and one-shot replies ([`reply`]).

use std::time::{SystemTime, UNIX_EPOCH};

pub mod reply;

/// A JSON value written in the source as text (tool parameter schemas): parsed by the one
/// non-generic JSON reader instead of the code `serde_json::json!` expands to per literal.
///
/// Panics on malformed text, which is a bug in the constant; the tool-spec tests parse
/// every one.
pub fn static_json(text: &'static str) -> serde_json::Value {
    serde_json::from_str(text).expect("a JSON constant of the source")
}

/// Starts a thread named `name` running `f`; errors as `std::thread::Builder::spawn`.
/// The host's threads start through here so that std's spawn machinery is compiled once,
/// for a boxed closure, instead of once per closure type.
pub fn spawn(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    spawn_boxed(name, Box::new(f))
}

fn spawn_boxed(
    name: String,
    f: Box<dyn FnOnce() + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 UTC timestamp (millisecond precision) of Unix milliseconds, e.g.
/// `2026-05-01T10:00:00.123Z`. Times before 1970 or after year 9998 use jiff's
/// formatting (`-000001-…` style years); times outside jiff's range read as the epoch.
pub fn rfc3339(ms: i64) -> String {
    Rfc3339::of(ms).as_str().to_owned()
}

/// An RFC 3339 UTC timestamp (millisecond precision) formatted without allocating:
/// [`rfc3339`]'s text (byte for byte), kept on the stack. Serializes as a JSON string.
/// Times from 1970 to the end of year 9998 are formatted by hand (the common case:
/// listings format two per conversation); others go through jiff.
#[derive(Clone, Copy)]
pub struct Rfc3339 {
    buf: [u8; Rfc3339::MAX_LEN],
    len: u8,
}

impl Rfc3339 {
    /// Longest text: jiff's six-digit signed years (`-009999-…`).
    const MAX_LEN: usize = 32;
    /// 9999-01-01T00:00:00Z in Unix ms: the end of the hand-formatted range.
    const FAST_END_MS: i64 = 253_370_764_800_000;

    /// The timestamp text of Unix milliseconds `ms`.
    pub fn of(ms: i64) -> Rfc3339 {
        let mut out = Rfc3339 {
            buf: [0; Rfc3339::MAX_LEN],
            len: 0,
        };
        if (0..Self::FAST_END_MS).contains(&ms) {
            out.len = 24;
            civil_utc(ms, &mut out.buf);
            return out;
        }
        let text = match jiff::Timestamp::from_millisecond(ms) {
            Ok(ts) => format!("{ts:.3}"),
            Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
        };
        let n = text.len().min(Self::MAX_LEN);
        out.buf[..n].copy_from_slice(&text.as_bytes()[..n]);
        out.len = n as u8;
        out
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits and separators (hand path) or jiff's ASCII output are
        // stored, so this never fails; the fallback keeps it panic-free regardless.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }
}

impl serde::Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Writes `YYYY-MM-DDTHH:MM:SS.mmmZ` (24 bytes) of `ms` (0 <= ms, year <= 9999) into
/// `out`. Days to civil date: Howard Hinnant's `civil_from_days` (proleptic Gregorian).
fn civil_utc(ms: i64, out: &mut [u8; Rfc3339::MAX_LEN]) {
    let days = ms / 86_400_000;
    let in_day = ms % 86_400_000;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, milli) = (rest / 1000, rest % 1000);
    let digits = |out: &mut [u8; Rfc3339::MAX_LEN], at: usize, width: usize, mut v: i64| {
        for i in (0..width).rev() {
            out[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    digits(out, 0, 4, year);
    out[4] = b'-';
    digits(out, 5, 2, month);
    out[7] = b'-';
    digits(out, 8, 2, day);
    out[10] = b'T';
    digits(out, 11, 2, h);
    out[13] = b':';
    digits(out, 14, 2, m);
    out[16] = b':';
    digits(out, 17, 2, s);
    out[19] = b'.';
    digits(out, 20, 3, milli);
    out[23] = b'Z';
}

/// A new time-ordered opaque id with a prefix, e.g. `thr_0193…` (UUID v7, simple form).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// The prefix of an ephemeral conversation's id: such a conversation lives in memory
/// only and never touches the store (spec `app-server.md`, `thread/start {ephemeral}`).
pub const EPHEMERAL_PREFIX: &str = "ephemeral-";

/// Whether `thread_id` names an ephemeral conversation ([`EPHEMERAL_PREFIX`]).
pub fn is_ephemeral(thread_id: &str) -> bool {
    thread_id.starts_with(EPHEMERAL_PREFIX)
}

/// A new conversation id: `ephemeral-<uuid v7>` for an ephemeral conversation,
/// `thr_<uuid v7>` for a stored one.
pub fn new_thread_id(ephemeral: bool) -> String {
    if ephemeral {
        format!("{EPHEMERAL_PREFIX}{}", uuid::Uuid::now_v7().simple())
    } else {
        new_id("thr")
    }
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
/// `session_panic_on_rename` (a session thread panics while handling `thread/rename`);
/// `session_skips_refresh` (an idle session skips its check of the stored conversation
/// before a request, as when another host commits between that check and the request).
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

/// Whether `id` can name a workspace (`--workspace-id`) and its state directory: 1–128 of `[A-Za-z0-9._-]`, not `.`/`..`.
pub fn valid_workspace_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
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

/// Checks that a thread id (from a client) can name a file or directory of its own:
/// [`check_thread_id`] plus no `/` or backslash, not empty, and not `.` or `..` — so
/// `home.join(id)` stays beneath `home`. Errors name `field` (`invalid params: …`).
pub fn check_path_id(field: &str, id: &str) -> Result<(), String> {
    check_thread_id(field, id)?;
    if id.is_empty() || id == "." || id == ".." || id.contains(['/', '\\']) {
        return Err(format!(
            "invalid params: {field}: {:?} is not a thread id",
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
        let esc = |s: &str| String::from_utf8(super::escape_line_separators(s.into())).unwrap();
        assert_eq!(
            esc("{\"a\":\"x\u{2028}y\u{2029}\u{2028}—\"}"),
            "{\"a\":\"x\\u2028y\\u2029\\u2028—\"}"
        );
        assert_eq!(esc("plain â€ °\u{85}"), "plain â€ °\\u0085");
        assert_eq!(esc("\u{2029}"), "\\u2029");
    }

    /// The timestamp text as it was before the hand formatter (jiff's `Display`).
    fn jiff_rfc3339(ms: i64) -> String {
        match jiff::Timestamp::from_millisecond(ms) {
            Ok(ts) => format!("{ts:.3}"),
            Err(_) => "1970-01-01T00:00:00.000Z".to_owned(),
        }
    }

    #[test]
    fn hand_formatted_timestamps_match_jiff_byte_for_byte() {
        let day = 86_400_000i64;
        let mut cases: Vec<i64> = vec![
            0,
            1,
            999,
            1000,
            59_999,
            60_000,
            3_599_999,
            day - 1,
            day,
            951_782_400_000,     // 2000-02-29
            951_868_800_000,     // 2000-03-01
            4_107_542_400_000,   // 2100-02-28
            4_107_628_800_000,   // 2100-03-01
            1_780_000_000_000,   // 2026
            253_370_764_799_999, // 9998-12-31T23:59:59.999
            253_370_764_800_000, // 9999-01-01 (jiff path from here)
            253_402_207_200_999, // jiff's last millisecond
            253_402_207_201_000, // outside jiff's range
            253_402_300_799_999,
            i64::MAX,
            -1,
            -999,
            -1000,
            -day,
            -62_135_596_800_000, // 0001-01-01
            -62_167_219_200_000, // 0000-01-01
            -62_167_219_200_001,
            -377_705_116_800_000, // -009999-01-01
            -377_705_116_800_001,
            i64::MIN,
        ];
        // Every day boundary (and its neighbours) of 1968-2104, plus a spread of random
        // values (a fixed LCG, so failures reproduce) over the whole hand-formatted range.
        for d in -730..49_000i64 {
            cases.extend([d * day - 1, d * day, d * day + 1, d * day + 43_199_999]);
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            cases.push((x >> 1) as i64 % 253_402_300_800_000);
            cases.push(-((x >> 20) as i64));
        }
        for ms in cases {
            assert_eq!(super::rfc3339(ms), jiff_rfc3339(ms), "ms = {ms}");
            assert_eq!(
                serde_json::to_string(&super::Rfc3339::of(ms)).unwrap(),
                serde_json::to_string(&jiff_rfc3339(ms)).unwrap()
            );
        }
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

/// Escapes the characters that line splitters other than JSON's own treat as line breaks
/// in a serialized JSON line: U+2028 (LINE SEPARATOR) and U+2029 (PARAGRAPH SEPARATOR)
/// become `\u2028` / `\u2029`, U+0085 (NEXT LINE) becomes `\u0085`. serde_json writes
/// them raw, which is valid JSON, but Python's `str.splitlines` (all three) and
/// JavaScript text handling (the first two) would cut the line in two. None of them
/// can occur outside a JSON string, where the escape means the same character. The line
/// is returned unchanged (no copy) when it holds none of them; the search is one
/// `memchr2` pass for their lead bytes.
pub fn escape_line_separators(line: Vec<u8>) -> Vec<u8> {
    let Some(first) = next_line_separator(&line, 0) else {
        return line;
    };
    let mut out = Vec::with_capacity(line.len() + 8);
    let mut from = 0;
    let mut at = Some(first);
    while let Some((i, len)) = at {
        out.extend_from_slice(line.get(from..i).unwrap_or_default());
        out.extend_from_slice(match line.get(i + len - 1) {
            Some(0xA8) => b"\\u2028",
            Some(0xA9) => b"\\u2029",
            _ => b"\\u0085",
        });
        from = i + len;
        at = next_line_separator(&line, from);
    }
    out.extend_from_slice(line.get(from..).unwrap_or_default());
    out
}

/// Offset and length of the next U+2028 / U+2029 (UTF-8 `E2 80 A8` / `E2 80 A9`) or
/// U+0085 (`C2 85`) at or after `from`.
fn next_line_separator(bytes: &[u8], mut from: usize) -> Option<(usize, usize)> {
    loop {
        let i = from + memchr::memchr2(0xE2, 0xC2, bytes.get(from..)?)?;
        let next = bytes.get(i + 1).copied();
        if bytes.get(i) == Some(&0xC2) {
            if next == Some(0x85) {
                return Some((i, 2));
            }
        } else if next == Some(0x80) && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) {
            return Some((i, 3));
        }
        from = i + 1;
    }
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
