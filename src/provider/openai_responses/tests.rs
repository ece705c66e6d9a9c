use super::*;
use crate::provider::chat::{ImageInput, ToolSpec};
use crate::provider::wire::WireProtocol;

fn events(body: &str) -> (Vec<StreamEvent>, Result<StreamEvent, AttemptError>) {
    crate::provider::wire::parse_body(&mut Parser::new("openai", "m"), body)
}

#[test]
fn only_output_item_done_events_work() {
    // Codex's own fakes send no deltas (§1.3).
    let body = concat!(
        "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\"}]}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"x\",\"arguments\":\"{}\"}}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":10,\"input_tokens_details\":null,\"output_tokens\":3}}}\n\n",
    );
    let (out, done) = events(body);
    assert_eq!(out[0], StreamEvent::TextDelta { text: "hi".into() });
    assert!(
        matches!(&out[1], StreamEvent::ToolCallStart { id, name } if id == "call_1" && name == "x")
    );
    assert!(
        matches!(&out[3], StreamEvent::ToolCallEnd { call } if call.item_id.as_deref() == Some("fc_1"))
    );
    match done.unwrap() {
        StreamEvent::Done {
            usage,
            stop_reason,
            message_item_id,
            ..
        } => {
            assert_eq!(usage.input_tokens, 10);
            assert_eq!(stop_reason.as_deref(), Some("tool_calls"));
            assert_eq!(message_item_id.as_deref(), Some("msg_1"));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn incomplete_and_failed_and_error() {
    let (_, d) = events("data: {\"type\":\"response.incomplete\",\"response\":{\"id\":\"r\",\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n");
    assert!(matches!(
        d.unwrap(),
        StreamEvent::Done {
            truncated: true,
            ..
        }
    ));
    let (_, d) = events(
        "data: {\"type\":\"error\",\"sequence_number\":2,\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow\"}}\n\n",
    );
    assert_eq!(
        d.unwrap_err().kind,
        crate::provider::chat::FailureKind::RateLimit
    );
    let (_, d) = events("data: {\"type\":\"response.failed\",\"response\":{\"id\":\"resp_f\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n");
    let e = d.unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str(), e.retryable),
        (crate::provider::chat::FailureKind::Server, "boom", true)
    );
    let (_, d) = events("data: [DONE]\n\n");
    assert_eq!(
        d.unwrap_err().kind,
        crate::provider::chat::FailureKind::IncompleteStream
    );
}

#[test]
fn events_without_output_index_are_keyed_by_item_id() {
    // llama-server: `item_id` only, function calls without `id`.
    let body = concat!(
        "data: {\"type\":\"response.output_item.added\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[]}}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"he\"}\n\n",
        "data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"delta\":\"y\"}\n\n",
        "data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"call_id\":\"fc_a\",\"name\":\"x\",\"arguments\":\"\"}}\n\n",
        "data: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_a\",\"delta\":\"{}\"}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"hey\"}]}}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"function_call\",\"call_id\":\"fc_a\",\"name\":\"x\",\"arguments\":\"{}\"}}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"hey\"}]},{\"type\":\"function_call\",\"call_id\":\"fc_a\",\"name\":\"x\",\"arguments\":\"{}\"}]}}\n\n",
    );
    let (out, done) = events(body);
    let text: String = out
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "hey");
    let n = |f: fn(&StreamEvent) -> bool| out.iter().filter(|e| f(e)).count();
    assert_eq!(n(|e| matches!(e, StreamEvent::ToolCallStart { .. })), 1);
    assert_eq!(n(|e| matches!(e, StreamEvent::ToolCallDelta { .. })), 1);
    assert_eq!(n(|e| matches!(e, StreamEvent::ToolCallEnd { .. })), 1);
    assert!(matches!(
        done.unwrap(),
        StreamEvent::Done {
            truncated: false,
            ..
        }
    ));
}

#[test]
fn a_call_with_incomplete_arguments_is_cut_off() {
    let body = concat!(
        "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"x\",\"arguments\":\"\"}}\n\n",
        "data: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"item_id\":\"fc_1\",\"delta\":\"{\\\"a\"}\n\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"x\",\"arguments\":\"{\\\"a\"}]}}\n\n",
    );
    let (out, done) = events(body);
    assert!(!out
        .iter()
        .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
    assert!(out
        .iter()
        .any(|e| matches!(e, StreamEvent::ToolCallCutOff { id, .. } if id == "call_1")));
    match done.unwrap() {
        StreamEvent::Done {
            truncated,
            stop_reason,
            ..
        } => {
            assert!(truncated);
            assert_eq!(stop_reason.as_deref(), Some("stop"));
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn unfinished_call_never_ends() {
    let body = concat!(
        "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"fc_1\",\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"x\",\"arguments\":\"\"}}\n\n",
        "data: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":0,\"item_id\":\"fc_1\",\"delta\":\"{\\\"a\\\"\"}\n\n",
    );
    let (out, d) = events(body);
    assert!(d.is_err());
    assert!(!out
        .iter()
        .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
}

#[test]
fn reasoning_summary_parts_are_joined() {
    let body = concat!(
        "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"summary\":[]}}\n\n",
        "data: {\"type\":\"response.reasoning_summary_text.delta\",\"output_index\":0,\"summary_index\":0,\"delta\":\"a\"}\n\n",
        "data: {\"type\":\"response.reasoning_summary_text.delta\",\"output_index\":0,\"summary_index\":1,\"delta\":\"b\"}\n\n",
        "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\",\"status\":\"completed\",\"encrypted_content\":\"enc\",\"summary\":[]}}\n\n",
    );
    let (out, _) = events(body);
    match out.last().unwrap() {
        StreamEvent::ReasoningDone { block } => {
            assert_eq!(block.text, "a\n\nb");
            let raw = block.raw.as_ref().unwrap();
            assert!(raw.get("status").is_none());
            assert_eq!(raw["encrypted_content"], "enc");
        }
        e => panic!("{e:?}"),
    }
}

fn req() -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        system: "sys".into(),
        messages: vec![],
        tools: vec![ToolSpec {
            name: "t".into(),
            description: "d".into(),
            parameters: json!({"type":"object"}),
        }]
        .into(),
        effort: Some("low".into()),
        max_output_tokens: Some(100),
        prompt_cache_key: Some("k".repeat(100)),
        output_schema: Some(json!({"name":"answer","schema":{"type":"object"}})),
        temperature: Some(0.3),
    }
}

#[test]
fn request_body_lowering() {
    let mut r = req();
    let mut user = ChatMessage::text(Role::User, "look");
    user.images.push(ImageInput {
        media_type: "image/png".into(),
        data: "AAA".into(),
    });
    let mut asst = ChatMessage::text(Role::Assistant, "ok");
    asst.reasoning.push(ReasoningBlock {
        provider: "openai".into(),
        model: "m".into(),
        text: "t".into(),
        signature: None,
        redacted: None,
        raw: Some(json!({"id":"rs_1","type":"reasoning","status":"completed","summary":[],"encrypted_content":"e"})),
    });
    asst.reasoning.push(ReasoningBlock {
        provider: "other".into(),
        model: "m".into(),
        text: "t".into(),
        signature: None,
        redacted: None,
        raw: Some(json!({"id":"rs_2","type":"reasoning","encrypted_content":"e"})),
    });
    asst.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "t".into(),
        arguments: "{}".into(),
        item_id: Some("fc_1".into()),
    });
    asst.item_id = Some("msg_1".into());
    let mut tool = ChatMessage::text(Role::Tool, "result");
    tool.tool_call_id = Some("call_1".into());
    r.messages = vec![user, asst, tool];
    let b = WireProtocol::OpenAiResponses.build_body("openai", "", &r);
    assert_eq!(b["store"], false);
    assert_eq!(b["stream"], true);
    assert_eq!(b["instructions"], "sys");
    assert_eq!(b["prompt_cache_key"].as_str().unwrap().len(), 64);
    assert_eq!(b["reasoning"]["effort"], "low");
    assert_eq!(b["temperature"], 0.3);
    assert_eq!(b["tools"][0]["strict"], false);
    assert_eq!(b["tools"][0]["parameters"]["properties"], json!({}));
    assert_eq!(b["text"]["format"]["type"], "json_schema");
    assert_eq!(b["text"]["format"]["name"], "answer");
    let input = b["input"].as_array().unwrap();
    let types: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message",
            "reasoning",
            "message",
            "function_call",
            "function_call_output"
        ]
    );
    assert_eq!(
        input[0]["content"][1]["image_url"],
        "data:image/png;base64,AAA"
    );
    assert!(input[1].get("status").is_none());
    assert!(
        input[2].get("id").is_none(),
        "msg ids are not replayed with store:false"
    );
    assert_eq!(input[3]["id"], "fc_1");
    assert_eq!(input[4]["call_id"], "call_1");
}

#[test]
fn fc_id_dropped_without_reasoning_or_prefix() {
    let mut r = req();
    let mut asst = ChatMessage::text(Role::Assistant, "");
    asst.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "t".into(),
        arguments: "{}".into(),
        item_id: Some("fc_1".into()),
    });
    r.messages = vec![ChatMessage::text(Role::User, "hi"), asst];
    let b = WireProtocol::OpenAiResponses.build_body("openai", "", &r);
    assert!(b["input"][1].get("id").is_none());
    assert_eq!(
        b["input"].as_array().unwrap().len(),
        2,
        "no empty assistant message"
    );
}
