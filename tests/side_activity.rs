//! End-to-end tests of the clients' side chats (`sideThread/*`), browser activities
//! (`activity/*`) and their remaining calls (`thread/textSnapshot`, `message/image/read`,
//! `config/codex/*`, `auth/xai/login/*`, the legacy methods), against the real binary,
//! the fake provider and a fake OAuth authorization server on 127.0.0.1. Each request
//! is sent with the params the real client code sends (the client file and function are
//! named beside it) and the answer is checked for the fields the client reads; every
//! notification and result is validated against the JSON Schemas by `App`.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};
use support::peer::{all_browser_methods, Peer, Policy};

/// A server on the fake provider with its own `WUU_HOME` and `HOME` (the returned
/// directory; keep it alive).
fn start(fake: &FakeProvider, env: &[(&str, &str)]) -> (App, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().to_string_lossy().into_owned();
    let mut all: Vec<(&str, &str)> = env.to_vec();
    all.push(("HOME", &h));
    let app = App::start_with_env(Some(config_for(&fake.base_url())), &all);
    (app, home)
}

fn init(app: &mut App) {
    app.call(
        "initialize",
        json!({"protocol_version": "wuu-app-server/v0.1", "client": {"name": "desktop"}}),
    );
}

fn new_thread(app: &mut App) -> String {
    let t = app.call("thread/start", json!({}));
    t["thread"]["id"].as_str().unwrap().to_owned()
}

fn turn_end(app: &mut App, turn: &str) -> Value {
    let t = turn.to_owned();
    app.wait_for("turn end", move |v| {
        (v["method"] == "turn/completed" && v["params"]["turn"]["id"] == json!(t))
            || (v["method"] == "turn/error" && v["params"]["turn_id"] == json!(t))
    })
}

/// The next `sideThread/event` of `kind`.
fn side_event(app: &mut App, kind: &str) -> Value {
    let k = kind.to_owned();
    app.wait_for(kind, move |v| {
        v["method"] == "sideThread/event" && v["params"]["type"] == json!(k)
    })["params"]
        .clone()
}

fn body_text(r: &support::fake_provider::RecordedRequest) -> String {
    r.body.to_string()
}

#[test]
fn side_chat_answers_beside_a_running_main_turn_and_stays_out_of_its_history() {
    let fake = FakeProvider::start();
    let (mut app, _home) = start(&fake, &[]);
    init(&mut app);
    let main = new_thread(&mut app);
    // The main turn's answer stalls with its stream open: the main conversation is busy.
    fake.push(Script::stall(&["Working on the "], Duration::from_secs(60)));
    let r = app.call(
        "turn/start",
        json!({"thread_id": main, "prompt": "refactor the parser module"}),
    );
    let main_turn = r["turn"]["id"].as_str().unwrap().to_owned();
    assert!(fake.wait_requests(1, Duration::from_secs(10)));

    // desktop/src/main/index.ts, ipcMain.handle("wuu:side-thread-open"):
    // appServerRequest(event, "sideThread/open", { main_thread_id }); the renderer's
    // SideThreadController reads `summary` (null = empty panel).
    let open = app.call("sideThread/open", json!({"main_thread_id": main}));
    assert_eq!(open["summary"], Value::Null, "{open}");

    // desktop/src/main/index.ts, ipcMain.handle("wuu:side-thread-send", params):
    // appServerRequest(event, "sideThread/sendMessage", params) with
    // SideThreadSendParams {main_thread_id, prompt}; reads user_message_id, summary.
    fake.push(Script::text(&["It is ", "refactoring the parser."]));
    let sent = app.call(
        "sideThread/sendMessage",
        json!({"main_thread_id": main, "prompt": "what is it doing right now?"}),
    );
    let user_id = sent["user_message_id"].as_str().unwrap().to_owned();
    let side_id = sent["summary"]["side_thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sent["summary"]["main_thread_id"], main.as_str());
    assert_eq!(sent["summary"]["status"], "running");
    assert!(sent["summary"]["revision"].as_u64().unwrap() >= 1);
    assert_eq!(sent["summary"]["main_task_summary"]["running"], true);
    assert_eq!(
        sent["summary"]["main_task_summary"]["last_user_message"],
        "refactor the parser module"
    );
    // The SideThreadEvent union the controller reduces: message (user), delta, message
    // (assistant), status.
    let user_msg = side_event(&mut app, "message");
    assert_eq!(user_msg["message"]["id"], user_id.as_str());
    assert_eq!(user_msg["message"]["role"], "user");
    let delta = side_event(&mut app, "delta");
    assert_eq!(delta["side_thread_id"], side_id.as_str());
    assert!(delta["message_id"].as_str().is_some());
    assert!(delta["revision"].as_u64().is_some());
    let answer = side_event(&mut app, "message");
    assert_eq!(answer["message"]["role"], "assistant");
    assert_eq!(answer["message"]["status"], "completed");
    assert_eq!(answer["message"]["text"], "It is refactoring the parser.");
    let status = side_event(&mut app, "status");
    assert_eq!(status["summary"]["status"], "running");
    let status = side_event(&mut app, "status");
    assert_eq!(status["summary"]["status"], "completed");
    // All of it while the main turn still runs.
    assert!(
        !app.seen
            .iter()
            .any(|v| v["method"] == "turn/completed" || v["method"] == "turn/error"),
        "the main turn ended before the side answer"
    );
    // The side request: the main conversation as read-only context, no tools, the
    // question last.
    let side_req = &fake.requests()[1];
    let text = body_text(side_req);
    assert!(text.contains("refactor the parser module"), "{text}");
    assert!(side_req
        .body
        .get("tools")
        .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty())));
    let msgs = side_req.body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.last().unwrap()["content"],
        "what is it doing right now?"
    );

    // desktop/src/main/index.ts, ipcMain.handle("wuu:side-thread-history"):
    // appServerRequest(event, "sideThread/getHistory", { main_thread_id }); reads
    // summary and messages[] {id, role, text, status}.
    let hist = app.call("sideThread/getHistory", json!({"main_thread_id": main}));
    let m = hist["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2, "{hist}");
    assert_eq!(m[0]["id"], user_id.as_str());
    assert_eq!(m[1]["text"], "It is refactoring the parser.");
    assert_eq!(hist["summary"]["status"], "completed");

    // The main turn is stopped; its next turn's request carries none of the side chat.
    app.call("turn/interrupt", json!({"thread_id": main}));
    turn_end(&mut app, &main_turn);
    fake.push(Script::text(&["Done."]));
    let r = app.call(
        "turn/start",
        json!({"thread_id": main, "prompt": "continue"}),
    );
    let t2 = r["turn"]["id"].as_str().unwrap().to_owned();
    turn_end(&mut app, &t2);
    let last = fake.requests().last().unwrap().clone();
    let text = body_text(&last);
    assert!(text.contains("continue"), "{text}");
    assert!(!text.contains("what is it doing right now"), "{text}");
    assert!(!text.contains("refactoring the parser."), "{text}");
    let resumed = app.call("thread/resume", json!({"session_id": main}));
    assert!(!resumed.to_string().contains("what is it doing right now"));
}

#[test]
fn side_chat_interrupt_reset_and_history_after_restart() {
    let fake = FakeProvider::start();
    let (mut app, _home) = start(&fake, &[]);
    init(&mut app);
    let main = new_thread(&mut app);
    fake.push(Script::text(&["Main answer."]));
    let r = app.call("turn/start", json!({"thread_id": main, "prompt": "hello"}));
    let t = r["turn"]["id"].as_str().unwrap().to_owned();
    turn_end(&mut app, &t);

    fake.push(Script::text(&["First side answer."]));
    app.call(
        "sideThread/sendMessage",
        json!({"main_thread_id": main, "prompt": "first?"}),
    );
    assert_eq!(
        side_event(&mut app, "status")["summary"]["status"],
        "running"
    );
    assert_eq!(
        side_event(&mut app, "status")["summary"]["status"],
        "completed"
    );

    // A second question whose answer stalls, then interrupted.
    side_event(&mut app, "message");
    side_event(&mut app, "message");
    app.backlog.clear();
    fake.push(Script::stall(&["partial "], Duration::from_secs(60)));
    app.call(
        "sideThread/sendMessage",
        json!({"main_thread_id": main, "prompt": "second?"}),
    );
    side_event(&mut app, "delta");
    app.backlog.clear();
    // A concurrent send is refused while an answer runs.
    let busy = app.call_err(
        "sideThread/sendMessage",
        json!({"main_thread_id": main, "prompt": "third?"}),
    );
    assert_eq!(busy["code"], "thread_busy", "{busy}");
    // desktop/src/main/index.ts, ipcMain.handle("wuu:side-thread-interrupt"):
    // appServerRequest(event, "sideThread/interrupt", { main_thread_id }); reads ok.
    let ok = app.call("sideThread/interrupt", json!({"main_thread_id": main}));
    assert_eq!(ok["ok"], true);
    let msg = side_event(&mut app, "message");
    assert_eq!(msg["message"]["status"], "interrupted");
    assert_eq!(msg["message"]["text"], "partial ");
    assert_eq!(
        side_event(&mut app, "status")["summary"]["status"],
        "interrupted"
    );

    // Attachments are refused, not dropped.
    let e = app.call_err(
        "sideThread/sendMessage",
        json!({"main_thread_id": main, "prompt": "x", "images": []}),
    );
    assert_eq!(e["code"], "invalid_params");
    // An unknown main conversation.
    let e = app.call_err("sideThread/open", json!({"main_thread_id": "thr_missing"}));
    assert_eq!(e["code"], "thread_not_found");

    // The side chat survives a restart.
    app.restart();
    init(&mut app);
    let open = app.call("sideThread/open", json!({"main_thread_id": main}));
    assert_eq!(open["summary"]["status"], "interrupted");
    let hist = app.call("sideThread/getHistory", json!({"main_thread_id": main}));
    let texts: Vec<&str> = hist["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        vec!["first?", "First side answer.", "second?", "partial "]
    );

    // desktop/src/main/index.ts, ipcMain.handle("wuu:side-thread-reset"):
    // appServerRequest(event, "sideThread/reset", { main_thread_id }); reads ok, then
    // the `reset` event clears the panel.
    let side_id = open["summary"]["side_thread_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ok = app.call("sideThread/reset", json!({"main_thread_id": main}));
    assert_eq!(ok["ok"], true);
    let ev = side_event(&mut app, "reset");
    assert_eq!(ev["side_thread_id"], side_id.as_str());
    let open = app.call("sideThread/open", json!({"main_thread_id": main}));
    assert_eq!(open["summary"], Value::Null);
    let e = app.call_err("sideThread/getHistory", json!({"main_thread_id": main}));
    assert_eq!(e["code"], "error");
}

/// A peer serving every browser method, over the fake provider.
fn browser_peer(fake: &FakeProvider) -> (Peer, tempfile::TempDir) {
    let (app, home) = start(fake, &[]);
    let mut p = Peer::new(app);
    let init = p.initialize(&all_browser_methods(), &[]);
    assert_eq!(init["features"]["browser"], true);
    (p, home)
}

#[test]
fn takeover_cancels_a_pending_browser_request_and_release_hands_back_a_new_lease() {
    let fake = FakeProvider::start();
    let (mut p, _home) = browser_peer(&fake);
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
    let started = p.notification("activity/started")["params"].clone();
    assert_eq!(started["kind"], "browser");
    assert_eq!(started["thread_id"], th.as_str());
    assert_eq!(started["controller"], "agent");
    let activity_id = started["id"].as_str().unwrap().to_owned();
    let cdp = p.reverse_request("browser/cdp");
    assert_eq!(cdp["params"]["activity_id"], activity_id.as_str());
    let lease1 = cdp["params"]["lease_token"].as_str().unwrap().to_owned();
    let open = p
        .requests
        .iter()
        .find(|r| r["method"] == "browser/open_tab")
        .unwrap()
        .clone();
    assert_eq!(open["params"]["lease_token"], lease1.as_str());

    // clients/mobile-web/src/lib/desktopBridge.ts, RemoteDesktopBridge.createApi
    // listActivities: this.call("activity/list", { thread_id }); reads activities[].
    let l = p.call("activity/list", json!({"thread_id": th}));
    assert_eq!(l["activities"][0]["id"], activity_id.as_str());
    assert_eq!(l["activities"][0]["controller"], "agent");

    // desktopBridge.ts takeoverActivity: this.call("activity/takeover",
    // { thread_id, activity_id }); reads activity.
    let t = p.call(
        "activity/takeover",
        json!({"thread_id": th, "activity_id": activity_id}),
    );
    assert_eq!(t["activity"]["controller"], "user");
    assert_eq!(t["activity"]["state"], "user_controlled");
    let c = p.notification("browser/request_cancelled")["params"].clone();
    assert_eq!(c["request_id"], cdp["params"]["request_id"]);
    assert_eq!(c["reason"], "takeover");
    let cc = p.notification("activity/control_changed")["params"].clone();
    assert_eq!(cc["controller"], "user");
    let end = p.turn_end(&turn);
    assert_eq!(end["params"]["turn"]["status"], "interrupted", "{end}");

    // While the user holds control, browser calls are refused without reaching the
    // client.
    let before = p.requests.len();
    fake.push(Script::tool_call(
        "c_open2",
        "browser_open",
        r#"{"url":"https://example.org/"}"#,
    ));
    fake.push(Script::text(&["The user has the browser."]));
    let t2 = p.turn(&th, "look again");
    let end = p.turn_end(&t2);
    assert_eq!(end["method"], "turn/completed");
    assert!(
        !p.requests[before..]
            .iter()
            .any(|r| r["method"] == "browser/open_tab"),
        "a browser request went out while the user held control"
    );

    // desktopBridge.ts releaseActivity: this.call("activity/release",
    // { thread_id, activity_id }); reads activity and lease_token.
    let r = p.call(
        "activity/release",
        json!({"thread_id": th, "activity_id": activity_id}),
    );
    let lease2 = r["lease_token"].as_str().unwrap().to_owned();
    assert_ne!(lease2, lease1);
    assert_eq!(r["activity"]["controller"], "agent");
    assert_eq!(r["activity"]["state"], "background_controlled");
    let before = p.requests.len();
    fake.push(Script::tool_call(
        "c_open3",
        "browser_open",
        r#"{"url":"https://example.net/"}"#,
    ));
    fake.push(Script::text(&["Opened again."]));
    let t3 = p.turn(&th, "open it again");
    p.turn_end(&t3);
    let open3 = p.requests[before..]
        .iter()
        .find(|r| r["method"] == "browser/open_tab")
        .expect("an open_tab after release")
        .clone();
    assert_eq!(open3["params"]["lease_token"], lease2.as_str());

    // desktopBridge.ts stopActivity: this.call("activity/stop",
    // { thread_id, activity_id }); reads activity.
    let s = p.call(
        "activity/stop",
        json!({"thread_id": th, "activity_id": activity_id}),
    );
    assert_eq!(s["activity"]["state"], "stopped");
    assert_eq!(s["activity"]["controller"], "none");
    p.notification("activity/stopped");
    let e = p.call_err(
        "activity/takeover",
        json!({"thread_id": "thr_other", "activity_id": activity_id}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("another thread"),
        "{e}"
    );
}

#[test]
fn activity_list_after_a_restart_reports_ended_activities() {
    let fake = FakeProvider::start();
    let (mut p, _home) = browser_peer(&fake);
    let th = p.thread();
    fake.push(Script::tool_call(
        "c_open",
        "browser_open",
        r#"{"url":"https://example.com/"}"#,
    ));
    fake.push(Script::text(&["Opened."]));
    let turn = p.turn(&th, "open it");
    p.turn_end(&turn);
    let l = p.call("activity/list", json!({"thread_id": th}));
    assert_eq!(l["activities"][0]["state"], "background_controlled", "{l}");
    let id = l["activities"][0]["id"].clone();
    p.app.restart();
    p.initialize(&all_browser_methods(), &[]);
    let l = p.call("activity/list", json!({"thread_id": th}));
    let a = &l["activities"][0];
    assert_eq!(a["id"], id);
    assert_eq!(a["state"], "stopped", "{l}");
    assert_eq!(a["controller"], "none");
    let e = p.call_err(
        "activity/release",
        json!({"thread_id": th, "activity_id": id}),
    );
    assert!(e["message"].as_str().unwrap().contains("not found"), "{e}");
}

/// A one-shot PNG of `w`×`h` pixels.
fn png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb([200, 30, 30]));
    let mut out = std::io::Cursor::new(vec![]);
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

#[test]
fn text_snapshot_message_image_codex_and_legacy_calls_answer_what_the_clients_read() {
    let fake = FakeProvider::start();
    let (mut app, _home) = start(&fake, &[]);
    init(&mut app);
    let th = new_thread(&mut app);
    std::fs::write(app.workdir.join("chart.png"), png(800, 400)).unwrap();
    fake.push(Script::text(&["Here is the chart: ![chart](chart.png)"]));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": "draw it"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    turn_end(&mut app, &turn);
    let resumed = app.call("thread/resume", json!({"session_id": th}));
    let answer_id = resumed["thread"]["turns"][0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "agent_message")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The desktop's history sync (Go `thread/textSnapshot` caller): rpc("thread/
    // textSnapshot", {thread_id}); reads id, title, updated_at, messages[{id, turn_id,
    // role, text}].
    let s = app.call("thread/textSnapshot", json!({"thread_id": th}));
    assert_eq!(s["id"], th.as_str());
    assert!(s["updated_at"].as_str().is_some());
    let m = s["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2, "{s}");
    assert_eq!(m[0]["role"], "user");
    assert_eq!(m[0]["text"], "draw it");
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(m[1]["turn_id"], turn.as_str());
    let e = app.call_err("thread/textSnapshot", json!({"thread_id": "thr_nope"}));
    assert_eq!(e["code"], "thread_not_found");

    // The phone's image reader (readAttachmentChunks("message/image/read", {kind,
    // scope_id, turn_id, message_id, source, preview})): reads data, total and the media
    // type; loops on offset.
    let base = json!({"kind": "thread", "scope_id": th, "turn_id": turn,
                      "message_id": answer_id, "source": "chart.png"});
    let mut p = base.clone();
    p["preview"] = json!(true);
    let prev = app.call("message/image/read", p);
    assert_eq!(prev["content_type"], "image/jpeg");
    assert_eq!(prev["media_type"], "image/jpeg");
    let bytes = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(prev["data"].as_str().unwrap())
            .unwrap()
    };
    let dim = image::load_from_memory(&bytes).unwrap();
    assert_eq!((dim.width(), dim.height()), (384, 192));
    let mut p = base.clone();
    p["preview"] = json!(false);
    let mut data = String::new();
    let mut offset = 0u64;
    let mut sha = Value::Null;
    loop {
        p["offset"] = json!(offset);
        if !sha.is_null() {
            p["sha256"] = sha.clone();
        }
        let c = app.call("message/image/read", p.clone());
        assert_eq!(c["media_type"], "image/png");
        sha = c["sha256"].clone();
        data.push_str(c["data"].as_str().unwrap());
        offset = data.len() as u64;
        if offset >= c["total"].as_u64().unwrap() {
            break;
        }
    }
    let original = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(&data)
            .unwrap()
    };
    assert_eq!(
        original,
        std::fs::read(app.workdir.join("chart.png")).unwrap()
    );
    // A path the message does not show is refused.
    let mut p = base.clone();
    p["source"] = json!("../secret.png");
    let e = app.call_err("message/image/read", p);
    assert!(
        e["message"].as_str().unwrap().contains("not attached"),
        "{e}"
    );

    // desktopBridge.ts loadCodexModels: this.call("config/codex/models", { provider });
    // another provider is refused with a message naming the engine.
    let e = app.call_err("config/codex/models", json!({"provider": "fake"}));
    assert!(e["message"].as_str().unwrap().contains("Codex"), "{e}");

    // config/codex/credentials: whether a Codex login exists, never its content.
    let none = app.call("config/codex/credentials", json!({}));
    assert_eq!(none["available"], false, "{none}");

    // The legacy and remote-only methods answer the Go server's errors, not
    // method_not_found.
    for (method, params, needle) in [
        (
            "thread/control/take",
            json!({"thread_id": th, "revision": 1}),
            "no longer supported",
        ),
        (
            "thread/control/return",
            json!({"thread_id": th}),
            "no longer supported",
        ),
        (
            "device/push_register",
            json!({"token": "t", "platform": "ios"}),
            "remote device session",
        ),
        (
            "device/push_unregister",
            json!({"token": "t"}),
            "remote device session",
        ),
        (
            "project/work",
            json!({"project_id": "p", "operation": "list"}),
            "project",
        ),
        (
            "project/session",
            json!({"action": "adopt", "project_id": "p", "session_id": th}),
            "project",
        ),
    ] {
        let e = app.call_err(method, params);
        assert_eq!(e["code"], "error", "{method}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{method}: {e}"
        );
    }
}

#[test]
fn codex_credentials_report_a_login_without_its_secret() {
    let fake = FakeProvider::start();
    let codex_home = tempfile::tempdir().unwrap();
    std::fs::write(
        codex_home.path().join("auth.json"),
        r#"{"tokens":{"access_token":"SECRET-ACCESS-TOKEN-123456","refresh_token":"SECRET-REFRESH-987654"}}"#,
    )
    .unwrap();
    let ch = codex_home.path().to_string_lossy().into_owned();
    let (mut app, _home) = start(&fake, &[("CODEX_HOME", &ch)]);
    init(&mut app);
    // desktop settings (Codex provider sheet): request("config/codex/credentials");
    // reads available / reusable.
    let c = app.call("config/codex/credentials", json!({}));
    assert_eq!(c["available"], true, "{c}");
    assert_eq!(c["reusable"], true);
    assert_eq!(c["source"], "auth_file");
    assert_eq!(c["auth_mode"], "chatgpt");
    assert!(!c.to_string().contains("SECRET"), "{c}");
}

/// A fake OAuth device authorization server: `/device` answers a device code; `/token`
/// answers `authorization_pending` `pending` times, then tokens (or `access_denied`
/// when `deny`). Records each form body.
struct FakeAuth {
    url: String,
    forms: Arc<Mutex<Vec<String>>>,
}

fn fake_auth(pending: usize, deny: bool) -> FakeAuth {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let forms = Arc::new(Mutex::new(vec![]));
    let f = forms.clone();
    std::thread::spawn(move || {
        let mut token_calls = 0usize;
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            f.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&body).into_owned());
            let (status, answer) = if path == "/device" {
                (
                    200,
                    json!({"device_code": "DEV-CODE-1", "user_code": "ABCD-EFGH",
                           "verification_uri": "https://auth.example.test/device",
                           "verification_uri_complete": "https://auth.example.test/device?code=ABCD-EFGH",
                           "interval": 1, "expires_in": 600}),
                )
            } else if token_calls < pending {
                token_calls += 1;
                (400, json!({"error": "authorization_pending"}))
            } else if deny {
                (400, json!({"error": "access_denied"}))
            } else {
                (
                    200,
                    json!({"access_token": "XAI-ACCESS-TOKEN-ABCDEFGHIJ",
                           "refresh_token": "XAI-REFRESH-TOKEN-KLMNOPQRST",
                           "expires_in": 3600}),
                )
            };
            let b = answer.to_string();
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{b}",
                b.len()
            );
        }
    });
    FakeAuth { url, forms }
}

#[test]
fn xai_device_login_stores_the_token_privately() {
    let fake = FakeProvider::start();
    let auth = fake_auth(1, false);
    let device = format!("{}/device", auth.url);
    let token = format!("{}/token", auth.url);
    let (mut app, _home) = start(
        &fake,
        &[
            ("WUU_XAI_DEVICE_CODE_URL", &device),
            ("WUU_XAI_TOKEN_URL", &token),
            ("WUU_XAI_OAUTH_CLIENT_ID", "test-client"),
        ],
    );
    init(&mut app);
    // desktopBridge.ts startXAILogin: this.call("auth/xai/login/start"); reads
    // login_id, user_code, verification_uri(_complete), expires_in, interval_ms.
    let s = app.call("auth/xai/login/start", Value::Null);
    let login_id = s["login_id"].as_str().unwrap().to_owned();
    assert_eq!(s["user_code"], "ABCD-EFGH");
    assert_eq!(s["verification_uri"], "https://auth.example.test/device");
    assert_eq!(s["interval_ms"], 1000);
    assert_eq!(s["expires_in"], 600);
    // desktopBridge.ts pollXAILogin: this.call("auth/xai/login/poll", { login_id });
    // reads status, interval_ms, error, providers.
    let p = app.call("auth/xai/login/poll", json!({"login_id": login_id}));
    assert_eq!(p["status"], "pending", "{p}");
    assert_eq!(p["interval_ms"], 1000);
    let p = app.call("auth/xai/login/poll", json!({"login_id": login_id}));
    assert_eq!(p["status"], "success", "{p}");
    assert!(p["providers"].is_array());
    let forms = auth.forms.lock().unwrap().clone();
    assert!(forms[0].contains("client_id=test-client"), "{forms:?}");
    assert!(forms[1].contains("device_code=DEV-CODE-1"), "{forms:?}");
    assert!(forms[1].contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code"));
    let path = app.home.join("credentials").join("xai-subscription.json");
    let stored = std::fs::read_to_string(&path).unwrap();
    assert!(stored.contains("XAI-ACCESS-TOKEN-ABCDEFGHIJ"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The token never reaches the client.
    assert!(!app.seen.iter().any(
        |v| v.to_string().contains("XAI-ACCESS-TOKEN") || v.to_string().contains("XAI-REFRESH")
    ));
    // The login is finished: polling it again is an error, cancel is still ok.
    let e = app.call_err("auth/xai/login/poll", json!({"login_id": login_id}));
    assert!(e["message"].as_str().unwrap().contains("unknown"), "{e}");
    // desktopBridge.ts cancelXAILogin: this.call("auth/xai/login/cancel", { login_id }).
    let c = app.call("auth/xai/login/cancel", json!({"login_id": login_id}));
    assert_eq!(c["ok"], true);
}

#[test]
fn xai_device_login_denied_and_cancelled() {
    let fake = FakeProvider::start();
    let auth = fake_auth(0, true);
    let device = format!("{}/device", auth.url);
    let token = format!("{}/token", auth.url);
    let (mut app, _home) = start(
        &fake,
        &[
            ("WUU_XAI_DEVICE_CODE_URL", &device),
            ("WUU_XAI_TOKEN_URL", &token),
        ],
    );
    init(&mut app);
    let s = app.call("auth/xai/login/start", Value::Null);
    let id = s["login_id"].as_str().unwrap().to_owned();
    let p = app.call("auth/xai/login/poll", json!({"login_id": id}));
    assert_eq!(p["status"], "denied", "{p}");
    assert!(p["error"].as_str().is_some());
    assert!(!app
        .home
        .join("credentials")
        .join("xai-subscription.json")
        .exists());
    let s = app.call("auth/xai/login/start", Value::Null);
    let id = s["login_id"].as_str().unwrap().to_owned();
    app.call("auth/xai/login/cancel", json!({"login_id": id}));
    let e = app.call_err("auth/xai/login/poll", json!({"login_id": id}));
    assert!(e["message"].as_str().unwrap().contains("unknown"), "{e}");
}

#[test]
fn message_image_read_serves_only_images_beneath_the_conversation() {
    let fake = FakeProvider::start();
    let (mut app, _home) = start(&fake, &[]);
    init(&mut app);
    let th = new_thread(&mut app);
    // A real image outside the workspace, named by the message both ways.
    let outside = app.workdir.parent().unwrap().join("outside.png");
    std::fs::write(&outside, png(20, 10)).unwrap();
    std::fs::write(app.workdir.join("inside.png"), png(20, 10)).unwrap();
    let abs = outside.to_string_lossy().into_owned();
    fake.push(Script::text(&[&format!(
        "![a](../outside.png) ![b]({abs}) ![c](inside.png)"
    )]));
    let r = app.call("turn/start", json!({"thread_id": th, "prompt": "show"}));
    let turn = r["turn"]["id"].as_str().unwrap().to_owned();
    turn_end(&mut app, &turn);
    let resumed = app.call("thread/resume", json!({"session_id": th}));
    let answer_id = resumed["thread"]["turns"][0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "agent_message")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let read = |app: &mut App, source: &str| {
        let p = json!({"kind": "thread", "scope_id": th, "turn_id": turn,
                       "message_id": answer_id, "source": source});
        let id = app.send("message/image/read", p);
        app.response(&id)
    };
    for source in ["../outside.png", abs.as_str()] {
        let r = read(&mut app, source);
        let msg = r["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("outside the conversation"), "{source}: {r}");
    }
    let ok = read(&mut app, "inside.png");
    assert_eq!(ok["result"]["media_type"], "image/png", "{ok}");
}
