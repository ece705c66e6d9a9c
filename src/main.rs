//! The `wuu` command line (lexopt): `app-server`, `exec`, `debug app-server …`.
//!
//! stdout belongs to the protocol (app-server) or to the result (exec); logs go to
//! stderr through `env_logger` (`RUST_LOG`).

use lexopt::prelude::*;
use std::path::PathBuf;
use std::process::ExitCode;
use wuu::outbound::transport;
use wuu::server;
use wuu::session::ServerOptions;

const USAGE: &str = "wuu — an agent host for AI coding agents

Usage:
  wuu app-server [--workdir DIR] [--config FILE] [--safe-mode]   (DIR defaults to the current directory)
                 [--workspace-id ID] [--instance-id ID] [--host local|cloud]
                 [--provider ID] [--model ID] [--no-tools]
  wuu app-server generate-json-schema --out DIR
  wuu exec [OPTIONS] [PROMPT]            (see `wuu exec --help`)
  wuu debug app-server initialize --workdir DIR [--config FILE]
  wuu debug app-server send --workdir DIR [--config FILE] METHOD PARAMS_JSON
  wuu --version

Environment:
  WUU_HOME   where the database, traces and user config live (default ~/.wuu)
  RUST_LOG   log filter for stderr (e.g. info, wuu=debug)
  WUU_PARK_AFTER_MS  idle time after which a conversation's session thread ends (default 60000)
";

fn main() -> ExitCode {
    // The command launcher: nothing else (no logger, no threads) runs before it.
    let mut raw = std::env::args_os();
    if raw.nth(1).as_deref() == Some(std::ffi::OsStr::new(wuu::tools::sandbox::LAUNCHER_ARG)) {
        return wuu::tools::sandbox::launcher_main(raw.collect());
    }
    wuu::tools::sandbox::host_binary_started();
    wuu::tools::sandbox::protect_host();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        // Records go to stderr, through `wuu exec`'s progress painter while it owns it.
        .target(env_logger::Target::Pipe(Box::new(
            wuu::exec::painter::LogSink,
        )))
        .format(|buf, record| {
            use std::io::Write;
            // The HTTP client's trace lines are hex dumps of raw wire bytes, 16 to a
            // line: a key in a header (or a secret in a streamed body) would be cut
            // across lines the redactor sees one at a time. They are never written.
            if record.level() == log::Level::Trace && record.target().starts_with("ureq") {
                return Ok(());
            }
            // Every log line passes the secret redactor and the pattern redactor
            // (keys in request params such as `api_key`).
            let msg = record.args().to_string();
            let msg = wuu::util::redact(&wuu::secrets::redact(&msg));
            writeln!(
                buf,
                "[{} {:<5} {}] {msg}",
                buf.timestamp_millis(),
                record.level(),
                record.target()
            )
        })
        .init();
    let mut args = std::env::args_os().skip(1);
    let Some(cmd) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest: Vec<std::ffi::OsString> = args.collect();
    let result = match cmd.to_str().unwrap_or("") {
        "app-server" => app_server(rest),
        "exec" => return wuu::exec::main(rest),
        "debug" => debug(rest),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(0)
        }
        "-V" | "--version" => {
            println!("wuu {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        other => Err(format!("unknown command {other:?}; see `wuu --help`")),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", wuu::secrets::redact(&e));
            ExitCode::from(2)
        }
    }
}

struct ServerArgs {
    workdir: Option<PathBuf>,
    config: Option<PathBuf>,
    safe_mode: bool,
    workspace_id: Option<String>,
    instance_id: Option<String>,
    host: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    no_tools: bool,
    out: Option<PathBuf>,
    positional: Vec<String>,
}

fn parse_server_args(args: Vec<std::ffi::OsString>) -> Result<ServerArgs, String> {
    let mut p = lexopt::Parser::from_args(args);
    let mut a = ServerArgs {
        workdir: None,
        config: None,
        safe_mode: false,
        workspace_id: None,
        instance_id: None,
        host: None,
        provider: None,
        model: None,
        no_tools: false,
        out: None,
        positional: vec![],
    };
    fn text(p: &mut lexopt::Parser, flag: &str) -> Result<String, String> {
        let v = p
            .value()
            .map_err(|e| e.to_string())?
            .string()
            .map_err(|_| format!("--{flag}: not valid UTF-8"))?;
        let v = v.trim().to_owned();
        if v.is_empty() {
            return Err(format!("--{flag}: must not be empty"));
        }
        Ok(v)
    }
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("workdir") | Long("cd") | Short('C') => {
                a.workdir = Some(p.value().map_err(|e| e.to_string())?.into())
            }
            Long("config") => a.config = Some(p.value().map_err(|e| e.to_string())?.into()),
            Long("safe-mode") => a.safe_mode = true,
            Long("workspace-id") => a.workspace_id = Some(text(&mut p, "workspace-id")?),
            Long("instance-id") => a.instance_id = Some(text(&mut p, "instance-id")?),
            Long("host") => a.host = Some(text(&mut p, "host")?),
            Long("provider") => a.provider = Some(text(&mut p, "provider")?),
            Long("model") => a.model = Some(text(&mut p, "model")?),
            Long("no-tools") => a.no_tools = true,
            Long("out") => a.out = Some(p.value().map_err(|e| e.to_string())?.into()),
            Long("help") | Short('h') => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            Value(v) => a.positional.push(v.string().map_err(|e| e.to_string())?),
            other => return Err(other.unexpected().to_string()),
        }
    }
    Ok(a)
}

fn options(a: &ServerArgs) -> Result<ServerOptions, String> {
    let workdir = match &a.workdir {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| e.to_string())?,
    };
    let workdir = workdir
        .canonicalize()
        .map_err(|e| format!("--workdir {}: {e}", workdir.display()))?;
    if !workdir.is_dir() {
        return Err(format!(
            "--workdir {} is not a directory",
            workdir.display()
        ));
    }
    let mut o = ServerOptions::new(workdir);
    o.config_file = a.config.clone();
    o.safe_mode = a.safe_mode;
    o.workspace_id = a.workspace_id.clone();
    o.instance_id = a.instance_id.clone();
    if let Some(h) = &a.host {
        o.host = h.clone();
    }
    o.provider = a.provider.clone();
    o.model = a.model.clone();
    o.no_tools = a.no_tools;
    o.validate()?;
    Ok(o)
}

fn app_server(args: Vec<std::ffi::OsString>) -> Result<u8, String> {
    let a = parse_server_args(args)?;
    if a.positional.first().map(String::as_str) == Some("generate-json-schema") {
        let out = a.out.ok_or("generate-json-schema needs --out DIR")?;
        let files = wuu::server::schema::write_schemas(&out)?;
        eprintln!("wrote {files} schema files to {}", out.display());
        return Ok(0);
    }
    if let Some(p) = a.positional.first() {
        return Err(format!("unexpected argument {p:?}"));
    }
    let opts = options(&a)?;
    let stdin = std::io::stdin();
    // The writer writes stdout's file descriptor itself (a duplicate): std's `Stdout` is
    // a line writer, which scans every byte written for newlines and sends a frame and
    // its `\n` as two writes. Our writer already batches (its own buffer, flushed when
    // the outbox is momentarily empty) and ends each frame in the same write.
    let sink: Box<dyn transport::FrameSink> =
        match std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned() {
            Ok(fd) => Box::new(transport::WriteSink(std::io::BufWriter::with_capacity(
                256 * 1024,
                std::fs::File::from(fd),
            ))),
            Err(e) => {
                log::warn!("cannot duplicate stdout ({e}); writing through std's stdout");
                Box::new(transport::WriteSink(std::io::BufWriter::with_capacity(
                    256 * 1024,
                    std::io::stdout(),
                )))
            }
        };
    let code = server::serve(
        opts,
        Box::new(transport::CappedLines::new(
            std::io::BufReader::with_capacity(256 * 1024, stdin),
            transport::MAX_LINE_BYTES,
        )),
        sink,
        |shared| {
            // A broken output (the client closed our stdout: EPIPE) ends the connection
            // even while stdin stays open: active turns are interrupted and settled,
            // then the process exits 1.
            let watched = shared.clone();
            let watch = wuu::util::spawn("wuu-output-watch".into(), move || loop {
                std::thread::sleep(std::time::Duration::from_millis(50));
                if watched.host.outbox.is_broken() {
                    log::warn!("the output was closed by the client: shutting down");
                    watched.shutdown(None);
                    std::process::exit(1);
                }
                if watched.host.is_closing() {
                    return;
                }
            });
            if let Err(e) = watch {
                log::warn!("cannot watch the output: {e}");
            }
            // SIGTERM/SIGINT take the graceful path: settle, flush, exit 0.
            let mut signals = match signal_hook::iterator::Signals::new([
                signal_hook::consts::SIGTERM,
                signal_hook::consts::SIGINT,
            ]) {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("cannot install signal handlers: {e}");
                    return;
                }
            };
            wuu::util::spawn("wuu-signals".into(), move || {
                if let Some(sig) = signals.forever().next() {
                    log::info!("signal {sig}: shutting down");
                    shared.shutdown(None);
                    std::process::exit(0);
                }
            })
            .expect("spawn signal thread");
        },
    );
    Ok(code as u8)
}

fn debug(args: Vec<std::ffi::OsString>) -> Result<u8, String> {
    let mut it = args.into_iter();
    if it.next().and_then(|s| s.into_string().ok()).as_deref() != Some("app-server") {
        return Err("usage: wuu debug app-server (initialize|send) --workdir DIR …".into());
    }
    let a = parse_server_args(it.collect())?;
    let opts = options(&a)?;
    let (method, params) = match a.positional.first().map(String::as_str) {
        Some("initialize") => (
            "initialize".to_owned(),
            serde_json::json!({"protocol_version": wuu_protocol::PROTOCOL_VERSION, "client": {"name": "wuu-debug"}}),
        ),
        Some("send") => {
            let method = a.positional.get(1).ok_or("send needs METHOD")?.clone();
            let raw = a.positional.get(2).map(String::as_str).unwrap_or("{}");
            let params: serde_json::Value =
                serde_json::from_str(raw).map_err(|e| format!("PARAMS_JSON is not JSON: {e}"))?;
            (method, params)
        }
        _ => return Err("usage: wuu debug app-server (initialize|send) …".into()),
    };
    let client = server::MemoryClient::start(opts)?;
    if method != "initialize" {
        client.send(
            "init",
            "initialize",
            serde_json::json!({"client": {"name": "wuu-debug"}}),
        )?;
        client.wait_response("init", |_| {})?;
    }
    client.send("1", &method, params)?;
    let resp = client.wait_response("1", |n| log::info!("notification: {n}"))?;
    let text = serde_json::to_vec_pretty(&resp).map_err(|e| e.to_string())?;
    println!(
        "{}",
        String::from_utf8_lossy(&wuu::util::escape_line_separators(text))
    );
    client.close();
    Ok(if resp.get("error").is_some() { 1 } else { 0 })
}
