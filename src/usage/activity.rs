//! `local_usage` and `latest_request` of `engine/list {include_quota: true}` (unless
//! `include_activity: false`), per engine entry and per subscription source (spec
//! `engines.md` §4.1; seed "查询订阅状态").
//!
//! Attribution is by the durable record: a usage record counts for the provider written
//! on it and the engine of its conversation, and a request is the turn row (its own
//! provider, model, status and error). Editing a conversation or switching its provider
//! later does not move old usage, and a turn's usage is the usage written for that turn
//! (an old request's usage never fills a newer one). Requests are ordered by start time.

use super::history::engine_bucket;
use super::StoreScan;
use std::collections::{HashMap, HashSet};
use wuu_protocol::{LatestRequest, LocalUsage};
use wuu_store::LatestTurn;

/// Statistics of one engine entry or service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Activity {
    /// Reported tokens and turns.
    pub local_usage: LocalUsage,
    /// The newest request, when there is one.
    pub latest_request: Option<LatestRequest>,
}

/// Which records a key selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// Conversations bound to this engine (`wuu` also takes legacy `""`).
    Engine(&'a str),
    /// Built-in-engine conversations' records written for this provider id.
    Service(&'a str),
}

fn built_in(engine_id: &str) -> bool {
    engine_bucket(engine_id) == "wuu"
}

fn selects(key: Key<'_>, engine_id: &str, provider: &str) -> bool {
    match key {
        Key::Engine(e) => engine_bucket(engine_id) == e,
        Key::Service(s) => built_in(engine_id) && provider == s,
    }
}

fn request(t: &LatestTurn) -> LatestRequest {
    let reported = t.reported > 0;
    let tok = |v: u64| reported.then_some(v);
    LatestRequest {
        status: t.status.clone(),
        error: t.error.clone().filter(|e| !e.is_empty()),
        at: crate::util::rfc3339(t.completed_at_ms.unwrap_or(t.started_at_ms)),
        model: t.model.clone(),
        usage_reported: reported,
        input_tokens: tok(t.tokens[0]),
        output_tokens: tok(t.tokens[1]),
        cache_read_tokens: tok(t.tokens[2]),
        cache_creation_tokens: tok(t.tokens[3]),
    }
}

/// The statistics of `key` from one shared scan.
pub fn activity(scan: &StoreScan, key: Key<'_>) -> Activity {
    let mut u = LocalUsage::default();
    let mut turns: HashSet<(&str, &str)> = HashSet::new();
    for r in &scan.rows {
        if !selects(key, &r.engine_id, &r.provider) {
            continue;
        }
        let any = r.input_tokens | r.output_tokens | r.cache_read_tokens | r.cache_creation_tokens;
        if any == 0 {
            continue;
        }
        u.input_tokens = u.input_tokens.saturating_add(r.input_tokens);
        u.output_tokens = u.output_tokens.saturating_add(r.output_tokens);
        u.cache_read_tokens = u.cache_read_tokens.saturating_add(r.cache_read_tokens);
        u.cache_creation_tokens = u
            .cache_creation_tokens
            .saturating_add(r.cache_creation_tokens);
        turns.insert((r.thread_id.as_str(), r.turn_id.as_str()));
    }
    u.reported_turns = turns.len() as u64;
    let latest = scan
        .latest
        .iter()
        .filter(|t| selects(key, &t.engine_id, &t.provider))
        // Newest start wins; ties go to the later end, then the larger id (stable).
        .max_by(|a, b| {
            a.started_at_ms
                .cmp(&b.started_at_ms)
                .then(a.completed_at_ms.cmp(&b.completed_at_ms))
                .then_with(|| a.turn_id.cmp(&b.turn_id))
        })
        .map(request);
    Activity {
        local_usage: u,
        latest_request: latest,
    }
}

/// Statistics of several keys at once (one pass per key over the shared scan).
pub fn activities<'a>(
    scan: &StoreScan,
    keys: impl IntoIterator<Item = Key<'a>>,
) -> HashMap<Key<'a>, Activity> {
    keys.into_iter().map(|k| (k, activity(scan, k))).collect()
}

impl std::hash::Hash for Key<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Key::Engine(e) => (0u8, e).hash(state),
            Key::Service(s) => (1u8, s).hash(state),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wuu_store::UsageScanRow;

    fn row(thread: &str, engine: &str, turn: &str, provider: &str, input: u64) -> UsageScanRow {
        UsageScanRow {
            is_agent: false,
            thread_id: thread.into(),
            engine_id: engine.into(),
            turn_id: turn.into(),
            provider: provider.into(),
            model: "m".into(),
            at_ms: 1,
            input_tokens: input,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
        }
    }

    fn turn(engine: &str, provider: &str, id: &str, started: i64, reported: u64) -> LatestTurn {
        LatestTurn {
            engine_id: engine.into(),
            provider: provider.into(),
            thread_id: "t".into(),
            turn_id: id.into(),
            status: "failed".into(),
            error: Some("boom".into()),
            model: "m2".into(),
            started_at_ms: started,
            completed_at_ms: Some(started + 5),
            reported,
            tokens: [3, 4, 5, 6],
        }
    }

    #[test]
    fn attribution_by_durable_records() {
        let scan = StoreScan {
            rows: vec![
                row("a", "", "t1", "openrouter", 10),
                row("a", "wuu", "t2", "deepseek", 20),
                row("b", "codex", "t1", "", 40),
                // A zero record (context marker) is not a reported turn.
                UsageScanRow {
                    is_agent: false,
                    output_tokens: 0,
                    ..row("a", "", "t3", "openrouter", 0)
                },
            ],
            latest: vec![
                turn("", "openrouter", "t1", 100, 1),
                turn("wuu", "deepseek", "t2", 200, 0),
                turn("codex", "", "t9", 300, 1),
            ],
            ..Default::default()
        };
        let or = activity(&scan, Key::Service("openrouter"));
        assert_eq!(or.local_usage.input_tokens, 10);
        assert_eq!(or.local_usage.reported_turns, 1);
        let lr = or.latest_request.unwrap();
        assert_eq!(lr.status, "failed");
        assert_eq!(lr.error.as_deref(), Some("boom"));
        assert!(lr.usage_reported);
        assert_eq!(lr.input_tokens, Some(3));
        assert_eq!(lr.at, crate::util::rfc3339(105));
        let ds = activity(&scan, Key::Service("deepseek"))
            .latest_request
            .unwrap();
        assert!(!ds.usage_reported);
        assert_eq!(ds.input_tokens, None, "token counts only when reported");
        // Engine keys: wuu takes legacy "" too; codex only its own conversations.
        let wuu = activity(&scan, Key::Engine("wuu"));
        assert_eq!(wuu.local_usage.input_tokens, 30);
        assert_eq!(wuu.latest_request.unwrap().model, "m2");
        let codex = activity(&scan, Key::Engine("codex"));
        assert_eq!(codex.local_usage.input_tokens, 40);
        // Codex conversations never count for a service.
        assert_eq!(
            activity(&scan, Key::Service("")).local_usage.input_tokens,
            0
        );
        assert!(activity(&scan, Key::Engine("claude"))
            .latest_request
            .is_none());
    }
}
