//! A test client that plays the client side of reverse requests (issue 7): it wraps an
//! [`App`], answers `browser/*` requests from the server through a [`FakeBrowser`]
//! according to a per-method [`Policy`] (answer, delay, refuse, never answer), and
//! validates every reverse request's params (and every result it sends back) against
//! the `reverse_methods` schemas. Notifications and responses are validated by `App`.
#![allow(dead_code)]

use super::app::{check_result, App, WAIT};
use super::fake_browser::FakeBrowser;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How the peer treats one reverse method.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Answer through the fake browser at once.
    Answer,
    /// Answer through the fake browser after this long.
    Delay(Duration),
    /// Answer with an error.
    Refuse(String),
    /// Never answer.
    Never,
}

struct ReverseValidators {
    params: HashMap<String, jsonschema::Validator>,
    results: HashMap<String, jsonschema::Validator>,
}

fn reverse_validators() -> &'static ReverseValidators {
    static V: OnceLock<ReverseValidators> = OnceLock::new();
    V.get_or_init(|| {
        let bundle = wuu_protocol::schema::bundle();
        let mut params = HashMap::new();
        let mut results = HashMap::new();
        for r in wuu_protocol::browser::REVERSE_METHODS {
            let p = wuu_protocol::schema::standalone(&bundle, "reverse_methods", r.name, "params")
                .unwrap();
            params.insert(r.name.to_owned(), jsonschema::validator_for(&p).unwrap());
            let s = wuu_protocol::schema::standalone(&bundle, "reverse_methods", r.name, "result")
                .unwrap();
            results.insert(r.name.to_owned(), jsonschema::validator_for(&s).unwrap());
        }
        ReverseValidators { params, results }
    })
}

/// Asserts a reverse request matches its method's params schema.
pub fn check_reverse_request(v: &Value) {
    let method = v["method"].as_str().unwrap();
    let val = reverse_validators()
        .params
        .get(method)
        .unwrap_or_else(|| panic!("reverse request {method} is not in the schema table"));
    let errors: Vec<String> = val
        .iter_errors(&v["params"])
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{method} params violate the schema: {errors:?}\n{v}"
    );
    assert!(
        v["id"].as_str().is_some_and(|s| s.starts_with("srv-")),
        "reverse ids are srv-<n>: {v}"
    );
}

fn check_reverse_result(method: &str, r: &Value) {
    if let Some(val) = reverse_validators().results.get(method) {
        let errors: Vec<String> = val.iter_errors(r).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{method} result violates the schema: {errors:?}\n{r}"
        );
    }
}

/// The client side.
pub struct Peer {
    /// The server.
    pub app: App,
    /// The fake hosted browser.
    pub browser: FakeBrowser,
    /// Per-method policy (default [`Policy::Answer`]).
    pub policy: HashMap<String, Policy>,
    /// Every reverse request seen, in order.
    pub requests: Vec<Value>,
    /// Frames other than reverse requests, not yet consumed.
    backlog: VecDeque<Value>,
    delayed: Vec<(Instant, Value)>,
    /// Reverse requests left unanswered (policy `Never`), for late answers.
    pub unanswered: Vec<Value>,
}

/// Every reverse method (base + execution methods).
pub fn all_browser_methods() -> Vec<&'static str> {
    wuu_protocol::browser::REVERSE_METHODS
        .iter()
        .map(|r| r.name)
        .collect()
}

impl Peer {
    /// Wraps a started app (not yet initialized).
    pub fn new(app: App) -> Peer {
        Peer {
            app,
            browser: FakeBrowser::default(),
            policy: HashMap::new(),
            requests: vec![],
            backlog: VecDeque::new(),
            delayed: vec![],
            unanswered: vec![],
        }
    }

    /// Sends `initialize` with these capabilities; returns the result.
    pub fn initialize(&mut self, reverse_methods: &[&str], notifications: &[&str]) -> Value {
        self.call(
            "initialize",
            json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "peer"},
                   "capabilities": {"reverse_rpc": {"methods": reverse_methods},
                                    "notifications": notifications}}),
        )
    }

    /// Sets the policy of a method.
    pub fn set(&mut self, method: &str, p: Policy) {
        self.policy.insert(method.to_owned(), p);
    }

    fn answer(&mut self, req: &Value) -> Value {
        let method = req["method"].as_str().unwrap();
        match self.browser.handle(method, &req["params"]) {
            Ok(r) => {
                check_reverse_result(method, &r);
                json!({"id": req["id"], "result": r})
            }
            Err(m) => json!({"id": req["id"], "error": {"code": "error", "message": m}}),
        }
    }

    /// Writes a raw reply line.
    pub fn reply(&mut self, v: &Value) {
        self.app.write_raw((v.to_string() + "\n").as_bytes());
    }

    fn flush_delayed(&mut self) {
        let now = Instant::now();
        let due: Vec<Value> = {
            let (due, later): (Vec<_>, Vec<_>) =
                self.delayed.drain(..).partition(|(t, _)| *t <= now);
            self.delayed = later;
            due.into_iter().map(|(_, v)| v).collect()
        };
        for req in due {
            let r = self.answer(&req);
            self.reply(&r);
        }
    }

    fn on_reverse(&mut self, req: Value) {
        check_reverse_request(&req);
        self.requests.push(req.clone());
        let method = req["method"].as_str().unwrap().to_owned();
        match self.policy.get(&method).cloned().unwrap_or(Policy::Answer) {
            Policy::Answer => {
                let r = self.answer(&req);
                self.reply(&r);
            }
            Policy::Delay(d) => self.delayed.push((Instant::now() + d, req)),
            Policy::Refuse(m) => {
                let r = json!({"id": req["id"], "error": {"code": "error", "message": m}});
                self.reply(&r);
            }
            Policy::Never => self.unanswered.push(req),
        }
    }

    /// Reads one frame (answering reverse requests on the way); `None` at the deadline.
    fn pump(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            self.flush_delayed();
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let step = (deadline - now).min(Duration::from_millis(20));
            let v = self.app.next_within(step)?;
            if v.get("method").is_some() && v.get("id").is_some() {
                self.on_reverse(v);
                continue;
            }
            return Some(v);
        }
    }

    fn pump_until(&mut self, deadline: Instant) -> Option<Value> {
        while Instant::now() < deadline {
            if let Some(v) = self.pump(deadline) {
                return Some(v);
            }
        }
        None
    }

    /// Sends a request; returns the whole response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.app.send(method, params);
        let deadline = Instant::now() + WAIT;
        if let Some(pos) = self
            .backlog
            .iter()
            .position(|v| v.get("method").is_none() && v["id"] == json!(id))
        {
            return self.backlog.remove(pos).unwrap();
        }
        loop {
            let Some(v) = self.pump_until(deadline) else {
                panic!("no response to {method} ({id}); backlog {:?}", self.backlog);
            };
            if v.get("method").is_none() && v["id"] == json!(id) {
                check_result(method, &v);
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Sends a request and returns its result (panics on error).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// Sends a request and returns its error (panics on success).
    pub fn call_err(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(
            r.get("error").is_some(),
            "{method} unexpectedly succeeded: {r}"
        );
        r["error"].clone()
    }

    /// Waits for the next frame matching `pred` (backlog first).
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos).unwrap();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let Some(v) = self.pump_until(deadline) else {
                panic!("timed out waiting for {what}; backlog: {:?}", self.backlog);
            };
            if pred(&v) {
                return v;
            }
            self.backlog.push_back(v);
        }
    }

    /// Waits for notification `method`.
    pub fn notification(&mut self, method: &str) -> Value {
        let m = method.to_owned();
        self.wait_for(method, move |v| {
            v["method"] == json!(m) && v.get("id").is_none()
        })
    }

    /// Keeps answering reverse requests for `d`, collecting other frames.
    pub fn idle(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while let Some(v) = self.pump_until(deadline) {
            self.backlog.push_back(v);
        }
    }

    /// Waits until a reverse request `method` was seen; returns it.
    pub fn reverse_request(&mut self, method: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(r) = self.requests.iter().find(|r| r["method"] == method) {
                return r.clone();
            }
            match self.pump_until(deadline.min(Instant::now() + Duration::from_millis(50))) {
                Some(v) => self.backlog.push_back(v),
                None if Instant::now() >= deadline => {
                    panic!("no reverse request {method}; seen {:?}", self.requests)
                }
                None => {}
            }
        }
    }

    /// Methods of the reverse requests seen, in order.
    pub fn methods(&self) -> Vec<String> {
        self.requests
            .iter()
            .map(|r| r["method"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Starts a conversation; returns its id.
    pub fn thread(&mut self) -> String {
        let t = self.call("thread/start", json!({}));
        let id = t["thread"]["id"].as_str().unwrap().to_owned();
        self.notification("thread/started");
        id
    }

    /// Starts a turn; returns its id.
    pub fn turn(&mut self, thread: &str, prompt: &str) -> String {
        let r = self.call("turn/start", json!({"thread_id": thread, "prompt": prompt}));
        r["turn"]["id"].as_str().unwrap().to_owned()
    }

    /// Waits for the terminal notification of `turn`.
    pub fn turn_end(&mut self, turn: &str) -> Value {
        let t = turn.to_owned();
        self.wait_for("turn end", move |v| {
            (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(t))
                || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(t))
        })
    }
}
