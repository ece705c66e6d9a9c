//! `wuu exec`: one task, non-interactively, for scripts and CI (spec `exec.md`).
//!
//! exec starts the app-server core in-process ([`crate::server::MemoryClient`]) and
//! drives it with the ordinary protocol: `initialize` (client `wuu-exec`) →
//! `thread/start|resume|fork` → one `run/start` → notifications until the terminal
//! `run/updated` of its run → `result`. With `--json` the notifications are projected
//! onto the JSONL stream of [`events`]; otherwise progress goes to stderr and the final
//! message to stdout ([`human`]).
//!
//! Threads: the main thread (requests, projection, deadlines, signals), the
//! subscription pump ([`client`]), the stdout writer ([`writer`]), a signal thread, and
//! a stdin reader when the prompt comes from stdin. Every wait of the main thread also
//! watches SIGINT/SIGTERM and the `--timeout` deadline, so a stalled provider or a
//! consumer that stopped reading stdout cannot keep the process alive past the deadline.
//!
//! Exit codes ([`code`], spec §3) always agree with `result.status`: 0 `completed`,
//! 3 `permission_denied`, 4 `timeout`, 5 `interrupted`, anything else `failed`.
//!
//! Modules: [`cli`] (arguments), `run` (the invocation), `setup` and `thread` (before the
//! run), [`project`] and [`events`] (the stream), `output`, [`writer`] (stdout), [`human`]
//! and [`painter`] (progress on stderr), `cancel` (signals, deadline, interrupt), `result` and `schema` (the
//! terminal result), `exit` (exit codes), [`client`] (the in-process connection).

mod cancel;
pub mod cli;
pub mod client;
pub mod events;
mod exit;
pub mod human;
mod output;
pub mod painter;
pub mod project;
mod result;
mod run;
mod schema;
mod setup;
mod thread;
pub mod writer;

use cancel::{install_signals, read_stdin, Cancel, Ctl};
use cli::{Command, InvalidInput, Options};
use exit::Fail;
pub use exit::{code, status_of};
use output::Out;
use project::Projector;
use run::Runner;
pub use schema::load_schema;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use writer::Writer;

/// How long exec waits for the run to settle after it asked for an interrupt (the
/// server gives a command 2 s between SIGTERM and SIGKILL).
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);

/// How long queued output may take to reach a consumer once the run is over and the
/// deadline passed or a signal arrived.
pub const OUTPUT_GRACE: Duration = Duration::from_millis(750);

/// How long the in-process server may take to shut down at the end.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Entry point of `wuu exec` (args after `exec`). Never returns for a run: the process
/// exits with the code of the run once output is flushed (bounded, see
/// [`OUTPUT_GRACE`]).
pub fn main(args: Vec<OsString>) -> ExitCode {
    let opts = match cli::parse(args) {
        Ok(Command::Help) => {
            // Help is the command's whole output: nothing else is on stdout yet.
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = out
                .write_all(cli::HELP.as_bytes())
                .and_then(|_| out.flush());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Run(o)) => *o,
        Err(e) => {
            eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    let code = run(opts);
    std::process::exit(code)
}

/// Runs one invocation; returns the exit code.
fn run(opts: Options) -> i32 {
    let signals = install_signals();
    let mut ctl = Ctl {
        signals,
        deadline: opts.timeout.map(|t| Instant::now() + t),
        cancelled: None,
    };
    // A workdir that cannot be resolved fails inside the run (spec §2.9, tier 2: a
    // `result` in JSON mode), after the checks of tier 1 below.
    let workdir = resolve_workdir(&opts);
    // Tier 1 (spec §2.9): invalid input before any output: stderr only, exit 2.
    if opts.config.is_some() && opts.ignore_user_config {
        eprintln!("error: --config and --ignore-user-config cannot be combined");
        return code::INVALID_INPUT;
    }
    let has_attachments = !opts.images.is_empty() || !opts.files.is_empty();
    let stdin_text = if cli::wants_stdin(
        &opts.prompt_args,
        std::io::IsTerminal::is_terminal(&std::io::stdin()),
    ) {
        match read_stdin(&mut ctl) {
            Ok(t) => Some(t),
            Err(c) => {
                eprintln!(
                    "error: {} while reading the prompt from stdin",
                    if c == Cancel::Timeout {
                        "timed out"
                    } else {
                        "interrupted"
                    }
                );
                return c.code();
            }
        }
    } else {
        None
    };
    let prompt =
        match cli::combine_prompt(&opts.prompt_args, stdin_text.as_deref(), has_attachments) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {}", crate::secrets::redact(&e.to_string()));
                return code::INVALID_INPUT;
            }
        };
    // `--quiet`: only errors, also from the log (unless RUST_LOG asks for more).
    if opts.quiet && !opts.json && std::env::var_os("RUST_LOG").is_none() {
        log::set_max_level(log::LevelFilter::Error);
    }
    let human = if opts.json {
        None
    } else {
        Some(human::Human::new(human::Look::for_stderr(
            opts.color, opts.quiet,
        )))
    };
    let out = Out {
        writer: Writer::stdout(),
        human,
        result: None,
        stuck: false,
    };
    let (workdir, bad_workdir) = match workdir {
        Ok(w) => (w, None),
        Err(e) => (PathBuf::new(), Some(e)),
    };
    let mut r = Runner {
        opts,
        workdir,
        ctl,
        out,
        conn: None,
        proj: Projector::default(),
        schema: None,
        settled: None,
    };
    let outcome = match bad_workdir {
        Some(e) => Err(Fail::new(code::INVALID_INPUT, e.to_string())),
        None => r.execute(prompt),
    };
    let code = match outcome {
        Ok(code) => code,
        Err(f) => r.fail_result(f),
    };
    r.finish(code)
}

fn resolve_workdir(opts: &Options) -> Result<PathBuf, InvalidInput> {
    let cwd =
        std::env::current_dir().map_err(|e| InvalidInput(format!("current directory: {e}")))?;
    let w = match &opts.workdir {
        Some(w) => cwd.join(w),
        None => cwd,
    };
    let w = w
        .canonicalize()
        .map_err(|e| InvalidInput(format!("--cd {}: {e}", w.display())))?;
    if !w.is_dir() {
        return Err(InvalidInput(format!(
            "--cd {}: not a directory",
            w.display()
        )));
    }
    Ok(w)
}
