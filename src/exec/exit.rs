//! Exit codes of `wuu exec` and the `result.status` each one goes with (spec `exec.md`
//! §3.1–§3.2), plus [`Fail`], a failure carrying its exit code.

/// Exit codes of `wuu exec` (spec §3.1).
pub mod code {
    /// The run completed (and schema / last-message steps succeeded).
    pub const OK: i32 = 0;
    /// A failure without a more specific class; client-side schema mismatch;
    /// `--output-last-message` write failure.
    pub const FAILED: i32 = 1;
    /// Invalid arguments, configuration or input.
    pub const INVALID_INPUT: i32 = 2;
    /// A tool call was refused by the permission mode.
    pub const PERMISSION_DENIED: i32 = 3;
    /// The `--timeout` deadline (or the server's) expired.
    pub const TIMEOUT: i32 = 4;
    /// SIGINT/SIGTERM or another interruption.
    pub const INTERRUPTED: i32 = 5;
    /// App-server protocol failure, subscription overflow, stdout write failure.
    pub const PROTOCOL: i32 = 6;
    /// Provider, model, auth, network or invalid-request failure.
    pub const PROVIDER: i32 = 7;
    /// Unrecovered local or tool failure; also a busy store (the app-server answered
    /// `store_busy`: another process held the SQLite write lock past the busy timeout;
    /// `result.error_category`/`error_code` are `store_busy`, retrying later may succeed).
    pub const TOOL: i32 = 8;
    /// The conversation already has an active run (`thread_busy`).
    pub const CONFLICT: i32 = 9;
}

/// `result.status` of an exit code (spec §3.2).
pub fn status_of(exit: i32) -> &'static str {
    match exit {
        code::OK => "completed",
        code::PERMISSION_DENIED => "permission_denied",
        code::TIMEOUT => "timeout",
        code::INTERRUPTED => "interrupted",
        _ => "failed",
    }
}

/// A failure with its exit code.
#[derive(Debug, Clone)]
pub(super) struct Fail {
    pub(super) code: i32,
    pub(super) msg: String,
    /// The app-server error code when the failure is an RPC error (`""` otherwise).
    pub(super) rpc_code: String,
}

impl Fail {
    pub(super) fn new(code: i32, msg: impl Into<String>) -> Fail {
        Fail {
            code,
            msg: msg.into(),
            rpc_code: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_codes() {
        assert_eq!(status_of(0), "completed");
        assert_eq!(status_of(3), "permission_denied");
        assert_eq!(status_of(4), "timeout");
        assert_eq!(status_of(5), "interrupted");
        for c in [1, 2, 6, 7, 8, 9] {
            assert_eq!(status_of(c), "failed");
        }
    }
}
