//! The one redactor: configured secret values never leave the host.
//!
//! The set of secrets is every value the configuration can name:
//!
//! - the value of each provider's `api_key_env` variable (and of `OPENAI_API_KEY` /
//!   `ANTHROPIC_API_KEY`, which are used implicitly for the vendors' own hosts);
//! - the userinfo of a `base_url` (`https://user:KEY@host`: the whole `user:KEY` and the
//!   password; a user-only `https://TOKEN@host` whole), although such a URL is refused at
//!   load;
//! - the values of sensitive provider `headers` (names containing one of
//!   [`SENSITIVE_HEADER_WORDS`]: `auth` covers `authorization` and `x-custom-auth`;
//!   the value after a `Bearer ` / `Basic ` / `Token ` scheme is a secret too);
//! - keys and tokens a client sends in requests (`config/model/update` `api_key`,
//!   `auth_token`), added when they arrive ([`add`]).
//!
//! Values shorter than [`MIN_SECRET_LEN`] bytes are not redacted (they would match
//! ordinary text); a warning says so once. Every occurrence of a secret, and of its JSON
//! string escaping when that differs, is replaced with [`MASK`]. A secret longer than
//! [`MAX_PIECE_LEN`] bytes is matched as consecutive pieces of at most that length (cut
//! at character boundaries, each at least half of it), so an occurrence of it becomes one
//! [`MASK`] per piece: no pattern is longer than that (times the growth of JSON
//! escaping), whatever a client or a configuration sends.
//!
//! Changing the set never makes a redaction wait on a matcher build: [`set`] builds the
//! new matcher (an Aho-Corasick contiguous NFA, whose build is linear in the patterns'
//! total length; a DFA's is quadratic in a run of one byte) outside the set's lock and
//! then swaps it in; redactions take that lock only to clone the reference, and only
//! once per thread after each change.
//!
//! [`redact`] is applied where text leaves the host or reaches the disk, and nowhere
//! else: the protocol outbox (every app-server and in-process frame), the `exec` output
//! writers, the logger (every level), traces, the store (JSON columns, titles and
//! previews, through [`wuu_store::set_text_filter`]), and command output (streamed
//! events, results, spill files; the model sees it redacted too). [`StreamRedactor`]
//! handles secrets split across chunks of a stream.

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use parking_lot::{Mutex, RwLock};
use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

/// What a secret is replaced with.
pub const MASK: &str = "[REDACTED]";

/// Shortest value treated as a secret (bytes).
pub const MIN_SECRET_LEN: usize = 8;

/// Longest piece of a secret matched as one pattern (bytes; see the module docs).
pub const MAX_PIECE_LEN: usize = 256;

/// Longest key a client may send to be masked (`config/model/update` `api_key`, bytes):
/// a longer one is refused before it is added, since the set only grows (a secret is
/// never forgotten) and a real key or token is far shorter.
pub const MAX_SECRET_LEN: usize = 16 * 1024;

#[derive(Default)]
struct Set {
    values: Vec<String>,
    matcher: Option<AhoCorasick>,
    /// The patterns (values and their JSON escapings), for [`StreamRedactor`].
    pats: Vec<String>,
    /// Length of the longest pattern (bytes).
    longest: usize,
    /// Which bytes start a pattern (the hold-back scan skips every other byte).
    first: Vec<bool>,
}

impl Set {
    /// Start of the longest suffix of `buf` that is a proper prefix of a pattern (a
    /// secret that may continue in the next chunk); `buf.len()` when there is none.
    /// Looks at the last `longest - 1` bytes only.
    fn hold_from(&self, buf: &[u8]) -> usize {
        let window = self.longest.saturating_sub(1).min(buf.len());
        let start = buf.len() - window;
        for (i, &b) in buf.iter().enumerate().skip(start) {
            if !self.first.get(b as usize).copied().unwrap_or(false) {
                continue;
            }
            let tail = buf.get(i..).unwrap_or_default();
            if self
                .pats
                .iter()
                .any(|p| p.len() > tail.len() && p.as_bytes().starts_with(tail))
            {
                return i;
            }
        }
        buf.len()
    }
}

static SECRETS: LazyLock<RwLock<Arc<Set>>> = LazyLock::new(Default::default);

/// Held by [`set`] while it builds the next set: one build at a time, so two threads
/// adding at once (a config reload and a key a client sent) never lose each other's
/// secrets. Redactions never take it.
static BUILD: Mutex<()> = Mutex::new(());

/// Bumped after each replacement of [`SECRETS`]; starts at 1.
static GENERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's copy of the set and the [`GENERATION`] it was taken at.
    static LOCAL: RefCell<Option<(u64, Arc<Set>)>> = const { RefCell::new(None) };
}

/// Runs `f` on the current set. Each thread keeps its own reference and takes the lock
/// only after the set changed: redaction runs on every frame and delta, and a shared
/// lock word and reference count written by every thread for each of them were a
/// measurable part of a streamed delta's CPU with many conversations streaming.
/// A change is seen by every call that starts after [`set`] returned.
fn with_set<R>(f: impl FnOnce(&Set) -> R) -> R {
    let gen = GENERATION.load(Ordering::Acquire);
    let mut f = Some(f);
    let done = LOCAL.try_with(|cell| {
        let fresh = matches!(cell.try_borrow().as_deref(), Ok(Some((g, _))) if *g == gen);
        if !fresh {
            // Fails only in a nested call (there is none): that one takes the global set.
            let mut l = cell.try_borrow_mut().ok()?;
            *l = Some((gen, SECRETS.read().clone()));
        }
        let l = cell.try_borrow().ok()?;
        let (_, set) = l.as_ref()?;
        Some(f.take()?(set))
    });
    match (done, f) {
        (Ok(Some(r)), _) => r,
        // The thread is exiting (its copy is gone), or a nested call on a changed set.
        (_, Some(f)) => f(&SECRETS.read().clone()),
        (_, None) => unreachable!("the closure ran but gave no result"),
    }
}

/// How many times a secret may be JSON-escaped where it appears: once in a string of a
/// frame or row, twice in JSON text carried in a string (a tool call's `arguments`
/// inside an item), three times in such an item inside a string (a trace or log line
/// quoting a frame).
const ESCAPE_LEVELS: usize = 3;

/// The inside of the JSON string literal of `v` (`v` escaped once).
fn json_escaped(v: &str) -> String {
    let quoted = serde_json::to_string(v).unwrap_or_default();
    quoted
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .unwrap_or("")
        .to_owned()
}

/// `v` cut into consecutive pieces of at most [`MAX_PIECE_LEN`] bytes at character
/// boundaries, of nearly equal length (so none is short enough to match ordinary text);
/// `v` itself when it is not longer.
fn pieces(v: &str) -> Vec<&str> {
    if v.len() <= MAX_PIECE_LEN {
        return vec![v];
    }
    let k = v.len().div_ceil(MAX_PIECE_LEN);
    let mut out = Vec::with_capacity(k);
    let mut start = 0;
    for i in 1..=k {
        let mut end = v.len() * i / k;
        while end > start && !v.is_char_boundary(end) {
            end -= 1;
        }
        if let Some(piece) = v.get(start..end).filter(|p| !p.is_empty()) {
            out.push(piece);
            start = end;
        }
    }
    out
}

fn rebuild(values: Vec<String>) -> Set {
    let mut pats: Vec<String> = Vec::new();
    // JSON escaping works character by character, so the escaping of a secret is the
    // concatenation of its pieces' escapings.
    for piece in values.iter().flat_map(|v| pieces(v)) {
        pats.push(piece.to_owned());
        // A secret with `"`, `\` or control characters looks different at each level of
        // escaping (a tool call's arguments reach clients, traces and the store escaped
        // twice).
        let mut level = piece.to_owned();
        for _ in 0..ESCAPE_LEVELS {
            let escaped = json_escaped(&level);
            if escaped == level || escaped.is_empty() {
                break;
            }
            pats.push(escaped.clone());
            level = escaped;
        }
    }
    // Longest first so a secret containing another is masked whole.
    pats.sort_by_key(|p| std::cmp::Reverse(p.len()));
    pats.dedup();
    let matcher = if pats.is_empty() {
        None
    } else {
        build_matcher(&pats)
    };
    let longest = pats.iter().map(String::len).max().unwrap_or(0);
    let mut first = vec![false; 256];
    for p in &pats {
        if let Some(&b) = p.as_bytes().first() {
            first[b as usize] = true;
        }
    }
    Set {
        values,
        matcher,
        pats,
        longest,
        first,
    }
}

fn accept(v: &str) -> Option<String> {
    let v = v.trim();
    if v.is_empty() {
        return None;
    }
    if v.len() < MIN_SECRET_LEN {
        log::warn!(
            "a configured secret is shorter than {MIN_SECRET_LEN} bytes and cannot be redacted reliably"
        );
        return None;
    }
    Some(v.to_string())
}

/// The matcher of `pats`: a contiguous NFA (linear build; see the module docs), a
/// noncontiguous one if that fails (it has a size limit). None only if both fail
/// (logged as an error: nothing would be masked).
fn build_matcher(pats: &[String]) -> Option<AhoCorasick> {
    let build = |kind| {
        AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .kind(Some(kind))
            .build(pats)
    };
    build(AhoCorasickKind::ContiguousNFA)
        .or_else(|_| build(AhoCorasickKind::NoncontiguousNFA))
        .map_err(|e| log::error!("cannot build the secret matcher ({e}); secrets are not masked"))
        .ok()
}

/// Replaces the set with `values` plus those added by [`add`] before (a config reload
/// never forgets a secret that was already seen). Installs the store filter. Nothing is
/// rebuilt when every value is known already; otherwise the new set is built while
/// redactions go on with the old one, and swapped in before this returns.
pub fn set(values: impl IntoIterator<Item = String>) {
    let _ = wuu_store::set_text_filter(store_filter);
    let fresh: Vec<String> = values.into_iter().filter_map(|v| accept(&v)).collect();
    let _build = BUILD.lock();
    let current = SECRETS.read().clone();
    let mut all: Vec<String> = current.values.clone();
    let before = all.len();
    for v in fresh {
        if !all.contains(&v) {
            all.push(v);
        }
    }
    if all.len() == before {
        return;
    }
    let next = Arc::new(rebuild(all));
    *SECRETS.write() = next;
    GENERATION.fetch_add(1, Ordering::Release);
}

/// Adds one secret (e.g. a key a client sent).
pub fn add(value: &str) {
    set([value.to_string()]);
}

/// A provider header whose (lowercased) name contains one of these carries a secret
/// (`authorization`, `proxy-authorization`, `x-api-key`, `x-auth-token`,
/// `x-custom-auth`, `cookie`, …).
pub const SENSITIVE_HEADER_WORDS: &[&str] = &[
    "auth",
    "key",
    "token",
    "secret",
    "cookie",
    "password",
    "passwd",
    "credential",
    "signature",
];

/// The userinfo parts of a URL (`user:pass`, `pass`, `user`), or nothing.
pub fn url_userinfo(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let Some((info, _host)) = authority.rsplit_once('@') else {
        return vec![];
    };
    let mut out = vec![info.to_string()];
    if let Some((_user, pass)) = info.split_once(':') {
        out.push(pass.to_string());
    }
    out.retain(|s| !s.is_empty());
    out
}

/// `text` with every secret masked (borrowed when nothing matched).
pub fn redact(text: &str) -> Cow<'_, str> {
    with_set(|set| match &set.matcher {
        Some(m) if m.is_match(text) => {
            let reps = vec![MASK; m.patterns_len()];
            Cow::Owned(m.replace_all(text, &reps))
        }
        _ => Cow::Borrowed(text),
    })
}

/// Whether `bytes` contain a secret (or a JSON escaping of one, or a piece of a long
/// one): for answers that carry bytes the redactor cannot mask in place (base64 file
/// contents), which are then refused.
pub fn contains_secret(bytes: &[u8]) -> bool {
    with_set(|set| set.matcher.as_ref().is_some_and(|m| m.is_match(bytes)))
}

/// Length of the longest pattern (bytes; 0 with no secrets): a window of the input
/// extended by this much minus one on each side sees every secret that overlaps it.
pub fn longest_pattern() -> usize {
    with_set(|set| set.longest)
}

/// [`redact`] over bytes (frames, raw output).
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    with_set(|set| match &set.matcher {
        Some(m) if m.is_match(bytes) => {
            let reps = vec![MASK.as_bytes(); m.patterns_len()];
            Cow::Owned(m.replace_all_bytes(bytes, &reps))
        }
        _ => Cow::Borrowed(bytes),
    })
}

/// [`redact_bytes`] of an owned frame (no copy when nothing matched).
pub fn redact_vec(frame: Vec<u8>) -> Vec<u8> {
    match redact_bytes(&frame) {
        Cow::Borrowed(_) => frame,
        Cow::Owned(v) => v,
    }
}

/// [`redact`] of an owned string.
pub fn redact_string(s: String) -> String {
    match redact(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(v) => v,
    }
}

fn store_filter(text: &str) -> Option<String> {
    match redact(text) {
        Cow::Borrowed(_) => None,
        Cow::Owned(v) => Some(v),
    }
}

/// Redacts a stream given in chunks (command output, streamed message deltas): a secret
/// split across chunks is still masked. It holds back only the trailing bytes that could
/// be the start of a secret or of its JSON escaping (at most the longest of them − 1
/// bytes; ordinary text is not delayed) until more arrive or [`finish`] is called; what
/// it returns can be written out at once.
///
/// Exactness: the concatenation of everything [`push`] and [`finish`] return equals
/// [`redact`] of the concatenated input (the same leftmost-longest matches). A match is
/// emitted only once no longer one can start at or before it: the held tail starts at
/// the earliest position where a secret could still continue, and a match that crosses
/// that position is emitted whole.
///
/// The chunk boundaries it chooses fall on UTF-8 character boundaries when the input is
/// UTF-8 (every held tail starts where a secret starts).
///
/// [`finish`]: StreamRedactor::finish
/// [`push`]: StreamRedactor::push
#[derive(Default)]
pub struct StreamRedactor {
    /// Input not emitted yet (unredacted; at most the longest pattern − 1 bytes).
    carry: Vec<u8>,
}

/// Reads `r` to its end, or to its first error other than an interrupt (a terminal
/// whose other side closed reads EIO), in chunks of at most 64 KiB, and hands `to` the
/// bytes with secrets masked ([`StreamRedactor`]), the held tail last.
pub fn copy_redacted(mut r: impl std::io::Read, mut to: impl FnMut(&[u8])) {
    let mut mask = StreamRedactor::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        to(&mask.push(buf.get(..n).unwrap_or_default()));
    }
    to(&mask.finish());
}

impl StreamRedactor {
    /// Feeds `bytes`; returns the redacted bytes that are safe to emit now.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.push_vec(bytes.to_vec())
    }

    /// [`push`](Self::push) of an owned chunk (no copy when nothing is held or masked).
    pub fn push_vec(&mut self, bytes: Vec<u8>) -> Vec<u8> {
        with_set(|set| self.push_with(set, bytes))
    }

    fn push_with(&mut self, set: &Set, bytes: Vec<u8>) -> Vec<u8> {
        let Some(m) = &set.matcher else {
            if self.carry.is_empty() {
                return bytes;
            }
            let mut out = std::mem::take(&mut self.carry);
            out.extend_from_slice(&bytes);
            return out;
        };
        let buf = if self.carry.is_empty() {
            bytes
        } else {
            let mut b = std::mem::take(&mut self.carry);
            b.extend_from_slice(&bytes);
            b
        };
        let hold = set.hold_from(&buf);
        if hold == buf.len() {
            if !m.is_match(&buf) {
                return buf;
            }
            let reps = vec![MASK.as_bytes(); m.patterns_len()];
            return m.replace_all_bytes(&buf, &reps);
        }
        // Matches that start before the held tail are final; one that crosses into
        // it is emitted whole, and what follows it is looked at again.
        let mut out = Vec::with_capacity(buf.len());
        let mut pos = 0;
        loop {
            let seg = buf.get(pos..).unwrap_or_default();
            let hold = pos + set.hold_from(seg);
            let mut last = pos;
            let mut crossed = None;
            for mat in m.find_iter(seg) {
                let (start, end) = (pos + mat.start(), pos + mat.end());
                if start >= hold {
                    break;
                }
                out.extend_from_slice(buf.get(last..start).unwrap_or_default());
                out.extend_from_slice(MASK.as_bytes());
                last = end;
                if end > hold {
                    crossed = Some(end);
                    break;
                }
            }
            match crossed {
                Some(end) => pos = end,
                None => {
                    out.extend_from_slice(buf.get(last..hold).unwrap_or_default());
                    self.carry = buf.get(hold..).unwrap_or_default().to_vec();
                    return out;
                }
            }
        }
    }

    /// [`push`](Self::push) of text (a streamed delta). The result may be empty (all of
    /// it is held back).
    pub fn push_string(&mut self, text: String) -> String {
        // Fast path (the usual delta): nothing held, nothing to mask, no secret can
        // start in its tail: the delta itself, no copy, no UTF-8 check.
        with_set(|set| {
            if self.carry.is_empty() {
                match &set.matcher {
                    None => return text,
                    Some(m)
                        if set.hold_from(text.as_bytes()) == text.len() && !m.is_match(&text) =>
                    {
                        return text
                    }
                    _ => {}
                }
            }
            into_string(self.push_with(set, text.into_bytes()))
        })
    }

    /// [`push_string`](Self::push_string) of lent text: the usual delta (nothing held,
    /// nothing to mask) comes back borrowed, with no allocation.
    pub fn push_str<'t>(&mut self, text: &'t str) -> Cow<'t, str> {
        with_set(|set| {
            if self.carry.is_empty() {
                match &set.matcher {
                    None => return Cow::Borrowed(text),
                    Some(m)
                        if set.hold_from(text.as_bytes()) == text.len() && !m.is_match(text) =>
                    {
                        return Cow::Borrowed(text)
                    }
                    _ => {}
                }
            }
            Cow::Owned(into_string(self.push_with(set, text.as_bytes().to_vec())))
        })
    }

    /// Emits what was held back (redacted) and starts over.
    pub fn finish(&mut self) -> Vec<u8> {
        redact_vec(std::mem::take(&mut self.carry))
    }

    /// [`finish`](Self::finish) as text.
    pub fn finish_string(&mut self) -> String {
        into_string(self.finish())
    }

    /// Whether bytes are held back.
    pub fn holds(&self) -> bool {
        !self.carry.is_empty()
    }
}

/// Text from bytes that were UTF-8 before redaction (they still are; never panics).
fn into_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// One [`StreamRedactor`] per stream of deltas, keyed by `K` (e.g. item id and field).
/// No state is kept while no secrets are configured.
pub struct DeltaStreams<K> {
    streams: Vec<(K, StreamRedactor)>,
}

impl<K> Default for DeltaStreams<K> {
    fn default() -> Self {
        DeltaStreams { streams: vec![] }
    }
}

impl<K: PartialEq> DeltaStreams<K> {
    /// Masks the next delta of stream `key`; returns what may be sent now (possibly
    /// empty: then send nothing), `delta` itself (borrowed) when nothing is held or
    /// masked.
    pub fn push<'t>(&mut self, key: &K, delta: &'t str) -> Cow<'t, str>
    where
        K: Clone,
    {
        self.push_by(|k| k == key, || key.clone(), delta)
    }

    /// [`DeltaStreams::push`] with the key given as a test (`is_key`) and made by
    /// `make_key` only when a tail is held back: no key is built for the usual delta.
    pub fn push_by<'t>(
        &mut self,
        is_key: impl Fn(&K) -> bool,
        make_key: impl FnOnce() -> K,
        delta: &'t str,
    ) -> Cow<'t, str> {
        if let Some(i) = self.streams.iter().position(|(k, _)| is_key(k)) {
            let out = self.streams[i].1.push_str(delta);
            if !self.streams[i].1.holds() {
                self.streams.swap_remove(i);
            }
            return out;
        }
        let mut r = StreamRedactor::default();
        let out = r.push_str(delta);
        if r.holds() {
            self.streams.push((make_key(), r));
        }
        out
    }

    /// Whether no stream holds anything back.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Ends the streams `which` selects: their held tails (redacted, non-empty only),
    /// to be sent before the item is announced complete.
    pub fn finish(&mut self, which: impl Fn(&K) -> bool) -> Vec<(K, String)> {
        let mut out = vec![];
        let mut i = 0;
        while i < self.streams.len() {
            if which(&self.streams[i].0) {
                let (k, mut r) = self.streams.swap_remove(i);
                let tail = r.finish_string();
                if !tail.is_empty() {
                    out.push((k, tail));
                }
            } else {
                i += 1;
            }
        }
        out
    }

    /// Drops the streams `which` selects and what they hold (their item was removed or
    /// its text replaced).
    pub fn discard(&mut self, which: impl Fn(&K) -> bool) {
        self.streams.retain(|(k, _)| !which(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_values_escapes_and_split_streams() {
        set(["sk-unit-SECRET-123456".to_string(), "short".to_string()]);
        set([r#"quo"te\secret99"#.to_string()]);
        assert_eq!(redact("a sk-unit-SECRET-123456 b"), "a [REDACTED] b");
        assert_eq!(redact("short stays"), "short stays");
        let json = serde_json::to_string(r#"x quo"te\secret99 y"#).unwrap();
        assert!(!redact(&json).contains("secret99"), "{}", redact(&json));
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
        let mut s = StreamRedactor::default();
        let mut out = Vec::new();
        for chunk in ["xx sk-unit-", "SECRET", "-123456 yy"] {
            out.extend(s.push(chunk.as_bytes()));
        }
        out.extend(s.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "xx [REDACTED] yy");
        assert_eq!(
            url_userinfo("https://user:KEYVALUE1@host/v1"),
            ["user:KEYVALUE1", "KEYVALUE1"]
        );
        assert!(url_userinfo("https://host/v1?x=a@b").is_empty());
    }

    #[test]
    fn a_secret_is_masked_at_every_level_of_json_escaping() {
        // A tool call's arguments are JSON text; an item carries them in a string, and
        // a frame or a trace line may quote the item again.
        let secret = r#"rt-"quote\back-NESTED42"#;
        add(secret);
        let args = serde_json::json!({"path": format!("x{secret}.txt")}).to_string();
        let item = serde_json::json!({"arguments": args}).to_string();
        let quoted = serde_json::json!({"line": item}).to_string();
        for text in [secret.to_owned(), args, item, quoted] {
            let out = redact(&text);
            assert!(!out.contains("NESTED42"), "{text} -> {out}");
            assert!(out.contains(MASK), "{out}");
            assert!(!redact_vec(text.clone().into_bytes())
                .windows(8)
                .any(|w| w == b"NESTED42"));
            let mut stream = StreamRedactor::default();
            let (a, b) = text.split_at(text.len() / 2);
            let mut streamed = stream.push(a.as_bytes());
            streamed.extend(stream.push(b.as_bytes()));
            streamed.extend(stream.finish());
            assert_eq!(String::from_utf8(streamed).unwrap(), out);
        }
    }

    #[test]
    fn a_thread_with_a_cached_set_sees_a_secret_added_later() {
        let (ask, asked) = std::sync::mpsc::channel::<&'static str>();
        let (tell, told) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            for text in asked {
                tell.send((redact(text).into_owned(), redact_vec(text.into())))
                    .unwrap();
            }
        });
        let text = "before late-added-secret-42 after";
        // The worker takes its copy of the set before the secret exists.
        ask.send(text).unwrap();
        assert_eq!(told.recv().unwrap().0, text);
        add("late-added-secret-42");
        ask.send(text).unwrap();
        let (redacted, bytes) = told.recv().unwrap();
        assert_eq!(redacted, "before [REDACTED] after");
        assert_eq!(bytes, b"before [REDACTED] after");
        let mut stream = StreamRedactor::default();
        // (A tail that may start another test's secret is held back until `finish`.)
        let streamed = stream.push_string(text.into()) + &stream.finish_string();
        assert_eq!(streamed, "before [REDACTED] after");
        drop(ask);
        worker.join().unwrap();
    }

    #[test]
    fn secrets_added_from_many_threads_at_once_are_all_kept() {
        let threads: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..40 {
                        add(&format!("concurrent-secret-{t}-{i:03}-xyz"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        for t in 0..8 {
            for i in 0..40 {
                let s = format!("concurrent-secret-{t}-{i:03}-xyz");
                assert_eq!(redact(&s), "[REDACTED]", "{s} was lost");
            }
        }
    }

    #[test]
    fn a_long_secret_is_masked_whole_as_pieces_at_every_escape_level() {
        let long: String = "Lq\"ü-".repeat(300); // 1 800 chars, 2 100 bytes
        add(&long);
        let p = pieces(&long);
        assert!(p.len() > 1 && p.concat() == long);
        assert!(p
            .iter()
            .all(|x| x.len() <= MAX_PIECE_LEN && x.len() >= MAX_PIECE_LEN / 2));
        let args = serde_json::json!({"k": format!("<{long}>")}).to_string();
        let item = serde_json::json!({"arguments": args}).to_string();
        for text in [format!("a {long} b"), args, item] {
            let out = redact(&text);
            assert!(!out.contains("Lq"), "{out}");
            assert!(out.contains(MASK));
            let mut stream = StreamRedactor::default();
            let mut streamed = Vec::new();
            for chunk in text.as_bytes().chunks(97) {
                streamed.extend(stream.push(chunk));
            }
            streamed.extend(stream.finish());
            assert_eq!(String::from_utf8(streamed).unwrap(), out);
        }
        // A run of one byte (the costliest input for a DFA build) and non-ASCII keys.
        for i in 0..5 {
            add(&format!("ключ-{i}-ñøñ-ascii"));
        }
        let run = "A".repeat(12 * 1024);
        let started = std::time::Instant::now();
        add(&run);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let out = redact_string(format!("x{run}y"));
        assert!(!out.contains("AAAAAAAA"), "{out}");
        assert_eq!(redact("ключ-3-ñøñ-ascii"), MASK);
    }

    #[test]
    fn stream_equals_whole_redaction_for_any_chunking() {
        // Overlapping and nested secrets, one with a JSON-escaped form.
        let secrets = [
            "sk-ATTACK-0123456789",
            "sk-ATTACK-0123456789-longer",
            "ATTACK-0123456789XYZ",
            "ab\"cd\\ef-ghijkl",
            "héllo-wörld-ßecret",
        ];
        set(secrets.iter().map(|s| s.to_string()));
        let parts = [
            "sk-ATTACK-0123456789",
            "sk-ATTACK-0123456789-longer",
            "sk-ATTACK-0123456789XYZ",
            "ab\"cd\\ef-ghijkl",
            &serde_json::to_string("ab\"cd\\ef-ghijkl").unwrap(),
            "héllo-wörld-ßecret",
            "sk-ATT",
            "sk-",
            " plain text ",
            "é",
            "ATTACK-01",
            "\n",
        ];
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..3000 {
            let mut text = String::new();
            for _ in 0..next(8) + 1 {
                text.push_str(parts[next(parts.len())]);
            }
            // Cut at random character boundaries.
            let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
            let mut cuts: Vec<usize> = (0..next(6))
                .filter_map(|_| bounds.get(next(bounds.len().max(1))).copied())
                .collect();
            cuts.sort();
            cuts.dedup();
            let mut r = StreamRedactor::default();
            let mut out = String::new();
            let mut prev = 0;
            for &c in cuts.iter().chain([text.len()].iter()) {
                let chunk = r.push_string(text[prev..c].to_string());
                assert!(!secrets.iter().any(|s| chunk.contains(s)), "{chunk:?}");
                out.push_str(&chunk);
                prev = c;
            }
            out.push_str(&r.finish_string());
            assert_eq!(out, redact(&text), "text {text:?} cuts {cuts:?}");
            assert!(r.carry.is_empty());
        }
        // The held tail never exceeds the longest pattern − 1 bytes.
        let mut r = StreamRedactor::default();
        assert_eq!(r.push_string("The key is sk-ATT".into()), "The key is ");
        assert_eq!(r.push_string("ACK-0123".into()), "");
        assert_eq!(r.push_string("456789 done".into()), "[REDACTED] done");
        assert!(!r.holds());
        // Streams by key: nothing kept for a stream that holds nothing.
        let mut d = DeltaStreams::<(u32, u8)>::default();
        let plain = d.push(&(1, 0), "no secret here");
        assert!(
            matches!(plain, Cow::Borrowed("no secret here")),
            "{plain:?}"
        );
        assert!(d.streams.is_empty());
        assert_eq!(d.push(&(1, 0), "x sk-ATTACK"), "x ");
        assert_eq!(d.push(&(2, 0), "sk-ATT"), "");
        assert_eq!(d.finish(|k| k.0 == 1), [((1, 0), "sk-ATTACK".to_string())]);
        d.discard(|k| k.0 == 2);
        assert!(d.streams.is_empty());
    }
}
