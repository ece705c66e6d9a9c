//! `wuu app-server generate-json-schema --out DIR`: writes the protocol's JSON Schemas.
//!
//! Files: `wuu-app-server.schema.json` (the bundle of `wuu_protocol::schema::bundle`),
//! and one standalone file per method params/result and per notification
//! (`methods/<name>.params.json`, `methods/<name>.result.json`,
//! `notifications/<name>.json`, `reverse/<name>.params.json`,
//! `reverse/<name>.result.json` for server → client requests, with `/` in names
//! replaced by `.`).

use std::path::Path;

/// Writes the schema files under `out`; returns how many files were written.
pub fn write_schemas(out: &Path) -> Result<usize, String> {
    let bundle = wuu_protocol::schema::bundle();
    let write = |rel: String, v: &serde_json::Value| -> Result<(), String> {
        let path = out.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
        std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    };
    let mut n = 0;
    write("wuu-app-server.schema.json".into(), &bundle)?;
    n += 1;
    for m in wuu_protocol::METHODS {
        for kind in ["params", "result"] {
            let s = wuu_protocol::schema::standalone(&bundle, "methods", m.name, kind)
                .ok_or("schema bundle is missing a method")?;
            write(
                format!("methods/{}.{kind}.json", m.name.replace('/', ".")),
                &s,
            )?;
            n += 1;
        }
    }
    for nt in wuu_protocol::NOTIFICATIONS {
        let s = wuu_protocol::schema::standalone(&bundle, "notifications", nt.name, "params")
            .ok_or("schema bundle is missing a notification")?;
        write(
            format!("notifications/{}.json", nt.name.replace('/', ".")),
            &s,
        )?;
        n += 1;
    }
    for r in wuu_protocol::browser::REVERSE_METHODS {
        for kind in ["params", "result"] {
            let s = wuu_protocol::schema::standalone(&bundle, "reverse_methods", r.name, kind)
                .ok_or("schema bundle is missing a reverse method")?;
            write(
                format!("reverse/{}.{kind}.json", r.name.replace('/', ".")),
                &s,
            )?;
            n += 1;
        }
    }
    Ok(n)
}
