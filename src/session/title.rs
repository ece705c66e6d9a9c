//! Automatic conversation titles (seed 003, title_revision paragraph).
//!
//! After a successful turn of a conversation without a title, a short model request
//! (the conversation's own provider and model, a tiny prompt, no tools) runs on a helper
//! thread; its answer comes back through the session mailbox
//! ([`SessionMsg::Title`]). The title is written only if the conversation still has no
//! title and its `title_revision` is unchanged since the request (a manual
//! `thread/rename` in between wins); it then gets the next revision and a
//! `thread/updated` is sent. `updated_at` is never touched (it is activity time). A
//! failed request leaves the title empty, so the next successful turn retries. Config
//! `agent.auto_title: false` turns it off.

use crate::provider;
use crate::provider::chat::{ChatMessage, ChatRequest, Role, StreamEvent};
use crate::session::{Session, SessionMsg};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use wuu_protocol::ThreadItem;

/// Longest title kept, in characters.
pub const MAX_TITLE_CHARS: usize = 80;
/// How long the title request may take.
pub const TITLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Characters of conversation text given to the model.
const CONTEXT_CHARS: usize = 2000;

/// The instruction of the title request.
pub const TITLE_PROMPT: &str = "Write a short title (at most six words) for the conversation \
below. Answer with the title only: no quotes, no trailing punctuation.";

fn in_flight() -> &'static Mutex<HashSet<String>> {
    static SET: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

fn clip(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn text_of(items: &[ThreadItem], ty: &str, terminal: bool) -> Option<String> {
    items
        .iter()
        .find(|i| i.item_type == ty && (!terminal || i.terminal))
        .and_then(|i| i.text.clone())
        .filter(|t| !t.trim().is_empty())
}

/// Hook called by the turn driver after a turn settled: starts a title request when
/// the turn succeeded, auto titles are on, the conversation has no title and no request
/// is already in flight for it.
pub fn after_turn(s: &Session, succeeded: bool) {
    if !succeeded || s.thread.title.as_deref().is_some_and(|t| !t.is_empty()) {
        return;
    }
    let cfg = s.shared.config();
    if cfg.agent().auto_title == Some(false) || !s.shared.opts.auto_titles || s.shared.is_closing()
    {
        return;
    }
    let first_user = s
        .turns
        .iter()
        .find_map(|t| text_of(&t.items, "user_message", false));
    let Some(first_user) = first_user else { return };
    let answer = s
        .turns
        .last()
        .and_then(|t| text_of(&t.items, "agent_message", true))
        .unwrap_or_default();
    let provider = match super::turn::provider_for(&s.shared, &s.thread.provider) {
        Ok(p) => p,
        Err(e) => {
            log::debug!("no title for {}: {e}", s.id);
            return;
        }
    };
    if provider.protocol() == "replay" {
        // A cassette is a fixed script of answers: an extra request would desync it.
        return;
    }
    if !in_flight().lock().insert(s.id.clone()) {
        return;
    }
    let req = ChatRequest {
        model: s.thread.model.clone(),
        system: TITLE_PROMPT.into(),
        messages: vec![ChatMessage::text(
            Role::User,
            format!(
                "User: {}\n\nAssistant: {}",
                clip(&first_user, CONTEXT_CHARS),
                clip(&answer, CONTEXT_CHARS)
            ),
        )],
        tools: Default::default(),
        effort: None,
        max_output_tokens: Some(64),
        prompt_cache_key: None,
        output_schema: None,
        temperature: s.shared.config().agent().temperature,
    };
    let shared = s.shared.clone();
    let id = s.id.clone();
    let expected_revision = s.thread.title_revision;
    let spawned = crate::util::spawn("wuu-title".into(), move || {
        let title = request(provider, req);
        shared.registry.dispatch(
            &shared,
            &id,
            SessionMsg::Title {
                expected_revision,
                title,
            },
        );
    });
    if let Err(e) = spawned {
        log::warn!("cannot spawn the title thread: {e}");
        in_flight().lock().remove(&s.id);
    }
}

fn request(p: std::sync::Arc<dyn provider::Provider>, req: ChatRequest) -> Result<String, String> {
    let mut handle = provider::start_stream(p, req);
    let deadline = Instant::now() + TITLE_TIMEOUT;
    let mut text = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match handle.recv_timeout(left) {
            Ok(StreamEvent::TextDelta { text: t }) => text.push_str(&t),
            Ok(StreamEvent::Done { .. }) => break,
            Ok(StreamEvent::Failed { error }) => return Err(error.message),
            Ok(_) => {}
            Err(_) => return Err("the title request timed out or ended early".into()),
        }
    }
    let title = clean_title(&text);
    if title.is_empty() {
        Err("the model returned an empty title".into())
    } else {
        Ok(title)
    }
}

/// First non-empty line, without surrounding quotes, `Title:` prefixes or trailing
/// punctuation, control characters (a tab becomes a space; `thread/rename` refuses
/// them from clients, and a model's answer gets the same rule), at most
/// [`MAX_TITLE_CHARS`] characters.
pub fn clean_title(raw: &str) -> String {
    let line = raw
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = line
        .strip_prefix("Title:")
        .or_else(|| line.strip_prefix("title:"))
        .unwrap_or(line)
        .trim();
    let line = line
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '*' | '#' | '“' | '”'))
        .trim_end_matches(['.', '。', '!', ':'])
        .trim();
    let line: String = line
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .filter(|c| !c.is_control())
        .collect();
    clip(line.trim(), MAX_TITLE_CHARS)
}

/// Applies a title answer in the session (the [`SessionMsg::Title`] handler).
pub fn apply(s: &mut Session, expected_revision: u64, title: Result<String, String>) {
    in_flight().lock().remove(&s.id);
    let title = match title {
        Ok(t) => t,
        Err(e) => {
            log::info!(
                "automatic title of {} failed (retried after the next turn): {e}",
                s.id
            );
            return;
        }
    };
    if s.thread.title.as_deref().is_some_and(|t| !t.is_empty())
        || s.thread.title_revision != expected_revision
    {
        return; // a manual title won
    }
    let id = s.id.clone();
    let written = match s.store.as_mut() {
        Some(st) => match st
            .set_title_if_empty(&id, &title, expected_revision)
            .inspect(|_| {
                s.shared.threads_changed();
            }) {
            Ok((Some(row), written)) => {
                s.thread.title = row.title;
                s.thread.title_revision = row.title_revision;
                written
            }
            Ok((None, _)) => false,
            Err(e) => {
                log::warn!("storing the title of {id}: {e}");
                false
            }
        },
        None => {
            s.thread.title = Some(title);
            s.thread.title_revision = expected_revision + 1;
            true
        }
    };
    if written {
        s.notify_updated();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_cleaned() {
        assert_eq!(
            clean_title("\n  \"Fix the parser.\"\nmore"),
            "Fix the parser"
        );
        assert_eq!(clean_title("Title: Rust paging"), "Rust paging");
        assert_eq!(clean_title(""), "");
        assert_eq!(clean_title(&"x".repeat(200)).len(), MAX_TITLE_CHARS);
        assert_eq!(
            clean_title("Fix\r the\u{1b}[31m\tparser\u{0}\u{7f}"),
            "Fix the[31m parser"
        );
        assert_eq!(clean_title("\u{1b}\r\u{0}"), "");
    }
}
