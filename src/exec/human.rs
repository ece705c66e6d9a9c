//! Human (text) mode of `wuu exec` (spec `exec.md` §6): the events of [`super::events`]
//! — the same ones `--json` prints — rendered as progress for a person on stderr
//! (through the [`Painter`]); the final message goes to stdout through the
//! [`super::writer::Writer`].
//!
//! What a run shows: a header (provider, model, workspace, thread and turn ids); the
//! model's text as it streams; each command as `$ cmd`, live with its elapsed time on a
//! terminal, then `✓ exit 0 · 1.2s` (or `✗ …`) and the last [`TAIL_LINES`] lines of its
//! output (the whole output is in the trace); file changes as `edit_file calc.py +1 −1`;
//! other tools with their main argument; questions, retries, subagents and task-list
//! changes as one line each; and one summary line (status, turns, tokens, wall time,
//! trace path). `--quiet` keeps only error lines. Text from outside (model text,
//! commands, output, paths) is cleaned of escape sequences and control characters
//! before it reaches the terminal; the painter masks secrets.

use super::events::{CommandInfo, Event, FileChange, RunResultEvent, Subagent, ThreadInfo};
use super::painter::{self, clean_line, clean_text, cut, duration, Form, Paint, Painter, Status};
use super::writer::Blocked;
use anstyle::{AnsiColor, Style};
use crossbeam_channel::Receiver;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Output lines shown under a finished command.
pub const TAIL_LINES: usize = 6;

/// Bytes of a command's output kept for its tail (the end of the output).
const TAIL_BYTES: usize = 8 * 1024;

/// Least time between two status updates from a command's output.
const STATUS_EVERY: Duration = Duration::from_millis(50);

/// Widest line shown for one line of command output, a command or an argument.
const FIELD_CHARS: usize = 240;

/// How stderr progress looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// Styled (ANSI colours).
    pub color: bool,
    /// Live status line and streamed text (a terminal with colour on).
    pub live: bool,
    /// Only errors.
    pub quiet: bool,
}

impl Look {
    /// The look for stderr: `choice` is `--color` (`auto` follows `NO_COLOR`,
    /// `CLICOLOR`, `CLICOLOR_FORCE`, `TERM` and whether stderr is a terminal, as
    /// `anstream` decides); the live form needs a terminal and colour.
    pub fn for_stderr(choice: super::cli::ColorWhen, quiet: bool) -> Look {
        use super::cli::ColorWhen;
        let term = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let color = match choice {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
            }
        };
        Look {
            color,
            live: term && color,
            quiet,
        }
    }
}

/// Styles of the progress lines (all plain without colour).
#[derive(Debug, Clone, Copy, Default)]
struct Palette {
    dim: Style,
    bold: Style,
    ok: Style,
    bad: Style,
    warn: Style,
    add: Style,
    del: Style,
    cmd: Style,
}

impl Palette {
    fn new(color: bool) -> Palette {
        if !color {
            return Palette::default();
        }
        let fg = |c: AnsiColor| Style::new().fg_color(Some(c.into()));
        Palette {
            dim: Style::new().dimmed(),
            bold: Style::new().bold(),
            ok: fg(AnsiColor::Green),
            bad: fg(AnsiColor::Red),
            warn: fg(AnsiColor::Yellow),
            add: fg(AnsiColor::Green),
            del: fg(AnsiColor::Red),
            cmd: fg(AnsiColor::Cyan).bold(),
        }
    }
}

/// `text` in `style` (no sequences for a plain style).
fn paint(style: Style, text: &str) -> String {
    format!("{style}{text}{style:#}")
}

/// A command that is running.
struct Running {
    label: String,
    started: Instant,
    /// When the status line last took its output.
    shown_at: Instant,
    /// The end of its output (at most about [`TAIL_BYTES`]).
    tail: String,
    /// Earlier output was dropped from `tail`.
    cut: bool,
    /// Line ends seen in the whole output.
    newlines: u64,
    /// The output does not end with a line end (the last line counts too).
    open_line: bool,
}

/// Renders events as progress on stderr.
pub struct Human {
    painter: Painter,
    look: Look,
    pal: Palette,
    started: Instant,
    /// Root turns started.
    turns: u32,
    /// Streamed text of the current turn was written and its line is not ended.
    text_open: bool,
    /// The current turn's text as shown (to tell an extension from a withdrawal).
    shown: String,
    commands: HashMap<String, Running>,
    /// Non-command tools started: item id → (name, arguments).
    tools: HashMap<String, (String, String)>,
}

impl Human {
    /// A renderer over stderr.
    pub fn new(look: Look) -> Human {
        let pal = Palette::new(look.color);
        let form = Form {
            live: look.live,
            width: painter::stderr_width,
            status_style: pal.dim,
        };
        Human::with_painter(Painter::start_stderr(form), look)
    }

    /// A renderer over `painter` (tests paint into memory).
    pub fn with_painter(painter: Painter, look: Look) -> Human {
        Human {
            painter,
            look,
            pal: Palette::new(look.color),
            started: Instant::now(),
            turns: 0,
            text_open: false,
            shown: String::new(),
            commands: HashMap::new(),
            tools: HashMap::new(),
        }
    }

    /// Waits until everything rendered so far is on stderr (bounded by `cancel` and
    /// `limit`), so that the final message on stdout comes after it.
    pub fn sync(&mut self, cancel: &Receiver<i32>, limit: Option<Instant>) -> Result<(), Blocked> {
        self.painter.sync(cancel, limit)
    }

    /// Ends the progress (erases the live line) and waits for stderr until `limit`.
    pub fn finish(self, limit: Option<Instant>) -> bool {
        self.painter.finish(limit)
    }

    /// Renders one event (events without a human form are ignored). Errors: the painter
    /// queue stayed full until `cancel` or `limit`.
    pub fn on_event(
        &mut self,
        ev: &Event,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> Result<(), Blocked> {
        let mut out = Vec::new();
        self.render(ev, &mut out);
        for p in out {
            self.painter.send(p, cancel, limit)?;
        }
        Ok(())
    }

    fn line(&mut self, out: &mut Vec<Paint>, text: String) {
        self.end_text(out);
        out.push(Paint::Line(text));
    }

    fn end_text(&mut self, out: &mut Vec<Paint>) {
        if self.text_open {
            self.text_open = false;
            out.push(Paint::EndText);
        }
    }

    fn waiting(&self, out: &mut Vec<Paint>) {
        out.push(Paint::Status(Some(Status {
            label: "waiting for the model".into(),
            since: Instant::now(),
            detail: String::new(),
        })));
    }

    /// Turns one event into paints by its kind's line builder (quiet: error lines only).
    fn render(&mut self, ev: &Event, out: &mut Vec<Paint>) {
        if self.look.quiet {
            if let Event::Error { error, .. } = ev {
                self.error_line(out, error);
            }
            return;
        }
        match ev {
            Event::SessionConfigured {
                provider,
                model,
                workspace_root,
                permissions,
                ..
            } => self.session_header(out, provider, model, workspace_root, permissions),
            Event::ThreadStarted(t) | Event::ThreadResumed(t) | Event::ThreadForked(t) => {
                let how = match ev {
                    Event::ThreadResumed(_) => " (resumed)",
                    Event::ThreadForked(_) => " (forked)",
                    _ => "",
                };
                self.thread_line(out, t, how);
            }
            Event::TurnStarted { turn_id, .. } => self.turn_started(out, turn_id),
            Event::AgentMessageDelta { delta, .. } => self.text(out, delta),
            Event::AgentMessageFinal { message, .. } => self.message_final(out, message),
            Event::CommandStarted(info) => self.command_started(out, info),
            Event::CommandOutputDelta { info, delta } => {
                self.command_output(out, &info.item_id, delta)
            }
            Event::CommandCompleted {
                info,
                status,
                error,
                exit_code,
                duration_ms,
            } => {
                self.command_completed(out, &info.item_id, status, error, *exit_code, *duration_ms)
            }
            Event::CommandRemoved { item_id, .. } => {
                let running = self.commands.remove(item_id);
                if running.is_some() {
                    out.push(Paint::Status(None));
                }
            }
            Event::ToolStarted {
                item_id,
                name,
                arguments,
                ..
            } if name.trim() != "bash" => self.tool_started(out, item_id, name, arguments),
            Event::ToolCompleted {
                item_id,
                name,
                status,
                error,
                ..
            } if name.trim() != "bash" => self.tool_completed(out, item_id, name, status, error),
            Event::ToolRemoved { item_id, .. } => {
                let running = self.tools.remove(item_id);
                if running.is_some() {
                    out.push(Paint::Status(None));
                }
            }
            Event::FileChanged(fc) => {
                let l = self.file_line(fc);
                self.line(out, l);
            }
            Event::StreamReconnect {
                status,
                retry_count,
                max_retries,
                reason,
                message,
                ..
            } if status == "retrying" => {
                self.retry_line(out, *retry_count, *max_retries, reason, message)
            }
            Event::SubagentStarted(a) => self.subagent_line(out, a, true),
            Event::SubagentCompleted(a) => self.subagent_line(out, a, false),
            Event::TodoUpdated { todo, .. } => {
                if let Some(l) = todo_line(todo) {
                    self.line(out, paint(self.pal.dim, &l));
                }
            }
            Event::Error { error, .. } => self.error_line(out, error),
            Event::Result(r) => {
                out.push(Paint::Status(None));
                let l = self.summary(r);
                self.line(out, l);
            }
            _ => {}
        }
    }

    /// The run's header: provider, model and permission mode, then the workspace root.
    fn session_header(
        &mut self,
        out: &mut Vec<Paint>,
        provider: &str,
        model: &str,
        workspace_root: &str,
        permissions: &Value,
    ) {
        let p = self.pal;
        let mut head = format!(
            "provider: {} · model: {}",
            clean_line(provider),
            clean_line(model)
        );
        if let Some(m) = permissions.get("mode").and_then(Value::as_str) {
            if !m.is_empty() {
                head.push_str(&format!(" · permission_mode: {}", clean_line(m)));
            }
        }
        self.line(out, paint(p.dim, &head));
        let ws = format!("workspace: {}", clean_line(workspace_root));
        self.line(out, paint(p.dim, &ws));
    }

    /// The thread id line; `how` tells a resumed or forked thread from a new one.
    fn thread_line(&mut self, out: &mut Vec<Paint>, t: &ThreadInfo, how: &str) {
        let l = format!("thread_id: {}{how}", clean_line(&t.thread_id));
        self.line(out, paint(self.pal.dim, &l));
    }

    /// A root turn began: counts it, resets the shown text and waits for the model.
    fn turn_started(&mut self, out: &mut Vec<Paint>, turn_id: &str) {
        self.turns += 1;
        self.shown.clear();
        let l = format!("turn {} · turn_id: {}", self.turns, clean_line(turn_id));
        self.line(out, paint(self.pal.dim, &l));
        self.waiting(out);
    }

    /// The turn's text now reads `message`: shows what is new; a withdrawal stays (retry said so).
    fn message_final(&mut self, out: &mut Vec<Paint>, message: &str) {
        match message.strip_prefix(self.shown.as_str()) {
            Some(more) if !more.is_empty() => {
                let more = more.to_owned();
                self.text(out, &more);
            }
            _ => self.shown = message.to_owned(),
        }
    }

    /// A command started: its `$ cmd` line, the live status, and its running record.
    fn command_started(&mut self, out: &mut Vec<Paint>, info: &CommandInfo) {
        let p = self.pal;
        let label = if info.command.trim().is_empty() {
            format!("(process {})", clean_line(&info.process_id))
        } else {
            command_label(&info.command)
        };
        self.line(
            out,
            format!("{} {}", paint(p.cmd, "$"), paint(p.bold, &label)),
        );
        out.push(Paint::Status(Some(Status {
            label: cut(&label, 60),
            since: Instant::now(),
            detail: String::new(),
        })));
        self.commands.insert(
            info.item_id.clone(),
            Running {
                label,
                started: Instant::now(),
                shown_at: Instant::now(),
                tail: String::new(),
                cut: false,
                newlines: 0,
                open_line: false,
            },
        );
    }

    /// Keeps a command's output for its tail; redraws the status at most every [`STATUS_EVERY`].
    fn command_output(&mut self, out: &mut Vec<Paint>, item_id: &str, delta: &str) {
        if let Some(r) = self.commands.get_mut(item_id) {
            r.push(delta);
            if self.look.live && r.shown_at.elapsed() >= STATUS_EVERY {
                r.shown_at = Instant::now();
                let last = r.last_line();
                out.push(Paint::Status(Some(Status {
                    label: cut(&r.label, 60),
                    since: r.started,
                    detail: last,
                })));
            }
        }
    }

    /// A command ended: its `✓`/`✗` line with exit code and time, then its output tail.
    fn command_completed(
        &mut self,
        out: &mut Vec<Paint>,
        item_id: &str,
        status: &str,
        error: &str,
        exit_code: Option<i64>,
        duration_ms: u64,
    ) {
        let p = self.pal;
        let run = self.commands.remove(item_id);
        out.push(Paint::Status(None));
        let took = if duration_ms > 0 {
            Duration::from_millis(duration_ms)
        } else {
            run.as_ref()
                .map(|r| r.started.elapsed())
                .unwrap_or_default()
        };
        let took = duration(took);
        let l = match exit_code {
            Some(0) => paint(p.ok, &format!("  ✓ exit 0 · {took}")),
            Some(c) => paint(p.bad, &format!("  ✗ exit {c} · {took}")),
            None if status == "completed" => paint(p.ok, &format!("  ✓ done · {took}")),
            None => {
                let why = first_line(error);
                let why = if why.is_empty() { status } else { why };
                paint(p.bad, &format!("  ✗ {} · {took}", clean_line(why)))
            }
        };
        self.line(out, l);
        if let Some(r) = run {
            self.command_tail(out, &r);
        }
        self.waiting(out);
    }

    /// A finished command's last [`TAIL_LINES`] output lines, noting earlier ones in the trace.
    fn command_tail(&mut self, out: &mut Vec<Paint>, r: &Running) {
        let p = self.pal;
        let (hidden, lines) = r.tail_lines(TAIL_LINES);
        if hidden > 0 {
            let s = if hidden == 1 { "" } else { "s" };
            let note = format!("    │ … {hidden} earlier line{s} (in the trace)");
            self.line(out, paint(p.dim, &note));
        }
        for l in lines {
            let l = format!("    │ {l}");
            self.line(out, paint(p.dim, l.trim_end()));
        }
    }

    /// A non-command tool started: remembered (for its arguments) and shown as status.
    fn tool_started(&mut self, out: &mut Vec<Paint>, item_id: &str, name: &str, arguments: &str) {
        self.end_text(out);
        self.tools
            .insert(item_id.to_owned(), (name.to_owned(), arguments.to_owned()));
        out.push(Paint::Status(Some(Status {
            label: clean_line(name),
            since: Instant::now(),
            detail: String::new(),
        })));
    }

    /// A non-command tool ended: its one line (see [`Human::tool_line`]), then waiting.
    fn tool_completed(
        &mut self,
        out: &mut Vec<Paint>,
        item_id: &str,
        name: &str,
        status: &str,
        error: &str,
    ) {
        let args = self
            .tools
            .remove(item_id)
            .map(|(_, a)| a)
            .unwrap_or_default();
        out.push(Paint::Status(None));
        if let Some(l) = self.tool_line(name, &args, status, error) {
            self.line(out, l);
        }
        self.waiting(out);
    }

    /// The model request is retried: count, budget, reason and the failure's first line.
    fn retry_line(
        &mut self,
        out: &mut Vec<Paint>,
        retry_count: u64,
        max_retries: u64,
        reason: &str,
        message: &str,
    ) {
        let why = if reason.is_empty() {
            String::new()
        } else {
            format!(", {}", clean_line(reason))
        };
        let l = format!(
            "↻ retrying the model request ({retry_count}/{max_retries}{why}): {}",
            clean_line(first_line(message))
        );
        self.line(out, paint(self.pal.warn, &l));
    }

    /// A subagent started or ended: who (task name, type or id) and how it went.
    fn subagent_line(&mut self, out: &mut Vec<Paint>, a: &Subagent, started: bool) {
        let who = [&a.task_name, &a.agent_type, &a.agent_id]
            .into_iter()
            .find(|s| !s.trim().is_empty())
            .map(|s| clean_line(s))
            .unwrap_or_default();
        let what = if started {
            "started".to_owned()
        } else if a.error.is_empty() {
            clean_line(&a.status)
        } else {
            format!(
                "{}: {}",
                clean_line(&a.status),
                clean_line(first_line(&a.error))
            )
        };
        self.line(out, paint(self.pal.dim, &format!("agent {who} {what}")));
    }

    /// The error line (structured output that failed validation); shown even in quiet mode.
    fn error_line(&mut self, out: &mut Vec<Paint>, error: &str) {
        let l = format!("structured_output_validation_failed: {}", clean_line(error));
        self.line(out, paint(self.pal.bad, &l));
    }

    fn text(&mut self, out: &mut Vec<Paint>, delta: &str) {
        self.shown.push_str(delta);
        let text = clean_text(delta);
        if text.is_empty() {
            return;
        }
        if !self.text_open {
            out.push(Paint::Status(None));
            self.text_open = true;
        }
        out.push(Paint::Text(text));
    }

    /// The line of a finished non-command tool (`None`: its file changes speak for it).
    fn tool_line(&self, name: &str, args: &str, status: &str, error: &str) -> Option<String> {
        let p = self.pal;
        let a: Value = serde_json::from_str(args).unwrap_or(Value::Null);
        let arg = |k: &str| clean_line(a.get(k).and_then(Value::as_str).unwrap_or(""));
        let failed = status != "completed";
        let why = clean_line(first_line(error));
        if name == "ask_user" {
            let q = a
                .pointer("/questions/0/question")
                .and_then(Value::as_str)
                .map(clean_line)
                .unwrap_or_default();
            let end = if failed {
                format!(" — no answer: {why}")
            } else {
                String::new()
            };
            return Some(paint(p.warn, &format!("? {q}{end}")));
        }
        if !failed
            && matches!(
                name,
                "write_file" | "edit_file" | "apply_patch" | "todo_write"
            )
        {
            return None;
        }
        let what = match name {
            "grep" => {
                let mut s = format!("{:?}", arg("pattern"));
                let at = arg("path");
                if !at.is_empty() {
                    s.push_str(&format!(" in {at}"));
                }
                s
            }
            "glob" => arg("pattern"),
            "apply_patch" | "todo_write" => String::new(),
            _ => ["path", "file_path", "url", "query", "name"]
                .iter()
                .map(|k| arg(k))
                .find(|v| !v.is_empty())
                .unwrap_or_default(),
        };
        let head = format!("{} {}", clean_line(name), cut(&what, FIELD_CHARS));
        let head = head.trim_end();
        Some(if failed {
            paint(p.bad, &format!("✗ {head}: {why}"))
        } else {
            paint(p.dim, head)
        })
    }

    fn file_line(&self, fc: &FileChange) -> String {
        let p = self.pal;
        let mut l = format!("{} {}", clean_line(&fc.tool_name), clean_line(&fc.path));
        if !fc.move_path.is_empty() {
            l.push_str(&format!(" → {}", clean_line(&fc.move_path)));
        }
        let mut l = paint(p.bold, &l);
        if fc.tool_name != "checkpoint" {
            l.push_str(&format!(
                " {} {}",
                paint(p.add, &format!("+{}", fc.lines_added)),
                paint(p.del, &format!("−{}", fc.lines_removed))
            ));
        }
        if !fc.action.is_empty() && fc.action != "modified" {
            l.push_str(&paint(p.dim, &format!(" ({})", clean_line(&fc.action))));
        }
        l
    }

    fn summary(&self, r: &RunResultEvent) -> String {
        let u = r.usage;
        let turns = if self.turns == 1 { "turn" } else { "turns" };
        let mut l = format!(
            "{} · {} {turns} · tokens {} in / {} out / {} cached · {}",
            r.status,
            self.turns,
            grouped(u.input_tokens),
            grouped(u.output_tokens),
            grouped(u.cache_read_tokens),
            duration(self.started.elapsed()),
        );
        if !r.trace_path.is_empty() {
            l.push_str(&format!(" · trace_path: {}", clean_line(&r.trace_path)));
        }
        let style = if r.status == "completed" {
            self.pal.bold
        } else {
            self.pal.bad
        };
        paint(style, &l)
    }
}

impl Running {
    fn push(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.newlines += delta.matches('\n').count() as u64;
        self.open_line = !delta.ends_with('\n');
        self.tail.push_str(delta);
        if self.tail.len() > 2 * TAIL_BYTES {
            let mut at = self.tail.len() - TAIL_BYTES;
            while !self.tail.is_char_boundary(at) {
                at += 1;
            }
            self.tail.drain(..at);
            self.cut = true;
        }
    }

    /// The latest non-empty output line (for the live status).
    fn last_line(&self) -> String {
        self.tail
            .lines()
            .rev()
            .map(clean_output_line)
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
    }

    /// The last `n` lines of the output (trailing blank lines left out), and how many
    /// lines came before them.
    fn tail_lines(&self, n: usize) -> (u64, Vec<String>) {
        let mut lines: Vec<&str> = self.tail.lines().collect();
        if self.cut && !lines.is_empty() {
            // The first kept line is a piece of a longer one.
            lines.remove(0);
        }
        let mut trailing_blank = 0u64;
        while lines
            .last()
            .is_some_and(|l| clean_output_line(l).trim().is_empty())
        {
            lines.pop();
            trailing_blank += 1;
        }
        let shown: Vec<String> = lines
            .iter()
            .skip(lines.len().saturating_sub(n))
            .map(|l| clean_output_line(l))
            .collect();
        let total = self.newlines + u64::from(self.open_line);
        let hidden = total
            .saturating_sub(trailing_blank)
            .saturating_sub(shown.len() as u64);
        (hidden, shown)
    }
}

/// The first line of `s`.
fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

/// A command as one line: its first line, cut, with the number of further lines.
fn command_label(cmd: &str) -> String {
    let cmd = cmd.trim();
    let mut lines = cmd.lines();
    let first = clean_line(lines.next().unwrap_or(""));
    let more = lines.count();
    let mut l = cut(&first, FIELD_CHARS);
    if more > 0 {
        l.push_str(&format!(
            " … (+{more} line{})",
            if more == 1 { "" } else { "s" }
        ));
    }
    l
}

/// One line of command output: what a terminal would show after carriage returns
/// (progress bars), cleaned and cut.
fn clean_output_line(l: &str) -> String {
    let shown = l
        .split('\r')
        .rev()
        .find(|seg| !seg.trim().is_empty())
        .unwrap_or("");
    cut(clean_line(shown).trim_end(), FIELD_CHARS)
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `todo: 1/3 done · now: <the task in progress>`.
fn todo_line(todo: &Value) -> Option<String> {
    let items = todo.get("todos")?.as_array()?;
    let status = |t: &Value| {
        t.get("status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let done = items.iter().filter(|t| status(t) == "completed").count();
    let mut l = format!("todo: {done}/{} done", items.len());
    if let Some(now) = items.iter().find(|t| status(t) == "in_progress") {
        let c = now.get("content").and_then(Value::as_str).unwrap_or("");
        l.push_str(&format!(" · now: {}", cut(&clean_line(c), FIELD_CHARS)));
    }
    Some(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::events::{CommandInfo, RunUsage, ThreadInfo};
    use parking_lot::Mutex;
    use std::io::Write;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn render(look: Look, events: &[Event]) -> String {
        let buf = Buf::default();
        let b2 = buf.clone();
        let form = Form {
            live: look.live,
            width: || 80,
            status_style: Style::new(),
        };
        let mut h = Human::with_painter(Painter::start(move || Box::new(b2), form), look);
        let never = crossbeam_channel::never();
        for ev in events {
            h.on_event(ev, &never, None).unwrap();
        }
        assert!(h.finish(Some(Instant::now() + Duration::from_secs(5))));
        let out = buf.0.lock().clone();
        String::from_utf8(out).unwrap()
    }

    fn cmd(item: &str, command: &str) -> CommandInfo {
        CommandInfo {
            item_id: item.into(),
            name: "bash".into(),
            command: command.into(),
            ..Default::default()
        }
    }

    fn run_events() -> Vec<Event> {
        let output: String = (1..=9)
            .map(|i| format!("line {i}\n"))
            .chain(["\x1b[31mFAILED\x1b[0m (failures=1)\r\n".to_owned()])
            .chain(["10%\r100%\n\n".to_owned()])
            .collect();
        vec![
            Event::SessionConfigured {
                protocol_version: "p".into(),
                provider: "replay".into(),
                model: "m1".into(),
                effort: String::new(),
                variant: String::new(),
                max_parallel: 1,
                workspace_root: "/w".into(),
                permissions: serde_json::json!({"mode": "standard"}),
            },
            Event::ThreadStarted(ThreadInfo {
                thread_id: "T1".into(),
                ..Default::default()
            }),
            Event::TurnStarted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
            },
            Event::AgentMessageDelta {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                delta: "Let me run ".into(),
            },
            Event::AgentMessageDelta {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                delta: "the tests.\u{202e} ".into(),
            },
            Event::ToolStarted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I1".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
            Event::CommandStarted(cmd("I1", "python3 -m unittest\necho done")),
            Event::CommandOutputDelta {
                info: cmd("I1", ""),
                delta: output,
            },
            Event::CommandCompleted {
                info: cmd("I1", ""),
                status: "failed".into(),
                error: "Exit code: 1".into(),
                exit_code: Some(1),
                duration_ms: 1240,
            },
            Event::ToolStarted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I2".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"calc.py"}"#.into(),
            },
            Event::ToolCompleted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I2".into(),
                name: "read_file".into(),
                status: "completed".into(),
                error: String::new(),
            },
            Event::ToolStarted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I3".into(),
                name: "edit_file".into(),
                arguments: r#"{"path":"calc.py"}"#.into(),
            },
            Event::ToolCompleted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I3".into(),
                name: "edit_file".into(),
                status: "completed".into(),
                error: String::new(),
            },
            Event::FileChanged(FileChange {
                tool_name: "edit_file".into(),
                path: "calc.py".into(),
                action: "modified".into(),
                lines_added: 1,
                lines_removed: 1,
                ..Default::default()
            }),
            Event::ToolStarted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I4".into(),
                name: "grep".into(),
                arguments: r#"{"pattern":"x\u001b[2J"}"#.into(),
            },
            Event::ToolCompleted {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "I4".into(),
                name: "grep".into(),
                status: "failed".into(),
                error: "bad regex\nmore".into(),
            },
            Event::StreamReconnect {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                item_id: "R".into(),
                status: "retrying".into(),
                retry_count: 1,
                max_retries: 4,
                retry_at_ms: 0,
                reason: "rate_limit".into(),
                message: "429 Too Many Requests\nbody".into(),
            },
            Event::AgentMessageDelta {
                thread_id: "T1".into(),
                turn_id: "U1".into(),
                delta: "Fixed.".into(),
            },
            Event::Result(RunResultEvent {
                status: "completed".into(),
                trace_path: "/h/traces/T1.jsonl".into(),
                final_message: "Fixed.".into(),
                usage: RunUsage {
                    input_tokens: 1234,
                    output_tokens: 56,
                    cache_creation_tokens: 0,
                    cache_read_tokens: 7,
                },
                ..Default::default()
            }),
        ]
    }

    #[test]
    fn plain_lines_tell_the_whole_run() {
        let look = Look {
            color: false,
            live: false,
            quiet: false,
        };
        let out = render(look, &run_events());
        let lines: Vec<&str> = out.lines().collect();
        let expected_head = [
            "provider: replay · model: m1 · permission_mode: standard",
            "workspace: /w",
            "thread_id: T1",
            "turn 1 · turn_id: U1",
            "Let me run the tests. ",
            "$ python3 -m unittest … (+1 line)",
            "  ✗ exit 1 · 1.2s",
            "    │ … 5 earlier lines (in the trace)",
            "    │ line 6",
            "    │ line 7",
            "    │ line 8",
            "    │ line 9",
            "    │ FAILED (failures=1)",
            "    │ 100%",
            "read_file calc.py",
            "edit_file calc.py +1 −1",
            "✗ grep \"x\": bad regex",
        ];
        assert_eq!(lines[..expected_head.len()], expected_head, "{out}");
        let rest = &lines[expected_head.len()..];
        assert_eq!(
            rest[0],
            "↻ retrying the model request (1/4, rate_limit): 429 Too Many Requests"
        );
        assert_eq!(rest[1], "Fixed.");
        assert!(
            rest[2].starts_with("completed · 1 turn · tokens 1,234 in / 56 out / 7 cached · "),
            "{}",
            rest[2]
        );
        assert!(rest[2].ends_with(" · trace_path: /h/traces/T1.jsonl"));
        assert_eq!(rest.len(), 3, "{out}");
        assert!(!out.contains('\x1b') && !out.contains('\r'), "{out:?}");
    }

    #[test]
    fn quiet_keeps_only_errors() {
        let look = Look {
            color: false,
            live: false,
            quiet: true,
        };
        let mut evs = run_events();
        evs.push(Event::Error {
            thread_id: "T1".into(),
            turn_id: "U1".into(),
            run_id: "R".into(),
            error: "missing field".into(),
            retrying: false,
        });
        let out = render(look, &evs);
        assert_eq!(out, "structured_output_validation_failed: missing field\n");
    }

    #[test]
    fn colour_styles_our_words_never_theirs() {
        let look = Look {
            color: true,
            live: false,
            quiet: false,
        };
        let out = render(look, &run_events());
        assert!(out.contains("\x1b[32m+1\x1b[0m"), "{out:?}");
        assert!(out.contains("\x1b[31m  ✗ exit 1 · 1.2s\x1b[0m"), "{out:?}");
        // The command's own colour codes and screen clears never get through.
        assert!(!out.contains("\x1b[31mFAILED"), "{out:?}");
        assert!(!out.contains("\x1b[2J"), "{out:?}");
        assert!(!out.contains('\u{202e}'));
    }

    #[test]
    fn fields_from_outside_are_cleaned() {
        assert_eq!(clean_line("a\x1b[31mb\x07\nc\td\u{202e}"), "ab c d");
        assert_eq!(clean_output_line("10%\r50%\r100%\r"), "100%");
        assert_eq!(clean_text("x\r\ny\x1b]0;title\x07z"), "x\nyz");
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(1234567), "1,234,567");
        assert_eq!(command_label("  ls -la  "), "ls -la");
    }
}
