//! The two history cursor formats (spec `app-server.md` §5.8, "Cursor format"): the
//! opaque cursor of compact pages, `base64url(JSON [turn_id, item_id | null])`, and the
//! Go server's cursor of item pages, `turn:<turn_id>` or `item:` + `base64url(JSON
//! [turn_id, item_id])`. A cursor names the first retained element of the newer page;
//! its format decides the kind of the next page ([`PageMode`]).

use super::{PageMode, Refusal};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::json;
use wuu_protocol::ErrorCode;

/// Encodes a compact-page cursor: `base64url(JSON [turn_id, item_id | null])`.
pub fn encode_cursor(turn_id: &str, item_id: Option<&str>) -> String {
    URL_SAFE_NO_PAD.encode(json!([turn_id, item_id]).to_string())
}

/// Encodes an item-page (Go-format) cursor: `turn:<turn_id>` when the boundary is the
/// start of the turn, else `item:` + `base64url(JSON [turn_id, item_id])`.
pub(super) fn encode_item_cursor(turn_id: &str, item_id: Option<&str>) -> String {
    match item_id {
        None => format!("turn:{turn_id}"),
        Some(i) => format!(
            "item:{}",
            URL_SAFE_NO_PAD.encode(json!([turn_id, i]).to_string())
        ),
    }
}

/// The refusal of a cursor that does not decode.
fn bad_cursor(cursor: &str) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!(
            "invalid params: invalid history cursor {:?}",
            crate::util::clip(cursor, 80)
        ),
    )
}

/// Decodes a history cursor of either kind: `(turn_id, item_id, kind of page)`.
/// Errors: `invalid history cursor`.
pub fn decode_any_cursor(cursor: &str) -> Result<(String, Option<String>, PageMode), Refusal> {
    let bad = || bad_cursor(cursor);
    let c = cursor.trim();
    if let Some(turn) = c.strip_prefix("turn:") {
        if turn.is_empty() {
            return Err(bad());
        }
        return Ok((turn.to_owned(), None, PageMode::Items));
    }
    if let Some(b) = c.strip_prefix("item:") {
        let bytes = URL_SAFE_NO_PAD
            .decode(b.trim_end_matches('='))
            .map_err(|_| bad())?;
        let (turn, item): (String, String) = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        if turn.is_empty() || item.is_empty() {
            return Err(bad());
        }
        return Ok((turn, Some(item), PageMode::Items));
    }
    let (turn, item) = decode_cursor(c)?;
    Ok((turn, item, PageMode::Compact))
}

/// Decodes a compact-page cursor. Errors: `invalid history cursor`.
pub fn decode_cursor(cursor: &str) -> Result<(String, Option<String>), Refusal> {
    let bad = || bad_cursor(cursor);
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).map_err(|_| bad())?;
    let v: (String, Option<String>) = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.0.is_empty() {
        return Err(bad());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trip_and_garbage() {
        let c = encode_cursor("t1", Some("t1-item-0002"));
        assert_eq!(
            decode_cursor(&c).unwrap(),
            ("t1".to_owned(), Some("t1-item-0002".to_owned()))
        );
        let c = encode_cursor("t1", None);
        assert_eq!(decode_cursor(&c).unwrap(), ("t1".to_owned(), None));
        assert!(decode_cursor("nope!").is_err());
        assert!(decode_cursor(&URL_SAFE_NO_PAD.encode("[1,2]")).is_err());
    }
}
