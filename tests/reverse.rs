//! End-to-end tests of requests from the server to the client (issue 7): user questions
//! (`ask_user`, `user-question/*`) and browser control (`browser/*` reverse requests),
//! against the real binary, the fake provider, a test client that answers, delays,
//! refuses or never answers, and a fake browser tracking tabs and ownership. Every
//! notification and response is validated against the JSON Schemas by `App`; every
//! reverse request (and every result the fake browser returns) by the peer.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::app::{config_for, App};
use support::fake_browser::UserPage;
use support::fake_provider::{FakeProvider, Script};
use support::peer::{all_browser_methods, Peer, Policy};

/// A server with the fake provider; `agent` settings merged in.
fn setup(agent: Value) -> (FakeProvider, Peer) {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    let mut a = json!({"auto_title": false});
    if let (Some(m), Value::Object(x)) = (a.as_object_mut(), agent) {
        m.extend(x);
    }
    cfg["agent"] = a;
    (fake, Peer::new(App::start(Some(cfg))))
}

/// Text of the tool result the model received for `call_id` (chat completions).
fn tool_output(fake: &FakeProvider, call_id: &str) -> String {
    for r in fake.requests().iter().rev() {
        if let Some(msgs) = r.body.get("messages").and_then(Value::as_array) {
            for m in msgs {
                if m["role"] == "tool" && m["tool_call_id"] == call_id {
                    return m["content"].as_str().unwrap_or("").to_owned();
                }
            }
        }
    }
    panic!("no tool result for {call_id}")
}

/// Tool names offered in the first model request.
fn offered_tools(fake: &FakeProvider) -> Vec<String> {
    let r = &fake.requests()[0];
    r.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|x| x["function"]["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn requested(p: &mut Peer) -> Value {
    p.notification("user-question/requested")["params"].clone()
}

fn resolved(p: &mut Peer) -> Value {
    p.notification("user-question/resolved")["params"].clone()
}

const DB_QUESTION: &str = r#"{"questions":[{"id":"db","question":"Which database?","header":"DB","options":[{"label":"Postgres","description":"server"},{"label":"SQLite"}],"allow_custom":true}]}"#;

// ---------------------------------------------------------------------------------------
// Questions
// ---------------------------------------------------------------------------------------

#[test]
fn ask_user_answered_returns_the_answer_to_the_tool() {
    let (fake, mut p) = setup(json!({}));
    let init = p.initialize(&[], &["user-question"]);
    assert_eq!(init["features"]["user_question"], true);
    assert_eq!(init["features"]["browser"], false);
    let th = p.thread();
    fake.push(Script::tool_call("call_q", "ask_user", DB_QUESTION));
    fake.push(Script::text(&["Using Postgres."]));
    let turn = p.turn(&th, "set up a database");
    let req = requested(&mut p);
    assert_eq!(req["thread_id"], th.as_str());
    assert_eq!(req["turn_id"], turn.as_str());
    let rid = req["request_id"].as_str().unwrap().to_owned();
    let r = &req["request"];
    assert_eq!(r["request_id"], rid.as_str());
    assert_eq!(r["call_id"], "call_q");
    assert_eq!(r["mode"], "ask");
    assert_eq!(r["reply_to_tool"], true);
    assert!(r.get("expires_at").is_none(), "forms do not expire: {r}");
    assert_eq!(r["questions"][0]["options"][0]["label"], "Postgres");
    // Listed while open, per conversation.
    let l = p.call("user-question/list", json!({"thread_id": th}));
    assert_eq!(l["questions"][0]["request_id"], rid.as_str());
    let l = p.call("user-question/list", json!({"thread_id": "thr_other"}));
    assert_eq!(l["questions"], json!([]));
    // Invalid answers are refused and leave it open.
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "db", "selected": ["MySQL"]}]}}),
    );
    assert!(e["message"].as_str().unwrap().contains("no option"), "{e}");
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "db", "selected": ["Postgres"], "bogus": 1}]}}),
    );
    assert_eq!(e["code"], "invalid_params", "{e}");
    let ok = p.call(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "db", "selected": ["Postgres"], "custom": "version 16"}]}}),
    );
    assert_eq!(ok, json!({"request_id": rid, "resolved": true}));
    let res = resolved(&mut p);
    assert_eq!(res["outcome"], "answered");
    assert_eq!(res["request_id"], rid.as_str());
    assert_eq!(res["answer"]["answers"][0]["selected"][0], "Postgres");
    let end = p.turn_end(&turn);
    assert_eq!(end["method"], "turn/completed");
    let out = tool_output(&fake, "call_q");
    assert!(out.contains("selected: Postgres"), "{out}");
    assert!(out.contains("version 16"), "{out}");
    assert!(offered_tools(&fake).contains(&"ask_user".to_owned()));
    // Settled: later answers are refused.
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "db", "selected": ["SQLite"]}]}}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("already settled"),
        "{e}"
    );
    let l = p.call("user-question/list", json!({}));
    assert_eq!(l["questions"], json!([]));
}

#[test]
fn offer_skipped_returns_no_answer() {
    let (fake, mut p) = setup(json!({}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call(
        "call_o",
        "ask_user",
        r#"{"mode":"offer","questions":[{"question":"Add tests too?","options":["yes","no"]}]}"#,
    ));
    fake.push(Script::text(&["Fine."]));
    let turn = p.turn(&th, "go");
    let req = requested(&mut p);
    assert_eq!(req["request"]["mode"], "offer");
    assert!(req["request"]["expires_at"].is_string(), "{req}");
    let rid = req["request_id"].as_str().unwrap().to_owned();
    let ok = p.call(
        "user-question/cancel",
        json!({"request_id": rid, "skip": true}),
    );
    assert_eq!(ok["resolved"], true);
    assert_eq!(resolved(&mut p)["outcome"], "skipped");
    p.turn_end(&turn);
    let out = tool_output(&fake, "call_o");
    assert!(out.starts_with("No answer"), "{out}");
    assert!(out.contains("skipped"), "{out}");
    assert!(!out.contains("yes"), "never an automatic choice: {out}");
}

#[test]
fn offer_expires_without_an_answer() {
    let (fake, mut p) = setup(json!({"question_offer_ttl_ms": 300}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call(
        "call_e",
        "ask_user",
        r#"{"mode":"offer","questions":[{"question":"Rename it?","options":["yes","no"]}]}"#,
    ));
    fake.push(Script::text(&["Kept the name."]));
    let turn = p.turn(&th, "go");
    let rid = requested(&mut p)["request_id"].as_str().unwrap().to_owned();
    let res = resolved(&mut p);
    assert_eq!(res["outcome"], "expired");
    assert!(res.get("answer").is_none());
    p.turn_end(&turn);
    let out = tool_output(&fake, "call_e");
    assert!(out.contains("expired"), "{out}");
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "q1", "selected": ["yes"]}]}}),
    );
    assert!(e["message"].as_str().unwrap().contains("expired"), "{e}");
}

#[test]
fn held_offer_stays_open_until_answered() {
    let (fake, mut p) = setup(json!({"question_offer_ttl_ms": 1000}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call(
        "call_h",
        "ask_user",
        r#"{"mode":"offer","questions":[{"question":"Which color?","options":["red","blue"],"multi_select":true}]}"#,
    ));
    fake.push(Script::text(&["Both."]));
    let turn = p.turn(&th, "go");
    let rid = requested(&mut p)["request_id"].as_str().unwrap().to_owned();
    let h = p.call("user-question/hold", json!({"request_id": rid}));
    assert_eq!(h, json!({"request_id": rid, "resolved": false}));
    // Well past the 1 s lifetime: still open, held, without expiry.
    p.idle(Duration::from_millis(1500));
    let l = p.call("user-question/list", json!({"thread_id": th}));
    assert_eq!(l["questions"][0]["held"], true);
    assert!(l["questions"][0].get("expires_at").is_none());
    p.call(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "q1", "selected": ["red", "blue"]}]}}),
    );
    assert_eq!(resolved(&mut p)["outcome"], "answered");
    p.turn_end(&turn);
    assert!(tool_output(&fake, "call_h").contains("red; blue"));
}

#[test]
fn ask_cancelled_returns_no_answer_and_forms_cannot_be_skipped() {
    let (fake, mut p) = setup(json!({}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call("call_c", "ask_user", DB_QUESTION));
    fake.push(Script::text(&["OK, no database."]));
    let turn = p.turn(&th, "go");
    let rid = requested(&mut p)["request_id"].as_str().unwrap().to_owned();
    let e = p.call_err(
        "user-question/cancel",
        json!({"request_id": rid, "skip": true}),
    );
    assert!(e["message"].as_str().unwrap().contains("form"), "{e}");
    p.call("user-question/cancel", json!({"request_id": rid}));
    assert_eq!(resolved(&mut p)["outcome"], "cancelled");
    let end = p.turn_end(&turn);
    assert_eq!(end["method"], "turn/completed");
    let out = tool_output(&fake, "call_c");
    assert!(
        out.contains("cancelled") && out.contains("No answer"),
        "{out}"
    );
    let e = p.call_err("user-question/hold", json!({"request_id": rid}));
    assert!(e["message"].as_str().unwrap().contains("cancelled"), "{e}");
}

#[test]
fn interrupt_revokes_the_question_and_late_answers_are_refused() {
    let (fake, mut p) = setup(json!({}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call("call_r", "ask_user", DB_QUESTION));
    let turn = p.turn(&th, "go");
    let rid = requested(&mut p)["request_id"].as_str().unwrap().to_owned();
    p.call("turn/interrupt", json!({"thread_id": th}));
    let res = resolved(&mut p);
    assert_eq!(res["outcome"], "revoked");
    assert_eq!(res["turn_id"], turn.as_str());
    let end = p.turn_end(&turn);
    assert_eq!(end["params"]["turn"]["status"], "interrupted");
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": rid, "answer": {"answers": [{"id": "db", "selected": ["Postgres"]}]}}),
    );
    assert_eq!(e["code"], "question_settled");
    assert!(e["message"].as_str().unwrap().contains("revoked"), "{e}");
    let e = p.call_err(
        "user-question/respond",
        json!({"request_id": "uq_nope", "answer": {"answers": [{"id": "db", "selected": ["Postgres"]}]}}),
    );
    assert_eq!(e["code"], "question_not_found");
    assert!(e["message"].as_str().unwrap().contains("unknown"), "{e}");
}

#[test]
fn disconnect_revokes_open_questions() {
    let (fake, mut p) = setup(json!({}));
    p.initialize(&[], &["user-question"]);
    let th = p.thread();
    fake.push(Script::tool_call("call_d", "ask_user", DB_QUESTION));
    p.turn(&th, "go");
    requested(&mut p);
    p.app.close_stdin();
    let res = resolved(&mut p);
    assert_eq!(res["outcome"], "revoked");
    assert!(p.app.wait_exit(Duration::from_secs(20)).is_some());
}

#[test]
fn questions_are_offered_unless_declined_and_secrets_are_refused() {
    let (fake, mut p) = setup(json!({}));
    // The client declines questions: not offered; called anyway it says why (as in
    // `wuu exec`).
    let init = p.call(
        "initialize",
        json!({"client": {"name": "peer"},
               "capabilities": {"opt_out_notifications": ["user-question"]}}),
    );
    assert_eq!(init["features"]["user_question"], false);
    let th = p.thread();
    fake.push(Script::tool_call("call_n", "ask_user", DB_QUESTION));
    fake.push(Script::text(&["Proceeding."]));
    let turn = p.turn(&th, "go");
    p.turn_end(&turn);
    assert!(!offered_tools(&fake).iter().any(|t| t == "ask_user"));
    let out = tool_output(&fake, "call_n");
    assert!(out.contains("unavailable in non-interactive runs"), "{out}");
    // A client that declares nothing (as the desktop and the phone) is offered
    // questions; a secret question is refused without notifying the client.
    let init = p.initialize(&[], &[]);
    assert_eq!(init["features"]["user_question"], true);
    fake.push(Script::tool_call(
        "call_s",
        "ask_user",
        r#"{"questions":[{"question":"Your API key?","secret":true}]}"#,
    ));
    fake.push(Script::text(&["I will not ask for it."]));
    let turn = p.turn(&th, "again");
    p.turn_end(&turn);
    let out = tool_output(&fake, "call_s");
    assert!(out.contains("secret input is not supported"), "{out}");
    assert!(!p
        .app
        .seen
        .iter()
        .any(|v| v["method"] == "user-question/requested"));
}

// ---------------------------------------------------------------------------------------
// Browser
// ---------------------------------------------------------------------------------------

fn browser_peer(agent: Value) -> (FakeProvider, Peer) {
    let (fake, mut p) = setup(agent);
    let init = p.initialize(&all_browser_methods(), &[]);
    assert_eq!(init["features"]["browser"], true);
    (fake, p)
}

#[test]
fn browser_full_execution() {
    let (fake, mut p) = browser_peer(json!({}));
    // A slow (but in-time) answer is waited for.
    p.set(
        "browser/screenshot",
        Policy::Delay(Duration::from_millis(300)),
    );
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::tool_call("c_shot", "browser_screenshot", r#"{}"#));
    fake.push(Script::tool_call(
        "c_cdp",
        "browser_cdp",
        r#"{"method":"Runtime.evaluate","params":{"expression":"document.title"}}"#,
    ));
    fake.push(Script::tool_call(
        "c_popup",
        "browser_cdp",
        r#"{"method":"Test.openPopup"}"#,
    ));
    fake.push(Script::tool_call("c_list", "browser_list_tabs", r#"{}"#));
    // The deliverable is the popup; its opener is protected, nothing else is open.
    fake.push(Script::tool_call(
        "c_fin",
        "browser_finalize",
        r#"{"keep":[{"tab_id":"popup_1","status":"deliverable"}]}"#,
    ));
    fake.push(Script::text(&["Done."]));
    let turn = p.turn(&th, "look at example.com");
    let end = p.turn_end(&turn);
    assert_eq!(end["method"], "turn/completed", "{end}");
    let ended = p.reverse_request("browser/turn_ended");
    let tools = offered_tools(&fake);
    for t in [
        "browser_open",
        "browser_screenshot",
        "browser_cdp",
        "browser_finalize",
    ] {
        assert!(tools.contains(&t.to_owned()), "{t} offered: {tools:?}");
    }
    assert_eq!(
        p.methods(),
        vec![
            "browser/turn_started",
            "browser/open_tab",
            "browser/screenshot",
            "browser/cdp",
            "browser/cdp",
            "browser/list_tabs",
            "browser/finalize",
            "browser/turn_ended"
        ]
    );
    // One execution: every request carries the same identity.
    let started = &p.requests[0]["params"];
    let exe = started["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(started["turn_id"], turn.as_str());
    let mut request_ids = std::collections::HashSet::new();
    for r in &p.requests {
        let params = &r["params"];
        assert_eq!(params["thread_id"], th.as_str(), "{r}");
        assert_eq!(params["workdir"], p.app.workdir.to_string_lossy().as_ref());
        assert_eq!(params["execution_id"], exe.as_str(), "{r}");
        assert!(request_ids.insert(params["request_id"].as_str().unwrap().to_owned()));
    }
    assert!(p.browser.execution_mismatches.is_empty());
    let tab = p.requests[1]["params"]["tab_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        p.requests[1]["params"]["initial_url"],
        "https://example.com/"
    );
    assert_eq!(p.requests[2]["params"]["tab_id"], tab.as_str());
    assert!(tool_output(&fake, "c_open").contains(&tab));
    let shot = tool_output(&fake, "c_shot");
    assert!(shot.contains("1280x720"), "{shot}");
    assert!(std::path::Path::new(&p.browser.shots[0]).exists());
    assert!(tool_output(&fake, "c_cdp").contains("Title of https://example.com/"));
    assert!(tool_output(&fake, "c_list").contains("popup_1"));
    let fin = tool_output(&fake, "c_fin");
    assert!(fin.contains("kept [popup_1"), "{fin}");
    // The kept popup's opener survived finalize.
    assert!(p.browser.tabs.contains_key(&tab), "opener protected");
    assert_eq!(
        ended["params"]["keep"],
        json!([{"tab_id": "popup_1", "status": "deliverable"}])
    );
    assert!(ended["params"].get("preserve_all").is_none());
    assert_eq!(ended["params"]["turn_id"], turn.as_str());
    // A second turn is a new execution with a new id.
    fake.push(Script::tool_call(
        "c_cdp2",
        "browser_cdp",
        r#"{"tab_id":"popup_1","method":"Runtime.evaluate"}"#,
    ));
    fake.push(Script::text(&["Again."]));
    let turn2 = p.turn(&th, "again");
    p.turn_end(&turn2);
    let n = p.requests.len();
    p.idle(Duration::from_millis(300));
    let second: Vec<&Value> = p.requests[8..].iter().collect();
    assert_eq!(second[0]["method"], "browser/turn_started", "{second:?}");
    let exe2 = second[0]["params"]["execution_id"].as_str().unwrap();
    assert_ne!(exe2, exe);
    assert_eq!(second[1]["params"]["execution_id"], exe2);
    assert!(n >= 10);
    assert!(tool_output(&fake, "c_cdp2").contains("popup.example"));
}

#[test]
fn foreign_tabs_are_refused_before_sending() {
    let (fake, mut p) = browser_peer(json!({}));
    let a = p.thread();
    let b = p.thread();
    // A opens a tab and keeps working (its turn stays open, so the tab stays A's).
    fake.push(Script::tool_call(
        "a_open",
        "browser_open",
        r#"{"url":"https://a.example/"}"#,
    ));
    fake.push(Script::stall(&["Working"], Duration::from_secs(30)));
    let ta = p.turn(&a, "open");
    let tab_a = p.reverse_request("browser/open_tab")["params"]["tab_id"]
        .as_str()
        .unwrap()
        .to_owned();
    p.notification("item/agentMessage/delta");
    let before = p.requests.len();
    let args = json!({"tab_id": tab_a, "method": "Runtime.evaluate"}).to_string();
    fake.push(Script::tool_call("b_cdp", "browser_cdp", &args));
    let args = json!({"tab_id": tab_a}).to_string();
    fake.push(Script::tool_call("b_close", "browser_close", &args));
    let args = json!({"keep": [{"tab_id": tab_a, "status": "persistent"}]}).to_string();
    fake.push(Script::tool_call("b_fin", "browser_finalize", &args));
    fake.push(Script::text(&["B done."]));
    let tb = p.turn(&b, "use a's tab");
    p.turn_end(&tb);
    for call in ["b_cdp", "b_close", "b_fin"] {
        let out = tool_output(&fake, call);
        assert!(
            out.contains("belongs to another conversation"),
            "{call}: {out}"
        );
    }
    // Nothing naming A's tab was sent for B.
    assert!(!p.requests[before..]
        .iter()
        .any(|r| r["params"]["tab_id"] == tab_a.as_str()));
    assert!(p.browser.tabs.contains_key(&tab_a));
    p.call("turn/interrupt", json!({"thread_id": a}));
    p.turn_end(&ta);
}

#[test]
fn a_client_that_never_answers_blocks_only_that_call() {
    let (fake, mut p) = browser_peer(json!({"reverse_request_timeout_ms": 1000}));
    p.set("browser/screenshot", Policy::Never);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::tool_call("c_shot", "browser_screenshot", r#"{}"#));
    fake.push(Script::text(&["The screenshot failed."]));
    let turn = p.turn(&th, "go");
    let cancelled = p.notification("browser/request_cancelled")["params"].clone();
    let end = p.turn_end(&turn);
    assert_eq!(end["method"], "turn/completed");
    let shot_req = p.unanswered[0].clone();
    assert_eq!(shot_req["method"], "browser/screenshot");
    assert_eq!(cancelled["request_id"], shot_req["params"]["request_id"]);
    assert_eq!(cancelled["thread_id"], th.as_str());
    assert_eq!(cancelled["reason"], "timeout");
    let out = tool_output(&fake, "c_shot");
    assert!(out.contains("did not answer within 1000 ms"), "{out}");
    // A late answer is dropped; the server stays healthy.
    let late = json!({"id": shot_req["id"], "result": {"width": 1, "height": 1, "path": "/x"}});
    p.reply(&late);
    let l = p.call("user-question/list", json!({}));
    assert_eq!(l["questions"], json!([]));
}

#[test]
fn interrupt_cancels_the_outstanding_request() {
    let (fake, mut p) = browser_peer(json!({}));
    p.set("browser/cdp", Policy::Never);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::tool_call(
        "c_cdp",
        "browser_cdp",
        r#"{"method":"Runtime.evaluate"}"#,
    ));
    let turn = p.turn(&th, "go");
    let cdp = p.reverse_request("browser/cdp");
    p.call("turn/interrupt", json!({"thread_id": th}));
    let c = p.notification("browser/request_cancelled")["params"].clone();
    assert_eq!(c["request_id"], cdp["params"]["request_id"]);
    assert_eq!(c["reason"], "interrupted");
    let end = p.turn_end(&turn);
    assert_eq!(end["params"]["turn"]["status"], "interrupted");
    // The execution still ends: temporary tabs are cleaned up.
    let ended = p.reverse_request("browser/turn_ended");
    assert_eq!(ended["params"]["turn_id"], turn.as_str());
    p.idle(Duration::from_millis(200));
    assert!(p.browser.tabs.is_empty(), "{:?}", p.browser.tabs);
}

#[test]
fn refused_requests_fail_the_tool_and_a_failed_finalize_preserves_all() {
    let (fake, mut p) = browser_peer(json!({}));
    p.set(
        "browser/set_visibility",
        Policy::Refuse("user is driving".into()),
    );
    p.set(
        "browser/finalize",
        Policy::Refuse("store unavailable".into()),
    );
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::text(&["opened"]));
    let t = p.turn(&th, "open");
    p.turn_end(&t);
    let tab = p.reverse_request("browser/open_tab")["params"]["tab_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let args = json!({"tab_id": tab, "visible": false}).to_string();
    fake.push(Script::tool_call("c_vis", "browser_set_visibility", &args));
    let args = json!({"keep": [{"tab_id": tab, "status": "persistent"}]}).to_string();
    fake.push(Script::tool_call("c_fin", "browser_finalize", &args));
    fake.push(Script::tool_call(
        "c_bad",
        "browser_finalize",
        r#"{"keep":[{"tab_id":"x","status":"forever"}]}"#,
    ));
    fake.push(Script::text(&["done"]));
    let t = p.turn(&th, "hide and keep");
    p.turn_end(&t);
    let out = tool_output(&fake, "c_vis");
    assert!(out.contains("user is driving"), "{out}");
    assert!(tool_output(&fake, "c_fin").contains("store unavailable"));
    assert!(tool_output(&fake, "c_bad").contains("invalid status"));
    // The keep records are unknown: the client must keep everything.
    let ended: Vec<Value> = {
        p.idle(Duration::from_millis(300));
        p.requests
            .iter()
            .filter(|r| r["method"] == "browser/turn_ended")
            .cloned()
            .collect()
    };
    assert_eq!(ended.len(), 2);
    assert_eq!(ended[1]["params"]["preserve_all"], true);
    assert_eq!(ended[1]["params"]["turn_id"], t.as_str());
}

#[test]
fn workspace_tabs_are_attached_and_released_never_closed() {
    let (fake, mut p) = browser_peer(json!({}));
    p.browser.user_pages.push(UserPage {
        tab_id: "ws_tab_1".into(),
        url: "https://docs.example/".into(),
        title: "Docs".into(),
    });
    let a = p.thread();
    let b = p.thread();
    fake.push(Script::tool_call("c_list", "browser_list_tabs", "{}"));
    fake.push(Script::tool_call(
        "c_att",
        "browser_attach",
        r#"{"workspace_tab_id":"ws_tab_1"}"#,
    ));
    fake.push(Script::tool_call(
        "c_cdp",
        "browser_cdp",
        r#"{"method":"Runtime.evaluate"}"#,
    ));
    fake.push(Script::text(&["read the docs"]));
    let t = p.turn(&a, "read my docs page");
    p.turn_end(&t);
    assert!(tool_output(&fake, "c_list").contains("ws_tab_1"));
    assert!(tool_output(&fake, "c_cdp").contains("Title of https://docs.example/"));
    let open = p
        .requests
        .iter()
        .find(|r| r["method"] == "browser/open_tab")
        .unwrap()
        .clone();
    assert_eq!(open["params"]["tab_id"], "ws_tab_1");
    assert!(open["params"].get("initial_url").is_none());
    // Turn end released the binding: the user page is still there, unbound.
    let ended = p.reverse_request("browser/turn_ended");
    assert_eq!(ended["params"]["thread_id"], a.as_str());
    p.idle(Duration::from_millis(200));
    assert!(!p.browser.tabs.contains_key("ws_tab_1"));
    assert!(!p.browser.closed.contains(&"ws_tab_1".to_owned()));
    assert_eq!(p.browser.user_pages.len(), 1);
    // B may attach it now, and detach releases it.
    fake.push(Script::tool_call(
        "b_att",
        "browser_attach",
        r#"{"workspace_tab_id":"ws_tab_1"}"#,
    ));
    fake.push(Script::tool_call(
        "b_close",
        "browser_close",
        r#"{"tab_id":"ws_tab_1"}"#,
    ));
    fake.push(Script::text(&["ok"]));
    let t = p.turn(&b, "attach");
    p.turn_end(&t);
    assert!(tool_output(&fake, "b_att").contains("attached"));
    assert!(tool_output(&fake, "b_close").contains("released"));
    assert!(!p.browser.closed.contains(&"ws_tab_1".to_owned()));
}

#[test]
fn browser_tools_need_the_six_base_methods() {
    let (fake, mut p) = setup(json!({}));
    let init = p.initialize(&["browser/cdp", "browser/open_tab"], &[]);
    assert_eq!(init["features"]["browser"], false);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::text(&["no browser"]));
    let t = p.turn(&th, "go");
    p.turn_end(&t);
    assert!(!offered_tools(&fake)
        .iter()
        .any(|t| t.starts_with("browser_")));
    assert!(tool_output(&fake, "c_open").contains("browser control is unavailable"));
    assert!(p.requests.is_empty());
}

#[test]
fn base_contract_without_execution_methods() {
    let (fake, mut p) = setup(json!({}));
    p.initialize(wuu_protocol::browser::BASE_METHODS, &[]);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::text(&["ok"]));
    let t = p.turn(&th, "go");
    p.turn_end(&t);
    p.idle(Duration::from_millis(200));
    assert_eq!(p.methods(), vec!["browser/open_tab"]);
    let params = &p.requests[0]["params"];
    assert!(params.get("execution_id").is_none(), "{params}");
    assert!(!offered_tools(&fake).iter().any(|t| t == "browser_finalize"));
}

#[test]
fn shutdown_cancels_outstanding_requests() {
    let (fake, mut p) = browser_peer(json!({}));
    p.set("browser/open_tab", Policy::Never);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    p.turn(&th, "go");
    let open = p.reverse_request("browser/open_tab");
    let id = p.app.send("shutdown", json!({}));
    let c = p.notification("browser/request_cancelled")["params"].clone();
    assert_eq!(c["request_id"], open["params"]["request_id"]);
    assert_eq!(c["reason"], "shutdown");
    p.wait_for("shutdown response", |v| v["id"] == json!(id));
    assert!(p.app.wait_exit(Duration::from_secs(20)).is_some());
}

#[test]
fn a_reply_to_no_server_request_is_dropped_with_a_warning() {
    // A line with an id and no method is a reply (spec §1.5); one no server request
    // waits for is dropped, and the server says so on stderr (it used to log at debug
    // level: a client that forgot `method` heard nothing). The next line is served.
    use std::io::Write;
    let home = tempfile::tempdir().unwrap();
    let mut child = support::app::raw_app_server(home.path(), None)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"id\":\"a1\"}\n{\"id\":\"i\",\"method\":\"initialize\",\"params\":{}}\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "only initialize is answered: {stdout}");
    assert_eq!(lines[0]["id"], "i");
    assert!(lines[0].get("result").is_some(), "{stdout}");
    assert!(
        stderr.contains("dropped a reply for \"a1\""),
        "stderr: {stderr}"
    );
}
