//! Readers of the external engines' own local usage ledgers, for the `outside` side of
//! `settings/usage` `engine_breakdowns` (spec `engines.md` §4.4). Read-only: files are
//! opened for reading, SQLite ledgers with `SQLITE_OPEN_READ_ONLY`; nothing is written.
//!
//! Formats, as the tools write them:
//! - **Codex** (`$CODEX_HOME`, default `~/.codex`): `sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`
//!   (and `archived_sessions/`). First line `{"type":"session_meta","payload":{"id":…}}`
//!   (older files: a bare `{"id":…}` header); usage lines
//!   `{"timestamp":…,"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{…},"last_token_usage":{…}}}}`
//!   with `input_tokens`, `cached_input_tokens`, `output_tokens`; `info` may be null and
//!   Codex repeats an unchanged count. Per call: the difference of successive cumulative
//!   totals (a repeated total adds nothing; a total that went down falls back to
//!   `last_token_usage`). input = `input_tokens − cached_input_tokens`, cache read =
//!   `cached_input_tokens`, output = `output_tokens`.
//! - **Claude Code** (`$CLAUDE_CONFIG_DIR`, default `~/.claude`): `projects/<encoded cwd>/<session>.jsonl`
//!   and sub-agent sidechains `projects/<encoded cwd>/<session>/subagents/*.jsonl`. Lines
//!   `{"type":"assistant","sessionId":…,"requestId":…,"timestamp":…,"message":{"id":…,"model":…,"usage":{"input_tokens","output_tokens","cache_creation_input_tokens","cache_read_input_tokens"}}}`;
//!   `model == "<synthetic>"` is skipped; streaming writes one message several times,
//!   so records are de-duplicated by `message.id` + `requestId` (the largest count wins).
//! - **OpenCode** (`$XDG_DATA_HOME/opencode`, default `~/.local/share/opencode`):
//!   `opencode.db` table `message(id, session_id, time_created, data)` (≥ 1.2), or the
//!   older `storage/message/<session>/<message>.json`; assistant `data.tokens`
//!   `{input, output, reasoning, cache:{read, write}}` → input, output + reasoning,
//!   cache read, cache creation; day from `time_created` (ms).
//!
//! Parsed files are cached by (size, mtime), so a repeated visit rereads only what
//! changed. A missing ledger root is [`LedgerOutcome::Absent`]; an unreadable root is
//! [`LedgerOutcome::Failed`]; an unreadable or malformed single file is skipped.
//!
//! These files belong to other programs, so nothing here may hang or swallow memory:
//! every file is opened non-blocking and read only when `fstat` on the open file says it
//! is a regular file (a FIFO or a device in place of a ledger is skipped, or fails the
//! OpenCode database); JSON Lines are streamed line by line (at most
//! [`MAX_LINE_BYTES`] a line), an OpenCode message file is streamed and skipped with a
//! warning above [`MAX_MESSAGE_FILE_BYTES`]; and each engine's scan stops at
//! [`SCAN_DEADLINE`] ([`LedgerOutcome::Failed`]: its `outside` is absent, not short).

use parking_lot::Mutex;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use wuu_protocol::TokenTotals;

/// Most files one engine's scan visits.
const MAX_FILES: usize = 50_000;
/// Files larger than this are skipped.
const MAX_FILE_BYTES: u64 = 1 << 30;
/// Longest line parsed (longer lines are skipped).
const MAX_LINE_BYTES: usize = 64 << 20;
/// Deepest directory level walked below a ledger root.
const MAX_DEPTH: usize = 6;
/// Largest OpenCode message file read (one JSON object, normally a few KiB); larger
/// ones are skipped with a warning.
pub const MAX_MESSAGE_FILE_BYTES: u64 = 16 << 20;
/// Longest one engine's ledger scan may take; past it the scan fails (its `outside` is
/// absent rather than short) and the next request scans again (finished files are
/// cached).
pub const SCAN_DEADLINE: Duration = Duration::from_secs(10);

/// The end of one engine's scan.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(Instant);

impl Deadline {
    /// [`SCAN_DEADLINE`] from now.
    pub fn start() -> Deadline {
        Deadline(Instant::now() + SCAN_DEADLINE)
    }

    /// `Err(TimedOut)` once passed.
    fn check(&self) -> std::io::Result<()> {
        if Instant::now() >= self.0 {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the ledger scan took longer than {} s",
                    SCAN_DEADLINE.as_secs()
                ),
            ))
        } else {
            Ok(())
        }
    }
}

/// Opens `path` for reading without blocking (`O_NONBLOCK`: opening a FIFO with no
/// writer, or a device, returns at once) and returns it with the metadata of the open
/// file (`fstat`, so a file swapped after a check cannot slip through). Errors:
/// `InvalidInput` when it is not a regular file; the open's own error otherwise.
/// Reading a regular file is unaffected by `O_NONBLOCK`.
pub fn open_regular(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        rustix::fs::OFlags::NONBLOCK.bits() as i32,
    );
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok((file, meta))
}

/// One usage record of a ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRecord {
    /// The engine's native session id.
    pub session_id: String,
    /// When it was written, Unix ms (`None`: no usable timestamp; counts in totals only).
    pub at_ms: Option<i64>,
    /// Tokens.
    pub tokens: TokenTotals,
    /// De-duplication key across files (Claude Code: message id + request id).
    pub dedupe: Option<String>,
}

/// What one engine's ledger scan found.
#[derive(Debug, Clone, PartialEq)]
pub enum LedgerOutcome {
    /// The engine has no ledger on this machine.
    Absent,
    /// The records.
    Read(Vec<LedgerRecord>),
    /// The ledger exists but could not be read (the text says why; logged, not sent).
    Failed(String),
}

/// Where the ledgers live (from the environment, or given by tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerRoots {
    /// `$CODEX_HOME`, else `~/.codex`.
    pub codex_home: Option<PathBuf>,
    /// `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
    pub claude_dir: Option<PathBuf>,
    /// `$XDG_DATA_HOME/opencode`, else `~/.local/share/opencode`.
    pub opencode_data: Option<PathBuf>,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl LedgerRoots {
    /// The roots of this process's environment (`HOME` and the engines' variables).
    pub fn from_env() -> LedgerRoots {
        let home = env_path("HOME");
        LedgerRoots {
            codex_home: env_path("CODEX_HOME").or_else(|| home.as_ref().map(|h| h.join(".codex"))),
            claude_dir: env_path("CLAUDE_CONFIG_DIR")
                .or_else(|| home.as_ref().map(|h| h.join(".claude"))),
            opencode_data: env_path("XDG_DATA_HOME")
                .map(|d| d.join("opencode"))
                .or_else(|| home.as_ref().map(|h| h.join(".local/share/opencode"))),
        }
    }
}

type Fingerprint = (u64, Option<SystemTime>);
type CachedFile = (Fingerprint, Arc<Vec<LedgerRecord>>);

/// Parsed files by path, valid while their size and mtime are unchanged.
#[derive(Default)]
pub struct LedgerCache {
    files: Mutex<HashMap<PathBuf, CachedFile>>,
}

fn fingerprint(meta: &std::fs::Metadata) -> Fingerprint {
    (meta.len(), meta.modified().ok())
}

impl LedgerCache {
    /// The records of `path` (cached by `meta`'s size and mtime). A file that cannot be
    /// parsed counts as empty until it changes; a passed deadline is returned (and
    /// nothing cached).
    fn get_or_parse(
        &self,
        path: &Path,
        meta: &std::fs::Metadata,
        parse: impl FnOnce() -> std::io::Result<Vec<LedgerRecord>>,
    ) -> std::io::Result<Arc<Vec<LedgerRecord>>> {
        let fp = fingerprint(meta);
        if let Some((f, recs)) = self.files.lock().get(path) {
            if *f == fp {
                return Ok(recs.clone());
            }
        }
        let recs = match parse() {
            Ok(r) => Arc::new(r),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(e),
            Err(e) => {
                log::debug!("ledger file {} skipped: {e}", path.display());
                Arc::new(Vec::new())
            }
        };
        self.files
            .lock()
            .insert(path.to_path_buf(), (fp, recs.clone()));
        Ok(recs)
    }

    /// Drops entries of files under `root` that `seen` does not contain (deleted files).
    fn retain_seen(&self, root: &Path, seen: &std::collections::HashSet<PathBuf>) {
        self.files
            .lock()
            .retain(|p, _| !p.starts_with(root) || seen.contains(p));
    }
}

/// Engine ids that have a ledger reader, in report order.
pub const LEDGER_ENGINES: &[&str] = &["claude", "codex", "opencode"];

/// Scans every ledger engine's ledger.
pub fn scan_all(roots: &LedgerRoots, cache: &LedgerCache) -> Vec<(String, LedgerOutcome)> {
    vec![
        (
            "claude".to_owned(),
            scan_claude(roots.claude_dir.as_deref(), cache),
        ),
        (
            "codex".to_owned(),
            scan_codex(roots.codex_home.as_deref(), cache),
        ),
        (
            "opencode".to_owned(),
            scan_opencode(roots.opencode_data.as_deref(), cache),
        ),
    ]
}

/// Files under `root` (depth-limited) whose name satisfies `want`, sorted. Errors only
/// when `root` itself cannot be read.
fn walk(root: &Path, want: &dyn Fn(&str) -> bool) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut first = true;
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if first => return Err(e),
            Err(e) => {
                log::debug!("ledger directory {} skipped: {e}", dir.display());
                continue;
            }
        };
        first = false;
        for entry in entries.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            let path = entry.path();
            if ft.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
            } else if ft.is_file() && entry.file_name().to_str().is_some_and(want) {
                out.push(path);
                if out.len() >= MAX_FILES {
                    log::warn!(
                        "ledger under {} has more than {MAX_FILES} files",
                        root.display()
                    );
                    out.sort();
                    return Ok(out);
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Lines of an open file, each at most [`MAX_LINE_BYTES`] (longer ones are skipped),
/// until its end or `deadline`.
fn for_each_line(
    file: std::fs::File,
    deadline: &Deadline,
    mut f: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(64 * 1024, file);
    let mut buf = Vec::new();
    let mut lines = 0u32;
    loop {
        lines = lines.wrapping_add(1);
        if lines % 256 == 0 {
            deadline.check()?;
        }
        buf.clear();
        let n = (&mut r)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            // Skip the rest of an oversized line.
            loop {
                buf.clear();
                let m = (&mut r).take(1 << 20).read_until(b'\n', &mut buf)?;
                if m == 0 || buf.last() == Some(&b'\n') {
                    break;
                }
            }
            continue;
        }
        f(&buf);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn parse_ts(s: Option<&str>) -> Option<i64> {
    s?.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// A parser of one ledger file: its path (for ids in its name) and the open file.
type ParseFile = fn(&Path, std::fs::File, &Deadline) -> std::io::Result<Vec<LedgerRecord>>;

fn scan_files(
    root: &Path,
    want: &dyn Fn(&str) -> bool,
    cache: &LedgerCache,
    max_bytes: u64,
    deadline: &Deadline,
    parse: ParseFile,
) -> std::io::Result<Vec<LedgerRecord>> {
    let files = walk(root, want)?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for path in files {
        deadline.check()?;
        let (file, meta) = match open_regular(&path) {
            Ok(f) => f,
            Err(e) => {
                log::debug!("ledger file {} skipped: {e}", path.display());
                continue;
            }
        };
        if meta.len() > max_bytes {
            log::warn!(
                "ledger file {} skipped: {} bytes is over the limit of {max_bytes}",
                path.display(),
                meta.len()
            );
            continue;
        }
        let recs = cache.get_or_parse(&path, &meta, || parse(&path, file, deadline))?;
        out.extend(recs.iter().cloned());
        seen.insert(path);
    }
    cache.retain_seen(root, &seen);
    Ok(out)
}

fn outcome(
    root: Option<&Path>,
    scan: impl FnOnce(&Path) -> std::io::Result<Vec<LedgerRecord>>,
) -> LedgerOutcome {
    let Some(root) = root else {
        return LedgerOutcome::Absent;
    };
    if !root.exists() {
        return LedgerOutcome::Absent;
    }
    match scan(root) {
        Ok(r) => LedgerOutcome::Read(r),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => LedgerOutcome::Absent,
        Err(e) => {
            log::warn!("ledger {} unreadable: {e}", root.display());
            LedgerOutcome::Failed(e.to_string())
        }
    }
}

// ----- Codex ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct CodexLine {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    payload: Option<CodexPayload>,
    /// Old rollouts: a bare header `{"id":…,"timestamp":…}`.
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize)]
struct CodexPayload {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    info: Option<CodexInfo>,
}

#[derive(Deserialize)]
struct CodexInfo {
    #[serde(default)]
    total_token_usage: Option<CodexUsage>,
    #[serde(default)]
    last_token_usage: Option<CodexUsage>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Default)]
struct CodexUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl CodexUsage {
    fn minus(&self, p: &CodexUsage) -> Option<CodexUsage> {
        Some(CodexUsage {
            input_tokens: self.input_tokens.checked_sub(p.input_tokens)?,
            cached_input_tokens: self
                .cached_input_tokens
                .checked_sub(p.cached_input_tokens)?,
            output_tokens: self.output_tokens.checked_sub(p.output_tokens)?,
        })
    }

    fn tokens(&self) -> TokenTotals {
        TokenTotals {
            input_tokens: self.input_tokens.saturating_sub(self.cached_input_tokens),
            output_tokens: self.output_tokens,
            cache_creation_tokens: 0,
            cache_read_tokens: self.cached_input_tokens,
        }
    }
}

/// The uuid at the end of `rollout-<ts>-<uuid>.jsonl`.
fn codex_id_from_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let n = stem.len();
    if n >= 36 && stem.is_char_boundary(n - 36) {
        stem[n - 36..].to_owned()
    } else {
        stem.to_owned()
    }
}

fn parse_codex(
    path: &Path,
    file: std::fs::File,
    deadline: &Deadline,
) -> std::io::Result<Vec<LedgerRecord>> {
    let mut session: Option<String> = None;
    let mut pending: Vec<(Option<i64>, TokenTotals)> = Vec::new();
    let mut prev: Option<CodexUsage> = None;
    let mut line_no = 0usize;
    for_each_line(file, deadline, |line| {
        line_no += 1;
        let meta = session.is_none() && (line_no <= 2 || contains(line, b"session_meta"));
        if !meta && !contains(line, b"token_count") {
            return;
        }
        let Ok(l) = serde_json::from_slice::<CodexLine>(line) else {
            return;
        };
        let payload_kind = l.payload.as_ref().and_then(|p| p.kind.as_deref());
        if l.kind.as_deref() == Some("session_meta") {
            if let Some(id) = l.payload.as_ref().and_then(|p| p.id.clone()) {
                session.get_or_insert(id);
            }
            return;
        }
        if line_no == 1 && l.kind.is_none() {
            if let Some(id) = l.id.clone() {
                session.get_or_insert(id);
            }
            return;
        }
        if l.kind.as_deref() != Some("event_msg") || payload_kind != Some("token_count") {
            return;
        }
        let Some(info) = l.payload.and_then(|p| p.info) else {
            return;
        };
        let delta = match info.total_token_usage {
            Some(total) => {
                if prev == Some(total) {
                    return;
                }
                let d = match prev {
                    Some(p) => total.minus(&p).or(info.last_token_usage).unwrap_or(total),
                    None => total,
                };
                prev = Some(total);
                d
            }
            None => match info.last_token_usage {
                Some(last) => last,
                None => return,
            },
        };
        let tokens = delta.tokens();
        if !tokens.is_zero() {
            pending.push((parse_ts(l.timestamp.as_deref()), tokens));
        }
    })?;
    let session_id = session.unwrap_or_else(|| codex_id_from_name(path));
    Ok(pending
        .into_iter()
        .map(|(at_ms, tokens)| LedgerRecord {
            session_id: session_id.clone(),
            at_ms,
            tokens,
            dedupe: None,
        })
        .collect())
}

/// Codex rollouts under `codex_home`.
pub fn scan_codex(codex_home: Option<&Path>, cache: &LedgerCache) -> LedgerOutcome {
    let deadline = Deadline::start();
    outcome(codex_home, |home| {
        let want = |n: &str| n.starts_with("rollout-") && n.ends_with(".jsonl");
        let mut out = Vec::new();
        let mut any = false;
        for sub in ["sessions", "archived_sessions"] {
            let dir = home.join(sub);
            if !dir.exists() {
                continue;
            }
            any = true;
            out.extend(scan_files(
                &dir,
                &want,
                cache,
                MAX_FILE_BYTES,
                &deadline,
                parse_codex,
            )?);
        }
        if !any {
            return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        }
        Ok(out)
    })
}

// ----- Claude Code ---------------------------------------------------------------------

#[derive(Deserialize)]
struct ClaudeLine {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
    #[serde(rename = "requestId", default)]
    request_id: Option<String>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    message: Option<ClaudeMessage>,
}

#[derive(Deserialize)]
struct ClaudeMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<ClaudeUsage>,
}

#[derive(Deserialize)]
struct ClaudeUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
}

fn parse_claude(
    path: &Path,
    file: std::fs::File,
    deadline: &Deadline,
) -> std::io::Result<Vec<LedgerRecord>> {
    let fallback = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("")
        .to_owned();
    let mut out = Vec::new();
    for_each_line(file, deadline, |line| {
        if !contains(line, b"\"assistant\"") || !contains(line, b"\"usage\"") {
            return;
        }
        let Ok(l) = serde_json::from_slice::<ClaudeLine>(line) else {
            return;
        };
        if l.kind.as_deref() != Some("assistant") {
            return;
        }
        let Some(msg) = l.message else { return };
        if msg.model.as_deref() == Some("<synthetic>") {
            return;
        }
        let Some(u) = msg.usage else { return };
        let tokens = TokenTotals {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_creation_tokens: u.cache_creation_input_tokens,
            cache_read_tokens: u.cache_read_input_tokens,
        };
        let dedupe = msg
            .id
            .map(|id| format!("{id}\0{}", l.request_id.as_deref().unwrap_or("")));
        out.push(LedgerRecord {
            session_id: l.session_id.unwrap_or_else(|| fallback.clone()),
            at_ms: parse_ts(l.timestamp.as_deref()),
            tokens,
            dedupe,
        });
    })?;
    Ok(out)
}

/// Keeps one record per de-duplication key (the one with the largest total, first on
/// ties), in first-seen order.
fn dedupe(records: Vec<LedgerRecord>) -> Vec<LedgerRecord> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<LedgerRecord> = Vec::with_capacity(records.len());
    for r in records {
        match r.dedupe.clone() {
            Some(key) => match index.get(&key) {
                Some(&i) => {
                    if r.tokens.total() > out[i].tokens.total() {
                        out[i] = r;
                    }
                }
                None => {
                    index.insert(key, out.len());
                    out.push(r);
                }
            },
            None => out.push(r),
        }
    }
    out
}

/// Claude Code transcripts under `claude_dir/projects`.
pub fn scan_claude(claude_dir: Option<&Path>, cache: &LedgerCache) -> LedgerOutcome {
    let deadline = Deadline::start();
    outcome(
        claude_dir.map(|d| d.join("projects")).as_deref(),
        |projects| {
            let want = |n: &str| n.ends_with(".jsonl");
            Ok(dedupe(scan_files(
                projects,
                &want,
                cache,
                MAX_FILE_BYTES,
                &deadline,
                parse_claude,
            )?))
        },
    )
}

// ----- OpenCode ------------------------------------------------------------------------

#[derive(Deserialize)]
struct OpenCodeMessage {
    #[serde(default)]
    role: Option<String>,
    #[serde(rename = "sessionID", default)]
    session_id: Option<String>,
    #[serde(default)]
    time: Option<OpenCodeTime>,
    #[serde(default)]
    tokens: Option<OpenCodeTokens>,
}

#[derive(Deserialize)]
struct OpenCodeTime {
    #[serde(default)]
    created: Option<f64>,
}

#[derive(Deserialize)]
struct OpenCodeTokens {
    #[serde(default)]
    input: f64,
    #[serde(default)]
    output: f64,
    #[serde(default)]
    reasoning: f64,
    #[serde(default)]
    cache: Option<OpenCodeCache>,
}

#[derive(Deserialize)]
struct OpenCodeCache {
    #[serde(default)]
    read: f64,
    #[serde(default)]
    write: f64,
}

/// A non-negative finite count (OpenCode stores JSON numbers that may be floats).
fn count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

fn opencode_record(
    data: &[u8],
    session: Option<String>,
    created_ms: Option<i64>,
) -> Option<LedgerRecord> {
    let m: OpenCodeMessage = serde_json::from_slice(data).ok()?;
    opencode_message_record(m, session, created_ms)
}

/// The record of one OpenCode message (`session` overrides its `sessionID`).
fn opencode_message_record(
    m: OpenCodeMessage,
    session: Option<String>,
    created_ms: Option<i64>,
) -> Option<LedgerRecord> {
    if m.role.as_deref() != Some("assistant") {
        return None;
    }
    let t = m.tokens?;
    let cache = t.cache.unwrap_or(OpenCodeCache {
        read: 0.0,
        write: 0.0,
    });
    let tokens = TokenTotals {
        input_tokens: count(t.input),
        output_tokens: count(t.output).saturating_add(count(t.reasoning)),
        cache_creation_tokens: count(cache.write),
        cache_read_tokens: count(cache.read),
    };
    if tokens.is_zero() {
        return None;
    }
    let at_ms = created_ms
        .filter(|ms| *ms > 0)
        .or_else(|| m.time.and_then(|t| t.created).map(|c| c as i64));
    Some(LedgerRecord {
        session_id: session.or(m.session_id)?,
        at_ms,
        tokens,
        dedupe: None,
    })
}

/// Reads `opencode.db` read-only. The file (and its `-wal` / `-shm` companions, when
/// present) must be regular files: SQLite opens them blocking, so a FIFO there would
/// hang the scan. Rows are read until `deadline`.
fn read_opencode_db(db: &Path, deadline: &Deadline) -> std::io::Result<Vec<LedgerRecord>> {
    open_regular(db)?;
    for suffix in ["-wal", "-shm"] {
        let mut companion = db.as_os_str().to_owned();
        companion.push(suffix);
        let companion = PathBuf::from(companion);
        if std::fs::symlink_metadata(&companion).is_ok() {
            open_regular(&companion)?;
        }
    }
    let sqlite = |e: rusqlite::Error| std::io::Error::other(format!("opencode.db: {e}"));
    read_opencode_rows(db, deadline).map_err(|e| match e {
        RowsError::Sqlite(e) => sqlite(e),
        RowsError::Io(e) => e,
    })
}

enum RowsError {
    Sqlite(rusqlite::Error),
    Io(std::io::Error),
}

impl From<rusqlite::Error> for RowsError {
    fn from(e: rusqlite::Error) -> Self {
        RowsError::Sqlite(e)
    }
}

fn read_opencode_rows(db: &Path, deadline: &Deadline) -> Result<Vec<LedgerRecord>, RowsError> {
    use rusqlite::{Connection, OpenFlags};
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(db, flags) {
        Ok(c) => c,
        Err(e) => {
            log::debug!("opencode.db read-only open failed ({e}); trying immutable");
            let uri = format!("file:{}?immutable=1", db.display());
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)?
        }
    };
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    let mut stmt = conn.prepare("SELECT session_id, time_created, data FROM message")?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    let mut n = 0u32;
    while let Some(row) = rows.next()? {
        n = n.wrapping_add(1);
        if n % 1024 == 0 {
            deadline.check().map_err(RowsError::Io)?;
        }
        let Ok(session) = row.get::<_, String>(0) else {
            continue;
        };
        let created: Option<i64> = row.get(1).ok();
        let data: &[u8] = match row.get_ref(2) {
            Ok(rusqlite::types::ValueRef::Text(t)) | Ok(rusqlite::types::ValueRef::Blob(t)) => t,
            _ => continue,
        };
        if let Some(r) = opencode_record(data, Some(session), created) {
            out.push(r);
        }
    }
    Ok(out)
}

/// One message file of OpenCode's JSON storage, streamed (at most
/// [`MAX_MESSAGE_FILE_BYTES`], checked by the caller); its session is its `sessionID`,
/// else the name of its directory.
fn parse_opencode_json(
    path: &Path,
    file: std::fs::File,
    _deadline: &Deadline,
) -> std::io::Result<Vec<LedgerRecord>> {
    let reader = BufReader::with_capacity(64 * 1024, file.take(MAX_MESSAGE_FILE_BYTES));
    let m: OpenCodeMessage = serde_json::from_reader(reader)?;
    let session = m.session_id.clone().or_else(|| {
        path.parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .map(str::to_owned)
    });
    Ok(opencode_message_record(m, session, None)
        .into_iter()
        .collect())
}

/// OpenCode's database (or its older JSON storage) under `data_dir`.
pub fn scan_opencode(data_dir: Option<&Path>, cache: &LedgerCache) -> LedgerOutcome {
    let deadline = Deadline::start();
    outcome(data_dir, |dir| {
        let db = dir.join("opencode.db");
        if std::fs::symlink_metadata(&db).is_ok() {
            // Read whole each time: one indexed query, and the WAL may hold new rows.
            return read_opencode_db(&db, &deadline);
        }
        let storage = dir.join("storage").join("message");
        if !storage.exists() {
            return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        }
        let want = |n: &str| n.ends_with(".json");
        scan_files(
            &storage,
            &want,
            cache,
            MAX_MESSAGE_FILE_BYTES,
            &deadline,
            parse_opencode_json,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn write_lines(path: &Path, lines: &[serde_json::Value]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut f = std::fs::File::create(path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    fn read(o: LedgerOutcome) -> Vec<LedgerRecord> {
        match o {
            LedgerOutcome::Read(r) => r,
            other => panic!("expected records, got {other:?}"),
        }
    }

    #[test]
    fn codex_rollouts_count_each_call_once() {
        let home = tempfile::tempdir().unwrap();
        let codex = home.path().join(".codex");
        let id = "0199a213-81c0-7800-8aa1-bbab2a035a53";
        let usage = |i: u64, c: u64, o: u64| {
            json!({"input_tokens": i, "cached_input_tokens": c, "output_tokens": o,
                   "reasoning_output_tokens": 0, "total_tokens": i + o})
        };
        let tc = |ts: &str, total: serde_json::Value, last: serde_json::Value| {
            json!({"timestamp": ts, "type": "event_msg", "payload": {"type": "token_count",
                "info": {"total_token_usage": total, "last_token_usage": last,
                         "model_context_window": 272000},
                "rate_limits": {"primary": {"used_percent": 1.0}}}})
        };
        write_lines(
            &codex.join(format!(
                "sessions/2025/09/01/rollout-2025-09-01T10-00-00-{id}.jsonl"
            )),
            &[
                json!({"timestamp": "2025-09-01T10:00:00.000Z", "type": "session_meta",
                       "payload": {"id": id, "cwd": "/w", "originator": "codex_cli_rs",
                                   "cli_version": "0.30.0", "instructions": null}}),
                json!({"timestamp": "2025-09-01T10:00:01.000Z", "type": "event_msg",
                       "payload": {"type": "token_count", "info": null, "rate_limits": null}}),
                json!({"timestamp": "2025-09-01T10:00:02.000Z", "type": "response_item",
                       "payload": {"type": "message", "role": "user",
                                   "content": [{"type": "input_text", "text": "token_count"}]}}),
                tc(
                    "2025-09-01T10:00:03.000Z",
                    usage(100, 40, 10),
                    usage(100, 40, 10),
                ),
                // Codex repeats an unchanged count: nothing new.
                tc(
                    "2025-09-01T10:00:04.000Z",
                    usage(100, 40, 10),
                    usage(100, 40, 10),
                ),
                tc(
                    "2025-09-01T10:00:05.000Z",
                    usage(250, 140, 30),
                    usage(150, 100, 20),
                ),
            ],
        );
        std::fs::write(codex.join("sessions/2025/09/01/notes.txt"), "x").unwrap();
        let cache = LedgerCache::default();
        let recs = read(scan_codex(Some(&codex), &cache));
        assert_eq!(recs.len(), 2);
        assert!(recs.iter().all(|r| r.session_id == id));
        assert_eq!(
            recs[0].tokens,
            TokenTotals {
                input_tokens: 60,
                output_tokens: 10,
                cache_creation_tokens: 0,
                cache_read_tokens: 40
            }
        );
        assert_eq!(recs[1].tokens.input_tokens, 50);
        assert_eq!(recs[1].tokens.cache_read_tokens, 100);
        assert_eq!(recs[1].tokens.output_tokens, 20);
        assert_eq!(
            recs[1].at_ms,
            Some(
                "2025-09-01T10:00:05Z"
                    .parse::<jiff::Timestamp>()
                    .unwrap()
                    .as_millisecond()
            )
        );
        // Served from the cache the second time, identical.
        assert_eq!(read(scan_codex(Some(&codex), &cache)), recs);
        // No ledger at all.
        assert_eq!(
            scan_codex(Some(&home.path().join("nope")), &cache),
            LedgerOutcome::Absent
        );
    }

    #[test]
    fn claude_transcripts_dedupe_streamed_messages_and_skip_synthetic() {
        let home = tempfile::tempdir().unwrap();
        let projects = home.path().join(".claude/projects/-work-app");
        let sid = "5f8a0c2e-1111-4222-8333-944445555666";
        let asst = |mid: &str, req: &str, out: u64, model: &str| {
            json!({"parentUuid": null, "isSidechain": false, "userType": "external",
                   "cwd": "/work/app", "sessionId": sid, "version": "2.1.3",
                   "type": "assistant", "requestId": req,
                   "uuid": "u", "timestamp": "2025-10-01T09:00:00.000Z",
                   "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                               "content": [{"type": "text", "text": "hello"}],
                               "usage": {"input_tokens": 3, "cache_creation_input_tokens": 100,
                                         "cache_read_input_tokens": 1000, "output_tokens": out,
                                         "service_tier": "standard"}}})
        };
        write_lines(
            &projects.join(format!("{sid}.jsonl")),
            &[
                json!({"type": "user", "sessionId": sid, "timestamp": "2025-10-01T08:59:59Z",
                       "message": {"role": "user", "content": "hi"}}),
                asst("msg_1", "req_1", 5, "claude-sonnet-4-5"),
                asst("msg_1", "req_1", 40, "claude-sonnet-4-5"),
                asst("msg_2", "req_2", 7, "<synthetic>"),
                json!({"type": "summary", "summary": "x"}),
            ],
        );
        write_lines(
            &projects.join(format!("{sid}/subagents/agent-1.jsonl")),
            &[asst("msg_3", "req_3", 9, "claude-haiku-4-5")],
        );
        std::fs::write(projects.join("broken.jsonl"), "{not json\n\u{0}\n").unwrap();
        let recs = read(scan_claude(
            Some(&home.path().join(".claude")),
            &LedgerCache::default(),
        ));
        assert_eq!(recs.len(), 2, "{recs:?}");
        let outs: Vec<u64> = recs.iter().map(|r| r.tokens.output_tokens).collect();
        assert!(outs.contains(&40) && outs.contains(&9), "{outs:?}");
        assert!(recs.iter().all(|r| r.session_id == sid));
        assert_eq!(recs[0].tokens.cache_read_tokens, 1000);
        assert_eq!(recs[0].tokens.cache_creation_tokens, 100);
    }

    #[test]
    fn opencode_database_is_read_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("opencode");
        std::fs::create_dir_all(&data).unwrap();
        let db = data.join("opencode.db");
        {
            let c = rusqlite::Connection::open(&db).unwrap();
            c.execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, title TEXT,
                   time_created INTEGER, time_updated INTEGER);
                 CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
                   time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL,
                   data TEXT NOT NULL);
                 CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT,
                   time_created INTEGER, time_updated INTEGER, data TEXT);",
            )
            .unwrap();
            let msg = |id: &str, sid: &str, at: i64, data: serde_json::Value| {
                c.execute(
                    "INSERT INTO message VALUES (?1, ?2, ?3, ?3, ?4)",
                    rusqlite::params![id, sid, at, data.to_string()],
                )
                .unwrap();
            };
            msg(
                "m1",
                "ses_a",
                1_759_300_000_000,
                json!({"role": "user", "time": {"created": 1}}),
            );
            msg(
                "m2",
                "ses_a",
                1_759_300_001_000,
                json!({"role": "assistant", "modelID": "m", "providerID": "p",
                       "time": {"created": 1_759_300_001_000i64},
                       "tokens": {"input": 12, "output": 5, "reasoning": 2,
                                  "cache": {"read": 30, "write": 4}}, "cost": 0}),
            );
            msg(
                "m3",
                "ses_b",
                1_759_300_002_000,
                json!({"role": "assistant", "tokens": {"input": 1.0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}}),
            );
            msg("m4", "ses_b", 1_759_300_003_000, json!("not an object"));
        }
        let before = std::fs::read(&db).unwrap();
        let recs = read(scan_opencode(Some(&data), &LedgerCache::default()));
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert_eq!(recs[0].session_id, "ses_a");
        assert_eq!(
            recs[0].tokens,
            TokenTotals {
                input_tokens: 12,
                output_tokens: 7,
                cache_creation_tokens: 4,
                cache_read_tokens: 30
            }
        );
        assert_eq!(recs[0].at_ms, Some(1_759_300_001_000));
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "the ledger is never written"
        );
        // A file that is not a database: the scan fails (no `outside`), not zero.
        let bad = dir.path().join("bad");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(
            bad.join("opencode.db"),
            b"this is not sqlite at all, not at all",
        )
        .unwrap();
        assert!(matches!(
            scan_opencode(Some(&bad), &LedgerCache::default()),
            LedgerOutcome::Failed(_)
        ));
    }

    #[test]
    fn a_fifo_in_place_of_a_ledger_fails_or_is_skipped_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("opencode");
        std::fs::create_dir_all(&data).unwrap();
        let fifo = |p: &Path| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                p,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap()
        };
        fifo(&data.join("opencode.db"));
        assert!(matches!(
            scan_opencode(Some(&data), &LedgerCache::default()),
            LedgerOutcome::Failed(_)
        ));
        let err = open_regular(&data.join("opencode.db")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        // A FIFO named like a transcript (a symlink to one, too) is skipped; the rest
        // is read.
        let projects = dir.path().join(".claude/projects/-w");
        std::fs::create_dir_all(&projects).unwrap();
        fifo(&projects.join("stuck.jsonl"));
        std::os::unix::fs::symlink(projects.join("stuck.jsonl"), projects.join("link.jsonl"))
            .unwrap();
        write_lines(
            &projects.join("ok.jsonl"),
            &[
                json!({"type": "assistant", "sessionId": "s", "requestId": "r",
                     "message": {"id": "m", "model": "x", "usage": {"input_tokens": 4}}}),
            ],
        );
        let recs = read(scan_claude(
            Some(&dir.path().join(".claude")),
            &LedgerCache::default(),
        ));
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].tokens.input_tokens, 4);
    }

    #[test]
    fn an_opencode_message_file_over_the_limit_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("opencode");
        let msg = |tokens: u64, pad: usize| {
            json!({"sessionID": "ses_x", "role": "assistant", "pad": "x".repeat(pad),
                   "tokens": {"input": tokens, "output": 0, "reasoning": 0,
                              "cache": {"read": 0, "write": 0}}})
            .to_string()
        };
        let dir_x = data.join("storage/message/ses_x");
        std::fs::create_dir_all(&dir_x).unwrap();
        std::fs::write(dir_x.join("small.json"), msg(1, 10)).unwrap();
        std::fs::write(
            dir_x.join("huge.json"),
            msg(1000, MAX_MESSAGE_FILE_BYTES as usize),
        )
        .unwrap();
        let recs = read(scan_opencode(Some(&data), &LedgerCache::default()));
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(recs[0].tokens.input_tokens, 1);
    }

    #[test]
    fn a_passed_deadline_fails_the_scan_and_caches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        write_lines(&p, &vec![json!({"type": "x"}); 600]);
        let (file, _) = open_regular(&p).unwrap();
        let passed = Deadline(Instant::now());
        let err = for_each_line(file, &passed, |_| {}).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        let cache = LedgerCache::default();
        let meta = std::fs::metadata(&p).unwrap();
        assert!(cache.get_or_parse(&p, &meta, || Err(err)).is_err());
        assert!(cache.files.lock().is_empty());
    }

    #[test]
    fn opencode_json_storage() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("opencode");
        let p = data.join("storage/message/ses_x/msg_1.json");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            &p,
            json!({"id": "msg_1", "sessionID": "ses_x", "role": "assistant",
                   "time": {"created": 1_700_000_000_000i64},
                   "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache": {"read": 3, "write": 0}}})
            .to_string(),
        )
        .unwrap();
        let recs = read(scan_opencode(Some(&data), &LedgerCache::default()));
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].session_id, "ses_x");
        assert_eq!(recs[0].at_ms, Some(1_700_000_000_000));
    }
}
