//! The client file system an ACP agent may use (`fs/read_text_file`,
//! `fs/write_text_file`; ACP v1 "File System"): served beneath the workspace root only,
//! through [`crate::beneath::Root`] like the file tools (no `..`, absolute or symlink
//! escape), text only, reads capped; writes refused in `read_only`.

use crate::beneath::{rel_beneath, Root};
use crate::tools::PermissionMode;
use serde_json::{json, Value};
use std::path::Path;

/// Largest file served to a read, in bytes.
pub const READ_CAP: u64 = 16 * 1024 * 1024;

/// Serves one `fs/*` request of an agent. `Ok(result)` or `Err((code, message))`.
pub fn serve(
    method: &str,
    p: &Value,
    root: &Path,
    mode: PermissionMode,
) -> Result<Value, (i64, String)> {
    let Some(path) = p.get("path").and_then(Value::as_str) else {
        return Err((-32602, "missing path".into()));
    };
    let path = Path::new(path);
    if !path.is_absolute() {
        return Err((
            -32602,
            format!("{} is not an absolute path", path.display()),
        ));
    }
    let outside = || {
        (
            -32602,
            format!("{} is outside the workspace", path.display()),
        )
    };
    let rel = rel_beneath(root, path).ok_or_else(outside)?;
    let dir = Root::open(root).map_err(|e| (-32603, format!("cannot open the workspace: {e}")))?;
    let refuse = |e: crate::beneath::Error| match e {
        crate::beneath::Error::Outside => outside(),
        e => (-32603, format!("{}: {e}", path.display())),
    };
    match method {
        "fs/read_text_file" => {
            let bytes = dir.read_capped(&rel, READ_CAP).map_err(refuse)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| (-32603, format!("{} is not UTF-8 text", path.display())))?;
            let line = p.get("line").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
            let limit = p.get("limit").and_then(Value::as_u64).map(|l| l as usize);
            let content = if line == 1 && limit.is_none() {
                text
            } else {
                let lines = text.split_inclusive('\n').skip(line - 1);
                match limit {
                    Some(n) => lines.take(n).collect(),
                    None => lines.collect(),
                }
            };
            Ok(json!({"content": content}))
        }
        "fs/write_text_file" => {
            if mode == PermissionMode::ReadOnly {
                return Err((-32603, "writing is not allowed in read-only mode".into()));
            }
            let content = p.get("content").and_then(Value::as_str).unwrap_or("");
            dir.write_atomic(&rel, content.as_bytes(), true)
                .map_err(refuse)?;
            // `WriteTextFileResponse` is an object.
            Ok(json!({}))
        }
        other => Err((-32601, format!("unsupported engine request: {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_beneath_the_root_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let f = root.join("a.txt");
        let w = serve(
            "fs/write_text_file",
            &json!({"path": f, "content": "one\ntwo\nthree\n"}),
            &root,
            PermissionMode::Standard,
        );
        assert_eq!(w, Ok(json!({})));
        let r = serve(
            "fs/read_text_file",
            &json!({"path": f, "line": 2, "limit": 1}),
            &root,
            PermissionMode::Standard,
        );
        assert_eq!(r, Ok(json!({"content": "two\n"})));
        for bad in ["/etc/passwd", "../x"] {
            let p = if bad.starts_with('/') {
                bad.to_owned()
            } else {
                format!("{}/{bad}", root.display())
            };
            let r = serve(
                "fs/read_text_file",
                &json!({"path": p}),
                &root,
                PermissionMode::Standard,
            );
            assert!(matches!(r, Err((-32602, _))), "{bad}: {r:?}");
        }
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        let r = serve(
            "fs/read_text_file",
            &json!({"path": root.join("etc/passwd")}),
            &root,
            PermissionMode::Standard,
        );
        assert!(r.is_err(), "{r:?}");
        let r = serve(
            "fs/write_text_file",
            &json!({"path": f, "content": "x"}),
            &root,
            PermissionMode::ReadOnly,
        );
        assert!(r.is_err());
    }
}
