//! Browser activities (`activity/list|takeover|release|stop`, notifications
//! `activity/started|updated|control_changed|stopped`; wire types in
//! `wuu_protocol::activity`, spec `app-server.md` §3.7).
//!
//! A conversation's first browser request starts its activity (controller `agent`, a
//! fresh lease token); every browser request of the conversation carries the activity's
//! `activity_id` and current `lease_token` (see `session::browser`). `takeover` hands
//! control to the user at once: the lease is void, a pending browser request is
//! cancelled (`browser/request_cancelled {reason: "takeover"}`), later ones are refused
//! until `release`, and the conversation's turn is interrupted. `release` gives control
//! back with a new lease token; `stop` ends the activity for good. Each change is
//! recorded in the store (`activities`, as wire JSON) so `activity/list` after a restart
//! reports the activities of the ended process as `stopped`, never as live.

use crate::outbound::Responder;
use crate::session::Host;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wuu_protocol::*;

struct Entry {
    session: ActivitySession,
    /// The current lease; `None` while the user holds control or after stop.
    lease: Option<String>,
    /// Set when the lease is revoked: waiting browser requests stop.
    revoked: Arc<AtomicBool>,
}

/// The activities this process drives (one per server).
#[derive(Default)]
pub struct Activities {
    entries: Mutex<HashMap<String, Entry>>,
}

/// What a browser request carries and watches.
pub struct Grant {
    /// The activity.
    pub activity_id: String,
    /// Its lease token.
    pub lease_token: String,
    /// Set when the lease is revoked (takeover, stop).
    pub revoked: Arc<AtomicBool>,
}

fn new_token() -> String {
    format!("lease_{}", uuid::Uuid::new_v4().simple())
}

fn now() -> String {
    crate::util::rfc3339(crate::util::now_ms())
}

fn record(shared: &Host, a: &ActivitySession) {
    let Ok(body) = serde_json::to_string(a) else {
        return;
    };
    match shared.connections.take() {
        Ok(mut store) => {
            if let Err(e) = store.save_activity(&a.id, &a.thread_id, &body) {
                // An ephemeral conversation is not stored: its activity lives in memory only.
                log::debug!("activity {} not recorded: {e}", a.id);
            }
        }
        Err(e) => log::debug!("activity {} not recorded: {e}", a.id),
    }
}

fn announce(shared: &Host, kind: &str, a: &ActivitySession) {
    record(shared, a);
    let r = match kind {
        "started" => shared.outbox.notify(&ActivityStarted(a.clone())),
        "control_changed" => shared.outbox.notify(&ActivityControlChanged(a.clone())),
        "stopped" => shared.outbox.notify(&ActivityStopped(a.clone())),
        _ => shared.outbox.notify(&ActivityUpdated(a.clone())),
    };
    if let Err(e) = r {
        log::warn!("activity/{kind} not delivered: {e:?}");
    }
}

impl Activities {
    /// The lease a browser request of `thread_id` runs under, starting the conversation's
    /// activity on its first request. Errors (for the model): the user holds control, or
    /// the activity was stopped.
    pub fn acquire(&self, shared: &Host, thread_id: &str) -> Result<Grant, String> {
        let mut entries = self.entries.lock();
        let newest = entries
            .values()
            .filter(|e| e.session.thread_id == thread_id)
            .max_by(|a, b| a.session.created_at.cmp(&b.session.created_at))
            .map(|e| e.session.id.clone());
        if let Some(id) = newest {
            if let Some(e) = entries.get(&id) {
                if e.session.state == "stopped" {
                    return Err(
                        "browser control refused: the user stopped this conversation's \
                         browser activity"
                            .into(),
                    );
                }
                return match &e.lease {
                    Some(token) if e.session.controller == "agent" => Ok(Grant {
                        activity_id: id,
                        lease_token: token.clone(),
                        revoked: e.revoked.clone(),
                    }),
                    _ => Err(
                        "browser control refused: the user has taken over the browser; \
                         wait until they hand control back"
                            .into(),
                    ),
                };
            }
        }
        let id = crate::util::new_id("activity");
        let token = new_token();
        let t = now();
        let session = ActivitySession {
            id: id.clone(),
            kind: "browser".into(),
            thread_id: thread_id.to_owned(),
            workdir: shared.opts.workdir.to_string_lossy().into_owned(),
            state: "starting".into(),
            controller: "agent".into(),
            created_at: t.clone(),
            updated_at: t,
            ..Default::default()
        };
        let revoked = Arc::new(AtomicBool::new(false));
        entries.insert(
            id.clone(),
            Entry {
                session: session.clone(),
                lease: Some(token.clone()),
                revoked: revoked.clone(),
            },
        );
        drop(entries);
        announce(shared, "started", &session);
        Ok(Grant {
            activity_id: id,
            lease_token: token,
            revoked,
        })
    }

    /// After a browser request under `grant` succeeded: the activity is
    /// `background_controlled` on `tab` (an update is sent when that changed). A lease
    /// revoked meanwhile leaves the activity as the takeover set it.
    pub fn acted(&self, shared: &Host, grant: &Grant, tab: Option<&str>) {
        let mut entries = self.entries.lock();
        let Some(e) = entries.get_mut(&grant.activity_id) else {
            return;
        };
        if e.lease.as_deref() != Some(grant.lease_token.as_str()) {
            return;
        }
        let target = tab.map(str::to_owned).or_else(|| e.session.target.clone());
        if e.session.state == "background_controlled" && e.session.target == target {
            return;
        }
        e.session.state = "background_controlled".into();
        e.session.target = target;
        e.session.updated_at = now();
        let s = e.session.clone();
        drop(entries);
        announce(shared, "updated", &s);
    }

    fn change(
        &self,
        shared: &Host,
        thread_id: &str,
        activity_id: &str,
        f: impl FnOnce(&mut Entry) -> Result<&'static str, String>,
    ) -> Result<ActivitySession, (ErrorCode, String)> {
        let mut entries = self.entries.lock();
        let Some(e) = entries.get_mut(activity_id.trim()) else {
            return Err((
                ErrorCode::Error,
                format!("activity not found: {activity_id}"),
            ));
        };
        if e.session.thread_id != thread_id.trim() {
            return Err((
                ErrorCode::Error,
                "activity belongs to another thread".into(),
            ));
        }
        let kind = f(e).map_err(|m| (ErrorCode::Error, m))?;
        e.session.updated_at = now();
        let s = e.session.clone();
        drop(entries);
        if !kind.is_empty() {
            announce(shared, kind, &s);
        }
        Ok(s)
    }

    /// The activities of `thread_id`: the live ones of this process, and the recorded ones
    /// of ended processes as `stopped`. Oldest first.
    pub fn list(&self, shared: &Host, thread_id: &str) -> Vec<ActivitySession> {
        let mut out: Vec<ActivitySession> = self
            .entries
            .lock()
            .values()
            .filter(|e| e.session.thread_id == thread_id)
            .map(|e| e.session.clone())
            .collect();
        let recorded = match shared.connections.take() {
            Ok(store) => store.activities_of(thread_id).unwrap_or_default(),
            Err(_) => vec![],
        };
        for (id, body) in recorded {
            if out.iter().any(|a| a.id == id) {
                continue;
            }
            let Ok(mut a) = serde_json::from_str::<ActivitySession>(&body) else {
                continue;
            };
            if a.state != "stopped" {
                a.state = "stopped".into();
                a.controller = "none".into();
                a.error = Some("ended with the server process that drove it".into());
                record(shared, &a);
            }
            out.push(a);
        }
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        out
    }
}

/// Handles `activity/*` (on the panels' views pool).
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    let acts = &shared.activities;
    let check = |t: &str, a: Option<&str>| -> Result<(), String> {
        if t.trim().is_empty() || a.is_some_and(|a| a.trim().is_empty()) {
            return Err("invalid params: activity thread_id and activity_id are required".into());
        }
        crate::util::check_thread_id("thread_id", t.trim())
    };
    match req {
        ClientRequest::ActivityList(p) => match check(&p.thread_id, None) {
            Ok(()) => reply.ok(&ActivityListResult {
                activities: acts.list(shared, p.thread_id.trim()),
            }),
            Err(m) => reply.err(ErrorCode::InvalidParams, m),
        },
        ClientRequest::ActivityTakeover(p) => {
            if let Err(m) = check(&p.thread_id, Some(&p.activity_id)) {
                return reply.err(ErrorCode::InvalidParams, m);
            }
            let r = acts.change(shared, &p.thread_id, &p.activity_id, |e| {
                if e.session.state == "stopped" {
                    return Err("activity is stopped".into());
                }
                e.revoked.store(true, Ordering::SeqCst);
                e.lease = None;
                e.session.controller = "user".into();
                e.session.state = "user_controlled".into();
                Ok("control_changed")
            });
            match r {
                Ok(activity) => {
                    interrupt_turn(shared, &activity.thread_id);
                    reply.ok(&ActivityActionResult { activity })
                }
                Err((c, m)) => reply.err(c, m),
            }
        }
        ClientRequest::ActivityRelease(p) => {
            if let Err(m) = check(&p.thread_id, Some(&p.activity_id)) {
                return reply.err(ErrorCode::InvalidParams, m);
            }
            let token = new_token();
            let t2 = token.clone();
            let r = acts.change(shared, &p.thread_id, &p.activity_id, move |e| {
                if e.session.state == "stopped" {
                    return Err("activity is stopped".into());
                }
                e.revoked.store(true, Ordering::SeqCst);
                e.revoked = Arc::new(AtomicBool::new(false));
                e.lease = Some(t2);
                e.session.controller = "agent".into();
                e.session.state = "background_controlled".into();
                Ok("control_changed")
            });
            match r {
                Ok(activity) => reply.ok(&ActivityReleaseResult {
                    activity,
                    lease_token: token,
                }),
                Err((c, m)) => reply.err(c, m),
            }
        }
        ClientRequest::ActivityStop(p) => {
            if let Err(m) = check(&p.thread_id, Some(&p.activity_id)) {
                return reply.err(ErrorCode::InvalidParams, m);
            }
            let r = acts.change(shared, &p.thread_id, &p.activity_id, |e| {
                if e.session.state == "stopped" {
                    return Ok("");
                }
                e.revoked.store(true, Ordering::SeqCst);
                e.lease = None;
                e.session.controller = "none".into();
                e.session.state = "stopped".into();
                Ok("stopped")
            });
            match r {
                Ok(activity) => reply.ok(&ActivityActionResult { activity }),
                Err((c, m)) => reply.err(c, m),
            }
        }
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not an activity method", other.method()),
        ),
    }
}

/// Interrupts the conversation's running turn (if any) through its session thread, as a
/// `turn/interrupt` nobody waits an answer for.
fn interrupt_turn(shared: &Arc<Host>, thread_id: &str) {
    let reply = Responder::new(None, shared.outbox.clone(), "turn/interrupt");
    shared.registry.dispatch(
        shared,
        thread_id,
        super::SessionMsg::Request {
            req: ClientRequest::TurnInterrupt(TurnInterruptParams {
                thread_id: thread_id.to_owned(),
                turn_id: None,
            }),
            reply,
        },
    );
}
