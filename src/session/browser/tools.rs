//! The browser tools the model calls (spec `app-server.md` §3.8 and §4.8): one
//! function per tool, each validating its arguments, checking tab ownership, sending the
//! reverse request in the turn's execution scope and recording the tab bookkeeping of
//! the answer.

use super::{error, ok, request, scope, CallCtx, Tab, CDP_INLINE_CAP};
use crate::session::reverse;
use crate::tools::ToolOutcome;
use serde::Deserialize;
use serde_json::{json, Value};
use wuu_protocol::browser::*;

#[derive(Deserialize)]
struct OpenArgs {
    url: String,
}
#[derive(Deserialize)]
struct AttachArgs {
    workspace_tab_id: String,
}
#[derive(Deserialize)]
struct TabArgs {
    #[serde(default)]
    tab_id: Option<String>,
    #[serde(default)]
    format: Option<String>,
}
#[derive(Deserialize)]
struct CdpArgs {
    #[serde(default)]
    tab_id: Option<String>,
    method: String,
    #[serde(default)]
    params: Option<Value>,
}
#[derive(Deserialize)]
struct VisibilityArgs {
    tab_id: String,
    visible: bool,
}
#[derive(Deserialize)]
struct CloseArgs {
    tab_id: String,
}
#[derive(Deserialize)]
struct FinalizeArgs {
    keep: Vec<BrowserKeep>,
}

fn parse<T: serde::de::DeserializeOwned>(name: &str, args: &str) -> Result<T, ToolOutcome> {
    let text = if args.trim().is_empty() { "{}" } else { args };
    serde_json::from_str(text).map_err(|e| error(format!("invalid arguments for {name}: {e}")))
}

/// Runs the browser tool `name` with its JSON `args`; `Err` carries the error outcome.
pub(super) fn run(ctx: &CallCtx, name: &str, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    match name {
        "browser_open" => open(ctx, args),
        "browser_attach" => attach(ctx, args),
        "browser_list_tabs" => list_tabs(ctx),
        "browser_screenshot" => screenshot(ctx, args),
        "browser_cdp" => cdp(ctx, args),
        "browser_set_visibility" => set_visibility(ctx, args),
        "browser_close" => close(ctx, args),
        "browser_finalize" => finalize(ctx, args),
        other => Err(error(format!("unknown browser tool {other:?}"))),
    }
}

/// `browser_open {url}`: opens a new tab owned by the conversation (forgotten again
/// when the client refuses).
fn open(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: OpenArgs = parse("browser_open", args)?;
    let tab_id = format!("tab_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    b.state.lock().tabs.insert(
        tab_id.clone(),
        Tab {
            owner: th.to_owned(),
            workspace: false,
        },
    );
    let sent = scope(ctx).and_then(|s| {
        request(
            ctx.shared,
            ctx.cancel,
            &s,
            "browser/open_tab",
            json!({"tab_id": tab_id, "initial_url": a.url}),
        )
    });
    if let Err(e) = sent {
        b.forget_tab(&tab_id);
        return Err(error(e));
    }
    b.touch(th, &tab_id);
    Ok(ok(
        format!("opened tab {tab_id} at {}", a.url),
        json!({"tab_id": tab_id, "url": a.url}),
    ))
}

/// `browser_attach {workspace_tab_id}`: borrows a user page for this conversation (one
/// conversation at a time).
fn attach(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: AttachArgs = parse("browser_attach", args)?;
    let id = a.workspace_tab_id.trim().to_owned();
    if id.is_empty() {
        return Err(error("workspace_tab_id is empty"));
    }
    {
        let mut st = b.state.lock();
        match st.tabs.get(&id) {
            Some(t) if t.owner != th => {
                return Err(error(format!(
                    "refused: workspace tab {id:?} is attached to another conversation"
                )))
            }
            Some(_) => {
                return Err(error(format!(
                    "tab {id:?} is already attached to this conversation"
                )))
            }
            None => {
                st.tabs.insert(
                    id.clone(),
                    Tab {
                        owner: th.to_owned(),
                        workspace: true,
                    },
                );
            }
        }
    }
    let sent = scope(ctx).and_then(|s| {
        request(
            ctx.shared,
            ctx.cancel,
            &s,
            "browser/open_tab",
            json!({"tab_id": id}),
        )
    });
    if let Err(e) = sent {
        b.forget_tab(&id);
        return Err(error(e));
    }
    b.touch(th, &id);
    Ok(ok(
        format!("attached workspace tab {id} (borrowed: closing releases it)"),
        json!({"tab_id": id, "workspace": true}),
    ))
}

/// `browser_list_tabs {}`: the conversation's tabs (recorded as its own) and the
/// attachable workspace tabs.
fn list_tabs(ctx: &CallCtx) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let s = scope(ctx).map_err(error)?;
    let v = request(ctx.shared, ctx.cancel, &s, "browser/list_tabs", json!({})).map_err(error)?;
    let r: BrowserListTabsResult = serde_json::from_value(v)
        .map_err(|e| error(format!("browser/list_tabs: bad result: {e}")))?;
    let tabs: Vec<BrowserTab> = match (&r.tabs, &r.tab_ids) {
        (Some(t), _) if !t.is_empty() => t.clone(),
        (_, Some(ids)) => ids
            .iter()
            .map(|id| BrowserTab {
                tab_id: id.clone(),
                ..Default::default()
            })
            .collect(),
        _ => vec![],
    };
    {
        let mut st = b.state.lock();
        for t in &tabs {
            st.tabs.entry(t.tab_id.clone()).or_insert_with(|| Tab {
                owner: th.to_owned(),
                workspace: false,
            });
        }
    }
    let workspace_tabs = r.workspace_tabs.unwrap_or_default();
    let detail = json!({"tabs": tabs, "workspace_tabs": workspace_tabs});
    Ok(ok(
        serde_json::to_string_pretty(&detail).unwrap_or_default(),
        detail,
    ))
}

/// `browser_screenshot {tab_id?, format?}`: a PNG or JPEG of a tab, saved by the client
/// to `browser/<thread_id>/` under the server home.
fn screenshot(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: TabArgs = parse("browser_screenshot", args)?;
    let tab = b.resolve_tab(th, a.tab_id.as_deref()).map_err(error)?;
    let format = a.format.unwrap_or_else(|| "png".into());
    if format != "png" && format != "jpeg" {
        return Err(error(format!("invalid format {format:?}: use png or jpeg")));
    }
    let dir = ctx.shared.opts.home.join("browser").join(th);
    let _ = std::fs::create_dir_all(&dir);
    let ext = if format == "jpeg" { "jpg" } else { "png" };
    let dest = dir.join(format!("shot-{}.{ext}", uuid::Uuid::new_v4().simple()));
    let s = scope(ctx).map_err(error)?;
    let v = request(
        ctx.shared,
        ctx.cancel,
        &s,
        "browser/screenshot",
        json!({"tab_id": tab, "dest_path": dest.to_string_lossy(), "format": format}),
    )
    .map_err(error)?;
    let r: BrowserScreenshotResult = serde_json::from_value(v.clone())
        .map_err(|e| error(format!("browser/screenshot: bad result: {e}")))?;
    b.touch(th, &tab);
    Ok(ok(
        format!(
            "screenshot of tab {tab} ({}x{}) saved to {}",
            r.width, r.height, r.path
        ),
        v,
    ))
}

/// `browser_cdp {tab_id?, method, params?}`: one DevTools command; the result inline up
/// to [`CDP_INLINE_CAP`] or its file path.
fn cdp(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: CdpArgs = parse("browser_cdp", args)?;
    if a.method.trim().is_empty() {
        return Err(error("method is empty (e.g. Runtime.evaluate)"));
    }
    let tab = b.resolve_tab(th, a.tab_id.as_deref()).map_err(error)?;
    let s = scope(ctx).map_err(error)?;
    let mut extra = json!({"tab_id": tab, "method": a.method});
    if let Some(p) = a.params {
        extra["params"] = p;
    }
    let v = request(ctx.shared, ctx.cancel, &s, "browser/cdp", extra).map_err(error)?;
    let r: BrowserCdpResult = serde_json::from_value(v.clone())
        .map_err(|e| error(format!("browser/cdp: bad result: {e}")))?;
    b.touch(th, &tab);
    let output = match (&r.path, &r.result) {
        (Some(p), _) => format!(
            "the result ({} bytes) was written to {p}",
            r.size.unwrap_or(0)
        ),
        (None, Some(res)) => {
            let mut t = serde_json::to_string(res).unwrap_or_default();
            if t.len() > CDP_INLINE_CAP {
                let mut cut = CDP_INLINE_CAP;
                while !t.is_char_boundary(cut) {
                    cut -= 1;
                }
                t.truncate(cut);
                t.push_str("… [truncated]");
            }
            t
        }
        (None, None) => "ok (no result)".into(),
    };
    Ok(ok(output, v))
}

/// `browser_set_visibility {tab_id, visible}`: shows or hides a tab in the preview.
fn set_visibility(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: VisibilityArgs = parse("browser_set_visibility", args)?;
    let tab = b.resolve_tab(th, Some(&a.tab_id)).map_err(error)?;
    let s = scope(ctx).map_err(error)?;
    request(
        ctx.shared,
        ctx.cancel,
        &s,
        "browser/set_visibility",
        json!({"tab_id": tab, "visible": a.visible}),
    )
    .map_err(error)?;
    Ok(ok(
        format!(
            "tab {tab} is now {}",
            if a.visible { "visible" } else { "hidden" }
        ),
        json!({"tab_id": tab, "visible": a.visible}),
    ))
}

/// `browser_close {tab_id}`: closes a tab, or releases an attached workspace tab.
fn close(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    let a: CloseArgs = parse("browser_close", args)?;
    let tab = b.resolve_tab(th, Some(&a.tab_id)).map_err(error)?;
    let workspace = b.state.lock().tabs.get(&tab).is_some_and(|t| t.workspace);
    let s = scope(ctx).map_err(error)?;
    request(
        ctx.shared,
        ctx.cancel,
        &s,
        "browser/close_tab",
        json!({"tab_id": tab}),
    )
    .map_err(error)?;
    b.forget_tab(&tab);
    Ok(ok(
        if workspace {
            format!("released workspace tab {tab} (the page stays open)")
        } else {
            format!("closed tab {tab}")
        },
        json!({"tab_id": tab, "released": workspace}),
    ))
}

/// `browser_finalize {keep}`: records which tabs to keep (and their status) for the
/// execution; the client closes the others.
fn finalize(ctx: &CallCtx, args: &str) -> Result<ToolOutcome, ToolOutcome> {
    let b = &ctx.shared.browser;
    let th = ctx.thread_id;
    if !reverse::advertised(ctx.shared, "browser/finalize") {
        return Err(error(
            "browser_finalize is unavailable: the client did not negotiate browser/finalize",
        ));
    }
    let a: FinalizeArgs = parse("browser_finalize", args)?;
    for k in &a.keep {
        if !KEEP_STATUSES.contains(&k.status.as_str()) {
            return Err(error(format!(
                "invalid status {:?} for tab {:?}: use persistent, handoff or deliverable",
                k.status, k.tab_id
            )));
        }
        b.check_owner(th, &k.tab_id).map_err(error)?;
    }
    let s = scope(ctx).map_err(error)?;
    let exec = b.execution(th, ctx.turn_id);
    match request(
        ctx.shared,
        ctx.cancel,
        &s,
        "browser/finalize",
        json!({"keep": a.keep}),
    ) {
        Ok(v) => {
            let r: BrowserCleanupResult = serde_json::from_value(v.clone())
                .map_err(|e| error(format!("browser/finalize: bad result: {e}")))?;
            b.update_execution(th, &exec.execution_id, |e| {
                e.keep = a.keep.clone();
                e.keep_unknown = false;
            });
            b.apply_cleanup(th, &r);
            Ok(ok(
                format!(
                    "finalized: kept [{}], closed [{}]",
                    r.kept.join(", "),
                    r.closed.join(", ")
                ),
                v,
            ))
        }
        Err(e) => {
            b.update_execution(th, &exec.execution_id, |x| x.keep_unknown = true);
            Err(error(e))
        }
    }
}
