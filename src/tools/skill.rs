//! Skills and the model's `load_skill` tool.
//!
//! A skill is a folder with a `SKILL.md` (the name is matched case-insensitively) under
//! the project's `.wuu/skills/` or the user's `$WUU_HOME/skills/`. The file may start with
//! a YAML-style frontmatter block between `---` lines; the keys read are `name`,
//! `description`, `when_to_use` (or `when-to-use`), `argument-hint`, `allowed-tools`
//! (a list or a comma-separated string), `user-invocable`, `disable-model-invocation`
//! and `version` (`-` and `_` are interchangeable). Values are plain, quoted, inline
//! lists (`[a, b]`), `- item` lists, or `|` / `>` blocks. Without a `name` the folder
//! name is used; without a `description`, the first paragraph of the body. A project
//! skill hides a user skill of the same name (Claude Code's layout and precedence, so a
//! `SKILL.md` written for it works unchanged).
//!
//! Limits: 500 folders per root, 256 KiB per `SKILL.md`. Files are read beneath their
//! root (`crate::beneath`: the workspace for project skills, `$WUU_HOME/skills` for user
//! skills), regular files only, never blocking: larger files, FIFOs, and anything that
//! resolves outside its root (a `SKILL.md`, a folder, or `.wuu` / `.wuu/skills` linked
//! out of the workspace) are skipped with a warning on stderr.
//!
//! `load_skill {name, arguments?}` returns the body after the frontmatter, with
//! `${ARGUMENTS}` replaced by `arguments` and `${SKILL_DIR}` (also `${CLAUDE_SKILL_DIR}`)
//! by the skill's folder. `detail`: `{name, source, path, bytes}`.

use super::ToolOutcome;
use crate::beneath::{self, Kind, Root};
use crate::provider::chat::ToolSpec;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The tool's name.
pub const NAME: &str = "load_skill";
/// Folders scanned per root at most.
pub const MAX_SKILLS_PER_ROOT: usize = 500;
/// Largest `SKILL.md` read, in bytes.
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;

/// A discovered skill.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Skill {
    /// Name (frontmatter `name`, else the folder name), without a leading `/`.
    pub name: String,
    /// One-line description.
    pub description: Option<String>,
    /// When the model should use it.
    pub when_to_use: Option<String>,
    /// `project` | `user`.
    pub source: &'static str,
    /// The `SKILL.md` file.
    pub path: PathBuf,
    /// Its folder.
    pub dir: PathBuf,
    /// Help text for arguments.
    pub argument_hint: Option<String>,
    /// Tools the skill expects.
    pub allowed_tools: Vec<String>,
    /// The user may invoke it by name (default true).
    pub user_invocable: bool,
    /// Not offered to the model.
    pub disable_model_invoke: bool,
    /// Version string.
    pub version: Option<String>,
    /// Body after the frontmatter.
    pub body: String,
}

/// The skill roots: the project's `.wuu/skills` (resolved beneath the workspace) and
/// the user's `skills` (the wuu home's `skills` directory, which may itself be a link
/// the user made), each as (the `Root` reads stay beneath, the folder relative to it,
/// the folder's absolute path, source).
fn roots(workspace: &Path, home: &Path) -> Vec<(Root, PathBuf, PathBuf, &'static str)> {
    let mut out = vec![];
    if let Ok(ws) = Root::open(workspace) {
        out.push((
            ws,
            PathBuf::from(".wuu/skills"),
            workspace.join(".wuu").join("skills"),
            "project",
        ));
    }
    let user = home.join("skills");
    if let Ok(r) = Root::open(&user) {
        out.push((r, PathBuf::from("."), user, "user"));
    }
    out
}

/// Discovers the skills of `workspace` (`.wuu/skills/`) and `home` (the wuu home:
/// `skills/`), sorted by name, project first on ties. Every file is read beneath its
/// root ([`Root::read_capped`]): a `SKILL.md`, a skill folder, or the project's
/// `.wuu` / `.wuu/skills` itself that links out of the workspace is skipped with a
/// warning, as are FIFOs, devices and files over [`MAX_SKILL_BYTES`].
pub fn discover(workspace: &Path, home: &Path) -> Vec<Skill> {
    let mut out: Vec<Skill> = vec![];
    for (root, base, shown, source) in roots(workspace, home) {
        for s in scan(&root, &base, &shown, source) {
            if !out.iter().any(|p| p.name == s.name) {
                out.push(s);
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The `SKILL.md` files the roots hold right now, with their metadata (cheap: one
/// directory read per root and one `stat` per skill, all beneath the roots). Changes
/// when a skill is added, removed or edited.
pub fn fingerprint(
    workspace: &Path,
    home: &Path,
) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = vec![];
    for (root, base, shown, _) in roots(workspace, home) {
        for rel in skill_files(&root, &base, &shown, false) {
            let st = root.stat(&rel).ok();
            out.push((
                shown_path(&shown, &base, &rel),
                st.map(|m| m.len).unwrap_or(0),
                st.map(|m| m.modified()),
            ));
        }
    }
    out
}

/// `rel` (relative to the root) as an absolute path under `shown` (the absolute path
/// of `base`).
fn shown_path(shown: &Path, base: &Path, rel: &Path) -> PathBuf {
    shown.join(rel.strip_prefix(base).unwrap_or(rel))
}

/// Whether `rel` is a directory beneath the root (a link is followed beneath it only).
fn is_dir(root: &Root, rel: &Path) -> bool {
    root.stat(rel).is_ok_and(|s| s.kind == Kind::Dir)
}

/// The `SKILL.md` files (relative to the root) of the skill folders under `base`
/// (`warn`: log what is left out).
fn skill_files(root: &Root, base: &Path, shown: &Path, warn: bool) -> Vec<PathBuf> {
    let entries = match root.read_dir(base) {
        Ok(e) => e,
        Err(beneath::Error::Outside) if warn => {
            log::warn!(
                "{}: leads outside its root (a symbolic link out); no skills read from it",
                shown.display()
            );
            return vec![];
        }
        Err(_) => return vec![],
    };
    let mut dirs: Vec<PathBuf> = entries
        .into_iter()
        .filter(|e| matches!(e.kind, Kind::Dir | Kind::Symlink))
        .map(|e| base.join(e.name))
        .filter(|d| is_dir(root, d))
        .collect();
    dirs.sort();
    if dirs.len() > MAX_SKILLS_PER_ROOT {
        if warn {
            log::warn!(
                "{}: more than {MAX_SKILLS_PER_ROOT} skill folders; the rest are ignored",
                shown.display()
            );
        }
        dirs.truncate(MAX_SKILLS_PER_ROOT);
    }
    dirs.iter().filter_map(|d| skill_md(root, d)).collect()
}

fn skill_md(root: &Root, dir: &Path) -> Option<PathBuf> {
    let exact = dir.join("SKILL.md");
    if root.lstat(&exact).is_ok() {
        return Some(exact);
    }
    root.read_dir(dir)
        .ok()?
        .into_iter()
        .find(|e| {
            e.name
                .to_str()
                .is_some_and(|n| n.eq_ignore_ascii_case("SKILL.md"))
        })
        .map(|e| dir.join(e.name))
}

fn scan(root: &Root, base: &Path, shown: &Path, source: &'static str) -> Vec<Skill> {
    let mut out = vec![];
    for rel in skill_files(root, base, shown, true) {
        let file = shown_path(shown, base, &rel);
        let bytes = match root.read_capped(&rel, MAX_SKILL_BYTES) {
            Ok(b) => b,
            Err(beneath::Error::Outside) => {
                log::warn!(
                    "{}: resolves outside {}; skipped",
                    file.display(),
                    shown.display()
                );
                continue;
            }
            Err(e) => {
                log::warn!("{}: not read: {e}; skipped", file.display());
                continue;
            }
        };
        let text = crate::secrets::redact(&String::from_utf8_lossy(&bytes)).into_owned();
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let folder = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut skill = parse(&text, &folder);
        skill.source = source;
        skill.path = file;
        skill.dir = dir;
        if !skill.name.is_empty() {
            out.push(skill);
        }
    }
    out
}

/// Parses a `SKILL.md` (frontmatter and body). `folder` names the skill when the
/// frontmatter does not.
pub fn parse(text: &str, folder: &str) -> Skill {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let mut fields: Vec<(String, Value)> = vec![];
    let mut body_start = 0usize;
    if let Some(first) = lines.next().filter(|l| l.trim_end() == "---") {
        let mut consumed = first.len();
        let mut raw: Vec<&str> = vec![];
        let mut closed = false;
        for line in lines {
            consumed += line.len();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim_end() == "---" {
                closed = true;
                break;
            }
            raw.push(line);
        }
        if closed {
            fields = frontmatter(&raw);
            body_start = consumed.min(text.len());
        }
    }
    let body = text
        .get(body_start..)
        .unwrap_or("")
        .trim_start_matches(['\r', '\n']);
    let get =
        |k: &str| -> Option<&Value> { fields.iter().find(|(key, _)| key == k).map(|(_, v)| v) };
    let text_of = |k: &str| -> Option<String> {
        match get(k)? {
            Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
            Value::Array(a) => Some(
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .filter(|s| !s.is_empty()),
            _ => None,
        }
    };
    let flag = |k: &str, default: bool| -> bool {
        match text_of(k)
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("true" | "yes" | "on") => true,
            Some("false" | "no" | "off") => false,
            _ => default,
        }
    };
    let list = |k: &str| -> Vec<String> {
        match get(k) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            Some(Value::String(s)) => s
                .split([',', ' '])
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => vec![],
        }
    };
    let name = text_of("name")
        .unwrap_or_else(|| folder.to_owned())
        .trim_start_matches('/')
        .trim()
        .chars()
        .take(64)
        .collect::<String>();
    let description = text_of("description").or_else(|| first_paragraph(body));
    Skill {
        name,
        description,
        when_to_use: text_of("when_to_use"),
        source: "project",
        path: PathBuf::new(),
        dir: PathBuf::new(),
        argument_hint: text_of("argument_hint"),
        allowed_tools: list("allowed_tools"),
        user_invocable: flag("user_invocable", true),
        disable_model_invoke: flag("disable_model_invocation", false),
        version: text_of("version"),
        body: body.to_owned(),
    }
}

fn first_paragraph(body: &str) -> Option<String> {
    let para: Vec<&str> = body
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty() || l.starts_with('#'))
        .take_while(|l| !l.is_empty())
        .collect();
    let p = para.join(" ");
    (!p.is_empty()).then(|| p.chars().take(300).collect())
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2
        && ((v.starts_with('"') && v.ends_with('"')) || (v.starts_with('\'') && v.ends_with('\'')))
    {
        let inner = &v[1..v.len() - 1];
        if v.starts_with('"') {
            return inner.replace("\\\"", "\"").replace("\\n", "\n");
        }
        return inner.replace("''", "'");
    }
    v.to_owned()
}

/// Flat YAML subset: `key: value`, inline `[a, b]`, `- item` lists, `|`/`>` blocks.
fn frontmatter(lines: &[&str]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = vec![];
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.trim().is_empty()
            || line.trim_start().starts_with('#')
            || line.starts_with([' ', '\t'])
        {
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let key = k.trim().to_ascii_lowercase().replace('-', "_");
        let v = v.trim();
        let value = if v.starts_with('[') && v.ends_with(']') && v.len() >= 2 {
            Value::Array(
                v[1..v.len() - 1]
                    .split(',')
                    .map(unquote)
                    .filter(|s| !s.is_empty())
                    .map(Value::String)
                    .collect(),
            )
        } else if v == "|" || v == ">" || v == "|-" || v == ">-" {
            let mut block = vec![];
            while i < lines.len()
                && (lines[i].starts_with([' ', '\t']) || lines[i].trim().is_empty())
            {
                block.push(lines[i].trim());
                i += 1;
            }
            let joined = if v.starts_with('|') {
                block.join("\n")
            } else {
                block.join(" ")
            };
            Value::String(joined.trim().to_owned())
        } else if v.is_empty() {
            let mut items = vec![];
            while i < lines.len() {
                let t = lines[i].trim();
                if let Some(item) = t.strip_prefix("- ") {
                    items.push(Value::String(unquote(item)));
                    i += 1;
                } else if t.is_empty() {
                    i += 1;
                } else {
                    break;
                }
            }
            Value::Array(items)
        } else {
            Value::String(unquote(v))
        };
        out.push((key, value));
    }
    out
}

/// The tool spec for the skills the model may load (`disable-model-invocation` ones
/// left out); `None` when there are none. The description lists each skill (at most
/// 100, descriptions cut at 200 characters) so the model knows what it can load.
pub fn spec(skills: &[Skill]) -> Option<ToolSpec> {
    let offered: Vec<&Skill> = skills.iter().filter(|s| !s.disable_model_invoke).collect();
    if offered.is_empty() {
        return None;
    }
    let mut desc = String::from(
        "Load the full instructions of a skill: reusable, task-specific guidance written by \
         the user or the project. Load a skill when its description matches the task, then \
         follow it. Available skills:\n",
    );
    for s in offered.iter().take(100) {
        let about = s
            .description
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        desc.push_str(&format!("- {}: {about}\n", s.name));
    }
    Some(ToolSpec {
        name: NAME.into(),
        description: desc,
        parameters: crate::util::static_json(
            r#"{
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Skill name (a leading `/` is ignored)."},
                "arguments": {"type": "string", "description": "Optional text substituted for ${ARGUMENTS} in the skill."}
            },
            "required": ["name"]
        }"#,
        ),
    })
}

/// Runs `load_skill`: returns the outcome and the skill that was loaded (to count it).
pub fn run(arguments: &str, skills: &[Skill]) -> (ToolOutcome, Option<Skill>) {
    #[derive(serde::Deserialize)]
    struct Args {
        name: String,
        #[serde(default)]
        arguments: Option<String>,
    }
    let args = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    let args: Args = match serde_json::from_str(args) {
        Ok(a) => a,
        Err(e) => {
            return (
                ToolOutcome::error(format!(
                    "invalid arguments for load_skill: {e}; expected {{\"name\": string, \"arguments\"?: string}}"
                )),
                None,
            )
        }
    };
    let wanted = args.name.trim().trim_start_matches('/');
    let offered = || {
        skills
            .iter()
            .filter(|s| !s.disable_model_invoke)
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(skill) = skills
        .iter()
        .find(|s| !s.disable_model_invoke && s.name == wanted)
        .or_else(|| {
            skills
                .iter()
                .find(|s| !s.disable_model_invoke && s.name.eq_ignore_ascii_case(wanted))
        })
    else {
        return (
            ToolOutcome::error(format!(
                "no skill named {wanted:?}; available: {}",
                offered()
            )),
            None,
        );
    };
    let dir = skill.dir.to_string_lossy();
    let body = skill
        .body
        .replace("${ARGUMENTS}", args.arguments.as_deref().unwrap_or(""))
        .replace("${SKILL_DIR}", &dir)
        .replace("${CLAUDE_SKILL_DIR}", &dir);
    let output = format!(
        "Skill `{}` ({} skill, folder {}):\n\n{}",
        skill.name, skill.source, dir, body
    );
    (
        ToolOutcome::ok(
            output,
            json!({
                "name": skill.name,
                "source": skill.source,
                "path": skill.path.to_string_lossy(),
                "bytes": body.len(),
            }),
        ),
        Some(skill.clone()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_and_body() {
        let s = parse(
            "---\nname: review-pr\ndescription: \"Review a pull request\"\nallowed-tools: [bash, read_file]\nwhen-to-use: |\n  When asked to review.\n  Carefully.\ndisable-model-invocation: false\n---\n\n# Review\nDo ${ARGUMENTS}.\n",
            "folder",
        );
        assert_eq!(s.name, "review-pr");
        assert_eq!(s.description.as_deref(), Some("Review a pull request"));
        assert_eq!(s.allowed_tools, vec!["bash", "read_file"]);
        assert_eq!(
            s.when_to_use.as_deref(),
            Some("When asked to review.\nCarefully.")
        );
        assert!(s.user_invocable && !s.disable_model_invoke);
        assert_eq!(s.body, "# Review\nDo ${ARGUMENTS}.\n");
        let bare = parse("# Title\n\nFirst paragraph\nline two.\n\nMore.", "deploy");
        assert_eq!(bare.name, "deploy");
        assert_eq!(
            bare.description.as_deref(),
            Some("First paragraph line two.")
        );
        let unclosed = parse("---\nname: x\nno end", "f");
        assert_eq!(unclosed.name, "f");
    }

    #[test]
    fn load_substitutes_and_refuses_unknown() {
        let mut s = parse("---\nname: a\n---\nrun ${ARGUMENTS} in ${SKILL_DIR}", "a");
        s.dir = PathBuf::from("/skills/a");
        let hidden = Skill {
            name: "h".into(),
            disable_model_invoke: true,
            ..Default::default()
        };
        let skills = vec![s, hidden];
        let (out, used) = run(r#"{"name":"/a","arguments":"tests"}"#, &skills);
        assert!(!out.is_error);
        assert!(
            out.output.contains("run tests in /skills/a"),
            "{}",
            out.output
        );
        assert_eq!(used.unwrap().name, "a");
        let (out, used) = run(r#"{"name":"h"}"#, &skills);
        assert!(out.is_error && used.is_none());
        assert!(out.output.contains("available: a"), "{}", out.output);
        let (out, _) = run("not json", &skills);
        assert!(out.is_error);
        assert!(spec(&skills).unwrap().description.contains("- a:"));
    }
}
