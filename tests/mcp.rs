//! MCP end to end: the real binary speaks to real MCP servers — the npm
//! `@modelcontextprotocol/server-everything` over stdio, the Python SDK's server over
//! streamable HTTP, a scripted fake for faults, and a loopback fake OAuth authorization
//! server — while a fake provider plays the model.
//!
//! The npm and PyPI packages come from `WUU_TEST_MCP_NPM_DIR` (an `npm --prefix`
//! folder with `@modelcontextprotocol/server-everything` and `server-filesystem`) and
//! `WUU_TEST_MCP_PY_DIR` (a `pip --target` folder with `mcp`); `.ci/run` installs both.
//! A test that needs one prints why and returns when it is absent.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

fn npm_bin(name: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("WUU_TEST_MCP_NPM_DIR") else {
        eprintln!("skipped: WUU_TEST_MCP_NPM_DIR is not set (npm MCP servers not installed)");
        return None;
    };
    let p = PathBuf::from(dir).join("node_modules/.bin").join(name);
    if !p.exists() {
        eprintln!("skipped: {} is absent", p.display());
        return None;
    }
    Some(p)
}

fn py_dir() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("WUU_TEST_MCP_PY_DIR") else {
        eprintln!("skipped: WUU_TEST_MCP_PY_DIR is not set (the Python mcp SDK is not installed)");
        return None;
    };
    let p = PathBuf::from(dir);
    if !p.join("mcp").exists() {
        eprintln!("skipped: {} holds no mcp package", p.display());
        return None;
    }
    Some(p)
}

fn support_file(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Python SDK's server on 127.0.0.1, killed when dropped.
struct PyServer {
    child: Child,
    url: String,
}

impl PyServer {
    fn start(sdk: &Path) -> PyServer {
        let port = free_port();
        let child = Command::new("python3")
            .arg(support_file("http_mcp.py"))
            .arg(sdk)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "the Python MCP server did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        PyServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn with_mcp(fp: &FakeProvider, servers: Value) -> Value {
    let mut cfg = config_for(&fp.base_url());
    cfg["mcp_servers"] = servers;
    cfg
}

fn start_thread(app: &mut App, params: Value) -> String {
    let r = app.call("thread/start", params);
    r["thread"]["id"].as_str().unwrap().to_owned()
}

/// Runs one turn and returns its final `turn/completed` (or `turn/error`) params.
fn turn(app: &mut App, tid: &str, prompt: &str) -> Value {
    app.call("turn/start", json!({"thread_id": tid, "prompt": prompt}));
    let v = app.wait_for("turn end", |v| {
        (v["method"] == "turn/completed" || v["method"] == "turn/error")
            && v["params"]["thread_id"] == json!(tid)
    });
    assert_eq!(v["method"], "turn/completed", "{v}");
    v["params"].clone()
}

fn tool_items(t: &Value) -> Vec<Value> {
    t["turn"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "tool_call")
        .cloned()
        .collect()
}

fn server<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {list}"))
}

/// Pids of the processes below `root` whose command line contains `needle`.
fn descendants_matching(root: u32, needle: &str) -> Vec<u32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).contains(needle) {
            continue;
        }
        let mut p = pid;
        for _ in 0..20 {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(0);
            if ppid == root {
                out.push(pid);
                break;
            }
            if ppid <= 1 {
                break;
            }
            p = ppid;
        }
    }
    out
}

/// The acceptance path: one turn calls a tool of server-everything (stdio) and one of a
/// streamable-HTTP server; both results are in history; `mcp/list` shows both with
/// their tools; a killed server is reported and the next turn without it works.
#[test]
fn a_turn_uses_stdio_and_http_servers_and_survives_a_killed_one() {
    let (Some(everything), Some(sdk)) = (npm_bin("mcp-server-everything"), py_dir()) else {
        return;
    };
    let py = PyServer::start(&sdk);
    let fp = FakeProvider::start();
    let cfg = with_mcp(
        &fp,
        json!({
            "everything": {"command": everything, "args": ["stdio"]},
            "weather": {"url": py.url},
        }),
    );
    let mut app = App::start(Some(cfg));
    let tid = start_thread(&mut app, json!({}));
    // Nothing is started before a turn needs tools.
    let list = app.call("mcp/list", json!({}));
    assert_eq!(server(&list, "everything")["state"], "stopped", "{list}");
    assert_eq!(server(&list, "weather")["transport"], "streamable_http");

    fp.push(Script::tool_calls(&[
        (
            "call_1",
            "mcp__everything__echo",
            r#"{"message":"hi-marker-77"}"#,
        ),
        ("call_2", "mcp__weather__forecast", r#"{"city":"Paris"}"#),
    ]));
    fp.push(Script::text(&["Both done."]));
    let t = turn(&mut app, &tid, "use both");
    let calls = tool_items(&t);
    assert_eq!(calls.len(), 2, "{t}");
    assert_eq!(calls[0]["status"], "completed", "{}", calls[0]);
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("hi-marker-77"),
        "{}",
        calls[0]
    );
    assert!(
        calls[1]["result"]
            .as_str()
            .unwrap()
            .contains("sunny in Paris (http-marker-51)"),
        "{}",
        calls[1]
    );
    // The model saw both results in the next request.
    let reqs = fp.requests();
    let body = reqs[1].body.to_string();
    assert!(
        body.contains("hi-marker-77") && body.contains("http-marker-51"),
        "{body}"
    );
    // And the tools were offered with their schemas.
    let tools = reqs[0].body["tools"].to_string();
    assert!(
        tools.contains("mcp__everything__echo") && tools.contains("mcp__weather__forecast"),
        "{}",
        reqs[0].body
    );
    // History (what a client resuming the conversation reads) keeps both results.
    let h = app.call("thread/resume", json!({"session_id": tid}));
    let hs = h.to_string();
    assert!(
        hs.contains("hi-marker-77") && hs.contains("http-marker-51"),
        "{hs}"
    );

    let list = app.call("mcp/list", json!({}));
    let ev = server(&list, "everything");
    assert_eq!(ev["state"], "ready", "{list}");
    assert_eq!(ev["connected"], true);
    assert!(ev["tool_count"].as_u64().unwrap() >= 5, "{ev}");
    assert!(ev["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "echo" && t["read_only"] == true));
    let w = server(&list, "weather");
    assert_eq!(w["state"], "ready", "{list}");
    assert_eq!(w["tool_count"], 1);
    assert_eq!(w["tools"][0]["model_name"], "mcp__weather__forecast");

    // Kill the stdio server: it is reported, and a turn that does not use it works.
    let pids = descendants_matching(app.child.id(), "server-everything");
    assert!(
        !pids.is_empty(),
        "no server-everything process under the host"
    );
    for p in &pids {
        let _ = Command::new("kill").arg("-9").arg(p.to_string()).status();
    }
    let n = app.wait_for("everything reported dead", |v| {
        v["method"] == "mcp/status/updated"
            && v["params"]["name"] == "everything"
            && v["params"]["state"] == "error"
    });
    assert!(
        n["params"]["error"].as_str().unwrap().contains("exited"),
        "{n}"
    );
    fp.push(Script::tool_call(
        "call_3",
        "mcp__weather__forecast",
        r#"{"city":"Oslo"}"#,
    ));
    fp.push(Script::text(&["Still fine."]));
    let t = turn(&mut app, &tid, "weather only");
    assert_eq!(t["turn"]["status"], "completed", "{t}");
    let calls = tool_items(&t);
    assert!(calls[0]["result"]
        .as_str()
        .unwrap()
        .contains("sunny in Oslo"));
    // The dead server's tools are no longer offered.
    let last = fp.requests().last().unwrap().body["tools"].to_string();
    assert!(!last.contains("mcp__everything__echo"), "{last}");
    // A refresh brings it back.
    let r = app.call("mcp/refresh", json!({"name": "everything"}));
    assert_eq!(r["status"]["state"], "ready", "{r}");

    // The remote server goes away: the call that finds out fails clearly, the server is
    // reported, and the next turn does without it.
    drop(py);
    fp.push(Script::tool_call(
        "call_4",
        "mcp__weather__forecast",
        r#"{"city":"Rome"}"#,
    ));
    fp.push(Script::text(&["Noted."]));
    let t = turn(&mut app, &tid, "weather again");
    let calls = tool_items(&t);
    assert_eq!(calls[0]["status"], "failed", "{}", calls[0]);
    assert!(
        calls[0]["result"].as_str().unwrap().contains("weather"),
        "{}",
        calls[0]
    );
    let list = app.call("mcp/list", json!({}));
    assert_eq!(server(&list, "weather")["state"], "error", "{list}");
    fp.push(Script::tool_call(
        "call_5",
        "mcp__everything__echo",
        r#"{"message":"after"}"#,
    ));
    fp.push(Script::text(&["Fine."]));
    let t = turn(&mut app, &tid, "echo");
    assert!(tool_items(&t)[0]["result"]
        .as_str()
        .unwrap()
        .contains("after"));
}

/// A stdio server dies with the host, even when the host is killed with SIGKILL.
#[test]
fn stdio_servers_die_with_the_host() {
    let fp = FakeProvider::start();
    let mut app = App::start(Some(faulty_config(&fp, json!({}))));
    let r = app.call("mcp/connect", json!({"name": "faulty"}));
    assert_eq!(r["status"]["state"], "ready", "{r}");
    let pids = descendants_matching(app.child.id(), "fake_mcp.py");
    assert!(!pids.is_empty());
    app.child.kill().unwrap();
    let _ = app.child.wait();
    let until = Instant::now() + Duration::from_secs(10);
    while pids
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}/stat")).exists() && !zombie(*p))
    {
        assert!(Instant::now() < until, "the MCP server outlived its host");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn faulty_config(fp: &FakeProvider, extra: Value) -> Value {
    let mut entry = json!({
        "command": "python3",
        "args": [support_file("fake_mcp.py")],
        "env": {"FAKE_MCP_VAR": "from-entry-42"},
        "tool_timeout_ms": 1500,
    });
    if let Value::Object(m) = extra {
        for (k, v) in m {
            entry[k] = v;
        }
    }
    with_mcp(fp, json!({"faulty": entry}))
}

/// A server that hangs, sends 10 MB, sends malformed JSON or crashes mid-call gives a
/// clear tool error each time; the turn and the host go on.
#[test]
fn hangs_huge_results_malformed_json_and_crashes_are_tool_errors() {
    let fp = FakeProvider::start();
    let mut app = App::start_with_env(
        Some(faulty_config(&fp, json!({}))),
        &[("FAKE_SECRET_TOKEN", "should-not-leak-1234")],
    );
    let tid = start_thread(&mut app, json!({"permission_mode": "unconfined"}));
    fp.push(Script::tool_call("c1", "mcp__faulty__hang", "{}"));
    fp.push(Script::tool_call("c2", "mcp__faulty__huge", "{}"));
    fp.push(Script::tool_call("c3", "mcp__faulty__malformed", "{}"));
    fp.push(Script::tool_call(
        "c4",
        "mcp__faulty__ok",
        r#"{"text":"still-up"}"#,
    ));
    fp.push(Script::tool_call("c5", "mcp__faulty__crash", "{}"));
    fp.push(Script::text(&["Survived."]));
    let t = turn(&mut app, &tid, "break things");
    let calls = tool_items(&t);
    assert_eq!(calls.len(), 5, "{t}");
    let res = |i: usize| calls[i]["result"].as_str().unwrap_or_default().to_owned();
    assert!(
        res(0).contains("did not answer tools/call within 1500 ms"),
        "{}",
        res(0)
    );
    assert!(res(1).contains("over the limit"), "{}", res(1));
    assert!(res(2).contains("malformed JSON"), "{}", res(2));
    assert!(
        res(3).contains("ok-marker") && res(3).contains("still-up"),
        "{}",
        res(3)
    );
    // The entry's env arrives; secret-looking variables of ours do not.
    assert!(
        res(3).contains("env=from-entry-42") && res(3).contains("secret_seen=False"),
        "{}",
        res(3)
    );
    assert!(res(4).contains("exited"), "{}", res(4));
    for i in [0, 1, 2, 4] {
        assert_eq!(calls[i]["status"], "failed", "{}", calls[i]);
    }
    let list = app.call("mcp/list", json!({}));
    assert_eq!(server(&list, "faulty")["state"], "error", "{list}");
    // The next turn, without the server, works.
    fp.push(Script::text(&["Plain answer."]));
    let t = turn(&mut app, &tid, "just talk");
    assert_eq!(t["turn"]["status"], "completed");
}

/// read_only mode runs only tools the server marks read-only, unless the user allows them.
#[test]
fn read_only_mode_runs_only_read_only_tools() {
    let fp = FakeProvider::start();
    let mut app = App::start(Some(faulty_config(&fp, json!({}))));
    let tid = start_thread(&mut app, json!({"permission_mode": "read_only"}));
    fp.push(Script::tool_calls(&[
        ("c1", "mcp__faulty__write", r#"{"text":"w"}"#),
        ("c2", "mcp__faulty__ok", r#"{"text":"r"}"#),
    ]));
    fp.push(Script::text(&["ok"]));
    let t = turn(&mut app, &tid, "try");
    let calls = tool_items(&t);
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{}",
        calls[0]
    );
    assert!(
        calls[1]["result"].as_str().unwrap().contains("ok-marker"),
        "{}",
        calls[1]
    );
    drop(app);

    let fp = FakeProvider::start();
    let mut app = App::start(Some(faulty_config(
        &fp,
        json!({"read_only_tools": ["write"]}),
    )));
    let tid = start_thread(&mut app, json!({"permission_mode": "read_only"}));
    fp.push(Script::tool_call(
        "c1",
        "mcp__faulty__write",
        r#"{"text":"w"}"#,
    ));
    fp.push(Script::text(&["ok"]));
    let t = turn(&mut app, &tid, "try");
    let calls = tool_items(&t);
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("write-marker"),
        "{}",
        calls[0]
    );
}

/// A project server (`.mcp.json`) never starts until the user approves exactly that
/// entry; a changed entry needs a new approval.
#[test]
fn an_unapproved_project_server_never_starts() {
    let fp = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(Some(&config_for(&fp.base_url())));
    let ws_path = ws.path().canonicalize().unwrap();
    let marker = ws_path.join("started.txt");
    let write_project = |arg: &str| {
        std::fs::write(
            ws_path.join(".mcp.json"),
            json!({"mcpServers": {"proj": {"command": "python3",
                "args": [support_file("fake_mcp.py"), marker.to_string_lossy(), arg]}}})
            .to_string(),
        )
        .unwrap();
    };
    write_project("v1");
    let mut app = App::spawn_in(home.path(), &ws_path, &[]);
    let tid = start_thread(&mut app, json!({}));
    fp.push(Script::text(&["hello"]));
    turn(&mut app, &tid, "hi");
    let tools = fp.requests()[0].body["tools"].to_string();
    assert!(!tools.contains("mcp__proj"), "{tools}");
    let list = app.call("mcp/list", json!({}));
    let p = server(&list, "proj");
    assert_eq!(p["state"], "needs_approval", "{list}");
    assert_eq!(p["source"], "project");
    let e = app.call_err("mcp/connect", json!({"name": "proj"}));
    assert!(e["message"].as_str().unwrap().contains("approval"), "{e}");
    let init = app.call("config/read", json!({}));
    assert_eq!(
        init["general_settings"]["mcp_server_enabled"]["proj"],
        false
    );
    assert!(!marker.exists(), "the project server ran before approval");

    // Approve it: it starts at the next connect.
    let r = app.call(
        "config/general/update",
        json!({"mcp_enabled_toggles": {"proj": true}}),
    );
    assert_eq!(
        r["general_settings"]["mcp_server_enabled"]["proj"], true,
        "{r}"
    );
    let r = app.call("mcp/connect", json!({"name": "proj"}));
    assert_eq!(r["status"]["state"], "ready", "{r}");
    assert!(marker.exists());

    // The repository changes the entry: approval is needed again.
    write_project("v2");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let list = app.call("mcp/list", json!({}));
        if server(&list, "proj")["state"] == "needs_approval" {
            break;
        }
        assert!(
            Instant::now() < until,
            "the changed entry kept its approval: {list}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Unknown names are refused; the toggle can be withdrawn.
    let e = app.call_err(
        "config/general/update",
        json!({"mcp_enabled_toggles": {"nope": true}}),
    );
    assert!(e["message"].as_str().unwrap().contains("nope"), "{e}");
}

/// `--safe-mode` starts no MCP server.
#[test]
fn safe_mode_starts_none() {
    let fp = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(Some(&faulty_config(&fp, json!({}))));
    let ws_path = ws.path().canonicalize().unwrap();
    let mut app = App::spawn_in(home.path(), &ws_path, &["--safe-mode"]);
    let tid = start_thread(&mut app, json!({}));
    fp.push(Script::text(&["hello"]));
    turn(&mut app, &tid, "hi");
    let list = app.call("mcp/list", json!({}));
    assert_eq!(server(&list, "faulty")["state"], "disabled", "{list}");
    assert!(descendants_matching(app.child.id(), "fake_mcp.py").is_empty());
}

/// The filesystem server from npm: its read-only tools run on the workspace.
#[test]
fn filesystem_server_reads_the_workspace() {
    let Some(fs_bin) = npm_bin("mcp-server-filesystem") else {
        return;
    };
    let fp = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(None);
    let ws_path = ws.path().canonicalize().unwrap();
    std::fs::write(ws_path.join("note.txt"), "fs-marker-88\n").unwrap();
    let cfg = with_mcp(&fp, json!({"fs": {"command": fs_bin, "args": [ws_path]}}));
    std::fs::write(home.path().join("config.json"), cfg.to_string()).unwrap();
    let mut app = App::spawn_in(home.path(), &ws_path, &[]);
    let tid = start_thread(&mut app, json!({"permission_mode": "read_only"}));
    let path = ws_path.join("note.txt");
    fp.push(Script::tool_call(
        "c1",
        "mcp__fs__read_text_file",
        &json!({"path": path}).to_string(),
    ));
    fp.push(Script::text(&["read"]));
    let t = turn(&mut app, &tid, "read the note");
    let calls = tool_items(&t);
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("fs-marker-88"),
        "{}",
        calls[0]
    );
}

// ---------------------------------------------------------------------------------------
// OAuth: a loopback authorization server that is also the protected MCP server.
// ---------------------------------------------------------------------------------------

const ACCESS: &str = "at-secret-5f1e2d3c4b5a";
const REFRESH: &str = "rt-secret-9a8b7c6d5e4f";

#[derive(Default)]
struct AuthState {
    challenge: String,
    token_requests: Vec<String>,
}

/// `(method, path, headers (lowercased names), body)` of one HTTP request.
type Request = (String, String, Vec<(String, String)>, Vec<u8>);

fn read_request(s: &mut TcpStream) -> Option<Request> {
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = vec![];
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
            if k == "content-length" {
                len = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((method, path, headers, body))
}

fn respond(s: &mut TcpStream, status: u16, ctype: &str, body: &str) {
    let _ = write!(
        s,
        "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn form_value(form: &str, key: &str) -> String {
    form.split('&')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or("")
        .replace("%2D", "-")
        .replace("%5F", "_")
}

fn start_auth_server(state: Arc<Mutex<AuthState>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let b = base.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let Some((method, path, headers, body)) = read_request(&mut s) else {
                continue;
            };
            let body = String::from_utf8_lossy(&body).into_owned();
            let authed = headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == &format!("Bearer {ACCESS}"));
            match (method.as_str(), path.as_str()) {
                ("GET", "/.well-known/oauth-protected-resource") => respond(
                    &mut s,
                    200,
                    "application/json",
                    &json!({"resource": format!("{b}/mcp"), "authorization_servers": [b]}).to_string(),
                ),
                ("GET", "/.well-known/oauth-authorization-server") => respond(
                    &mut s,
                    200,
                    "application/json",
                    &json!({"issuer": b, "authorization_endpoint": format!("{b}/authorize"),
                        "token_endpoint": format!("{b}/token"), "registration_endpoint": format!("{b}/register"),
                        "code_challenge_methods_supported": ["S256"]})
                    .to_string(),
                ),
                ("POST", "/register") => respond(&mut s, 201, "application/json", r#"{"client_id":"cid-registered"}"#),
                ("POST", "/token") => {
                    use base64::Engine as _;
                    use sha2::Digest as _;
                    let mut st = state.lock().unwrap();
                    st.token_requests.push(body.clone());
                    let verifier = form_value(&body, "code_verifier");
                    let sum = sha2::Sha256::digest(verifier.as_bytes());
                    let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sum);
                    if form_value(&body, "code") == "code-1" && computed == st.challenge {
                        respond(&mut s, 200, "application/json", &json!({"access_token": ACCESS,
                            "refresh_token": REFRESH, "expires_in": 3600, "scope": "tools", "token_type": "Bearer"}).to_string());
                    } else {
                        respond(&mut s, 400, "application/json", r#"{"error":"invalid_grant"}"#);
                    }
                }
                ("POST", "/mcp") if !authed => respond(&mut s, 401, "application/json", "{}"),
                ("POST", "/mcp") => {
                    let m: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    let id = m["id"].clone();
                    let result = match m["method"].as_str() {
                        Some("initialize") => json!({"protocolVersion": "2025-06-18",
                            "capabilities": {"tools": {}}, "serverInfo": {"name": "guarded", "version": "1"}}),
                        Some("tools/list") => json!({"tools": [{"name": "whoami", "inputSchema": {"type": "object"},
                            "annotations": {"readOnlyHint": true}}]}),
                        Some("tools/call") => json!({"content": [{"type": "text", "text": "authorized-marker"}]}),
                        _ => {
                            respond(&mut s, 202, "application/json", "");
                            continue;
                        }
                    };
                    respond(&mut s, 200, "application/json",
                        &json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
                }
                ("DELETE", "/mcp") => respond(&mut s, 200, "application/json", "{}"),
                _ => respond(&mut s, 404, "text/plain", "no"),
            }
        }
    });
    base
}

#[test]
fn oauth_flow_with_pkce_stores_the_token_privately() {
    let state = Arc::new(Mutex::new(AuthState::default()));
    let base = start_auth_server(state.clone());
    let fp = FakeProvider::start();
    let cfg = with_mcp(&fp, json!({"guarded": {"url": format!("{base}/mcp")}}));
    let mut app = App::start(Some(cfg));
    // Without a token the server wants authorization.
    let r = app.call("mcp/connect", json!({"name": "guarded"}));
    assert_eq!(r["status"]["state"], "auth_required", "{r}");
    assert_eq!(r["status"]["auth_status"], "not_logged_in", "{r}");
    let s = app.call("mcp/auth/status", json!({"name": "guarded"}));
    assert_eq!(s["authenticated"], false);

    let start = app.call("mcp/auth/start", json!({"name": "guarded"}));
    let url = start["authorization_url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{base}/authorize?")), "{url}");
    assert!(url.contains("code_challenge_method=S256"), "{url}");
    assert!(url.contains("client_id=cid-registered"), "{url}");
    let query = url.split_once('?').unwrap().1;
    state.lock().unwrap().challenge = form_value(query, "code_challenge");
    let st = start["state"].as_str().unwrap();
    assert!(url.contains(&format!("state={st}")));

    // A wrong state is refused; the right one completes and connects.
    let e = app.call_err(
        "mcp/auth/finish",
        json!({"name": "guarded", "state": "bogus", "code": "code-1"}),
    );
    assert!(e["message"].as_str().unwrap().contains("state"), "{e}");
    let f = app.call(
        "mcp/auth/finish",
        json!({"name": "guarded", "state": st, "code": "code-1"}),
    );
    assert_eq!(f["auth"]["authenticated"], true, "{f}");
    assert_eq!(f["server"]["state"], "ready", "{f}");
    assert_eq!(f["server"]["auth_status"], "oauth", "{f}");
    assert!(f["auth"]["expires_at"].is_string());

    let file = app.home.join("mcp-oauth.json");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains(ACCESS));

    // The token works for a tool call, and never appears in any frame.
    let tid = start_thread(&mut app, json!({}));
    fp.push(Script::tool_call("c1", "mcp__guarded__whoami", "{}"));
    fp.push(Script::text(&["done"]));
    let t = turn(&mut app, &tid, "who");
    assert!(tool_items(&t)[0]["result"]
        .as_str()
        .unwrap()
        .contains("authorized-marker"));
    let all: String = app.seen.iter().map(|v| v.to_string()).collect();
    assert!(!all.contains(ACCESS) && !all.contains(REFRESH));

    let r = app.call("mcp/auth/remove", json!({"name": "guarded"}));
    assert_eq!(r["auth"]["authenticated"], false, "{r}");
    assert!(!std::fs::read_to_string(&file).unwrap().contains(ACCESS));
}

/// `wuu exec` uses the configured servers the same way (`tool_started` /
/// `tool_completed`); `--safe-mode` starts none.
#[test]
fn exec_uses_the_servers_and_safe_mode_starts_none() {
    let fp = FakeProvider::start();
    let (home, ws) = support::app::fresh_dirs(Some(&faulty_config(&fp, json!({}))));
    let run = |extra: &[&str]| {
        let out = Command::new(support::app::wuu_bin())
            .arg("exec")
            .arg("--cd")
            .arg(ws.path())
            .args(extra)
            .arg("--json")
            .arg("go")
            .env("WUU_HOME", home.path())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (out.status.code(), events)
    };
    fp.push(Script::tool_call(
        "c1",
        "mcp__faulty__ok",
        r#"{"text":"via-exec"}"#,
    ));
    fp.push(Script::text(&["done"]));
    let (code, events) = run(&[]);
    assert_eq!(code, Some(0), "{events:?}");
    let started = events
        .iter()
        .find(|e| e["type"] == "tool_started")
        .expect("tool_started");
    assert_eq!(started["name"], "mcp__faulty__ok", "{started}");
    let done = events
        .iter()
        .find(|e| e["type"] == "tool_completed")
        .expect("tool_completed");
    assert_eq!(done["status"], "completed", "{done}");
    // The model read the server's answer.
    let reqs = fp.requests();
    assert!(
        reqs[1].body.to_string().contains("ok-marker"),
        "{}",
        reqs[1].body
    );

    fp.push(Script::tool_call(
        "c2",
        "mcp__faulty__ok",
        r#"{"text":"x"}"#,
    ));
    fp.push(Script::text(&["done"]));
    let (_, events) = run(&["--safe-mode"]);
    let done = events
        .iter()
        .find(|e| e["type"] == "tool_completed")
        .expect("tool_completed");
    assert_eq!(done["status"], "failed", "{done}");
    assert!(
        done["error"].as_str().unwrap().contains("not available"),
        "{done}"
    );
    // No tool of the server was offered.
    let tools = fp.requests().last().unwrap().body["tools"].to_string();
    assert!(!tools.contains("mcp__faulty"), "{tools}");
}
