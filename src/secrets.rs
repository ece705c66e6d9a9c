//! The one redactor: configured secret values never leave the host.
//!
//! The set of secrets is every value the configuration can name:
//!
//! - the value of each provider's `api_key_env` variable (and of `OPENAI_API_KEY` /
//!   `ANTHROPIC_API_KEY`, which are used implicitly for the vendors' own hosts);
//! - the userinfo of a `base_url` (`https://user:KEY@host`: the whole `user:KEY` and the
//!   password; a user-only `https://TOKEN@host` whole), although such a URL is refused at
//!   load;
//! - the values of sensitive provider `headers` (`authorization`, and names containing
//!   `key`, `token`, `secret`, `cookie`; a `Bearer ` prefix is dropped);
//! - keys and tokens a client sends in requests (`config/model/update` `api_key`,
//!   `auth_token`), added when they arrive ([`add`]).
//!
//! Values shorter than [`MIN_SECRET_LEN`] bytes are not redacted (they would match
//! ordinary text); a warning says so once. Every occurrence of a secret, and of its JSON
//! string escaping when that differs, is replaced with [`MASK`].
//!
//! [`redact`] is applied where text leaves the host or reaches the disk, and nowhere
//! else: the protocol outbox (every app-server and in-process frame), the `exec` output
//! writers, the logger (every level), traces, the store (JSON columns, titles and
//! previews, through [`wuu_store::set_text_filter`]), and command output (streamed
//! events, results, spill files; the model sees it redacted too). [`StreamRedactor`]
//! handles secrets split across chunks of a stream.

use aho_corasick::AhoCorasick;
use parking_lot::RwLock;
use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

/// What a secret is replaced with.
pub const MASK: &str = "[REDACTED]";

/// Shortest value treated as a secret (bytes).
pub const MIN_SECRET_LEN: usize = 8;

#[derive(Default)]
struct Set {
    values: Vec<String>,
    matcher: Option<AhoCorasick>,
    /// The patterns (values and their JSON escapings), for [`StreamRedactor`].
    pats: Vec<String>,
}

impl Set {
    /// Length of the longest suffix of `buf` that is a proper prefix of a pattern (a
    /// secret that may continue in the next chunk).
    fn partial_tail(&self, buf: &[u8]) -> usize {
        let mut hold = 0;
        for p in &self.pats {
            let p = p.as_bytes();
            let max = (p.len() - 1).min(buf.len());
            for k in (hold + 1..=max).rev() {
                if buf.ends_with(&p[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        hold
    }
}

static SECRETS: LazyLock<RwLock<Arc<Set>>> = LazyLock::new(Default::default);

fn rebuild(values: Vec<String>) -> Set {
    let mut pats: Vec<String> = Vec::new();
    for v in &values {
        pats.push(v.clone());
        let escaped = serde_json::to_string(v).unwrap_or_default();
        let escaped = escaped
            .strip_prefix('"')
            .and_then(|e| e.strip_suffix('"'))
            .unwrap_or("");
        if escaped != v && !escaped.is_empty() {
            pats.push(escaped.to_string());
        }
    }
    // Longest first so a secret containing another is masked whole.
    pats.sort_by_key(|p| std::cmp::Reverse(p.len()));
    pats.dedup();
    let matcher = if pats.is_empty() {
        None
    } else {
        aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&pats)
            .ok()
    };
    Set {
        values,
        matcher,
        pats,
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

/// Replaces the set with `values` plus those added by [`add`] before (a config reload
/// never forgets a secret that was already seen). Installs the store filter.
pub fn set(values: impl IntoIterator<Item = String>) {
    let _ = wuu_store::set_text_filter(store_filter);
    let mut all: Vec<String> = SECRETS.read().values.clone();
    for v in values.into_iter().filter_map(|v| accept(&v)) {
        if !all.contains(&v) {
            all.push(v);
        }
    }
    *SECRETS.write() = Arc::new(rebuild(all));
}

/// Adds one secret (e.g. a key a client sent).
pub fn add(value: &str) {
    set([value.to_string()]);
}

/// The secrets named by `cfg` (see the module docs).
pub fn from_config(cfg: &crate::config::LoadedConfig) -> Vec<String> {
    let mut out = Vec::new();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    for name in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"] {
        out.extend(env(name));
    }
    for p in cfg.config.providers.iter().flat_map(|m| m.values()) {
        if let Some(name) = &p.api_key_env {
            out.extend(env(name));
        }
        out.extend(url_userinfo(&p.base_url));
        for (k, v) in p.headers.iter().flatten() {
            let k = k.to_ascii_lowercase();
            if k == "authorization"
                || ["key", "token", "secret", "cookie"]
                    .iter()
                    .any(|w| k.contains(w))
            {
                let v = v.trim();
                out.push(v.to_string());
                if let Some(rest) = v
                    .strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
                {
                    out.push(rest.trim().to_string());
                }
            }
        }
    }
    out
}

/// Loads the secrets of `cfg` (call after every config load).
pub fn install(cfg: &crate::config::LoadedConfig) {
    set(from_config(cfg));
}

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
    let set = SECRETS.read().clone();
    match &set.matcher {
        Some(m) if m.is_match(text) => {
            let reps = vec![MASK; m.patterns_len()];
            Cow::Owned(m.replace_all(text, &reps))
        }
        _ => Cow::Borrowed(text),
    }
}

/// [`redact`] over bytes (frames, raw output).
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let set = SECRETS.read().clone();
    match &set.matcher {
        Some(m) if m.is_match(bytes) => {
            let reps = vec![MASK.as_bytes(); m.patterns_len()];
            Cow::Owned(m.replace_all_bytes(bytes, &reps))
        }
        _ => Cow::Borrowed(bytes),
    }
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

/// Redacts a stream given in chunks: a secret split across chunks is still masked. It
/// holds back only a tail that could be the start of a secret (so ordinary output is not
/// delayed) until more arrive or [`finish`] is called; what it returns can be written
/// out at once.
///
/// [`finish`]: StreamRedactor::finish
#[derive(Default)]
pub struct StreamRedactor {
    carry: Vec<u8>,
}

impl StreamRedactor {
    /// Feeds `bytes`; returns the redacted bytes that are safe to emit now.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        let set = SECRETS.read().clone();
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(bytes);
        let red = redact_vec(buf);
        let hold = set.partial_tail(&red);
        if red.len() <= hold {
            self.carry = red;
            return Vec::new();
        }
        let cut = red.len() - hold;
        self.carry = red[cut..].to_vec();
        let mut out = red;
        out.truncate(cut);
        out
    }

    /// Emits what was held back (redacted).
    pub fn finish(&mut self) -> Vec<u8> {
        redact_vec(std::mem::take(&mut self.carry))
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
}
