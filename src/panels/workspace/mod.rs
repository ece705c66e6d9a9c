//! Workspace views: `workspace/directory/list`, `workspace/file/read|resolve|chunk` and
//! `workspace/git/status|changes|diff` (spec `app-server.md`, workspace/*; shapes:
//! `wuu_protocol::workspace`; limits and statuses as the Go server's `workspace_view.go`
//! / `workspace_git.go`). This module routes a request to its view and holds the limits;
//! [`files`] serves the file views, [`git`] the repository views, and [`fence`] keeps
//! every access inside the workspace and away from the host's own files and secrets.

mod fence;
mod files;
mod git;

use crate::outbound::Responder;
use crate::session::Host;
use std::sync::Arc;
use std::time::Duration;
use wuu_protocol::*;

type Refusal = (ErrorCode, String);

/// Text preview limit (bytes).
pub const PREVIEW_BYTES: usize = 512 * 1024;
/// Images and PDFs up to this size come as a data URL.
pub const MEDIA_BYTES: usize = 2 * 1024 * 1024;
/// Entries listed at most.
pub const DIRECTORY_ENTRIES: usize = 4000;
/// Entries a bare-name reference search visits at most.
pub const REFERENCE_VISITS: usize = 8000;
/// Largest file `workspace/file/chunk` serves.
pub const CHUNK_FILE_MAX: u64 = 64 * 1024 * 1024;
/// Bytes per chunk.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Output of one git listing.
pub const GIT_LIST_BYTES: usize = 8 * 1024 * 1024;
/// Deadline of one git view.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(25);
/// Untracked files whose line counts are computed (the rest are listed with zeros).
pub const UNTRACKED_STATS: usize = 500;

fn err(m: impl Into<String>) -> Refusal {
    (ErrorCode::Error, m.into())
}

fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

/// Handles one workspace view request (views pool).
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    let result: Result<serde_json::Value, Refusal> = (|| {
        let v = |r: &dyn erased::Ser| r.value();
        match req {
            ClientRequest::WorkspaceDirectoryList(p) => Ok(v(&files::list_directory(shared, &p)?)),
            ClientRequest::WorkspaceFileRead(p) => Ok(v(&files::read_file(shared, &p)?)),
            ClientRequest::WorkspaceFileChunk(p) => Ok(v(&files::read_chunk(shared, &p)?)),
            ClientRequest::WorkspaceFileResolve(p) => Ok(v(&files::resolve(shared, &p)?)),
            ClientRequest::WorkspaceGitStatus(p) => git::view(shared, &p, git::GitKind::Status),
            ClientRequest::WorkspaceGitChanges(p) => git::view(shared, &p, git::GitKind::Changes),
            ClientRequest::WorkspaceGitDiff(p) => git::view(shared, &p, git::GitKind::Diff),
            other => Err((
                ErrorCode::InternalError,
                format!("{} is not a workspace view", other.method()),
            )),
        }
    })();
    match result {
        Ok(v) => reply.ok(&v),
        Err((c, m)) => reply.err(c, m),
    }
}

mod erased {
    pub trait Ser {
        fn value(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn value(&self) -> serde_json::Value {
            serde_json::to_value(self).expect("serialize view")
        }
    }
}
