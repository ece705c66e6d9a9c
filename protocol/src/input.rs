//! User input shapes: attachments and pending input (spec §5.5–§5.6).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An image or file attachment (spec §5.6). `data` is base64 (standard alphabet) or a
/// `data:` URL. Images need a `image/*` media type (default `image/png`); files only
/// `application/pdf` or video types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    /// MIME type.
    #[serde(default)]
    pub media_type: Option<String>,
    /// Base64 payload or `data:` URL.
    pub data: String,
    /// File name (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// True when the client sent the original, unscaled image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<bool>,
}

/// A queued turn (spec §5.5); `id` is the queue id (= `client_id` when given).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueuedTurn {
    /// Queue id.
    pub id: String,
    /// The conversation.
    pub thread_id: String,
    /// Start of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Number of images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_count: Option<u32>,
    /// Number of files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_count: Option<u32>,
}

/// A pending or held user input (spec §5.5). "held" inputs are durable and never run by
/// themselves; "pending" inputs are managed by the live process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HeldUserMessage {
    /// Queue or steer id (= `client_id` when given).
    pub id: String,
    /// The conversation.
    pub thread_id: String,
    /// `queue` | `steer`.
    pub origin: String,
    /// The message text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Attachment>>,
    /// Files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<Attachment>>,
    /// Accepted content parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_parts: Option<Vec<Value>>,
    /// Active document metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_document: Option<Value>,
    /// Set when the delivery outcome is unknown (seed: never resent automatically).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_unconfirmed: Option<bool>,
}

params_with_input! {
    /// `turn/queue` (seed: queued input). Committed to the store before the response;
    /// `client_id` becomes the queue id.
    pub struct TurnQueueParams {
        /// The conversation.
        pub thread_id: String,
        /// Active document metadata.
        #[serde(default)]
        pub active_document: Option<Value>,
        /// Store without dispatching (held).
        #[serde(default)]
        pub hold: Option<bool>,
    }
}

/// `turn/queue` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnQueueResult {
    /// The entry.
    pub queued: QueuedTurn,
}

/// `turn/update-queued`: edits a pending queued or held message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnUpdateQueuedParams {
    /// The conversation.
    pub thread_id: String,
    /// The entry.
    pub queue_id: String,
    /// New text.
    #[serde(default)]
    pub prompt: Option<String>,
    /// New images.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// New files.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// New content parts.
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
}

/// `turn/update-queued` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUpdateQueuedResult {
    /// False when no pending or held entry has that id.
    pub ok: bool,
    /// The entry after the edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedTurn>,
}

/// `turn/dequeue`: removes a queued or held entry; an unknown id records a cancellation
/// so a later `turn/queue` with it is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnDequeueParams {
    /// The conversation.
    pub thread_id: String,
    /// The entry.
    pub queue_id: String,
}

/// `turn/steer`: input for the running turn (taken at the next model step).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnSteerParams {
    /// The conversation.
    pub thread_id: String,
    /// The message (optional when `client_id` names a held or queued entry).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Images.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// Files.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// The active turn (required when steering a running turn).
    #[serde(default)]
    pub expected_turn_id: Option<String>,
    /// Becomes the steer id; a repeat while pending succeeds without a second steer; a
    /// held or queued entry's id sends that entry.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Active document metadata.
    #[serde(default)]
    pub active_document: Option<Value>,
    /// Content parts.
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
}

/// `turn/steer` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnSteerResult {
    /// The turn the input goes to (a new turn when a held entry was sent while idle).
    pub turn_id: String,
    /// `active_turn` | `queued`: the planned path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
}

/// `turn/unsteer`: removes a pending (or held) steer; an unknown id records a
/// cancellation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnUnsteerParams {
    /// The conversation.
    pub thread_id: String,
    /// The steer.
    pub steer_id: String,
}

/// The user input `turn/start`, `turn/queue` and `run/start` share (spec §3.2, §5.5,
/// run/start). On the wire its fields sit at the top level of those params, beside the
/// method's own fields (see [`params_with_input`]); every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserInput {
    /// The user's message (a run's task).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Image attachments.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// File attachments.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// Ordered presentation metadata (seed: content parts).
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
    /// Kept as the user item's `source_id`; `turn/queue` uses it as the queue id, which
    /// makes retries safe (a repeat returns the original entry).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Legacy: must equal the conversation's mode (cannot widen it).
    #[serde(default)]
    pub permission_mode: Option<String>,
}

impl UserInput {
    /// The wire names of the fields, in declaration order.
    pub const FIELDS: &'static [&'static str] = &[
        "prompt",
        "images",
        "files",
        "content_parts",
        "client_id",
        "permission_mode",
    ];

    /// Reads the value of `key` from `map` into its field when `key` is one of
    /// [`Self::FIELDS`] (`Ok(false)` otherwise, with nothing read). `seen` tracks the
    /// fields read so far: a repeated field is refused as serde refuses it.
    #[doc(hidden)]
    pub fn read_field<'de, A: serde::de::MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
        seen: &mut u8,
    ) -> Result<bool, A::Error> {
        let Some(i) = Self::FIELDS.iter().position(|f| *f == key) else {
            return Ok(false);
        };
        if *seen & (1 << i) != 0 {
            return Err(serde::de::Error::duplicate_field(Self::FIELDS[i]));
        }
        *seen |= 1 << i;
        match i {
            0 => self.prompt = map.next_value()?,
            1 => self.images = map.next_value()?,
            2 => self.files = map.next_value()?,
            3 => self.content_parts = map.next_value()?,
            4 => self.client_id = map.next_value()?,
            _ => self.permission_mode = map.next_value()?,
        }
        Ok(true)
    }
}

/// A params key checked against the accepted names while it is read, so an unknown key
/// is refused as serde's `deny_unknown_fields` refuses it (`unknown field `x`, expected
/// one of …`, at the key's path).
#[doc(hidden)]
pub struct FieldName(pub &'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for FieldName {
    type Value = &'static str;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FieldName {
    type Value = &'static str;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<&'static str, E> {
        self.0
            .iter()
            .find(|f| **f == v)
            .copied()
            .ok_or_else(|| E::unknown_field(v, self.0))
    }
}

/// Declares a params struct made of `thread_id`, the [`UserInput`] fields (kept in its
/// `input` member) and the method's own optional fields, all at the top level on the
/// wire. serde's `flatten` does not combine with `deny_unknown_fields`, so the struct
/// gets a `Deserialize` of its own: it reads the keys one by one, refuses an unknown
/// or repeated key and a missing `thread_id` with serde's own messages and paths, and
/// hands the [`UserInput`] keys to [`UserInput::read_field`]. `Serialize` and the JSON
/// Schema (`additionalProperties: false`) are derived with `input` flattened. Every own
/// field must be an `Option` marked `#[serde(default)]`.
macro_rules! params_with_input {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(#[$tmeta:meta])*
            pub thread_id: String,
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, schemars::JsonSchema)]
        #[schemars(deny_unknown_fields)]
        pub struct $name {
            $(#[$tmeta])*
            pub thread_id: String,
            /// The user input (its fields are at the top level on the wire).
            #[serde(flatten)]
            pub input: $crate::input::UserInput,
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const FIELDS: &[&str] = &[
                    "thread_id",
                    "prompt",
                    "images",
                    "files",
                    "content_parts",
                    "client_id",
                    "permission_mode",
                    $(stringify!($field),)*
                ];
                struct Fields;
                impl<'de> serde::de::Visitor<'de> for Fields {
                    type Value = $name;

                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str(concat!("struct ", stringify!($name)))
                    }

                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        use serde::de::Error as _;
                        let mut thread_id: Option<String> = None;
                        $( let mut $field: Option<$ty> = None; )*
                        let mut input = $crate::input::UserInput::default();
                        let mut seen = 0u8;
                        while let Some(key) =
                            map.next_key_seed($crate::input::FieldName(FIELDS))?
                        {
                            if key == "thread_id" {
                                if thread_id.is_some() {
                                    return Err(A::Error::duplicate_field("thread_id"));
                                }
                                thread_id = Some(map.next_value()?);
                            }
                            $( else if key == stringify!($field) {
                                if $field.is_some() {
                                    return Err(A::Error::duplicate_field(stringify!($field)));
                                }
                                $field = Some(map.next_value()?);
                            } )*
                            else {
                                input.read_field(key, &mut map, &mut seen)?;
                            }
                        }
                        Ok($name {
                            thread_id: thread_id
                                .ok_or_else(|| A::Error::missing_field("thread_id"))?,
                            input,
                            $( $field: $field.unwrap_or_default(), )*
                        })
                    }
                }
                d.deserialize_struct(stringify!($name), FIELDS, Fields)
            }
        }
    };
}
pub(crate) use params_with_input;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn user_input_fields_match_its_declaration() {
        let schema = serde_json::to_value(schemars::schema_for!(UserInput)).unwrap();
        let mut props: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = UserInput::FIELDS.to_vec();
        props.sort_unstable();
        fields.sort_unstable();
        assert_eq!(props, fields);
    }

    #[test]
    fn params_with_input_read_flat_and_refuse_like_serde() {
        let p: TurnQueueParams = serde_json::from_value(
            json!({"thread_id": "t", "prompt": "hi", "client_id": "c", "hold": true}),
        )
        .unwrap();
        assert_eq!(p.input.prompt.as_deref(), Some("hi"));
        assert_eq!(p.input.client_id.as_deref(), Some("c"));
        assert_eq!(p.hold, Some(true));
        let back = serde_json::to_value(&p).unwrap();
        assert_eq!(back["prompt"], "hi");
        assert_eq!(back["hold"], true);
        let e = serde_json::from_value::<TurnQueueParams>(json!({"thread_id": "t", "x": 1}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `x`"), "{e}");
        let e = serde_json::from_value::<TurnQueueParams>(json!({"prompt": "hi"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `thread_id`"), "{e}");
        let e = serde_json::from_str::<TurnQueueParams>(
            r#"{"thread_id":"t","prompt":"a","prompt":"b"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("duplicate field `prompt`"), "{e}");
    }
}
