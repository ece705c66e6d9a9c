//! The environment of an ACP agent child (spec `engines.md` §1.6, issue rule "built, not
//! inherited"): the fixed base every engine child gets, the variables the engine reads
//! for its own credentials and configuration, and `agent.shell_env.keep`; nothing else.

use crate::engine::child::{build_env, ChildSettings};
use std::ffi::OsString;
use std::path::Path;

/// Variables catalogue engine `id` reads for its own login, endpoint and config
/// directory (passed when set): Cursor `CURSOR_API_KEY`; Grok `XAI_API_KEY`,
/// `GROK_API_KEY`; Pi `PI_CODING_AGENT_DIR`; Devin, Hermes and Antigravity keep their
/// login in their own files below `HOME`.
pub fn engine_vars(id: &str) -> &'static [&'static str] {
    match id {
        "cursor" => &["CURSOR_API_KEY"],
        "grok" => &["XAI_API_KEY", "GROK_API_KEY"],
        "pi" => &["PI_CODING_AGENT_DIR"],
        _ => &[],
    }
}

/// The whole environment of an ACP child of engine `id`: the shared engine-child base
/// ([`build_env`]: `PATH` with the binary's directory first, [`BASE_ENV`], every
/// `LC_*`), [`engine_vars`], and the variables named in `agent.shell_env.keep`.
///
/// [`BASE_ENV`]: crate::engine::child::BASE_ENV
pub fn child_env(id: &str, binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
    let own: Vec<String> = engine_vars(id).iter().map(|v| (*v).to_owned()).collect();
    build_env(binary, settings, &own)
}
