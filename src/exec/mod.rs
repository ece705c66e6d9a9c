//! `wuu exec`: a one-shot run for scripts and CI (spec `exec.md`). Under construction
//! in this revision: only `--help` works.

use std::process::ExitCode;

/// Entry point of `wuu exec`.
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("wuu exec [OPTIONS] [PROMPT]");
        return ExitCode::SUCCESS;
    }
    eprintln!("error: wuu exec is not available in this build yet");
    ExitCode::from(2)
}
