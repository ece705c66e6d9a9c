//! One-shot model helpers: `text/polish`, `git/commit-message`,
//! `thread/regenerate-title`.
//!
//! Each is a single tool-less streaming request through the provider layer
//! ([`crate::provider::start_stream`]) on the helpers pool, on the conversation's provider
//! and model when the params name a `thread_id` (else the workspace default). Nothing is
//! written to any conversation's history; only `thread/regenerate-title` (without
//! `dry_run`) stores a title, through the conversation's own session thread (the same
//! revision rules as `thread/rename`, followed by `thread/updated`). A replay provider
//! (a cassette) is refused: an extra request would desynchronize its script.

use crate::outbound::Responder;
use crate::provider::chat::{ChatMessage, ChatRequest, Role, StreamEvent};
use crate::provider::{self, Provider};
use crate::session::Host;
use crate::session::{SessionMsg, Snapshot};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_protocol::*;

type Refusal = (ErrorCode, String);

/// Longest text `text/polish` accepts, in characters.
pub const POLISH_MAX_CHARS: usize = 20_000;
/// Characters of a diff sent to the model by `git/commit-message`.
pub const DIFF_MAX_CHARS: usize = 64_000;
/// How long `text/polish` waits for the model.
pub const POLISH_TIMEOUT: Duration = Duration::from_secs(45);
/// How long `git/commit-message` and `thread/regenerate-title` wait.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

const POLISH_PROMPT: &str = "You tidy up dictated text. Fix speech-recognition mistakes, \
punctuation and clumsy wording, and keep the meaning, the language, technical terms and the \
level of detail exactly as they are. Reply with the tidied text alone: do not answer \
questions it contains, do not add remarks.";

const COMMIT_PROMPT: &str = "You write git commit messages. From the staged changes below, \
write a subject line of at most 72 characters in the imperative mood (use the Conventional \
Commits form `type(scope): summary` when the changes fit it), then, only when it helps, a \
blank line and a short body that says why. Reply with the commit message alone.";

fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

fn clip_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A copy of conversation `id` (its history loaded), from its session thread.
fn snapshot(shared: &Arc<Host>, id: &str) -> Result<Snapshot, Refusal> {
    let id = id.trim();
    if id.is_empty() {
        return Err(invalid("thread_id is empty"));
    }
    crate::util::check_thread_id("thread_id", id).map_err(|m| (ErrorCode::InvalidParams, m))?;
    let (tx, rx) = crate::util::reply::reply();
    shared
        .registry
        .dispatch(shared, id, SessionMsg::Snapshot { reply: tx });
    rx.recv_timeout(Duration::from_secs(30)).map_err(|_| {
        (
            ErrorCode::InternalError,
            format!("thread {id:?} did not answer"),
        )
    })?
}

/// The provider instance of `id` (built from the configuration on first use).
fn provider_of(shared: &Host, id: &str) -> Result<Arc<dyn Provider>, Refusal> {
    let cfg = shared.config();
    if !id.is_empty() && cfg.provider(id).is_none() {
        return Err(invalid(format!("provider: {id:?} is not configured")));
    }
    shared
        .providers
        .get(&cfg, id)
        .map_err(|e| (ErrorCode::Error, e))
}

/// `(provider, model)` of conversation `thread_id`, else of the workspace default.
fn selection(shared: &Arc<Host>, thread_id: Option<&str>) -> Result<(String, String), Refusal> {
    match thread_id.map(str::trim).filter(|t| !t.is_empty()) {
        Some(id) => {
            let snap = snapshot(shared, id)?;
            Ok((snap.thread.provider, snap.thread.model))
        }
        None => {
            let cfg = shared.config();
            let model = cfg.default_model();
            Ok(match cfg.alias(None, &model) {
                Some(a) => (a.provider, a.model),
                None => (cfg.default_provider(), model),
            })
        }
    }
}

/// One tool-less request; returns the streamed text. Errors name the provider.
fn ask(
    shared: &Host,
    provider_id: &str,
    model: &str,
    system: &str,
    user: String,
    max_output_tokens: u32,
    timeout: Duration,
) -> Result<String, Refusal> {
    let p = provider_of(shared, provider_id)?;
    if p.protocol() == "replay" {
        return Err((
            ErrorCode::Error,
            format!("provider {provider_id:?} replays a recorded cassette and cannot answer helper requests"),
        ));
    }
    if model.trim().is_empty() {
        return Err((
            ErrorCode::Error,
            format!("no model is selected for provider {provider_id:?}"),
        ));
    }
    let temperature = shared.config().agent().temperature;
    let req = ChatRequest {
        model: model.to_owned(),
        system: system.to_owned(),
        messages: vec![ChatMessage::text(Role::User, user)],
        tools: Default::default(),
        effort: None,
        max_output_tokens: Some(max_output_tokens),
        prompt_cache_key: None,
        output_schema: None,
        temperature,
    };
    let mut handle = provider::start_stream(p, req);
    let deadline = Instant::now() + timeout;
    let mut text = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match handle.recv_timeout(left) {
            Ok(StreamEvent::TextDelta { text: t }) => text.push_str(&t),
            Ok(StreamEvent::Retrying { .. }) => text.clear(),
            Ok(StreamEvent::Done { .. }) => return Ok(text),
            Ok(StreamEvent::Failed { error }) => {
                return Err((
                    ErrorCode::Error,
                    format!(
                        "the model request failed ({provider_id}/{model}): {}",
                        error.message
                    ),
                ))
            }
            Ok(_) => {}
            Err(_) => {
                handle.cancel();
                return Err((
                    ErrorCode::Error,
                    format!(
                        "the model did not answer within {} s ({provider_id}/{model})",
                        timeout.as_secs()
                    ),
                ));
            }
        }
    }
}

/// Removes `<think>…</think>` blocks, code fences around the whole answer and wrapping
/// quotes; trims.
pub fn clean_answer(raw: &str) -> String {
    let mut s = raw.to_owned();
    while let Some(start) = s.find("<think>") {
        match s[start..].find("</think>") {
            Some(end) => s.replace_range(start..start + end + "</think>".len(), ""),
            None => s.truncate(start),
        }
    }
    let mut t = s.trim();
    if t.starts_with("```") && t.ends_with("```") && t.len() >= 6 {
        let inner = &t[3..t.len() - 3];
        // Drop a language tag on the opening fence line.
        t = match inner.find('\n') {
            Some(nl) if !inner[..nl].trim().contains(' ') => &inner[nl + 1..],
            _ => inner,
        }
        .trim();
    }
    for q in ['"', '\'', '`'] {
        if t.len() >= 2 && t.starts_with(q) && t.ends_with(q) && !t[1..t.len() - 1].contains(q) {
            t = t[1..t.len() - 1].trim();
        }
    }
    t.to_owned()
}

/// `text/polish` (helpers pool).
pub fn polish(shared: &Arc<Host>, p: TextPolishParams, reply: Responder) {
    let run = || -> Result<TextPolishResult, Refusal> {
        let text = p.text.trim();
        if text.is_empty() {
            return Err(invalid("text is required"));
        }
        let n = text.chars().count();
        if n > POLISH_MAX_CHARS {
            return Err(invalid(format!(
                "text: {n} characters; at most {POLISH_MAX_CHARS}"
            )));
        }
        let (prov, model) = selection(shared, p.thread_id.as_deref())?;
        let budget = (n as u32 / 2 + 512).min(16_000);
        let out = clean_answer(&ask(
            shared,
            &prov,
            &model,
            POLISH_PROMPT,
            text.to_owned(),
            budget,
            POLISH_TIMEOUT,
        )?);
        if out.is_empty() {
            return Err((ErrorCode::Error, "the model returned no text".into()));
        }
        Ok(TextPolishResult { text: out })
    };
    match run() {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

/// `git/commit-message` (helpers pool).
pub fn commit_message(shared: &Arc<Host>, p: GitCommitMessageParams, reply: Responder) {
    let run = || -> Result<GitCommitMessageResult, Refusal> {
        if p.diff.trim().is_empty() {
            return Err(invalid("diff is required"));
        }
        let mut files: Vec<&str> = vec![];
        for f in p.files.iter().flatten().map(|f| f.trim()) {
            if !f.is_empty() && !files.contains(&f) && files.len() < 200 {
                files.push(f);
            }
        }
        let (prov, model) = selection(shared, p.thread_id.as_deref())?;
        let mut user = String::new();
        if !files.is_empty() {
            user.push_str("Files:\n");
            for f in &files {
                user.push_str(&format!("- {f}\n"));
            }
            user.push('\n');
        }
        let diff = clip_chars(&p.diff, DIFF_MAX_CHARS);
        user.push_str("Staged diff:\n");
        user.push_str(diff);
        if diff.len() < p.diff.len() {
            user.push_str("\n[diff truncated]");
        }
        let msg = clean_answer(&ask(
            shared,
            &prov,
            &model,
            COMMIT_PROMPT,
            user,
            600,
            HELPER_TIMEOUT,
        )?);
        if msg.is_empty() {
            return Err((
                ErrorCode::Error,
                "the model returned an empty message".into(),
            ));
        }
        Ok(GitCommitMessageResult { message: msg })
    };
    match run() {
        Ok(r) => reply.ok(&r),
        Err((c, m)) => reply.err(c, m),
    }
}

fn first_text(snap: &Snapshot, ty: &str, terminal: bool, last: bool) -> Option<String> {
    let found = |t: &crate::session::convert::TurnState| {
        t.items
            .iter()
            .find(|i| i.item_type == ty && (!terminal || i.terminal))
            .and_then(|i| i.text.clone())
            .filter(|t| !t.trim().is_empty())
    };
    if last {
        snap.turns.iter().rev().find_map(found)
    } else {
        snap.turns.iter().find_map(found)
    }
}

/// `thread/regenerate-title` (helpers pool).
pub fn regenerate_title(shared: &Arc<Host>, p: ThreadRegenerateTitleParams, reply: Responder) {
    let snap = match snapshot(shared, &p.thread_id) {
        Ok(s) => s,
        Err((c, m)) => return reply.err(c, m),
    };
    let run = || -> Result<(String, String, String), Refusal> {
        let Some(first_user) = first_text(&snap, "user_message", false, false) else {
            return Err((
                ErrorCode::Error,
                format!("thread {:?} has no user message to title", snap.thread.id),
            ));
        };
        let answer = first_text(&snap, "agent_message", true, true).unwrap_or_default();
        let clean = |s: &Option<String>| {
            s.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let prov = clean(&p.provider).unwrap_or_else(|| snap.thread.provider.clone());
        let model = clean(&p.model_override).unwrap_or_else(|| {
            if prov == snap.thread.provider {
                snap.thread.model.clone()
            } else {
                shared
                    .config()
                    .provider(&prov)
                    .map(|c| c.model.clone())
                    .unwrap_or_default()
            }
        });
        let raw = ask(
            shared,
            &prov,
            &model,
            crate::session::title::TITLE_PROMPT,
            format!(
                "User: {}\n\nAssistant: {}",
                clip_chars(&first_user, 2000),
                clip_chars(&answer, 2000)
            ),
            64,
            HELPER_TIMEOUT,
        )?;
        let title = crate::session::title::clean_title(&clean_answer(&raw));
        if title.is_empty() {
            return Err((ErrorCode::Error, "the model returned an empty title".into()));
        }
        Ok((prov, model, title))
    };
    let (prov, model, title) = match run() {
        Ok(t) => t,
        Err((c, m)) => return reply.err(c, m),
    };
    let mut result = ThreadRegenerateTitleResult {
        thread_id: snap.thread.id.clone(),
        provider: prov,
        model,
        title: title.clone(),
        persisted: false,
        persisted_title: snap.thread.title.clone(),
        thread: None,
    };
    if p.dry_run.unwrap_or(false) {
        return reply.ok(&result);
    }
    // Stored by the session thread, like `thread/rename`: the next revision.
    let id = snap.thread.id.clone();
    shared.registry.dispatch(
        shared,
        &id,
        SessionMsg::Call(Box::new(move |s| {
            let s = match s {
                Ok(s) => s,
                Err((c, m)) => return reply.err(c, m),
            };
            let revision = s.thread.title_revision + 1;
            let id = s.id.clone();
            let stored = s.persist(|st| st.set_title(&id, Some(&title), revision));
            match stored {
                Err((c, m)) => return reply.err(c, m),
                Ok(Some(row)) => s.thread = row,
                Ok(None) => {
                    s.thread.title = Some(title.clone());
                    s.thread.title_revision = revision;
                }
            }
            result.persisted = true;
            result.persisted_title = s.thread.title.clone();
            result.thread = Some(s.thread_wire());
            reply.ok(&result);
            s.notify_updated();
        })),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_cleaned() {
        assert_eq!(
            clean_answer("fix(desktop): keep search compact"),
            "fix(desktop): keep search compact"
        );
        assert_eq!(
            clean_answer("<think>reasoning</think>fix: guard nil"),
            "fix: guard nil"
        );
        assert_eq!(clean_answer("```\nfeat: add proxy\n```"), "feat: add proxy");
        assert_eq!(
            clean_answer("```text\nfeat: add proxy\n```"),
            "feat: add proxy"
        );
        assert_eq!(clean_answer("\"chore: bump deps\""), "chore: bump deps");
        assert_eq!(
            clean_answer("fix: guard nil\n\nExplains why."),
            "fix: guard nil\n\nExplains why."
        );
        assert_eq!(clean_answer("<think>only</think>"), "");
        assert_eq!(clean_answer("<think>unclosed"), "");
        assert_eq!(clip_chars("héllo", 2), "hé");
    }
}
