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
