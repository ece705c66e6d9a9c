//! The workspace registry: `workspace/list` and `workspace/state/cleanup` (spec
//! `app-server.md` §3.7; the phone's first call is `workspace/list`).
//!
//! A server started with `--workspace-id ID` registers its workspace in
//! `$WUU_HOME/workspaces/ID/workspace.json` (`{id, name, path, registered_at}`), the
//! workspace's state directory. `workspace/list` answers the current workspace first,
//! then every registered one whose directory still exists. `workspace/state/cleanup`
//! removes a (removed) workspace's state directory and archives its conversations: the
//! data is kept, archived, never deleted. It never touches the served workspace or a
//! directory containing it, compared as the file system resolves the paths.

use crate::outbound::Responder;
use crate::session::Host;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{Store, ThreadFilter};

/// Directory (under the wuu home) holding one state directory per workspace id.
pub const WORKSPACES_DIR: &str = "workspaces";
/// The registration file inside a workspace's state directory.
pub const REGISTRATION_FILE: &str = "workspace.json";
/// Archive reason recorded on the conversations of a cleaned-up workspace.
pub const CLEANUP_REASON: &str = "workspace removed";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Registration {
    id: String,
    name: String,
    path: String,
    #[serde(default)]
    registered_at: String,
}

fn state_dir(home: &Path, id: &str) -> PathBuf {
    home.join(WORKSPACES_DIR).join(id)
}

fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| path.to_string_lossy().into_owned())
}

/// Records the workspace of this server (`--workspace-id`) in the registry. Best
/// effort: a failure is logged, never fatal.
pub fn register(home: &Path, id: &str, workdir: &Path) {
    let dir = state_dir(home, id);
    let reg = Registration {
        id: id.to_owned(),
        name: display_name(workdir),
        path: workdir.to_string_lossy().into_owned(),
        registered_at: crate::util::rfc3339(crate::util::now_ms()),
    };
    let file = dir.join(REGISTRATION_FILE);
    let current = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice::<Registration>(&b).ok());
    if current.is_some_and(|c| c.path == reg.path && c.name == reg.name) {
        return;
    }
    let tmp = dir.join(format!("{REGISTRATION_FILE}.tmp"));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&tmp, serde_json::to_vec_pretty(&reg).unwrap_or_default()))
        .and_then(|_| std::fs::rename(&tmp, &file));
    if let Err(e) = written {
        log::warn!("cannot register workspace {id} in {}: {e}", dir.display());
    }
}

fn registrations(home: &Path) -> Vec<Registration> {
    let Ok(entries) = std::fs::read_dir(home.join(WORKSPACES_DIR)) else {
        return vec![];
    };
    let mut out: Vec<Registration> = entries
        .flatten()
        .filter_map(|e| {
            let bytes = std::fs::read(e.path().join(REGISTRATION_FILE)).ok()?;
            match serde_json::from_slice::<Registration>(&bytes) {
                Ok(r) if e.file_name().to_string_lossy() == r.id => Some(r),
                Ok(_) => None,
                Err(err) => {
                    log::warn!("ignoring damaged {}: {err}", e.path().display());
                    None
                }
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
    out
}

/// `workspace/list`.
pub fn list(shared: &Host) -> WorkspaceListResult {
    let current = shared.opts.workdir.to_string_lossy().into_owned();
    let mut workspaces = vec![WorkspaceEntry {
        id: shared.opts.workspace_id.clone(),
        name: display_name(&shared.opts.workdir),
        path: current.clone(),
    }];
    for r in registrations(&shared.opts.home) {
        if Some(&r.id) == shared.opts.workspace_id.as_ref() || r.path == current {
            continue;
        }
        if !Path::new(&r.path).is_dir() {
            continue;
        }
        workspaces.push(WorkspaceEntry {
            id: Some(r.id),
            name: r.name,
            path: r.path,
        });
    }
    WorkspaceListResult {
        current,
        current_id: shared.opts.workspace_id.clone(),
        workspaces,
    }
}

type Refusal = (ErrorCode, String);

/// `path` as the file system names it: the longest existing prefix canonicalized
/// (symbolic links and `..` resolved by the OS), then the missing rest appended with `.`
/// and `..` removed lexically (a removed workspace no longer exists). A trailing slash
/// is no component.
fn canonical(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut base = loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            break real;
        }
        match (existing.components().next_back(), existing.parent()) {
            (Some(last), Some(parent)) => {
                rest.push(last.as_os_str().to_os_string());
                existing = parent.to_path_buf();
            }
            // Nothing of it exists, not even `/`: keep what was given.
            _ => break path.to_path_buf(),
        }
    };
    for name in rest.iter().rev() {
        match Path::new(name).components().next() {
            Some(std::path::Component::ParentDir) => {
                base.pop();
            }
            Some(std::path::Component::CurDir) | None => {}
            _ => base.push(name),
        }
    }
    base
}

/// `workspace/state/cleanup`.
pub fn cleanup(
    shared: &Arc<Host>,
    store: &mut Store,
    p: WorkspaceStateCleanupParams,
) -> Result<WorkspaceStateCleanupResult, Refusal> {
    let invalid = |m: String| (ErrorCode::InvalidParams, format!("invalid params: {m}"));
    let id = p
        .workspace_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let given_path = p
        .workspace_path
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if id.is_none() && given_path.is_none() {
        return Err(invalid("workspace_id or workspace_path is required".into()));
    }
    if let Some(id) = id {
        if !crate::util::valid_workspace_id(id) {
            return Err(invalid(format!(
                "workspace_id {:?} is not a workspace id",
                crate::util::clip(id, 40)
            )));
        }
    }
    let registered = id.and_then(|id| {
        std::fs::read(state_dir(&shared.opts.home, id).join(REGISTRATION_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice::<Registration>(&b).ok())
    });
    if let Some(p) = given_path {
        if !Path::new(p).is_absolute() {
            return Err(invalid(format!(
                "workspace_path {:?} must be absolute",
                crate::util::clip(p, 200)
            )));
        }
    }
    let path: Option<String> = given_path
        .map(str::to_owned)
        .or_else(|| registered.as_ref().map(|r| r.path.clone()));
    // Compared as the file system names them (a trailing slash, `..`, a symbolic link
    // or another spelling of the served workspace must not pass), and a directory that
    // contains the served workspace is refused too: its conversations would go with it.
    let served = canonical(&shared.opts.workdir);
    let target = path.as_deref().map(|p| canonical(Path::new(p)));
    if id.is_some() && id == shared.opts.workspace_id.as_deref()
        || target.as_ref().is_some_and(|t| served.starts_with(t))
    {
        return Err((
            ErrorCode::Error,
            format!(
                "cannot clean up the workspace this server serves ({}) or a directory that contains it",
                served.display()
            ),
        ));
    }
    let mut data_archived = false;
    if let (Some(path), Some(target)) = (&path, &target) {
        let given = Path::new(path);
        let rows = store
            .list_threads(&ThreadFilter {
                cwd: None,
                archived: Some(false),
                limit: None,
            })
            .map_err(|e| crate::session::host::store_error(shared, &e))?;
        for row in rows.iter().filter(|r| {
            let cwd = Path::new(&r.cwd);
            !r.cwd.is_empty() && (cwd.starts_with(given) || cwd.starts_with(target))
        }) {
            if shared.registry.is_running(&row.id) {
                log::warn!(
                    "workspace cleanup: conversation {} is running here; left unarchived",
                    row.id
                );
                continue;
            }
            match store.set_archived(&row.id, true, Some(CLEANUP_REASON)) {
                Ok(Some(_)) => data_archived = true,
                Ok(None) => {}
                Err(e) => return Err(crate::session::host::store_error(shared, &e)),
            }
        }
        if data_archived {
            shared.threads_changed();
        }
    }
    let dir: Option<PathBuf> = match id {
        Some(id) => Some(state_dir(&shared.opts.home, id)),
        None => registrations(&shared.opts.home)
            .into_iter()
            .find(|r| Some(canonical(Path::new(&r.path))) == target)
            .map(|r| state_dir(&shared.opts.home, &r.id)),
    };
    let removed = match &dir {
        Some(d) if d.is_dir() => {
            std::fs::remove_dir_all(d).map_err(|e| {
                (
                    ErrorCode::Error,
                    format!("cannot remove {}: {e}", d.display()),
                )
            })?;
            true
        }
        _ => false,
    };
    Ok(WorkspaceStateCleanupResult {
        state_dir: dir
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default(),
        removed,
        data_archived,
    })
}

/// Serves `workspace/list` and `workspace/state/cleanup` on the catalog pool.
pub fn handle(shared: &Arc<Host>, store: &mut Store, req: ClientRequest, reply: Responder) {
    match req {
        ClientRequest::WorkspaceList(_) => reply.ok(&list(shared)),
        ClientRequest::WorkspaceStateCleanup(p) => match cleanup(shared, store, p) {
            Ok(r) => reply.ok(&r),
            Err((c, m)) => reply.err(c, m),
        },
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not a workspace method", other.method()),
        ),
    }
}
