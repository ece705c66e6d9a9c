//! Command line of `wuu exec` (spec `exec.md` §2): flags, subcommands, Go-style
//! durations, attachments.
//!
//! Everything here runs before any JSONL is written: a problem is an [`InvalidInput`]
//! (exit 2, one line on stderr, nothing on stdout).

use base64::Engine as _;
use lexopt::prelude::*;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Usage text of `wuu exec -h` (printed on stdout, exit 0).
pub const HELP: &str = "wuu exec — run one task non-interactively (scripts, CI)

Usage:
  wuu exec [OPTIONS] [PROMPT]                 new conversation
  wuu exec resume [OPTIONS] (ID | --last) [PROMPT]
  wuu exec fork [OPTIONS] ID [PROMPT]         (also: wuu exec --fork ID [PROMPT])
  wuu exec -c|--continue [OPTIONS] [PROMPT]   same as `resume --last`

The prompt is the positional text; when it is `-` or absent and stdin is not a
terminal, it is read from stdin. Options may come anywhere, also after the id or
the prompt; after `--` everything is prompt text.

Options:
      --json                    JSONL event stream on stdout (one object per line,
                                `result` last); progress otherwise goes to stderr
  -q, --quiet                   (without --json) stderr shows only errors; stdout
                                still gets the final message
      --color WHEN              auto | always | never: colour and the live status
                                line on stderr (auto: on a terminal, unless NO_COLOR
                                is set)
      --provider NAME           provider id from the configuration
      --engine ID               engine of a new conversation (wuu, codex, claude;
                                default: engines.default_engine)
      --model ID                model
      --permission-mode MODE    standard | read_only | unconfined
  -C, --cd DIR                  workspace root (alias --workdir; default: cwd)
      --config FILE             use exactly this config file
      --ignore-user-config      ignore $WUU_HOME/config.json (defaults + project layers)
      --safe-mode               start no MCP server
      --ephemeral               in-memory conversation (never stored)
      --output-schema FILE      JSON Schema the final answer must match
      --output-last-message FILE
                                write the final message here after success
                                (relative to the process cwd)
      --timeout DURATION        overall deadline, Go syntax: 1h30m, 1.5s, 500ms
      --max-turns N             turn budget of the run (0 = default)
      --image FILE              attach an image (repeatable)
      --file FILE               attach a file (repeatable)
      --last                    (resume) the most recent conversation of the workspace
      --fork ID                 fork conversation ID and run the prompt on the copy
  -h, --help                    this help

Exit codes: 0 completed, 1 failed, 2 invalid input, 3 permission denied, 4 timeout,
5 interrupted (SIGINT/SIGTERM; a second signal exits 5 at once), 6 protocol failure
(including event overflow), 7 provider/model error, 8 tool/local failure,
9 conversation busy.
";

/// Invalid command-line input: exit 2 with this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidInput(pub String);

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lexopt::Error> for InvalidInput {
    fn from(e: lexopt::Error) -> Self {
        InvalidInput(e.to_string())
    }
}

/// How the conversation is acquired (spec §2.7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// `thread/start`.
    #[default]
    Start,
    /// `thread/resume` of this id, or of the most recent conversation when `None`.
    Resume(Option<String>),
    /// `thread/fork` of this id.
    Fork(String),
}

/// `--color`: when stderr progress is styled (and, on a terminal, live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` (or `CLICOLOR=0`, `TERM=dumb`) says otherwise.
    #[default]
    Auto,
    /// Always styled (also into a pipe or file).
    Always,
    /// Never styled: plain lines only.
    Never,
}

/// Parsed options of one invocation.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Start, resume or fork.
    pub mode: Mode,
    /// `--json`.
    pub json: bool,
    /// `--quiet`: progress on stderr is off (errors and the final message stay).
    pub quiet: bool,
    /// `--color`.
    pub color: ColorWhen,
    /// `--provider`.
    pub provider: Option<String>,
    /// `--model`.
    pub model: Option<String>,
    /// `--engine` (new conversations).
    pub engine: Option<String>,
    /// `--permission-mode` (validated).
    pub permission_mode: Option<String>,
    /// `--cd` / `--workdir` (as given; resolved later).
    pub workdir: Option<PathBuf>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--ignore-user-config`.
    pub ignore_user_config: bool,
    /// `--safe-mode`: start no MCP server.
    pub safe_mode: bool,
    /// `--ephemeral`.
    pub ephemeral: bool,
    /// `--output-schema` (relative to the workdir).
    pub output_schema: Option<PathBuf>,
    /// `--output-last-message` (relative to the process cwd).
    pub output_last_message: Option<PathBuf>,
    /// `--timeout`; `None` = no deadline (0 and negative values too).
    pub timeout: Option<Duration>,
    /// `--max-turns` (0 = server default).
    pub max_turns: u32,
    /// `--image` paths, in order.
    pub images: Vec<PathBuf>,
    /// `--file` paths, in order.
    pub files: Vec<PathBuf>,
    /// Positional words (the prompt, or `-`).
    pub prompt_args: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// `-h` / `--help`.
    Help,
    /// A run.
    Run(Box<Options>),
}

/// Permission modes accepted by `--permission-mode`.
pub const PERMISSION_MODES: &[&str] = &["standard", "read_only", "unconfined"];

/// Parses the arguments after `exec`. Options may appear anywhere, before, between or
/// after the id and the prompt words (`wuu exec resume ID --json PROMPT`), as in the
/// command lines users know; `--` ends the options, and everything after it is prompt
/// text. A subcommand word (`resume`, `fork`) must come first. Errors: unknown options,
/// bad values, misplaced subcommand words ([`InvalidInput`]).
pub fn parse(args: Vec<OsString>) -> Result<Command, InvalidInput> {
    let mut args = args;
    let mut o = Options::default();
    let mut fork_flag: Option<String> = None;
    let (subcommand, mut last) = take_subcommand(&mut args);
    // Everything after `--` is prompt text, even a subcommand word.
    let before_dashdash: Vec<OsString> = args.iter().take_while(|a| *a != "--").cloned().collect();
    let mut p = lexopt::Parser::from_args(args);
    let mut positional: Vec<String> = vec![];
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help),
            Long("json") => o.json = bool_flag(&mut p, "json")?,
            Short('q') | Long("quiet") => o.quiet = bool_flag(&mut p, "quiet")?,
            Long("color") | Long("colour") => o.color = color_arg(&mut p)?,
            Long("ephemeral") => o.ephemeral = bool_flag(&mut p, "ephemeral")?,
            Long("safe-mode") => o.safe_mode = bool_flag(&mut p, "safe-mode")?,
            Long("ignore-user-config") => {
                o.ignore_user_config = bool_flag(&mut p, "ignore-user-config")?
            }
            Long("last") => {
                if subcommand.as_deref() != Some("resume") {
                    return Err(InvalidInput("--last is only valid with `resume`".into()));
                }
                last = bool_flag(&mut p, "last")?;
            }
            Long("provider") => o.provider = Some(nonempty(&mut p, "provider")?),
            Long("model") => o.model = Some(nonempty(&mut p, "model")?),
            Long("engine") => o.engine = Some(nonempty(&mut p, "engine")?),
            Long("permission-mode") => {
                if let Some(m) = permission_mode_arg(&mut p)? {
                    o.permission_mode = Some(m);
                }
            }
            Short('C') | Long("cd") | Long("workdir") => {
                o.workdir = Some(path(&mut p, "cd")?);
            }
            Long("config") => o.config = Some(path(&mut p, "config")?),
            Long("output-schema") => o.output_schema = Some(path(&mut p, "output-schema")?),
            Long("output-last-message") => {
                o.output_last_message = Some(path(&mut p, "output-last-message")?)
            }
            Long("timeout") => o.timeout = timeout_arg(&mut p)?,
            Long("max-turns") => o.max_turns = max_turns_arg(&mut p)?,
            Long("image") => o.images.push(path(&mut p, "image")?),
            Long("file") => o.files.push(path(&mut p, "file")?),
            Long("fork") => fork_flag = Some(nonempty(&mut p, "fork")?),
            Value(v) => {
                let word = os_string(v)?;
                if positional.is_empty()
                    && subcommand.is_none()
                    && SUBCOMMANDS.contains(&word.as_str())
                    && before_dashdash.iter().any(|a| *a == *word)
                {
                    return Err(misplaced_subcommand(&word));
                }
                positional.push(word);
            }
            Long(name) if !positional.is_empty() => {
                return Err(InvalidInput(format!(
                    "unknown option --{name} (to pass it as prompt text, put `--` before the prompt: wuu exec [OPTIONS] -- PROMPT)"
                )))
            }
            Short(c) if !positional.is_empty() => {
                return Err(InvalidInput(format!(
                    "unknown option -{c} (to pass it as prompt text, put `--` before the prompt: wuu exec [OPTIONS] -- PROMPT)"
                )))
            }
            other => return Err(other.unexpected().into()),
        }
    }
    o.mode = run_mode(subcommand.as_deref(), fork_flag, last, &mut positional)?;
    for f in o.images.iter().chain(&o.files) {
        if f.as_os_str().is_empty() {
            return Err(InvalidInput("--image/--file need a path".into()));
        }
    }
    o.prompt_args = positional;
    Ok(Command::Run(Box::new(o)))
}

/// Takes a leading subcommand word off `args`: (`resume`/`fork`, `--last` implied by `-c`).
fn take_subcommand(args: &mut Vec<OsString>) -> (Option<String>, bool) {
    let sub = args.first().and_then(|a| a.to_str()).map(str::to_owned);
    match sub.as_deref() {
        Some("resume") | Some("fork") => {
            args.remove(0);
            (sub, false)
        }
        Some("-c") | Some("--continue") => {
            args.remove(0);
            (Some("resume".to_owned()), true)
        }
        _ => (None, false),
    }
}

/// The value of `--color`: `auto`, `always` or `never`.
fn color_arg(p: &mut lexopt::Parser) -> Result<ColorWhen, InvalidInput> {
    let v = string(p, "color")?;
    match v.trim() {
        "auto" => Ok(ColorWhen::Auto),
        "always" => Ok(ColorWhen::Always),
        "never" => Ok(ColorWhen::Never),
        _ => Err(InvalidInput(format!(
            "invalid --color {v:?} (expected auto, always or never)"
        ))),
    }
}

/// The value of `--permission-mode`, checked against [`PERMISSION_MODES`] (`None`: empty).
fn permission_mode_arg(p: &mut lexopt::Parser) -> Result<Option<String>, InvalidInput> {
    let m = string(p, "permission-mode")?.trim().to_owned();
    if m.is_empty() {
        return Ok(None);
    }
    if !PERMISSION_MODES.contains(&m.as_str()) {
        return Err(InvalidInput(format!(
            "invalid --permission-mode {m:?} (expected standard, read_only or unconfined)"
        )));
    }
    Ok(Some(m))
}

/// The value of `--timeout` as a Go duration; `None` (no deadline) for zero or negative.
fn timeout_arg(p: &mut lexopt::Parser) -> Result<Option<Duration>, InvalidInput> {
    let v = string(p, "timeout")?;
    let d =
        parse_duration(&v).map_err(|e| InvalidInput(format!("invalid --timeout {v:?}: {e}")))?;
    Ok(d.filter(|d| !d.is_zero()))
}

/// The value of `--max-turns`: a non-negative integer that fits a `u32`.
fn max_turns_arg(p: &mut lexopt::Parser) -> Result<u32, InvalidInput> {
    let v = string(p, "max-turns")?;
    let n: i64 = v
        .trim()
        .parse()
        .map_err(|_| InvalidInput(format!("invalid --max-turns {v:?}: not an integer")))?;
    if n < 0 {
        return Err(InvalidInput("--max-turns must not be negative".into()));
    }
    u32::try_from(n).map_err(|_| InvalidInput(format!("--max-turns {n} is too large")))
}

/// The error for a subcommand word given after options: it must come first (`review`: not yet).
fn misplaced_subcommand(word: &str) -> InvalidInput {
    InvalidInput(if word == "review" {
        "`wuu exec review` is not implemented yet; to ask for a review, quote the prompt: wuu exec \"review …\"".into()
    } else {
        format!(
            "`{word}` is a subcommand and must come first: wuu exec {word} [OPTIONS] … (to start a prompt with the word, quote it or put `--` before it)"
        )
    })
}

/// How the run gets its thread (start, resume or fork); takes the id word off `positional`.
fn run_mode(
    subcommand: Option<&str>,
    fork_flag: Option<String>,
    last: bool,
    positional: &mut Vec<String>,
) -> Result<Mode, InvalidInput> {
    Ok(match (subcommand, fork_flag) {
        (Some(_), Some(_)) => {
            return Err(InvalidInput(
                "--fork cannot be combined with `resume` or `fork`".into(),
            ))
        }
        (None, Some(id)) => Mode::Fork(id),
        (Some("resume"), None) if last => Mode::Resume(None),
        (Some("resume"), None) => {
            if positional.is_empty() {
                return Err(InvalidInput(
                    "resume needs a conversation id or --last".into(),
                ));
            }
            let id = positional.remove(0).trim().to_owned();
            if id.is_empty() {
                return Err(InvalidInput("resume: the conversation id is empty".into()));
            }
            Mode::Resume(Some(id))
        }
        (Some("fork"), None) => {
            if positional.is_empty() {
                return Err(InvalidInput("fork needs a conversation id".into()));
            }
            let id = positional.remove(0).trim().to_owned();
            if id.is_empty() {
                return Err(InvalidInput("fork: the conversation id is empty".into()));
            }
            Mode::Fork(id)
        }
        _ => Mode::Start,
    })
}

/// Words that name a `wuu exec` subcommand (`review` is reserved: not implemented yet).
/// As the first prompt word after options they are a usage error, never a prompt.
const SUBCOMMANDS: &[&str] = &["resume", "fork", "review"];

fn os_string(v: OsString) -> Result<String, InvalidInput> {
    v.into_string()
        .map_err(|v| InvalidInput(format!("argument {v:?} is not valid UTF-8")))
}

fn string(p: &mut lexopt::Parser, name: &str) -> Result<String, InvalidInput> {
    let v = p
        .value()
        .map_err(|_| InvalidInput(format!("--{name} needs a value")))?;
    os_string(v)
}

fn nonempty(p: &mut lexopt::Parser, name: &str) -> Result<String, InvalidInput> {
    let v = string(p, name)?.trim().to_owned();
    if v.is_empty() {
        return Err(InvalidInput(format!("--{name} needs a non-empty value")));
    }
    Ok(v)
}

fn path(p: &mut lexopt::Parser, name: &str) -> Result<PathBuf, InvalidInput> {
    let v = p
        .value()
        .map_err(|_| InvalidInput(format!("--{name} needs a value")))?;
    if v.is_empty() {
        return Err(InvalidInput(format!("--{name} needs a non-empty path")));
    }
    Ok(PathBuf::from(v))
}

/// A boolean flag: bare (`--json`) is true; `--json=false` / `--json=true` explicit.
fn bool_flag(p: &mut lexopt::Parser, name: &str) -> Result<bool, InvalidInput> {
    match p.optional_value() {
        None => Ok(true),
        Some(v) => match v.to_str().unwrap_or("") {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
            other => Err(InvalidInput(format!(
                "invalid boolean value {other:?} for --{name}"
            ))),
        },
    }
}

/// Parses a Go duration (`300ms`, `1.5s`, `1h30m`, `-2s`, `0`). Units: `ns`, `us`/`µs`,
/// `ms`, `s`, `m`, `h`. Returns `None` for zero or negative durations (no deadline).
/// Errors name the problem.
pub fn parse_duration(text: &str) -> Result<Option<Duration>, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let (neg, mut rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(None);
    }
    if rest.is_empty() {
        return Err("missing number".into());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let num = &rest[..num_end];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(format!("bad number in {text:?}"));
        }
        let value: f64 = num.parse().map_err(|_| format!("bad number {num:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("missing unit in {text:?}")),
            u => return Err(format!("unknown unit {u:?}")),
        };
        total += value * scale;
    }
    if neg || total <= 0.0 {
        return Ok(None);
    }
    if !total.is_finite() || total > 1e12 {
        return Err("duration too large".into());
    }
    Ok(Some(Duration::from_secs_f64(total)))
}

/// Media type of an image by file extension.
pub fn image_media_type(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "bmp" => "image/bmp",
        "tif" | "tiff" => "image/tiff",
        "heic" => "image/heic",
        _ => return None,
    })
}

/// Media type of a document by file extension (`application/octet-stream` when
/// unknown; the server decides what it accepts).
pub fn file_media_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "pdf" => "application/pdf",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "mov" => "video/quicktime",
        "mpeg" | "mpg" => "video/mpeg",
        "txt" | "md" => "text/plain",
        "json" => "application/json",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        _ => "application/octet-stream",
    }
}

/// Largest file `--image` / `--file` attach, in bytes (its base64 stays under the
/// server's 64 MiB line limit).
pub const MAX_ATTACHMENT_BYTES: u64 = 32 * 1024 * 1024;

/// Reads one attachment (relative paths: relative to `base`; exec passes the process
/// working directory, like every other path option) into its wire shape
/// `{media_type, data(base64), filename?}` (spec §2.5). Errors: missing, a directory,
/// not a regular file (a FIFO or device is refused before any read could block),
/// larger than [`MAX_ATTACHMENT_BYTES`], empty, unreadable, or (images) an unknown
/// image extension.
pub fn load_attachment(
    base: &Path,
    path: &Path,
    image: bool,
) -> Result<serde_json::Value, InvalidInput> {
    let full = base.join(path);
    let flag = if image { "--image" } else { "--file" };
    let bytes = crate::beneath::read_regular(&full, MAX_ATTACHMENT_BYTES)
        .map_err(|e| InvalidInput(format!("{flag} {}: {e}", full.display())))?;
    if bytes.is_empty() {
        return Err(InvalidInput(format!(
            "{flag} {}: file is empty",
            full.display()
        )));
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    if image {
        let mt = image_media_type(&full).ok_or_else(|| {
            InvalidInput(format!(
                "--image {}: unknown image type (use .png, .jpg, .gif or .webp)",
                full.display()
            ))
        })?;
        Ok(serde_json::json!({"media_type": mt, "data": data}))
    } else {
        let name = full
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(
            serde_json::json!({"media_type": file_media_type(&full), "data": data, "filename": name}),
        )
    }
}

/// Combines positional words and stdin text into the prompt (spec §2.4, with the
/// brief's rule that stdin is read only for `-` or an absent prompt).
///
/// `stdin` is `Some(text)` when stdin was read. Errors: empty prompt without
/// attachments; `-` with empty stdin.
pub fn combine_prompt(
    args: &[String],
    stdin: Option<&str>,
    has_attachments: bool,
) -> Result<String, InvalidInput> {
    let dash = args.len() == 1 && args[0].trim() == "-";
    let joined = if dash {
        String::new()
    } else {
        args.iter()
            .map(|a| a.trim())
            .collect::<Vec<_>>()
            .join(" ")
            .trim()
            .to_owned()
    };
    if joined == "-" {
        return Err(InvalidInput("a prompt of `-` must be alone".into()));
    }
    let stdin = stdin.map(str::trim).unwrap_or("");
    if dash && stdin.is_empty() {
        return Err(InvalidInput("`-` was given but stdin is empty".into()));
    }
    let prompt = match (joined.is_empty(), stdin.is_empty()) {
        (false, false) => format!("{joined}\n\n<stdin>\n{stdin}\n</stdin>"),
        (true, _) => stdin.to_owned(),
        (false, true) => joined,
    };
    if prompt.is_empty() && !has_attachments {
        return Err(InvalidInput(
            "a prompt is required (argument, `-`, or piped stdin)".into(),
        ));
    }
    Ok(prompt)
}

/// Whether stdin should be read: the prompt is `-`, or absent and stdin is not a
/// terminal.
pub fn wants_stdin(args: &[String], stdin_is_terminal: bool) -> bool {
    let dash = args.len() == 1 && args[0].trim() == "-";
    dash || (args.iter().all(|a| a.trim().is_empty()) && !stdin_is_terminal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, InvalidInput> {
        match parse(args.iter().map(OsString::from).collect())? {
            Command::Run(o) => Ok(*o),
            Command::Help => Err(InvalidInput("help".into())),
        }
    }

    #[test]
    fn durations() {
        let d = |s| parse_duration(s).unwrap();
        assert_eq!(d("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(d("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(d("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(d("0"), None);
        assert_eq!(d("-3s"), None);
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1..2s").is_err());
    }

    #[test]
    fn flags_and_subcommands() {
        let o = run(&["--timeout", "2s", "hello", "--json", "x"]).unwrap();
        assert!(o.json);
        assert_eq!(o.prompt_args, vec!["hello", "x"]);
        assert_eq!(o.timeout, Some(Duration::from_secs(2)));
        let o = run(&["--json", "--", "hello", "--json", "-x"]).unwrap();
        assert_eq!(o.prompt_args, vec!["hello", "--json", "-x"]);
        let o = run(&["resume", "T1", "--json", "go", "--model=m"]).unwrap();
        assert_eq!(o.mode, Mode::Resume(Some("T1".into())));
        assert!(o.json);
        assert_eq!(o.model.as_deref(), Some("m"));
        assert_eq!(o.prompt_args, vec!["go"]);
        assert!(run(&["go", "--bogus"])
            .unwrap_err()
            .0
            .contains("put `--` before the prompt"));
        assert_eq!(run(&["say", "-"]).unwrap().prompt_args, vec!["say", "-"]);
        let o = run(&["resume", "--last", "go", "on"]).unwrap();
        assert_eq!(o.mode, Mode::Resume(None));
        assert_eq!(o.prompt_args, vec!["go", "on"]);
        let o = run(&["resume", "T1", "go"]).unwrap();
        assert_eq!(o.mode, Mode::Resume(Some("T1".into())));
        let o = run(&["--fork", "T2", "go"]).unwrap();
        assert_eq!(o.mode, Mode::Fork("T2".into()));
        let o = run(&["fork", "T3"]).unwrap();
        assert_eq!(o.mode, Mode::Fork("T3".into()));
        assert!(run(&["resume"]).is_err());
        assert!(run(&["--bogus"]).is_err());
        assert!(run(&["--permission-mode", "yolo", "x"]).is_err());
        assert!(run(&["--max-turns", "-1", "x"]).is_err());
        assert!(run(&["--json=maybe", "x"]).is_err());
        assert!(!run(&["--json=false", "x"]).unwrap().json);
        let o = run(&["-q", "--color", "never", "x"]).unwrap();
        assert!(o.quiet);
        assert_eq!(o.color, ColorWhen::Never);
        assert_eq!(
            run(&["--color=always", "x"]).unwrap().color,
            ColorWhen::Always
        );
        assert_eq!(run(&["x"]).unwrap().color, ColorWhen::Auto);
        assert!(run(&["--color", "sometimes", "x"])
            .unwrap_err()
            .0
            .contains("auto, always or never"));
        assert!(matches!(parse(vec!["-h".into()]).unwrap(), Command::Help));
    }

    #[test]
    fn prompts() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(combine_prompt(&s(&["a", "b"]), None, false).unwrap(), "a b");
        assert_eq!(
            combine_prompt(&s(&["-"]), Some(" x \n"), false).unwrap(),
            "x"
        );
        assert!(combine_prompt(&s(&["-"]), Some(""), true).is_err());
        assert!(combine_prompt(&[], Some("  "), false).is_err());
        assert_eq!(combine_prompt(&[], Some(""), true).unwrap(), "");
        assert_eq!(
            combine_prompt(&s(&["do"]), Some("data"), false).unwrap(),
            "do\n\n<stdin>\ndata\n</stdin>"
        );
        assert!(wants_stdin(&s(&["-"]), true));
        assert!(wants_stdin(&[], false));
        assert!(!wants_stdin(&[], true));
        assert!(!wants_stdin(&s(&["x"]), false));
    }
}
