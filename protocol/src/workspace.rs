//! Workspace views (spec `app-server.md`, workspace/*): the git panel (`workspace/git/status|changes|diff`) and
//! the file browser (`workspace/directory/list`, `workspace/file/read|resolve|chunk`).
//! The phone has no disk of its own and reads the workspace through these.
//!
//! Sources: `internal/appserver/workspace_view.go` and `workspace_git.go` of
//! blueberrycongee/wuu (field names, limits, statuses) and the phone's callers
//! (`clients/mobile-web/src/lib/desktopBridge.ts`, `workspaceDownload.ts`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Params shared by every workspace view (the Go server decodes one struct for all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceViewParams {
    /// Absolute workspace root; must be the server's workspace or a directory inside it
    /// (default: the server's workspace).
    #[serde(default)]
    pub root: Option<String>,
    /// Path relative to the root (`/` separators; `..`, absolute paths and links out of
    /// the root are refused).
    #[serde(default)]
    pub path: Option<String>,
    /// `workspace/file/resolve`: a reference as written in a message (`src/a.rs:12`,
    /// `` `a.rs` ``, an absolute path inside the root…).
    #[serde(default)]
    pub reference: Option<String>,
    /// `workspace/file/chunk`: byte offset (needs `version` when > 0).
    #[serde(default)]
    pub offset: Option<i64>,
    /// `workspace/file/chunk`: the `version` of the first chunk.
    #[serde(default)]
    pub version: Option<String>,
}

/// Line counts of a set of changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitTotals {
    /// Files changed.
    pub files: u64,
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
}

/// `workspace/git/status` result. Outside a repository: `is_repo: false` and zeros.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitStatusResult {
    /// The workspace is inside a git repository.
    pub is_repo: bool,
    /// Current branch (the short commit id when detached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Local branches, most recently committed first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub branches: Vec<String>,
    /// HEAD is detached.
    pub detached: bool,
    /// Entries of `git status` (staged, unstaged and untracked).
    pub dirty_count: u64,
    /// Working tree against HEAD (untracked files included).
    pub diff: GitTotals,
    /// Index against HEAD.
    pub staged_diff: GitTotals,
}

/// One changed file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitChange {
    /// Path relative to the repository root.
    pub path: String,
    /// Previous path of a rename or copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// `modified` | `added` | `deleted` | `renamed` | `copied` | `untracked` | `unknown`.
    pub status: String,
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// Binary content (no line counts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub binary: bool,
}

/// `workspace/git/changes` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitChangesResult {
    /// The workspace is inside a git repository.
    pub is_repo: bool,
    /// Repository root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Changes against HEAD (the empty tree before the first commit), untracked last.
    pub files: Vec<GitChange>,
}

/// `workspace/git/diff` result: one file's change. Texts are at most 512 KiB each
/// (`truncated` says when cut); a link is shown as its target text, never followed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitDiffResult {
    /// The change (`status: unknown` outside a repository).
    #[serde(flatten)]
    pub change: GitChange,
    /// The workspace is inside a git repository.
    pub is_repo: bool,
    /// Unified diff text (lossy UTF-8).
    pub patch: String,
    /// The file at HEAD (`""` for added/untracked files; omitted for binary files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_text: Option<String>,
    /// The file in the working tree (`""` for deleted files; omitted for binary files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified_text: Option<String>,
    /// Some text was cut at the limit.
    pub truncated: bool,
}

/// A directory entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceFileEntry {
    /// File name.
    pub name: String,
    /// Path relative to the root (directories end with `/`).
    pub path: String,
    /// `file` | `directory` | `symlink` (a symbolic link, whatever it points at; it is
    /// never followed). Entries whose name is not UTF-8 are left out of the listing.
    pub kind: String,
}

/// `workspace/directory/list` result: directories first, then by name; build output
/// and VCS folders (`.git`, `node_modules`, `target`, …) are left out; at most 4000
/// entries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirectoryListResult {
    /// The root.
    pub root: String,
    /// The listed directory relative to the root (`""` for the root).
    pub path: String,
    /// Entries.
    pub entries: Vec<WorkspaceFileEntry>,
    /// More than 4000 entries existed.
    pub truncated: bool,
}

/// `workspace/file/read` result: a preview of at most 512 KiB of text; images and PDFs
/// up to 2 MiB come as a data URL.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileReadResult {
    /// The root.
    pub root: String,
    /// Path relative to the root.
    pub path: String,
    /// Absolute path.
    pub absolute_path: String,
    /// File size in bytes.
    pub size_bytes: u64,
    /// Modification time, Unix milliseconds (fractional).
    pub mtime_ms: f64,
    /// Hex SHA-256 of the previewed bytes.
    pub sha256: String,
    /// The preview contains a NUL byte (no `text`).
    pub binary: bool,
    /// The file is longer than the preview.
    pub truncated: bool,
    /// The preview as text (invalid UTF-8 replaced by U+FFFD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `data:` URL of an image or PDF of at most 2 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renderable_url: Option<String>,
    /// `image` | `pdf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renderable_kind: Option<String>,
    /// Why `renderable_url` is absent for an image or PDF: its bytes contain a
    /// configured secret, which a data URL would carry unmasked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renderable_withheld: Option<String>,
}

/// `workspace/file/resolve` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileResolveResult {
    /// The root.
    pub root: String,
    /// The reference as given.
    pub reference: String,
    /// `resolved` | `missing` | `ambiguous` | `invalid`.
    pub status: String,
    /// Path relative to the root, when resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Absolute path, when resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absolute_path: Option<String>,
    /// Candidates of an ambiguous bare file name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<String>,
}

/// `workspace/file/chunk` result: at most 256 KiB of a regular file of at most 64 MiB.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FileChunkResult {
    /// Base64 of the bytes.
    pub data: String,
    /// Offset of `data`.
    pub offset: u64,
    /// File size in bytes.
    pub size: u64,
    /// `MTIME_NS:SIZE`; a later chunk with another version is refused ("file changed").
    pub version: String,
    /// Sniffed media type (`application/octet-stream` when unknown).
    pub mime: String,
}
