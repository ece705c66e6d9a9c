//! The engine inventory: the catalogue, executable detection and model discovery with
//! its cache (`engines.md` §1.2, §1.3, §2.3).
//!
//! Detection never executes an engine and never checks credentials. Resolution order:
//! `engines.<id>.binary_path`, `WUU_<ID>_BINARY`, the process `PATH`, the desktop
//! install directories, the login-shell `PATH` (probed once per process and only for a
//! GUI-like launch, 3 s limit, stdin detached), then per-engine extra candidates.
//! `engine/list {refresh_models: true}` rescans (the login-shell probe included).

use crate::config::{EngineSettings, EnginesConfig};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wuu_protocol::{EngineInfo, EngineModelInfo, EnginePermissionMode};

/// One catalogue entry.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Engine id.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// `codex` | `claude` | `acp` | `opencode`.
    pub protocol: &'static str,
    /// The executable looked up.
    pub binary: &'static str,
    /// Where to get it.
    pub install_url: Option<&'static str>,
}

/// The catalogue, in `engine/list` order (after `wuu`).
pub const CATALOGUE: &[Entry] = &[
    Entry {
        id: "codex",
        name: "Codex",
        protocol: "codex",
        binary: "codex",
        install_url: None,
    },
    Entry {
        id: "claude",
        name: "Claude Code",
        protocol: "claude",
        binary: "claude",
        install_url: None,
    },
    Entry {
        id: "cursor",
        name: "Cursor",
        protocol: "acp",
        binary: "cursor-agent",
        install_url: Some("https://cursor.com/docs/cli/acp"),
    },
    Entry {
        id: "devin",
        name: "Devin",
        protocol: "acp",
        binary: "devin",
        install_url: Some("https://docs.devin.ai/cli"),
    },
    Entry {
        id: "grok",
        name: "Grok",
        protocol: "acp",
        binary: "grok",
        install_url: Some("https://x.ai/cli"),
    },
    Entry {
        id: "hermes",
        name: "Hermes",
        protocol: "acp",
        binary: "hermes",
        install_url: Some("https://hermes-agent.nousresearch.com/docs/user-guide/features/acp"),
    },
    Entry {
        id: "pi",
        name: "Pi",
        protocol: "acp",
        binary: "pi-acp",
        install_url: Some("https://github.com/svkozak/pi-acp"),
    },
    Entry {
        id: "opencode",
        name: "OpenCode",
        protocol: "opencode",
        binary: "opencode",
        install_url: Some("https://opencode.ai/docs"),
    },
    Entry {
        id: "antigravity",
        name: "Antigravity",
        protocol: "acp",
        binary: "agy_acp_server",
        install_url: Some("https://antigravity.google/docs/ide/extensions"),
    },
];

/// Engines with an adapter in this build (others are listed but cannot run).
pub const ADAPTERS: &[&str] = &[
    super::BUILTIN,
    super::codex::ID,
    super::claude::ID,
    "cursor",
    "devin",
    "grok",
    "hermes",
    "pi",
    super::opencode::ID,
    "antigravity",
];

/// The catalogue entry of `id`.
pub fn entry(id: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.id == id)
}

/// Whether `id` names an engine (`wuu` or a catalogue id).
pub fn known(id: &str) -> bool {
    id == super::BUILTIN || entry(id).is_some()
}

/// The environment detection reads (injectable for tests).
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `$HOME`.
    pub home: Option<PathBuf>,
    /// `$PATH`.
    pub path: Option<String>,
    /// Variables by name (only those detection reads).
    pub vars: HashMap<String, String>,
}

impl Env {
    /// The process environment.
    pub fn current() -> Env {
        let mut vars = HashMap::new();
        for (k, v) in std::env::vars() {
            if k.starts_with("WUU_")
                || matches!(
                    k.as_str(),
                    "XDG_DATA_HOME" | "MISE_DATA_DIR" | "NVM_DIR" | "SHELL" | "CODEX_HOME"
                )
            {
                vars.insert(k, v);
            }
        }
        Env {
            home: std::env::var_os("HOME").map(PathBuf::from),
            path: std::env::var("PATH").ok(),
            vars,
        }
    }

    fn var(&self, k: &str) -> Option<&str> {
        self.vars
            .get(k)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The outcome of detection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Detection {
    /// The resolved path.
    pub path: Option<PathBuf>,
    /// Whether it is a usable executable.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
}

/// Whether `p` is a regular file (after symlinks) with an execute bit set.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn search(dirs: &[PathBuf], bin: &str) -> Option<PathBuf> {
    dirs.iter()
        .filter(|d| d.is_absolute())
        .map(|d| d.join(bin))
        .find(|p| is_executable(p))
}

fn path_dirs(path: Option<&str>) -> Vec<PathBuf> {
    path.map(|p| {
        p.split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect()
    })
    .unwrap_or_default()
}

/// The desktop install directories a Finder/Dock launch does not see, in order.
pub fn install_dirs(env: &Env) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(h) = &env.home {
        for d in [
            ".local/bin",
            "bin",
            ".opencode/bin",
            ".npm-global/bin",
            ".volta/bin",
            ".asdf/shims",
            ".proto/shims",
            ".nix-profile/bin",
            ".mise/shims",
        ] {
            out.push(h.join(d));
        }
        match env.var("XDG_DATA_HOME") {
            Some(x) => out.push(PathBuf::from(x).join("mise/shims")),
            None => out.push(h.join(".local/share/mise/shims")),
        }
    }
    if let Some(m) = env.var("MISE_DATA_DIR") {
        out.push(PathBuf::from(m).join("shims"));
    }
    if let Some(nvm) = nvm_default_bin(env) {
        out.push(nvm);
    }
    for d in [
        "/opt/homebrew/bin",
        "/home/linuxbrew/.linuxbrew/bin",
        "/opt/local/bin",
    ] {
        out.push(PathBuf::from(d));
    }
    out.into_iter().filter(|d| d.is_dir()).collect()
}

/// The bin directory of nvm's default alias (at most 8 alias hops; `lts/*`; a partial
/// version picks the highest installed match).
fn nvm_default_bin(env: &Env) -> Option<PathBuf> {
    let dir = env
        .var("NVM_DIR")
        .map(PathBuf::from)
        .or_else(|| env.home.as_ref().map(|h| h.join(".nvm")))?;
    let mut alias = "default".to_owned();
    for _ in 0..8 {
        let file = dir.join("alias").join(&alias);
        let next = std::fs::read_to_string(&file).ok()?.trim().to_owned();
        if next.is_empty() {
            return None;
        }
        let alias_file = dir.join("alias").join(&next);
        if alias_file.is_file() && next != alias {
            alias = next;
            continue;
        }
        let want = next.trim_start_matches('v');
        let mut versions: Vec<(Vec<u64>, String)> = std::fs::read_dir(dir.join("versions/node"))
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| {
                let v = n.trim_start_matches('v');
                v == want || v.starts_with(&format!("{want}."))
            })
            .map(|n| {
                let parts = n
                    .trim_start_matches('v')
                    .split('.')
                    .filter_map(|p| p.parse().ok())
                    .collect();
                (parts, n)
            })
            .collect();
        versions.sort();
        let (_, best) = versions.pop()?;
        return Some(dir.join("versions/node").join(best).join("bin"));
    }
    None
}

/// Whether the process PATH looks like a GUI launch (no directory under `$HOME`, no
/// Homebrew/Linuxbrew/MacPorts root).
fn gui_launch(env: &Env) -> bool {
    let dirs = path_dirs(env.path.as_deref());
    let home = env.home.clone();
    !dirs.iter().any(|d| {
        home.as_ref().is_some_and(|h| d.starts_with(h))
            || d.starts_with("/opt/homebrew")
            || d.starts_with("/home/linuxbrew")
            || d.starts_with("/opt/local")
    })
}

fn login_shell_cache() -> &'static Mutex<Option<Vec<PathBuf>>> {
    static C: OnceLock<Mutex<Option<Vec<PathBuf>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(None))
}

/// Forgets the login-shell PATH probe (an explicit refresh probes again).
pub fn rescan() {
    *login_shell_cache().lock() = None;
}

/// The login-shell PATH, probed once per process (3 s, stdin detached, stderr
/// discarded, cwd = home, own process group killed on timeout; last 256 KiB parsed).
fn login_shell_path(env: &Env) -> Vec<PathBuf> {
    if let Some(c) = login_shell_cache().lock().clone() {
        return c;
    }
    let dirs = probe_login_shell(env).unwrap_or_default();
    *login_shell_cache().lock() = Some(dirs.clone());
    dirs
}

fn probe_login_shell(env: &Env) -> Option<Vec<PathBuf>> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let shell = env
        .var("SHELL")
        .map(PathBuf::from)
        .filter(|s| s.is_absolute() && s.exists())
        .or_else(|| {
            ["/bin/bash", "/bin/sh"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
        })?;
    let name = shell.file_name()?.to_string_lossy().into_owned();
    let mut cmd = std::process::Command::new(&shell);
    match name.as_str() {
        "csh" | "tcsh" | "nu" => return None,
        "fish" => {
            cmd.args([
                "-l",
                "-c",
                "echo __WUU_PATH_START__; string join : $PATH; echo __WUU_PATH_END__",
            ]);
        }
        _ => {
            cmd.args([
                "-i",
                "-l",
                "-c",
                "echo __WUU_PATH_START__; echo \"$PATH\"; echo __WUU_PATH_END__",
            ]);
        }
    }
    if let Some(h) = &env.home {
        cmd.current_dir(h);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().ok()?;
    let mut out = child.stdout.take()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let buf = match rx.recv_timeout(Duration::from_secs(3)) {
        Ok(b) => b,
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            return None;
        }
    };
    let _ = child.wait();
    let tail = &buf[buf.len().saturating_sub(256 * 1024)..];
    let text = String::from_utf8_lossy(tail);
    let start = text.rfind("__WUU_PATH_START__")?;
    let rest = &text[start + "__WUU_PATH_START__".len()..];
    let end = rest.find("__WUU_PATH_END__")?;
    Some(path_dirs(Some(rest[..end].trim())))
}

fn extra_candidates(id: &str, bin: &str, env: &Env) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(h) = &env.home {
        let rel: &[&str] = match id {
            "grok" => &[".local/bin/grok", ".grok/bin/grok", ".npm-global/bin/grok"],
            "hermes" => &[".local/bin/hermes", ".hermes/bin/hermes"],
            "devin" => &[".local/bin/devin"],
            "pi" => &[".local/bin/pi-acp", ".npm-global/bin/pi-acp"],
            _ => &[],
        };
        out.extend(rel.iter().map(|r| h.join(r)));
    }
    if matches!(id, "grok" | "hermes" | "devin" | "pi") {
        out.push(PathBuf::from("/opt/homebrew/bin").join(bin));
        out.push(PathBuf::from("/usr/local/bin").join(bin));
    }
    out
}

fn not_found(e: &Entry) -> String {
    match e.id {
        "codex" => "codex binary not found: set WUU_CODEX_BINARY or install the codex CLI on PATH"
            .to_owned(),
        "claude" => "claude binary not found: set WUU_CLAUDE_BINARY or install Claude Code on PATH"
            .to_owned(),
        _ => format!(
            "{} executable {:?} not found; install it or configure its executable path ({})",
            e.name,
            e.binary,
            e.install_url.unwrap_or("")
        ),
    }
}

/// Resolves an explicit override (settings or environment): a path as given; a bare
/// name through `PATH`. Never silently another executable.
fn explicit(value: &str, env: &Env) -> Detection {
    let v = value.trim();
    let p = PathBuf::from(v);
    let resolved = if v.contains('/') {
        Some(p)
    } else {
        search(&path_dirs(env.path.as_deref()), v)
    };
    check(resolved, v)
}

fn check(path: Option<PathBuf>, asked: &str) -> Detection {
    let Some(p) = path else {
        return Detection {
            path: None,
            ok: false,
            error: Some(format!("binary not found at {asked}")),
        };
    };
    let error = if !p.is_absolute() {
        Some(format!("binary path is not absolute: {}", p.display()))
    } else if !p.exists() || p.is_dir() || !is_executable(&p) {
        Some(format!("binary not found at {}", p.display()))
    } else {
        None
    };
    Detection {
        ok: error.is_none(),
        path: Some(p),
        error,
    }
}

/// Detects the executable of catalogue engine `e` (spec §1.3 order).
pub fn detect(e: &Entry, settings: Option<&EngineSettings>, env: &Env) -> Detection {
    if let Some(b) = settings
        .and_then(|s| s.binary_path.as_deref())
        .filter(|b| !b.trim().is_empty())
    {
        return explicit(b, env);
    }
    let var = format!("WUU_{}_BINARY", e.id.to_uppercase());
    if let Some(b) = env.var(&var) {
        return explicit(b, env);
    }
    if let Some(p) = search(&path_dirs(env.path.as_deref()), e.binary) {
        return check(Some(p), e.binary);
    }
    if let Some(p) = search(&install_dirs(env), e.binary) {
        return check(Some(p), e.binary);
    }
    if gui_launch(env) {
        if let Some(p) = search(&login_shell_path(env), e.binary) {
            return check(Some(p), e.binary);
        }
    }
    let mut extra = extra_candidates(e.id, e.binary, env);
    if e.id == "antigravity" {
        extra.extend(
            path_dirs(env.path.as_deref())
                .into_iter()
                .map(|d| d.join("agy_acp_server.par")),
        );
    }
    if let Some(p) = extra.into_iter().find(|p| is_executable(p)) {
        return check(Some(p), e.binary);
    }
    Detection {
        path: None,
        ok: false,
        error: Some(not_found(e)),
    }
}

/// Whether engine `id` is available for new conversations: it has an adapter, its
/// executable was detected, and the user did not opt out.
pub fn available(id: &str, engines: Option<&EnginesConfig>, env: &Env) -> Result<PathBuf, String> {
    let Some(e) = entry(id) else {
        return Err(format!("engine {id:?} is not known"));
    };
    let settings = engines.and_then(|c| c.settings(id));
    if settings.and_then(|s| s.enabled) == Some(false) {
        return Err(format!(
            "engine {id:?} is disabled (enable it with engine/update, or choose another engine)"
        ));
    }
    if !ADAPTERS.contains(&id) {
        return Err(format!(
            "engine {id:?} ({}) has no adapter in this build yet; choose another engine",
            e.name
        ));
    }
    let d = detect(e, settings, env);
    match (d.ok, d.path) {
        (true, Some(p)) => Ok(p),
        _ => Err(format!(
            "engine {id:?} is not available: {}",
            d.error.unwrap_or_else(|| "no binary path resolved".into())
        )),
    }
}

/// A discovery result kept per engine id.
#[derive(Debug, Clone)]
struct Cached {
    key: String,
    status: String,
    models: Vec<EngineModelInfo>,
    error: Option<String>,
    at: Instant,
}

/// One engine's cache slot; holding its lock is the one-slot discovery gate.
type Slot = Arc<Mutex<Option<Cached>>>;

fn cache() -> &'static Mutex<HashMap<String, Slot>> {
    static C: OnceLock<Mutex<HashMap<String, Slot>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Drops every cached discovery (a sign-in changes what an engine offers).
pub fn forget_discoveries() {
    cache().lock().clear();
}

/// The discovery cache key: engine, binary, root, the sorted process environment and
/// size/mtime/mode of the engine's config and credential files (contents never read).
pub fn cache_key(id: &str, binary: &Path, root: &Path, env: &Env) -> String {
    let mut h = Sha256::new();
    for part in [
        id.as_bytes(),
        binary.as_os_str().as_encoded_bytes(),
        root.as_os_str().as_encoded_bytes(),
    ] {
        h.update(part);
        h.update([0]);
    }
    let mut vars: Vec<(String, String)> = std::env::vars().collect();
    vars.sort();
    for (k, v) in vars {
        h.update(k.as_bytes());
        h.update(b"=");
        h.update(v.as_bytes());
        h.update([0]);
    }
    let mut files = vec![];
    if id == super::codex::ID {
        let home = env
            .var("CODEX_HOME")
            .map(PathBuf::from)
            .or_else(|| env.home.as_ref().map(|h| h.join(".codex")));
        if let Some(c) = home {
            files.push(c.join("config.toml"));
            files.push(c.join("auth.json"));
        }
        for a in root.ancestors() {
            files.push(a.join(".codex/config.toml"));
        }
    }
    for f in files {
        h.update(f.as_os_str().as_encoded_bytes());
        if let Ok(m) = std::fs::metadata(&f) {
            use std::os::unix::fs::MetadataExt;
            h.update(
                format!("{}:{}:{}:{}", m.size(), m.mtime(), m.mtime_nsec(), m.mode()).as_bytes(),
            );
        }
        h.update([0]);
    }
    format!("{:x}", h.finalize())
}

/// Model discovery of engine `id` through `probe`, cached: fresh for 2 min after a
/// success (5 s after a failure) unless `refresh`; a different key wipes the entry; a
/// result completed after this request began is reused. A probe answering `Ok(None)`
/// found no model catalogue (`unsupported`). Returns `(status, models, error)`.
pub fn discover(
    id: &str,
    key: String,
    refresh: bool,
    probe: impl FnOnce() -> Result<Option<Vec<EngineModelInfo>>, String>,
    rekey: impl FnOnce() -> String,
) -> (String, Vec<EngineModelInfo>, Option<String>) {
    let began = Instant::now();
    let slot = cache()
        .lock()
        .entry(id.to_owned())
        .or_insert_with(|| Arc::new(Mutex::new(None)))
        .clone();
    let mut gate = slot.lock();
    if gate.as_ref().is_some_and(|c| c.key != key) {
        *gate = None;
    }
    if let Some(c) = gate.as_ref() {
        let ttl = if c.error.is_none() {
            Duration::from_secs(120)
        } else {
            Duration::from_secs(5)
        };
        if c.at >= began || (!refresh && c.at.elapsed() < ttl) {
            return (c.status.clone(), c.models.clone(), c.error.clone());
        }
    }
    let previous = gate.clone();
    let result = probe();
    if rekey() != key {
        return (
            "error".into(),
            vec![],
            Some("engine configuration changed during model discovery; refresh to retry".into()),
        );
    }
    let entry = match result {
        Ok(None) => Cached {
            key,
            status: "unsupported".into(),
            models: vec![],
            error: None,
            at: Instant::now(),
        },
        Ok(Some(models)) => Cached {
            key,
            status: if models.is_empty() { "empty" } else { "ready" }.into(),
            models,
            error: None,
            at: Instant::now(),
        },
        Err(e) => {
            match previous.filter(|p| matches!(p.status.as_str(), "ready" | "empty" | "stale")) {
                Some(p) => Cached {
                    key,
                    status: "stale".into(),
                    models: p.models,
                    error: Some(e),
                    at: Instant::now(),
                },
                None => Cached {
                    key,
                    status: "error".into(),
                    models: vec![],
                    error: Some(e),
                    at: Instant::now(),
                },
            }
        }
    };
    *gate = Some(entry.clone());
    (entry.status, entry.models, entry.error)
}

/// The `engine/list` entry of `wuu`.
pub fn builtin_info() -> EngineInfo {
    EngineInfo {
        id: super::BUILTIN.into(),
        version: Some("1".into()),
        enabled: true,
        binary_ok: true,
        ..Default::default()
    }
}

/// The descriptor part of a catalogue engine's `engine/list` entry (no discovery).
pub fn describe(e: &Entry, engines: Option<&EnginesConfig>, env: &Env) -> (EngineInfo, Detection) {
    let settings = engines.and_then(|c| c.settings(e.id));
    let d = detect(e, settings, env);
    let disabled = settings.and_then(|s| s.enabled) == Some(false);
    let registered = d.ok && ADAPTERS.contains(&e.id) && !disabled;
    // A detected binary that is still not enabled says why: the user's choice first
    // (it holds whatever the build can do), then a missing adapter.
    let error = if !d.ok {
        d.error.clone()
    } else if disabled {
        Some(format!(
            "{} is disabled in settings (engines.{}.enabled is false)",
            e.name, e.id
        ))
    } else if !ADAPTERS.contains(&e.id) {
        Some(format!("{} has no adapter in this build yet", e.name))
    } else {
        None
    };
    let mut info = EngineInfo {
        id: e.id.into(),
        display_name: Some(e.name.into()),
        protocol: Some(e.protocol.into()),
        install_url: e.install_url.map(str::to_owned),
        enabled: registered,
        binary_path: d.path.as_ref().map(|p| p.to_string_lossy().into_owned()),
        binary_ok: d.ok,
        error,
        ..Default::default()
    };
    if registered {
        info.version = Some("1".into());
        info.capabilities = Some(match e.id {
            "codex" => vec![
                "native-tool-loop".into(),
                "native-session-resume".into(),
                "approval-requests".into(),
                "account-quota".into(),
                "native-steer".into(),
            ],
            // Claude Code: permission prompts and its questions reach the user through
            // `user-question/*`; steers wait for the next turn.
            "claude" => vec![
                "native-tool-loop".into(),
                "native-session-resume".into(),
                "user-questions".into(),
                "account-quota".into(),
                "queued-steer".into(),
            ],
            // OpenCode: its permission requests reach the user through
            // `user-question/*`; steers wait for the next turn.
            "opencode" => vec![
                "native-tool-loop".into(),
                "native-session-resume".into(),
                "user-questions".into(),
                "queued-steer".into(),
                "opencode".into(),
            ],
            _ if e.protocol == "acp" => vec![
                "native-tool-loop".into(),
                "native-session-resume".into(),
                "interactive-approval".into(),
                "acp".into(),
            ],
            _ => vec!["native-tool-loop".into(), "native-session-resume".into()],
        });
    }
    if matches!(e.protocol, "acp" | "opencode") {
        info.permission_modes = Some(vec![
            EnginePermissionMode {
                mode: "standard".into(),
                ..Default::default()
            },
            EnginePermissionMode {
                mode: "unconfined".into(),
                ..Default::default()
            },
        ]);
    }
    (info, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(dir: &Path, name: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn detection_order_settings_env_path_install_dirs() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let local = home.join(".local/bin");
        let on_path = t.path().join("path");
        let other = t.path().join("other");
        for d in [&local, &on_path, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let e = entry("codex").unwrap();
        let in_local = exe(&local, "codex");
        let mut env = Env {
            home: Some(home.clone()),
            path: Some(format!("{}:/usr/bin", home.join("nothing").display())),
            vars: HashMap::new(),
        };
        // Install dirs only.
        assert_eq!(detect(e, None, &env).path, Some(in_local.clone()));
        // PATH wins over install dirs.
        let in_path = exe(&on_path, "codex");
        env.path = Some(format!(
            "{}:{}",
            on_path.display(),
            home.join("x").display()
        ));
        assert_eq!(detect(e, None, &env).path, Some(in_path.clone()));
        // The environment override wins over PATH.
        let in_other = exe(&other, "codex-custom");
        env.vars
            .insert("WUU_CODEX_BINARY".into(), in_other.to_string_lossy().into());
        assert_eq!(detect(e, None, &env).path, Some(in_other.clone()));
        // Settings win over everything; an invalid override is an error, never another
        // executable.
        let s = EngineSettings {
            enabled: None,
            binary_path: Some("/nope/codex".into()),
        };
        let d = detect(e, Some(&s), &env);
        assert!(!d.ok);
        assert_eq!(d.error.as_deref(), Some("binary not found at /nope/codex"));
        assert_eq!(d.path, Some(PathBuf::from("/nope/codex")));
    }

    #[test]
    fn missing_catalogue_engine_names_its_install_url() {
        let env = Env {
            home: None,
            path: Some("/nonexistent".into()),
            vars: HashMap::new(),
        };
        let (info, _) = describe(entry("devin").unwrap(), None, &env);
        assert!(!info.binary_ok && !info.enabled);
        assert_eq!(
            info.error.as_deref(),
            Some("Devin executable \"devin\" not found; install it or configure its executable path (https://docs.devin.ai/cli)")
        );
        assert_eq!(info.permission_modes.as_ref().map(Vec::len), Some(2));
        assert!(info.version.is_none() && info.capabilities.is_none());
    }

    #[test]
    fn discovery_cache_serves_fresh_results_and_keeps_stale_lists() {
        let id = "test-engine-cache";
        let ok = || {
            Ok(Some(vec![EngineModelInfo {
                id: "m".into(),
                ..Default::default()
            }]))
        };
        let (s, m, _) = discover(id, "k".into(), false, ok, || "k".into());
        assert_eq!((s.as_str(), m.len()), ("ready", 1));
        // Fresh: the probe is not run.
        let (s, _, _) = discover(id, "k".into(), false, || panic!("probed"), || "k".into());
        assert_eq!(s, "ready");
        // Refresh that fails: the old list, stale, with the error.
        let (s, m, e) = discover(id, "k".into(), true, || Err("down".into()), || "k".into());
        assert_eq!(
            (s.as_str(), m.len(), e.as_deref()),
            ("stale", 1, Some("down"))
        );
        // A new key wipes the entry: a failure is now an error.
        let (s, m, _) = discover(
            id,
            "k2".into(),
            false,
            || Err("down".into()),
            || "k2".into(),
        );
        assert_eq!((s.as_str(), m.len()), ("error", 0));
        // No catalogue: unsupported, without an error.
        let (s, m, e) = discover(id, "k3".into(), false, || Ok(None), || "k3".into());
        assert_eq!((s.as_str(), m.len(), e), ("unsupported", 0, None));
    }
}
