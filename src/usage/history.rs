//! Aggregation of usage records into the `usage/overview` and `settings/usage` shapes
//! (spec `engines.md` §4.2–§4.4). Pure functions over already-read rows: no I/O.
//!
//! Days are calendar dates in the requested IANA zone, computed per record with
//! `jiff` (so a DST change moves the day boundary with the local clock). `turns` counts
//! distinct turns with at least one usage record (a record is one model response; a turn
//! with several tool rounds has several records).

use super::ledger::{LedgerOutcome, LedgerRecord};
use jiff::tz::TimeZone;
use std::collections::{BTreeMap, HashMap, HashSet};
use wuu_protocol::{
    EngineBreakdown, ModelBreakdown, SettingsUsageResult, SkillUsage, TokenTotals, UsageDay,
    UsageMetrics, UsageOverviewResult,
};
use wuu_store::{EngineClaim, UsageScanRow};

/// Longest zone name accepted (IANA names are far shorter).
const MAX_ZONE_CHARS: usize = 64;

/// The zone of a `{timezone?}` param: omitted/empty → UTC.
///
/// Errors: `invalid timezone: <name>` for a name the tz database does not know.
pub fn zone(name: Option<&str>) -> Result<TimeZone, String> {
    let name = name.map(str::trim).unwrap_or("");
    if name.is_empty() {
        return Ok(TimeZone::UTC);
    }
    if name.chars().count() > MAX_ZONE_CHARS {
        return Err(format!(
            "invalid timezone: {:?} is not an IANA zone",
            crate::util::clip(name, 40)
        ));
    }
    TimeZone::get(name).map_err(|_| format!("invalid timezone: {name:?} is not an IANA zone"))
}

/// `YYYY-MM-DD` of Unix milliseconds in `tz`; `None` for a missing (≤ 0) or
/// unrepresentable timestamp.
pub fn date_of(ms: i64, tz: &TimeZone) -> Option<String> {
    if ms <= 0 {
        return None;
    }
    let ts = jiff::Timestamp::from_millisecond(ms).ok()?;
    Some(ts.to_zoned_datetime(tz.clone()).date().to_string())
}

fn totals_of(r: &UsageScanRow) -> TokenTotals {
    TokenTotals {
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cache_creation_tokens: r.cache_creation_tokens,
        cache_read_tokens: r.cache_read_tokens,
    }
}

fn rate(cache_read: u64, input: u64) -> f64 {
    let prompt = input.saturating_add(cache_read);
    if prompt == 0 {
        0.0
    } else {
        cache_read as f64 / prompt as f64
    }
}

/// The engine bucket of a conversation (`""` = legacy built-in = `wuu`).
pub fn engine_bucket(engine_id: &str) -> &str {
    if engine_id.is_empty() {
        "wuu"
    } else {
        engine_id
    }
}

#[derive(Default)]
struct DayAcc {
    tokens: TokenTotals,
    turns: HashSet<(String, String)>,
    /// Subagent worker threads with usage that day.
    agents: HashSet<String>,
    outside: Option<TokenTotals>,
}

/// Totals and days of a set of rows, plus optional ledger contributions.
#[derive(Default)]
struct Agg {
    tokens: TokenTotals,
    turns: HashSet<(String, String)>,
    sessions: HashSet<String>,
    /// Subagent worker threads with usage.
    agents: HashSet<String>,
    days: BTreeMap<String, DayAcc>,
}

impl Agg {
    fn add_row(&mut self, r: &UsageScanRow, tz: &TimeZone) {
        let t = totals_of(r);
        self.tokens.add(&t);
        let key = (r.thread_id.clone(), r.turn_id.clone());
        self.sessions.insert(r.thread_id.clone());
        if r.is_agent {
            self.agents.insert(r.thread_id.clone());
        }
        if let Some(date) = date_of(r.at_ms, tz) {
            let day = self.days.entry(date).or_default();
            day.tokens.add(&t);
            day.turns.insert(key.clone());
            if r.is_agent {
                day.agents.insert(r.thread_id.clone());
            }
        }
        self.turns.insert(key);
    }

    /// A ledger record counted on the in-Wuu side (claimed by a conversation of an engine
    /// that never reports usage to this host): tokens only, turns unchanged.
    fn add_claimed(&mut self, rec: &LedgerRecord, tz: &TimeZone) {
        self.tokens.add(&rec.tokens);
        if let Some(date) = rec.at_ms.and_then(|ms| date_of(ms, tz)) {
            self.days.entry(date).or_default().tokens.add(&rec.tokens);
        }
    }

    /// A ledger record outside this host: only the day's `outside`.
    fn add_outside(&mut self, rec: &LedgerRecord, tz: &TimeZone) {
        if let Some(date) = rec.at_ms.and_then(|ms| date_of(ms, tz)) {
            self.days
                .entry(date)
                .or_default()
                .outside
                .get_or_insert_with(TokenTotals::default)
                .add(&rec.tokens);
        }
    }

    fn metrics_and_days(&self) -> (UsageMetrics, Vec<UsageDay>) {
        let t = &self.tokens;
        // Dates with own usage (not only outside usage) make the range and active days.
        let own: Vec<&String> = self
            .days
            .iter()
            .filter(|(_, d)| !d.turns.is_empty() || !d.tokens.is_zero())
            .map(|(k, _)| k)
            .collect();
        let date_range = match (own.first(), own.last()) {
            (Some(a), Some(b)) => [(*a).clone(), (*b).clone()],
            _ => [String::new(), String::new()],
        };
        let metrics = UsageMetrics {
            prompt_tokens: t.input_tokens.saturating_add(t.cache_read_tokens),
            context_tokens: t
                .input_tokens
                .saturating_add(t.cache_read_tokens)
                .saturating_add(t.output_tokens),
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cache_read_tokens: t.cache_read_tokens,
            cache_creation_tokens: t.cache_creation_tokens,
            cache_hit_rate: rate(t.cache_read_tokens, t.input_tokens),
            turns: self.turns.len() as u64,
            agents: self.agents.len() as u64,
            date_range,
            active_days: own.len() as u64,
        };
        let days = self
            .days
            .iter()
            .map(|(date, d)| UsageDay {
                date: date.clone(),
                input_tokens: d.tokens.input_tokens,
                output_tokens: d.tokens.output_tokens,
                cache_creation_tokens: d.tokens.cache_creation_tokens,
                cache_read_tokens: d.tokens.cache_read_tokens,
                cache_hit_rate: rate(d.tokens.cache_read_tokens, d.tokens.input_tokens),
                turns: d.turns.len() as u64,
                agents: d.agents.len() as u64,
                outside: d.outside,
            })
            .collect();
        (metrics, days)
    }
}

/// `usage/overview` from the usage records, days in `tz`.
pub fn overview(rows: &[UsageScanRow], tz: &TimeZone) -> UsageOverviewResult {
    let mut agg = Agg::default();
    for r in rows {
        agg.add_row(r, tz);
    }
    let (metrics, days) = agg.metrics_and_days();
    UsageOverviewResult {
        total_sessions: agg.sessions.len() as u64,
        metrics,
        days,
    }
}

/// Per `provider|model` buckets, zero buckets dropped, largest context total first
/// (ties by provider, then model, for a stable order).
pub fn model_breakdowns(rows: &[UsageScanRow]) -> Vec<ModelBreakdown> {
    let mut buckets: HashMap<(&str, &str), (TokenTotals, HashSet<&str>)> = HashMap::new();
    for r in rows {
        let b = buckets
            .entry((r.provider.as_str(), r.model.as_str()))
            .or_default();
        b.0.add(&totals_of(r));
        b.1.insert(r.thread_id.as_str());
    }
    let mut out: Vec<ModelBreakdown> = buckets
        .into_iter()
        .filter(|(_, (t, _))| !t.is_zero())
        .map(|((provider, model), (t, sessions))| ModelBreakdown {
            provider: provider.to_owned(),
            model: model.to_owned(),
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cache_creation_tokens: t.cache_creation_tokens,
            cache_read_tokens: t.cache_read_tokens,
            sessions: sessions.len() as u64,
        })
        .collect();
    let total = |m: &ModelBreakdown| {
        m.input_tokens
            .saturating_add(m.output_tokens)
            .saturating_add(m.cache_creation_tokens)
            .saturating_add(m.cache_read_tokens)
    };
    out.sort_by(|a, b| {
        total(b)
            .cmp(&total(a))
            .then_with(|| a.provider.cmp(&b.provider))
            .then_with(|| a.model.cmp(&b.model))
    });
    out
}

/// The inputs of `settings/usage` (what one shared scan read).
pub struct SettingsInputs<'a> {
    /// Usage records.
    pub rows: &'a [UsageScanRow],
    /// Conversations bound to external engines and their native sessions.
    pub claims: &'a [EngineClaim],
    /// Skill loads by name.
    pub skills: &'a [(String, u64)],
    /// Per ledger engine: what its scan found.
    pub ledgers: &'a [(String, LedgerOutcome)],
    /// `generated_at`, Unix ms.
    pub now_ms: i64,
}

/// Whether an engine's adapter reports usage records to this host (its claimed ledger
/// rows are then already in our records and are dropped, not double counted). The ACP
/// family does not (its claimed ledger rows count on the in-Wuu side).
pub fn reports_usage(engine_id: &str) -> bool {
    matches!(engine_id, "wuu" | "" | "codex" | "claude" | "opencode")
}

/// `settings/usage`, days in `tz`.
pub fn settings(input: &SettingsInputs<'_>, tz: &TimeZone) -> SettingsUsageResult {
    let mut agg = Agg::default();
    let mut engines: BTreeMap<String, EngineBreakdown> = BTreeMap::new();
    for r in input.rows {
        agg.add_row(r, tz);
        let id = engine_bucket(&r.engine_id);
        engines
            .entry(id.to_owned())
            .or_insert_with(|| EngineBreakdown {
                engine_id: id.to_owned(),
                ..Default::default()
            })
            .in_wuu
            .add(&totals_of(r));
    }
    for (engine_id, outcome) in input.ledgers {
        let LedgerOutcome::Read(records) = outcome else {
            // No readable ledger, or its scan failed: no `outside` (absent ≠ 0).
            continue;
        };
        let claimed: HashSet<&str> = input
            .claims
            .iter()
            .filter(|c| c.engine_id == *engine_id)
            .filter_map(|c| c.engine_ref.as_deref())
            .collect();
        let entry = engines
            .entry(engine_id.clone())
            .or_insert_with(|| EngineBreakdown {
                engine_id: engine_id.clone(),
                ..Default::default()
            });
        let mut outside = TokenTotals::default();
        for rec in records {
            if claimed.contains(rec.session_id.as_str()) {
                if !reports_usage(engine_id) {
                    entry.in_wuu.add(&rec.tokens);
                    agg.add_claimed(rec, tz);
                }
                continue;
            }
            outside.add(&rec.tokens);
            agg.add_outside(rec, tz);
        }
        entry.outside = Some(outside);
    }
    let (metrics, days) = agg.metrics_and_days();
    // `load_skill` accepts `/name` for `name`: count them as one skill.
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for (name, count) in input.skills {
        let name = name.trim().trim_start_matches('/').trim();
        if !name.is_empty() {
            *by_name.entry(name.to_owned()).or_default() += count;
        }
    }
    let mut skill_usage: Vec<SkillUsage> = by_name
        .into_iter()
        .map(|(name, count)| SkillUsage { name, count })
        .collect();
    skill_usage.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    SettingsUsageResult {
        total_sessions: agg.sessions.len() as u64,
        generated_at: crate::util::rfc3339(input.now_ms),
        metrics,
        model_breakdowns: model_breakdowns(input.rows),
        skill_usage,
        days,
        engine_breakdowns: Some(engines.into_values().collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(thread: &str, turn: &str, at_ms: i64, input: u64, output: u64) -> UsageScanRow {
        UsageScanRow {
            is_agent: false,
            thread_id: thread.into(),
            engine_id: String::new(),
            turn_id: turn.into(),
            provider: "p".into(),
            model: "m".into(),
            at_ms,
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
        }
    }

    fn ms(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn unknown_and_empty_zones() {
        assert_eq!(zone(None).unwrap(), TimeZone::UTC);
        assert_eq!(zone(Some("  ")).unwrap(), TimeZone::UTC);
        let e = zone(Some("Mars/Olympus_Mons")).unwrap_err();
        assert!(e.starts_with("invalid timezone"), "{e}");
        assert!(zone(Some(&"x".repeat(10_000))).is_err());
        assert!(zone(Some("America/Los_Angeles")).is_ok());
    }

    #[test]
    fn days_follow_the_dst_change_in_los_angeles() {
        let tz = zone(Some("America/Los_Angeles")).unwrap();
        // 2024-03-10: clocks go from 02:00 PST (-08) to 03:00 PDT (-07).
        // 07:30Z = 23:30 PST on the 9th; 08:30Z = 00:30 PST on the 10th;
        // 2024-03-11T06:30Z = 23:30 PDT on the 10th (it would be 22:30 on the 10th
        // at -08, and 00:30 of the 11th is 07:30Z).
        let rows = vec![
            row("a", "t1", ms("2024-03-10T07:30:00Z"), 1, 0),
            row("a", "t2", ms("2024-03-10T08:30:00Z"), 2, 0),
            row("a", "t3", ms("2024-03-11T06:30:00Z"), 4, 0),
            row("a", "t4", ms("2024-03-11T07:30:00Z"), 8, 0),
        ];
        let o = overview(&rows, &tz);
        let got: Vec<(&str, u64)> = o
            .days
            .iter()
            .map(|d| (d.date.as_str(), d.input_tokens))
            .collect();
        assert_eq!(
            got,
            vec![("2024-03-09", 1), ("2024-03-10", 6), ("2024-03-11", 8)]
        );
        assert_eq!(
            o.metrics.date_range,
            ["2024-03-09".to_owned(), "2024-03-11".to_owned()]
        );
        assert_eq!(o.metrics.active_days, 3);
        // The same records in UTC.
        let u = overview(&rows, &TimeZone::UTC);
        let got: Vec<(&str, u64)> = u
            .days
            .iter()
            .map(|d| (d.date.as_str(), d.input_tokens))
            .collect();
        assert_eq!(got, vec![("2024-03-10", 3), ("2024-03-11", 12)]);
        // And across the fall-back change (2024-11-03, 02:00 PDT → 01:00 PST):
        // 07:59Z = 00:59 PDT on the 3rd; 2024-11-04T07:59Z = 23:59 PST on the 3rd.
        let rows = vec![
            row("b", "t1", ms("2024-11-03T06:59:00Z"), 1, 0),
            row("b", "t2", ms("2024-11-03T07:59:00Z"), 2, 0),
            row("b", "t3", ms("2024-11-04T07:59:00Z"), 4, 0),
            row("b", "t4", ms("2024-11-04T08:00:00Z"), 8, 0),
        ];
        let o = overview(&rows, &tz);
        let got: Vec<(&str, u64)> = o
            .days
            .iter()
            .map(|d| (d.date.as_str(), d.input_tokens))
            .collect();
        assert_eq!(
            got,
            vec![("2024-11-02", 1), ("2024-11-03", 6), ("2024-11-04", 8)]
        );
    }

    #[test]
    fn metrics_count_turns_sessions_and_rates() {
        let mut r1 = row("a", "t1", ms("2024-01-01T10:00:00Z"), 100, 10);
        r1.cache_read_tokens = 300;
        let r2 = row("a", "t1", ms("2024-01-01T10:01:00Z"), 50, 5);
        let r3 = row("b", "t1", ms("2024-01-02T10:00:00Z"), 50, 5);
        let o = overview(&[r1, r2, r3], &TimeZone::UTC);
        assert_eq!(o.total_sessions, 2);
        assert_eq!(o.metrics.turns, 2, "two records of one turn are one turn");
        assert_eq!(o.metrics.input_tokens, 200);
        assert_eq!(o.metrics.prompt_tokens, 500);
        assert_eq!(o.metrics.context_tokens, 520);
        assert!((o.metrics.cache_hit_rate - 0.6).abs() < 1e-9);
        assert_eq!(o.days.len(), 2);
        assert_eq!(o.days[0].turns, 1);
        assert!((o.days[0].cache_hit_rate - 300.0 / 450.0).abs() < 1e-9);
    }

    #[test]
    fn nothing_gives_zeros_and_no_days() {
        let o = overview(&[], &TimeZone::UTC);
        assert_eq!(o.total_sessions, 0);
        assert_eq!(o.metrics, UsageMetrics::default());
        assert!(o.days.is_empty());
        let s = settings(
            &SettingsInputs {
                rows: &[],
                claims: &[],
                skills: &[],
                ledgers: &[("codex".into(), LedgerOutcome::Absent)],
                now_ms: 1,
            },
            &TimeZone::UTC,
        );
        assert!(s.days.is_empty());
        assert!(s.model_breakdowns.is_empty());
        assert_eq!(s.engine_breakdowns, Some(vec![]));
    }

    #[test]
    fn ledgers_split_into_claimed_and_outside() {
        let mut mine = row("a", "t1", ms("2024-01-01T10:00:00Z"), 10, 1);
        mine.engine_id = "codex".into();
        let claims = vec![EngineClaim {
            thread_id: "a".into(),
            engine_id: "codex".into(),
            engine_ref: Some("native-1".into()),
        }];
        let rec = |sid: &str, at: &str, input: u64| LedgerRecord {
            session_id: sid.into(),
            at_ms: Some(ms(at)),
            tokens: TokenTotals {
                input_tokens: input,
                ..Default::default()
            },
            dedupe: None,
        };
        let ledgers = vec![
            (
                "codex".to_owned(),
                LedgerOutcome::Read(vec![
                    rec("native-1", "2024-01-01T10:00:00Z", 10),
                    rec("native-2", "2024-01-03T10:00:00Z", 7),
                ]),
            ),
            (
                "claude".to_owned(),
                LedgerOutcome::Failed("unreadable".into()),
            ),
            (
                "devin".to_owned(),
                LedgerOutcome::Read(vec![
                    rec("dv-1", "2024-01-01T12:00:00Z", 5),
                    rec("dv-2", "2024-01-01T12:00:00Z", 3),
                ]),
            ),
        ];
        let claims = [
            claims,
            vec![EngineClaim {
                thread_id: "d".into(),
                engine_id: "devin".into(),
                engine_ref: Some("dv-1".into()),
            }],
        ]
        .concat();
        let s = settings(
            &SettingsInputs {
                rows: &[mine],
                claims: &claims,
                skills: &[("review".into(), 2), ("/review".into(), 1), (" ".into(), 5)],
                ledgers: &ledgers,
                now_ms: 0,
            },
            &TimeZone::UTC,
        );
        let eb = s.engine_breakdowns.unwrap();
        let by: HashMap<&str, &EngineBreakdown> =
            eb.iter().map(|e| (e.engine_id.as_str(), e)).collect();
        // Codex: the claimed native session is already in our records (not counted
        // twice); the other one is outside.
        assert_eq!(by["codex"].in_wuu.input_tokens, 10);
        assert_eq!(by["codex"].outside.unwrap().input_tokens, 7);
        // A failed scan: no entry at all (no in-Wuu usage, no outside).
        assert!(!by.contains_key("claude"));
        // Devin never reports usage: its claimed ledger rows count in Wuu.
        assert_eq!(by["devin"].in_wuu.input_tokens, 5);
        assert_eq!(by["devin"].outside.unwrap().input_tokens, 3);
        // Days: claimed Devin rows in the day's own fields, outside rows in `outside`;
        // turns unchanged.
        assert_eq!(s.days.len(), 2);
        assert_eq!(s.days[0].date, "2024-01-01");
        assert_eq!(s.days[0].input_tokens, 15);
        assert_eq!(s.days[0].turns, 1);
        assert_eq!(s.days[0].outside.unwrap().input_tokens, 3);
        assert_eq!(s.days[1].date, "2024-01-03");
        assert_eq!(s.days[1].input_tokens, 0);
        assert_eq!(s.days[1].turns, 0);
        assert_eq!(s.days[1].outside.unwrap().input_tokens, 7);
        // A day with only outside usage is not an active day.
        assert_eq!(s.metrics.active_days, 1);
        assert_eq!(s.metrics.input_tokens, 15);
        assert_eq!(
            s.skill_usage,
            vec![SkillUsage {
                name: "review".into(),
                count: 3
            }]
        );
    }
}
