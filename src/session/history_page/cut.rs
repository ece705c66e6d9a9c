//! Cutting large items (spec `app-server.md` §5.8, the projection of an item still over
//! 64 KiB, and §5.9 content references): a streaming JSON rewriter that cuts long
//! strings, the field rules of a cut item, and the `content:` reference that names the
//! full stored item so `thread/content/read` can serve it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};
use wuu_protocol::{ThreadItem, CUT_TEXT_BYTES};

/// `content:` reference (spec §5.9).
pub fn content_ref(thread_id: &str, turn_id: &str, item_id: &str, sha: &str) -> String {
    format!(
        "content:{}",
        URL_SAFE_NO_PAD.encode(json!([thread_id, turn_id, item_id, sha]).to_string())
    )
}

/// Applies the field rules of a cut item (spec §5.8) after its strings were cut.
pub(super) fn project_cut(item: &mut ThreadItem) {
    item.arguments = None;
    item.content_parts = None;
    item.files = None;
    if let Some(images) = item.images.as_mut() {
        images.truncate(4);
    }
    if let Some(content) = item
        .result_detail
        .as_mut()
        .and_then(|d| d.get_mut("content"))
        .and_then(Value::as_array_mut)
    {
        content.truncate(4);
    }
}

/// A streaming JSON rewriter that cuts every string value longer than
/// [`CUT_TEXT_BYTES`] (counted in JSON-encoded bytes, never splitting a character or an
/// escape) and ends it with `…`. Output stays valid JSON; its size is bounded by the
/// structure, not by the string lengths.
#[derive(Default)]
pub struct Cutter {
    /// The rewritten JSON so far.
    pub out: Vec<u8>,
    in_str: bool,
    unit: Vec<u8>,
    need: usize,
    str_len: usize,
    cutting: bool,
}

impl Cutter {
    /// Feeds more input bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    fn emit_unit(&mut self) {
        if !self.cutting {
            if self.str_len + self.unit.len() > CUT_TEXT_BYTES {
                self.cutting = true;
                self.out.extend_from_slice("…".as_bytes());
            } else {
                self.str_len += self.unit.len();
                self.out.extend_from_slice(&self.unit);
            }
        }
        self.unit.clear();
        self.need = 0;
    }

    fn byte(&mut self, b: u8) {
        if !self.in_str {
            self.out.push(b);
            if b == b'"' {
                self.in_str = true;
                self.str_len = 0;
                self.cutting = false;
            }
            return;
        }
        if !self.unit.is_empty() {
            self.unit.push(b);
            if self.unit[0] == b'\\' {
                let n = self.unit.len();
                let done = match n {
                    2 => b != b'u',
                    6 => {
                        let hexs = std::str::from_utf8(&self.unit[2..6]).unwrap_or("0");
                        let cp = u32::from_str_radix(hexs, 16).unwrap_or(0);
                        !(0xD800..0xDC00).contains(&cp)
                    }
                    7 => b != b'\\',
                    8 => b != b'u',
                    12 => true,
                    _ => false,
                };
                if done {
                    self.emit_unit();
                }
            } else if self.unit.len() >= self.need {
                self.emit_unit();
            }
            return;
        }
        match b {
            b'"' => {
                self.in_str = false;
                self.out.push(b);
            }
            b'\\' => self.unit.push(b),
            0x80.. => {
                self.need = match b {
                    0xF0.. => 4,
                    0xE0.. => 3,
                    _ => 2,
                };
                self.unit.push(b);
            }
            _ => {
                self.unit.push(b);
                self.emit_unit();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(s: &str) -> String {
        let mut c = Cutter::default();
        for chunk in s.as_bytes().chunks(7) {
            c.feed(chunk);
        }
        String::from_utf8(c.out).unwrap()
    }

    #[test]
    fn cutter_keeps_short_strings_and_cuts_long_ones_validly() {
        let v = json!({"a": "short", "b": "x".repeat(5000), "c": [1, "é".repeat(3000)],
            "d": "\u{1F600}".repeat(1000), "e": "\"\\\n".repeat(2000)});
        let out = cut(&v.to_string());
        let back: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back["a"], "short");
        for s in [&back["b"], &back["c"][1], &back["d"], &back["e"]] {
            let s = s.as_str().unwrap();
            assert!(s.ends_with('…'), "{s}");
            assert!(s.len() <= CUT_TEXT_BYTES + 4);
        }
        assert!(out.len() < 12_000);
    }
}
