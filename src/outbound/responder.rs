//! The answer to one client request: a [`Responder`] writes exactly one response frame
//! (a result or an error) to the outbox, and answers `internal_error` if it is dropped
//! unanswered, so no request read is ever left without a response (spec `app-server.md`
//! §1, §4).

use super::frames::ok_frame;
use super::transport::Outbox;
use serde::Serialize;
use wuu_protocol::{ErrorCode, ErrorObject, RequestId, Response};

/// Answers one request. Requests without id (client notifications) are executed but
/// not answered. Dropping a responder without answering answers `internal_error`, so a
/// request is never left without a response.
pub struct Responder {
    id: Option<RequestId>,
    outbox: Outbox,
    method: &'static str,
    answered: bool,
    /// The conversation the request names (locates images of a deferred-content result).
    thread: Option<String>,
}

impl Responder {
    /// A responder for request `id` of `method`. Requests with an id are counted until
    /// answered, so a shutdown answers everything it has read.
    pub fn new(id: Option<RequestId>, outbox: Outbox, method: &'static str) -> Self {
        if id.is_some() {
            outbox.begin_request();
        }
        Responder {
            id,
            outbox,
            method,
            answered: false,
            thread: None,
        }
    }

    /// Names the conversation of the request (images of its result are located in it
    /// when the client asked for deferred content).
    pub fn with_thread(mut self, thread_id: &str) -> Self {
        self.thread = Some(thread_id.to_owned());
        self
    }

    /// Whether this request is counted as in flight (it has an id and no answer yet).
    pub fn counted(&self) -> bool {
        self.id.is_some()
    }

    /// The method being answered.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Answers with a result.
    pub fn ok<T: Serialize>(self, result: &T) {
        // The result's serializer is the only code instantiated per result type.
        self.ok_written(&mut |out: &mut Vec<u8>| {
            serde_json::to_writer(out, result).expect("serialize result")
        });
    }

    /// Answers with the result JSON `write` appends to a buffer.
    fn ok_written(mut self, write: &mut dyn FnMut(&mut Vec<u8>)) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = if self.outbox.defer_content() {
                // Read back as a `Value` (one decoder for every result type) to project
                // the large images. A result nested deeper than the decoder's limit (128
                // levels: tool arguments or results written by a model or an MCP
                // server) goes as written, its images inline.
                let mut json = Vec::with_capacity(512);
                write(&mut json);
                match serde_json::from_slice::<serde_json::Value>(&json) {
                    Ok(mut value) => {
                        super::deferred::project_frame_at(&mut value, self.thread.as_deref());
                        serde_json::to_vec(&Response::ok(id, value)).expect("serialize")
                    }
                    Err(e) => {
                        log::debug!("result sent without deferred content: {e}");
                        ok_frame(&id, json.len(), |frame| frame.extend_from_slice(&json))
                    }
                }
            } else {
                // Straight to bytes: no `Value` tree in between, which was most of a
                // small request's CPU. Keys come in the
                // result's declaration order rather than sorted.
                ok_frame(&id, 512, write)
            };
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }

    /// Answers with a result given as already-serialized JSON (`result_json` must be one
    /// valid JSON value; used for cached listings).
    pub fn ok_raw(mut self, result_json: &[u8]) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = ok_frame(&id, result_json.len(), |frame| {
                frame.extend_from_slice(result_json)
            });
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }

    /// Answers with an error.
    pub fn err(mut self, code: ErrorCode, message: impl Into<String>) {
        self.error(ErrorObject::new(code, message));
    }

    /// Answers with an error object.
    pub fn error(&mut self, e: ErrorObject) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = serde_json::to_vec(&Response::err(Some(id), e)).expect("serialize");
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered && self.id.is_some() {
            log::error!("request {} was dropped without an answer", self.method);
            let m = format!("{} was not answered (internal error)", self.method);
            self.error(ErrorObject::new(ErrorCode::InternalError, m));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::transport::{start_writer, ChannelSink};

    #[test]
    fn a_result_nested_past_the_decoder_limit_is_answered_with_deferred_content_on() {
        // Before: the read-back for deferred content panicked ("recursion limit").
        let (tx, rx) = crossbeam_channel::bounded(4);
        let (outbox, _writer) = start_writer(Box::new(ChannelSink(tx)), Box::new(|| {}));
        outbox.set_defer_content(true);
        let mut deep = serde_json::json!("leaf");
        for _ in 0..300 {
            deep = serde_json::json!([deep]);
        }
        Responder::new(Some(RequestId::Number(7.into())), outbox.clone(), "x").ok(&deep);
        let frame = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("an answer");
        let text = String::from_utf8(frame).expect("utf-8");
        assert!(
            text.starts_with("{\"id\":7,\"result\":[[["),
            "{}",
            &text[..40]
        );
        assert_eq!(text.matches('[').count(), 300);
        assert!(text.contains("\"leaf\""));
    }
}
