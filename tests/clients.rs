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
