//! A fake hosted browser for reverse-request tests: tracks tabs, their owning
//! conversation (popups inherit their opener's owner), attachable workspace pages,
//! executions (`browser/turn_started`) and keep records, and refuses requests that
//! target another conversation's tab — like the desktop client (seed "托管浏览器请求").
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// One tab.
#[derive(Debug, Clone)]
pub struct FakeTab {
    /// Owning conversation.
    pub owner: String,
    /// Current URL.
    pub url: String,
    /// A borrowed user page.
    pub workspace: bool,
    /// The tab that opened it.
    pub opener: Option<String>,
    /// Keep status from finalize.
    pub kept: Option<String>,
}

/// A user page that can be attached.
#[derive(Debug, Clone)]
pub struct UserPage {
    /// Page id.
    pub tab_id: String,
    /// URL.
    pub url: String,
    /// Title.
    pub title: String,
}

/// The fake browser's state.
#[derive(Debug, Default)]
pub struct FakeBrowser {
    /// Live tabs (including bound workspace pages).
    pub tabs: BTreeMap<String, FakeTab>,
    /// The user's own pages (never closed by the agent).
    pub user_pages: Vec<UserPage>,
    /// Conversation → current execution id.
    pub executions: HashMap<String, String>,
    /// Requests whose execution id was not the current one.
    pub execution_mismatches: Vec<Value>,
    /// Screenshots written.
    pub shots: Vec<String>,
    /// Tabs closed (ids), in order.
    pub closed: Vec<String>,
    next_popup: u32,
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or("").to_owned()
}

impl FakeBrowser {
    fn owned(&self, params: &Value, tab_id: &str) -> Result<(), String> {
        let thread = s(params, "thread_id");
        match self.tabs.get(tab_id) {
            None => Err(format!("no such tab {tab_id}")),
            Some(t) if t.owner != thread => {
                Err(format!("tab {tab_id} belongs to another conversation"))
            }
            Some(_) => Ok(()),
        }
    }

    fn check_execution(&mut self, params: &Value) {
        if let Some(exe) = params.get("execution_id").and_then(Value::as_str) {
            let thread = s(params, "thread_id");
            if self.executions.get(&thread).map(String::as_str) != Some(exe) {
                self.execution_mismatches.push(params.clone());
            }
        }
    }

    fn tabs_of(&self, thread: &str) -> Vec<Value> {
        self.tabs
            .iter()
            .filter(|(_, t)| t.owner == thread)
            .map(|(id, t)| {
                let mut v =
                    json!({"tab_id": id, "url": t.url, "title": format!("Title of {}", t.url)});
                if let Some(k) = &t.kept {
                    v["status"] = json!(k);
                }
                if let Some(o) = &t.opener {
                    v["opener_tab_id"] = json!(o);
                }
                v
            })
            .collect()
    }

    /// Closes the thread's temporary tabs not in `keep` (protecting a kept popup's live
    /// opener) and releases its workspace bindings; returns `{closed, kept, tabs}`.
    fn cleanup(&mut self, thread: &str, keep: &[(String, String)], preserve_all: bool) -> Value {
        let mut keep_ids: Vec<String> = keep.iter().map(|(t, _)| t.clone()).collect();
        for (id, status) in keep {
            if let Some(t) = self.tabs.get_mut(id) {
                t.kept = Some(status.clone());
            }
        }
        // A kept popup's live opener of the same conversation is protected.
        let openers: Vec<String> = keep_ids
            .iter()
            .filter_map(|id| self.tabs.get(id).and_then(|t| t.opener.clone()))
            .filter(|o| self.tabs.get(o).is_some_and(|t| t.owner == thread))
            .collect();
        keep_ids.extend(openers);
        let mut closed = vec![];
        let mut kept = vec![];
        let ids: Vec<String> = self
            .tabs
            .iter()
            .filter(|(_, t)| t.owner == thread)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let t = self.tabs[&id].clone();
            if t.workspace {
                // Released, never closed: the user page lives on.
                self.tabs.remove(&id);
                closed.push(id);
            } else if preserve_all || keep_ids.contains(&id) || t.kept.is_some() {
                kept.push(id);
            } else {
                self.tabs.remove(&id);
                self.closed.push(id.clone());
                closed.push(id);
            }
        }
        json!({"closed": closed, "kept": kept, "tabs": self.tabs_of(thread)})
    }

    /// Handles one reverse request; `Err(message)` becomes an error reply.
    pub fn handle(&mut self, method: &str, p: &Value) -> Result<Value, String> {
        let thread = s(p, "thread_id");
        assert!(!thread.is_empty(), "{method} without thread_id: {p}");
        assert!(!s(p, "workdir").is_empty(), "{method} without workdir: {p}");
        assert!(
            !s(p, "request_id").is_empty(),
            "{method} without request_id: {p}"
        );
        if method != "browser/turn_started" && method != "browser/turn_ended" {
            self.check_execution(p);
        }
        let tab_id = s(p, "tab_id");
        match method {
            "browser/turn_started" => {
                self.executions.insert(thread, s(p, "execution_id"));
                Ok(json!({}))
            }
            "browser/open_tab" => {
                if let Some(t) = self.tabs.get(&tab_id) {
                    if t.owner != thread {
                        return Err(format!("tab {tab_id} belongs to another conversation"));
                    }
                    return Err(format!("tab {tab_id} is already open"));
                }
                match p.get("initial_url").and_then(Value::as_str) {
                    Some(url) => {
                        self.tabs.insert(
                            tab_id,
                            FakeTab {
                                owner: thread,
                                url: url.to_owned(),
                                workspace: false,
                                opener: None,
                                kept: None,
                            },
                        );
                    }
                    None => {
                        let Some(page) = self.user_pages.iter().find(|u| u.tab_id == tab_id) else {
                            return Err(format!("no workspace page {tab_id}"));
                        };
                        let url = page.url.clone();
                        self.tabs.insert(
                            tab_id,
                            FakeTab {
                                owner: thread,
                                url,
                                workspace: true,
                                opener: None,
                                kept: None,
                            },
                        );
                    }
                }
                Ok(json!({}))
            }
            "browser/close_tab" => {
                self.owned(p, &tab_id)?;
                let t = self.tabs.remove(&tab_id).unwrap();
                if !t.workspace {
                    self.closed.push(tab_id);
                }
                Ok(json!({}))
            }
            "browser/set_visibility" => {
                self.owned(p, &tab_id)?;
                Ok(json!({}))
            }
            "browser/list_tabs" => {
                let bound: Vec<&String> = self.tabs.keys().collect();
                let ws: Vec<Value> = self
                    .user_pages
                    .iter()
                    .filter(|u| !bound.contains(&&u.tab_id))
                    .map(|u| {
                        json!({"tab_id": u.tab_id, "url": u.url, "title": u.title,
                               "workspace_id": "ws-1", "source": "user", "active": false})
                    })
                    .collect();
                Ok(json!({"tabs": self.tabs_of(&thread), "workspace_tabs": ws}))
            }
            "browser/screenshot" => {
                self.owned(p, &tab_id)?;
                let dest = s(p, "dest_path");
                std::fs::write(&dest, b"\x89PNG fake").map_err(|e| e.to_string())?;
                self.shots.push(dest.clone());
                Ok(json!({"width": 1280, "height": 720, "path": dest,
                          "viewport_width": 1280, "viewport_height": 720}))
            }
            "browser/cdp" => {
                self.owned(p, &tab_id)?;
                match s(p, "method").as_str() {
                    "Runtime.evaluate" => {
                        let url = self.tabs[&tab_id].url.clone();
                        Ok(
                            json!({"result": {"result": {"type": "string", "value": format!("Title of {url}")}}}),
                        )
                    }
                    "Page.navigate" => {
                        let url = p["params"]["url"].as_str().unwrap_or("").to_owned();
                        self.tabs.get_mut(&tab_id).unwrap().url = url;
                        Ok(json!({"result": {"frameId": "F1"}}))
                    }
                    "Test.openPopup" => {
                        // A page opens a tab: it inherits its opener's owner.
                        self.next_popup += 1;
                        let id = format!("popup_{}", self.next_popup);
                        self.tabs.insert(
                            id.clone(),
                            FakeTab {
                                owner: thread,
                                url: "https://popup.example/".into(),
                                workspace: false,
                                opener: Some(tab_id),
                                kept: None,
                            },
                        );
                        Ok(json!({"result": {"popup_tab_id": id}}))
                    }
                    m => Err(format!("unsupported CDP method {m}")),
                }
            }
            "browser/finalize" => {
                let keep: Vec<(String, String)> = p["keep"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| (s(k, "tab_id"), s(k, "status")))
                    .collect();
                for (id, _) in &keep {
                    self.owned(p, id)?;
                }
                Ok(self.cleanup(&thread, &keep, false))
            }
            "browser/turn_ended" => {
                let current = self.executions.get(&thread).cloned();
                if current.as_deref() != p.get("execution_id").and_then(Value::as_str) {
                    return Ok(json!({"closed": [], "kept": [], "stale": true}));
                }
                let keep: Vec<(String, String)> = p["keep"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| (s(k, "tab_id"), s(k, "status")))
                    .collect();
                let preserve = p["preserve_all"] == json!(true);
                self.executions.remove(&thread);
                Ok(self.cleanup(&thread, &keep, preserve))
            }
            other => Err(format!("unknown method {other}")),
        }
    }
}
