//! Hosted-browser reverse requests (server → client; spec `app-server.md` §1.5, §3.8,
//! §4.8, §6 rule 19; seed "托管浏览器请求").
//!
//! The server sends `{"id":"srv-<n>","method":"browser/…","params":{…}}` on its output
//! stream; the client answers `{"id":"srv-<n>","result":{…}}` or `{"id", "error"}`.
//! Requests are sent only for methods the client listed in
//! `initialize.params.capabilities.reverse_rpc.methods`. The six base methods
//! ([`BASE_METHODS`]) enable the browser tools; `browser/turn_started`,
//! `browser/finalize` and `browser/turn_ended` are optional per-execution cleanup
//! requests, sent only when advertised too.
//!
//! Every request carries [`BrowserScope`] fields: the core's `workdir`, `thread_id`, an
//! opaque `request_id` (named by `browser/request_cancelled` when the server stops
//! waiting: timeout, interrupt, shutdown), and — when the client negotiated
//! `browser/turn_started` — the execution's `turn_id` and `execution_id`.
//!
//! [`REVERSE_METHODS`] is the table of these requests (params and result schemas), used
//! by the JSON Schema export under `reverse_methods`.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The six base browser reverse methods; `features.browser` is true only when the client
/// advertised all of them.
pub const BASE_METHODS: &[&str] = &[
    "browser/cdp",
    "browser/screenshot",
    "browser/open_tab",
    "browser/close_tab",
    "browser/set_visibility",
    "browser/list_tabs",
];

/// Keep statuses accepted by `browser/finalize` and `browser/turn_ended`.
pub const KEEP_STATUSES: &[&str] = &["persistent", "handoff", "deliverable"];

macro_rules! scoped {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The core's workspace directory (absolute).
            pub workdir: String,
            /// The conversation the request acts for; tabs are isolated per conversation.
            pub thread_id: String,
            /// Opaque id of this operation (see `browser/request_cancelled`).
            pub request_id: String,
            /// The turn of the execution (only when `browser/turn_started` is negotiated).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub turn_id: Option<String>,
            /// The immutable execution id (only when `browser/turn_started` is negotiated).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub execution_id: Option<String>,
            /// The conversation's browser activity (`activity/*`) this request belongs to.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub activity_id: Option<String>,
            /// The activity's current control lease: a request carrying any other token
            /// (one from before a takeover) must not act.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub lease_token: Option<String>,
            $( $(#[$fm])* pub $f: $t, )*
        }
    };
}

scoped!(
    /// The scope fields alone (`browser/list_tabs` params).
    BrowserScope {}
);

scoped!(
    /// `browser/open_tab`: open `tab_id` (minted by the server) at `initial_url`, or —
    /// without `initial_url`, `tab_id` equal to a `workspace_tabs[].tab_id` — attach
    /// that user page (borrowed, never closed by the agent).
    BrowserOpenTabParams {
        /// The tab.
        tab_id: String,
        /// Where to navigate; omitted for a workspace attach.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        initial_url: Option<String>,
    }
);

scoped!(
    /// `browser/close_tab`: close the tab (a workspace binding is released, the page
    /// stays open).
    BrowserCloseTabParams {
        /// The tab.
        tab_id: String,
    }
);

scoped!(
    /// `browser/set_visibility`.
    BrowserSetVisibilityParams {
        /// The tab.
        tab_id: String,
        /// Show or hide the tab in the client's preview.
        visible: bool,
    }
);

scoped!(
    /// `browser/screenshot`: write an image of the tab to `dest_path`.
    BrowserScreenshotParams {
        /// The tab.
        tab_id: String,
        /// Absolute path where the client writes the image.
        dest_path: String,
        /// `png` (default) | `jpeg`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<String>,
    }
);

scoped!(
    /// `browser/cdp`: one Chrome DevTools Protocol command on the tab.
    BrowserCdpParams {
        /// The tab.
        tab_id: String,
        /// CDP method, e.g. `Runtime.evaluate`.
        method: String,
        /// CDP params.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        params: Option<Value>,
    }
);

scoped!(
    /// `browser/turn_started`: sent before a workspace's first browser request of an
    /// execution (always carries `turn_id` and `execution_id`).
    BrowserTurnStartedParams {}
);

scoped!(
    /// `browser/finalize`: atomically keep these tabs and close the other temporary tabs
    /// of the conversation (the execution goes on).
    BrowserFinalizeParams {
        /// Tabs to keep.
        keep: Vec<BrowserKeep>,
    }
);

scoped!(
    /// `browser/turn_ended`: the execution ended (turn completed, failed or
    /// interrupted): invalidate pending operations, close temporary tabs not kept,
    /// release kept tabs' debugger and input state, release workspace bindings.
    BrowserTurnEndedParams {
        /// The keep records of the execution (from `browser/finalize`).
        keep: Vec<BrowserKeep>,
        /// The keep records could not be read (a finalize failed): keep every tab of the
        /// conversation.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preserve_all: bool,
    }
);

/// One keep record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserKeep {
    /// The tab.
    pub tab_id: String,
    /// `persistent` | `handoff` | `deliverable`.
    pub status: String,
}

/// A tab of the conversation, as the client reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserTab {
    /// The tab.
    pub tab_id: String,
    /// Current URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Page title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Keep status (finalize / turn_ended results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The tab that opened this one (popups inherit their opener's owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opener_tab_id: Option<String>,
}

/// A user page that may be attached (`browser/list_tabs` `workspace_tabs`): metadata
/// only; listing neither reads content nor takes control.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceTab {
    /// Attach with `browser/open_tab {tab_id: <this>}` and no `initial_url`.
    pub tab_id: String,
    /// URL.
    #[serde(default)]
    pub url: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// The client's workspace id.
    #[serde(default)]
    pub workspace_id: String,
    /// Where the page came from (`user`, `plugin`, …).
    #[serde(default)]
    pub source: String,
    /// The page is the active one.
    #[serde(default)]
    pub active: bool,
}

/// `browser/list_tabs` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserListTabsResult {
    /// Legacy: ids of the conversation's tabs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tab_ids: Option<Vec<String>>,
    /// The conversation's tabs (preferred when non-empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tabs: Option<Vec<BrowserTab>>,
    /// Attachable user pages, separate from `tabs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_tabs: Option<Vec<WorkspaceTab>>,
}

/// `browser/screenshot` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserScreenshotResult {
    /// Image width, px.
    pub width: u32,
    /// Image height, px.
    pub height: u32,
    /// Where the image was written.
    pub path: String,
    /// Viewport width, CSS px.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport_width: Option<u32>,
    /// Viewport height, CSS px.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub viewport_height: Option<u32>,
}

/// `browser/cdp` result: the CDP result inline, or `{path, size}` when the client
/// spilled a large (> 1 MB) result to a file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserCdpResult {
    /// The CDP result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// File holding the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Result of `browser/finalize` and `browser/turn_ended`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserCleanupResult {
    /// Tabs closed, and workspace bindings released (their pages stay open).
    #[serde(default)]
    pub closed: Vec<String>,
    /// Tabs kept.
    #[serde(default)]
    pub kept: Vec<String>,
    /// The conversation's remaining tabs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tabs: Option<Vec<BrowserTab>>,
    /// The request named an execution that is no longer current: nothing changed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

/// Results the server ignores (`open_tab`, `close_tab`, `set_visibility`,
/// `turn_started`): any object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserAck {
    /// Whatever the client reports.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `browser/request_cancelled` (notification): the server stopped waiting for
/// `request_id`; the client cancels exactly that operation and re-checks before
/// dispatching input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BrowserRequestCancelled {
    /// Same as the request's.
    pub workdir: String,
    /// Same as the request's.
    pub thread_id: String,
    /// The cancelled operation.
    pub request_id: String,
    /// `timeout` | `interrupted` | `shutdown` | `takeover` (the user took control of
    /// the browser activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Schema facts of one reverse method.
pub struct ReverseMethodInfo {
    /// Wire name.
    pub name: &'static str,
    /// Schema of the params the server sends.
    pub params_schema: fn(&mut SchemaGenerator) -> Schema,
    /// Schema of the result the server expects.
    pub result_schema: fn(&mut SchemaGenerator) -> Schema,
}

macro_rules! reverse_methods {
    ($( $wire:literal => $params:ident, $result:ident; )*) => {
        /// Every server → client request, base methods first.
        pub const REVERSE_METHODS: &[ReverseMethodInfo] = &[
            $( ReverseMethodInfo {
                name: $wire,
                params_schema: |g| g.subschema_for::<$params>(),
                result_schema: |g| g.subschema_for::<$result>(),
            }, )*
        ];
    };
}

reverse_methods! {
    "browser/cdp" => BrowserCdpParams, BrowserCdpResult;
    "browser/screenshot" => BrowserScreenshotParams, BrowserScreenshotResult;
    "browser/open_tab" => BrowserOpenTabParams, BrowserAck;
    "browser/close_tab" => BrowserCloseTabParams, BrowserAck;
    "browser/set_visibility" => BrowserSetVisibilityParams, BrowserAck;
    "browser/list_tabs" => BrowserScope, BrowserListTabsResult;
    "browser/turn_started" => BrowserTurnStartedParams, BrowserAck;
    "browser/finalize" => BrowserFinalizeParams, BrowserCleanupResult;
    "browser/turn_ended" => BrowserTurnEndedParams, BrowserCleanupResult;
}
