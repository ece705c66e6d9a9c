//! `skill/list` and the server side of the model's `load_skill` tool
//! ([`crate::tools::skill`]): the discovered skills are cached and rescanned when a
//! `SKILL.md` is added, removed or edited (checked by metadata on each use), and every
//! load is counted in the store (`skill_uses`) for `settings/usage`'s `skill_usage` and
//! `skill/list`'s `use_count`.

use crate::server::{Responder, Shared};
use crate::tools::skill::{self, Skill};
use crate::tools::ToolOutcome;
use parking_lot::Mutex;
use std::sync::Arc;
use wuu_protocol::{ErrorCode, SkillListResult, SkillSummary};

type Fingerprint = Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)>;

/// The discovered skills of one server.
#[derive(Default)]
pub struct Catalog {
    cache: Mutex<Option<(Fingerprint, Arc<Vec<Skill>>)>>,
}

impl Catalog {
    /// Forgets the cached scan.
    pub fn invalidate(&self) {
        self.cache.lock().take();
    }
}

/// The skills in force (project `.wuu/skills/`, user `$WUU_HOME/skills/`).
pub fn skills(shared: &Shared) -> Arc<Vec<Skill>> {
    let (root, home) = (&shared.opts.workdir, &shared.opts.home);
    let fp = skill::fingerprint(root, home);
    let mut cache = shared.panels.skills.cache.lock();
    if let Some((old, list)) = cache.as_ref() {
        if *old == fp {
            return list.clone();
        }
    }
    let list = Arc::new(skill::discover(root, home));
    *cache = Some((fp, list.clone()));
    list
}

/// `skill/list` (views pool).
pub fn list(shared: &Arc<Shared>, reply: Responder) {
    let found = skills(shared);
    let counts = match wuu_store::Store::open_home(&shared.opts.home)
        .and_then(|s| s.skill_use_counts(None))
    {
        Ok(c) => c,
        Err(e) => {
            return reply.err(
                ErrorCode::InternalError,
                format!("cannot read skill use counts: {e}"),
            )
        }
    };
    let skills = found
        .iter()
        .map(|s| {
            let used = counts
                .iter()
                .find(|c| c.name == s.name && c.source == s.source);
            SkillSummary {
                name: s.name.clone(),
                description: s.description.clone(),
                when_to_use: s.when_to_use.clone(),
                source: s.source.into(),
                path: Some(s.path.to_string_lossy().into_owned()),
                argument_hint: s.argument_hint.clone(),
                allowed_tools: s.allowed_tools.clone(),
                user_invocable: s.user_invocable,
                disable_model_invoke: s.disable_model_invoke,
                version: s.version.clone(),
                use_count: used.map(|c| c.count).unwrap_or(0),
                last_used_at: used.map(|c| crate::util::rfc3339(c.last_used_at_ms)),
            }
        })
        .collect();
    reply.ok(&SkillListResult { skills })
}

/// The `load_skill` spec, when the model may load any skill.
pub fn tool_spec(shared: &Shared) -> Option<crate::provider::ToolSpec> {
    skill::spec(&skills(shared))
}

/// Runs one `load_skill` call of conversation `thread_id` and counts the use.
pub fn run_tool(shared: &Shared, thread_id: &str, arguments: &str) -> ToolOutcome {
    let list = skills(shared);
    let (outcome, used) = skill::run(arguments, &list);
    if let Some(s) = used {
        let counted = wuu_store::Store::open_home(&shared.opts.home).and_then(|mut st| {
            st.record_skill_use(&s.name, s.source, thread_id, crate::util::now_ms())
        });
        if let Err(e) = counted {
            log::warn!("cannot count the use of skill {}: {e}", s.name);
        }
    }
    outcome
}
