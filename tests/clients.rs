//! End-to-end tests of what the wuu desktop and phone clients need (issue 12): the Go
//! app-server flags, the workspace registry, questions offered by default, and (in
//! later sections) history pages, conversation actions and attachments. Every response
//! and notification is validated against the JSON Schemas by `App`.

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use support::app::{config_for, wuu_bin, App};
use support::fake_provider::{FakeProvider, Script};

fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

fn write_config(home: &Path, cfg: &Value) {
    std::fs::write(home.join("config.json"), cfg.to_string()).unwrap();
}

fn canon(p: &Path) -> std::path::PathBuf {
    p.canonicalize().unwrap()
}

/// Runs `wuu app-server ARGS` with stdin closed; returns (exit code, stderr).
fn run_server(home: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(wuu_bin())
        .arg("app-server")
        .args(args)
        .env("WUU_HOME", home)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// ---------------------------------------------------------------------------------------
// Flags
// ---------------------------------------------------------------------------------------

#[test]
fn starts_as_the_desktop_starts_it() {
    let (home, ws) = dirs();
    let fake = FakeProvider::start();
    write_config(home.path(), &config_for(&fake.base_url()));
    let ws = canon(ws.path());
    let mut app = App::spawn_in(
        home.path(),
        &ws,
        &["--workspace-id", "proj-1", "--instance-id", "inst-7"],
    );
    let init = app.call("initialize", json!({"client": {"name": "wuu-desktop"}}));
    assert_eq!(init["status"], "ready", "{init}");
    assert_eq!(
        init["runtime_host"],
        json!({"kind": "local", "instance_id": "inst-7"})
    );
    let th = app.call("thread/start", json!({}))["thread"].clone();
    assert_eq!(th["workspace_id"], "proj-1");
    // The phone names the workspace explicitly.
    let th =
        app.call("thread/start", json!({"cwd": ws, "workspace_id": "proj-1"}))["thread"].clone();
    assert_eq!(th["workspace_id"], "proj-1");
}

#[test]
fn bad_flag_combinations_exit_2_with_the_reason() {
    let (home, ws) = dirs();
    let w = ws.path().to_str().unwrap();
    let (code, err) = run_server(home.path(), &["--workdir", w, "--host", "cloud"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--instance-id") && err.contains("--workspace-id") && err.contains("--config"),
        "{err}"
    );
    let (code, err) = run_server(home.path(), &["--workdir", w, "--host", "moon"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("expected local or cloud"), "{err}");
    let (code, err) = run_server(home.path(), &["--workdir", w, "--workspace-id", "../x"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--workspace-id"), "{err}");
    let (code, err) = run_server(home.path(), &["--workdir", w, "--model"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("model"), "{err}");
}

#[test]
fn cloud_host_and_selection_overrides_are_reported() {
    let (home, ws) = dirs();
    let fake = FakeProvider::start();
    let cfg = config_for(&fake.base_url());
    let cfg_file = home.path().join("cloud.json");
    std::fs::write(&cfg_file, cfg.to_string()).unwrap();
    let ws = canon(ws.path());
    let mut app = App::spawn_in(
        home.path(),
        &ws,
        &[
            "--host",
            "cloud",
            "--instance-id",
            "i-1",
            "--workspace-id",
            "w-1",
            "--config",
            cfg_file.to_str().unwrap(),
            "--provider",
            "fake",
            "--model",
            "other-model",
        ],
    );
    let init = app.call("initialize", json!({}));
    assert_eq!(init["runtime_host"]["kind"], "cloud");
    assert_eq!(init["runtime_host"]["instance_id"], "i-1");
    assert_eq!(init["provider"], "fake");
    assert_eq!(init["model"], "other-model");
    let th = app.call("thread/start", json!({}))["thread"].clone();
    assert_eq!(th["model_provider"], "fake");
    assert_eq!(th["model"], "other-model");
    fake.push(Script::text(&["ok"]));
    let turn = app.call("turn/start", json!({"thread_id": th["id"], "prompt": "hi"}));
    assert_eq!(turn["turn"]["model"], "other-model");
    app.notification("turn/completed");
    assert_eq!(fake.requests()[0].body["model"], "other-model");
    // An unknown --provider is a readiness issue, not a crash.
    drop(app);
    let mut app = App::spawn_in(home.path(), &ws, &["--provider", "nope"]);
    let init = app.call("initialize", json!({}));
    assert_eq!(init["status"], "needs_setup");
    assert!(
        init["issues"].to_string().contains("unknown_provider"),
        "{init}"
    );
}

#[test]
fn no_tools_offers_none_and_refuses_calls() {
    let (home, ws) = dirs();
    let fake = FakeProvider::start();
    write_config(home.path(), &config_for(&fake.base_url()));
    let ws = canon(ws.path());
    let mut app = App::spawn_in(home.path(), &ws, &["--no-tools"]);
    app.call("initialize", json!({}));
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    fake.push(Script::tool_call("c1", "list_files", r#"{"path":"."}"#));
    fake.push(Script::text(&["done"]));
    app.call("turn/start", json!({"thread_id": th, "prompt": "list"}));
    let done = app.notification("turn/completed");
    assert_eq!(done["params"]["turn"]["status"], "completed");
    let reqs = fake.requests();
    let tools = &reqs[0].body["tools"];
    assert!(
        tools.is_null() || tools.as_array().is_some_and(|t| t.is_empty()),
        "{tools}"
    );
    let second = reqs[1].body["messages"].to_string();
    assert!(second.contains("--no-tools"), "{second}");
}

// ---------------------------------------------------------------------------------------
// Workspaces
// ---------------------------------------------------------------------------------------

#[test]
fn workspace_list_and_cleanup() {
    let home = tempfile::tempdir().unwrap();
    let (wa, wb) = dirs();
    let (wa, wb) = (canon(wa.path()), canon(wb.path()));
    let fake = FakeProvider::start();
    write_config(home.path(), &config_for(&fake.base_url()));
    // Project A registers itself and gets a conversation.
    let mut a = App::spawn_in(home.path(), &wa, &["--workspace-id", "proj-a"]);
    let list = a.call("workspace/list", json!({"remote_delivery": 1}));
    assert_eq!(list["current"], wa.to_str().unwrap());
    assert_eq!(list["current_id"], "proj-a");
    assert_eq!(list["workspaces"][0]["path"], wa.to_str().unwrap());
    let ta = a.call("thread/start", json!({}))["thread"]["id"].clone();
    drop(a);
    // Project B lists itself first, then A.
    let mut b = App::spawn_in(home.path(), &wb, &["--workspace-id", "proj-b"]);
    let list = b.call("workspace/list", json!({}));
    assert_eq!(list["current_id"], "proj-b");
    let ws = list["workspaces"].as_array().unwrap();
    assert_eq!(ws.len(), 2, "{list}");
    assert_eq!(ws[0]["id"], "proj-b");
    assert_eq!(ws[1]["id"], "proj-a");
    assert_eq!(ws[1]["path"], wa.to_str().unwrap());
    assert_eq!(ws[1]["name"], wa.file_name().unwrap().to_str().unwrap());
    // Its own state cannot be cleaned.
    let e = b.call_err("workspace/state/cleanup", json!({"workspace_id": "proj-b"}));
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("this server serves"),
        "{e}"
    );
    let e = b.call_err("workspace/state/cleanup", json!({}));
    assert_eq!(e["code"], "invalid_params");
    // The desktop removed A: its state goes, its conversations are archived (kept).
    let r = b.call("workspace/state/cleanup", json!({"workspace_id": "proj-a"}));
    assert_eq!(r["removed"], true);
    assert_eq!(r["data_archived"], true);
    let dir = r["state_dir"].as_str().unwrap();
    assert!(dir.ends_with("proj-a") && !Path::new(dir).exists(), "{r}");
    let archived = b.call("thread/listArchived", json!({}));
    let t = &archived["threads"][0];
    assert_eq!(t["id"], ta);
    assert_eq!(t["archive_reason"], "workspace removed");
    let list = b.call("workspace/list", json!({}));
    assert_eq!(list["workspaces"].as_array().unwrap().len(), 1);
    // Again: nothing left to do.
    let r = b.call("workspace/state/cleanup", json!({"workspace_id": "proj-a"}));
    assert_eq!(r["removed"], false);
    assert_eq!(r["data_archived"], false);
}

#[test]
fn cleanup_never_archives_the_served_workspace_by_another_spelling() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    let ws = app.workdir.clone();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let tid = app.call("thread/start", json!({}))["thread"]["id"].clone();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("link-to-ws");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    let w = ws.to_str().unwrap();
    let name = ws.file_name().unwrap().to_str().unwrap();
    for path in [
        format!("{w}/"),
        format!("{w}//"),
        format!("{w}/."),
        format!("{w}/sub/.."),
        format!("{w}/../{name}"),
        link.to_string_lossy().into_owned(),
        format!("{}/", link.to_string_lossy()),
        // A directory that contains the served workspace.
        ws.parent().unwrap().to_string_lossy().into_owned(),
        "/".to_owned(),
    ] {
        let e = app.call_err("workspace/state/cleanup", json!({"workspace_path": path}));
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("this server serves"),
            "{path}: {e}"
        );
    }
    let e = app.call_err(
        "workspace/state/cleanup",
        json!({"workspace_path": "relative/ws"}),
    );
    assert_eq!(e["code"], "invalid_params", "{e}");
    assert_eq!(
        app.call("thread/listArchived", json!({}))["threads"],
        json!([])
    );
    assert_eq!(app.call("thread/list", json!({}))["threads"][0]["id"], tid);
    // A removed workspace (it no longer exists) is still cleaned up, slash or not.
    let r = app.call(
        "workspace/state/cleanup",
        json!({"workspace_path": format!("{}/gone/", elsewhere.path().display())}),
    );
    assert_eq!(r["data_archived"], false, "{r}");
}

#[test]
fn the_phone_connects_without_a_workspace_id() {
    let mut app = App::start(None);
    let list = app.call("workspace/list", json!({"remote_delivery": 1}));
    assert_eq!(list["current"], app.workdir.to_str().unwrap());
    assert!(list.get("current_id").is_none());
    assert_eq!(list["workspaces"][0]["path"], app.workdir.to_str().unwrap());
    assert!(
        app.call_err("workspace/list", json!({"bogus": 1}))["message"]
            .as_str()
            .unwrap()
            .contains("bogus")
    );
}

// ---------------------------------------------------------------------------------------
// History pages as the clients read them
// ---------------------------------------------------------------------------------------

/// A server with the fake provider, initialized as the desktop does.
fn setup() -> (FakeProvider, App) {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    app.call(
        "initialize",
        json!({"protocol_version": "wuu-app-server/v0.1",
               "client": {"name": "wuu-desktop", "version": "test"},
               "capabilities": {"reverse_rpc": {"methods": []}}}),
    );
    (fake, app)
}

/// Runs one turn to its end; returns the settled turn.
fn run_turn(app: &mut App, th: &Value, params: Value) -> Value {
    let mut p = params;
    p["thread_id"] = th.clone();
    let started = app.call("turn/start", p);
    let tid = started["turn"]["id"].clone();
    let done = app.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == tid
    });
    done["params"]["turn"].clone()
}

fn b64url_json(s: &str) -> Value {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn png_b64(w: u32, h: u32) -> String {
    use base64::Engine as _;
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([
            (x * 7 % 256) as u8,
            (y * 13 % 256) as u8,
            ((x ^ y) % 256) as u8,
        ])
    });
    let mut out = std::io::Cursor::new(vec![]);
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

#[test]
fn history_page_keeps_tool_items_and_speaks_go_cursors() {
    let (fake, mut app) = setup();
    std::fs::write(app.workdir.join("a.txt"), "x").unwrap();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    // 25 turns; the last one uses a tool.
    for i in 0..24 {
        fake.push(Script::text(&[&format!("answer {i}")]));
        run_turn(&mut app, &th, json!({"prompt": format!("q{i}")}));
    }
    fake.push(Script::tool_call("c1", "list_files", r#"{"path":"."}"#));
    fake.push(Script::text(&["listed"]));
    let last = run_turn(&mut app, &th, json!({"prompt": "list"}));
    // The phone's resume: every item, 20 turns, a Go cursor, no broadcast.
    let r = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true, "history_page": true}),
    );
    let t = &r["thread"];
    assert_eq!(t["history_paged"], true);
    let turns = t["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 20);
    let types: Vec<&str> = turns[19]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"tool_call"), "{types:?}");
    assert!(!types.contains(&"process_summary"), "{types:?}");
    assert_eq!(turns[19]["id"], last["id"]);
    let cursor = t["history_cursor"].as_str().unwrap();
    assert_eq!(cursor, format!("turn:{}", turns[0]["id"].as_str().unwrap()));
    let older = app.call(
        "thread/history/read",
        json!({"thread_id": th, "cursor": cursor}),
    );
    assert_eq!(older["cursor"], cursor);
    assert_eq!(older["turns"].as_array().unwrap().len(), 5);
    assert!(older.get("history_cursor").is_none());
    // The desktop bridge cuts thread/updated snapshots itself and hands the phone a
    // `turn:` cursor of any turn.
    let mid = turns[10]["id"].as_str().unwrap();
    let page = app.call(
        "thread/history/read",
        json!({"thread_id": th, "cursor": format!("turn:{mid}")}),
    );
    assert_eq!(page["turns"].as_array().unwrap().len(), 15);
    // `item:` cursors start inside a turn.
    let items = turns[19]["items"].as_array().unwrap();
    let item_id = items[1]["id"].as_str().unwrap();
    use base64::Engine as _;
    let c = format!(
        "item:{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!([last["id"], item_id]).to_string())
    );
    let page = app.call("thread/history/read", json!({"thread_id": th, "cursor": c}));
    let pt = page["turns"].as_array().unwrap();
    let tail = pt.last().unwrap();
    assert_eq!(tail["id"], last["id"]);
    assert_eq!(tail["items"].as_array().unwrap().len(), 1, "{tail}");
    if let Some(next) = page["history_cursor"].as_str() {
        assert!(
            next.starts_with("turn:") || next.starts_with("item:"),
            "{next}"
        );
    }
    // Garbage and vanished boundaries.
    let e = app.call_err(
        "thread/history/read",
        json!({"thread_id": th, "cursor": "item:!!"}),
    );
    assert_eq!(e["code"], "invalid_params");
    let e = app.call_err(
        "thread/history/read",
        json!({"thread_id": th, "cursor": "turn:nope"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("history changed"),
        "{e}"
    );
    // conversation_history keeps folding.
    let r = app.call(
        "thread/resume",
        json!({"session_id": th, "conversation_history": true}),
    );
    let tail = r["thread"]["turns"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        tail["items"].to_string().contains("process_summary"),
        "{tail}"
    );
    // No thread/resumed was broadcast for the paged reads.
    assert!(!app.seen.iter().any(|v| v["method"] == "thread/resumed"));
}

#[test]
fn large_images_go_by_reference_and_read_back_in_slices() {
    let (fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    let png = png_b64(900, 700);
    assert!(png.len() > 200 * 1024, "{}", png.len());
    fake.push(Script::text(&["nice picture"]));
    let turn = run_turn(
        &mut app,
        &th,
        json!({"prompt": "look", "images": [{"media_type": "image/png", "data": png}], "files": []}),
    );
    let r = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true, "history_page": true}),
    );
    let item = &r["thread"]["turns"][0]["items"][0];
    assert_eq!(item["type"], "user_message");
    let img = &item["images"][0];
    assert_eq!(img["data"], "");
    let rref = img["remote_ref"].as_str().unwrap();
    let loc = b64url_json(rref.strip_prefix("thread:").unwrap());
    assert_eq!(loc[0], th);
    assert_eq!(loc[1], turn["id"]);
    assert_eq!(loc[2], item["id"]);
    assert_eq!(loc[3], 0);
    // The desktop bridge's read loop (remoteAppServerBridge.ts).
    let params = |offset: usize, preview: bool| {
        json!({"thread_id": loc[0], "turn_id": loc[1], "item_id": loc[2], "index": loc[3],
               "sha256": loc[4], "offset": offset, "preview": preview})
    };
    let mut got = String::new();
    let mut total = 1;
    while got.len() < total {
        let c = app.call("thread/attachment/read", params(got.len(), false));
        assert_eq!(c["offset"].as_u64().unwrap() as usize, got.len());
        assert_eq!(c["content_type"], "image/png");
        let d = c["data"].as_str().unwrap();
        assert!(!d.is_empty() && d.len() <= 128 * 1024);
        got.push_str(d);
        total = c["total"].as_u64().unwrap() as usize;
    }
    assert_eq!(got, png);
    // The phone's preview: one JPEG slice no larger than 384 px.
    let p = app.call("thread/attachment/read", params(0, true));
    assert_eq!(p["content_type"], "image/jpeg");
    let data = p["data"].as_str().unwrap();
    assert_eq!(p["total"].as_u64().unwrap() as usize, data.len());
    assert!(data.len() <= 128 * 1024);
    use base64::Engine as _;
    let jpeg = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let im = image::load_from_memory(&jpeg).unwrap();
    assert!(im.width() <= 384 && im.height() <= 384);
    assert_eq!(im.width(), 384);
    // A stale reference.
    let mut bad = params(0, false);
    bad["sha256"] = json!("0".repeat(64));
    let e = app.call_err("thread/attachment/read", bad);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("attachment changed"),
        "{e}"
    );
    // Previews of the conversation carry the reference too.
    let pv = app.call("thread/preview", json!({"thread_id": th, "limit": 1}));
    assert_eq!(pv["turns"].as_array().unwrap().len(), 1);
    assert_eq!(pv["turns"][0]["items"][0]["images"][0]["remote_ref"], rref);
}

// ---------------------------------------------------------------------------------------
// Event shapes the renderer reads (AppState.ts reduceNotification)
// ---------------------------------------------------------------------------------------

#[test]
fn turn_events_nest_and_usage_carries_the_context_meter() {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["providers"]["fake"]["context_window"] = json!(128_000);
    let mut app = App::start(Some(cfg));
    app.call("initialize", json!({}));
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    fake.push(
        Script::text(&["hi"]).usage(support::fake_provider::FakeUsage {
            input: 1500,
            cached: 1000,
            output: 7,
            reasoning: 0,
        }),
    );
    run_turn(&mut app, &th, json!({"prompt": "hello"}));
    let events: Vec<Value> = app
        .seen
        .iter()
        .filter(|v| v["method"] == "turn/event")
        .map(|v| v["params"]["event"].clone())
        .collect();
    let rc = events
        .iter()
        .find(|e| e["type"] == "request_context")
        .expect("request_context");
    // requestContextDigestFromRecord needs these four numbers.
    for k in [
        "step_index",
        "message_count",
        "stable_prefix",
        "turn_prefix",
    ] {
        assert!(rc["request_context"][k].is_number(), "{k}: {rc}");
    }
    assert!(
        rc["request_context"]["prompt_cache_key"].is_string(),
        "{rc}"
    );
    assert!(rc.get("step_index").is_none(), "flat fields remain: {rc}");
    let ps = events
        .iter()
        .find(|e| e["type"] == "provider_state")
        .expect("provider_state");
    assert_eq!(ps["provider_state"]["transport"], "sse");
    assert_eq!(ps["provider_state"]["fallback_active"], false);
    let usage = app
        .seen
        .iter()
        .rev()
        .find(|v| v["method"] == "turn/usage")
        .unwrap()["params"]
        .clone();
    assert_eq!(usage["context_window_tokens"], 128_000);
    assert_eq!(usage["context_tokens"], 1500, "{usage}");
    assert_eq!(usage["output_tokens"], 7);
}

// ---------------------------------------------------------------------------------------
// Conversation actions
// ---------------------------------------------------------------------------------------

#[test]
fn pins_and_folders_persist() {
    let (_fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    let r = app.call("thread/pin", json!({"thread_id": th, "pinned": true}));
    assert_eq!(r["thread"]["pinned"], true);
    let up = app.notification("thread/updated");
    assert_eq!(up["params"]["thread"]["pinned"], true);
    let org = app.call("sessionOrganization/list", json!({}));
    assert_eq!(org["organization"]["folders"], json!([]));
    let a = app.call("sessionFolder/create", json!({"name": "  Work  "}));
    assert_eq!(a["group"]["name"], "Work");
    assert_eq!(a["group"]["sort_order"], 0);
    let fa = a["group"]["id"].clone();
    let b = app.call("sessionFolder/create", json!({"name": "Later"}));
    let fb = b["group"]["id"].clone();
    assert_eq!(b["organization"]["folders"].as_array().unwrap().len(), 2);
    let e = app.call_err("sessionFolder/create", json!({"name": " "}));
    assert_eq!(e["code"], "invalid_params");
    let r = app.call("sessionFolder/update", json!({"id": fa, "name": "Work 2"}));
    assert_eq!(r["group"]["name"], "Work 2");
    let r = app.call("sessionFolder/reorder", json!({"ids": [fb, fa]}));
    assert_eq!(r["organization"]["folders"][0]["id"], fb);
    let e = app.call_err("sessionFolder/reorder", json!({"ids": [fb]}));
    assert_eq!(e["code"], "invalid_params");
    let r = app.call(
        "thread/organization/update",
        json!({"thread_id": th, "folder_id": fa}),
    );
    assert_eq!(r["thread"]["folder_id"], fa);
    let e = app.call_err(
        "thread/organization/update",
        json!({"thread_id": th, "folder_id": "fld_nope"}),
    );
    assert_eq!(e["code"], "invalid_params");
    // Listings carry the organization; a restart keeps it.
    app.restart();
    app.call("initialize", json!({}));
    let l = app.call("thread/list", json!({"summary_only": true}));
    assert_eq!(l["threads"][0]["pinned"], true);
    assert_eq!(l["threads"][0]["folder_id"], fa);
    let org = app.call("sessionOrganization/list", json!({}));
    assert_eq!(org["organization"]["folders"][0]["id"], fb);
    assert_eq!(org["organization"]["folders"][1]["name"], "Work 2");
    // Deleting the folder moves the conversation out of it.
    let r = app.call("sessionFolder/delete", json!({"id": fa}));
    assert_eq!(r["organization"]["folders"].as_array().unwrap().len(), 1);
    let up = app.notification("thread/updated");
    assert_eq!(up["params"]["thread"]["id"], th);
    assert!(up["params"]["thread"].get("folder_id").is_none());
    let e = app.call_err("sessionFolder/delete", json!({"id": fa}));
    assert_eq!(e["code"], "invalid_params");
    let r = app.call("thread/pin", json!({"thread_id": th, "pinned": false}));
    assert!(r["thread"].get("pinned").is_none());
    // Clearing a folder with an absent id.
    app.call(
        "thread/organization/update",
        json!({"thread_id": th, "folder_id": fb}),
    );
    let r = app.call("thread/organization/update", json!({"thread_id": th}));
    assert!(r["thread"].get("folder_id").is_none());
}

#[test]
fn edit_message_rewinds_and_the_model_forgets() {
    let (fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    for (q, a) in [
        ("first question", "first answer"),
        ("second question", "second answer"),
        ("third", "third answer"),
    ] {
        fake.push(Script::text(&[a]));
        run_turn(&mut app, &th, json!({"prompt": q}));
    }
    let full = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let turns = full["thread"]["turns"].as_array().unwrap().clone();
    let second = &turns[1];
    let r = app.call(
        "thread/edit-message",
        json!({"thread_id": th, "turn_id": second["id"], "item_id": second["items"][0]["id"]}),
    );
    assert_eq!(r["draft"]["prompt"], "second question");
    assert_eq!(r["thread"]["turns"].as_array().unwrap().len(), 1);
    app.notification("thread/updated");
    let e = app.call_err(
        "thread/edit-message",
        json!({"thread_id": th, "turn_id": second["id"], "item_id": second["items"][0]["id"]}),
    );
    assert_eq!(e["code"], "invalid_params");
    // The edited message goes out again; the model sees only the first exchange.
    fake.push(Script::text(&["edited answer"]));
    run_turn(&mut app, &th, json!({"prompt": "second question, edited"}));
    let last = fake.requests().last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("first answer") && last.contains("edited"),
        "{last}"
    );
    assert!(
        !last.contains("second answer") && !last.contains("third answer"),
        "{last}"
    );
    // Persisted: a restart sees the rewound history.
    app.restart();
    let full = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let texts = full["thread"]["turns"].to_string();
    assert!(!texts.contains("third answer"), "{texts}");
    assert_eq!(full["thread"]["turns"].as_array().unwrap().len(), 2);
}

#[test]
fn editing_a_steer_cuts_its_turn_at_the_steer_and_keeps_the_start_stored() {
    // A steer sent while a tool runs joins the running turn; editing it rewinds to it:
    // the turn keeps what came before (its prompt and the tool call), in the store too.
    let (fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    fake.push(Script::tool_call("c1", "bash", r#"{"command":"sleep 2"}"#));
    fake.push(Script::text(&["done after the steer"]));
    let started = app.call("turn/start", json!({"thread_id": th, "prompt": "work"}));
    let turn = started["turn"]["id"].clone();
    app.wait_for("bash started", |v| {
        v["method"] == "item/started" && v["params"]["item"]["type"] == "tool_call"
    });
    app.call(
        "turn/steer",
        json!({"thread_id": th, "expected_turn_id": turn, "prompt": "also this", "client_id": "s-1",
               "images": [], "files": []}),
    );
    app.notification("turn/steered");
    let done = app.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == turn
    });
    let items = done["params"]["turn"]["items"].as_array().unwrap().clone();
    let ids = |items: &[Value]| -> Vec<String> {
        items
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let steer = items
        .iter()
        .rposition(|i| i["type"] == "user_message")
        .unwrap();
    assert!(steer > 0, "{done}");
    // What the turn keeps: its items before the steer (its prompt, and the tool call
    // when that was recorded first).
    let kept = ids(&items[..steer]);
    let r = app.call(
        "thread/edit-message",
        json!({"thread_id": th, "turn_id": turn, "item_id": items[steer]["id"]}),
    );
    assert_eq!(r["draft"]["prompt"], "also this");
    let turn_items = |t: &Value| ids(t["items"].as_array().unwrap());
    assert_eq!(turn_items(&r["thread"]["turns"][0]), kept);
    app.notification("thread/updated");
    // Stored: a restart reads the same cut.
    app.restart();
    let full = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    let t = &full["thread"]["turns"][0];
    assert_eq!(turn_items(t), kept, "{t}");
    assert!(t.to_string().contains("work"), "{t}");
    assert!(!t.to_string().contains("also this"), "{t}");
}

#[test]
fn context_composition_breaks_down_the_next_request() {
    let (fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    fake.push(Script::text(&["an answer"]));
    run_turn(&mut app, &th, json!({"prompt": "a question"}));
    let c = app.call("thread/context-composition", json!({"thread_id": th}));
    assert_eq!(c["available"], true);
    assert_eq!(c["thread_id"], th);
    let ids: Vec<&str> = c["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    for want in ["system", "tools", "user", "assistant"] {
        assert!(ids.contains(&want), "{ids:?}");
    }
    let sum: u64 = c["categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(c["total_bytes"].as_u64().unwrap(), sum);
    assert!(c["estimated_tokens"].as_u64().unwrap() > 0);
    assert_eq!(c["request_context"]["message_count"], 2);
    assert!(c["last_context_tokens"].is_number(), "{c}");
}

#[test]
fn requeue_turns_a_pending_steer_into_the_next_turn() {
    let (fake, mut app) = setup();
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    fake.push(Script::tool_call("c1", "bash", r#"{"command":"sleep 4"}"#));
    fake.push(Script::text(&["first done"]));
    fake.push(Script::text(&["queued done"]));
    let started = app.call("turn/start", json!({"thread_id": th, "prompt": "work"}));
    let turn = started["turn"]["id"].clone();
    app.wait_for("bash started", |v| {
        v["method"] == "item/started"
            && v["params"]["item"]["type"] == "tool_call"
            && v["params"]["item"]["arguments"]
                .as_str()
                .is_some_and(|a| a.contains("sleep"))
    });
    app.call(
        "turn/steer",
        json!({"thread_id": th, "expected_turn_id": turn, "prompt": "also this", "client_id": "s-9",
               "images": [], "files": []}),
    );
    app.notification("turn/steered");
    let r = app.call("turn/requeue", json!({"thread_id": th, "steer_id": "s-9"}));
    assert_eq!(r["ok"], true);
    assert_eq!(r["state"], "queued");
    assert_eq!(r["queued"]["id"], "s-9");
    app.notification("turn/unsteered");
    let q = app.notification("turn/queued");
    assert_eq!(q["params"]["queued"]["id"], "s-9");
    let done = app.wait_for("first turn", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == turn
    });
    // The steer did not enter the first turn.
    assert!(!done["params"]["turn"].to_string().contains("also this"));
    let first = turn.clone();
    let next = app.wait_for("the queued turn", move |v| {
        v["method"] == "turn/started" && v["params"]["turn"]["id"] != first
    });
    assert_eq!(next["params"]["queue_id"], "s-9");
    let second = next["params"]["turn"]["id"].clone();
    let done = app.wait_for("queued turn", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == second
    });
    assert!(done["params"]["turn"].to_string().contains("also this"));
    let e = app.call_err(
        "turn/requeue",
        json!({"thread_id": th, "steer_id": "s-404"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("no pending steer"),
        "{e}"
    );
}

#[test]
fn deferred_content_stops_inline_image_echoes() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(config_for(&fake.base_url())));
    app.call(
        "initialize",
        json!({"capabilities": {"deferred_notification_content": true}}),
    );
    let th = app.call("thread/start", json!({}))["thread"]["id"].clone();
    let png = png_b64(1400, 1000);
    assert!(png.len() > 1024 * 1024, "{}", png.len());
    fake.push(Script::text(&["seen"]));
    let id = app.send(
        "turn/start",
        json!({"thread_id": th, "prompt": "what is this",
               "images": [{"media_type": "image/png", "data": png}]}),
    );
    let r = app.response(&id);
    let img = &r["result"]["turn"]["items"][0]["images"][0];
    assert_eq!(img["data"], "", "response echoes the image");
    let rref = img["remote_ref"].as_str().unwrap().to_owned();
    let tid = r["result"]["turn"]["id"].clone();
    app.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == tid
    });
    // No frame carried the image inline.
    let biggest = app.seen.iter().map(|v| v.to_string().len()).max().unwrap();
    assert!(biggest < 64 * 1024, "a frame of {biggest} bytes");
    let started = app
        .seen
        .iter()
        .find(|v| v["method"] == "turn/started")
        .unwrap();
    assert_eq!(
        started["params"]["turn"]["items"][0]["images"][0]["remote_ref"],
        rref
    );
    // The model still got the image.
    assert!(fake.requests()[0].body.to_string().len() > png.len());
    // The reference reads back.
    let loc = b64url_json(rref.strip_prefix("thread:").unwrap());
    let c = app.call(
        "thread/attachment/read",
        json!({"thread_id": loc[0], "turn_id": loc[1], "item_id": loc[2], "index": loc[3],
               "sha256": loc[4], "offset": 0}),
    );
    assert_eq!(c["total"].as_u64().unwrap() as usize, png.len());
    // Without the capability the desktop gets its images inline, as before.
    app.call("initialize", json!({"capabilities": {}}));
    let full = app.call(
        "thread/resume",
        json!({"session_id": th, "response_only": true}),
    );
    assert_eq!(
        full["thread"]["turns"][0]["items"][0]["images"][0]["data"]
            .as_str()
            .unwrap()
            .len(),
        png.len()
    );
}
