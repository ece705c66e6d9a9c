//! The stderr painter of `wuu exec`'s human mode (spec `exec.md` §6): one thread owns
//! stderr and writes what [`super::human`] renders, fed by a queue bounded at
//! [`QUEUE`] messages (the producer waits for room while watching signals and the
//! deadline, as with the stdout [`super::writer::Writer`]).
//!
//! Two forms. **Live** (stderr is a terminal and colour is on): streamed model text is
//! written as it arrives, and a status line (spinner, label, elapsed time, a detail such
//! as the command's latest output line) stays at the bottom, redrawn every [`TICK`],
//! erased (`\r` + erase-line) before anything else is written and drawn again below it;
//! it is shown only while the cursor is at the start of a line, cut to the terminal's
//! width. **Plain** (a pipe, a file, `NO_COLOR`, `--color never`): whole lines only,
//! each flushed as it is complete; streamed text is held until its line ends; status
//! updates are dropped; no cursor movement ever.
//!
//! Every line and every piece of streamed text passes [`crate::secrets`] on its way out
//! (a [`StreamRedactor`] for the text, so a secret split across deltas is masked too).

use super::writer::Blocked;
use crate::secrets::{self, StreamRedactor};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::io::Write;
use std::time::{Duration, Instant};

/// Messages the queue holds before the producer waits.
pub const QUEUE: usize = 1024;

/// How often the live status line is redrawn.
pub const TICK: Duration = Duration::from_millis(100);

/// Spinner frames of the live status line.
const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// Erase the current terminal line and return to its start.
const ERASE: &str = "\r\x1b[2K";

/// The live status: shown as `<spinner> <label> · <elapsed> · <detail>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// What is going on (already cleaned of control characters).
    pub label: String,
    /// When it began (the elapsed time counts from here).
    pub since: Instant,
    /// Extra text after the elapsed time (`""`: none).
    pub detail: String,
}

/// What the painter is asked to do.
#[derive(Debug)]
pub enum Paint {
    /// One complete line (without its `\n`; may carry style sequences).
    Line(String),
    /// A piece of streamed text (free of control characters but `\n` and `\t`).
    Text(String),
    /// The streamed text ended: finish its line.
    EndText,
    /// Set or clear the live status.
    Status(Option<Status>),
    /// Answer once everything before it is written.
    Sync(Sender<()>),
    /// A log record (see [`LogSink`]): written as lines, cleaned of control characters.
    Log(String),
}

/// How the painter writes.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    /// Live terminal form (else plain lines).
    pub live: bool,
    /// Terminal width in columns, asked before each status draw.
    pub width: fn() -> usize,
    /// The style of the status line (its spinner and text).
    pub status_style: anstyle::Style,
}

/// Width of stderr's terminal (80 when it cannot be asked).
pub fn stderr_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&c| c > 0)
        .unwrap_or(80)
}

/// How long a log record waits for room in a painter's queue before it is written to
/// stderr directly.
const LOG_WAIT: Duration = Duration::from_secs(1);

/// The queue of the painter that owns stderr, if one does.
static LOG_ROUTE: parking_lot::Mutex<Option<Sender<Paint>>> = parking_lot::const_mutex(None);

/// The logger's writer (`env_logger::Target::Pipe`): each record goes to stderr, or,
/// while a painter owns stderr ([`Painter::start_stderr`]), to that painter as lines
/// above its status line, in order with the progress. A record that finds the queue
/// full for [`LOG_WAIT`] is written to stderr directly (never dropped).
pub struct LogSink;

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let route = LOG_ROUTE.lock().clone();
        if let Some(tx) = route {
            let text = String::from_utf8_lossy(buf);
            let text = text.strip_suffix('\n').unwrap_or(&text).to_owned();
            if tx.send_timeout(Paint::Log(text), LOG_WAIT).is_ok() {
                return Ok(buf.len());
            }
        }
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Handle of the painter thread.
pub struct Painter {
    tx: Option<Sender<Paint>>,
    done: Receiver<()>,
    /// A message could not be queued (deadline or signal while stderr was stuck):
    /// later ones are dropped.
    stuck: bool,
}

impl Painter {
    /// Starts the painter thread over the writer `open` makes on that thread.
    pub fn start(open: impl FnOnce() -> Box<dyn Write> + Send + 'static, form: Form) -> Painter {
        let (tx, rx) = bounded::<Paint>(QUEUE);
        let (done_tx, done) = bounded::<()>(1);
        let spawned = crate::util::spawn("wuu-exec-stderr".into(), move || {
            let mut s = Screen {
                out: open(),
                form,
                status: None,
                shown: false,
                at_line_start: true,
                pending: String::new(),
                redactor: StreamRedactor::default(),
                frame: 0,
            };
            s.run(&rx);
            let _ = done_tx.send(());
        });
        if let Err(e) = spawned {
            log::warn!("cannot start the progress painter: {e}");
        }
        Painter {
            tx: Some(tx),
            done,
            stuck: false,
        }
    }

    /// Starts the painter over stderr; log records go through it until [`finish`].
    ///
    /// [`finish`]: Painter::finish
    pub fn start_stderr(form: Form) -> Painter {
        let p = Painter::start(|| Box::new(std::io::stderr()), form);
        if let Some(tx) = &p.tx {
            *LOG_ROUTE.lock() = Some(tx.clone());
        }
        p
    }

    /// Queues `p`, waiting for room until `limit` or until `cancel` yields. After a
    /// failed wait the painter is stuck: this and later messages are dropped.
    pub fn send(
        &mut self,
        p: Paint,
        cancel: &Receiver<i32>,
        limit: Option<Instant>,
    ) -> Result<(), Blocked> {
        if self.stuck {
            return Ok(());
        }
        let Some(tx) = &self.tx else { return Ok(()) };
        let timer = match limit {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        };
        let r = crossbeam_channel::select! {
            send(tx, p) -> r => {
                // The thread is gone (it could not start): nothing to paint on.
                if r.is_err() {
                    self.tx = None;
                }
                Ok(())
            }
            recv(cancel) -> _ => Err(Blocked::Cancelled),
            recv(timer) -> _ => Err(Blocked::TimedOut),
        };
        if r.is_err() {
            self.stuck = true;
        }
        r
    }

    /// Waits until everything queued so far is on stderr (bounded like [`send`]).
    ///
    /// [`send`]: Painter::send
    pub fn sync(&mut self, cancel: &Receiver<i32>, limit: Option<Instant>) -> Result<(), Blocked> {
        let (ack_tx, ack) = bounded(1);
        self.send(Paint::Sync(ack_tx), cancel, limit)?;
        if self.stuck || self.tx.is_none() {
            return Ok(());
        }
        let timer = match limit {
            Some(t) => crossbeam_channel::at(t),
            None => crossbeam_channel::never(),
        };
        crossbeam_channel::select! {
            recv(ack) -> _ => Ok(()),
            recv(cancel) -> _ => Err(Blocked::Cancelled),
            recv(timer) -> _ => Err(Blocked::TimedOut),
        }
    }

    /// Closes the queue and waits until the painter wrote everything and erased its
    /// status line, or until `limit`. Returns whether it finished.
    pub fn finish(mut self, limit: Option<Instant>) -> bool {
        let Some(tx) = self.tx.take() else {
            return true;
        };
        // Log records go to stderr directly again (and the queue can close).
        let mut route = LOG_ROUTE.lock();
        if route.as_ref().is_some_and(|r| r.same_channel(&tx)) {
            *route = None;
        }
        drop(route);
        drop(tx);
        match limit {
            Some(t) => self.done.recv_deadline(t).is_ok(),
            None => self.done.recv().is_ok(),
        }
    }
}

/// The painter thread's view of stderr.
struct Screen {
    out: Box<dyn Write>,
    form: Form,
    status: Option<Status>,
    /// The status line is on screen.
    shown: bool,
    /// The cursor is at the start of a line (live form).
    at_line_start: bool,
    /// Streamed text not yet written (plain form: up to its line end).
    pending: String,
    redactor: StreamRedactor,
    frame: usize,
}

impl Screen {
    fn run(&mut self, rx: &Receiver<Paint>) {
        loop {
            let msg = if self.form.live && self.status.is_some() {
                match rx.recv_timeout(TICK) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => {
                        self.frame = self.frame.wrapping_add(1);
                        self.draw_status();
                        self.flush();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            };
            self.handle(msg);
        }
        self.end_text();
        self.erase_status();
        self.flush();
    }

    fn handle(&mut self, msg: Paint) {
        match msg {
            Paint::Line(line) => {
                self.erase_status();
                self.end_text();
                let line = secrets::redact(&line);
                self.write(&line);
                self.write("\n");
                self.at_line_start = true;
                self.draw_status();
            }
            Paint::Text(text) => {
                let text = self.redactor.push_string(text);
                if !text.is_empty() {
                    self.erase_status();
                    self.put_text(&text);
                    self.draw_status();
                }
            }
            Paint::EndText => {
                self.erase_status();
                self.end_text();
                self.draw_status();
            }
            Paint::Status(s) => {
                self.erase_status();
                self.status = s;
                self.draw_status();
            }
            Paint::Log(text) => {
                self.erase_status();
                self.end_text();
                let text = clean_text(&text);
                for l in text.lines() {
                    let l = secrets::redact(l);
                    self.write(&l);
                    self.write("\n");
                }
                self.draw_status();
            }
            Paint::Sync(ack) => {
                self.flush();
                let _ = ack.send(());
                return;
            }
        }
        self.flush();
    }

    /// Writes streamed text (live) or the complete lines of it (plain); the status line
    /// must be erased.
    fn put_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.form.live {
            self.write(text);
            self.at_line_start = text.ends_with('\n');
            return;
        }
        self.pending.push_str(text);
        if let Some(end) = self.pending.rfind('\n') {
            let rest = self.pending.split_off(end + 1);
            let lines = std::mem::replace(&mut self.pending, rest);
            self.write(&lines);
        }
    }

    /// Writes what the redactor held back and ends the streamed text's line; the status
    /// line must be erased.
    fn end_text(&mut self) {
        let held = self.redactor.finish_string();
        self.put_text(&held);
        if self.form.live {
            if !self.at_line_start {
                self.write("\n");
                self.at_line_start = true;
            }
        } else if !self.pending.is_empty() {
            let mut line = std::mem::take(&mut self.pending);
            line.push('\n');
            self.write(&line);
        }
    }

    fn erase_status(&mut self) {
        if self.shown {
            self.write(ERASE);
            self.shown = false;
        }
    }

    fn draw_status(&mut self) {
        if !self.form.live || !self.at_line_start {
            return;
        }
        let Some(s) = &self.status else { return };
        let spinner = SPINNER[self.frame % SPINNER.len()];
        let mut text = format!("{} · {}", s.label, elapsed(s.since.elapsed()));
        if !s.detail.is_empty() {
            text.push_str(" · ");
            text.push_str(&s.detail);
        }
        // Spinner and a space take two columns; the last column stays free so the
        // terminal never wraps the line.
        let room = (self.form.width)().saturating_sub(3);
        let text = cut(&text, room);
        let text = secrets::redact(&text);
        let style = self.form.status_style;
        // The cursor is at the start of an empty line, or of the status drawn before.
        let erase = if self.shown { ERASE } else { "" };
        let line = format!("{erase}{style}{spinner} {text}{style:#}");
        self.write(&line);
        self.shown = true;
    }

    fn write(&mut self, s: &str) {
        // A write error (stderr closed) has nowhere to be reported: progress is lost,
        // the run goes on.
        let _ = self.out.write_all(s.as_bytes());
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

/// Whether `c` may reach a terminal inside text from outside: no control characters
/// (escape sequences are stripped before) and no bidirectional overrides or invisible
/// marks that make text read differently than it is.
fn printable(c: char) -> bool {
    !c.is_control()
        && !matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Text from outside (streamed model text, log records) for the terminal: escape
/// sequences removed (`anstream`'s parser), `\n` and `\t` kept, other control characters
/// dropped.
pub fn clean_text(s: &str) -> String {
    anstream::adapter::strip_str(s)
        .to_string()
        .chars()
        .filter(|&c| c == '\n' || c == '\t' || printable(c))
        .collect()
}

/// A one-line field from outside (a path, a model name, an error's first line): escape
/// sequences removed, line ends and tabs shown as spaces, other control characters
/// dropped.
pub fn clean_line(s: &str) -> String {
    anstream::adapter::strip_str(s)
        .to_string()
        .chars()
        .filter_map(|c| match c {
            '\n' | '\t' => Some(' '),
            c if printable(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// `text` cut to at most `cols` characters (`…` marks a cut).
pub fn cut(text: &str, cols: usize) -> String {
    if text.chars().count() <= cols {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(cols.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A running time on the status line, steady in width while it grows: `0.4s`, `12.3s`,
/// then as [`duration`].
pub fn elapsed(d: Duration) -> String {
    if d.as_millis() < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        duration(d)
    }
}

/// A duration for people: `850ms`, `4.2s`, `2m05s`, `1h02m`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = d.as_secs() / 60;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    pub(crate) struct Buf(pub(crate) Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Buf {
        pub(crate) fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock()).into_owned()
        }
    }

    fn form(live: bool) -> Form {
        Form {
            live,
            width: || 40,
            status_style: anstyle::Style::new().dimmed(),
        }
    }

    fn paint(live: bool, msgs: Vec<Paint>, pause: Duration) -> String {
        let buf = Buf::default();
        let b2 = buf.clone();
        let mut p = Painter::start(move || Box::new(b2), form(live));
        let never = crossbeam_channel::never();
        for m in msgs {
            p.send(m, &never, None).unwrap();
        }
        std::thread::sleep(pause);
        assert!(p.finish(Some(Instant::now() + Duration::from_secs(5))));
        buf.text()
    }

    fn status(label: &str) -> Paint {
        Paint::Status(Some(Status {
            label: label.into(),
            since: Instant::now(),
            detail: "last output line that is much too long for forty columns".into(),
        }))
    }

    #[test]
    fn plain_form_writes_whole_lines_and_never_moves_the_cursor() {
        let out = paint(
            false,
            vec![
                Paint::Text("Let me ".into()),
                status("thinking"),
                Paint::Text("look.\nSecond".into()),
                Paint::Text(" line".into()),
                Paint::Line("$ ls".into()),
                Paint::Text("tail".into()),
                Paint::EndText,
                Paint::Status(None),
            ],
            Duration::from_millis(250),
        );
        assert_eq!(out, "Let me look.\nSecond line\n$ ls\ntail\n");
    }

    #[test]
    fn live_form_keeps_the_status_below_and_erases_it_at_the_end() {
        let buf = Buf::default();
        let b2 = buf.clone();
        let mut p = Painter::start(move || Box::new(b2), form(true));
        let never = crossbeam_channel::never();
        p.send(Paint::Line("$ sleep 1".into()), &never, None)
            .unwrap();
        p.send(status("sleep 1"), &never, None).unwrap();
        // Ticks redraw the status while nothing else comes.
        let t = Instant::now();
        while buf.text().matches(ERASE).count() < 2 {
            assert!(t.elapsed() < Duration::from_secs(10), "{:?}", buf.text());
            std::thread::sleep(Duration::from_millis(20));
        }
        p.send(Paint::Text("partial".into()), &never, None).unwrap();
        assert!(p.finish(Some(Instant::now() + Duration::from_secs(5))));
        let out = buf.text();
        assert!(out.starts_with("$ sleep 1\n"), "{out:?}");
        assert!(out.contains("sleep 1 · 0."), "{out:?}");
        // Cut to the width: no drawn status is longer than 40 columns.
        for frame in out.split(ERASE).filter(|f| f.contains('·')) {
            let frame = frame.rsplit('\n').next().unwrap_or_default();
            let plain = anstream::adapter::strip_str(frame).to_string();
            assert!(plain.chars().count() <= 40, "{plain:?}");
            assert!(plain.ends_with('…'), "{plain:?}");
        }
        // The status was erased before the text, which is finished at the end; the
        // status (drawn only at a line start) does not come back.
        assert!(out.ends_with(&format!("{ERASE}partial\n")), "{out:?}");
    }

    #[test]
    fn sync_answers_after_the_lines_before_it() {
        let buf = Buf::default();
        let b2 = buf.clone();
        let mut p = Painter::start(move || Box::new(b2), form(false));
        let never = crossbeam_channel::never();
        p.send(Paint::Line("one".into()), &never, None).unwrap();
        p.sync(&never, Some(Instant::now() + Duration::from_secs(5)))
            .unwrap();
        assert_eq!(buf.text(), "one\n");
        assert!(p.finish(None));
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(4240)), "4.2s");
        assert_eq!(duration(Duration::from_secs(125)), "2m05s");
        assert_eq!(duration(Duration::from_secs(3720)), "1h02m");
        assert_eq!(elapsed(Duration::from_millis(40)), "0.0s");
        assert_eq!(elapsed(Duration::from_secs(61)), "1m01s");
    }
}
