//! Conversation folders: `sessionOrganization/list` and `sessionFolder/create|update|
//! reorder|delete` (shapes from the Go server: `{organization: {folders: [{id,
//! name, sort_order, created_at, updated_at}]}}`, `{group}` for create/update). Folders
//! are persisted in the store (`session_folders`); a conversation's folder is its
//! `folder_id` (`thread/organization/update`). Deleting a folder moves its
//! conversations out of it (each gets a `thread/updated`), never deletes them.

use crate::outbound::Responder;
use crate::session::Host;
use crate::util::{new_id, now_ms, rfc3339};
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{FolderRow, Store, StoreError};

/// Longest folder name, in characters.
pub const MAX_FOLDER_NAME_CHARS: usize = 100;

type Refusal = (ErrorCode, String);

/// `invalid_params` for ids the store refused; `store_busy` (retryable, naming the
/// database) when another connection held the write lock past the busy timeout;
/// `internal_error` otherwise.
fn store_err(shared: &Host, e: StoreError) -> Refusal {
    match e {
        StoreError::Invalid(m) => (
            ErrorCode::InvalidParams,
            format!("invalid params: ids: {m}"),
        ),
        other => crate::session::host::store_error(shared, &other),
    }
}

fn wire(f: &FolderRow) -> SessionFolder {
    SessionFolder {
        id: f.id.clone(),
        name: f.name.clone(),
        sort_order: f.sort_order,
        created_at: rfc3339(f.created_at_ms),
        updated_at: rfc3339(f.updated_at_ms),
    }
}

fn organization(shared: &Host, store: &Store) -> Result<SessionOrganization, Refusal> {
    Ok(SessionOrganization {
        folders: store
            .list_folders()
            .map_err(|e| store_err(shared, e))?
            .iter()
            .map(wire)
            .collect(),
    })
}

fn name_of(name: &str) -> Result<String, Refusal> {
    let n = name.trim();
    if n.is_empty() {
        return Err((
            ErrorCode::InvalidParams,
            "invalid params: name must not be empty".into(),
        ));
    }
    if n.chars().count() > MAX_FOLDER_NAME_CHARS {
        return Err((
            ErrorCode::InvalidParams,
            format!("invalid params: name is longer than {MAX_FOLDER_NAME_CHARS} characters"),
        ));
    }
    // Control characters other than tab and newline (NUL, ESC, CR, ...) are refused.
    if let Some(c) = n
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\t' | '\n'))
    {
        return Err((
            ErrorCode::InvalidParams,
            format!("invalid params: name: contains the control character {c:?}"),
        ));
    }
    Ok(n.to_owned())
}

fn missing(id: &str) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!(
            "invalid params: id: no folder {:?}",
            crate::util::clip(id, 60)
        ),
    )
}

fn v<T: serde::Serialize>(t: &T) -> serde_json::Value {
    serde_json::to_value(t).unwrap_or_default()
}

fn serve(
    shared: &Arc<Host>,
    store: &mut Store,
    req: ClientRequest,
) -> Result<serde_json::Value, Refusal> {
    let now = now_ms();
    match req {
        ClientRequest::SessionOrganizationList(_) => Ok(v(&SessionOrganizationResult {
            organization: organization(shared, store)?,
        })),
        ClientRequest::SessionFolderCreate(p) => {
            let name = name_of(&p.name)?;
            let f = store
                .create_folder(&new_id("fld"), &name, now)
                .map_err(|e| store_err(shared, e))?;
            Ok(v(&SessionFolderResult {
                group: wire(&f),
                organization: organization(shared, store)?,
            }))
        }
        ClientRequest::SessionFolderUpdate(p) => {
            let name = name_of(&p.name)?;
            let f = store
                .rename_folder(p.id.trim(), &name, now)
                .map_err(|e| store_err(shared, e))?
                .ok_or_else(|| missing(&p.id))?;
            Ok(v(&SessionFolderResult {
                group: wire(&f),
                organization: organization(shared, store)?,
            }))
        }
        ClientRequest::SessionFolderReorder(p) => {
            let ids: Vec<String> = p.ids.iter().map(|i| i.trim().to_owned()).collect();
            store
                .reorder_folders(&ids, now)
                .map_err(|e| store_err(shared, e))?;
            Ok(v(&SessionOrganizationResult {
                organization: organization(shared, store)?,
            }))
        }
        ClientRequest::SessionFolderDelete(p) => {
            let (found, members) = store
                .delete_folder(p.id.trim())
                .map_err(|e| store_err(shared, e))?;
            if !found {
                return Err(missing(&p.id));
            }
            if !members.is_empty() {
                shared.threads_changed();
            }
            for id in members {
                if let Ok(Some(row)) = store.get_thread(&id) {
                    let _ = shared.outbox.notify(&ThreadUpdated {
                        thread: crate::session::convert::thread_summary(shared, &row),
                    });
                }
            }
            Ok(v(&SessionOrganizationResult {
                organization: organization(shared, store)?,
            }))
        }
        other => Err((
            ErrorCode::InternalError,
            format!("{} is not a folder method", other.method()),
        )),
    }
}

/// Serves the folder methods on the catalog pool.
pub fn handle(shared: &Arc<Host>, store: &mut Store, req: ClientRequest, reply: Responder) {
    match serve(shared, store, req) {
        Ok(v) => reply.ok(&v),
        Err((c, m)) => reply.err(c, m),
    }
}
