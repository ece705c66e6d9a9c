//! End-to-end regression tests for small input-validation and watcher fixes, against
//! the real binary: workspace ids in `thread/start`, symlinks and non-UTF-8 names in
//! `workspace/directory/list`, a removed user config, and control characters in titles
//! and folder names.

mod support;

use serde_json::{json, Value};
use support::app::{config_for, App};

fn app() -> App {
    App::start(Some(config_for("http://127.0.0.1:9/v1")))
}

fn message(e: &Value) -> String {
    e["message"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn thread_start_refuses_workspace_ids_the_flag_refuses() {
    let mut app = app();
    let long = "a".repeat(200);
    for bad in ["../../etc", "a\u{0}b", long.as_str(), "..", "a/b"] {
        let e = app.call_err("thread/start", json!({"workspace_id": bad}));
        assert_eq!(e["code"], "invalid_params", "{bad:?}: {e}");
        assert!(message(&e).contains("workspace_id"), "{bad:?}: {e}");
    }
    // Nothing was stored for the refused starts.
    let list = app.call("thread/list", json!({}));
    assert_eq!(list["threads"].as_array().map(Vec::len), Some(0), "{list}");
    // A valid id (128 chars at the limit) is accepted and reported back.
    let ok = "w".repeat(128);
    let r = app.call("thread/start", json!({"workspace_id": ok}));
    assert_eq!(r["thread"]["workspace_id"], ok.as_str(), "{r}");
    let r = app.call("thread/start", json!({"workspace_id": "proj-1.a_b"}));
    assert_eq!(r["thread"]["workspace_id"], "proj-1.a_b", "{r}");
}

#[test]
fn titles_and_folder_names_refuse_control_characters() {
    let mut app = app();
    let r = app.call("thread/start", json!({}));
    let id = r["thread"]["id"].as_str().unwrap().to_owned();
    for bad in [
        "a\u{0}b",
        "line\nbreak",
        "esc\u{1b}[31m",
        "cr\rx",
        "del\u{7f}",
    ] {
        let e = app.call_err("thread/rename", json!({"thread_id": id, "title": bad}));
        assert_eq!(e["code"], "invalid_params", "{bad:?}: {e}");
        assert!(message(&e).contains("title"), "{bad:?}: {e}");
    }
    // The title was left alone; a tab is fine.
    let list = app.call("thread/list", json!({}));
    assert!(list["threads"][0]["title"].is_null(), "{list}");
    let r = app.call("thread/rename", json!({"thread_id": id, "title": "a\tb"}));
    assert_eq!(r["thread"]["title"], "a\tb", "{r}");

    for bad in ["a\u{0}b", "esc\u{1b}x", "cr\rx"] {
        let e = app.call_err("sessionFolder/create", json!({"name": bad}));
        assert_eq!(e["code"], "invalid_params", "{bad:?}: {e}");
        assert!(message(&e).contains("name"), "{bad:?}: {e}");
    }
    let org = app.call("sessionOrganization/list", json!({}));
    assert_eq!(org["organization"]["folders"], json!([]), "{org}");
    let f = app.call("sessionFolder/create", json!({"name": "Work\tTwo\nLines"}));
    assert_eq!(f["group"]["name"], "Work\tTwo\nLines", "{f}");
    let fid = f["group"]["id"].clone();
    let e = app.call_err("sessionFolder/update", json!({"id": fid, "name": "x\u{0}"}));
    assert_eq!(e["code"], "invalid_params", "{e}");
    let org = app.call("sessionOrganization/list", json!({}));
    assert_eq!(
        org["organization"]["folders"][0]["name"],
        "Work\tTwo\nLines"
    );
}

#[test]
fn removed_user_config_keeps_the_configuration_and_reports_an_error() {
    let mut app = app();
    app.call("initialize", json!({}));
    let path = app.home.join("config.json");
    let kept = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let e = app.notification("config/error");
    assert_eq!(e["params"]["path"], path.to_string_lossy().as_ref(), "{e}");
    assert_eq!(e["params"]["reason"], "the file was removed", "{e}");
    assert!(
        app.backlog.iter().all(|v| v["method"] != "config/changed"),
        "{:?}",
        app.backlog
    );
    let read = app.call("config/read", json!({}));
    assert_eq!(read["provider"], "fake", "{read}");
    assert_eq!(read["model"], "fake-model", "{read}");
    let r = app.call("thread/start", json!({}));
    assert_eq!(r["thread"]["model_provider"], "fake", "{r}");
    // Putting a valid file back applies it again.
    std::fs::write(&path, kept).unwrap();
    let n = app.notification("config/changed");
    assert_eq!(n["params"]["provider"], "fake", "{n}");
}

#[test]
fn directory_list_reports_symlinks_and_skips_non_utf8_names() {
    use std::os::unix::ffi::OsStrExt;
    let mut app = app();
    let ws = app.workdir.clone();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(ws.join("plain.txt"), "x").unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join("out-link")).unwrap();
    std::os::unix::fs::symlink("plain.txt", ws.join("file-link")).unwrap();
    let bad = ws.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
    std::fs::write(&bad, "y").unwrap();
    let l = app.call(
        "workspace/directory/list",
        json!({"path": "", "root": ws.to_string_lossy()}),
    );
    let entries: Vec<(String, String, String)> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
            (s("name"), s("path"), s("kind"))
        })
        .collect();
    let want = |n: &str, p: &str, k: &str| (n.to_owned(), p.to_owned(), k.to_owned());
    assert_eq!(
        entries,
        vec![
            want("sub", "sub/", "directory"),
            want("file-link", "file-link", "symlink"),
            want("out-link", "out-link", "symlink"),
            want("plain.txt", "plain.txt", "file"),
        ],
        "{l}"
    );
}
