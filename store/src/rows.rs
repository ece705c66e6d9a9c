//! Plain row structs: what the store reads and writes. Timestamps are Unix milliseconds
//! (`i64`); flexible parts are JSON (`serde_json::Value`) stored as text.

use serde_json::Value;

/// One conversation (`threads` table).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    /// Opaque thread id (primary key).
    pub id: String,
    /// Working directory the thread belongs to (exact string; listing filters on it).
    pub cwd: String,
    /// User- or model-given title; `None` = untitled.
    pub title: Option<String>,
    /// Monotonic revision of `title` (0 = never titled); only [`crate::Store::set_title`]
    /// changes it.
    pub title_revision: u64,
    /// Title or first message, as shown in listings.
    pub preview: String,
    /// Selected model provider id.
    pub provider: String,
    /// Selected model id.
    pub model: String,
    /// Selected model variant.
    pub variant: String,
    /// Selected reasoning effort.
    pub effort: String,
    /// `standard` | `read_only` | `unconfined` (not validated by the store).
    pub permission_mode: String,
    /// Engine fixed at creation (`wuu`, `codex`, …).
    pub engine_id: String,
    /// Archived flag; only [`crate::Store::set_archived`] changes it.
    pub archived: bool,
    /// Why it was archived, if given.
    pub archive_reason: Option<String>,
    /// Thread this one was forked from.
    pub forked_from_id: Option<String>,
    /// Turn of `forked_from_id` the fork was cut at.
    pub forked_from_turn_id: Option<String>,
    /// Item of `forked_from_turn_id` the fork was cut at.
    pub forked_from_item_id: Option<String>,
    /// Creation time, Unix ms.
    pub created_at_ms: i64,
    /// Last activity time, Unix ms (listing order; says nothing about title age).
    pub updated_at_ms: i64,
    /// JSON object for future fields (stored as text; must be valid JSON).
    pub extra: Value,
    /// Set on read when part of the stored row could not be decoded (today: `extra` is
    /// not valid JSON; `extra` then reads as `{}`): says what. `None` for a sound row.
    /// Never written; while it is set, [`crate::Store::update_thread`] keeps the stored
    /// `extra` text instead of overwriting it.
    pub damage: Option<String>,
}

impl ThreadRow {
    /// A row with the given id, cwd and timestamps (both `now_ms`), every other field
    /// empty/zero/`None` and `extra = {}`. Convenient for callers and tests.
    pub fn new(id: impl Into<String>, cwd: impl Into<String>, now_ms: i64) -> ThreadRow {
        ThreadRow {
            id: id.into(),
            cwd: cwd.into(),
            title: None,
            title_revision: 0,
            preview: String::new(),
            provider: String::new(),
            model: String::new(),
            variant: String::new(),
            effort: String::new(),
            permission_mode: String::new(),
            engine_id: String::new(),
            archived: false,
            archive_reason: None,
            forked_from_id: None,
            forked_from_turn_id: None,
            forked_from_item_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            extra: Value::Object(Default::default()),
            damage: None,
        }
    }
}

/// A borrowed view of one conversation row: the fields of [`ThreadRow`], pointing into
/// the database row being read (see [`crate::Store::visit_threads`]) or into a
/// [`ThreadRow`] ([`ThreadRow::view`]). Listings read through it without copying every
/// column into its own `String`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadView<'a> {
    /// See [`ThreadRow::id`].
    pub id: &'a str,
    /// See [`ThreadRow::cwd`].
    pub cwd: &'a str,
    /// See [`ThreadRow::title`].
    pub title: Option<&'a str>,
    /// See [`ThreadRow::title_revision`].
    pub title_revision: u64,
    /// See [`ThreadRow::preview`].
    pub preview: &'a str,
    /// See [`ThreadRow::provider`].
    pub provider: &'a str,
    /// See [`ThreadRow::model`].
    pub model: &'a str,
    /// See [`ThreadRow::variant`].
    pub variant: &'a str,
    /// See [`ThreadRow::effort`].
    pub effort: &'a str,
    /// See [`ThreadRow::permission_mode`].
    pub permission_mode: &'a str,
    /// See [`ThreadRow::engine_id`].
    pub engine_id: &'a str,
    /// See [`ThreadRow::archived`].
    pub archived: bool,
    /// See [`ThreadRow::archive_reason`].
    pub archive_reason: Option<&'a str>,
    /// See [`ThreadRow::forked_from_id`].
    pub forked_from_id: Option<&'a str>,
    /// See [`ThreadRow::forked_from_turn_id`].
    pub forked_from_turn_id: Option<&'a str>,
    /// See [`ThreadRow::forked_from_item_id`].
    pub forked_from_item_id: Option<&'a str>,
    /// See [`ThreadRow::created_at_ms`].
    pub created_at_ms: i64,
    /// See [`ThreadRow::updated_at_ms`].
    pub updated_at_ms: i64,
    /// See [`ThreadRow::extra`].
    pub extra: &'a Value,
    /// See [`ThreadRow::damage`].
    pub damage: Option<&'a str>,
}

impl ThreadRow {
    /// The row as a [`ThreadView`].
    pub fn view(&self) -> ThreadView<'_> {
        ThreadView {
            id: &self.id,
            cwd: &self.cwd,
            title: self.title.as_deref(),
            title_revision: self.title_revision,
            preview: &self.preview,
            provider: &self.provider,
            model: &self.model,
            variant: &self.variant,
            effort: &self.effort,
            permission_mode: &self.permission_mode,
            engine_id: &self.engine_id,
            archived: self.archived,
            archive_reason: self.archive_reason.as_deref(),
            forked_from_id: self.forked_from_id.as_deref(),
            forked_from_turn_id: self.forked_from_turn_id.as_deref(),
            forked_from_item_id: self.forked_from_item_id.as_deref(),
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            extra: &self.extra,
            damage: self.damage.as_deref(),
        }
    }
}

/// Turn status values used by the store itself (others are stored as given).
pub mod turn_status {
    /// The turn is running.
    pub const IN_PROGRESS: &str = "in_progress";
    /// Finished normally.
    pub const COMPLETED: &str = "completed";
    /// Finished with an error.
    pub const FAILED: &str = "failed";
    /// Stopped by the user, or settled by recovery after its process died.
    pub const INTERRUPTED: &str = "interrupted";
}

/// One turn of a thread (`turns` table). Turns are ordered by insertion.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRow {
    /// Owning thread.
    pub thread_id: String,
    /// Turn id, unique within the thread.
    pub id: String,
    /// `user` | `internal` | `compact` | … (not validated).
    pub kind: String,
    /// `in_progress` | `completed` | `failed` | `interrupted` (see [`turn_status`]).
    pub status: String,
    /// Provider frozen at admission.
    pub provider: String,
    /// Model frozen at admission.
    pub model: String,
    /// `TurnError` JSON (`{message, code?, …}`), if the turn failed or was interrupted.
    pub error: Option<Value>,
    /// Start time, Unix ms.
    pub started_at_ms: i64,
    /// Settlement time, Unix ms.
    pub completed_at_ms: Option<i64>,
    /// User-visible completion time, Unix ms.
    pub answer_ready_at_ms: Option<i64>,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-read input tokens.
    pub cache_read_tokens: u64,
    /// Cache-creation input tokens.
    pub cache_creation_tokens: u64,
    /// Provider finish reason.
    pub finish_reason: Option<String>,
    /// Wuu stop reason.
    pub stop_reason: Option<String>,
    /// Whether the answer was truncated.
    pub truncated: bool,
    /// JSON object for future fields.
    pub extra: Value,
}

impl TurnRow {
    /// An `in_progress` turn started at `started_at_ms`, every other field empty/zero.
    pub fn new(
        thread_id: impl Into<String>,
        id: impl Into<String>,
        kind: impl Into<String>,
        started_at_ms: i64,
    ) -> TurnRow {
        TurnRow {
            thread_id: thread_id.into(),
            id: id.into(),
            kind: kind.into(),
            status: turn_status::IN_PROGRESS.to_string(),
            provider: String::new(),
            model: String::new(),
            error: None,
            started_at_ms,
            completed_at_ms: None,
            answer_ready_at_ms: None,
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_creation_tokens: 0,
            finish_reason: None,
            stop_reason: None,
            truncated: false,
            extra: Value::Object(Default::default()),
        }
    }
}

/// One history item (`items` table).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRow {
    /// Owning thread.
    pub thread_id: String,
    /// Owning turn (must exist in the thread).
    pub turn_id: String,
    /// Item id, unique within the thread.
    pub id: String,
    /// `user_message` | `agent_message` | `reasoning` | `tool_call` | … (copied from the
    /// item's `type`; not validated).
    pub item_type: String,
    /// `in_progress` | `completed` | `failed`, when the item has one; `damaged` (see
    /// [`item_damage`]) when the stored body could not be read.
    pub status: Option<String>,
    /// Thread-wide monotonic sequence number (1, 2, …; never reused). Ignored on write,
    /// filled on read.
    pub seq: u64,
    /// The whole item JSON, stored verbatim (the store never edits it).
    pub body: Value,
}

/// Damaged item rows: an item whose stored body is not valid JSON reads as a placeholder
/// (status [`item_damage::STATUS`], body `{id, type, status: "damaged", error}`) instead
/// of failing the whole history, so one bad row never hides or silently empties a
/// conversation.
pub mod item_damage {
    /// Status of a placeholder item.
    pub const STATUS: &str = "damaged";
}

/// A turn with its items in `seq` order, as returned by [`crate::Store::load_history`].
#[derive(Debug, Clone, PartialEq)]
pub struct TurnWithItems {
    /// The turn.
    pub turn: TurnRow,
    /// Its items, ascending `seq`.
    pub items: Vec<ItemRow>,
}

/// One token-usage record (one model request or one settled turn, at the caller's choice).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// Thread the usage belongs to (deleted with it).
    pub thread_id: String,
    /// Turn the usage belongs to.
    pub turn_id: String,
    /// Provider id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// When the usage was reported, Unix ms.
    pub at_ms: i64,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-read input tokens.
    pub cache_read_tokens: u64,
    /// Cache-creation input tokens.
    pub cache_creation_tokens: u64,
    /// Reasoning tokens (a subset of output on most providers).
    pub reasoning_tokens: u64,
}

/// A durable pending input (queued or steer message), keyed by `(thread_id, id)` where
/// `id` is the client's `client_id` (or a generated queue id).
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    /// Owning thread.
    pub thread_id: String,
    /// Input id (`client_id`), unique within the thread; also remembers consumed and
    /// cancelled ids so a retried request can be recognized.
    pub id: String,
    /// `queue` | `steer` (see [`input_mode`]).
    pub mode: String,
    /// `pending` | `held` | `consumed` | `cancelled` (see [`input_state`]).
    pub state: String,
    /// The input as JSON (prompt, attachments, content parts, flags such as
    /// `delivery_unconfirmed`).
    pub body: Value,
    /// First-seen time, Unix ms; kept by later upserts. Listing order.
    pub created_at_ms: i64,
    /// Last change, Unix ms.
    pub updated_at_ms: i64,
}

/// Allowed values of [`InputRow::mode`].
pub mod input_mode {
    /// Runs as the next turn.
    pub const QUEUE: &str = "queue";
    /// Delivered into the running turn.
    pub const STEER: &str = "steer";
    /// All modes.
    pub const ALL: &[&str] = &[QUEUE, STEER];
}

/// Allowed values of [`InputRow::state`].
pub mod input_state {
    /// Waiting to be dispatched by the process that accepted it.
    pub const PENDING: &str = "pending";
    /// Parked; never dispatches by itself (what pending inputs become after a restart).
    pub const HELD: &str = "held";
    /// Entered history.
    pub const CONSUMED: &str = "consumed";
    /// Cancelled by the user.
    pub const CANCELLED: &str = "cancelled";
    /// All states.
    pub const ALL: &[&str] = &[PENDING, HELD, CONSUMED, CANCELLED];
}

/// An automation run (`run/start`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Run id (primary key).
    pub id: String,
    /// Thread the run executes in.
    pub thread_id: String,
    /// `accepted` | `running` (non-terminal) or `completed` | `failed` | `interrupted` |
    /// `timed_out` | `cancelled`. This column is authoritative over `body.status`.
    pub status: String,
    /// Instance id ([`LeaseOwner::instance`]) of the process that owns the run.
    pub owner_instance: String,
    /// The run JSON (request, runtime, workspace, turns, result, error …).
    pub body: Value,
    /// Creation time, Unix ms; kept by later upserts.
    pub created_at_ms: i64,
    /// Last change, Unix ms.
    pub updated_at_ms: i64,
}

/// Who holds (or wants) an execution lease: one value per process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseOwner {
    /// OS process id.
    pub pid: u32,
    /// Random id of this process's store user (a UUID, new on every start).
    pub instance: String,
    /// Host name, so pids are only checked on the host that owns them.
    pub host: String,
}

impl LeaseOwner {
    /// The owner value for this process: `std::process::id()`, a fresh UUID v4 and
    /// [`crate::host_name`]. Create it once per process and share it.
    pub fn current() -> LeaseOwner {
        LeaseOwner {
            pid: std::process::id(),
            instance: uuid::Uuid::new_v4().to_string(),
            host: crate::lease::host_name(),
        }
    }
}

/// What [`crate::Store::acquire_lease`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseOutcome {
    /// The lease is now ours. `previous` is the dead owner whose lease was taken over
    /// (`None` when the lease was free). `settled` lists this thread's turns/runs that
    /// were left running without a live owner and were settled as interrupted in the
    /// same transaction.
    Acquired {
        /// Dead owner taken over, if any.
        previous: Option<LeaseOwner>,
        /// Orphaned work of this thread settled by the acquisition.
        settled: RecoveryReport,
    },
    /// We already held it (same instance); its heartbeat was bumped.
    AlreadyHeld,
    /// A live other process holds it.
    Busy(LeaseOwner),
}

/// Outcome of [`crate::Store::delete_thread`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The thread and everything belonging to it are gone.
    Deleted,
    /// No such thread.
    NotFound,
    /// `only_if_archived` was set and the thread is not archived; nothing changed.
    NotArchived,
}

/// Filter of [`crate::Store::list_threads`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ThreadFilter {
    /// Only threads whose cwd equals this string.
    pub cwd: Option<String>,
    /// `Some(true)` only archived, `Some(false)` only unarchived, `None` both.
    pub archived: Option<bool>,
    /// At most this many rows (`None` = all).
    pub limit: Option<u32>,
}

/// One result of [`crate::Store::search_threads`].
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The matching thread.
    pub thread: ThreadRow,
    /// At most 160 characters of the matched text around the hit (newlines folded to
    /// spaces); the title/preview for an empty query.
    pub snippet: String,
    /// `seq` of the matching item; `None` when the title/preview matched.
    pub item_seq: Option<u64>,
    /// Id of the matching item; `None` when the title/preview matched.
    pub item_id: Option<String>,
}

/// A turn settled by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledTurn {
    /// Thread of the turn.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
}

/// What [`crate::Store::recover`] (or a lease takeover) settled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecoveryReport {
    /// Turns moved from `in_progress` to `interrupted`.
    pub interrupted_turns: Vec<SettledTurn>,
    /// Runs (ids) moved from `accepted`/`running` to `interrupted`.
    pub interrupted_runs: Vec<String>,
    /// Leases of dead owners that were deleted: `(thread_id, owner)`.
    pub removed_leases: Vec<(String, LeaseOwner)>,
}

impl RecoveryReport {
    /// True when nothing was settled or removed.
    pub fn is_empty(&self) -> bool {
        self.interrupted_turns.is_empty()
            && self.interrupted_runs.is_empty()
            && self.removed_leases.is_empty()
    }
}
