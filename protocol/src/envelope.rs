//! The JSON-lines envelope of `wuu-app-server/v0.1` (spec `app-server.md` §1).
//!
//! One JSON object per line in both directions:
//! - request `{"id", "method", "params"?}` (client → server, and server → client for
//!   reverse requests such as `browser/*`),
//! - response `{"id", "result"}` or `{"id", "error": {"code", "message", "data"?}}`,
//! - notification `{"method", "params"}` (no id).
//!
//! Error codes are **strings** (spec §1.7), not JSON-RPC integers; there is no `jsonrpc`
//! member.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request id, echoed back exactly as the client sent it: a JSON string, or an integer
/// in the 64-bit range written plainly (other numbers are refused by
/// [`Message::parse_line`] with `invalid_request`, since they could not be echoed byte
/// for byte). Serializes to the same JSON it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id (`"id": 7`). Kept as the JSON number's text so that `7` and `7.0`
    /// echo as sent.
    Number(serde_json::Number),
    /// A string id (`"id": "1"`), the form the docs and the desktop client use.
    String(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl From<u64> for RequestId {
    fn from(n: u64) -> Self {
        RequestId::Number(n.into())
    }
}

/// The string error codes of responses (spec §1.7 plus the protocol-level codes
/// `parse_error`, `invalid_request`, `method_not_found`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The line was not JSON (answered with `id: null`).
    ParseError,
    /// JSON, but not a valid envelope (no method, params not an object, line too long…).
    InvalidRequest,
    /// `method` names no method of this server.
    MethodNotFound,
    /// Params of the wrong shape: unknown field, wrong type, missing required field, bad
    /// value. The message names the field.
    InvalidParams,
    /// The named conversation does not exist (or is ephemeral and gone).
    ThreadNotFound,
    /// The conversation is executing (in this process or under another process's lease).
    ThreadBusy,
    /// `run/interrupt` named an unknown run.
    RunNotFound,
    /// The run is live but owned by another wuu process.
    RunNotAttached,
    /// A fault of the server (store unavailable, a bug). The message says what.
    InternalError,
    /// The server is shutting down and did not start the request.
    ServerClosed,
    /// The database stayed locked by another connection or process longer than the busy
    /// timeout (10 s). Retryable: nothing was changed; the message names the database
    /// file.
    StoreBusy,
    /// The PostgreSQL server holding the conversations cannot be reached or the
    /// connection broke. Retryable: the request's write was not acknowledged; the
    /// message names the database (never its password).
    StoreUnavailable,
    /// The queue of the worker that would run the request is full (the catalog pool,
    /// the search lane, the conversation's mailbox, or the reviver of parked
    /// conversations). Retryable: nothing was done and nothing was stored; the message
    /// names the queue and its capacity. The reader answers it at once instead of
    /// waiting for room, so control requests (`turn/interrupt`, `shutdown`,
    /// `config/read`) behind a flood are still served.
    Overloaded,
    /// `turn/interrupt` on a conversation that runs no turn (nothing was changed).
    NoActiveTurn,
    /// `user-question/respond|cancel|hold` named a question this server never offered.
    QuestionNotFound,
    /// `user-question/respond|cancel|hold` named a question that is already settled
    /// (answered, cancelled, skipped, expired or revoked); late answers are refused.
    QuestionSettled,
    /// A request that is well-formed but refused by the state of the conversation or the
    /// configuration (the Go server's generic code; the message carries the detail).
    Error,
}

impl ErrorCode {
    /// Every code, in declaration order (the README's list and the schema's
    /// `error_codes` are checked against it).
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::ThreadNotFound,
        ErrorCode::ThreadBusy,
        ErrorCode::RunNotFound,
        ErrorCode::RunNotAttached,
        ErrorCode::InternalError,
        ErrorCode::ServerClosed,
        ErrorCode::StoreBusy,
        ErrorCode::StoreUnavailable,
        ErrorCode::Overloaded,
        ErrorCode::NoActiveTurn,
        ErrorCode::QuestionNotFound,
        ErrorCode::QuestionSettled,
        ErrorCode::Error,
    ];

    /// The wire string of this code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "parse_error",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::MethodNotFound => "method_not_found",
            ErrorCode::InvalidParams => "invalid_params",
            ErrorCode::ThreadNotFound => "thread_not_found",
            ErrorCode::ThreadBusy => "thread_busy",
            ErrorCode::RunNotFound => "run_not_found",
            ErrorCode::RunNotAttached => "run_not_attached",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::ServerClosed => "server_closed",
            ErrorCode::StoreBusy => "store_busy",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::NoActiveTurn => "no_active_turn",
            ErrorCode::QuestionNotFound => "question_not_found",
            ErrorCode::QuestionSettled => "question_settled",
            ErrorCode::Error => "error",
        }
    }
}

/// The `error` member of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorObject {
    /// One of the string codes of [`ErrorCode`] (clients must tolerate unknown codes).
    pub code: String,
    /// Human-readable detail. For `invalid_params` it names the offending field.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with `code` and `message` and no data.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorObject {
            code: code.as_str().to_owned(),
            message: message.into(),
            data: None,
        }
    }
}

/// A request, from the client or (for reverse requests) from the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Request {
    /// Echoed in the response.
    pub id: RequestId,
    /// The method name, e.g. `thread/start`.
    pub method: String,
    /// Method parameters; an omitted `params` is decoded as `{}`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// A response. Exactly one of `result` and `error` is present. `id` is `null` when the
/// request's id could not be read (a line that is not JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Response {
    /// The id of the request this answers; `null` for unparseable lines.
    pub id: Option<RequestId>,
    /// The method's result on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

impl Response {
    /// A success response.
    pub fn ok(id: RequestId, result: Value) -> Self {
        Response {
            id: Some(id),
            result: Some(result),
            error: None,
        }
    }
    /// A failed response.
    pub fn err(id: Option<RequestId>, error: ErrorObject) -> Self {
        Response {
            id,
            result: None,
            error: Some(error),
        }
    }
}

/// A notification (no id, no response).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Notification {
    /// The notification name, e.g. `turn/started`.
    pub method: String,
    /// Its parameters (always an object on the wire).
    pub params: Value,
}

/// Any line of the protocol, classified by the members it has: `method`+`id` is a
/// request, `method` alone a notification, `id` without `method` a response.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `{"id","method","params"?}`
    Request(Request),
    /// `{"id","result"|"error"}`
    Response(Response),
    /// `{"method","params"}`
    Notification(Notification),
}

/// Why an inbound line could not be classified.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvelopeError {
    /// `parse_error` for non-JSON, `invalid_request` for JSON that is not an envelope.
    pub code: ErrorCode,
    /// What was wrong.
    pub message: String,
    /// The id, when one could be read, so the error response can carry it.
    pub id: Option<RequestId>,
}

impl Message {
    /// Classifies one line (already stripped of its line end). Errors:
    /// `parse_error` if the text is not JSON; `invalid_request` if it is not an object,
    /// has a non-string `method`, a non-object `params`, or an id that is neither a
    /// string nor a number.
    pub fn parse_line(line: &[u8]) -> Result<Message, EnvelopeError> {
        let value: Value = serde_json::from_slice(line).map_err(|e| EnvelopeError {
            code: ErrorCode::ParseError,
            message: format!("parse error: {e}"),
            id: None,
        })?;
        Message::from_value(value)
    }

    /// Classifies an already-parsed JSON value; see [`Message::parse_line`].
    pub fn from_value(value: Value) -> Result<Message, EnvelopeError> {
        let Value::Object(mut obj) = value else {
            return Err(EnvelopeError {
                code: ErrorCode::InvalidRequest,
                message: "invalid request: a message must be a JSON object".into(),
                id: None,
            });
        };
        let id = match obj.remove("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(RequestId::String(s)),
            // Only integers are echoed exactly: a number serde_json reads as a float
            // (`1E2`, `-0`, `1.5`, or an integer beyond 64 bits) would come back
            // rewritten, so it is refused.
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(RequestId::Number(n)),
            Some(Value::Number(n)) => {
                return Err(EnvelopeError {
                    code: ErrorCode::InvalidRequest,
                    message: format!(
                        "invalid request: a numeric id must be an integer between -2^63 and 2^64-1 written without exponent or fraction (got {n}); use a string id for anything else"
                    ),
                    id: None,
                })
            }
            Some(other) => {
                return Err(EnvelopeError {
                    code: ErrorCode::InvalidRequest,
                    message: format!(
                        "invalid request: id must be a string or a number, got {}",
                        json_kind(&other)
                    ),
                    id: None,
                })
            }
        };
        let method = match obj.remove("method") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                return Err(EnvelopeError {
                    code: ErrorCode::InvalidRequest,
                    message: format!(
                        "invalid request: method must be a string, got {}",
                        json_kind(&other)
                    ),
                    id,
                })
            }
        };
        match method {
            Some(method) => {
                let params = match obj.remove("params") {
                    None | Some(Value::Null) => Value::Object(Default::default()),
                    Some(p @ Value::Object(_)) => p,
                    Some(other) => {
                        return Err(EnvelopeError {
                            code: ErrorCode::InvalidRequest,
                            message: format!(
                                "invalid request: params must be an object, got {}",
                                json_kind(&other)
                            ),
                            id,
                        })
                    }
                };
                for key in obj.keys() {
                    if key != "jsonrpc" {
                        return Err(EnvelopeError {
                            code: ErrorCode::InvalidRequest,
                            message: format!("invalid request: unknown member `{key}`"),
                            id,
                        });
                    }
                }
                Ok(match id {
                    Some(id) => Message::Request(Request { id, method, params }),
                    None => Message::Notification(Notification { method, params }),
                })
            }
            None => {
                let Some(id) = id else {
                    return Err(EnvelopeError {
                        code: ErrorCode::InvalidRequest,
                        message: "invalid request: a message needs a method or an id".into(),
                        id: None,
                    });
                };
                let result = obj.remove("result");
                let error = match obj.remove("error") {
                    None | Some(Value::Null) => None,
                    Some(e) => Some(serde_json::from_value::<ErrorObject>(e).map_err(|e| {
                        EnvelopeError {
                            code: ErrorCode::InvalidRequest,
                            message: format!("invalid response: bad error object: {e}"),
                            id: Some(id.clone()),
                        }
                    })?),
                };
                Ok(Message::Response(Response {
                    id: Some(id),
                    result,
                    error,
                }))
            }
        }
    }
}

/// The JSON kind of a value, for error messages ("string", "array", …).
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_echo_exactly() {
        for raw in [r#"{"id":"1","method":"x"}"#, r#"{"id":17,"method":"x"}"#] {
            let Message::Request(r) = Message::parse_line(raw.as_bytes()).unwrap() else {
                panic!()
            };
            let resp = Response::ok(r.id, json!({}));
            let out = serde_json::to_value(&resp).unwrap();
            let inp: Value = serde_json::from_str(raw).unwrap();
            assert_eq!(out["id"], inp["id"]);
        }
    }

    #[test]
    fn classifies_and_rejects() {
        assert!(matches!(
            Message::parse_line(b"{nope").unwrap_err().code,
            ErrorCode::ParseError
        ));
        assert!(matches!(
            Message::parse_line(b"[1]").unwrap_err().code,
            ErrorCode::InvalidRequest
        ));
        let e = Message::parse_line(br#"{"id":"a","method":"x","params":[1]}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.id, Some(RequestId::from("a")));
        assert!(matches!(
            Message::parse_line(br#"{"method":"x"}"#).unwrap(),
            Message::Notification(_)
        ));
        assert!(matches!(
            Message::parse_line(br#"{"id":"srv-1","result":{}}"#).unwrap(),
            Message::Response(_)
        ));
    }

    #[test]
    fn null_id_error_response_serializes_id_null() {
        let r = Response::err(None, ErrorObject::new(ErrorCode::ParseError, "x"));
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert_eq!(v["error"]["code"], "parse_error");
    }
}
