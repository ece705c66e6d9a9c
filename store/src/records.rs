//! Usage records, pending inputs, runs and continue sources.

use crate::error::{Result, StoreError};
use crate::rows::{input_mode, input_state, InputRow, RunRow, UsageRow};
use crate::sql::{values, Cells, Ops, Value};
use crate::store::Tx;
use crate::util::{get, get_json, get_u64, json_text, now_ms, U64};

const USAGE_COLS: &str = "thread_id, turn_id, provider, model, at_ms, input_tokens, \
    output_tokens, cache_read_tokens, cache_creation_tokens, reasoning_tokens";
pub(crate) const INPUT_COLS: &str =
    "thread_id, id, mode, state, body, created_at_ms, updated_at_ms";
const RUN_COLS: &str = "id, thread_id, status, owner_instance, body, created_at_ms, updated_at_ms";

fn usage_from_row(row: &(impl Cells + ?Sized)) -> Result<UsageRow> {
    let thread_id: String = get(row, 0, "usage", "?")?;
    let (t, k) = ("usage", thread_id.as_str());
    Ok(UsageRow {
        turn_id: get(row, 1, t, k)?,
        provider: get(row, 2, t, k)?,
        model: get(row, 3, t, k)?,
        at_ms: get(row, 4, t, k)?,
        input_tokens: get_u64(row, 5, t, k)?,
        output_tokens: get_u64(row, 6, t, k)?,
        cache_read_tokens: get_u64(row, 7, t, k)?,
        cache_creation_tokens: get_u64(row, 8, t, k)?,
        reasoning_tokens: get_u64(row, 9, t, k)?,
        thread_id,
    })
}

fn input_from_row(row: &(impl Cells + ?Sized)) -> Result<InputRow> {
    let thread_id: String = get(row, 0, "inputs", "?")?;
    let id: String = get(row, 1, "inputs", &thread_id)?;
    let key = format!("{thread_id}/{id}");
    let (t, k) = ("inputs", key.as_str());
    Ok(InputRow {
        mode: get(row, 2, t, k)?,
        state: get(row, 3, t, k)?,
        body: get_json(row, 4, t, k)?,
        created_at_ms: get(row, 5, t, k)?,
        updated_at_ms: get(row, 6, t, k)?,
        thread_id,
        id,
    })
}

fn run_from_row(row: &(impl Cells + ?Sized)) -> Result<RunRow> {
    let id: String = get(row, 0, "runs", "?")?;
    let (t, k) = ("runs", id.as_str());
    Ok(RunRow {
        thread_id: get(row, 1, t, k)?,
        status: get(row, 2, t, k)?,
        owner_instance: get(row, 3, t, k)?,
        body: get_json(row, 4, t, k)?,
        created_at_ms: get(row, 5, t, k)?,
        updated_at_ms: get(row, 6, t, k)?,
        id,
    })
}

impl Tx<'_> {
    /// See [`crate::Store::insert_usage`].
    pub fn insert_usage(&self, u: &UsageRow) -> Result<()> {
        self.ops().insert_usage(u)
    }

    /// See [`crate::Store::list_usage`].
    pub fn list_usage(&self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
        let Some(conn) = self.lite else {
            return self.ops().list_usage(thread_id);
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {USAGE_COLS} FROM usage WHERE ?1 IS NULL OR thread_id = ?1 ORDER BY at_ms, id"
        ))?;
        let mut rows = stmt.query([thread_id])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(usage_from_row(row)?);
        }
        Ok(out)
    }

    /// See [`crate::Store::upsert_input`].
    pub fn upsert_input(&self, i: &InputRow) -> Result<()> {
        self.ops().upsert_input(i)
    }

    /// See [`crate::Store::get_input`].
    pub fn get_input(&self, thread_id: &str, id: &str) -> Result<Option<InputRow>> {
        let Some(conn) = self.lite else {
            return self.ops().get_input(thread_id, id);
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {INPUT_COLS} FROM inputs WHERE thread_id = ?1 AND id = ?2"
        ))?;
        let mut rows = stmt.query([thread_id, id])?;
        match rows.next()? {
            Some(row) => input_from_row(row).map(Some),
            None => Ok(None),
        }
    }

    /// See [`crate::Store::list_inputs`].
    pub fn list_inputs(&self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
        self.ops().list_inputs(thread_id, states)
    }

    /// See [`crate::Store::upsert_run`].
    pub fn upsert_run(&self, r: &RunRow) -> Result<()> {
        self.ops().upsert_run(r)
    }

    /// See [`crate::Store::get_run`].
    pub fn get_run(&self, id: &str) -> Result<Option<RunRow>> {
        self.ops().get_run(id)
    }

    /// See [`crate::Store::list_runs`].
    pub fn list_runs(&self, thread_id: &str) -> Result<Vec<RunRow>> {
        let Some(conn) = self.lite else {
            return self.ops().list_runs(thread_id);
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE thread_id = ?1 ORDER BY created_at_ms, rowid"
        ))?;
        let mut rows = stmt.query([thread_id])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(run_from_row(row)?);
        }
        Ok(out)
    }

    /// See [`crate::Store::claim_continue_source`].
    pub fn claim_continue_source(&self, thread_id: &str, source_turn_id: &str) -> Result<bool> {
        self.ops().claim_continue_source(thread_id, source_turn_id)
    }
}

impl Ops<'_> {
    /// See [`crate::Store::insert_usage`].
    pub(crate) fn insert_usage(&self, u: &UsageRow) -> Result<()> {
        self.conn.exec(
            &format!(
                "INSERT INTO usage ({USAGE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ),
            &[
                Value::from(&u.thread_id),
                Value::from(&u.turn_id),
                Value::from(&u.provider),
                Value::from(&u.model),
                Value::from(u.at_ms),
                U64(u.input_tokens).value()?,
                U64(u.output_tokens).value()?,
                U64(u.cache_read_tokens).value()?,
                U64(u.cache_creation_tokens).value()?,
                U64(u.reasoning_tokens).value()?,
            ],
        )?;
        Ok(())
    }

    /// See [`crate::Store::list_usage`].
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn list_usage(&self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
        let rows = self.conn.rows(
            &format!(
                "SELECT {USAGE_COLS} FROM usage \
                 WHERE CAST(?1 AS TEXT) IS NULL OR thread_id = ?1 ORDER BY at_ms, id"
            ),
            &values![thread_id],
        )?;
        rows.iter().map(usage_from_row).collect()
    }

    /// See [`crate::Store::get_input`].
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn get_input(&self, thread_id: &str, id: &str) -> Result<Option<InputRow>> {
        let rows = self.conn.rows(
            &format!("SELECT {INPUT_COLS} FROM inputs WHERE thread_id = ?1 AND id = ?2"),
            &values![thread_id, id],
        )?;
        rows.first().map(input_from_row).transpose()
    }

    /// See [`crate::Store::list_runs`].
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn list_runs(&self, thread_id: &str) -> Result<Vec<RunRow>> {
        let rows = self.conn.rows(
            &format!(
                "SELECT {RUN_COLS} FROM runs WHERE thread_id = ?1 ORDER BY created_at_ms, rowid"
            ),
            &values![thread_id],
        )?;
        rows.iter().map(run_from_row).collect()
    }

    /// See [`crate::Store::claim_continue_source`].
    pub(crate) fn claim_continue_source(
        &self,
        thread_id: &str,
        source_turn_id: &str,
    ) -> Result<bool> {
        let n = self.conn.exec(
            "INSERT INTO continue_sources (thread_id, source_turn_id, claimed_at_ms) \
             VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            &values![thread_id, source_turn_id, now_ms()],
        )?;
        Ok(n == 1)
    }

    /// See [`crate::Store::upsert_input`].
    pub(crate) fn upsert_input(&self, i: &InputRow) -> Result<()> {
        if !input_mode::ALL.contains(&i.mode.as_str()) {
            return Err(StoreError::Invalid(format!("input mode {:?}", i.mode)));
        }
        if !input_state::ALL.contains(&i.state.as_str()) {
            return Err(StoreError::Invalid(format!("input state {:?}", i.state)));
        }
        self.conn.exec(
            &format!(
                "INSERT INTO inputs ({INPUT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (thread_id, id) DO UPDATE SET mode = excluded.mode, \
                 state = excluded.state, body = excluded.body, \
                 updated_at_ms = excluded.updated_at_ms"
            ),
            &values![
                &i.thread_id,
                &i.id,
                &i.mode,
                &i.state,
                json_text(&i.body),
                i.created_at_ms,
                i.updated_at_ms,
            ],
        )?;
        Ok(())
    }

    /// See [`crate::Store::list_inputs`].
    pub(crate) fn list_inputs(&self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
        let mut out = Vec::new();
        for row in self.conn.rows(
            &format!(
                "SELECT {INPUT_COLS} FROM inputs WHERE thread_id = ?1 \
                 ORDER BY created_at_ms, rowid"
            ),
            &values![thread_id],
        )? {
            let input = input_from_row(&row)?;
            if states.is_empty() || states.contains(&input.state.as_str()) {
                out.push(input);
            }
        }
        Ok(out)
    }

    /// See [`crate::Store::upsert_run`].
    pub(crate) fn upsert_run(&self, r: &RunRow) -> Result<()> {
        self.conn.exec(
            &format!(
                "INSERT INTO runs ({RUN_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (id) DO UPDATE SET status = excluded.status, \
                 owner_instance = excluded.owner_instance, body = excluded.body, \
                 updated_at_ms = excluded.updated_at_ms"
            ),
            &values![
                &r.id,
                &r.thread_id,
                &r.status,
                &r.owner_instance,
                json_text(&r.body),
                r.created_at_ms,
                r.updated_at_ms,
            ],
        )?;
        Ok(())
    }

    /// See [`crate::Store::get_run`].
    pub(crate) fn get_run(&self, id: &str) -> Result<Option<RunRow>> {
        let rows = self.conn.rows(
            &format!("SELECT {RUN_COLS} FROM runs WHERE id = ?1"),
            &values![id],
        )?;
        rows.first().map(run_from_row).transpose()
    }
}
