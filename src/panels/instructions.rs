//! `instructions/list`: the instruction texts the built-in engine puts into the system
//! prompt of a conversation at the workspace root, in prompt order — the `AGENTS.md`
//! files ([`crate::engine::context::agents_files`], scope `project`) and the user
//! config's `instructions` text (scope `global`, `path` = the user config file,
//! `name` = `instructions`).

use crate::outbound::Responder;
use crate::session::Host;
use std::sync::Arc;
use wuu_protocol::{InstructionFile, InstructionsListParams, InstructionsListResult};

/// `instructions/list` (views pool).
pub fn list(shared: &Arc<Host>, p: InstructionsListParams, reply: Responder) {
    let with_content = p.include_content.unwrap_or(true);
    let root = &shared.opts.workdir;
    let mut files: Vec<InstructionFile> = crate::engine::context::agents_files(root, root)
        .into_iter()
        .map(|(path, text)| InstructionFile {
            name: std::path::Path::new(&path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "AGENTS.md".into()),
            path,
            source: "project".into(),
            scope: "project".into(),
            bytes: text.len() as u64,
            content: with_content.then_some(text),
        })
        .collect();
    let cfg = shared.config();
    if let Some(text) = cfg
        .config
        .instructions
        .clone()
        .filter(|t| !t.trim().is_empty())
    {
        files.push(InstructionFile {
            path: cfg.config_path.to_string_lossy().into_owned(),
            name: "instructions".into(),
            source: "user".into(),
            scope: "global".into(),
            bytes: text.len() as u64,
            content: with_content.then_some(text),
        });
    }
    reply.ok(&InstructionsListResult { files })
}
