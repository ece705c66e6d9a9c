//! The conversation of a run (spec `exec.md` §2.7): `thread/start`, `thread/resume` or
//! `thread/fork` by mode, the `thread.*` event, and the notes and refusals for flags
//! that do not apply to an existing conversation.

use super::cancel::cancel_fail;
use super::cli::Mode;
use super::events::{Event, ThreadInfo};
use super::exit::{code, Fail};
use super::run::Runner;
use serde_json::{json, Value};

impl Runner {
    /// `thread/start|resume|fork`; emits the thread event; returns the thread object.
    pub(super) fn acquire_thread(&mut self) -> Result<Value, Fail> {
        let o = self.opts.clone();
        let (thread, make): (Value, fn(ThreadInfo) -> Event) = match &o.mode {
            Mode::Start => {
                let mut p = json!({"cwd": self.workdir.to_string_lossy()});
                if let Some(v) = &o.provider {
                    p["provider"] = json!(v);
                }
                if let Some(v) = &o.model {
                    p["model"] = json!(v);
                }
                if let Some(v) = &o.engine {
                    p["engine"] = json!(v);
                }
                if let Some(v) = &o.permission_mode {
                    p["permission_mode"] = json!(v);
                }
                if o.ephemeral {
                    p["ephemeral"] = json!(true);
                }
                let r = self.rpc("thread/start", p)?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadStarted,
                )
            }
            Mode::Resume(id) => {
                let mut p = json!({"response_only": true});
                if let Some(id) = id {
                    p["session_id"] = json!(id);
                }
                let r = self.rpc("thread/resume", p)?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadResumed,
                )
            }
            Mode::Fork(id) => {
                let r = self.rpc("thread/fork", json!({"thread_id": id}))?;
                (
                    r.get("thread").cloned().unwrap_or_default(),
                    Event::ThreadForked,
                )
            }
        };
        let s = |k: &str| {
            thread
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let info = ThreadInfo {
            thread_id: s("id"),
            provider: s("model_provider"),
            model: s("model"),
            cwd: s("cwd"),
            permission_mode: s("permission_mode"),
        };
        if info.thread_id.is_empty() {
            return Err(Fail::new(
                code::PROTOCOL,
                "the app-server returned a thread without id",
            ));
        }
        self.proj.thread_id = info.thread_id.clone();
        if o.mode != Mode::Start {
            if o.ephemeral {
                eprintln!("note: --ephemeral only applies to new conversations");
            }
            if o.engine.is_some() {
                eprintln!("note: --engine only applies to new conversations");
            }
            for (flag, want, have) in [
                ("--provider", &o.provider, &info.provider),
                ("--model", &o.model, &info.model),
            ] {
                if let Some(w) = want {
                    if w != have {
                        eprintln!(
                            "note: {flag} {w} is not applied to an existing conversation; {} keeps {have}",
                            info.thread_id
                        );
                    }
                }
            }
            if let Some(m) = &o.permission_mode {
                if *m != info.permission_mode {
                    return Err(Fail::new(
                        code::INVALID_INPUT,
                        format!(
                            "--permission-mode {m}: conversation {} runs in {:?}; the mode of an existing conversation cannot be changed",
                            info.thread_id, info.permission_mode
                        ),
                    ));
                }
            }
        }
        self.emit(make(info)).map_err(cancel_fail)?;
        Ok(thread)
    }
}
