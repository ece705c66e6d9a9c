//! `skill/list`: the skills in force ([`crate::session::skills`]) with their use counts
//! from the store (`skill_uses`, also behind `settings/usage`'s `skill_usage`).

use crate::outbound::Responder;
use crate::session::skills::skills;
use crate::session::Host;
use std::sync::Arc;
use wuu_protocol::{ErrorCode, SkillListResult, SkillSummary};

/// `skill/list` (views pool).
pub fn list(shared: &Arc<Host>, reply: Responder) {
    let found = skills(shared);
    let counts = match shared.open_store().and_then(|s| s.skill_use_counts(None)) {
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
