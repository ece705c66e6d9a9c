//! The quota rules one by one, against fake upstreams on 127.0.0.1 and a real store in a
//! temp directory.

use super::adapters::Adapter;
use super::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Mutex;

/// What the fake answers next.
#[derive(Clone)]
enum Reply {
    Json(u16, Value),
    Raw(u16, Vec<u8>),
    /// Accept and never answer.
    Hang,
    /// Read the request, then close without an answer.
    Close,
}

/// Requests seen: path and lower-cased headers.
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>)>>>;

struct Fake {
    port: u16,
    replies: Arc<Mutex<Vec<Reply>>>,
    requests: Seen,
}

impl Fake {
    fn start() -> Fake {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let replies: Arc<Mutex<Vec<Reply>>> = Arc::default();
        let requests: Seen = Arc::default();
        let (r2, q2) = (replies.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (r3, q3) = (r2.clone(), q2.clone());
                std::thread::spawn(move || {
                    let mut rd = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    if rd.read_line(&mut first).is_err() {
                        return;
                    }
                    let mut headers = vec![];
                    loop {
                        let mut l = String::new();
                        if rd.read_line(&mut l).is_err() || l.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = l.trim().split_once(':') {
                            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                        }
                    }
                    let path = first.split_whitespace().nth(1).unwrap_or("").to_owned();
                    q3.lock().unwrap().push((path, headers));
                    let reply = {
                        let mut r = r3.lock().unwrap();
                        if r.len() > 1 {
                            r.remove(0)
                        } else {
                            r.first().cloned().unwrap_or(Reply::Json(500, json!({})))
                        }
                    };
                    let (status, body) = match reply {
                        Reply::Json(s, v) => (s, v.to_string().into_bytes()),
                        Reply::Raw(s, b) => (s, b),
                        Reply::Hang => {
                            std::thread::sleep(Duration::from_secs(60));
                            return;
                        }
                        Reply::Close => return,
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(&body);
                });
            }
        });
        Fake {
            port,
            replies,
            requests,
        }
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn next(&self, r: Reply) {
        *self.replies.lock().unwrap() = vec![r];
    }
}

fn store() -> (tempfile::TempDir, wuu_store::Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = wuu_store::Store::open_home(dir.path()).unwrap();
    (dir, s)
}

fn openrouter(f: &Fake, key: &str) -> Source {
    Source {
        key: "service:or".into(),
        adapter: Adapter::OpenRouter {
            base: f.base(),
            key: key.into(),
        },
    }
}

fn credits(total: f64, used: f64) -> Reply {
    Reply::Json(
        200,
        json!({"data": {"total_credits": total, "total_usage": used}}),
    )
}

fn one(sources: &[Source], st: &mut dyn SnapshotStore) -> SubscriptionQuota {
    collect(sources, Instant::now(), st).remove(0)
}

#[test]
fn success_is_available_fresh_for_five_minutes_and_persists() {
    let f = Fake::start();
    let (dir, mut st) = store();
    f.next(credits(20.5, 0.25));
    let q = one(&[openrouter(&f, "sk-or-1")], &mut st);
    assert_eq!(q.status, "available");
    assert_eq!(q.kind.as_deref(), Some("balance"));
    assert_eq!(
        q.balances,
        vec![QuotaBalance {
            currency: "USD".into(),
            amount: "20.25".into()
        }]
    );
    assert_eq!(q.error_code, None);
    let observed: jiff::Timestamp = q.observed_at.as_deref().unwrap().parse().unwrap();
    let expires: jiff::Timestamp = q.expires_at.as_deref().unwrap().parse().unwrap();
    assert_eq!(
        expires.as_millisecond() - observed.as_millisecond(),
        FRESH_FOR_MS
    );
    assert_eq!(q.checked_at, q.observed_at.clone().unwrap());
    let acct = q.account.clone().unwrap();
    assert_eq!(acct.id.len(), 32);
    assert!(!acct.id.contains("sk-or"), "never the key");
    // The upstream saw the credential, as a bearer token, on the credits endpoint.
    let reqs = f.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].0, "/api/v1/credits");
    assert!(reqs[0]
        .1
        .contains(&("authorization".into(), "Bearer sk-or-1".into())));
    // Survives a restart: a new store handle on the same file, then a failure → stale
    // from the persisted snapshot.
    drop(st);
    let mut st = wuu_store::Store::open_home(dir.path()).unwrap();
    f.next(Reply::Json(
        500,
        json!({"error": "upstream exploded: secret detail"}),
    ));
    let s = one(&[openrouter(&f, "sk-or-1")], &mut st);
    assert_eq!(s.status, "stale");
    assert_eq!(s.error_code.as_deref(), Some("invalid_response"));
    assert_eq!(s.observed_at, q.observed_at, "old observed_at kept");
    assert_eq!(s.expires_at, q.expires_at, "old expires_at kept");
    assert_eq!(s.balances, q.balances);
    assert_ne!(s.checked_at, "");
    assert!(!serde_json::to_string(&s).unwrap().contains("secret detail"));
}

#[test]
fn transient_failures_keep_the_last_success_as_stale() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(credits(5.0, 1.0));
    let q = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(q.status, "available");
    // The connection drops without an answer: a transport failure.
    f.next(Reply::Close);
    let s = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(s.status, "stale");
    assert_eq!(s.error_code.as_deref(), Some("network"));
    assert_eq!(s.observed_at, q.observed_at);
    f.next(Reply::Json(429, json!({})));
    let s = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(s.status, "stale");
    assert_eq!(s.error_code.as_deref(), Some("rate_limited"));
    assert_eq!(
        s.observed_at, q.observed_at,
        "a stale answer is never re-saved as new"
    );
    // A different endpoint is a different account: nothing to fall back on.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let other = Source {
        key: "service:or".into(),
        adapter: Adapter::OpenRouter {
            base: format!("http://127.0.0.1:{port}"),
            key: "k".into(),
        },
    };
    let u = one(&[other], &mut st);
    assert_eq!(u.status, "unavailable");
    assert_eq!(u.error_code.as_deref(), Some("network"));
    assert!(u.balances.is_empty() && u.windows.is_empty() && u.observed_at.is_none());
}

#[test]
fn an_auth_refusal_deletes_the_snapshot() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(credits(5.0, 1.0));
    assert_eq!(one(&[openrouter(&f, "k")], &mut st).status, "available");
    f.next(Reply::Json(401, json!({"error": "bad key"})));
    let s = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(s.status, "sign_in");
    assert_eq!(s.error_code.as_deref(), Some("sign_in"));
    assert!(s.balances.is_empty());
    // The snapshot is gone: a later transient failure has nothing to be stale from.
    f.next(Reply::Json(503, json!({})));
    let u = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(u.status, "unavailable");
    f.next(Reply::Json(403, json!({})));
    assert_eq!(one(&[openrouter(&f, "k")], &mut st).status, "sign_in");
}

#[test]
fn a_changed_credential_never_inherits_another_accounts_data() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(credits(99.0, 0.0));
    let a = one(&[openrouter(&f, "key-A")], &mut st);
    assert_eq!(a.status, "available");
    f.next(Reply::Json(500, json!({})));
    let b = one(&[openrouter(&f, "key-B")], &mut st);
    assert_eq!(b.status, "unavailable", "{b:?}");
    assert!(b.balances.is_empty());
    assert_ne!(b.account.unwrap().id, a.account.unwrap().id);
    // And key A still has its own snapshot.
    assert_eq!(one(&[openrouter(&f, "key-A")], &mut st).status, "stale");
}

#[test]
fn percentages_unknown_dropped_and_exhausted() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(Reply::Json(
        200,
        json!({"five_hour": {"utilization": 100.0, "resets_at": "2030-01-01T00:00:00Z"},
               "seven_day": {"resets_at": "2030-01-02T00:00:00Z"},
               "seven_day_opus": {"utilization": -3},
               "seven_day_sonnet": {"utilization": "12.5"}}),
    ));
    let src = Source {
        key: "service:anthropic".into(),
        adapter: Adapter::AnthropicOAuth {
            base: f.base(),
            token: "sk-ant-oat01-x".into(),
            source: "anthropic-oauth",
            plan: None,
        },
    };
    let q = one(&[src], &mut st);
    assert_eq!(q.status, "available");
    let w: std::collections::HashMap<&str, Option<f64>> = q
        .windows
        .iter()
        .map(|w| (w.id.as_str(), w.used_percent))
        .collect();
    assert_eq!(
        w["five-hour"],
        Some(100.0),
        "≥ 100 is exhausted, kept as reported"
    );
    assert_eq!(w["seven-day"], None, "missing is unknown");
    assert_eq!(w["seven-day-opus"], None, "negative is dropped");
    assert_eq!(w["seven-day-sonnet"], Some(12.5));
    assert!(q.windows.iter().all(|w| w.unlimited.is_none()));
    let json = serde_json::to_value(&q).unwrap();
    assert!(json["windows"][1].get("used_percent").is_none());
    let reqs = f.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].0, "/api/oauth/usage?cedar_ember=1&skip_spend=1");
    assert!(reqs[0]
        .1
        .contains(&("anthropic-beta".into(), "oauth-2025-04-20".into())));
    assert_eq!(sane_percent(Some(f64::NAN)), None);
    assert_eq!(sane_percent(Some(f64::INFINITY)), None);
}

#[test]
fn bad_bodies_are_invalid_responses() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(Reply::Raw(200, vec![b' '; 2 * 1024 * 1024]));
    let q = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(q.status, "unavailable");
    assert_eq!(q.error_code.as_deref(), Some("invalid_response"));
    f.next(Reply::Raw(200, b"<html>no</html>".to_vec()));
    let q = one(&[openrouter(&f, "k")], &mut st);
    assert_eq!(q.error_code.as_deref(), Some("invalid_response"));
}

#[test]
fn a_silent_upstream_cannot_hold_the_answer_past_the_shared_deadline() {
    let slow = Fake::start();
    slow.next(Reply::Hang);
    let fast = Fake::start();
    fast.next(Reply::Json(
        200,
        json!({"balance_infos": [{"currency": "CNY", "total_balance": "1.00"}]}),
    ));
    let (_d, mut st) = store();
    let sources = vec![
        openrouter(&slow, "k1"),
        Source {
            key: "service:ds".into(),
            adapter: Adapter::DeepSeek {
                base: fast.base(),
                key: "k2".into(),
            },
        },
        openrouter(&slow, "k3"),
    ];
    let t0 = Instant::now();
    let q = collect(&sources, t0, &mut st);
    let took = t0.elapsed();
    // The bound is the deadline itself (plus scheduling slack on a loaded machine).
    assert!(took < DEADLINE + Duration::from_secs(3), "took {took:?}");
    assert_eq!(q[0].status, "unavailable");
    assert_eq!(q[0].error_code.as_deref(), Some("network"));
    assert_eq!(q[1].status, "available", "the fast source is not held back");
    assert_eq!(q[2].status, "unavailable");
}

#[test]
fn unsupported_and_missing_credentials() {
    let (_d, mut st) = store();
    let q = one(
        &[Source {
            key: "service:x".into(),
            adapter: Adapter::Unsupported {
                source: "openai-compatible",
            },
        }],
        &mut st,
    );
    assert_eq!(q.status, "unsupported");
    assert_eq!(q.error_code.as_deref(), Some("unsupported"));
    let q = one(
        &[Source {
            key: "service:ds".into(),
            adapter: Adapter::NoCredential {
                source: "deepseek",
                kind: "balance",
            },
        }],
        &mut st,
    );
    assert_eq!(q.status, "sign_in");
    assert_eq!(q.kind.as_deref(), Some("balance"));
}

#[test]
fn external_codex_reads_through_the_host() {
    let (_d, mut st) = store();
    let ok: SharedReader = Arc::new(|_t: Duration| {
        Ok(
            json!({"rateLimits": {"limitId": "codex", "planType": "plus",
                  "primary": {"usedPercent": 55.0, "windowDurationMins": 300, "resetsAt": 1_900_000_000}},
                  "accountId": "acct-9"}),
        )
    });
    let q = one(
        &[Source {
            key: "engine:codex".into(),
            adapter: Adapter::CodexCli(ok),
        }],
        &mut st,
    );
    assert_eq!(q.status, "available");
    assert_eq!(q.plan.as_deref(), Some("plus"));
    assert_eq!(q.windows[0].id, "codex:primary");
    assert_eq!(q.windows[0].used_percent, Some(55.0));
    assert_eq!(
        q.account.as_ref().unwrap().source.as_deref(),
        Some("codex-cli")
    );
    let err: SharedReader = Arc::new(|_t: Duration| Err("not logged in".to_owned()));
    let q = one(
        &[Source {
            key: "engine:codex".into(),
            adapter: Adapter::CodexCli(err),
        }],
        &mut st,
    );
    assert_eq!(q.status, "unavailable");
    assert_eq!(q.error_code.as_deref(), Some("network"));
}

#[test]
fn chatgpt_sends_the_account_header() {
    let f = Fake::start();
    f.next(Reply::Json(
        200,
        json!({"plan_type": "pro", "rate_limit": {"primary_window": {"used_percent": 1}}}),
    ));
    let (_d, mut st) = store();
    let q = one(
        &[Source {
            key: "service:chatgpt".into(),
            adapter: Adapter::ChatGpt {
                base: format!("{}/backend-api", f.base()),
                token: "tok".into(),
                account_id: Some("acc-1".into()),
            },
        }],
        &mut st,
    );
    assert_eq!(q.status, "available");
    assert_eq!(q.plan.as_deref(), Some("pro"));
    let reqs = f.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].0, "/backend-api/wham/usage");
    assert!(reqs[0]
        .1
        .contains(&("chatgpt-account-id".into(), "acc-1".into())));
}

#[test]
fn engine_list_parts_combine_quota_and_statistics() {
    use crate::usage::{list_usage, EngineEntry, UsageState};
    let f = Fake::start();
    f.next(credits(3.0, 1.0));
    let (_d, mut st) = store();
    // One built-in conversation that used the OpenRouter service.
    let mut t = wuu_store::ThreadRow::new("thr_1", "/w", 1_000);
    t.provider = "or".into();
    st.insert_thread(&t).unwrap();
    let mut turn = wuu_store::TurnRow::new("thr_1", "turn_1", "user", 2_000);
    turn.provider = "or".into();
    turn.model = "m".into();
    turn.status = "completed".into();
    turn.completed_at_ms = Some(3_000);
    st.insert_turn(&turn).unwrap();
    st.insert_usage(&wuu_store::UsageRow {
        thread_id: "thr_1".into(),
        turn_id: "turn_1".into(),
        provider: "or".into(),
        model: "m".into(),
        at_ms: 2_500,
        input_tokens: 11,
        output_tokens: 2,
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        reasoning_tokens: 0,
    })
    .unwrap();
    let config: crate::config::Config = serde_json::from_value(json!({
        "providers": {
            "or": {"type": "openai-compatible", "base_url": "https://openrouter.ai/api/v1",
                   "model": "m", "headers": {"Authorization": "Bearer sk-or-x"}},
            "local": {"type": "openai-compatible", "base_url": "http://127.0.0.1:1/v1", "model": "m"}
        }
    }))
    .unwrap();
    let endpoints = super::adapters::Endpoints {
        openrouter: f.base(),
        ..Default::default()
    };
    let reader: SharedReader =
        Arc::new(|_t: Duration| Ok(json!({"rateLimits": {"primary": {"usedPercent": 10}}})));
    let engines = [
        EngineEntry {
            id: "wuu",
            available: true,
        },
        EngineEntry {
            id: "codex",
            available: true,
        },
        EngineEntry {
            id: "claude",
            available: false,
        },
    ];
    let state = UsageState::default();
    let u = list_usage(
        &config,
        &state,
        &mut st,
        &engines,
        true,
        Some(reader.clone()),
        &endpoints,
    );
    let sp: std::collections::HashMap<&str, &wuu_protocol::SubscriptionProvider> = u
        .subscription_providers
        .iter()
        .map(|p| (p.provider.name.as_str(), p))
        .collect();
    assert_eq!(sp["or"].quota.status, "available");
    assert_eq!(sp["or"].quota.balances[0].amount, "2");
    assert_eq!(sp["or"].local_usage.as_ref().unwrap().input_tokens, 11);
    assert_eq!(sp["or"].local_usage.as_ref().unwrap().reported_turns, 1);
    let lr = sp["or"].latest_request.as_ref().unwrap();
    assert_eq!(
        (lr.status.as_str(), lr.usage_reported, lr.input_tokens),
        ("completed", true, Some(11))
    );
    assert_eq!(sp["local"].quota.status, "unsupported");
    assert!(sp["local"].latest_request.is_none());
    // The wire shape: the summary is flattened, the key never appears.
    let wire = serde_json::to_value(sp["or"]).unwrap();
    assert_eq!(wire["name"], "or");
    assert_eq!(wire["type"], "openai-compatible");
    assert!(!wire.to_string().contains("sk-or-x"));
    // Engines: wuu has statistics but never a quota; codex reads through the host;
    // an unavailable engine gets no quota.
    assert!(u.engines["wuu"].quota.is_none());
    assert_eq!(
        u.engines["wuu"].local_usage.as_ref().unwrap().input_tokens,
        11
    );
    assert_eq!(
        u.engines["codex"].quota.as_ref().unwrap().status,
        "available"
    );
    assert_eq!(
        u.engines["codex"]
            .local_usage
            .as_ref()
            .unwrap()
            .input_tokens,
        0
    );
    assert!(u.engines["claude"].quota.is_none());
    // include_activity: false → quota only.
    f.next(credits(3.0, 1.0));
    let u = list_usage(
        &config,
        &state,
        &mut st,
        &engines,
        false,
        Some(reader),
        &endpoints,
    );
    assert!(u
        .subscription_providers
        .iter()
        .all(|p| p.local_usage.is_none() && p.latest_request.is_none()));
    assert!(u.engines.values().all(|e| e.local_usage.is_none()));
    assert_eq!(
        u.engines["codex"].quota.as_ref().unwrap().status,
        "available"
    );
}

#[test]
fn claude_code_uses_its_own_login_read_only() {
    let f = Fake::start();
    f.next(Reply::Json(200, json!({"five_hour": {"utilization": 7}})));
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join(".credentials.json");
    let body = json!({"claudeAiOauth": {"accessToken": "sk-ant-oat01-cc", "refreshToken": "r",
                                          "expiresAt": 1, "subscriptionType": "max"}})
    .to_string();
    std::fs::write(&creds, &body).unwrap();
    let endpoints = super::adapters::Endpoints {
        claude_code: f.base(),
        ..Default::default()
    };
    let (_d, mut st) = store();
    let adapter = super::adapters::claude_code_adapter(Some(&creds), &endpoints);
    let q = one(
        &[Source {
            key: "engine:claude".into(),
            adapter,
        }],
        &mut st,
    );
    assert_eq!(q.status, "available");
    assert_eq!(q.plan.as_deref(), Some("max"));
    assert_eq!(
        q.account.as_ref().unwrap().source.as_deref(),
        Some("claude-code")
    );
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        body,
        "never rewritten"
    );
    let reqs = f.requests.lock().unwrap().clone();
    assert!(reqs[0]
        .1
        .contains(&("authorization".into(), "Bearer sk-ant-oat01-cc".into())));
    // No login: sign in.
    let adapter =
        super::adapters::claude_code_adapter(Some(&dir.path().join("none.json")), &endpoints);
    assert_eq!(
        one(
            &[Source {
                key: "engine:claude".into(),
                adapter
            }],
            &mut st
        )
        .status,
        "sign_in"
    );
}

#[test]
fn kimi_and_zhipu_read_their_plan_endpoints() {
    let f = Fake::start();
    let (_d, mut st) = store();
    f.next(Reply::Json(
        200,
        json!({"success": true, "data": {"level": "lite", "limits": [
        {"type": "TOKENS_LIMIT", "unit": 3, "number": 5, "percentage": 12}]}}),
    ));
    let q = one(
        &[Source {
            key: "service:glm".into(),
            adapter: Adapter::Zhipu {
                base: f.base(),
                key: "zk".into(),
            },
        }],
        &mut st,
    );
    assert_eq!(
        (q.status.as_str(), q.kind.as_deref(), q.plan.as_deref()),
        ("available", Some("plan"), Some("lite"))
    );
    f.next(Reply::Json(
        200,
        json!({"limits": [], "usage": {"limit": 10, "used": 1}}),
    ));
    let q = one(
        &[Source {
            key: "service:kimi".into(),
            adapter: Adapter::Kimi {
                base: f.base(),
                key: "kk".into(),
            },
        }],
        &mut st,
    );
    assert_eq!(q.status, "available");
    assert_eq!(q.windows[0].used_percent, Some(10.0));
    let reqs = f.requests.lock().unwrap().clone();
    assert_eq!(reqs[0].0, "/api/monitor/usage/quota/limit");
    assert!(
        reqs[0].1.contains(&("authorization".into(), "zk".into())),
        "no Bearer for Zhipu"
    );
    assert_eq!(reqs[1].0, "/coding/v1/usages");
    assert!(reqs[1]
        .1
        .contains(&("authorization".into(), "Bearer kk".into())));
}
