//! Conversions between store rows and wire shapes (spec `app-server.md` §5.1–§5.3).

use crate::outbound::frames::push_json_str;
use crate::session::Host;
use crate::tools::PermissionMode;
use crate::util::rfc3339;
use wuu_protocol::{Thread, ThreadItem, Turn, TurnError};
use wuu_store::{ItemRow, ThreadRow};

/// A turn as the session holds it: the row plus its items in order (defined by the
/// engine seam, whose built-in engine reads history in this shape).
pub use crate::engine::TurnState;

/// The turn statuses clients are sent.
pub const TURN_STATUSES: &[&str] = &["in_progress", "completed", "failed", "interrupted"];

/// `turn/error` of a failed or interrupted turn, from its wire form (the error fields
/// are the turn's `error`, empty when it has none).
pub fn turn_error_notification(
    thread_id: String,
    turn: Turn,
) -> wuu_protocol::TurnErrorNotification {
    let e = turn.error.clone().unwrap_or_default();
    wuu_protocol::TurnErrorNotification {
        thread_id,
        turn_id: turn.id.clone(),
        error: e.message,
        code: e.code,
        category: e.category,
        provider: e.provider,
        status_code: e.status_code,
        turn,
    }
}

/// Wire turn of a row and its items.
pub fn turn_wire(t: &TurnState) -> Turn {
    let r = &t.row;
    let nz = |n: u64| (n > 0).then_some(n);
    // A status this build does not know (a damaged or hand-edited row) is never passed
    // through: the turn shows as failed, saying why.
    let known_status = TURN_STATUSES.contains(&r.status.as_str());
    Turn {
        id: r.id.clone(),
        kind: (r.kind != "user" && !r.kind.is_empty()).then(|| r.kind.clone()),
        model_provider: (!r.provider.is_empty()).then(|| r.provider.clone()),
        model: (!r.model.is_empty()).then(|| r.model.clone()),
        items: t.items.clone(),
        items_view: "full".into(),
        status: if known_status {
            r.status.clone()
        } else {
            "failed".into()
        },
        error: if known_status {
            r.error
                .as_ref()
                .and_then(|e| serde_json::from_value::<TurnError>(e.clone()).ok())
        } else {
            Some(TurnError {
                message: format!(
                    "the stored status of this turn ({:?}) is not a known status; shown as failed",
                    crate::util::clip(&r.status, 40)
                ),
                code: Some("damaged".into()),
                category: Some("internal".into()),
                ..Default::default()
            })
        },
        finish_reason: r.finish_reason.clone(),
        stop_reason: r.stop_reason.clone(),
        truncated: r.truncated,
        started_at: Some(rfc3339(r.started_at_ms)),
        answer_ready_at: r.answer_ready_at_ms.map(rfc3339),
        completed_at: r.completed_at_ms.map(rfc3339),
        duration_ms: r
            .completed_at_ms
            .map(|c| (c - r.started_at_ms).max(0) as u64),
        input_tokens: nz(r.input_tokens),
        output_tokens: nz(r.output_tokens),
        cache_creation_tokens: nz(r.cache_creation_tokens),
        cache_read_tokens: nz(r.cache_read_tokens),
        permission_denials: r
            .extra
            .get("permission_denials")
            .and_then(|d| d.as_array())
            .cloned()
            .unwrap_or_default(),
    }
}

/// Wire item of a stored item row (the body is the item JSON; `seq` comes from the row).
/// A damaged body becomes an `error` item rather than hiding the conversation.
pub fn item_wire(row: &ItemRow) -> ThreadItem {
    match serde_json::from_value::<ThreadItem>(row.body.clone()) {
        Ok(mut item) => {
            item.seq = Some(row.seq);
            item
        }
        Err(e) => {
            let mut item = ThreadItem::new(row.id.clone(), "error");
            item.status = Some("failed".into());
            item.error = Some(format!("stored item could not be read: {e}"));
            item.seq = Some(row.seq);
            item
        }
    }
}

/// The permission mode a conversation runs under: its stored mode, or `read_only` when
/// the stored value is not a known mode (fail closed: a damaged or hand-edited row never
/// widens what the agent may do). An empty stored mode (rows from before modes were
/// stored) is the default mode.
pub fn stored_permission_mode(row: &ThreadRow) -> PermissionMode {
    permission_mode_of(&row.permission_mode)
}

/// [`stored_permission_mode`] of a stored `permission_mode` text.
fn permission_mode_of(stored: &str) -> PermissionMode {
    if stored.trim().is_empty() {
        return PermissionMode::default();
    }
    PermissionMode::parse(stored).unwrap_or(PermissionMode::ReadOnly)
}

/// Why the stored permission mode is not used, if it is not.
fn permission_damage(stored: &str) -> Option<String> {
    (!stored.trim().is_empty() && PermissionMode::parse(stored).is_none()).then(|| {
        format!(
            "stored permission_mode {:?} is not a known mode; read_only is enforced",
            crate::util::clip(stored, 40)
        )
    })
}

/// What a row's `damage` reports: the store's damage and the permission mode's, joined.
fn row_damage(stored: Option<&str>, permission_mode: &str) -> Option<String> {
    match (stored, permission_damage(permission_mode)) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.map(str::to_owned).or(b),
    }
}

/// Wire thread of a row with the given turns and status.
pub fn thread_wire(row: &ThreadRow, turns: &[TurnState], running: bool) -> Thread {
    let latest_completed = turns
        .iter()
        .rev()
        .find(|t| t.row.status != "in_progress")
        .map(|t| t.row.id.clone());
    let damage = row_damage(row.damage.as_deref(), &row.permission_mode);
    Thread {
        id: row.id.clone(),
        preview: row
            .title
            .clone()
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| row.preview.clone()),
        title: row.title.clone().filter(|t| !t.is_empty()),
        title_revision: row.title_revision,
        model_provider: row.provider.clone(),
        model: row.model.clone(),
        model_variant: row.variant.clone(),
        model_effort: row.effort.clone(),
        permission_mode: stored_permission_mode(row).as_str().to_owned(),
        engine_id: Some(row.engine_id.clone()).filter(|e| !e.is_empty()),
        cwd: row.cwd.clone(),
        workspace_kind: Some("project".into()),
        status: if running { "in_progress" } else { "idle" }.into(),
        ephemeral: crate::util::is_ephemeral(&row.id),
        archived: row.archived,
        archive_reason: row.archive_reason.clone(),
        pinned: row.extra.get("pinned").and_then(serde_json::Value::as_bool) == Some(true),
        folder_id: extra_str(&row.extra, "folder_id"),
        workspace_id: extra_str(&row.extra, "workspace_id"),
        forked_from_id: row.forked_from_id.clone(),
        forked_from_turn_id: row.forked_from_turn_id.clone(),
        forked_from_item_id: row.forked_from_item_id.clone(),
        created_at: rfc3339(row.created_at_ms),
        updated_at: rfc3339(row.updated_at_ms),
        latest_completed_turn_id: latest_completed,
        turns: turns.iter().map(turn_wire).collect(),
        history_cursor: None,
        history_paged: false,
        damaged: damage.is_some(),
        damage,
    }
}

/// A non-empty string member of a row's `extra`.
fn extra_str(extra: &serde_json::Value, key: &str) -> Option<String> {
    extra
        .get(key)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Listing entry: the thread with `turns: []`, status from the live registry.
pub fn thread_summary(shared: &Host, row: &ThreadRow) -> Thread {
    thread_wire(row, &[], shared.registry.is_running(&row.id))
}

/// Appends the listing entry of a borrowed row to `out`: the JSON of
/// [`thread_wire`]`(row, &[], running)` byte for byte (same fields, order, omission
/// rules and string escaping as serde_json's serialization of [`Thread`]), written
/// straight from the row without building the owned [`Thread`]. Keep the two in step
/// when [`Thread`] changes: `listing_json_is_the_owned_listing_byte_for_byte` (in
/// `server::catalog`) compares them over rows that set every field.
pub fn write_summary(out: &mut Vec<u8>, row: &wuu_store::ThreadView<'_>, running: bool) {
    let extra_str = |key: &str| {
        row.extra
            .get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let title = row.title.filter(|t| !t.is_empty());
    let damage = row_damage(row.damage, row.permission_mode);
    let field = |out: &mut Vec<u8>, key: &[u8], value: &str| {
        out.extend_from_slice(key);
        push_json_str(out, value);
    };
    let opt = |out: &mut Vec<u8>, key: &[u8], value: Option<&str>| {
        if let Some(v) = value {
            field(out, key, v);
        }
    };
    field(out, b"{\"id\":", row.id);
    field(out, b",\"preview\":", title.unwrap_or(row.preview));
    opt(out, b",\"title\":", title);
    if row.title_revision != 0 {
        out.extend_from_slice(b",\"title_revision\":");
        out.extend_from_slice(row.title_revision.to_string().as_bytes());
    }
    field(out, b",\"model_provider\":", row.provider);
    field(out, b",\"model\":", row.model);
    field(out, b",\"model_variant\":", row.variant);
    field(out, b",\"model_effort\":", row.effort);
    field(
        out,
        b",\"permission_mode\":",
        permission_mode_of(row.permission_mode).as_str(),
    );
    opt(
        out,
        b",\"engine_id\":",
        Some(row.engine_id).filter(|e| !e.is_empty()),
    );
    field(out, b",\"cwd\":", row.cwd);
    out.extend_from_slice(b",\"workspace_kind\":\"project\",\"status\":");
    out.extend_from_slice(if running {
        b"\"in_progress\""
    } else {
        b"\"idle\""
    });
    if crate::util::is_ephemeral(row.id) {
        out.extend_from_slice(b",\"ephemeral\":true");
    }
    if row.archived {
        out.extend_from_slice(b",\"archived\":true");
    }
    opt(out, b",\"archive_reason\":", row.archive_reason);
    if row.extra.get("pinned").and_then(serde_json::Value::as_bool) == Some(true) {
        out.extend_from_slice(b",\"pinned\":true");
    }
    opt(out, b",\"folder_id\":", extra_str("folder_id"));
    opt(out, b",\"workspace_id\":", extra_str("workspace_id"));
    opt(out, b",\"forked_from_id\":", row.forked_from_id);
    opt(out, b",\"forked_from_turn_id\":", row.forked_from_turn_id);
    opt(out, b",\"forked_from_item_id\":", row.forked_from_item_id);
    field(
        out,
        b",\"created_at\":",
        crate::util::Rfc3339::of(row.created_at_ms).as_str(),
    );
    field(
        out,
        b",\"updated_at\":",
        crate::util::Rfc3339::of(row.updated_at_ms).as_str(),
    );
    out.extend_from_slice(b",\"turns\":[]");
    if let Some(d) = &damage {
        out.extend_from_slice(b",\"damaged\":true");
        field(out, b",\"damage\":", d);
    }
    out.push(b'}');
}
