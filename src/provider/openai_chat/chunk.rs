//! One Chat Completions stream chunk (`data:` payload) as the parser reads it, and the
//! typed fast path that reads it without building a `serde_json::Value`.
//!
//! [`Chunk`] holds exactly what [`super::Parser`] looks at: the response `id`, the
//! `usage` object (already normalized, [`super::parse_usage`]), and of the first element
//! of `choices` its `delta` (or `message`) and `finish_reason`. It is made either from a
//! parsed `Value` ([`Chunk::from_value`], the reference semantics) or directly from the
//! JSON text ([`parse_typed`]); both must give the same `Chunk` for every input the typed
//! path accepts (unit tests compare the parser's events over many chunk shapes).
//!
//! The typed path accepts only the expected shape: objects where objects are expected,
//! strings (borrowed from the input unless they contain escapes) or `null` for string
//! fields, non-negative integers or `null` for token counts. Every other field is
//! skipped, but still parsed the way `Value` parses it (same number range and string
//! escape checks), so a payload the `Value` parser would refuse is refused here too.
//! Anything else — an odd type, an error object (`error` not null, `object:"error"`),
//! `finish_reason:"error"` — makes [`parse_typed`] answer `None` and the caller takes the
//! `Value` path, so behaviour and error messages stay those of the `Value` path.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::parse_usage;
use crate::provider::chat::Usage;
use crate::provider::scan::{Scan, Str, Texts};
pub(crate) use template::Template;

/// What the parser reads of one chunk.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Chunk<'a> {
    /// `id`, when it is a string.
    pub id: Option<Cow<'a, str>>,
    /// `usage`, when it is an object.
    pub usage: Option<Usage>,
    /// `choices[0]`, when `choices` is a non-empty array.
    pub choice: Option<Choice<'a>>,
}

/// The first choice of a chunk.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Choice<'a> {
    /// `delta`, or `message` when there is no `delta` key (a complete answer read as a
    /// chunk); `None` when neither is there.
    pub delta: Option<Delta<'a>>,
    /// `finish_reason`, when it is a string.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// A choice's delta.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Delta<'a> {
    /// `reasoning_content` when it is a string, else `reasoning` when it is a string.
    pub reasoning: Option<Cow<'a, str>>,
    /// `content`, when it is a string.
    pub content: Option<Cow<'a, str>>,
    /// `tool_calls` fragments (empty when absent or not an array).
    pub tool_calls: Vec<Fragment<'a>>,
}

/// One element of `delta.tool_calls`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Fragment<'a> {
    /// `index`, when it is a non-negative integer.
    pub index: Option<u64>,
    /// `id`, when it is a string.
    pub id: Option<Cow<'a, str>>,
    /// `function.name`, when it is a string.
    pub name: Option<Cow<'a, str>>,
    /// `function.arguments`: the string, `""` when absent or null, the JSON text of any
    /// other value (some servers send an object).
    pub arguments: Cow<'a, str>,
}

impl<'a> Chunk<'a> {
    /// The reference reading of a parsed chunk: lenient, any field of an unexpected type
    /// reads as absent.
    pub fn from_value(v: &'a Value) -> Chunk<'a> {
        let s = |v: Option<&'a Value>| v.and_then(Value::as_str).map(Cow::Borrowed);
        Chunk {
            id: s(v.get("id")),
            usage: v.get("usage").filter(|u| u.is_object()).map(parse_usage),
            choice: v
                .get("choices")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .map(|c| Choice {
                    delta: c.get("delta").or_else(|| c.get("message")).map(|d| Delta {
                        reasoning: s(d.get("reasoning_content")).or_else(|| s(d.get("reasoning"))),
                        content: s(d.get("content")),
                        tool_calls: d
                            .get("tool_calls")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().map(Fragment::from_value).collect())
                            .unwrap_or_default(),
                    }),
                    finish_reason: s(c.get("finish_reason")),
                }),
        }
    }
}

impl<'a> Fragment<'a> {
    fn from_value(tc: &'a Value) -> Fragment<'a> {
        let f = tc.get("function");
        Fragment {
            index: tc.get("index").and_then(Value::as_u64),
            id: tc.get("id").and_then(Value::as_str).map(Cow::Borrowed),
            name: f
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(Cow::Borrowed),
            arguments: match f.and_then(|f| f.get("arguments")) {
                Some(Value::String(s)) => Cow::Borrowed(s),
                Some(Value::Null) | None => Cow::Borrowed(""),
                Some(other) => Cow::Owned(other.to_string()),
            },
        }
    }
}

/// The typed reading of a `data:` payload; `None` when it does not have the expected
/// shape (then the `Value` path decides, see the module docs).
pub(crate) fn parse_typed(data: &str) -> Option<Chunk<'_>> {
    let w: WireChunk = serde_json::from_str(data).ok()?;
    if w.error || w.object.as_deref() == Some("error") {
        return None;
    }
    let chunk = Chunk {
        id: w.id,
        usage: w.usage.map(WireUsage::usage),
        choice: w.choice,
    };
    if chunk
        .choice
        .as_ref()
        .and_then(|c| c.finish_reason.as_deref())
        == Some("error")
    {
        return None;
    }
    Some(chunk)
}

// ---------------------------------------------------------------------------------------
// Wire shapes. Each object is read with `deserialize_map` (an array in place of an object
// is refused, unlike derived structs, which accept sequences); a repeated key keeps the
// last value, like `Value`.
// ---------------------------------------------------------------------------------------

/// Reads the entries of a map: `field(key, map)` reads the value of a known key and
/// returns true, or returns false and the value is skipped ([`Skip`]).
fn visit_entries<'de, A: MapAccess<'de>>(
    mut map: A,
    mut field: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key::<Text<'de>>()? {
        if !field(&key.0, &mut map)? {
            map.next_value::<Skip>()?;
        }
    }
    Ok(())
}

/// Implements `Deserialize` for a wire type read from a JSON object by `$visit` (a
/// function `(MapAccess) -> Result<Self, Error>`).
macro_rules! from_map {
    ($ty:ident, $what:literal, $visit:ident) => {
        impl<'de> Deserialize<'de> for $ty<'de> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $ty<'de>;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                        $visit(map)
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

/// A string, borrowed from the input when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Reads an optional string field (`null` = absent).
fn opt_text<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Text<'de>>>()?.map(|t| t.0))
}

/// Any JSON value, parsed and dropped. Unlike `serde::de::IgnoredAny` (which serde_json skips
/// without converting numbers), it goes through the same number and string parsing as
/// `Value`, so it fails exactly where `Value` fails (e.g. `1e999`: number out of range).
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Skip, D::Error> {
        Skip::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
}

/// The top-level chunk object.
struct WireChunk<'a> {
    id: Option<Cow<'a, str>>,
    /// `error` is there and not null.
    error: bool,
    object: Option<Cow<'a, str>>,
    usage: Option<WireUsage>,
    choice: Option<Choice<'a>>,
}

fn visit_chunk<'de, A: MapAccess<'de>>(map: A) -> Result<WireChunk<'de>, A::Error> {
    let mut w = WireChunk {
        id: None,
        error: false,
        object: None,
        usage: None,
        choice: None,
    };
    visit_entries(map, |key, map| {
        match key {
            "id" => w.id = opt_text(map)?,
            "object" => w.object = opt_text(map)?,
            "error" => w.error = map.next_value::<Option<Skip>>()?.is_some(),
            "usage" => w.usage = map.next_value::<Option<WireUsage>>()?,
            "choices" => w.choice = map.next_value::<Option<FirstChoice>>()?.and_then(|c| c.0),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(w)
}
from_map!(WireChunk, "a chunk object", visit_chunk);

/// `choices`: the first element read as a [`Choice`], the others skipped.
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de> Deserialize<'de> for FirstChoice<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstChoice<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Choice<'de>>()?;
                if first.is_some() {
                    while seq.next_element::<Skip>()?.is_some() {}
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A `delta`/`message` key: absent, `null`, or an object.
enum Slot<D> {
    Absent,
    Null,
    Delta(D),
}

fn visit_choice<'de, A: MapAccess<'de>>(map: A) -> Result<Choice<'de>, A::Error> {
    let (mut delta, mut message, mut finish_reason) = (Slot::Absent, Slot::Absent, None);
    visit_entries(map, |key, map| {
        let slot = match key {
            "delta" => &mut delta,
            "message" => &mut message,
            "finish_reason" => {
                finish_reason = opt_text(map)?;
                return Ok(true);
            }
            _ => return Ok(false),
        };
        *slot = match map.next_value::<Option<Delta<'de>>>()? {
            Some(d) => Slot::Delta(d),
            None => Slot::Null,
        };
        Ok(true)
    })?;
    // `delta` wins whenever the key is there (even as null), as `get("delta")` does.
    let delta = match (delta, message) {
        (Slot::Delta(d), _) | (Slot::Absent, Slot::Delta(d)) => Some(d),
        // A null delta reads as an empty one.
        (Slot::Null, _) | (Slot::Absent, Slot::Null) => Some(Delta::default()),
        (Slot::Absent, Slot::Absent) => None,
    };
    Ok(Choice {
        delta,
        finish_reason,
    })
}
from_map!(Choice, "a choice object", visit_choice);

fn visit_delta<'de, A: MapAccess<'de>>(map: A) -> Result<Delta<'de>, A::Error> {
    let (mut reasoning_content, mut reasoning, mut d) = (None, None, Delta::default());
    visit_entries(map, |key, map| {
        match key {
            "content" => d.content = opt_text(map)?,
            "reasoning_content" => reasoning_content = opt_text(map)?,
            "reasoning" => reasoning = opt_text(map)?,
            "tool_calls" => {
                d.tool_calls = map
                    .next_value::<Option<Vec<Fragment<'de>>>>()?
                    .unwrap_or_default()
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    d.reasoning = reasoning_content.or(reasoning);
    Ok(d)
}
from_map!(Delta, "a delta object", visit_delta);

fn visit_fragment<'de, A: MapAccess<'de>>(map: A) -> Result<Fragment<'de>, A::Error> {
    let mut f = Fragment::default();
    visit_entries(map, |key, map| {
        match key {
            "index" => f.index = map.next_value()?,
            "id" => f.id = opt_text(map)?,
            "function" => {
                let func = map.next_value::<Option<Function<'de>>>()?;
                (f.name, f.arguments) = match func {
                    Some(func) => (func.name, func.arguments.unwrap_or(Cow::Borrowed(""))),
                    None => (None, Cow::Borrowed("")),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(f)
}
from_map!(Fragment, "a tool call object", visit_fragment);

/// `function` of a tool call fragment (`arguments` only as a string or null; another
/// type takes the `Value` path, which sends its JSON text).
struct Function<'a> {
    name: Option<Cow<'a, str>>,
    arguments: Option<Cow<'a, str>>,
}

fn visit_function<'de, A: MapAccess<'de>>(map: A) -> Result<Function<'de>, A::Error> {
    let mut f = Function {
        name: None,
        arguments: None,
    };
    visit_entries(map, |key, map| {
        match key {
            "name" => f.name = opt_text(map)?,
            "arguments" => f.arguments = opt_text(map)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(f)
}
from_map!(Function, "a function object", visit_function);

/// A `usage` object (token counts as non-negative integers or null).
#[derive(Default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_cache_hit_tokens: Option<u64>,
    prompt_details: Option<TokenDetails>,
    completion_details: Option<TokenDetails>,
}

impl WireUsage {
    /// The same figures as [`parse_usage`] of the equivalent `Value`.
    fn usage(self) -> Usage {
        let cached = self
            .prompt_details
            .and_then(|d| d.cached_tokens)
            .or(self.prompt_cache_hit_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_tokens: cached,
            cache_creation_tokens: 0,
            reasoning_tokens: self
                .completion_details
                .and_then(|d| d.reasoning_tokens)
                .unwrap_or(0),
        }
    }
}

impl<'de> Deserialize<'de> for WireUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireUsage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<WireUsage, A::Error> {
                let mut u = WireUsage::default();
                visit_entries(map, |key, map| {
                    match key {
                        "prompt_tokens" => u.prompt_tokens = map.next_value()?,
                        "completion_tokens" => u.completion_tokens = map.next_value()?,
                        "prompt_cache_hit_tokens" => {
                            u.prompt_cache_hit_tokens = map.next_value()?
                        }
                        "prompt_tokens_details" => u.prompt_details = map.next_value()?,
                        "completion_tokens_details" => u.completion_details = map.next_value()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(u)
            }
        }
        d.deserialize_map(V)
    }
}

/// `prompt_tokens_details` / `completion_tokens_details`.
#[derive(Default)]
struct TokenDetails {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

impl<'de> Deserialize<'de> for TokenDetails {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TokenDetails;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token details object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TokenDetails, A::Error> {
                let mut t = TokenDetails::default();
                visit_entries(map, |key, map| {
                    match key {
                        "cached_tokens" => t.cached_tokens = map.next_value()?,
                        "reasoning_tokens" => t.reasoning_tokens = map.next_value()?,
                        _ => return Ok(false),
                    }
                    Ok(true)
                })?;
                Ok(t)
            }
        }
        d.deserialize_map(V)
    }
}

// ---------------------------------------------------------------------------------------
// The scanned reading (`provider::scan`): the usual chunk read straight from its bytes.
// ---------------------------------------------------------------------------------------

/// The scanned reading of a `data:` payload: the usual delta chunk (text, reasoning,
/// tool call fragments, a finish reason; `error` and `usage` null or absent), keys in any
/// order, strings borrowed from `data` or unescaped into `scratch`. `None` for any other
/// payload (then [`parse_typed`] and the `Value` path decide); whenever it answers, the
/// answer equals [`Chunk::from_value`] of the same payload (see `provider::scan`).
///
/// A chunk with the bytes of the last text chunk around another text is read through
/// `template` ([`Template`]); every other scan records its shape there.
pub(crate) fn scan<'a>(
    data: &'a str,
    scratch: &'a mut String,
    template: &mut Template,
) -> Option<Chunk<'a>> {
    let mark = scratch.len();
    if let Some((id, text, reasoning)) = template.read(data, scratch) {
        let scratch: &'a String = scratch;
        return Some(template::text_chunk(
            Texts::new(data, scratch),
            id,
            text,
            reasoning,
        ));
    }
    scratch.truncate(mark);
    let mut s = Scan::new(data, scratch);
    let (mut id, mut choice) = (None, None);
    s.object(|s, key| {
        match key {
            b"id" => id = s.opt_str()?,
            b"object" => {
                if let Some(o) = s.opt_str()? {
                    if s.text(o) == "error" {
                        return None;
                    }
                }
            }
            // An error object, or the usage chunk (once a stream): the typed path.
            b"error" | b"usage" => s.null()?,
            b"choices" => {
                choice = None;
                s.array(|s, i| {
                    if i == 0 {
                        choice = Some(scan_choice(s)?);
                        Some(())
                    } else {
                        s.skip()
                    }
                })?
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    let t = s.finish()?;
    template.record(data, id, choice.as_ref());
    let choice = match choice {
        None => None,
        Some(c) => {
            let finish_reason = c.finish_reason.map(|f| t.get(f));
            if finish_reason == Some("error") {
                return None;
            }
            Some(Choice {
                delta: c.delta.map(|d| Delta {
                    reasoning: d
                        .reasoning_content
                        .or(d.reasoning)
                        .map(|r| Cow::Borrowed(t.get(r))),
                    content: d.content.map(|c| Cow::Borrowed(t.get(c))),
                    tool_calls: d
                        .tool_calls
                        .into_iter()
                        .map(|f| Fragment {
                            index: f.index,
                            id: f.id.map(|x| Cow::Borrowed(t.get(x))),
                            name: f.name.map(|x| Cow::Borrowed(t.get(x))),
                            arguments: Cow::Borrowed(f.arguments.map_or("", |x| t.get(x))),
                        })
                        .collect(),
                }),
                finish_reason: finish_reason.map(Cow::Borrowed),
            })
        }
    };
    Some(Chunk {
        id: id.map(|i| Cow::Borrowed(t.get(i))),
        usage: None,
        choice,
    })
}

/// A choice as scanned (strings as [`Str`] until the scan is over).
struct ScannedChoice {
    delta: Option<ScannedDelta>,
    finish_reason: Option<Str>,
}

#[derive(Default)]
struct ScannedDelta {
    reasoning_content: Option<Str>,
    reasoning: Option<Str>,
    content: Option<Str>,
    tool_calls: Vec<ScannedFragment>,
}

#[derive(Default)]
struct ScannedFragment {
    index: Option<u64>,
    id: Option<Str>,
    name: Option<Str>,
    arguments: Option<Str>,
}

fn scan_choice(s: &mut Scan) -> Option<ScannedChoice> {
    let (mut delta, mut message, mut finish_reason) = (Slot::Absent, Slot::Absent, None);
    s.object(|s, key| {
        let slot = match key {
            b"delta" => &mut delta,
            b"message" => &mut message,
            b"finish_reason" => {
                finish_reason = s.opt_str()?;
                return Some(());
            }
            _ => return s.skip(),
        };
        *slot = match s.peek()? {
            b'n' => s.null().map(|()| Slot::Null)?,
            _ => Slot::Delta(scan_delta(s)?),
        };
        Some(())
    })?;
    // As in `visit_choice`: `delta` wins whenever the key is there; null reads as empty.
    let delta = match (delta, message) {
        (Slot::Delta(d), _) | (Slot::Absent, Slot::Delta(d)) => Some(d),
        (Slot::Null, _) | (Slot::Absent, Slot::Null) => Some(ScannedDelta::default()),
        (Slot::Absent, Slot::Absent) => None,
    };
    Some(ScannedChoice {
        delta,
        finish_reason,
    })
}

fn scan_delta(s: &mut Scan) -> Option<ScannedDelta> {
    let mut d = ScannedDelta::default();
    s.object(|s, key| {
        match key {
            b"content" => d.content = s.opt_str()?,
            b"reasoning_content" => d.reasoning_content = s.opt_str()?,
            b"reasoning" => d.reasoning = s.opt_str()?,
            b"tool_calls" => {
                d.tool_calls.clear();
                if s.peek()? == b'n' {
                    s.null()?;
                } else {
                    s.array(|s, _| {
                        d.tool_calls.push(scan_fragment(s)?);
                        Some(())
                    })?;
                }
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(d)
}

fn scan_fragment(s: &mut Scan) -> Option<ScannedFragment> {
    let mut f = ScannedFragment::default();
    s.object(|s, key| {
        match key {
            b"index" => f.index = s.opt_u64()?,
            b"id" => f.id = s.opt_str()?,
            b"function" => {
                (f.name, f.arguments) = (None, None);
                if s.peek()? == b'n' {
                    s.null()?;
                } else {
                    s.object(|s, key| {
                        match key {
                            b"name" => f.name = s.opt_str()?,
                            // A non-string `arguments` is sent as its JSON text: the
                            // `Value` path.
                            b"arguments" => f.arguments = s.opt_str()?,
                            _ => s.skip()?,
                        }
                        Some(())
                    })?;
                }
            }
            _ => s.skip()?,
        }
        Some(())
    })?;
    Some(f)
}

mod template;
#[cfg(test)]
mod tests;
