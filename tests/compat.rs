//! Compatibility with the wuu desktop and phone clients (issue 12, item 8): replays,
//! against the real binary started as `desktop/src/main/appServerClients.ts` starts it,
//! the call sequences of the desktop's `index.ts` `ipcMain.handle` handlers and of the
//! phone bridge (`clients/mobile-web/src/lib/desktopBridge.ts` through
//! `desktop/src/main/remoteAppServerBridge.ts`), with the params those files build
//! (absent params, `undefined` members dropped, `""` ids), and checks the fields the
//! renderer reads (`AppState.ts` `reduceNotification`, `remoteAttachments.ts`,
//! `remoteHistory.ts`). Every frame is also validated against the JSON Schemas.

mod support;

use base64::Engine as _;
use serde_json::{json, Value};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

/// `BROWSER_REVERSE_RPC_METHODS` of the desktop.
const BROWSER: &[&str] = &[
    "browser/open_tab",
    "browser/close_tab",
    "browser/set_visibility",
    "browser/list_tabs",
    "browser/screenshot",
    "browser/cdp",
];

/// The desktop's client: `client-N` string ids, params exactly as built (None = the
/// `params` member is absent, as `JSON.stringify` drops `undefined`).
struct Desktop {
    app: App,
    next: u64,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Desktop {
    fn send(&mut self, method: &str, params: Option<Value>) -> String {
        self.next += 1;
        let id = format!("client-{}", self.next);
        let mut req = json!({"id": id, "method": method});
        if let Some(p) = params {
            req["params"] = p;
        }
        self.app.write_raw(format!("{}\n", req).as_bytes());
        id
    }

    fn call(&mut self, method: &str, params: Option<Value>) -> Value {
        let id = self.send(method, params);
        let r = self.app.response(&id);
        support::app::check_result(method, &r);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    fn call_err(&mut self, method: &str, params: Option<Value>) -> Value {
        let id = self.send(method, params);
        let r = self.app.response(&id);
        assert!(
            r.get("error").is_some(),
            "{method} unexpectedly succeeded: {r}"
        );
        r["error"].clone()
    }

    fn notification(&mut self, method: &str) -> Value {
        self.app.notification(method)["params"].clone()
    }

    fn wait(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.app.wait_for(what, pred)
    }

    fn turn_end(&mut self, turn_id: &Value) -> Value {
        let t = turn_id.clone();
        self.wait("turn end", move |v| {
            (v["method"] == "turn/completed" || v["method"] == "turn/error")
                && v["params"]["turn"]["id"] == t
        })["params"]
            .clone()
    }
}

/// Starts the server as `AppServerClient.ensureStarted` does.
fn desktop() -> (FakeProvider, Desktop) {
    let fake = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fake.base_url())));
    let app = App::spawn_in(
        home.path(),
        &ws.path().canonicalize().unwrap(),
        &["--workspace-id", "proj-0b9e"],
    );
    (
        fake,
        Desktop {
            app,
            next: 0,
            _dirs: (home, ws),
        },
    )
}

/// What the renderer reads of a thread (`Thread` in AppState.ts, sidebar, windows).
fn check_thread(t: &Value) {
    for k in [
        "id",
        "preview",
        "cwd",
        "status",
        "created_at",
        "updated_at",
        "model",
        "model_provider",
        "permission_mode",
    ] {
        assert!(t[k].is_string(), "thread.{k}: {t}");
    }
    assert!(t["turns"].is_array(), "thread.turns: {t}");
    for turn in t["turns"].as_array().unwrap() {
        check_turn(turn);
    }
}

/// What the renderer reads of a turn (`upsertTurn`, `releaseSettledTurnStreams`).
fn check_turn(t: &Value) {
    assert!(t["id"].is_string(), "turn.id: {t}");
    assert!(t["status"].is_string(), "turn.status: {t}");
    assert!(t["items"].is_array(), "turn.items: {t}");
    for i in t["items"].as_array().unwrap() {
        check_item(i);
    }
}

fn check_item(i: &Value) {
    assert!(i["id"].is_string() && i["type"].is_string(), "item: {i}");
    if i["type"] == "user_message" || i["type"] == "agent_message" {
        assert!(
            i["text"].is_string() || i["remote_content_ref"].is_string(),
            "item.text: {i}"
        );
    }
}

fn b64url_json(s: &str) -> Value {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// `wuu:turn-start`.
fn turn_start(d: &mut Desktop, th: &Value, prompt: &str) -> Value {
    let r = d.call(
        "turn/start",
        Some(json!({"thread_id": th, "prompt": prompt, "images": [], "files": []})),
    );
    check_turn(&r["turn"]);
    assert_eq!(r["turn"]["items"][0]["type"], "user_message");
    r["turn"].clone()
}

#[test]
fn desktop_handlers_replay() {
    let (fake, mut d) = desktop();
    // Boot: wuu:initialize, then the sidebar's listings (no params).
    let init = d.call(
        "initialize",
        Some(json!({"protocol_version": "wuu-app-server/v0.1",
                    "client": {"name": "wuu-desktop", "version": "0.9.0"},
                    "capabilities": {"reverse_rpc": {"methods": BROWSER}}})),
    );
    assert_eq!(init["status"], "ready", "{init}");
    assert_eq!(init["protocol_version"], "wuu-app-server/v0.1");
    assert!(init["core"]["version"].is_string());
    assert_eq!(init["runtime_host"]["kind"], "local");
    assert!(init["workspace_root"].is_string());
    assert!(init["permissions"]["mode"].is_string());
    assert_eq!(init["features"]["browser"], true);
    assert_eq!(init["features"]["user_question"], true);
    for m in ["thread/list", "thread/listArchived", "thread/listAll"] {
        assert_eq!(d.call(m, None)["threads"], json!([]));
    }
    d.call("sessionOrganization/list", None);
    assert_eq!(
        d.call("user-question/list", Some(json!({})))["questions"],
        json!([])
    );
    // New conversation, send.
    let th = d.call("thread/start", Some(json!({})))["thread"].clone();
    check_thread(&th);
    assert_eq!(th["workspace_id"], "proj-0b9e");
    let th_id = th["id"].clone();
    d.notification("thread/started");
    fake.push(Script::text(&["Hello", " there."]));
    let t1 = turn_start(&mut d, &th_id, "hi");
    let started = d.notification("turn/started");
    assert_eq!(started["thread_id"], th_id);
    check_turn(&started["turn"]);
    let end = d.turn_end(&t1["id"]);
    check_turn(&end["turn"]);
    assert_eq!(end["turn"]["status"], "completed");
    assert_eq!(end["content"], "Hello there.");
    let usage = d.notification("turn/usage");
    assert_eq!(usage["turn_id"], t1["id"]);
    for k in [
        "input_tokens",
        "output_tokens",
        "cache_creation_tokens",
        "cache_read_tokens",
        "context_tokens",
    ] {
        assert!(usage[k].is_number(), "turn/usage.{k}: {usage}");
    }
    let ev = d.notification("turn/event");
    assert!(
        ev["event"]["request_context"]["step_index"].is_number(),
        "{ev}"
    );
    // Rename.
    let r = d.call(
        "thread/rename",
        Some(json!({"thread_id": th_id, "title": "Greeting"})),
    );
    assert_eq!(r["thread"]["title"], "Greeting");
    let up = d.notification("thread/updated");
    check_thread(&up["thread"]);
    // Resume (wuu:thread-resume sends only session_id): response + thread/resumed.
    let r = d.call("thread/resume", Some(json!({"session_id": th_id})));
    check_thread(&r["thread"]);
    assert_eq!(r["thread"]["turns"].as_array().unwrap().len(), 1);
    check_thread(&d.notification("thread/resumed")["thread"]);
    // Queue, edit, steer, unsteer, requeue while a command runs.
    fake.push(Script::tool_call("c1", "bash", r#"{"command":"sleep 6"}"#));
    fake.push(Script::text(&["second done"]));
    fake.push(Script::text(&["requeued done"]));
    fake.push(Script::text(&["queued done"]));
    let t2 = turn_start(&mut d, &th_id, "work a bit");
    d.wait("the command", |v| {
        v["method"] == "item/started"
            && v["params"]["item"]["type"] == "tool_call"
            && v["params"]["item"]["arguments"]
                .as_str()
                .is_some_and(|a| a.contains("sleep"))
    });
    let q = d.call(
        "turn/queue",
        Some(
            json!({"thread_id": th_id, "prompt": "afterwards", "images": [], "files": [],
                    "client_id": "local-q1"}),
        ),
    );
    assert_eq!(q["queued"]["id"], "local-q1");
    let r = d.call(
        "turn/update-queued",
        Some(
            json!({"thread_id": th_id, "queue_id": "local-q1", "prompt": "afterwards, edited",
                    "images": [], "files": []}),
        ),
    );
    assert_eq!(r["ok"], true);
    let s = d.call(
        "turn/steer",
        Some(
            json!({"thread_id": th_id, "expected_turn_id": t2["id"], "prompt": "never mind",
                    "images": [], "files": [], "client_id": "local-s1"}),
        ),
    );
    assert_eq!(s["turn_id"], t2["id"]);
    let un = d.call(
        "turn/unsteer",
        Some(json!({"thread_id": th_id, "steer_id": "local-s1"})),
    );
    assert_eq!(un["ok"], true, "{un} {:?}", d.app.backlog);
    d.call(
        "turn/steer",
        Some(
            json!({"thread_id": th_id, "expected_turn_id": t2["id"], "prompt": "later instead",
                    "images": [], "files": [], "client_id": "local-s2"}),
        ),
    );
    let r = d.call(
        "turn/requeue",
        Some(json!({"thread_id": th_id, "steer_id": "local-s2"})),
    );
    assert_eq!(r["state"], "queued");
    let end = d.turn_end(&t2["id"]);
    assert_eq!(end["turn"]["status"], "completed");
    // The queue drains in order: the queued message, then the requeued steer.
    for want in ["afterwards, edited", "later instead"] {
        let w = want.to_owned();
        let st = d.wait("a queued turn", move |v| {
            v["method"] == "turn/started" && v["params"]["turn"]["items"][0]["text"] == json!(w)
        })["params"]
            .clone();
        assert!(st["queue_id"].is_string(), "{st}");
        d.turn_end(&st["turn"]["id"]);
    }
    // Interrupt with held input.
    fake.push(Script::tool_call("c2", "bash", r#"{"command":"sleep 5"}"#));
    let t5 = turn_start(&mut d, &th_id, "long job");
    d.wait("the long command", |v| {
        v["method"] == "item/started"
            && v["params"]["item"]["type"] == "tool_call"
            && v["params"]["item"]["arguments"]
                .as_str()
                .is_some_and(|a| a.contains("sleep"))
            && v["params"]["turn_id"] == json!(t5["id"])
    });
    d.call(
        "turn/queue",
        Some(
            json!({"thread_id": th_id, "prompt": "keep me", "images": [], "files": [],
                    "client_id": "local-q2"}),
        ),
    );
    assert_eq!(
        d.call("turn/interrupt", Some(json!({"thread_id": th_id})))["ok"],
        true
    );
    let held = d.wait("held", |v| {
        v["method"] == "turn/held" && v["params"]["messages"].to_string().contains("keep me")
    });
    assert_eq!(held["params"]["thread_id"], th_id);
    let end = d.turn_end(&t5["id"]);
    assert_eq!(end["turn"]["status"], "interrupted");
    let r = d.call("thread/resume", Some(json!({"session_id": th_id})));
    assert_eq!(r["held_user_messages"][0]["id"], "local-q2");
    assert_eq!(
        d.call(
            "turn/dequeue",
            Some(json!({"thread_id": th_id, "queue_id": "local-q2"}))
        )["ok"],
        true
    );
    // Fork (wuu:thread-fork sends "" for absent ids).
    let f = d.call(
        "thread/fork",
        Some(json!({"thread_id": th_id, "turn_id": t1["id"], "item_id": ""})),
    );
    check_thread(&f["thread"]);
    assert_eq!(f["thread"]["forked_from_id"], th_id);
    assert_eq!(f["thread"]["turns"].as_array().unwrap().len(), 1);
    let fork_id = f["thread"]["id"].clone();
    // Edit a message, pin, organize, preview, context composition.
    let full = d.call("thread/resume", Some(json!({"session_id": fork_id})));
    let first = &full["thread"]["turns"][0];
    let e = d.call(
        "thread/edit-message",
        Some(json!({"thread_id": fork_id, "turn_id": first["id"], "item_id": first["items"][0]["id"]})),
    );
    assert_eq!(e["draft"]["prompt"], "hi");
    check_thread(&e["thread"]);
    assert_eq!(
        d.call(
            "thread/pin",
            Some(json!({"thread_id": th_id, "pinned": true}))
        )["thread"]["pinned"],
        true
    );
    let folder =
        d.call("sessionFolder/create", Some(json!({"name": "Daily"})))["group"]["id"].clone();
    d.call(
        "thread/organization/update",
        Some(json!({"thread_id": th_id, "folder_id": folder})),
    );
    d.call(
        "sessionFolder/update",
        Some(json!({"id": folder, "name": "Every day"})),
    );
    d.call("sessionFolder/reorder", Some(json!({"ids": [folder]})));
    let p = d.call("thread/preview", Some(json!({"thread_id": th_id})));
    assert_eq!(p["turns"].as_array().unwrap().len(), 3);
    let c = d.call(
        "thread/context-composition",
        Some(json!({"thread_id": th_id})),
    );
    assert_eq!(c["available"], true);
    let s = d.call("thread/search", Some(json!({"query": "Greeting"})));
    assert!(
        s["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["thread"]["id"] == th_id),
        "{s}"
    );
    let l = d.call("thread/list", Some(json!({"cwd": d.app.workdir})));
    assert_eq!(l["threads"].as_array().unwrap().len(), 2);
    // Archive (force: undefined is dropped), delete.
    d.call(
        "thread/archive",
        Some(json!({"thread_id": fork_id, "archived": true})),
    );
    assert_eq!(
        d.call("thread/listArchived", None)["threads"][0]["id"],
        fork_id
    );
    assert_eq!(
        d.call("thread/delete", Some(json!({"thread_id": fork_id})))["thread_id"],
        fork_id
    );
    d.call("sessionFolder/delete", Some(json!({"id": folder})));
    // Panels we do not serve answer method_not_found (never a canned empty answer); the
    // ones we serve answer for real.
    for m in [
        "channel/room/list",
        "channel/agent/list",
        "harness/dispatch",
    ] {
        let e = d.call_err(m, Some(json!({"thread_id": th_id})));
        assert_eq!(e["code"], "method_not_found", "{m}: {e}");
    }
    // wuu:project-cleanup-state after removing another project.
    let r = d.call(
        "workspace/state/cleanup",
        Some(json!({"workspace_id": "proj-gone"})),
    );
    assert_eq!(r["removed"], false);
}

#[test]
fn phone_bridge_replay() {
    let (fake, mut d) = desktop();
    let ws = d.app.workdir.to_str().unwrap().to_owned();
    // RemoteDesktopBridge.synchronize: workspace/list {remote_delivery: 1}.
    let w = d.call("workspace/list", Some(json!({"remote_delivery": 1})));
    assert_eq!(w["current"], ws);
    assert_eq!(w["current_id"], "proj-0b9e");
    // The bridge replaces the phone's initialize with the desktop's.
    d.call(
        "initialize",
        Some(json!({"protocol_version": "wuu-app-server/v0.1",
                    "client": {"name": "wuu-desktop", "version": "0.9.0"},
                    "capabilities": {"reverse_rpc": {"methods": BROWSER}}})),
    );
    assert_eq!(
        d.call(
            "thread/list",
            Some(json!({"cwd": ws, "summary_only": true}))
        )["threads"],
        json!([])
    );
    d.call("user-question/list", None);
    // startThread: cwd and workspace_id added by the bridge.
    let th = d.call(
        "thread/start",
        Some(json!({"cwd": ws, "workspace_id": "proj-0b9e"})),
    )["thread"]["id"]
        .clone();
    // 110 turns; turn 50 carries an image, turn 60 a 140 KB answer.
    let png = {
        let img = image::RgbImage::from_fn(700, 500, |x, y| {
            image::Rgb([(x % 251) as u8, (y % 241) as u8, ((x * y) % 239) as u8])
        });
        let mut out = std::io::Cursor::new(vec![]);
        image::DynamicImage::ImageRgb8(img)
            .write_to(&mut out, image::ImageFormat::Png)
            .unwrap();
        base64::engine::general_purpose::STANDARD.encode(out.into_inner())
    };
    let long: String = (0..4600)
        .map(|i| format!("line {i:05} of the long answer.\n"))
        .collect();
    assert!(long.len() > 140_000);
    let mut turn_ids = vec![];
    for i in 0..110 {
        let answer = if i == 60 {
            long.clone()
        } else {
            format!("answer {i}")
        };
        let chunks: Vec<&str> = answer
            .as_bytes()
            .chunks(16 * 1024)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        fake.push(Script::text(&chunks));
        let images = if i == 50 {
            json!([{"media_type": "image/png", "data": png}])
        } else {
            json!([])
        };
        let r = d.call(
            "turn/start",
            Some(json!({"thread_id": th, "prompt": format!("question {i}"), "images": images, "files": []})),
        );
        let id = r["turn"]["id"].clone();
        d.turn_end(&id);
        turn_ids.push(id);
    }
    // resumeThread: {session_id, response_only: true} + history_page: true by the bridge.
    let r = d.call(
        "thread/resume",
        Some(json!({"session_id": th, "response_only": true, "history_page": true})),
    );
    let t = &r["thread"];
    check_thread(t);
    assert_eq!(t["history_paged"], true);
    let mut seen: Vec<Value> = t["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].clone())
        .collect();
    assert!(seen.len() <= 20);
    let mut all_items: Vec<Value> = t["turns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|x| x["items"].as_array().unwrap().clone())
        .collect();
    let mut cursor = t["history_cursor"].as_str().map(str::to_owned);
    // loadEarlierThreadHistory → remote/history/read → thread/history/read.
    while let Some(c) = cursor.take() {
        assert!(c.starts_with("turn:") || c.starts_with("item:"), "{c}");
        let page = d.call(
            "thread/history/read",
            Some(json!({"thread_id": th, "cursor": c})),
        );
        assert_eq!(page["thread_id"], th);
        let turns = page["turns"].as_array().unwrap();
        assert!(!turns.is_empty());
        let mut ids: Vec<Value> = vec![];
        for x in turns {
            check_turn(x);
            all_items.extend(x["items"].as_array().unwrap().clone());
            // A turn split across pages appears on both; count it once.
            if seen.first() != Some(&x["id"]) {
                ids.push(x["id"].clone());
            }
        }
        ids.extend(seen);
        seen = ids;
        cursor = page["history_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, turn_ids, "every turn exactly once, in order");
    // The desktop cuts thread/updated snapshots to 20 turns (remoteHistory.ts) and hands
    // the phone `turn:<id>` of the first retained one.
    let cut = format!("turn:{}", turn_ids[90].as_str().unwrap());
    let older = d.call(
        "thread/history/read",
        Some(json!({"thread_id": th, "cursor": cut})),
    );
    assert_eq!(
        older["turns"].as_array().unwrap().last().unwrap()["id"],
        turn_ids[89]
    );
    // The 140 KB answer through thread/content/read (threadContentParams).
    let big = all_items
        .iter()
        .find(|i| i["remote_content_ref"].is_string())
        .expect("the long answer is sent by reference");
    let rref = big["remote_content_ref"].as_str().unwrap();
    let loc = b64url_json(rref.strip_prefix("content:").unwrap());
    assert_eq!(loc.as_array().unwrap().len(), 4);
    let mut data = String::new();
    let mut total = 1usize;
    while data.len() < total {
        let c = d.call(
            "thread/content/read",
            Some(
                json!({"thread_id": loc[0], "turn_id": loc[1], "item_id": loc[2], "sha256": loc[3],
                        "offset": data.len()}),
            ),
        );
        assert_eq!(c["offset"].as_u64().unwrap() as usize, data.len());
        assert_eq!(c["content_type"], "application/json");
        data.push_str(c["data"].as_str().unwrap());
        total = c["total"].as_u64().unwrap() as usize;
    }
    let item: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(&data)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(item["text"], long);
    // The image through thread/attachment/read (threadAttachmentParams + preview).
    let img = all_items
        .iter()
        .find(|i| i["images"].is_array())
        .expect("the image item");
    let r = img["images"][0]["remote_ref"].as_str().expect("remote_ref");
    let v = b64url_json(r.strip_prefix("thread:").unwrap());
    assert_eq!(v.as_array().unwrap().len(), 5);
    let src =
        json!({"thread_id": v[0], "turn_id": v[1], "item_id": v[2], "index": v[3], "sha256": v[4]});
    let mut got = String::new();
    let mut total = 1usize;
    while got.len() < total {
        let mut p = src.clone();
        p["offset"] = json!(got.len());
        p["preview"] = json!(false);
        let c = d.call("thread/attachment/read", Some(p));
        assert!(
            !c["data"].as_str().unwrap().is_empty()
                && c["offset"].as_u64().unwrap() as usize == got.len()
        );
        got.push_str(c["data"].as_str().unwrap());
        total = c["total"].as_u64().unwrap() as usize;
    }
    assert_eq!(got, png);
    let mut p = src.clone();
    p["offset"] = json!(0);
    p["preview"] = json!(true);
    let pv = d.call("thread/attachment/read", Some(p));
    assert_eq!(pv["content_type"], "image/jpeg");
    assert_eq!(
        pv["total"].as_u64().unwrap() as usize,
        pv["data"].as_str().unwrap().len()
    );
    assert!(pv["total"].as_u64().unwrap() <= 128 * 1024);
    // Rename, interrupt, archive with force, delete — as the phone sends them.
    d.call(
        "thread/rename",
        Some(json!({"thread_id": th, "title": "Long one"})),
    );
    fake.push(Script::stall(
        &["thinking"],
        std::time::Duration::from_secs(20),
    ));
    let r = d.call(
        "turn/start",
        Some(json!({"thread_id": th, "prompt": "more", "images": [], "files": []})),
    );
    let tid = r["turn"]["id"].clone();
    d.wait("a delta", |v| v["method"] == "item/agentMessage/delta");
    let e = d.call_err(
        "thread/archive",
        Some(json!({"thread_id": th, "archived": true})),
    );
    assert_eq!(e["code"], "thread_busy");
    d.call("turn/interrupt", Some(json!({"thread_id": th})));
    assert_eq!(d.turn_end(&tid)["turn"]["status"], "interrupted");
    d.call(
        "thread/archive",
        Some(json!({"thread_id": th, "archived": true, "force": true})),
    );
    assert_eq!(
        d.call("thread/listArchived", Some(json!({"summary_only": true})))["threads"][0]["id"],
        th
    );
    d.call("thread/delete", Some(json!({"thread_id": th})));
    assert_eq!(
        d.call("thread/listAll", Some(json!({"summary_only": true})))["threads"],
        json!([])
    );
}
