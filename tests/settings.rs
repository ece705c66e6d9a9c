//! End-to-end tests that the advanced settings of `config/advanced/update` take effect
//! (issue 16): the real binary against the loopback fake provider, which records every
//! request body.

mod support;

use serde_json::{json, Value};
use support::app::{config_for, App};
use support::fake_provider::{FakeProvider, Proto, Script};

fn run_turn(app: &mut App, th: &Value, prompt: &str) -> Value {
    let started = app.call("turn/start", json!({"thread_id": th, "prompt": prompt}));
    let tid = started["turn"]["id"].clone();
    app.wait_for("turn/completed", |v| {
        v["method"] == "turn/completed" && v["params"]["turn"]["id"] == tid
    })
}

fn new_thread(app: &mut App, params: Value) -> Value {
    app.call("thread/start", params)["thread"].clone()
}

#[test]
fn temperature_is_sent_by_every_protocol_and_omitted_when_unset() {
    for (ty, proto) in [
        ("openai-responses", Proto::Responses),
        ("openai-compatible", Proto::Chat),
        ("anthropic", Proto::Anthropic),
    ] {
        let fake = FakeProvider::start();
        let base = if proto == Proto::Anthropic {
            fake.root_url()
        } else {
            fake.base_url()
        };
        let mut cfg = config_for(&base);
        cfg["providers"]["fake"]["type"] = json!(ty);
        let mut app = App::start(Some(cfg));
        let th = new_thread(&mut app, json!({}))["id"].clone();
        fake.push(Script::text(&["one"]));
        run_turn(&mut app, &th, "first");
        app.call("config/advanced/update", json!({"temperature": 0.4}));
        fake.push(Script::text(&["two"]));
        run_turn(&mut app, &th, "second");
        let reqs = fake.requests();
        assert_eq!(reqs.len(), 2, "{ty}");
        assert_eq!(Proto::of_path(&reqs[0].path), Some(proto), "{ty}");
        assert!(
            reqs[0].body.get("temperature").is_none(),
            "{ty}: unset temperature is omitted: {}",
            reqs[0].body
        );
        assert_eq!(reqs[1].body["temperature"], 0.4, "{ty}: {}", reqs[1].body);
    }
}

#[test]
fn a_model_alias_selects_its_target() {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["providers"]["other"] = json!({"type": "openai-compatible", "base_url": fake.base_url(),
        "model": "other-model", "max_retries": 0});
    cfg["agent"]["model_aliases"] =
        json!({"cheap": {"provider": "other", "model": "small-model", "effort": "low"}});
    let mut app = App::start(Some(cfg));
    // thread/start naming the alias.
    let t = new_thread(&mut app, json!({"model": "cheap"}));
    assert_eq!(t["model_provider"], "other", "{t}");
    assert_eq!(t["model"], "small-model", "{t}");
    assert_eq!(t["model_effort"], "low", "{t}");
    fake.push(Script::text(&["ok"]));
    run_turn(&mut app, &t["id"], "hi");
    assert_eq!(fake.requests()[0].body["model"], "small-model");
    // An explicit other provider takes the model literally.
    let lit = new_thread(&mut app, json!({"provider": "fake", "model": "cheap"}));
    assert_eq!(lit["model_provider"], "fake");
    assert_eq!(lit["model"], "cheap");
    // config/model/update on a conversation naming the alias.
    let plain = new_thread(&mut app, json!({}));
    assert_eq!(plain["model"], "fake-model");
    let r = app.call(
        "config/model/update",
        json!({"thread_id": plain["id"], "model": "cheap"}),
    );
    assert_eq!(r["provider"], "other", "{r}");
    assert_eq!(r["model"], "small-model", "{r}");
    fake.push(Script::text(&["ok"]));
    run_turn(&mut app, &plain["id"], "hi");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].body["model"], "small-model");
    // The default model naming an alias (agent.model) resolves for new conversations.
    app.call("config/model/update", json!({"model": "cheap"}));
    let d = new_thread(&mut app, json!({}));
    assert_eq!(d["model_provider"], "other", "{d}");
    assert_eq!(d["model"], "small-model", "{d}");
}

#[test]
fn context_window_settings_feed_the_context_meter() {
    let fake = FakeProvider::start();
    let mut cfg = config_for(&fake.base_url());
    cfg["providers"]["fake"]["context_window"] = json!(128_000);
    let mut app = App::start(Some(cfg));
    let th = new_thread(&mut app, json!({}))["id"].clone();
    let mut windows = vec![];
    for params in [
        json!({}),
        json!({"provider_context_window": 512_000}),
        json!({"max_context_tokens": 200_000}),
        json!({"provider_context_window": 0}),
        json!({"max_context_tokens": 64_000}),
        json!({"max_context_tokens": 0}),
    ] {
        if params != json!({}) {
            app.call("config/advanced/update", params);
        }
        fake.push(Script::text(&["ok"]));
        run_turn(&mut app, &th, "hi");
        let usage = app
            .seen
            .iter()
            .rev()
            .find(|v| v["method"] == "turn/usage")
            .unwrap()["params"]
            .clone();
        windows.push(usage["context_window_tokens"].clone());
    }
    // The provider's window; the override; the override capped by the budget; the
    // provider's window under the budget; capped by a smaller budget; uncapped again.
    assert_eq!(
        windows,
        [
            json!(128_000),
            json!(512_000),
            json!(200_000),
            json!(128_000),
            json!(64_000),
            json!(128_000)
        ]
    );
}
