//! The skills of a host (spec `app-server.md`, `skill/list`; [`crate::tools::skill`]):
//! the discovered skills are cached and rescanned when a `SKILL.md` is added, removed or
//! edited (checked by metadata on each use), and the server side of the model's
//! `load_skill` tool, which counts every load in the store (`skill_uses`).

use super::Host;
use crate::tools::skill::{self, Skill};
use crate::tools::ToolOutcome;
use parking_lot::Mutex;
use std::sync::Arc;

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
pub fn skills(shared: &Host) -> Arc<Vec<Skill>> {
    let (root, home) = (&shared.opts.workdir, &shared.opts.home);
    let fp = skill::fingerprint(root, home);
    let mut cache = shared.live.skills.cache.lock();
    if let Some((old, list)) = cache.as_ref() {
        if *old == fp {
            return list.clone();
        }
    }
    let list = Arc::new(skill::discover(root, home));
    *cache = Some((fp, list.clone()));
    list
}

/// The `load_skill` spec, when the model may load any skill.
pub fn tool_spec(shared: &Host) -> Option<crate::provider::chat::ToolSpec> {
    skill::spec(&skills(shared))
}

/// Runs one `load_skill` call of conversation `thread_id` and counts the use.
pub fn run_tool(shared: &Host, thread_id: &str, arguments: &str) -> ToolOutcome {
    let list = skills(shared);
    let (outcome, used) = skill::run(arguments, &list);
    if let Some(s) = used {
        let counted = shared.open_store().and_then(|mut st| {
            st.record_skill_use(&s.name, s.source, thread_id, crate::util::now_ms())
        });
        if let Err(e) = counted {
            log::warn!("cannot count the use of skill {}: {e}", s.name);
        }
    }
    outcome
}
