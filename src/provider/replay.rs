//! The replay provider (`type: "replay"`): answers from a cassette file instead of the
//! network, through the same parsers as the real protocols.
//!
//! Cassette (JSON; `cassette` in the provider config, relative to the config directory):
//! ```json
//! {"protocol": "openai-responses" | "openai-compatible" | "anthropic",
//!  "responses": [
//!    {"status": 200, "headers": {"retry-after": "0"}, "body": "<raw SSE text>"},
//!    {"events": [ {"type": "message_start", ...}, ... ]}
//!  ]}
//! ```
//! `status` defaults to 200 and `headers` to none. A response gives either `body` — the
//! bytes exactly as a server would send them (an error JSON for a non-2xx status) — or
//! `events`, JSON objects rendered as SSE in the protocol's framing: `event: <type>` +
//! `data: <json>` for Responses and Anthropic, `data: <json>` and a final `data: [DONE]`
//! for Chat Completions.
//!
//! Request N of a provider instance (counting every attempt, retries included; the counter
//! is shared by all threads using the instance) gets response N. Past the end of the
//! cassette the request fails with kind [`FailureKind::Replay`] naming the cassette and
//! the request number. Retries do not sleep (their `Retrying.delay_ms` is 0). Nothing is
//! recorded.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::chat::{ChatRequest, FailureKind, ProviderError};
use super::http::handle_response;
use super::retry::{self, AttemptError, AttemptOutcome, RetryPolicy};
use super::wire::WireProtocol;
use super::{CancelToken, Provider, StreamSink};
use crate::config::ProviderConfig;

/// One recorded response.
#[derive(Debug, Clone, PartialEq)]
pub struct CassetteResponse {
    /// HTTP status (default 200).
    pub status: u16,
    /// Response headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body bytes as the server would send them.
    pub body: String,
}

/// A provider that replays a cassette.
#[derive(Debug)]
pub struct ReplayProvider {
    id: String,
    cassette: PathBuf,
    protocol: WireProtocol,
    responses: Vec<CassetteResponse>,
    served: AtomicUsize,
    policy: RetryPolicy,
    models: Vec<String>,
}

impl ReplayProvider {
    /// Loads `cfg.cassette` (relative to `config_dir`). Errors: no `cassette`, unreadable
    /// file, malformed JSON, unknown protocol, a response with neither `body` nor `events`.
    pub fn from_config(id: &str, cfg: &ProviderConfig, config_dir: &Path) -> Result<Self, String> {
        let rel = cfg
            .cassette
            .as_deref()
            .ok_or_else(|| format!("provider `{id}`: type `replay` needs `cassette`"))?;
        let path = config_dir.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "provider `{id}`: cannot read cassette {}: {e}",
                path.display()
            )
        })?;
        let mut p = Self::from_json(id, &path, &text)?;
        p.models = match &cfg.models {
            Some(m) => m.clone(),
            None if !cfg.model.is_empty() => vec![cfg.model.clone()],
            None => vec![],
        };
        p.policy = RetryPolicy {
            sleep: false,
            ..RetryPolicy::from_config(cfg)
        };
        Ok(p)
    }

    /// Parses cassette text; `path` is only used in messages.
    pub fn from_json(id: &str, path: &Path, text: &str) -> Result<Self, String> {
        let bad = |m: String| format!("provider `{id}`: cassette {}: {m}", path.display());
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let proto_name = v
            .get("protocol")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("missing `protocol`".into()))?;
        let protocol = WireProtocol::from_type(proto_name)
            .ok_or_else(|| bad(format!("unknown protocol `{proto_name}`")))?;
        let list = v
            .get("responses")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("missing `responses` array".into()))?;
        let mut responses = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            let status = r.get("status").and_then(Value::as_u64).unwrap_or(200) as u16;
            let headers = r
                .get("headers")
                .and_then(Value::as_object)
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| {
                            let v = v
                                .as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string());
                            (k.to_ascii_lowercase(), v)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let body = match (r.get("body"), r.get("events")) {
                (Some(Value::String(b)), _) => b.clone(),
                (Some(b), _) if !b.is_null() => b.to_string(),
                (_, Some(Value::Array(evs))) => render_events(protocol, evs),
                _ => {
                    return Err(bad(format!(
                        "response {} has neither `body` nor `events`",
                        i + 1
                    )))
                }
            };
            responses.push(CassetteResponse {
                status,
                headers,
                body,
            });
        }
        Ok(ReplayProvider {
            id: id.to_string(),
            cassette: path.to_path_buf(),
            protocol,
            responses,
            served: AtomicUsize::new(0),
            policy: RetryPolicy {
                initial_backoff: std::time::Duration::ZERO,
                max_backoff: std::time::Duration::ZERO,
                max_retries: retry::DEFAULT_MAX_RETRIES,
                max_retry_time: std::time::Duration::from_millis(retry::DEFAULT_MAX_RETRY_TIME_MS),
                sleep: false,
            },
            models: Vec::new(),
        })
    }

    /// The protocol whose parser the cassette is fed through.
    pub fn wire_protocol(&self) -> WireProtocol {
        self.protocol
    }

    /// Requests served so far (attempts, retries included).
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    fn attempt(
        &self,
        req: &ChatRequest,
        cancel: &CancelToken,
        sink: &mut dyn StreamSink,
    ) -> AttemptOutcome {
        let n = self.served.fetch_add(1, Ordering::SeqCst);
        let Some(resp) = self.responses.get(n) else {
            let mut e = AttemptError::new(
                FailureKind::Replay,
                format!(
                    "replay cassette {} has {} responses; request {} has none",
                    self.cassette.display(),
                    self.responses.len(),
                    n + 1
                ),
            );
            e.retryable = false;
            return AttemptOutcome::Failed(e);
        };
        log::debug!(
            "replay `{}`: request {} from {}",
            self.id,
            n + 1,
            self.cassette.display()
        );
        let header = |name: &str| {
            resp.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let content_type = header("content-type").unwrap_or_else(|| "text/event-stream".into());
        handle_response(
            resp.status,
            &header,
            &content_type,
            resp.body.as_bytes(),
            &mut *self.protocol.parser(&self.id, &req.model),
            cancel,
            sink,
        )
    }
}

impl Provider for ReplayProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn protocol(&self) -> &'static str {
        "replay"
    }

    fn stream_with_cancel(
        &self,
        req: &ChatRequest,
        cancel: &CancelToken,
        sink: &mut dyn StreamSink,
    ) {
        // Lower the request anyway so replayed runs exercise the same request code.
        let body = self.protocol.build_body(&self.id, "", req);
        log::trace!("replay `{}` request body: {body}", self.id);
        retry::run_with_retries(&self.policy, cancel, sink, |_, sink| {
            self.attempt(req, cancel, sink)
        });
    }

    /// The config's `models`, else its `model` (no request is made).
    fn list_models(&self) -> Result<Vec<String>, ProviderError> {
        Ok(self.models.clone())
    }
}

/// Renders JSON events as SSE text in `protocol`'s framing.
pub fn render_events(protocol: WireProtocol, events: &[Value]) -> String {
    let mut s = String::new();
    for ev in events {
        if protocol != WireProtocol::OpenAiChat {
            if let Some(t) = ev.get("type").and_then(Value::as_str) {
                s.push_str("event: ");
                s.push_str(t);
                s.push('\n');
            }
        }
        s.push_str("data: ");
        s.push_str(&ev.to_string());
        s.push_str("\n\n");
    }
    if protocol == WireProtocol::OpenAiChat {
        s.push_str("data: [DONE]\n\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::{ChatMessage, Role, StreamEvent};
    use serde_json::json;

    fn req() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![ChatMessage::text(Role::User, "hi")],
            ..Default::default()
        }
    }

    fn collect(p: &dyn Provider) -> Vec<StreamEvent> {
        let mut evs = vec![];
        p.stream(&req(), &mut |e| {
            evs.push(e);
            true
        });
        evs
    }

    #[test]
    fn events_and_raw_bodies_go_through_the_real_parsers() {
        let cassette = json!({
            "protocol": "openai-compatible",
            "responses": [
                {"events": [
                    {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]},
                    {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]},
                    {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}
                ]},
                {"body": "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"x\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"}
            ]
        });
        let p = ReplayProvider::from_json("r", Path::new("c.json"), &cassette.to_string()).unwrap();
        let evs = collect(&p);
        assert_eq!(evs[0], StreamEvent::TextDelta { text: "Hel".into() });
        assert!(matches!(&evs[2], StreamEvent::Done { usage, .. } if usage.output_tokens == 2));
        let evs = collect(&p);
        assert!(evs
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCallEnd { call } if call.id == "call_1")));
        // Past the end: loud failure naming the cassette and request number.
        let evs = collect(&p);
        match &evs[..] {
            [StreamEvent::Failed { error }] => {
                assert_eq!(error.kind, FailureKind::Replay);
                assert!(
                    error.message.contains("c.json") && error.message.contains("request 3"),
                    "{}",
                    error.message
                );
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn anthropic_events_and_error_status_with_retry() {
        let cassette = json!({
            "protocol": "anthropic",
            "responses": [
                {"status": 529, "headers": {"Retry-After": "0"}, "body": "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"},
                {"events": [
                    {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":4,"output_tokens":1}}},
                    {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},
                    {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}},
                    {"type":"content_block_stop","index":0},
                    {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}},
                    {"type":"message_stop"}
                ]}
            ]
        });
        let p = ReplayProvider::from_json("r", Path::new("c.json"), &cassette.to_string()).unwrap();
        assert_eq!(p.protocol(), "replay");
        let evs = collect(&p);
        assert!(matches!(
            &evs[0],
            StreamEvent::Retrying {
                kind: FailureKind::Overloaded,
                attempt: 2,
                delay_ms: 0,
                ..
            }
        ));
        assert_eq!(evs[1], StreamEvent::TextDelta { text: "ok".into() });
        assert!(
            matches!(&evs[2], StreamEvent::Done { stop_reason: Some(r), .. } if r == "end_turn")
        );
        assert_eq!(p.served(), 2);
    }

    #[test]
    fn rendering_and_loading_from_config() {
        let s = render_events(
            WireProtocol::OpenAiResponses,
            &[json!({"type":"response.created"})],
        );
        assert_eq!(
            s,
            "event: response.created\ndata: {\"type\":\"response.created\"}\n\n"
        );
        let dir = std::env::temp_dir().join(format!("wuu-replay-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("c.json"),
            json!({"protocol":"openai-responses","responses":[{"events":[
                {"type":"response.output_text.delta","output_index":0,"delta":"hi"},
                {"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":1,"output_tokens":1}}}
            ]}]})
            .to_string(),
        )
        .unwrap();
        let cfg = ProviderConfig {
            provider_type: "replay".into(),
            cassette: Some("c.json".into()),
            model: "m".into(),
            ..Default::default()
        };
        let p = crate::provider::build("rep", &cfg, &dir).unwrap();
        assert_eq!(p.list_models().unwrap(), ["m"]);
        let evs = collect(&*p);
        assert_eq!(evs[0], StreamEvent::TextDelta { text: "hi".into() });
        assert!(
            matches!(&evs[1], StreamEvent::Done { response_id: Some(id), .. } if id == "resp_1")
        );
        let missing = ProviderConfig {
            cassette: Some("nope.json".into()),
            ..cfg.clone()
        };
        assert!(crate::provider::build("rep", &missing, &dir)
            .unwrap_err()
            .contains("nope.json"));
        let bad = ReplayProvider::from_json(
            "r",
            Path::new("x"),
            r#"{"protocol":"anthropic","responses":[{}]}"#,
        );
        assert!(bad.unwrap_err().contains("neither"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
