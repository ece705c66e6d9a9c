//! A small JSON scanner for the usual shapes of streamed chunks (spec `providers.md` §0):
//! the protocol parsers read the one common chunk of a stream — a text or reasoning
//! delta — straight from its bytes with [`Scan`], and leave every other chunk to their
//! `serde` paths.
//!
//! The scanner accepts a strict subset of what `serde_json` accepts as a `Value`: it
//! checks the whole payload (structure, string escapes and control characters, paired
//! surrogates, trailing bytes), and answers `None` — "not the usual shape, ask the
//! reference path" — for anything it does not read exactly as `serde_json` would: a
//! number with an exponent or more than [`MAX_NUMBER_BYTES`] bytes, a key with escapes,
//! nesting deeper than [`MAX_DEPTH`], a value of an unexpected type. So whenever it
//! answers, the reference path would have accepted the same payload and read the same
//! values; when it does not, the reference path decides (and words any error). Strings
//! are borrowed from the input when they have no escapes, else unescaped into a buffer
//! the caller keeps from chunk to chunk ([`Scan::new`]). No input panics: every index is
//! checked.

/// Deepest nesting the scanner follows (the reference parser allows 128).
pub(crate) const MAX_DEPTH: usize = 16;

/// Longest number the scanner reads (longer ones, which may leave the `f64` range, go to
/// the reference path).
pub(crate) const MAX_NUMBER_BYTES: usize = 24;

/// A string value found by [`Scan`]: a byte range of the input (no escapes) or of the
/// scratch buffer (unescaped). Read it with [`Texts::get`] once the scan is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Str {
    Input(usize, usize),
    Scratch(usize, usize),
}

/// A cursor over one JSON payload.
pub(crate) struct Scan<'a> {
    src: &'a str,
    /// `src` as bytes.
    bytes: &'a [u8],
    pos: usize,
    scratch: &'a mut String,
}

/// The strings of a finished scan: the input and the unescaped ones.
pub(crate) struct Texts<'a> {
    src: &'a str,
    scratch: &'a str,
}

impl<'a> Texts<'a> {
    /// The strings of a scan of `src` that unescaped into `scratch`.
    pub fn new(src: &'a str, scratch: &'a str) -> Self {
        Texts { src, scratch }
    }

    /// The text of `s` (empty if `s` came from another scan).
    pub fn get(&self, s: Str) -> &'a str {
        match s {
            Str::Input(a, b) => self.src.get(a..b),
            Str::Scratch(a, b) => self.scratch.get(a..b),
        }
        .unwrap_or_default()
    }
}

impl<'a> Scan<'a> {
    /// A scan of `src`; unescaped strings are appended to `scratch` (which the caller
    /// clears between payloads).
    pub fn new(src: &'a str, scratch: &'a mut String) -> Self {
        Scan {
            src,
            bytes: src.as_bytes(),
            pos: 0,
            scratch,
        }
    }

    /// A scan of `src` from byte `pos` (where a value starts).
    pub fn at(src: &'a str, pos: usize, scratch: &'a mut String) -> Self {
        Scan {
            src,
            bytes: src.as_bytes(),
            pos,
            scratch,
        }
    }

    /// The byte offset reached.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Ends the scan: only whitespace may follow the value read. The strings found can
    /// then be read.
    pub fn finish(mut self) -> Option<Texts<'a>> {
        self.ws();
        if self.pos != self.src.len() {
            return None;
        }
        let Scan { src, scratch, .. } = self;
        let scratch: &'a String = scratch;
        Some(Texts {
            src,
            scratch: scratch.as_str(),
        })
    }

    /// The text of a string found so far (during the scan).
    pub fn text(&self, s: Str) -> &str {
        match s {
            Str::Input(a, b) => self.src.get(a..b),
            Str::Scratch(a, b) => self.scratch.get(a..b),
        }
        .unwrap_or_default()
    }

    #[inline]
    fn byte(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Skips JSON whitespace.
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.byte() {
            self.pos += 1;
        }
    }

    /// The next non-whitespace byte, not consumed.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.byte()
    }

    /// Consumes `lit` after whitespace.
    fn eat(&mut self, lit: &[u8]) -> Option<()> {
        self.ws();
        let end = self.pos.checked_add(lit.len())?;
        (self.bytes.get(self.pos..end)? == lit).then(|| self.pos = end)
    }

    /// Consumes the byte `b` after whitespace (compact JSON has none: checked first).
    #[inline]
    fn eat_byte(&mut self, b: u8) -> Option<()> {
        if self.byte() != Some(b) {
            self.ws();
            if self.byte() != Some(b) {
                return None;
            }
        }
        self.pos += 1;
        Some(())
    }

    /// `null`.
    pub fn null(&mut self) -> Option<()> {
        self.eat(b"null")
    }

    /// An object, `field(scan, key)` reading each entry's value (or skipping it with
    /// [`Scan::skip`]). Keys with escapes are refused (the reference path unescapes them).
    pub fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        self.eat_byte(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Some(());
        }
        loop {
            self.eat_byte(b'"')?;
            let start = self.pos;
            self.plain_run()?;
            if self.byte()? != b'"' {
                return None; // an escape in the key
            }
            let key = self.bytes.get(start..self.pos)?;
            self.pos += 1;
            self.eat_byte(b':')?;
            field(self, key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array, `element(scan, position)` reading each element.
    pub fn array(&mut self, mut element: impl FnMut(&mut Self, usize) -> Option<()>) -> Option<()> {
        self.eat_byte(b'[')?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Some(());
        }
        let mut i = 0;
        loop {
            element(self, i)?;
            i += 1;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string or `null` (`None`); another type is refused.
    pub fn opt_str(&mut self) -> Option<Option<Str>> {
        match self.peek()? {
            b'n' => self.null().map(|()| None),
            _ => self.string().map(Some),
        }
    }

    /// A non-negative integer that fits a `u64`, or `null` (`None`); anything else
    /// (negative, a fraction, an exponent, another type) is refused.
    pub fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.peek()? == b'n' {
            return self.null().map(|()| None);
        }
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.byte() {
            if self.pos > start && n == 0 {
                return None; // a leading zero
            }
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.pos += 1;
        }
        if self.pos == start || matches!(self.byte(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(Some(n))
    }

    /// A string: borrowed from the input when it has no escapes, else unescaped into the
    /// scratch buffer.
    pub fn string(&mut self) -> Option<Str> {
        self.eat_byte(b'"')?;
        let start = self.pos;
        self.plain_run()?;
        if self.byte()? == b'"' {
            let end = self.pos;
            self.pos += 1;
            return Some(Str::Input(start, end));
        }
        let from = self.scratch.len();
        self.scratch.push_str(self.src.get(start..self.pos)?);
        loop {
            match self.byte()? {
                b'"' => {
                    self.pos += 1;
                    return Some(Str::Scratch(from, self.scratch.len()));
                }
                _ => {
                    self.pos += 1; // the backslash
                    let c = self.escape()?;
                    self.scratch.push(c);
                    let run = self.pos;
                    self.plain_run()?;
                    self.scratch.push_str(self.src.get(run..self.pos)?);
                }
            }
        }
    }

    /// Moves to the end of a string's plain run: its closing quote or next escape (a
    /// `"` or `\` is then the current byte). Refuses a control character or the end of
    /// input. Eight bytes at a time (a word's bytes tested at once, as `serde_json`
    /// does), the last few one by one.
    #[inline]
    fn plain_run(&mut self) -> Option<()> {
        let mut i = self.pos;
        while let Some(word) = self.bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            let stops = stop_bytes(u64::from_le_bytes(*word));
            if stops != 0 {
                i += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        loop {
            let b = *self.bytes.get(i)?;
            if b == b'"' || b == b'\\' || b < 0x20 {
                self.pos = i;
                return (b >= 0x20).then_some(());
            }
            i += 1;
        }
    }

    /// The character of an escape whose backslash was consumed (`\uXXXX` surrogates
    /// must come in pairs, as `serde_json` requires for a string).
    fn escape(&mut self) -> Option<char> {
        let b = self.byte()?;
        self.pos += 1;
        Some(match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                match hi {
                    0xD800..=0xDBFF => {
                        self.eat_raw(b"\\u")?;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?
                    }
                    0xDC00..=0xDFFF => return None,
                    _ => char::from_u32(hi)?,
                }
            }
            _ => return None,
        })
    }

    /// Consumes `lit` exactly here (no whitespace).
    fn eat_raw(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(lit.len())?;
        (self.bytes.get(self.pos..end)? == lit).then(|| self.pos = end)
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.pos.checked_add(4)?;
        let digits = self.bytes.get(self.pos..end)?;
        let mut n = 0;
        for &d in digits {
            n = n * 16 + char::from(d).to_digit(16)?;
        }
        self.pos = end;
        Some(n)
    }

    /// Skips any value (checked as the reference parser checks it, see the module docs).
    pub fn skip(&mut self) -> Option<()> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: usize) -> Option<()> {
        if depth >= MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip_at(depth + 1)),
            b'[' => self.array(|s, _| s.skip_at(depth + 1)),
            b'"' => {
                // Validated, not kept.
                let mark = self.scratch.len();
                self.string()?;
                self.scratch.truncate(mark);
                Some(())
            }
            b't' => self.eat(b"true"),
            b'f' => self.eat(b"false"),
            b'n' => self.null(),
            _ => self.number(),
        }
    }

    /// A number without exponent of at most [`MAX_NUMBER_BYTES`] bytes:
    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        if self.byte() == Some(b'-') {
            self.pos += 1;
        }
        match self.byte()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.byte() == Some(b'.') {
            self.pos += 1;
            let at = self.pos;
            self.digits();
            if self.pos == at {
                return None;
            }
        }
        if matches!(self.byte(), Some(b'e' | b'E' | b'0'..=b'9')) {
            return None;
        }
        (self.pos - start <= MAX_NUMBER_BYTES).then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.byte() {
            self.pos += 1;
        }
    }
}

/// The bytes of `w` (eight input bytes, the first in the low byte) that end a string's
/// plain run — `"`, `\` or a control character — each marked by its high bit. Only the
/// lowest mark is exact (a borrow may mark bytes above it), which is all
/// [`Scan::plain_run`] reads.
#[inline]
fn stop_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (control | quote | backslash) & (ONES << 7)
}

/// Helpers of the protocols' fuzz-style tests: a reproducible generator, objects of
/// shuffled entries and random edits of a payload.
#[cfg(test)]
pub(crate) mod fuzz {
    /// A tiny deterministic generator (xorshift64*), so failures reproduce.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        pub fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
        pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len())]
        }
        pub fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    /// String-ish values: escapes, unicode, surrogates, and other types.
    pub const TEXTS: &[&str] = &[
        "\"hi\"",
        "\"\"",
        "\"a\\nb \\\"q\\\" \\u00e9\"",
        "\"\\ud83e\\udd80 🦀 é\"",
        "\"\\ud800\"",
        "null",
        "5",
        "[\"a\"]",
        "{\"t\":1}",
        "\"\\/\"",
    ];

    /// Values of unknown keys: nested, numbers, some of them refused by `serde_json` too.
    pub const UNKNOWN: &[&str] = &[
        "null",
        "1",
        "-2",
        "1.5e3",
        "true",
        "\"s\"",
        "[1,{\"a\":[null]}]",
        "{\"b\":{}}",
        "1e999",
        "\"\\ud800\"",
        "18446744073709551616",
        "[]",
    ];

    /// `Some(v(rng))` in `percent` % of the cases.
    pub fn opt(rng: &mut Rng, percent: u64, v: impl FnOnce(&mut Rng) -> String) -> Option<String> {
        rng.chance(percent).then(|| v(rng))
    }

    /// `{"k":v,…}` of the present entries (`None` = absent), shuffled, sometimes with an
    /// unknown key, a repeated key or whitespace.
    pub fn object(rng: &mut Rng, entries: &[(&str, Option<String>)]) -> String {
        let mut parts: Vec<String> = entries
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("\"{k}\":{v}")))
            .collect();
        if rng.chance(30) {
            let k = rng.pick(&["x", "logprobs", "sequence_number", "obfuscation"]);
            parts.push(format!("\"{k}\":{}", rng.pick(UNKNOWN)));
        }
        if rng.chance(8) && !parts.is_empty() {
            let i = rng.below(parts.len());
            parts.push(parts[i].clone());
        }
        for i in (1..parts.len()).rev() {
            parts.swap(i, rng.below(i + 1));
        }
        let sep = if rng.chance(10) { " ,\n " } else { "," };
        format!("{{{}}}", parts.join(sep))
    }

    /// Random edits of a payload: a byte dropped, doubled or replaced, a cut, an escape or
    /// a number put in.
    pub fn mutate(rng: &mut Rng, s: &str) -> String {
        let mut b = s.as_bytes().to_vec();
        for _ in 0..1 + rng.below(3) {
            if b.is_empty() {
                break;
            }
            let i = rng.below(b.len());
            match rng.below(5) {
                0 => {
                    b.remove(i);
                }
                1 => b.insert(i, b[i]),
                2 => b[i] = b"{}[]\",:\\ u0e-.1\x01\xff"[rng.below(17)],
                3 => b.truncate(i),
                _ => {
                    let piece = rng.pick(&["\\u00e9", "\\ud83e", "\\n", "1e5", "-0", " ", "\\"]);
                    b.splice(i..i, piece.bytes());
                }
            }
        }
        String::from_utf8_lossy(&b).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::fuzz::{mutate, Rng};
    use super::*;
    use serde_json::Value;

    /// Skips a whole payload; `Some` must mean `serde_json` parses it too.
    fn skips(src: &str) -> bool {
        let mut scratch = String::new();
        let mut s = Scan::new(src, &mut scratch);
        s.skip().is_some() && s.finish().is_some()
    }

    /// The string value of a payload, through the scanner.
    fn string(src: &str) -> Option<String> {
        let mut scratch = String::from("junk");
        let mut s = Scan::new(src, &mut scratch);
        let v = s.string()?;
        let texts = s.finish()?;
        Some(texts.get(v).to_owned())
    }

    const ATOMS: &[&str] = &[
        "null",
        "true",
        "false",
        "0",
        "-0",
        "1",
        "-12",
        "1.5",
        "0.25",
        "1e3",
        "1E-2",
        "01",
        "1.",
        "-",
        ".5",
        "18446744073709551615",
        "18446744073709551616",
        "1e999",
        "123456789012345678901234567890",
        "\"\"",
        "\"a\"",
        "\"a\\nb\"",
        "\"\\u00e9\"",
        "\"\\ud83e\\udd80\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\\x\"",
        "\"tab\there\"",
        "\"é 🦀\"",
        "\"\\/\\b\\f\\r\\t\\\"\\\\\"",
        "\"\\u00\"",
        "nul",
        "tru",
        "[]",
        "{}",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\"}",
        "{1:2}",
        "{\"k\\u0065y\":1}",
    ];

    /// A random JSON-ish text: valid structure most of the time, with some invalid atoms.
    fn gen(rng: &mut Rng, depth: usize) -> String {
        let ws = |rng: &mut Rng| [" ", "", "", "\n", "\t", "\r\n "][rng.below(6)];
        match rng.below(if depth > 4 { 1 } else { 4 }) {
            0 => ATOMS[rng.below(ATOMS.len())].to_string(),
            1 => {
                let n = rng.below(4);
                let items: Vec<String> = (0..n).map(|_| gen(rng, depth + 1)).collect();
                format!("[{}{}]", ws(rng), items.join(&format!(",{}", ws(rng))))
            }
            _ => {
                let n = rng.below(4);
                let items: Vec<String> = (0..n)
                    .map(|i| {
                        let key =
                            ["\"a\"", "\"b\"", "\"a\"", "\"\"", "\"c d\""][(i + rng.below(5)) % 5];
                        format!("{key}{}:{}{}", ws(rng), ws(rng), gen(rng, depth + 1))
                    })
                    .collect();
                format!("{{{}}}", items.join(","))
            }
        }
    }

    #[test]
    fn what_the_scanner_accepts_serde_json_accepts_and_reads_alike() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let (mut accepted, mut total) = (0, 0);
        for round in 0..20_000 {
            let mut src = gen(&mut rng, 0);
            if round % 2 == 1 {
                src = mutate(&mut rng, &src);
            }
            total += 1;
            if skips(&src) {
                accepted += 1;
                assert!(
                    serde_json::from_str::<Value>(&src).is_ok(),
                    "the scanner accepted what serde_json refuses: {src:?}"
                );
            }
            // Strings read alike.
            if let Some(s) = string(&src) {
                assert_eq!(
                    serde_json::from_str::<String>(&src).ok(),
                    Some(s),
                    "string {src:?}"
                );
            }
        }
        assert!(accepted > total / 4, "accepted only {accepted} of {total}");
    }

    #[test]
    fn strings_borrow_or_unescape_like_serde_json() {
        for (src, want) in [
            (r#""plain""#, Some("plain")),
            (
                r#""a\"b\\c\/d\b\f\n\r\t""#,
                Some("a\"b\\c/d\u{8}\u{c}\n\r\t"),
            ),
            (r#""\u00e9\u00E9 \ud83e\udd80 🦀""#, Some("éé 🦀 🦀")),
            (r#""\ud800""#, None),
            (r#""\udc00\ud800""#, None),
            (r#""\ud800\n""#, None),
            (r#""\u12""#, None),
            ("\"a\u{1}b\"", None),
            (r#""open"#, None),
            (r#""x\"#, None),
            (r#""\q""#, None),
        ] {
            assert_eq!(string(src).as_deref(), want, "{src}");
            assert_eq!(
                serde_json::from_str::<String>(src).ok().as_deref(),
                want,
                "serde_json agrees on {src}"
            );
        }
        let mut scratch = String::new();
        let mut s = Scan::new(r#"["plain","esc\n"]"#, &mut scratch);
        let mut got = vec![];
        s.array(|s, _| s.string().map(|v| got.push(v))).unwrap();
        assert!(matches!(got[0], Str::Input(..)), "no escape: borrowed");
        assert!(matches!(got[1], Str::Scratch(..)), "escapes: unescaped");
    }

    #[test]
    fn integers_outside_the_usual_range_are_left_to_the_reference_path() {
        let read = |src: &str| {
            let mut scratch = String::new();
            let mut s = Scan::new(src, &mut scratch);
            let v = s.opt_u64()?;
            s.finish().map(|_| v)
        };
        assert_eq!(read("0"), Some(Some(0)));
        assert_eq!(read(" 42 "), Some(Some(42)));
        assert_eq!(read("null"), Some(None));
        assert_eq!(read("18446744073709551615"), Some(Some(u64::MAX)));
        for refused in [
            "18446744073709551616",
            "-1",
            "1.0",
            "1e2",
            "01",
            "",
            "\"1\"",
        ] {
            assert_eq!(read(refused), None, "{refused}");
        }
    }

    /// The first stop byte of a word, one byte at a time.
    fn first_stop(w: [u8; 8]) -> Option<usize> {
        w.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)
    }

    /// The first stop byte of a word, as [`Scan::plain_run`] reads [`stop_bytes`].
    fn first_stop_by_word(w: [u8; 8]) -> Option<usize> {
        let m = stop_bytes(u64::from_le_bytes(w));
        (m != 0).then_some((m.trailing_zeros() / 8) as usize)
    }

    #[test]
    fn the_word_test_finds_the_first_stop_byte_as_a_byte_loop_does() {
        // Every byte value at every position, among bytes next to the stop bytes' values
        // (and with the high bit set: `\xa2`, `\xdc`).
        for p in 0..8 {
            for b in 0..=255u8 {
                let mut w = [b'a', 0xff, 0x80, b'!', 0xa2, 0xdc, b'#', b' '];
                w[p] = b;
                assert_eq!(first_stop_by_word(w), first_stop(w), "{w:?}");
                w.reverse();
                assert_eq!(first_stop_by_word(w), first_stop(w), "{w:?}");
            }
        }
        // Words with several stop bytes (a borrow past the first may mark later bytes).
        let mut rng = Rng(99);
        let near = b"\"\\\x00\x1f\x20\x21\x5b\x5d\xa2\xdc\x9f\xa0\x7f\xff\x01\x23";
        for _ in 0..200_000 {
            let mut w = [0u8; 8];
            for x in &mut w {
                *x = if rng.chance(50) {
                    near[rng.below(near.len())]
                } else {
                    rng.next() as u8
                };
            }
            assert_eq!(first_stop_by_word(w), first_stop(w), "{w:?}");
        }
    }

    #[test]
    fn strings_read_alike_wherever_their_escapes_and_characters_fall_in_a_word() {
        // A stop byte, escape or multi-byte character at every offset of the first words
        // and of the tail, in strings of every length up to a few words.
        let pieces = [
            "\"",
            "\\n",
            "\\u00e9",
            "\\ud83e\\udd80",
            "\u{1}",
            "\u{1f}",
            "é",
            "🦀",
            "\\",
            "\\q",
        ];
        for len in 0..28 {
            for at in 0..=len {
                for piece in pieces {
                    let body: String = (0..len)
                        .map(|i| {
                            if i == at {
                                piece.to_string()
                            } else {
                                "x".to_string()
                            }
                        })
                        .collect();
                    for src in [
                        format!("\"{body}\""),
                        format!("\"{body}"),
                        format!("\"{body}\" "),
                    ] {
                        assert_eq!(
                            string(&src),
                            serde_json::from_str::<String>(&src).ok(),
                            "{src:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn deep_nesting_and_arbitrary_bytes_never_panic() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(!skips(&deep), "left to the reference path");
        let ok = "[".repeat(MAX_DEPTH - 1) + &"]".repeat(MAX_DEPTH - 1);
        assert!(skips(&ok));
        let mut rng = Rng(7);
        for _ in 0..20_000 {
            let n = rng.below(24);
            let bytes: Vec<u8> = (0..n)
                .map(|_| b"{}[]\":,\\un0123456789.-e \xc3\xa9\xf0"[rng.below(27)])
                .collect();
            let src = String::from_utf8_lossy(&bytes);
            if skips(&src) {
                assert!(serde_json::from_str::<Value>(&src).is_ok(), "{src:?}");
            }
            let _ = string(&src);
        }
    }
}
