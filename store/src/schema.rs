//! Schema and migrations, keyed on `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` moves the schema from version `i` to `i + 1`. Each one runs in its own
//! IMMEDIATE transaction that re-reads `user_version` first, so several processes opening
//! the same file at once migrate it exactly once. Never edit a shipped migration: append
//! a new one.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Result, StoreError};

/// The migrations, in order. Version `n` of the schema = the first `n` entries applied.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
CREATE TABLE threads (
    id                  TEXT    NOT NULL PRIMARY KEY,
    cwd                 TEXT    NOT NULL,
    title               TEXT,
    title_revision      INTEGER NOT NULL DEFAULT 0,
    preview             TEXT    NOT NULL DEFAULT '',
    provider            TEXT    NOT NULL DEFAULT '',
    model               TEXT    NOT NULL DEFAULT '',
    variant             TEXT    NOT NULL DEFAULT '',
    effort              TEXT    NOT NULL DEFAULT '',
    permission_mode     TEXT    NOT NULL DEFAULT '',
    engine_id           TEXT    NOT NULL DEFAULT '',
    archived            INTEGER NOT NULL DEFAULT 0,
    archive_reason      TEXT,
    forked_from_id      TEXT,
    forked_from_turn_id TEXT,
    forked_from_item_id TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    extra               TEXT    NOT NULL DEFAULT '{}',
    -- last item seq handed out in this thread (seqs are never reused)
    item_seq            INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX threads_by_activity ON threads (updated_at_ms DESC);
CREATE INDEX threads_by_cwd ON threads (cwd, updated_at_ms DESC);

CREATE TABLE turns (
    thread_id             TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id                    TEXT    NOT NULL,
    ordinal               INTEGER NOT NULL,
    kind                  TEXT    NOT NULL,
    status                TEXT    NOT NULL,
    provider              TEXT    NOT NULL DEFAULT '',
    model                 TEXT    NOT NULL DEFAULT '',
    error                 TEXT,
    started_at_ms         INTEGER NOT NULL,
    completed_at_ms       INTEGER,
    answer_ready_at_ms    INTEGER,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    finish_reason         TEXT,
    stop_reason           TEXT,
    truncated             INTEGER NOT NULL DEFAULT 0,
    extra                 TEXT    NOT NULL DEFAULT '{}',
    PRIMARY KEY (thread_id, id),
    UNIQUE (thread_id, ordinal)
) STRICT;
CREATE INDEX turns_by_status ON turns (status);

CREATE TABLE items (
    thread_id TEXT    NOT NULL,
    id        TEXT    NOT NULL,
    turn_id   TEXT    NOT NULL,
    seq       INTEGER NOT NULL,
    item_type TEXT    NOT NULL,
    status    TEXT,
    body      TEXT    NOT NULL,
    PRIMARY KEY (thread_id, id),
    UNIQUE (thread_id, seq),
    FOREIGN KEY (thread_id, turn_id) REFERENCES turns (thread_id, id) ON DELETE CASCADE
) STRICT;
CREATE INDEX items_by_turn ON items (thread_id, turn_id, seq);

CREATE TABLE usage (
    id                    INTEGER PRIMARY KEY,
    thread_id             TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    turn_id               TEXT    NOT NULL,
    provider              TEXT    NOT NULL,
    model                 TEXT    NOT NULL,
    at_ms                 INTEGER NOT NULL,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens     INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens      INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX usage_by_thread ON usage (thread_id, at_ms);
CREATE INDEX usage_by_time ON usage (at_ms);

CREATE TABLE inputs (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id            TEXT    NOT NULL,
    mode          TEXT    NOT NULL CHECK (mode IN ('queue', 'steer')),
    state         TEXT    NOT NULL CHECK (state IN ('pending', 'held', 'consumed', 'cancelled')),
    body          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, id)
) STRICT;

CREATE TABLE runs (
    id             TEXT    NOT NULL PRIMARY KEY,
    thread_id      TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    status         TEXT    NOT NULL,
    owner_instance TEXT    NOT NULL DEFAULT '',
    body           TEXT    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_by_thread ON runs (thread_id, created_at_ms);
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE continue_sources (
    thread_id      TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    source_turn_id TEXT    NOT NULL,
    claimed_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (thread_id, source_turn_id)
) STRICT;

-- Execution leases: at most one process executes a thread at a time. No foreign key:
-- a lease is a lock and may be taken before the thread row is written.
CREATE TABLE leases (
    thread_id       TEXT    NOT NULL PRIMARY KEY,
    pid             INTEGER NOT NULL,
    instance        TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    acquired_at_ms  INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX leases_by_instance ON leases (instance);

-- Processes that use the store (registered by heartbeat/acquire_lease/recover), so that
-- recovery can tell whether the owner of a run without a lease is still alive.
CREATE TABLE instances (
    instance        TEXT    NOT NULL PRIMARY KEY,
    pid             INTEGER NOT NULL,
    host            TEXT    NOT NULL,
    started_at_ms   INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 2: conversation folders (`sessionFolder/*`); a conversation's folder is
    // `threads.extra.folder_id`.
    r#"
CREATE TABLE session_folders (
    id            TEXT    NOT NULL PRIMARY KEY,
    name          TEXT    NOT NULL,
    sort_order    INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 3: account quota snapshots (the last successful read per credential-scoped
    // account; see the app's `usage::quota`).
    r#"
CREATE TABLE quota_snapshots (
    key            TEXT    NOT NULL PRIMARY KEY,
    body           TEXT    NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;
"#,
    // 4: skill uses (`load_skill` calls), one row per use, for `settings/usage`.
    r#"
CREATE TABLE skill_uses (
    id        INTEGER PRIMARY KEY,
    name      TEXT    NOT NULL,
    source    TEXT    NOT NULL,
    thread_id TEXT    NOT NULL,
    at_ms     INTEGER NOT NULL
) STRICT;
CREATE INDEX skill_uses_by_time ON skill_uses (at_ms);
"#,
    // 5: the process ledger: the process group of each running command, so a start
    // after a crash can kill what the dead owner left (see `processes.rs`).
    r#"
CREATE TABLE process_groups (
    pgid          INTEGER NOT NULL,
    host          TEXT    NOT NULL,
    owner_pid     INTEGER NOT NULL,
    instance      TEXT    NOT NULL,
    token         TEXT    NOT NULL,
    started_at_ms INTEGER NOT NULL,
    PRIMARY KEY (host, pgid)
) STRICT;
"#,
    // 6: the listing index: `thread/list` (one workspace, unarchived, newest activity
    // first, ties by id) reads rows in index order, without sorting them (sorting
    // was a large part of the listing's SQLite time with many conversations).
    r#"
CREATE INDEX threads_listing ON threads (cwd, archived, updated_at_ms DESC, id);
"#,
    // 7: the text index of `thread/search`: the `text` of every user and agent message,
    // trigram-tokenized (case-insensitive substrings of 3 characters or more), keyed by
    // the item's rowid. Contentless: the text stays in `items` only. Kept in sync by
    // triggers, so every writer (this build, older paths, a hand-run `DELETE`) keeps it
    // right; the index only narrows the candidates, the search still checks the text.
    r#"
CREATE VIRTUAL TABLE item_text USING fts5 (
    text, content = '', contentless_delete = 1, tokenize = 'trigram'
);
INSERT INTO item_text (rowid, text)
    SELECT rowid, json_extract(body, '$.text') FROM items
    WHERE item_type IN ('user_message', 'agent_message')
      AND json_valid(body) AND json_type(body, '$.text') = 'text';
CREATE TRIGGER items_text_insert AFTER INSERT ON items
    WHEN new.item_type IN ('user_message', 'agent_message')
      AND json_valid(new.body) AND json_type(new.body, '$.text') = 'text'
BEGIN
    INSERT OR REPLACE INTO item_text (rowid, text)
        VALUES (new.rowid, json_extract(new.body, '$.text'));
END;
CREATE TRIGGER items_text_delete AFTER DELETE ON items
    WHEN old.item_type IN ('user_message', 'agent_message')
BEGIN
    DELETE FROM item_text WHERE rowid = old.rowid;
END;
CREATE TRIGGER items_text_update AFTER UPDATE OF item_type, body ON items
    WHEN (old.item_type IN ('user_message', 'agent_message')
          OR new.item_type IN ('user_message', 'agent_message'))
      AND (old.body IS NOT new.body OR old.item_type IS NOT new.item_type
           OR old.rowid IS NOT new.rowid)
BEGIN
    DELETE FROM item_text WHERE rowid = old.rowid;
    INSERT OR REPLACE INTO item_text (rowid, text)
        SELECT new.rowid, json_extract(new.body, '$.text')
        WHERE new.item_type IN ('user_message', 'agent_message')
          AND json_valid(new.body) AND json_type(new.body, '$.text') = 'text';
END;
"#,
    // 8: side chats (`sideThread/*`): at most one per main conversation (deleted with
    // it), and its own messages, never part of the main history; browser activities. `IF NOT
    // EXISTS`: a store whose `user_version` was set back re-runs it harmlessly.
    r#"
CREATE TABLE IF NOT EXISTS side_threads (
    main_thread_id TEXT    NOT NULL PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    id             TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    revision       INTEGER NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS side_messages (
    main_thread_id TEXT    NOT NULL REFERENCES side_threads (main_thread_id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    id             TEXT    NOT NULL,
    role           TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    status         TEXT,
    error          TEXT,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (main_thread_id, seq)
) STRICT;
-- browser activities (`activity/*`): the last known state of each, as its wire JSON,
-- so a listing after a restart reports the ones that ended with their process.
CREATE TABLE IF NOT EXISTS activities (
    id            TEXT    NOT NULL PRIMARY KEY,
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    body          TEXT    NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS activities_by_thread ON activities (thread_id);
"#,
    // 9: fewer pages a turn writes. `threads_by_cwd` goes: no query reads it since
    // `threads_listing` (whose `cwd` prefix serves every lookup by workspace), and
    // every activity change of a conversation wrote it. `leases` holds only the leases
    // held now (a released lease is deleted), a few pages at most, so it is keyed by
    // its primary key alone (WITHOUT ROWID) and read whole by instance: taking or
    // releasing a lease writes one B-tree instead of three.
    r#"
DROP INDEX IF EXISTS threads_by_cwd;
CREATE TABLE leases_keyed (
    thread_id       TEXT    NOT NULL PRIMARY KEY,
    pid             INTEGER NOT NULL,
    instance        TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    acquired_at_ms  INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO leases_keyed (thread_id, pid, instance, host, acquired_at_ms, heartbeat_at_ms)
    SELECT thread_id, pid, instance, host, acquired_at_ms, heartbeat_at_ms FROM leases;
DROP TABLE leases;
ALTER TABLE leases_keyed RENAME TO leases;
"#,
    // 10: the text index is written in batches off the turn (`Store::index_text`):
    // messages up to the watermark `item_text_state.indexed` (an `items` rowid) are in
    // `item_text`, later ones are not yet, and the search reads those directly. The
    // triggers keep indexed rows right on update and delete; a row inserted at or below
    // the watermark (a reused rowid) is indexed at once.
    r#"
CREATE TABLE IF NOT EXISTS item_text_state (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    indexed INTEGER NOT NULL
) STRICT;
INSERT OR REPLACE INTO item_text_state (id, indexed) SELECT 1, coalesce(max(rowid), 0) FROM items;
DROP TRIGGER items_text_insert;
DROP TRIGGER items_text_delete;
DROP TRIGGER items_text_update;
CREATE TRIGGER items_text_insert AFTER INSERT ON items
    WHEN new.rowid <= (SELECT indexed FROM item_text_state)
      AND new.item_type IN ('user_message', 'agent_message')
      AND json_valid(new.body) AND json_type(new.body, '$.text') = 'text'
BEGIN
    INSERT OR REPLACE INTO item_text (rowid, text)
        VALUES (new.rowid, json_extract(new.body, '$.text'));
END;
CREATE TRIGGER items_text_delete AFTER DELETE ON items
    WHEN old.rowid <= (SELECT indexed FROM item_text_state)
      AND old.item_type IN ('user_message', 'agent_message')
BEGIN
    DELETE FROM item_text WHERE rowid = old.rowid;
END;
CREATE TRIGGER items_text_update AFTER UPDATE OF item_type, body ON items
    WHEN (old.item_type IN ('user_message', 'agent_message')
          OR new.item_type IN ('user_message', 'agent_message'))
      AND (old.body IS NOT new.body OR old.item_type IS NOT new.item_type
           OR old.rowid IS NOT new.rowid)
      AND (old.rowid <= (SELECT indexed FROM item_text_state)
           OR new.rowid <= (SELECT indexed FROM item_text_state))
BEGIN
    DELETE FROM item_text WHERE rowid = old.rowid
        AND old.rowid <= (SELECT indexed FROM item_text_state);
    INSERT OR REPLACE INTO item_text (rowid, text)
        SELECT new.rowid, json_extract(new.body, '$.text')
        WHERE new.item_type IN ('user_message', 'agent_message')
          AND json_valid(new.body) AND json_type(new.body, '$.text') = 'text'
          AND new.rowid <= (SELECT indexed FROM item_text_state);
END;
"#,
];

/// The schema version this build migrates to.
pub(crate) fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Brings the schema to [`latest_version`]. Idempotent; safe against concurrent openers.
///
/// Errors: [`StoreError::SchemaTooNew`] when the file is newer than this build; SQLite
/// errors (including [`StoreError::Busy`]) from the migration transactions.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let supported = latest_version();
    let found = user_version(conn)?;
    if found > supported {
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let target = index as i64 + 1;
        if user_version(conn)? >= target {
            continue;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the write lock.
        let now = user_version(&tx)?;
        if now >= target {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", target)?;
        tx.commit()?;
        log::info!("store schema migrated to version {target}");
    }
    Ok(())
}
