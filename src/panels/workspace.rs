//! Workspace views: `workspace/directory/list`, `workspace/file/read|resolve|chunk` and
//! `workspace/git/status|changes|diff` (shapes: `wuu_protocol::workspace`; limits and
//! statuses as the Go server's `workspace_view.go` / `workspace_git.go`).
//!
//! Containment: every file access goes through [`crate::beneath::Root`] opened on
//! the server's workspace, in every permission mode: paths are resolved by the kernel
//! beneath the workspace (`openat2` `RESOLVE_BENEATH`), so `..`, absolute paths and links
//! that lead out of it fail, and a link swapped in after a check cannot redirect a read.
//! `root` must be the workspace or a directory inside it; it is only ever used as a
//! prefix of paths resolved beneath the workspace. Hard links inside the workspace are
//! the user's own files and are read like any file, except the host's own files: the wuu
//! home (when the workspace holds it) and the user config file are fenced off exactly as
//! for the file tools ([`Root::fenced_host`]), by any name or link.
//!
//! Secrets: text answers pass the redactor with every frame, but base64 hides a secret
//! from it, so a chunk whose bytes (or the bytes around its edges) contain a configured
//! secret is refused, and an image or PDF that contains one gets no data URL
//! (`renderable_withheld` says why).
//!
//! Git: the workspace's repository configuration can name programs (`filter.*.clean`
//! through `.gitattributes`, hooks through `core.hooksPath`), so `git` never runs as a
//! plain child of the host: it runs through the command sandbox launcher in `read_only`
//! mode (the workspace readable, nothing writable but a private temp dir, the same read
//! roots as `bash`) with the command environment (no provider keys, see
//! `tools::sandbox::command_env`). A filter a repository configures therefore runs
//! confined and without secrets. Where Landlock is unavailable git runs directly, with
//! the same environment and flags (logged as a warning). Always: hooks off
//! (`core.hooksPath=/dev/null`), external diff drivers, text conversion, fsmonitor and
//! optional index locks off, variables that redirect git (`GIT_DIR`, …) removed, bounded
//! output (8 MiB for listings, 512 KiB for a patch or a file text, 4 KiB of stderr) and a
//! 25 s deadline (then its process group is killed). A workspace that is not inside a
//! repository answers `is_repo: false` with empty views, as the Go server does; a
//! repository whose top level, git directory or common directory lies outside the
//! workspace (a `.git` file `gitdir: /elsewhere`, a worktree of an outside repository)
//! is refused.

use crate::beneath::{self, Kind, Root};
use crate::outbound::Responder;
use crate::session::Host;
use base64::Engine as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

fn io_refusal(e: beneath::Error) -> Refusal {
    match e {
        beneath::Error::Outside => err("path must stay inside the workspace"),
        beneath::Error::Io(e) => err(e.to_string()),
    }
}

/// The view's root: the workspace `Root` and the prefix of the requested `root` inside
/// it (empty for the workspace itself), plus the absolute root path shown to clients.
struct View {
    ws: Root,
    prefix: PathBuf,
    shown: PathBuf,
}

impl View {
    fn open(shared: &Host, requested: Option<&str>) -> Result<View, Refusal> {
        let workdir = &shared.opts.workdir;
        let requested = requested.map(str::trim).filter(|r| !r.is_empty());
        let prefix = match requested {
            None => PathBuf::new(),
            Some(r) => {
                let p = Path::new(r);
                if !p.is_absolute() {
                    return Err(invalid("root: must be absolute"));
                }
                beneath::rel_beneath(workdir, p)
                    .or_else(|| {
                        // The client may name the workspace through its real path.
                        let real = std::fs::canonicalize(workdir).ok()?;
                        beneath::rel_beneath(&real, p)
                    })
                    .ok_or_else(|| {
                        err(format!(
                            "root {r:?} is not this server's workspace or a directory inside it"
                        ))
                    })?
            }
        };
        // The wuu home and the user config file are never served, as for the file tools.
        let ws = Root::open(workdir)
            .map_err(|e| err(format!("cannot open the workspace: {e}")))?
            .fenced_host(&shared.opts.home, &[shared.config().config_path.clone()]);
        if !prefix.as_os_str().is_empty() {
            let st = ws.stat(&prefix).map_err(io_refusal)?;
            if st.kind != Kind::Dir {
                return Err(err("root is not a directory"));
            }
        }
        let shown = workdir.join(&prefix);
        Ok(View { ws, prefix, shown })
    }

    fn rel(&self, path: &Path) -> PathBuf {
        self.prefix.join(path)
    }
}

/// A client path relative to the view's root: `/` separators, no `..`, not absolute.
fn relative(path: Option<&str>, directory: bool) -> Result<PathBuf, Refusal> {
    let p = path.unwrap_or("").replace('\\', "/");
    let p = p.trim_start_matches("./");
    if p.is_empty() || p == "." {
        return if directory {
            Ok(PathBuf::new())
        } else {
            Err(invalid("path is required"))
        };
    }
    if p.starts_with('/') || p.contains('\0') || p.split('/').any(|c| c == "..") {
        return Err(err("path must stay inside the workspace"));
    }
    Ok(p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect())
}

fn slash(p: &Path) -> String {
    p.to_string_lossy().replace('\\', "/")
}

fn ignored(name: &str, directory: bool) -> bool {
    name == ".DS_Store"
        || (directory
            && matches!(
                name,
                ".git"
                    | ".next"
                    | ".turbo"
                    | ".vite"
                    | "coverage"
                    | "dist"
                    | "node_modules"
                    | "out"
                    | "target"
            ))
}

/// Media type from the first bytes (the types the renderer can show, else text or
/// octet-stream).
fn sniff(head: &[u8]) -> &'static str {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        "image/png"
    } else if head.starts_with(b"\xff\xd8\xff") {
        "image/jpeg"
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        "image/gif"
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        "image/webp"
    } else if head.starts_with(b"%PDF-") {
        "application/pdf"
    } else if !head.contains(&0) && std::str::from_utf8(head).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

/// Handles one workspace view request (views pool).
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    let result: Result<serde_json::Value, Refusal> = (|| {
        let v = |r: &dyn erased::Ser| r.value();
        match req {
            ClientRequest::WorkspaceDirectoryList(p) => Ok(v(&list_directory(shared, &p)?)),
            ClientRequest::WorkspaceFileRead(p) => Ok(v(&read_file(shared, &p)?)),
            ClientRequest::WorkspaceFileChunk(p) => Ok(v(&read_chunk(shared, &p)?)),
            ClientRequest::WorkspaceFileResolve(p) => Ok(v(&resolve(shared, &p)?)),
            ClientRequest::WorkspaceGitStatus(p) => git_view(shared, &p, GitKind::Status),
            ClientRequest::WorkspaceGitChanges(p) => git_view(shared, &p, GitKind::Changes),
            ClientRequest::WorkspaceGitDiff(p) => git_view(shared, &p, GitKind::Diff),
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

fn list_directory(shared: &Host, p: &WorkspaceViewParams) -> Result<DirectoryListResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), true)?;
    let entries = view.ws.read_dir(&view.rel(&rel)).map_err(io_refusal)?;
    let truncated = entries.len() > DIRECTORY_ENTRIES;
    let mut out: Vec<WorkspaceFileEntry> = entries
        .iter()
        .take(DIRECTORY_ENTRIES)
        .filter_map(|e| {
            // A name that is not UTF-8 could not be sent back to open it: skipped.
            let name = e.name.to_str()?.to_owned();
            let dir = e.kind == Kind::Dir;
            if ignored(&name, dir) || e.kind == Kind::Other {
                return None;
            }
            let mut path = slash(&rel.join(&name));
            if dir {
                path.push('/');
            }
            Some(WorkspaceFileEntry {
                name,
                path,
                // A symlink is reported as such and never followed (the Go server
                // lists it as "file", which hid links to directories).
                kind: match e.kind {
                    Kind::Dir => "directory",
                    Kind::Symlink => "symlink",
                    _ => "file",
                }
                .into(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.kind != "directory", &a.name).cmp(&(b.kind != "directory", &b.name)));
    Ok(DirectoryListResult {
        root: view.shown.to_string_lossy().into_owned(),
        path: slash(&rel),
        entries: out,
        truncated,
    })
}

fn mtime_ms(m: &std::fs::Metadata) -> f64 {
    m.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as f64 / 1e6)
        .unwrap_or(0.0)
}

fn preview(view: &View, rel: &Path) -> Result<FileReadResult, Refusal> {
    let mut f = view.ws.open_read(&view.rel(rel)).map_err(io_refusal)?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    let mut data = Vec::new();
    (&mut f)
        .take(MEDIA_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| err(e.to_string()))?;
    let cut = data.len().min(PREVIEW_BYTES);
    let shown = &data[..cut];
    let binary = shown.contains(&0);
    let mime = sniff(&data[..data.len().min(512)]);
    let kind = match mime {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" => Some("image"),
        "application/pdf" => Some("pdf"),
        _ => None,
    };
    let renderable = kind.is_some() && data.len() <= MEDIA_BYTES;
    // The redactor cannot see into base64: a file carrying a secret gets no data URL.
    let withheld = (renderable && crate::secrets::contains_secret(&data)).then(|| {
        format!(
            "`{}` contains a configured secret; it is not rendered (a data URL would carry it unmasked)",
            slash(rel)
        )
    });
    let url = (renderable && withheld.is_none()).then(|| {
        format!(
            "data:{mime};base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&data)
        )
    });
    use sha2::Digest;
    Ok(FileReadResult {
        root: view.shown.to_string_lossy().into_owned(),
        path: slash(rel),
        absolute_path: view.shown.join(rel).to_string_lossy().into_owned(),
        size_bytes: meta.len(),
        mtime_ms: mtime_ms(&meta),
        sha256: sha2::Sha256::digest(shown)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        binary,
        truncated: data.len() > PREVIEW_BYTES,
        text: (!binary).then(|| String::from_utf8_lossy(shown).into_owned()),
        renderable_url: url,
        renderable_kind: kind.map(str::to_owned),
        renderable_withheld: withheld,
    })
}

fn read_file(shared: &Host, p: &WorkspaceViewParams) -> Result<FileReadResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), false)?;
    preview(&view, &rel)
}

fn version_of(m: &std::fs::Metadata) -> String {
    let ns = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{ns}:{}", m.len())
}

fn read_chunk(shared: &Host, p: &WorkspaceViewParams) -> Result<FileChunkResult, Refusal> {
    use std::os::unix::fs::FileExt;
    let view = View::open(shared, p.root.as_deref())?;
    let rel = relative(p.path.as_deref(), false)?;
    let f = view.ws.open_read(&view.rel(&rel)).map_err(io_refusal)?;
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if meta.len() > CHUNK_FILE_MAX {
        return Err(err("file must be regular and at most 64 MB"));
    }
    let version = version_of(&meta);
    let offset = p.offset.unwrap_or(0);
    let asked = p.version.as_deref().unwrap_or("");
    if offset < 0 || offset as u64 > meta.len() || (offset > 0 && asked.is_empty()) {
        return Err(invalid("invalid file offset or missing version"));
    }
    if !asked.is_empty() && asked != version {
        return Err(err("file changed; restart the download"));
    }
    let mut head = [0u8; 512];
    let n = f.read_at(&mut head, 0).unwrap_or(0);
    let mime = sniff(&head[..n]);
    let want = CHUNK_BYTES.min((meta.len() - offset as u64) as usize);
    let mut data = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match f.read_at(&mut data[got..], offset as u64 + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) => return Err(err(e.to_string())),
        }
    }
    let after = f.metadata().map_err(|e| err(e.to_string()))?;
    if version_of(&after) != version || got != want {
        return Err(err("file changed; restart the download"));
    }
    if carries_secret(&f, &data, offset as u64, meta.len()) {
        return Err(err(format!(
            "`{}` contains a configured secret; workspace/file/chunk does not serve it (base64 would carry it unmasked; workspace/file/read shows its text masked)",
            slash(&rel)
        )));
    }
    Ok(FileChunkResult {
        data: base64::engine::general_purpose::STANDARD.encode(&data),
        offset: offset as u64,
        size: meta.len(),
        version,
        mime: mime.split(';').next().unwrap_or(mime).to_owned(),
    })
}

/// Whether the chunk `data` read at `offset` of `f` (of `size` bytes) holds a configured
/// secret, or part of one that crosses either of its edges (the bytes around it, up to
/// the longest pattern's length, are looked at too). A read error counts as a secret.
fn carries_secret(f: &std::fs::File, data: &[u8], offset: u64, size: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let reach = crate::secrets::longest_pattern().saturating_sub(1) as u64;
    if reach == 0 {
        return false;
    }
    let start = offset.saturating_sub(reach);
    let end = (offset + data.len() as u64).saturating_add(reach).min(size);
    let mut window = vec![0u8; (end - start) as usize];
    let mut got = 0;
    while got < window.len() {
        match f.read_at(&mut window[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(_) => return true,
        }
    }
    window.truncate(got);
    crate::secrets::contains_secret(&window) || crate::secrets::contains_secret(data)
}

fn resolve(shared: &Host, p: &WorkspaceViewParams) -> Result<FileResolveResult, Refusal> {
    let view = View::open(shared, p.root.as_deref())?;
    let reference = p.reference.clone().unwrap_or_default();
    let mut result = FileResolveResult {
        root: view.shown.to_string_lossy().into_owned(),
        reference: reference.clone(),
        status: "invalid".into(),
        ..Default::default()
    };
    let mut path = reference.trim().to_owned();
    for (a, b) in [("`", "`"), ("<", ">"), ("\"", "\""), ("'", "'")] {
        if path.len() >= 2 && path.starts_with(a) && path.ends_with(b) {
            path = path[a.len()..path.len() - b.len()].trim().to_owned();
            break;
        }
    }
    static SUFFIX: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let suffix = SUFFIX.get_or_init(|| {
        regex::Regex::new(r"(?i)(:\d+(?:[-:–—]\d+)?|\s+\((?:line|lines)\s+\d+(?:[-:–—]\d+)?\))$")
            .expect("regex")
    });
    let mut path = suffix.replace(&path, "").replace('\\', "/");
    if path.is_empty() || path.contains('\0') || path.contains("://") {
        return Ok(result);
    }
    if let Some(rest) = path.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            path = Path::new(&home).join(rest).to_string_lossy().into_owned();
        }
    }
    let qualified = path.contains('/');
    if Path::new(&path).is_absolute() {
        match beneath::rel_beneath(&view.shown, Path::new(&path)) {
            Some(r) => path = slash(&r),
            None => return Ok(result),
        }
    }
    let Ok(rel) = relative(Some(&path), false) else {
        return Ok(result);
    };
    result.status = "missing".into();
    let regular = |r: &Path| {
        view.ws
            .stat(&view.rel(r))
            .is_ok_and(|s| s.kind == Kind::File)
    };
    let found = |result: &mut FileResolveResult, r: &Path| {
        result.status = "resolved".into();
        result.path = Some(slash(r));
        result.absolute_path = Some(view.shown.join(r).to_string_lossy().into_owned());
    };
    if qualified {
        if regular(&rel) {
            found(&mut result, &rel);
        }
        return Ok(result);
    }
    let name = slash(&rel);
    let mut matches: Vec<PathBuf> = vec![];
    let mut visits = 0usize;
    let mut truncated = false;
    let _ = view.ws.walk(&view.prefix, None, &mut |e| {
        visits += 1;
        if visits > REFERENCE_VISITS {
            truncated = true;
            return beneath::Visit::Stop;
        }
        let n = e.entry.name.to_string_lossy();
        let dir = e.entry.kind == Kind::Dir;
        if ignored(&n, dir) {
            return beneath::Visit::Skip;
        }
        if e.entry.kind == Kind::File && n == name.as_str() {
            let r = e
                .rel
                .strip_prefix(&view.prefix)
                .unwrap_or(e.rel)
                .to_path_buf();
            matches.push(r);
            if matches.len() > 1 {
                return beneath::Visit::Stop;
            }
        }
        beneath::Visit::Continue
    });
    if matches.len() > 1 || truncated {
        result.status = "ambiguous".into();
        result.matches = matches.iter().map(|m| slash(m)).collect();
    } else if let Some(m) = matches.first() {
        found(&mut result, m);
    }
    Ok(result)
}

// ----- git ------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum GitKind {
    Status,
    Changes,
    Diff,
}

struct GitOut {
    stdout: Vec<u8>,
    truncated: bool,
    code: Option<i32>,
    stderr: String,
}

/// How the git commands of one view run (see the module docs): through the command
/// sandbox launcher in `read_only` mode when Landlock is available, else directly
/// (hardened flags and the scrubbed environment only).
struct Git {
    deadline: Instant,
    /// The launcher and its arguments up to and including `--`; None = run git directly.
    launch: Option<(PathBuf, Vec<std::ffi::OsString>)>,
    /// The environment (the command environment: no provider keys or secret-looking
    /// variables, no variables that redirect git to another repository).
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

/// Variables that would point git at another repository, index or object store.
const GIT_REDIRECT_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
];

impl Git {
    fn new(shared: &Host) -> Git {
        use crate::tools::{sandbox, PermissionMode, ToolContext};
        let home = &shared.opts.home;
        let workdir = &shared.opts.workdir;
        let ctx = ToolContext {
            workspace_root: std::fs::canonicalize(workdir).unwrap_or_else(|_| workdir.clone()),
            cwd: workdir.clone(),
            permission_mode: PermissionMode::ReadOnly,
            spill_dir: home.join("spill").join("workspace-views"),
            default_timeout_ms: 0,
            output_cap_bytes: 0,
            temp_dir: home.join("tmp").join("workspace-views"),
            sandbox: sandbox::SandboxSettings {
                // The wuu home is hidden from git (and whatever it runs) as from `bash`.
                process_ledger: Some(home.clone()),
                ..sandbox::SandboxSettings::from_config(&shared.config())
            },
        };
        let launch = match (sandbox::status(), sandbox::launcher()) {
            (sandbox::Status::Available(_), Ok(exe)) => {
                match std::fs::create_dir_all(&ctx.temp_dir) {
                    Ok(()) => {
                        let mut args: Vec<std::ffi::OsString> = vec![
                            sandbox::LAUNCHER_ARG.into(),
                            "--ppid".into(),
                            std::process::id().to_string().into(),
                            "--mode".into(),
                            "read_only".into(),
                        ];
                        args.extend(sandbox::policy_args(&ctx));
                        args.push("--".into());
                        Some((exe, args))
                    }
                    Err(e) => {
                        log::warn!(
                            "workspace git views: cannot create {}: {e}; git runs unconfined (hardened flags, scrubbed environment)",
                            ctx.temp_dir.display()
                        );
                        None
                    }
                }
            }
            (sandbox::Status::Unavailable(why), _) => {
                log::warn!("workspace git views: the command sandbox is unavailable ({why}); git runs unconfined (hardened flags, scrubbed environment)");
                None
            }
            (_, Err(e)) => {
                log::warn!("workspace git views: {e}; git runs unconfined (hardened flags, scrubbed environment)");
                None
            }
        };
        let mut env: Vec<_> = sandbox::command_env(&ctx)
            .into_iter()
            .filter(|(k, _)| !GIT_REDIRECT_VARS.iter().any(|v| k == v))
            .collect();
        for (k, v) in [
            ("GIT_OPTIONAL_LOCKS", "0"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("LC_ALL", "C"),
        ] {
            env.retain(|(n, _)| n != k);
            env.push((k.into(), v.into()));
        }
        Git {
            deadline: Instant::now() + GIT_TIMEOUT,
            launch,
            env,
        }
    }
}

/// Runs `git ARGS` in `dir` with bounded output and the shared deadline: confined by
/// the command sandbox (`read_only`) when it is available, with the command
/// environment, repository hooks disabled (`core.hooksPath=/dev/null`), no fsmonitor,
/// no optional locks, and in its own process group (killed whole at the deadline).
fn git(dir: &Path, g: &Git, limit: usize, args: &[&str]) -> Result<GitOut, Refusal> {
    let mut cmd = match &g.launch {
        Some((exe, pre)) => {
            let mut c = Command::new(exe);
            c.args(pre).arg("git");
            c
        }
        None => Command::new("git"),
    };
    cmd.args([
        "--no-pager",
        "--literal-pathspecs",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.quotePath=false",
        "-c",
        "diff.external=",
    ])
    .args(args)
    .current_dir(dir)
    .env_clear()
    .envs(g.env.iter().map(|(k, v)| (k, v)))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if g.launch.is_none() {
        // (The launcher starts a session of its own, so it is its group's leader.)
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| err(format!("cannot run git: {e}")))?;
    fn drain(
        mut r: impl Read + Send + 'static,
        limit: usize,
    ) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 16 * 1024];
            let mut cut = false;
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = limit.saturating_sub(kept.len());
                        if n > room {
                            cut = true;
                        }
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
            (kept, cut)
        })
    }
    let out = drain(child.stdout.take().expect("piped"), limit);
    let errs = drain(child.stderr.take().expect("piped"), 4096);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= g.deadline => {
                if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!(
                    "git {} did not finish within {} s",
                    args.first().unwrap_or(&""),
                    GIT_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(err(format!("git: {e}"))),
        }
    };
    let (stdout, truncated) = out.join().unwrap_or_default();
    let (stderr, _) = errs.join().unwrap_or_default();
    Ok(GitOut {
        stdout,
        truncated,
        code: status.code(),
        stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
    })
}

/// A git listing that must succeed and fit.
fn git_list(dir: &Path, g: &Git, args: &[&str]) -> Result<Vec<u8>, Refusal> {
    let o = git(dir, g, GIT_LIST_BYTES, args)?;
    if o.code != Some(0) {
        return Err(err(format!(
            "git {}: {} (exit {:?})",
            args.first().unwrap_or(&""),
            o.stderr,
            o.code
        )));
    }
    if o.truncated {
        return Err(err("repository changes exceed the remote view limit"));
    }
    Ok(o.stdout)
}

fn numstat(data: &[u8]) -> Result<Vec<GitChange>, Refusal> {
    let text = String::from_utf8_lossy(data);
    let records: Vec<&str> = text.split('\0').collect();
    let mut out = vec![];
    let mut i = 0;
    while i < records.len() {
        let rec = records[i];
        i += 1;
        if rec.is_empty() {
            continue;
        }
        let fields: Vec<&str> = rec.splitn(3, '\t').collect();
        if fields.len() != 3 {
            return Err(err("invalid git numstat response"));
        }
        let mut path = fields[2].to_owned();
        if path.is_empty() {
            // A rename: `old\0new\0` follow.
            let Some(new) = records.get(i + 1) else {
                return Err(err("incomplete git rename statistics"));
            };
            path = (*new).to_owned();
            i += 2;
        }
        let binary = fields[0] == "-" || fields[1] == "-";
        out.push(GitChange {
            path,
            additions: if binary {
                0
            } else {
                fields[0].parse().unwrap_or(0)
            },
            deletions: if binary {
                0
            } else {
                fields[1].parse().unwrap_or(0)
            },
            binary,
            ..Default::default()
        });
    }
    Ok(out)
}

fn changes(top: &Path, g: &Git, baseline: &str) -> Result<Vec<GitChange>, Refusal> {
    let names = git_list(
        top,
        g,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--name-status",
            "-z",
            "--find-renames",
            baseline,
            "--",
        ],
    )?;
    let counts = git_list(
        top,
        g,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--numstat",
            "-z",
            "--find-renames",
            baseline,
            "--",
        ],
    )?;
    let stats = numstat(&counts)?;
    let text = String::from_utf8_lossy(&names);
    let records: Vec<&str> = text.split('\0').collect();
    let mut files = vec![];
    let mut i = 0;
    while i + 1 < records.len() {
        let (code, path) = (records[i], records[i + 1]);
        i += 2;
        if code.is_empty() {
            break;
        }
        let mut c = GitChange {
            path: path.to_owned(),
            status: "unknown".into(),
            ..Default::default()
        };
        match code.as_bytes().first() {
            Some(b'M' | b'T' | b'U') => c.status = "modified".into(),
            Some(b'A') => c.status = "added".into(),
            Some(b'D') => c.status = "deleted".into(),
            Some(k @ (b'R' | b'C')) => {
                let Some(new) = records.get(i) else {
                    return Err(err("incomplete git rename"));
                };
                c.old_path = Some(path.to_owned());
                c.path = (*new).to_owned();
                i += 1;
                c.status = if *k == b'R' { "renamed" } else { "copied" }.into();
            }
            _ => {}
        }
        if let Some(s) = stats.iter().find(|s| s.path == c.path) {
            c.additions = s.additions;
            c.deletions = s.deletions;
            c.binary = s.binary;
        }
        files.push(c);
    }
    let untracked = git_list(
        top,
        g,
        &["ls-files", "--others", "--exclude-standard", "-z"],
    )?;
    let text = String::from_utf8_lossy(&untracked);
    for (n, path) in text.split('\0').filter(|p| !p.is_empty()).enumerate() {
        let mut c = GitChange {
            path: path.to_owned(),
            status: "untracked".into(),
            ..Default::default()
        };
        if n < UNTRACKED_STATS {
            let o = git(
                top,
                g,
                GIT_LIST_BYTES,
                &[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-index",
                    "--numstat",
                    "-z",
                    "--",
                    "/dev/null",
                    path,
                ],
            )?;
            if o.code != Some(0) && o.code != Some(1) {
                return Err(err(format!("git diff --no-index: {}", o.stderr)));
            }
            for s in numstat(&o.stdout)? {
                c.additions += s.additions;
                c.deletions += s.deletions;
                c.binary |= s.binary;
            }
        }
        files.push(c);
    }
    Ok(files)
}

fn totals(files: &[GitChange]) -> GitTotals {
    GitTotals {
        files: files.len() as u64,
        additions: files.iter().map(|f| f.additions).sum(),
        deletions: files.iter().map(|f| f.deletions).sum(),
    }
}

fn git_view(
    shared: &Host,
    p: &WorkspaceViewParams,
    kind: GitKind,
) -> Result<serde_json::Value, Refusal> {
    use erased::Ser;
    let view = View::open(shared, p.root.as_deref())?;
    let g = &Git::new(shared);
    let top = git(
        &view.shown,
        g,
        GIT_LIST_BYTES,
        &["rev-parse", "--show-toplevel"],
    )?;
    if top.code != Some(0) {
        if top.stderr.contains("not a git repository") {
            return Ok(match kind {
                GitKind::Status => GitStatusResult::default().value(),
                GitKind::Changes => GitChangesResult::default().value(),
                GitKind::Diff => GitDiffResult {
                    change: GitChange {
                        path: p.path.clone().unwrap_or_default(),
                        status: "unknown".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                }
                .value(),
            });
        }
        // Missing git, permissions, a corrupt repository must not look clean.
        return Err(err(format!(
            "git rev-parse: {} (exit {:?})",
            top.stderr, top.code
        )));
    }
    let top = PathBuf::from(String::from_utf8_lossy(&top.stdout).trim_end_matches('\n'));
    let workdir_real =
        std::fs::canonicalize(&shared.opts.workdir).unwrap_or_else(|_| shared.opts.workdir.clone());
    let Some(top_rel) = beneath::rel_beneath(&workdir_real, &top) else {
        return Err(err(format!(
            "the repository root {} is outside the workspace",
            top.display()
        )));
    };
    // A `.git` file (`gitdir: …`), `commondir` or alternates could make git read another
    // repository's objects: the git directory and the common directory must be inside the
    // workspace too (a worktree of a repository outside it is refused).
    let dirs = git_list(
        &top,
        g,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
        ],
    )?;
    for d in String::from_utf8_lossy(&dirs)
        .lines()
        .filter(|l| !l.is_empty())
    {
        let real = std::fs::canonicalize(d).unwrap_or_else(|_| PathBuf::from(d));
        if beneath::rel_beneath(&workdir_real, &real).is_none() {
            return Err(err(format!(
                "the repository's git directory {} is outside the workspace; it is not read",
                real.display()
            )));
        }
    }
    let top_path = shared.opts.workdir.join(&top_rel);
    let baseline = match git(
        &top_path,
        g,
        4096,
        &["rev-parse", "--verify", "--quiet", "HEAD"],
    )? {
        o if o.code == Some(0) => "HEAD".to_owned(),
        o if o.code == Some(1) => {
            let h = git_list(&top_path, g, &["hash-object", "-t", "tree", "--stdin"])?;
            String::from_utf8_lossy(&h).trim().to_owned()
        }
        o => return Err(err(format!("git rev-parse HEAD: {}", o.stderr))),
    };
    match kind {
        GitKind::Changes => Ok(GitChangesResult {
            is_repo: true,
            root: Some(top_path.to_string_lossy().into_owned()),
            files: changes(&top_path, g, &baseline)?,
        }
        .value()),
        GitKind::Status => {
            let mut r = GitStatusResult {
                is_repo: true,
                ..Default::default()
            };
            let b = git_list(&top_path, g, &["branch", "--show-current"])?;
            let mut branch = String::from_utf8_lossy(&b).trim().to_owned();
            r.detached = branch.is_empty();
            if r.detached && baseline == "HEAD" {
                let h = git_list(&top_path, g, &["rev-parse", "--short", "HEAD"])?;
                branch = String::from_utf8_lossy(&h).trim().to_owned();
            }
            r.branch = (!branch.is_empty()).then_some(branch);
            let refs = git_list(
                &top_path,
                g,
                &[
                    "for-each-ref",
                    "--sort=-committerdate",
                    "--format=%(refname:short)",
                    "refs/heads/",
                ],
            )?;
            r.branches = String::from_utf8_lossy(&refs)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            r.diff = totals(&changes(&top_path, g, &baseline)?);
            let st = git_list(
                &top_path,
                g,
                &["status", "--porcelain=v1", "-z", "--untracked-files=normal"],
            )?;
            let text = String::from_utf8_lossy(&st);
            let recs: Vec<&str> = text.split('\0').collect();
            let mut i = 0;
            while i < recs.len() {
                let e = recs[i];
                i += 1;
                if e.len() < 3 {
                    continue;
                }
                r.dirty_count += 1;
                if e.get(..2).is_some_and(|x| x.contains(['R', 'C'])) {
                    i += 1;
                }
            }
            let staged = git_list(
                &top_path,
                g,
                &[
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--cached",
                    "--numstat",
                    "-z",
                    &baseline,
                    "--",
                ],
            )?;
            r.staged_diff = totals(&numstat(&staged)?);
            Ok(r.value())
        }
        GitKind::Diff => {
            let rel = relative(p.path.as_deref(), false)?;
            refuse_fenced(&view.ws, &top_rel.join(&rel))?;
            let path = slash(&rel);
            let files = changes(&top_path, g, &baseline)?;
            let Some(change) = files.into_iter().find(|c| c.path == path) else {
                return Err(err("file is not in the current repository changes"));
            };
            let mut args: Vec<&str> = vec![
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--find-renames",
                &baseline,
                "--",
                &path,
            ];
            if let Some(old) = change.old_path.as_deref() {
                args.push(old);
            }
            if change.status == "untracked" {
                args = vec![
                    "diff",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-index",
                    "--",
                    "/dev/null",
                    &path,
                ];
            }
            let patch = git(&top_path, g, PREVIEW_BYTES, &args)?;
            if patch.code != Some(0) && !(change.status == "untracked" && patch.code == Some(1)) {
                return Err(err(format!("git diff: {}", patch.stderr)));
            }
            let mut r = GitDiffResult {
                is_repo: true,
                patch: String::from_utf8_lossy(&patch.stdout).into_owned(),
                truncated: patch.truncated,
                change,
                ..Default::default()
            };
            if r.change.binary {
                return Ok(r.value());
            }
            if r.change.status != "untracked" && r.change.status != "added" {
                let orig = r.change.old_path.clone().unwrap_or_else(|| path.clone());
                let spec = format!("{baseline}:{orig}");
                let o = git(&top_path, g, PREVIEW_BYTES, &["show", &spec])?;
                if o.code != Some(0) {
                    return Err(err(format!("git show: {}", o.stderr)));
                }
                r.truncated |= o.truncated;
                r.original_text = Some(String::from_utf8_lossy(&o.stdout).into_owned());
            } else {
                r.original_text = Some(String::new());
            }
            if r.change.status == "deleted" {
                r.modified_text = Some(String::new());
            } else {
                // Read through the workspace root, never following a link out of it.
                let in_ws = top_rel.join(&rel);
                let st = view.ws.lstat(&in_ws).map_err(io_refusal)?;
                match st.kind {
                    Kind::Symlink => {
                        // Review the link itself, never its target.
                        let target = std::fs::read_link(shared.opts.workdir.join(&in_ws))
                            .map_err(|e| err(e.to_string()))?;
                        r.modified_text = Some(target.to_string_lossy().into_owned());
                    }
                    Kind::File => {
                        let v = View {
                            ws: view.ws,
                            prefix: top_rel.clone(),
                            shown: top_path.clone(),
                        };
                        let pv = preview(&v, &rel)?;
                        r.binary_from_preview(pv);
                    }
                    _ => {}
                }
            }
            Ok(r.value())
        }
    }
}

/// Refuses `rel` when it or a directory above it is fenced (the wuu home, the user
/// config file): also a file that no longer exists, reached through its directory.
fn refuse_fenced(ws: &Root, rel: &Path) -> Result<(), Refusal> {
    for a in rel.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        if let Err(e) = ws.lstat(a) {
            if e.is_fenced() {
                return Err(io_refusal(e));
            }
        }
    }
    Ok(())
}

trait FromPreview {
    fn binary_from_preview(&mut self, pv: FileReadResult);
}

impl FromPreview for GitDiffResult {
    fn binary_from_preview(&mut self, pv: FileReadResult) {
        self.modified_text = pv.text;
        self.change.binary = pv.binary;
        self.truncated |= pv.truncated;
    }
}
