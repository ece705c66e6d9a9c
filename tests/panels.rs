//! End-to-end tests of issue 16 (the panels around the conversation) against the real
//! binary: settings updates, live configuration, instructions, skills and one-shot
//! helpers. Params are the ones the wuu desktop (`desktop/src/main/index.ts`) and the
//! phone (`clients/mobile-web/src/lib/desktopBridge.ts`) build; assertions check the
//! fields their renderers read.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Script};

fn app_with_fake() -> (App, FakeProvider) {
    let fake = FakeProvider::start();
    let app = App::start(Some(config_for(&fake.base_url())));
    (app, fake)
}

fn user_config(app: &App) -> Value {
    serde_json::from_str(&std::fs::read_to_string(app.home.join("config.json")).unwrap()).unwrap()
}

fn two_providers(base: &str) -> Value {
    let mut c = config_for(base);
    c["providers"]["other"] =
        json!({"type": "openai-compatible", "base_url": base, "model": "other-model"});
    c
}

#[test]
fn advanced_settings_are_saved_and_reported_at_once() {
    let (mut app, _fake) = app_with_fake();
    // The params of the Go server's own test (RuntimeAdvancedSettingsUpdate).
    let r = app.call(
        "config/advanced/update",
        json!({"max_steps": 12, "max_context_tokens": 256000, "temperature": 0.4,
               "compact_threshold_pct": 0.5, "compact_keep_recent_tokens": 20000,
               "disable_auto_compact": true, "provider_context_window": 512000,
               "model_aliases": {"cheap": {"provider": "fake", "model": "cheap-model:latest", "effort": "low"}},
               "verification_model": {"provider": "fake", "model": "verification-model"}}),
    );
    let a = &r["advanced_settings"];
    assert_eq!(a["max_steps"], 12);
    assert_eq!(a["max_context_tokens"], 256000);
    assert_eq!(a["temperature"], 0.4);
    assert_eq!(a["compact_threshold_pct"], 0.5);
    assert_eq!(a["compact_keep_recent_tokens"], 20000);
    assert_eq!(a["disable_auto_compact"], true);
    assert_eq!(a["provider_context_window"], 512000);
    assert_eq!(a["verification_model"]["model"], "verification-model");
    assert_eq!(r["model_aliases"]["cheap"]["model"], "cheap-model:latest");
    assert_eq!(r["providers"][0]["name"], "fake");
    // Written to the user file, other fields kept.
    let c = user_config(&app);
    assert_eq!(c["agent"]["max_steps"], 12);
    assert_eq!(c["agent"]["auto_title"], false);
    assert_eq!(c["providers"]["fake"]["model"], "fake-model");
    // config/read and initialize reflect it at once.
    let read = app.call("config/read", json!({}));
    assert_eq!(read["advanced_settings"]["max_steps"], 12);
    assert_eq!(read["model_aliases"]["cheap"]["effort"], "low");
    let init = app.call(
        "initialize",
        json!({"client": {"name": "wuu-web", "version": "0.1"}}),
    );
    assert_eq!(init["advanced_settings"]["temperature"], 0.4);
    assert_eq!(init["general_settings"]["git_attribution_enabled"], true);
    assert_eq!(init["general_settings"]["mcp_server_enabled"], json!({}));

    // Clearing: 0 removes the budget, {} removes every alias.
    let r = app.call(
        "config/advanced/update",
        json!({"max_context_tokens": 0, "model_aliases": {}, "verification_model": {"provider": "", "model": ""}}),
    );
    assert_eq!(r["advanced_settings"]["max_context_tokens"], 0);
    assert!(r.get("model_aliases").is_none(), "{r}");
    assert!(r["advanced_settings"].get("verification_model").is_none());
    assert!(user_config(&app)["agent"].get("model_aliases").is_none());

    // Refusals name the field and leave the file alone.
    let before = std::fs::read_to_string(app.home.join("config.json")).unwrap();
    for (params, field) in [
        (json!({"max_steps": 0}), "max_steps"),
        (json!({"temperature": 3.5}), "temperature"),
        (
            json!({"compact_threshold_pct": 1.5}),
            "compact_threshold_pct",
        ),
        (
            json!({"model_aliases": {"x": {"provider": "nope", "model": "m"}}}),
            "model_aliases.x.provider",
        ),
        (json!({"max_stepz": 3}), "max_stepz"),
    ] {
        let e = app.call_err("config/advanced/update", params.clone());
        assert_eq!(e["code"], "invalid_params", "{params}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(field),
            "{params}: {e}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(app.home.join("config.json")).unwrap(),
        before
    );
}

#[test]
fn max_steps_from_the_panel_applies_to_the_next_turn() {
    let (mut app, fake) = app_with_fake();
    app.call("config/advanced/update", json!({"max_steps": 1}));
    fake.push(Script::tool_call("c1", "list_files", "{}"));
    fake.push(Script::text(&["never reached"]));
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call("turn/start", json!({"thread_id": tid, "prompt": "go"}));
    let end = app.wait_for("turn end", |v| {
        v["method"] == "turn/completed" || v["method"] == "turn/error"
    });
    let text = end.to_string();
    assert!(
        text.contains("step"),
        "the turn stops at the one-step limit: {end}"
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn general_settings_and_mcp_toggles() {
    let (mut app, _fake) = app_with_fake();
    let r = app.call(
        "config/general/update",
        json!({"git_attribution_enabled": false}),
    );
    assert_eq!(r["general_settings"]["git_attribution_enabled"], false);
    assert_eq!(r["general_settings"]["mcp_server_enabled"], json!({}));
    assert_eq!(
        user_config(&app)["general"]["git_attribution_enabled"],
        false
    );
    assert_eq!(
        app.call("config/read", json!({}))["general_settings"]["git_attribution_enabled"],
        false
    );
    // An empty toggle map (what a settings form sends with no MCP servers) is fine.
    app.call(
        "config/general/update",
        json!({"git_attribution_enabled": true, "mcp_enabled_toggles": {}}),
    );
    let e = app.call_err(
        "config/general/update",
        json!({"mcp_enabled_toggles": {"github": false}}),
    );
    assert_eq!(e["code"], "invalid_params");
    assert!(e["message"].as_str().unwrap().contains("MCP"), "{e}");
    assert_eq!(
        user_config(&app)["general"]["git_attribution_enabled"],
        true
    );
}

#[test]
fn provider_remove_refuses_and_names_the_fallback() {
    let fake = FakeProvider::start();
    let mut cfg = two_providers(&fake.base_url());
    cfg["providers"]["pinned"] = json!({"type": "openai-compatible", "base_url": fake.base_url(), "model": "p", "locked": true});
    let mut app = App::start(Some(cfg));
    let init = app.call("initialize", json!({}));
    let pinned = init["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pinned")
        .unwrap()
        .clone();
    assert_eq!(pinned["connection_locked"], true);

    // The desktop's params: {provider, fallback_provider?, fallback_model?}.
    let e = app.call_err("config/provider/remove", json!({"provider": "pinned"}));
    assert!(e["message"].as_str().unwrap().contains("locked"), "{e}");
    let e = app.call_err("config/provider/remove", json!({"provider": "ghost"}));
    assert_eq!(e["code"], "invalid_params");

    // Removing the default provider switches to the named fallback.
    let r = app.call(
        "config/provider/remove",
        json!({"provider": "fake", "fallback_provider": "other", "fallback_model": "other-2"}),
    );
    assert_eq!(r["removed"], "fake");
    assert_eq!(r["provider"], "other");
    assert_eq!(r["model"], "other-2");
    assert_eq!(
        r["fallback"],
        json!({"provider": "other", "model": "other-2"})
    );
    assert!(r["providers"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "fake"));
    let c = user_config(&app);
    assert!(c["providers"].get("fake").is_none());
    assert_eq!(c["default_provider"], "other");
    let init = app.call("initialize", json!({}));
    assert_eq!(init["provider"], "other");
    assert_eq!(init["model"], "other-2");

    // A non-default provider goes without a fallback; the last one stays.
    let mut app2 = App::start(Some(two_providers(&fake.base_url())));
    let r = app2.call("config/provider/remove", json!({"provider": "other"}));
    assert!(r.get("fallback").is_none());
    assert_eq!(r["provider"], "fake");
    let e = app2.call_err("config/provider/remove", json!({"provider": "fake"}));
    assert!(e["message"].as_str().unwrap().contains("last"), "{e}");
    assert!(user_config(&app2)["providers"].get("fake").is_some());
}

#[test]
fn provider_in_use_by_a_running_turn_is_not_removed() {
    let fake = FakeProvider::start();
    let mut app = App::start(Some(two_providers(&fake.base_url())));
    fake.push(Script::stall(&["thinking"], Duration::from_secs(3)));
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call("turn/start", json!({"thread_id": tid, "prompt": "slow"}));
    app.wait_for("delta", |v| v["method"] == "item/agentMessage/delta");
    let e = app.call_err(
        "config/provider/remove",
        json!({"provider": "fake", "fallback_provider": "other"}),
    );
    assert_eq!(e["code"], "thread_busy", "{e}");
    assert!(e["message"].as_str().unwrap().contains(&tid), "{e}");
    assert!(user_config(&app)["providers"].get("fake").is_some());
}

#[test]
fn models_are_added_and_removed() {
    let (mut app, _fake) = app_with_fake();
    // The desktop sends the current selection with the connection change.
    let r = app.call(
        "config/model/update",
        json!({"provider": "fake", "model": "fake-model", "add_model": "fake-large"}),
    );
    assert_eq!(r["model"], "fake-model");
    let p = &r["providers"][0];
    assert_eq!(p["models"], json!(["fake-model", "fake-large"]));
    app.call(
        "config/model/update",
        json!({"provider": "fake", "model": "fake-model", "add_model": "fake-large"}),
    );
    assert_eq!(
        user_config(&app)["providers"]["fake"]["models"],
        json!(["fake-model", "fake-large"])
    );
    let e = app.call_err(
        "config/model/update",
        json!({"provider": "fake", "model": "fake-model", "remove_model": "fake-model"}),
    );
    assert_eq!(e["code"], "invalid_params");
    // Removing the provider's default model hands the default to the selected one.
    let r = app.call(
        "config/model/update",
        json!({"provider": "fake", "model": "fake-large", "remove_model": "fake-model"}),
    );
    assert_eq!(r["model"], "fake-large");
    let c = user_config(&app);
    assert_eq!(c["providers"]["fake"]["models"], json!(["fake-large"]));
    assert_eq!(c["providers"]["fake"]["model"], "fake-large");
    let e = app.call_err(
        "config/model/update",
        json!({"provider": "fake", "model": "fake-large", "remove_model": "nope"}),
    );
    assert!(
        e["message"].as_str().unwrap().contains("not a model"),
        "{e}"
    );
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let e = app.call_err(
        "config/model/update",
        json!({"thread_id": tid, "add_model": "x"}),
    );
    assert_eq!(e["code"], "invalid_params");
}

#[test]
fn hand_edits_are_picked_up_and_bad_ones_reported() {
    let (mut app, _fake) = app_with_fake();
    app.call("initialize", json!({}));
    let path = app.home.join("config.json");
    let mut c = user_config(&app);
    c["agent"]["max_steps"] = json!(7);
    c["providers"]["fake"]["model"] = json!("edited-model");
    std::fs::write(&path, serde_json::to_string_pretty(&c).unwrap()).unwrap();
    let n = app.notification("config/changed");
    assert_eq!(n["params"]["model"], "edited-model");
    assert_eq!(n["params"]["advanced_settings"]["max_steps"], 7);
    assert_eq!(n["params"]["paths"][0], path.to_string_lossy().as_ref());
    assert_eq!(
        app.call("config/read", json!({}))["advanced_settings"]["max_steps"],
        7
    );

    // An invalid edit: reported once with path and reason; the old config stays.
    std::fs::write(&path, r#"{"agent": {"max_stepz": 3}}"#).unwrap();
    let e = app.notification("config/error");
    assert_eq!(e["params"]["path"], path.to_string_lossy().as_ref());
    assert!(
        e["params"]["reason"]
            .as_str()
            .unwrap()
            .contains("agent.max_stepz"),
        "{e}"
    );
    let read = app.call("config/read", json!({}));
    assert_eq!(read["model"], "edited-model");
    assert_eq!(read["advanced_settings"]["max_steps"], 7);
    std::fs::write(&path, "{ not json").unwrap();
    let e = app.notification("config/error");
    assert!(
        e["params"]["reason"].as_str().unwrap().contains("JSON"),
        "{e}"
    );
    // Nothing more for the same bad document.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(app.backlog.iter().all(|v| v["method"] != "config/error"));
    while let Some(v) = app.next_within(Duration::from_millis(10)) {
        assert_ne!(v["method"], "config/error", "{v}");
    }
    // Fixed: applied again.
    c["agent"]["max_steps"] = json!(8);
    std::fs::write(&path, c.to_string()).unwrap();
    let n = app.notification("config/changed");
    assert_eq!(n["params"]["advanced_settings"]["max_steps"], 8);

    // A project layer is watched too, even when it did not exist at start.
    std::fs::create_dir_all(app.workdir.join(".wuu")).unwrap();
    std::fs::write(
        app.workdir.join(".wuu/settings.json"),
        r#"{"agent": {"max_steps": 3}}"#,
    )
    .unwrap();
    let n = app.notification("config/changed");
    assert_eq!(n["params"]["advanced_settings"]["max_steps"], 3);
    assert!(n["params"]["paths"][0]
        .as_str()
        .unwrap()
        .ends_with(".wuu/settings.json"));

    // Edits made through the panel are not echoed as hand edits.
    app.call(
        "config/general/update",
        json!({"git_attribution_enabled": false}),
    );
    std::thread::sleep(Duration::from_millis(1500));
    while let Some(v) = app.next_within(Duration::from_millis(10)) {
        assert_ne!(v["method"], "config/changed", "{v}");
    }
}

fn write_skill(dir: &std::path::Path, folder: &str, text: &str) {
    std::fs::create_dir_all(dir.join(folder)).unwrap();
    std::fs::write(dir.join(folder).join("SKILL.md"), text).unwrap();
}

#[test]
fn skills_are_listed_loaded_by_the_model_and_counted() {
    let (mut app, fake) = app_with_fake();
    let project = app.workdir.join(".wuu/skills");
    let user = app.home.join("skills");
    write_skill(
        &project,
        "release",
        "---\nname: release\ndescription: Cut a release\n---\nBump ${ARGUMENTS} then tag.\n",
    );
    write_skill(
        &user,
        "release",
        "---\nname: release\ndescription: user copy\n---\nuser body\n",
    );
    write_skill(&user, "review", "---\nname: review\ndescription: \"Review a diff\"\nallowed-tools: [read_file, grep]\n---\nRead carefully.\n");
    write_skill(
        &user,
        "secret",
        "---\nname: secret\ndescription: hidden\ndisable-model-invocation: true\n---\nno\n",
    );

    // The phone's call: skill/list with no params.
    let list = app.call("skill/list", json!({}));
    let skills = list["skills"].as_array().unwrap();
    let names: Vec<&str> = skills.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["release", "review", "secret"]);
    assert_eq!(skills[0]["source"], "project");
    assert_eq!(skills[0]["description"], "Cut a release");
    assert_eq!(skills[1]["allowed_tools"], json!(["read_file", "grep"]));
    assert_eq!(skills[1]["user_invocable"], true);
    assert_eq!(skills[2]["disable_model_invoke"], true);
    assert_eq!(skills[0]["use_count"], 0);

    // The model sees load_skill (without the hidden skill) and loads one.
    fake.push(Script::tool_call(
        "c1",
        "load_skill",
        r#"{"name":"release","arguments":"v2"}"#,
    ));
    fake.push(Script::text(&["done"]));
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call("turn/start", json!({"thread_id": tid, "prompt": "ship it"}));
    let t = tid.clone();
    app.wait_for("turn/completed", move |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == json!(t)
    });
    let reqs = fake.requests();
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let load = tools
        .iter()
        .find(|t| t["function"]["name"] == "load_skill")
        .expect("load_skill offered");
    let desc = load["function"]["description"].as_str().unwrap();
    assert!(
        desc.contains("- release: Cut a release") && !desc.contains("secret"),
        "{desc}"
    );
    let tool_result = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(
        tool_result["content"]
            .as_str()
            .unwrap()
            .contains("Bump v2 then tag."),
        "{tool_result}"
    );

    let list = app.call("skill/list", json!({}));
    assert_eq!(list["skills"][0]["use_count"], 1);
    assert!(list["skills"][0]["last_used_at"].is_string());

    // A new skill shows up without a restart.
    write_skill(
        &project,
        "deploy",
        "# Deploy\n\nPush to production carefully.\n",
    );
    let list = app.call("skill/list", json!({}));
    let deploy = list["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "deploy")
        .unwrap()
        .clone();
    assert_eq!(deploy["description"], "Push to production carefully.");
}

#[cfg(unix)]
#[test]
fn a_project_skill_linked_out_of_the_workspace_is_skipped() {
    let (mut app, _fake) = app_with_fake();
    let outside = tempfile::tempdir().unwrap();
    write_skill(outside.path(), "evil", "---\nname: evil\n---\nsecret\n");
    std::fs::create_dir_all(app.workdir.join(".wuu/skills")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("evil"),
        app.workdir.join(".wuu/skills/evil"),
    )
    .unwrap();
    let list = app.call("skill/list", json!({}));
    assert_eq!(list["skills"], json!([]));
}

#[test]
fn instructions_list_the_agents_files() {
    let (mut app, _fake) = app_with_fake();
    std::fs::write(app.workdir.join("AGENTS.md"), "Use tabs.\n").unwrap();
    app.call("initialize", json!({}));
    let mut c = user_config(&app);
    c["instructions"] = json!("Answer briefly.");
    std::fs::write(app.home.join("config.json"), c.to_string()).unwrap();
    app.notification("config/changed");
    let r = app.call("instructions/list", json!({}));
    let files = r["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{r}");
    assert_eq!(files[0]["name"], "AGENTS.md");
    assert_eq!(files[0]["scope"], "project");
    assert_eq!(files[0]["bytes"], 10);
    assert_eq!(files[0]["content"], "Use tabs.\n");
    assert!(files[0]["path"].as_str().unwrap().ends_with("AGENTS.md"));
    assert_eq!(files[1]["scope"], "global");
    assert_eq!(files[1]["content"], "Answer briefly.");
    let r = app.call("instructions/list", json!({"include_content": false}));
    assert!(r["files"][0].get("content").is_none());
    assert_eq!(r["files"][0]["bytes"], 10);
}

#[test]
fn polish_and_commit_message_are_one_shot_calls() {
    let (mut app, fake) = app_with_fake();
    fake.push(Script::text(&["Please run the tests", " before merging."]));
    // The phone's call: text/polish {text}.
    let r = app.call(
        "text/polish",
        json!({"text": "  please run the test before merging  "}),
    );
    assert_eq!(r["text"], "Please run the tests before merging.");
    let req = &fake.requests()[0];
    assert_eq!(req.body["model"], "fake-model");
    assert!(req
        .body
        .get("tools")
        .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())));
    let msgs = req.body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.last().unwrap()["content"],
        "please run the test before merging"
    );

    // The desktop's GitService input: {diff, files}.
    fake.push(Script::text(&[
        "<think>hm</think>```\nfeat(desktop): add embedded browser proxy\n```",
    ]));
    let r = app.call(
        "git/commit-message",
        json!({"diff": "diff --git a/a.go b/a.go\n+hello", "files": ["a.go", "a.go", " b.go "]}),
    );
    assert_eq!(r["message"], "feat(desktop): add embedded browser proxy");
    let user = fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(user.contains("- a.go\n- b.go\n"), "{user}");
    assert!(
        user.contains("Staged diff:\ndiff --git a/a.go b/a.go\n+hello"),
        "{user}"
    );

    let e = app.call_err("text/polish", json!({"text": "   "}));
    assert_eq!(e["code"], "invalid_params");
    let e = app.call_err("git/commit-message", json!({"diff": ""}));
    assert_eq!(e["code"], "invalid_params");
    // No conversation was created or written.
    assert_eq!(app.call("thread/list", json!({}))["threads"], json!([]));
}

#[test]
fn helpers_use_the_conversation_provider() {
    let fake = FakeProvider::start();
    let other = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["providers"]["other"] =
        json!({"type": "openai-compatible", "base_url": other.base_url(), "model": "other-model"});
    let mut app = App::start(Some(cfg));
    let tid = app.call(
        "thread/start",
        json!({"provider": "other", "model": "other-model"}),
    )["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    other.push(Script::text(&["Tidy."]));
    let r = app.call("text/polish", json!({"text": "tidy", "thread_id": tid}));
    assert_eq!(r["text"], "Tidy.");
    assert_eq!(other.requests().len(), 1);
    assert_eq!(fake.requests().len(), 0);
    let e = app.call_err(
        "text/polish",
        json!({"text": "x", "thread_id": "thr_missing"}),
    );
    assert_eq!(e["code"], "thread_not_found");
}

#[test]
fn titles_are_regenerated_and_stored() {
    let (mut app, fake) = app_with_fake();
    fake.push(Script::text(&["Sure, here is the plan."]));
    let tid = app.call("thread/start", json!({}))["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.call(
        "turn/start",
        json!({"thread_id": tid, "prompt": "Plan the parser rewrite"}),
    );
    let t = tid.clone();
    app.wait_for("turn/completed", move |v| {
        v["method"] == "turn/completed" && v["params"]["thread_id"] == json!(t)
    });

    fake.push(Script::text(&["\"Parser rewrite plan.\""]));
    let r = app.call(
        "thread/regenerate-title",
        json!({"thread_id": tid, "dry_run": true}),
    );
    assert_eq!(r["title"], "Parser rewrite plan");
    assert_eq!(r["persisted"], false);
    let user = fake.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        user.contains("Plan the parser rewrite") && user.contains("here is the plan"),
        "{user}"
    );

    fake.push(Script::text(&["Parser rewrite"]));
    let r = app.call("thread/regenerate-title", json!({"thread_id": tid}));
    assert_eq!(r["persisted"], true);
    assert_eq!(r["persisted_title"], "Parser rewrite");
    assert_eq!(r["thread"]["title"], "Parser rewrite");
    let n = app.notification("thread/updated");
    assert_eq!(n["params"]["thread"]["title"], "Parser rewrite");
    let listed = app.call("thread/list", json!({}));
    assert_eq!(listed["threads"][0]["title"], "Parser rewrite");
    let e = app.call_err("thread/regenerate-title", json!({"thread_id": "thr_nope"}));
    assert_eq!(e["code"], "thread_not_found");
}

// ----- workspace views (the phone reads the workspace through these) -------------------

fn git_in(dir: &std::path::Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn file_views_list_read_resolve_and_download() {
    let (mut app, _fake) = app_with_fake();
    let ws = app.workdir.clone();
    let root = ws.to_string_lossy().into_owned();
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::fs::create_dir_all(ws.join("node_modules/x")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(ws.join("src/deep/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(ws.join("README.md"), "# hi\n").unwrap();
    let png = b"\x89PNG\r\n\x1a\n0000".to_vec();
    std::fs::write(ws.join("logo.png"), &png).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(ws.join("big.bin"), &big).unwrap();

    // The phone's calls: {path, root}.
    let l = app.call(
        "workspace/directory/list",
        json!({"path": "", "root": root}),
    );
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["src", "README.md", "big.bin", "logo.png"], "{l}");
    assert_eq!(l["entries"][0]["kind"], "directory");
    assert_eq!(l["entries"][0]["path"], "src/");
    assert_eq!(l["truncated"], false);
    let l = app.call(
        "workspace/directory/list",
        json!({"path": "src/", "root": root}),
    );
    assert_eq!(l["path"], "src");
    assert_eq!(l["entries"][1]["path"], "src/main.rs");

    let f = app.call(
        "workspace/file/read",
        json!({"path": "src/main.rs", "root": root}),
    );
    assert_eq!(f["text"], "fn main() {}\n");
    assert_eq!(f["size_bytes"], 13);
    assert_eq!(f["binary"], false);
    assert_eq!(f["sha256"].as_str().unwrap().len(), 64);
    assert!(f["absolute_path"]
        .as_str()
        .unwrap()
        .ends_with("src/main.rs"));
    let img = app.call(
        "workspace/file/read",
        json!({"path": "logo.png", "root": root}),
    );
    assert_eq!(img["renderable_kind"], "image");
    assert!(img["renderable_url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));

    for (reference, status, path) in [
        ("`src/main.rs:12`", "resolved", Some("src/main.rs")),
        ("lib.rs", "resolved", Some("src/deep/lib.rs")),
        ("src/nope.rs", "missing", None),
        ("https://x.y/z", "invalid", None),
    ] {
        let r = app.call(
            "workspace/file/resolve",
            json!({"reference": reference, "root": root}),
        );
        assert_eq!(r["status"], status, "{reference}: {r}");
        if let Some(p) = path {
            assert_eq!(r["path"], p, "{reference}: {r}");
        }
    }

    // workspaceDownload.ts: chunks until offset == size, version carried along.
    let (mut offset, mut version, mut got) = (0u64, String::new(), Vec::new());
    loop {
        let c = app.call(
            "workspace/file/chunk",
            json!({"path": "big.bin", "root": root, "offset": offset, "version": version}),
        );
        assert_eq!(c["offset"], offset);
        assert_eq!(c["size"], big.len());
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD
            .decode(c["data"].as_str().unwrap())
            .unwrap();
        assert!(data.len() <= 256 * 1024 && !data.is_empty());
        offset += data.len() as u64;
        got.extend(data);
        version = c["version"].as_str().unwrap().to_owned();
        if offset >= big.len() as u64 {
            break;
        }
    }
    assert_eq!(got, big);
    std::fs::write(ws.join("big.bin"), b"changed").unwrap();
    let e = app.call_err(
        "workspace/file/chunk",
        json!({"path": "big.bin", "root": root, "offset": 1, "version": version}),
    );
    assert!(e["message"].as_str().unwrap().contains("changed"), "{e}");
}

#[cfg(unix)]
#[test]
fn file_views_never_read_outside_the_workspace() {
    let (mut app, _fake) = app_with_fake();
    let ws = app.workdir.clone();
    let root = ws.to_string_lossy().into_owned();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP SECRET").unwrap();
    std::fs::create_dir_all(outside.path().join("dir")).unwrap();
    std::fs::write(outside.path().join("dir/inner.txt"), "TOP SECRET").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("dir"), ws.join("linkdir")).unwrap();
    std::fs::write(ws.join("inside.txt"), "mine").unwrap();
    std::os::unix::fs::symlink("inside.txt", ws.join("good-link.txt")).unwrap();
    // A hard link inside the workspace is the user's own file.
    std::fs::hard_link(ws.join("inside.txt"), ws.join("hard.txt")).unwrap();
    let name = ws.file_name().unwrap().to_string_lossy().into_owned();

    let attempts = [
        (
            "workspace/file/read",
            json!({"path": "link.txt", "root": root}),
        ),
        (
            "workspace/file/read",
            json!({"path": "linkdir/inner.txt", "root": root}),
        ),
        (
            "workspace/file/read",
            json!({"path": format!("../{name}/link.txt"), "root": root}),
        ),
        (
            "workspace/file/read",
            json!({"path": "../../etc/passwd", "root": root}),
        ),
        (
            "workspace/file/read",
            json!({"path": outside.path().join("secret.txt").to_string_lossy(), "root": root}),
        ),
        (
            "workspace/file/chunk",
            json!({"path": "link.txt", "root": root, "offset": 0, "version": ""}),
        ),
        (
            "workspace/directory/list",
            json!({"path": "linkdir", "root": root}),
        ),
        (
            "workspace/directory/list",
            json!({"path": "..", "root": root}),
        ),
        (
            "workspace/file/read",
            json!({"path": "secret.txt", "root": outside.path().to_string_lossy()}),
        ),
        (
            "workspace/directory/list",
            json!({"path": "", "root": ws.join("linkdir").to_string_lossy()}),
        ),
        (
            "workspace/git/status",
            json!({"root": outside.path().to_string_lossy()}),
        ),
    ];
    for (method, params) in attempts {
        let id = app.send(method, params.clone());
        let r = app.response(&id);
        assert!(r.get("error").is_some(), "{method} {params} must fail: {r}");
        assert!(!r.to_string().contains("TOP SECRET"), "{r}");
    }
    let r = app.call(
        "workspace/file/resolve",
        json!({"reference": outside.path().join("secret.txt").to_string_lossy(), "root": root}),
    );
    assert_eq!(r["status"], "invalid");
    let r = app.call(
        "workspace/file/resolve",
        json!({"reference": "linkdir/inner.txt", "root": root}),
    );
    assert_eq!(r["status"], "missing");
    // Links that stay inside, and hard links, are read.
    assert_eq!(
        app.call(
            "workspace/file/read",
            json!({"path": "good-link.txt", "root": root})
        )["text"],
        "mine"
    );
    assert_eq!(
        app.call(
            "workspace/file/read",
            json!({"path": "hard.txt", "root": root})
        )["text"],
        "mine"
    );
    let l = app.call(
        "workspace/directory/list",
        json!({"path": "", "root": root}),
    );
    assert!(!l.to_string().contains("inner.txt"));
}

#[test]
fn git_views_status_changes_diff_and_no_repo() {
    let (mut app, _fake) = app_with_fake();
    let ws = app.workdir.clone();
    let root = ws.to_string_lossy().into_owned();
    // Not a repository: answered as the Go server does.
    let s = app.call("workspace/git/status", json!({"root": root}));
    assert_eq!(s["is_repo"], false);
    assert_eq!(s["dirty_count"], 0);
    let c = app.call("workspace/git/changes", json!({"root": root}));
    assert_eq!(c, json!({"is_repo": false, "files": []}));
    let d = app.call("workspace/git/diff", json!({"path": "a.txt", "root": root}));
    assert_eq!(d["status"], "unknown");
    assert_eq!(d["is_repo"], false);

    git_in(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
    git_in(&ws, &["add", "."]);
    git_in(&ws, &["commit", "-q", "-m", "first"]);
    std::fs::write(ws.join("a.txt"), "one\nTWO\nthree\n").unwrap();
    std::fs::remove_file(ws.join("gone.txt")).unwrap();
    std::fs::write(ws.join("new.txt"), "fresh\nlines\n").unwrap();
    std::fs::write(ws.join("staged.txt"), "s\n").unwrap();
    git_in(&ws, &["add", "staged.txt"]);

    let s = app.call("workspace/git/status", json!({"root": root}));
    assert_eq!(s["is_repo"], true);
    assert_eq!(s["branch"], "main");
    assert_eq!(s["branches"], json!(["main"]));
    assert_eq!(s["detached"], false);
    assert_eq!(s["dirty_count"], 4);
    assert_eq!(
        s["staged_diff"],
        json!({"files": 1, "additions": 1, "deletions": 0})
    );
    assert_eq!(s["diff"]["files"], 4);

    let c = app.call("workspace/git/changes", json!({"root": root}));
    let files = c["files"].as_array().unwrap();
    let by = |p: &str| files.iter().find(|f| f["path"] == p).unwrap().clone();
    assert_eq!(by("a.txt")["status"], "modified");
    assert_eq!(by("a.txt")["additions"], 2);
    assert_eq!(by("a.txt")["deletions"], 1);
    assert_eq!(by("gone.txt")["status"], "deleted");
    assert_eq!(by("staged.txt")["status"], "added");
    assert_eq!(by("new.txt")["status"], "untracked");
    assert_eq!(by("new.txt")["additions"], 2);

    let d = app.call("workspace/git/diff", json!({"path": "a.txt", "root": root}));
    assert_eq!(d["status"], "modified");
    assert!(d["patch"].as_str().unwrap().contains("+TWO"), "{d}");
    assert_eq!(d["original_text"], "one\ntwo\n");
    assert_eq!(d["modified_text"], "one\nTWO\nthree\n");
    assert_eq!(d["truncated"], false);
    let d = app.call(
        "workspace/git/diff",
        json!({"path": "new.txt", "root": root}),
    );
    assert_eq!(d["original_text"], "");
    assert_eq!(d["modified_text"], "fresh\nlines\n");
    let d = app.call(
        "workspace/git/diff",
        json!({"path": "gone.txt", "root": root}),
    );
    assert_eq!(d["modified_text"], "");
    assert_eq!(d["original_text"], "bye\n");
    let e = app.call_err("workspace/git/diff", json!({"path": "../x", "root": root}));
    assert!(e["message"].as_str().unwrap().contains("inside"), "{e}");
}

#[cfg(unix)]
#[test]
fn git_diff_shows_a_link_out_of_the_workspace_as_its_target_text() {
    let (mut app, _fake) = app_with_fake();
    let ws = app.workdir.clone();
    let root = ws.to_string_lossy().into_owned();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP SECRET").unwrap();
    git_in(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("x"), "x\n").unwrap();
    git_in(&ws, &["add", "."]);
    git_in(&ws, &["commit", "-q", "-m", "first"]);
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.join("leak")).unwrap();
    let d = app.call("workspace/git/diff", json!({"path": "leak", "root": root}));
    assert_eq!(d["status"], "untracked");
    assert!(!d.to_string().contains("TOP SECRET"), "{d}");
    assert_eq!(
        d["modified_text"],
        outside.path().join("secret.txt").to_string_lossy().as_ref()
    );
}

#[test]
fn a_project_layer_cannot_reroute_conversations_through_model_aliases() {
    let fake = FakeProvider::start();
    let mut c = two_providers(&fake.base_url());
    c["providers"]["spare"] =
        json!({"type": "openai-compatible", "base_url": fake.base_url(), "model": "spare-model"});
    let mut app = App::start(Some(c));
    app.call("initialize", json!({}));
    // What the model could write with `write_file .wuu.json`, picked up live.
    std::fs::write(
        app.workdir.join(".wuu.json"),
        r#"{"agent":{"max_steps":5,
            "model_aliases":{"fake-model":{"provider":"spare","model":"hijack"}},
            "verification_model":{"provider":"spare","model":"hijack"}}}"#,
    )
    .unwrap();
    let n = app.notification("config/changed");
    assert_eq!(n["params"]["advanced_settings"]["max_steps"], 5, "{n}");
    let init = app.call("initialize", json!({}));
    let ignored: Vec<&str> = init["issues"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["code"] == "protected_field_ignored")
        .map(|i| i["message"].as_str().unwrap())
        .collect();
    for field in ["agent.model_aliases", "agent.verification_model"] {
        assert!(
            ignored
                .iter()
                .any(|m| m.contains(field) && m.contains(".wuu.json")),
            "{field} must be reported: {init}"
        );
    }
    let read = app.call("config/read", json!({}));
    assert!(!read.to_string().contains("hijack"), "{read}");
    let t = app.call("thread/start", json!({}))["thread"].clone();
    assert_eq!(
        (t["model_provider"].as_str(), t["model"].as_str()),
        (Some("fake"), Some("fake-model")),
        "{t}"
    );
    let tid = t["id"].as_str().unwrap().to_owned();
    fake.push(Script::text(&["ok"]));
    app.call("turn/start", json!({"thread_id": tid, "prompt": "go"}));
    app.notification("turn/completed");
    assert_eq!(fake.requests()[0].body["model"], "fake-model");
}
