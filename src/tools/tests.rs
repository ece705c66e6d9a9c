//! Tests of the tool surface through [`spawn`], on real temp dirs.

use super::*;
use serde_json::json;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

struct Ws {
    dir: tempfile::TempDir,
    spill: tempfile::TempDir,
}

impl Ws {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            spill: tempfile::tempdir().unwrap(),
        }
    }
    fn root(&self) -> PathBuf {
        fs::canonicalize(self.dir.path()).unwrap()
    }
    fn ctx(&self, mode: PermissionMode) -> ToolContext {
        ToolContext {
            workspace_root: self.root(),
            cwd: self.root(),
            permission_mode: mode,
            spill_dir: self.spill.path().join("spill"),
            default_timeout_ms: 20_000,
            output_cap_bytes: 4096,
            temp_dir: self.spill.path().join("tmp"),
            sandbox: Default::default(),
            background: None,
            max_background: 0,
        }
    }
    fn write(&self, rel: &str, content: &str) {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root().join(rel)).unwrap()
    }
}

/// Runs a call to its end; returns the streamed output events and the outcome.
fn call_ctx(
    name: &str,
    args: &str,
    ctx: ToolContext,
) -> (Vec<(&'static str, String)>, ToolOutcome) {
    let h = spawn(name, args, ctx);
    collect(&h, Duration::from_secs(60))
}

fn collect(h: &ToolHandle, limit: Duration) -> (Vec<(&'static str, String)>, ToolOutcome) {
    let mut out = Vec::new();
    loop {
        match h.events.recv_timeout(limit) {
            Ok(ToolEvent::Output { stream, text }) => out.push((stream, text)),
            Ok(ToolEvent::Done(o)) => {
                // Done is the last event.
                assert!(h.events.recv_timeout(Duration::from_secs(5)).is_err());
                return (out, o);
            }
            Err(e) => panic!("no Done event: {e}"),
        }
    }
}

fn call(ws: &Ws, mode: PermissionMode, name: &str, args: Value) -> ToolOutcome {
    call_ctx(name, &args.to_string(), ws.ctx(mode)).1
}

fn std_call(ws: &Ws, name: &str, args: Value) -> ToolOutcome {
    call(ws, PermissionMode::Standard, name, args)
}

fn assert_denied(o: &ToolOutcome) {
    assert!(o.is_error, "{o:?}");
    assert!(o.permission_denied, "{o:?}");
    assert!(o.output.starts_with("permission denied: "), "{}", o.output);
}

fn assert_error(o: &ToolOutcome, needle: &str) {
    assert!(o.is_error, "{o:?}");
    assert!(!o.permission_denied, "{o:?}");
    assert!(o.output.contains(needle), "{:?} lacks {needle:?}", o.output);
}

fn sha(s: &str) -> String {
    revision::sha256_hex(s.as_bytes())
}

// ----------------------------------------------------------------------------- surface

#[test]
fn specs_list_every_tool_with_object_schemas() {
    for mode in [
        PermissionMode::ReadOnly,
        PermissionMode::Standard,
        PermissionMode::Unconfined,
    ] {
        let specs = specs(mode);
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, TOOL_NAMES);
        for s in &specs {
            assert_eq!(s.parameters["type"], "object", "{}", s.name);
            assert!(!s.description.is_empty());
        }
    }
    let ro = specs(PermissionMode::ReadOnly);
    assert!(ro[0].description.contains("read_only"));
    assert!(!ro[1].description.contains("read_only"));
    let std = specs(PermissionMode::Standard);
    assert_eq!(std[0].parameters["required"], json!(["command"]));
    assert_eq!(
        std[3].parameters["required"],
        json!(["path", "old_string", "new_string"])
    );
    assert_eq!(
        std[8].parameters["properties"]["todos"]["items"]["properties"]["status"]["enum"],
        json!(["pending", "in_progress", "completed"])
    );
}

#[test]
fn at_most_once_tools() {
    for t in ["bash", "write_file", "edit_file", "apply_patch"] {
        assert!(is_at_most_once(t));
    }
    for t in [
        "read_file",
        "list_files",
        "grep",
        "glob",
        "todo_write",
        "nope",
    ] {
        assert!(!is_at_most_once(t));
    }
}

#[test]
fn malformed_arguments_are_clear_errors() {
    let ws = Ws::new();
    let ctx = || ws.ctx(PermissionMode::Standard);
    let (_, o) = call_ctx("read_file", "{not json", ctx());
    assert_error(&o, "not valid JSON");
    let (_, o) = call_ctx("read_file", "{}", ctx());
    assert_error(&o, "missing field `path`");
    let (_, o) = call_ctx("read_file", "", ctx());
    assert_error(&o, "missing field `path`");
    let (_, o) = call_ctx("read_file", r#"{"path": 5}"#, ctx());
    assert_error(&o, "invalid type");
    let (_, o) = call_ctx("bash", "[1]", ctx());
    assert_error(&o, "expected a JSON object");
    let (_, o) = call_ctx(
        "edit_file",
        r#"{"path":"a","old_string":"x","new_string":"y","replace_all":"yes"}"#,
        ctx(),
    );
    assert_error(&o, "invalid type");
    let (_, o) = call_ctx("frobnicate", "{}", ctx());
    assert_error(&o, "unknown tool `frobnicate`");
    assert!(o.output.contains("apply_patch"));
}

// ----------------------------------------------------------------------------- read_file

#[test]
fn read_file_numbers_lines_and_pages() {
    let ws = Ws::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    ws.write("a.txt", &text);
    let o = std_call(&ws, "read_file", json!({"path": "a.txt"}));
    assert!(!o.is_error, "{o:?}");
    assert!(
        o.output.starts_with("     1\tline 1\n     2\tline 2\n"),
        "{}",
        o.output
    );
    assert!(o.output.contains("    10\tline 10\n"));
    assert_eq!(o.detail["total_lines"], 10);
    let o = std_call(
        &ws,
        "read_file",
        json!({"path": "a.txt", "offset": 3, "limit": 2}),
    );
    assert!(
        o.output.starts_with("     3\tline 3\n     4\tline 4\n"),
        "{}",
        o.output
    );
    assert!(!o.output.contains("line 5"));
    assert!(o.output.contains("use offset=5"), "{}", o.output);
    let o = std_call(&ws, "read_file", json!({"path": "a.txt", "offset": 11}));
    assert_error(&o, "past the end");
    ws.write("long.txt", &"x".repeat(5000));
    let o = std_call(&ws, "read_file", json!({"path": "long.txt"}));
    assert!(o.output.contains("[line cut]"));
    assert!(o.output.len() < 3000);
    ws.write("empty.txt", "");
    let o = std_call(&ws, "read_file", json!({"path": "empty.txt"}));
    assert!(!o.is_error && o.output.contains("(empty file)"));
}

#[test]
fn read_file_errors() {
    let ws = Ws::new();
    fs::write(ws.root().join("bin.dat"), b"abc\0def").unwrap();
    assert_error(
        &std_call(&ws, "read_file", json!({"path": "bin.dat"})),
        "binary",
    );
    assert_error(
        &std_call(&ws, "read_file", json!({"path": "missing.txt"})),
        "no such file",
    );
    fs::create_dir(ws.root().join("d")).unwrap();
    assert_error(
        &std_call(&ws, "read_file", json!({"path": "d"})),
        "is a directory",
    );
    assert_error(
        &std_call(&ws, "read_file", json!({"path": ""})),
        "must not be empty",
    );
}

// ----------------------------------------------------------------------------- write/edit

#[test]
fn write_file_creates_and_modifies_with_hashes() {
    let ws = Ws::new();
    let o = std_call(
        &ws,
        "write_file",
        json!({"path": "new/dir/f.txt", "content": "hello\n"}),
    );
    assert!(!o.is_error, "{o:?}");
    assert_eq!(ws.read("new/dir/f.txt"), "hello\n");
    assert_eq!(o.detail["path"], "new/dir/f.txt");
    assert_eq!(o.detail["action"], "created");
    assert_eq!(o.detail["old_file_sha"], "");
    assert_eq!(o.detail["new_file_sha"], sha("hello\n"));
    let rev1 = o.detail["workspace_revision"].as_str().unwrap().to_string();
    assert_eq!(rev1.len(), 64);
    let o = std_call(
        &ws,
        "write_file",
        json!({"path": "new/dir/f.txt", "content": "bye\n"}),
    );
    assert_eq!(o.detail["action"], "modified");
    assert_eq!(o.detail["old_file_sha"], sha("hello\n"));
    assert_eq!(o.detail["new_file_sha"], sha("bye\n"));
    assert_ne!(o.detail["workspace_revision"].as_str().unwrap(), rev1);
    assert!(o.output.contains("modified"));
    assert_eq!(
        (&o.detail["lines_added"], &o.detail["lines_removed"]),
        (&json!(1), &json!(1))
    );
}

#[test]
fn edit_file_replaces_exact_text() {
    let ws = Ws::new();
    ws.write("e.txt", "alpha beta\ngamma beta\n");
    let o = std_call(
        &ws,
        "edit_file",
        json!({"path": "e.txt", "old_string": "alpha", "new_string": "ALPHA"}),
    );
    assert!(!o.is_error, "{o:?}");
    assert_eq!(ws.read("e.txt"), "ALPHA beta\ngamma beta\n");
    assert_eq!(o.detail["action"], "modified");
    assert_eq!(o.detail["old_file_sha"], sha("alpha beta\ngamma beta\n"));
    assert_eq!(o.detail["new_file_sha"], sha("ALPHA beta\ngamma beta\n"));
    assert_eq!(
        (&o.detail["lines_added"], &o.detail["lines_removed"]),
        (&json!(1), &json!(1))
    );

    let o = std_call(
        &ws,
        "edit_file",
        json!({"path": "e.txt", "old_string": "beta", "new_string": "B"}),
    );
    assert_error(&o, "occurs 2 times");
    assert_eq!(ws.read("e.txt"), "ALPHA beta\ngamma beta\n");
    let o = std_call(
        &ws,
        "edit_file",
        json!({"path": "e.txt", "old_string": "beta", "new_string": "B", "replace_all": true}),
    );
    assert!(!o.is_error);
    assert!(o.output.contains("2 occurrences"));
    assert_eq!(ws.read("e.txt"), "ALPHA B\ngamma B\n");

    assert_error(
        &std_call(
            &ws,
            "edit_file",
            json!({"path": "e.txt", "old_string": "zzz", "new_string": "y"}),
        ),
        "not found",
    );
    assert_error(
        &std_call(
            &ws,
            "edit_file",
            json!({"path": "e.txt", "old_string": "", "new_string": "y"}),
        ),
        "must not be empty",
    );
    assert_error(
        &std_call(
            &ws,
            "edit_file",
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        ),
        "no such file",
    );
}

// ----------------------------------------------------------------------------- apply_patch

#[test]
fn apply_patch_add_update_delete_move() {
    let ws = Ws::new();
    ws.write("upd.txt", "one\ntwo\nthree\nfour\n");
    ws.write("del.txt", "bye\n");
    ws.write("src/old.rs", "fn a() {}\nfn b() {}\n");
    let patch = "*** Begin Patch\n\
*** Add File: added/new.txt\n\
+hello\n\
+world\n\
*** Update File: upd.txt\n\
@@ one\n \
two\n\
-three\n\
+THREE\n \
four\n\
*** Delete File: del.txt\n\
*** Update File: src/old.rs\n\
*** Move to: src/new.rs\n\
@@\n\
-fn b() {}\n\
+fn b() { todo!() }\n\
*** End of File\n\
*** End Patch";
    let o = std_call(&ws, "apply_patch", json!({ "patch": patch }));
    assert!(!o.is_error, "{o:?}");
    assert_eq!(ws.read("added/new.txt"), "hello\nworld\n");
    assert_eq!(ws.read("upd.txt"), "one\ntwo\nTHREE\nfour\n");
    assert!(!ws.root().join("del.txt").exists());
    assert!(!ws.root().join("src/old.rs").exists());
    assert_eq!(ws.read("src/new.rs"), "fn a() {}\nfn b() { todo!() }\n");
    let files = o.detail["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    assert_eq!(files[0]["path"], "added/new.txt");
    assert_eq!(files[0]["action"], "created");
    assert_eq!(files[0]["old_file_sha"], "");
    assert_eq!(files[0]["new_file_sha"], sha("hello\nworld\n"));
    assert_eq!(files[1]["action"], "modified");
    assert_eq!(files[1]["old_file_sha"], sha("one\ntwo\nthree\nfour\n"));
    assert_eq!(files[2]["action"], "deleted");
    assert_eq!(files[2]["new_file_sha"], "");
    assert_eq!(files[3]["action"], "moved");
    assert_eq!(files[3]["path"], "src/old.rs");
    assert_eq!(files[3]["move_path"], "src/new.rs");
    assert_eq!(
        files[3]["new_file_sha"],
        sha("fn a() {}\nfn b() { todo!() }\n")
    );
    let counts: Vec<(u64, u64)> = files
        .iter()
        .map(|f| {
            (
                f["lines_added"].as_u64().unwrap(),
                f["lines_removed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, [(2, 0), (1, 1), (0, 1), (1, 1)]);
    assert_eq!(o.detail["workspace_revision"].as_str().unwrap().len(), 64);
    assert!(o.output.contains("A added/new.txt"));
    assert!(o.output.contains("D del.txt"));
}

#[test]
fn apply_patch_tolerates_trailing_whitespace() {
    let ws = Ws::new();
    ws.write("w.txt", "a  \nb\t\nc\n");
    let patch = "*** Begin Patch\n*** Update File: w.txt\n a\n-b\n+B\n c\n*** End Patch\n";
    let o = std_call(&ws, "apply_patch", json!({ "patch": patch }));
    assert!(!o.is_error, "{o:?}");
    assert_eq!(ws.read("w.txt"), "a  \nB\nc\n");
}

#[test]
fn apply_patch_failing_hunk_changes_nothing() {
    let ws = Ws::new();
    ws.write("a.txt", "keep\n");
    ws.write("b.txt", "x\ny\n");
    ws.write("c.txt", "delete me\n");
    let patch = "*** Begin Patch\n\
*** Add File: fresh.txt\n\
+new\n\
*** Update File: a.txt\n\
-keep\n\
+changed\n\
*** Delete File: c.txt\n\
*** Update File: b.txt\n\
@@\n \
x\n\
-NOT THERE\n\
+z\n\
*** End Patch";
    let o = std_call(&ws, "apply_patch", json!({ "patch": patch }));
    assert_error(&o, "hunk 1 of `b.txt` does not apply");
    assert!(o.output.contains("No files were changed"));
    assert!(!ws.root().join("fresh.txt").exists());
    assert_eq!(ws.read("a.txt"), "keep\n");
    assert_eq!(ws.read("b.txt"), "x\ny\n");
    assert_eq!(ws.read("c.txt"), "delete me\n");

    let o = std_call(
        &ws,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Update File: missing.txt\n-a\n+b\n*** End Patch"}),
    );
    assert_error(&o, "no such file");
    let o = std_call(
        &ws,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch"}),
    );
    assert_error(&o, "no such file");
    let o = std_call(&ws, "apply_patch", json!({"patch": "diff --git a/x b/x"}));
    assert_error(&o, "*** Begin Patch");
}

// ----------------------------------------------------------------------------- permissions

#[test]
fn read_only_refuses_writes_and_confines_bash_but_reads() {
    let ws = Ws::new();
    ws.write("r.txt", "content\n");
    let ro = PermissionMode::ReadOnly;
    assert_denied(&call(
        &ws,
        ro,
        "write_file",
        json!({"path": "x.txt", "content": "a"}),
    ));
    assert_denied(&call(
        &ws,
        ro,
        "edit_file",
        json!({"path": "r.txt", "old_string": "content", "new_string": "c"}),
    ));
    assert_denied(&call(
        &ws,
        ro,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: x.txt\n+a\n*** End Patch"}),
    ));
    // bash runs, read-only: the workspace cannot be written, the private temp dir can.
    let o = call(&ws, ro, "bash", json!({"command": "touch x.txt"}));
    assert!(
        o.is_error
            && (o.output.contains("Permission denied")
                || o.output.contains("Read-only file system")),
        "{o:?}"
    );
    let o = call(
        &ws,
        ro,
        "bash",
        json!({"command": "cat r.txt && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\""}),
    );
    assert!(!o.is_error && o.output.contains("content\nt\n"), "{o:?}");
    assert!(!ws.root().join("x.txt").exists());
    assert_eq!(ws.read("r.txt"), "content\n");
    let o = call(&ws, ro, "read_file", json!({"path": "r.txt"}));
    assert!(!o.is_error && o.output.contains("content"));
    assert!(!call(&ws, ro, "list_files", json!({})).is_error);
    assert!(!call(&ws, ro, "grep", json!({"pattern": "content"})).is_error);
    assert!(!call(&ws, ro, "glob", json!({"pattern": "*.txt"})).is_error);
    assert!(!call(&ws, ro, "todo_write", json!({"todos": []})).is_error);
    // Reading outside the workspace is refused in read_only too.
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("s.txt"), "secret").unwrap();
    let p = outside.path().join("s.txt");
    assert_denied(&call(&ws, ro, "read_file", json!({"path": p})));
}

#[test]
fn standard_refuses_dotdot_and_symlink_escapes() {
    let parent = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(parent.path()).unwrap().join("ws");
    fs::create_dir(&root).unwrap();
    let outside = fs::canonicalize(parent.path()).unwrap().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("nothing-yet.txt"), root.join("dangling")).unwrap();
    let spill = tempfile::tempdir().unwrap();
    let ctx = |mode| ToolContext {
        workspace_root: root.clone(),
        cwd: root.clone(),
        permission_mode: mode,
        spill_dir: spill.path().to_path_buf(),
        default_timeout_ms: 10_000,
        output_cap_bytes: 4096,
        temp_dir: spill.path().join("tmp"),
        sandbox: Default::default(),
        background: None,
        max_background: 0,
    };
    let st = || ctx(PermissionMode::Standard);
    let run = |c: ToolContext, name: &str, args: Value| call_ctx(name, &args.to_string(), c).1;

    assert_denied(&run(
        st(),
        "write_file",
        json!({"path": "../outside/x.txt", "content": "a"}),
    ));
    assert_denied(&run(
        st(),
        "write_file",
        json!({"path": "sub/../../outside/x.txt", "content": "a"}),
    ));
    assert_denied(&run(
        st(),
        "write_file",
        json!({"path": "link/x.txt", "content": "a"}),
    ));
    assert_denied(&run(
        st(),
        "write_file",
        json!({"path": "dangling", "content": "a"}),
    ));
    assert_denied(&run(
        st(),
        "edit_file",
        json!({"path": "link/secret.txt", "old_string": "secret", "new_string": "x"}),
    ));
    assert_denied(&run(st(), "read_file", json!({"path": "link/secret.txt"})));
    assert_denied(&run(
        st(),
        "read_file",
        json!({"path": "../outside/secret.txt"}),
    ));
    assert_denied(&run(st(), "list_files", json!({"path": ".."})));
    assert_denied(&run(
        st(),
        "grep",
        json!({"pattern": "secret", "path": "link"}),
    ));
    assert_denied(&run(
        st(),
        "bash",
        json!({"command": "true", "workdir": "../outside"}),
    ));
    let patch = "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: link/evil.txt\n+evil\n*** End Patch";
    assert_denied(&run(st(), "apply_patch", json!({ "patch": patch })));
    assert!(!root.join("ok.txt").exists());
    assert!(!outside.join("x.txt").exists());
    assert!(!outside.join("evil.txt").exists());
    assert!(!outside.join("nothing-yet.txt").exists());
    assert_eq!(
        fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret\n"
    );

    // A symlink inside the workspace pointing inside is fine.
    fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("inner")).unwrap();
    let o = run(
        st(),
        "write_file",
        json!({"path": "inner/f.txt", "content": "ok"}),
    );
    assert!(!o.is_error, "{o:?}");
    assert_eq!(o.detail["path"], "real/f.txt");

    // Unconfined may write anywhere.
    let un = || ctx(PermissionMode::Unconfined);
    let o = run(
        un(),
        "write_file",
        json!({"path": "../outside/x.txt", "content": "a"}),
    );
    assert!(!o.is_error, "{o:?}");
    assert_eq!(fs::read_to_string(outside.join("x.txt")).unwrap(), "a");
    assert_eq!(
        o.detail["path"],
        outside.join("x.txt").to_string_lossy().as_ref()
    );
    let o = run(un(), "read_file", json!({"path": "link/secret.txt"}));
    assert!(!o.is_error && o.output.contains("secret"));
}

// ----------------------------------------------------------------------------- search

fn search_fixture() -> Ws {
    let ws = Ws::new();
    ws.write(".gitignore", "ignored/\n*.log\n");
    ws.write("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    ws.write("src/lib.rs", "pub fn lib() {}\n// TODO: more\n");
    ws.write("src/deep/mod.rs", "// TODO deep\n");
    ws.write("ignored/x.rs", "// TODO ignored\n");
    ws.write("debug.log", "TODO in log\n");
    ws.write("README.md", "# TODO readme\n");
    ws.write(".git/config", "TODO git\n");
    fs::write(ws.root().join("blob.bin"), b"TODO\0binary").unwrap();
    ws
}

#[test]
fn list_files_respects_gitignore_and_depth() {
    let ws = search_fixture();
    let o = std_call(&ws, "list_files", json!({}));
    assert!(!o.is_error, "{o:?}");
    let out = &o.output;
    assert!(out.starts_with("./\n"), "{out}");
    assert!(out.contains("\n  src/\n"), "{out}");
    assert!(out.contains("\n    main.rs\n"), "{out}");
    assert!(out.contains("\n    deep/\n"), "{out}");
    assert!(!out.contains("mod.rs"), "depth 2: {out}");
    assert!(!out.contains("ignored"), "{out}");
    assert!(!out.contains("debug.log"), "{out}");
    assert!(!out.contains(".git/"), "{out}");
    assert!(out.contains(".gitignore"), "{out}");
    let o = std_call(&ws, "list_files", json!({"path": "src", "depth": 5}));
    assert!(o.output.starts_with("src/\n"), "{}", o.output);
    assert!(o.output.contains("mod.rs"));
    assert_error(
        &std_call(&ws, "list_files", json!({"path": "README.md"})),
        "not a directory",
    );
}

#[test]
fn grep_finds_matches_respecting_ignores() {
    let ws = search_fixture();
    let o = std_call(&ws, "grep", json!({"pattern": "TODO"}));
    assert!(!o.is_error, "{o:?}");
    let lines: Vec<&str> = o.output.lines().collect();
    assert_eq!(
        lines,
        [
            "README.md:1:# TODO readme",
            "src/deep/mod.rs:1:// TODO deep",
            "src/lib.rs:2:// TODO: more"
        ]
    );
    assert_eq!(o.detail["matches"], 3);
    let o = std_call(&ws, "grep", json!({"pattern": "TODO", "glob": "*.rs"}));
    assert_eq!(o.detail["matches"], 2, "{}", o.output);
    let o = std_call(
        &ws,
        "grep",
        json!({"pattern": "TODO", "path": "src", "glob": "deep/*.rs"}),
    );
    assert_eq!(o.output, "src/deep/mod.rs:1:// TODO deep\n");
    let o = std_call(
        &ws,
        "grep",
        json!({"pattern": "fn \\w+\\(", "path": "src/main.rs"}),
    );
    assert_eq!(o.output, "src/main.rs:1:fn main() {\n");
    let o = std_call(&ws, "grep", json!({"pattern": "zzzz"}));
    assert!(!o.is_error && o.output.contains("No matches"));
    assert_error(
        &std_call(&ws, "grep", json!({"pattern": "("})),
        "invalid regex",
    );
}

#[test]
fn glob_matches_relative_paths() {
    let ws = search_fixture();
    let o = std_call(&ws, "glob", json!({"pattern": "**/*.rs"}));
    assert!(!o.is_error, "{o:?}");
    let mut got: Vec<&str> = o.output.lines().collect();
    got.sort();
    assert_eq!(got, ["src/deep/mod.rs", "src/lib.rs", "src/main.rs"]);
    let o = std_call(&ws, "glob", json!({"pattern": "src/*.rs"}));
    let mut got: Vec<&str> = o.output.lines().collect();
    got.sort();
    assert_eq!(got, ["src/lib.rs", "src/main.rs"]);
    let o = std_call(&ws, "glob", json!({"pattern": "*.md"}));
    assert_eq!(o.output, "README.md\n");
    let o = std_call(&ws, "glob", json!({"pattern": "*.log"}));
    assert!(o.output.contains("No files matched"));
    assert_error(&std_call(&ws, "glob", json!({"pattern": "../*"})), "..");
    // Newest first.
    std::thread::sleep(Duration::from_millis(20));
    ws.write("src/zz_newest.rs", "");
    let o = std_call(&ws, "glob", json!({"pattern": "src/*.rs"}));
    assert_eq!(o.output.lines().next(), Some("src/zz_newest.rs"));
}

// ----------------------------------------------------------------------------- todo

#[test]
fn todo_write_validates_and_echoes() {
    let ws = Ws::new();
    let todos = json!([{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}, {"content": "c", "status": "pending"}]);
    let o = std_call(&ws, "todo_write", json!({ "todos": todos }));
    assert!(!o.is_error, "{o:?}");
    assert_eq!(o.detail["todos"], todos);
    assert!(o.output.contains("[x] a") && o.output.contains("[~] b") && o.output.contains("[ ] c"));
    let o = std_call(
        &ws,
        "todo_write",
        json!({"todos": [{"content": "a", "status": "done"}]}),
    );
    assert_error(&o, "todos[0].status");
    let o = std_call(&ws, "todo_write", json!({"todos": [{"content": "a"}]}));
    assert_error(&o, "missing field `status`");
}

// ----------------------------------------------------------------------------- bash

fn bash(ws: &Ws, args: Value) -> (Vec<(&'static str, String)>, ToolOutcome) {
    call_ctx("bash", &args.to_string(), ws.ctx(PermissionMode::Standard))
}

/// Pids (other than ours) whose command line contains `marker`.
fn procs_with(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.chars().all(|c| c.is_ascii_digit()) || name == me {
            continue;
        }
        if let Ok(cmd) = fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                found.push(name);
            }
        }
    }
    found
}

fn assert_no_procs(marker: &str) {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let left = procs_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "processes left with {marker}: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn marker() -> String {
    format!("wuu-test-{}", uuid::Uuid::new_v4().simple())
}

/// A command whose processes all carry `m` in their argv: a backgrounded child shell
/// and the main shell, both sleeping.
fn sleepers(m: &str, secs: u32) -> String {
    format!("bash -c 'sleep {secs}; : {m}' & bash -c 'sleep {secs}; : {m}'; : {m}")
}

#[test]
fn bash_streams_in_order_with_exit_code_and_stderr() {
    let ws = Ws::new();
    let (events, o) = bash(
        &ws,
        json!({"command": "echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; exit 3"}),
    );
    let joined: Vec<(&str, &str)> = events.iter().map(|(s, t)| (*s, t.as_str())).collect();
    assert_eq!(
        joined,
        [
            ("stdout", "one\n"),
            ("stderr", "two\n"),
            ("stdout", "three\n")
        ]
    );
    assert!(o.is_error);
    assert_eq!(o.detail["exit_code"], 3);
    assert_eq!(o.detail["timed_out"], false);
    assert_eq!(o.detail["interrupted"], false);
    assert_eq!(o.detail["stdout_bytes"], 10);
    assert_eq!(o.detail["stderr_bytes"], 4);
    assert_eq!(o.detail["lossy_utf8"], false);
    assert!(o.detail.get("spill_path").is_none());
    assert!(
        o.output
            .starts_with("Exit code: 3\nstdout:\none\nthree\nstderr:\ntwo\n"),
        "{}",
        o.output
    );

    let (_, o) = bash(
        &ws,
        json!({"command": "pwd; test -t 0 || echo stdin-not-tty; cat"}),
    );
    assert!(!o.is_error, "{o:?}");
    assert!(o.output.contains(&ws.root().to_string_lossy().to_string()));
    fs::create_dir(ws.root().join("sub")).unwrap();
    let (_, o) = bash(&ws, json!({"command": "pwd", "workdir": "sub"}));
    assert!(o.output.contains("/sub\n"), "{}", o.output);
    let (_, o) = bash(&ws, json!({"command": "true", "workdir": "nope"}));
    assert!(o.is_error);
}

#[test]
fn bash_kills_background_jobs_when_the_command_exits() {
    let ws = Ws::new();
    let m = marker();
    let start = Instant::now();
    let (_, o) = bash(
        &ws,
        json!({"command": format!("bash -c 'sleep 300; : {m}' & echo started")}),
    );
    // SIGTERM suffices: no wait for the kill grace period.
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(!o.is_error, "{o:?}");
    assert!(o.output.contains("started"));
    assert_no_procs(&m);
}

#[test]
fn a_background_job_that_survives_the_first_sigterm_gets_another_before_the_grace() {
    let ws = Ws::new();
    let m = marker();
    let start = Instant::now();
    // The job ignores the first SIGTERM only (its trap resets itself), as a process
    // forked while the signal was delivered misses it.
    let (_, o) = bash(
        &ws,
        json!({"command": format!(
            "bash -c 'trap \"trap - TERM\" TERM; while :; do sleep 0.05; done; : {m}' & \
             sleep 0.3; echo started"
        )}),
    );
    let took = start.elapsed();
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(!o.is_error, "{o:?}");
    assert!(o.output.contains("started"));
    assert_no_procs(&m);
}

#[test]
fn bash_timeout_kills_the_process_group() {
    let ws = Ws::new();
    let m = marker();
    let start = Instant::now();
    let (_, o) = bash(
        &ws,
        json!({"command": format!("echo before; {}", sleepers(&m, 300)), "timeout_ms": 300}),
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(o.is_error);
    assert_eq!(o.detail["timed_out"], true);
    assert!(o.output.contains("timed out after 300 ms"), "{}", o.output);
    assert!(o.output.contains("before"));
    assert_no_procs(&m);
}

#[test]
fn bash_cancel_kills_everything_quickly() {
    let ws = Ws::new();
    let m = marker();
    let h = spawn(
        "bash",
        &json!({"command": format!("echo ready; {}", sleepers(&m, 30))}).to_string(),
        ws.ctx(PermissionMode::Standard),
    );
    match h.events.recv_timeout(Duration::from_secs(10)) {
        Ok(ToolEvent::Output { text, .. }) => assert_eq!(text, "ready\n"),
        other => panic!("{other:?}"),
    }
    // Both sleepers are running.
    let until = Instant::now() + Duration::from_secs(5);
    while procs_with(&m).len() < 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(procs_with(&m).len() >= 3, "{:?}", procs_with(&m));
    let start = Instant::now();
    h.cancel();
    assert!(h.is_cancelled());
    let (_, o) = collect(&h, Duration::from_secs(10));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(o.is_error);
    assert!(o.output.contains("interrupted"), "{}", o.output);
    assert_eq!(o.detail["interrupted"], true);
    assert_no_procs(&m);
}

#[test]
fn bash_cancel_escalates_to_sigkill() {
    let ws = Ws::new();
    let m = marker();
    let cmd = format!("trap '' TERM; echo ready; bash -c 'sleep 30; : {m}'; : {m}");
    let h = spawn(
        "bash",
        &json!({ "command": cmd }).to_string(),
        ws.ctx(PermissionMode::Standard),
    );
    assert!(matches!(
        h.events.recv_timeout(Duration::from_secs(10)),
        Ok(ToolEvent::Output { .. })
    ));
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    h.cancel();
    let (_, o) = collect(&h, Duration::from_secs(10));
    let took = start.elapsed();
    assert!(took >= KILL_GRACE - Duration::from_millis(100), "{took:?}");
    assert!(took < KILL_GRACE + Duration::from_secs(1), "{took:?}");
    assert_eq!(o.detail["interrupted"], true);
    assert_eq!(o.detail["signal"], 9);
    assert_no_procs(&m);
}

#[test]
fn bash_cancel_ends_an_escaped_process_that_ignores_sigterm_at_the_grace() {
    // Unconfined (no PID namespace): the launcher's own grace runs as long as the host's,
    // so the host's SIGKILL of the group can end the launcher first. The escaped process
    // that ignores SIGTERM must still end then, not after the host gave up on the pipes
    // it holds.
    let ws = Ws::new();
    let m = marker();
    let h = spawn(
        "bash",
        &json!({"command": format!(
            "setsid bash -c 'trap \"\" TERM HUP; sleep 300; : {m}' & echo up; sleep 300; : {m}"
        )})
        .to_string(),
        ws.ctx(PermissionMode::Unconfined),
    );
    assert!(matches!(
        h.events.recv_timeout(Duration::from_secs(10)),
        Ok(ToolEvent::Output { .. })
    ));
    std::thread::sleep(Duration::from_millis(200));
    // Make the race certain: the launcher, stopped, cannot end anything before the
    // host's SIGKILL ends it.
    let launcher = procs_with(&m)
        .into_iter()
        .find(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__sandbox"))
        })
        .expect("the launcher");
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &launcher])
        .status()
        .unwrap();
    assert!(stopped.success());
    h.cancel();
    let (_, o) = collect(&h, Duration::from_secs(20));
    assert_eq!(o.detail["interrupted"], true);
    assert!(!o.output.contains("stopped reading"), "{}", o.output);
    assert_no_procs(&m);
}

#[test]
fn bash_dropped_handle_still_kills_the_group_at_the_end() {
    let ws = Ws::new();
    let m = marker();
    let h = spawn(
        "bash",
        &json!({"command": format!("bash -c 'sleep 300; : {m}' & sleep 0.3; echo x")}).to_string(),
        ws.ctx(PermissionMode::Standard),
    );
    drop(h);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!procs_with(&m).is_empty());
    let until = Instant::now() + Duration::from_secs(5);
    while !procs_with(&m).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_no_procs(&m);
}

#[test]
fn bash_escaped_sessions_end_with_the_command() {
    // `setsid` and a double fork leave the process group (and the session); they still
    // end with the command: in a PID namespace (standard) and through the subreaper
    // (unconfined), without waiting for the pipes they hold.
    for mode in [PermissionMode::Standard, PermissionMode::Unconfined] {
        let ws = Ws::new();
        let m = marker();
        let start = Instant::now();
        let cmd = format!(
            "setsid bash -c 'sleep 300; : {m}' & (setsid bash -c 'sleep 300; : {m}' &); sleep 0.3; echo out"
        );
        let (_, o) = call_ctx("bash", &json!({ "command": cmd }).to_string(), ws.ctx(mode));
        let took = start.elapsed();
        // Not stalled (a generous bound: the machine may be loaded); the pipes were not
        // abandoned, so the escaped processes ended with the command rather than being
        // left holding them.
        assert!(took < Duration::from_secs(10), "{mode:?}: {took:?}");
        assert!(o.output.contains("out"), "{}", o.output);
        assert!(!o.output.contains("stopped reading"), "{}", o.output);
        assert!(procs_with(&m).is_empty(), "{mode:?}: {:?}", procs_with(&m));
    }
}

#[test]
fn bash_non_utf8_output_is_lossy_and_flagged() {
    let ws = Ws::new();
    let (events, o) = bash(
        &ws,
        json!({"command": r"printf 'a\xff\xfeb'; printf '\xe2\x82'; sleep 0.1; printf '\xac!'"}),
    );
    let text: String = events.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(text, "a\u{FFFD}\u{FFFD}b€!");
    assert_eq!(o.detail["lossy_utf8"], true);
    assert!(o.output.contains("a\u{FFFD}\u{FFFD}b€!"));
    assert!(o.output.contains("not valid UTF-8"));
    assert!(!o.is_error);
}

#[test]
fn bash_output_over_cap_is_spilled_whole() {
    let ws = Ws::new();
    let (events, o) = bash(&ws, json!({"command": "seq 1 20000; echo err >&2"}));
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let streamed: String = events
        .iter()
        .filter(|(s, _)| *s == "stdout")
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(streamed, expected);
    assert_eq!(o.detail["stdout_bytes"], expected.len());
    let spill = o.detail["spill_path"].as_str().expect("spill_path");
    assert!(Path::new(spill).starts_with(ws.spill.path()));
    let spilled = fs::read_to_string(spill).unwrap();
    assert_eq!(spilled.len(), expected.len() + 4);
    assert!(spilled.contains("err\n"));
    assert_eq!(spilled.replace("err\n", ""), expected);
    assert!(o.output.contains(spill));
    assert!(o.output.contains("stdout truncated"));
    assert!(o.output.contains("\n1\n2\n3\n"));
    assert!(o.output.contains("19999\n20000\n"));
    assert!(o.output.len() < 4096 + 1000, "{}", o.output.len());
}

#[test]
fn bash_huge_output_stays_bounded() {
    let ws = Ws::new();
    let h = spawn(
        "bash",
        &json!({"command": "head -c 20000000 /dev/zero | tr '\\0' 'x'"}).to_string(),
        ws.ctx(PermissionMode::Standard),
    );
    let mut streamed = 0usize;
    let mut max_event = 0usize;
    let o = loop {
        match h.events.recv_timeout(Duration::from_secs(60)).unwrap() {
            ToolEvent::Output { text, .. } => {
                streamed += text.len();
                max_event = max_event.max(text.len());
            }
            ToolEvent::Done(o) => break o,
        }
    };
    assert_eq!(streamed, 20_000_000);
    assert!(max_event <= 64 * 1024);
    assert_eq!(o.detail["stdout_bytes"], 20_000_000);
    assert!(o.output.len() < 8192, "{}", o.output.len());
    let spill = o.detail["spill_path"].as_str().unwrap();
    assert_eq!(fs::metadata(spill).unwrap().len(), 20_000_000);
}

#[test]
fn bash_backpressure_blocks_instead_of_dropping() {
    let ws = Ws::new();
    let total = 40_000_000usize;
    let cmd = format!("head -c {total} /dev/zero | tr '\\0' 'y'; touch finished");
    let h = spawn(
        "bash",
        &json!({ "command": cmd }).to_string(),
        ws.ctx(PermissionMode::Standard),
    );
    // Nobody reads: the command must stall once the bounded channels and the pipe fill.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !ws.root().join("finished").exists(),
        "output was not back-pressured"
    );
    assert_eq!(h.events.len(), EVENT_CAPACITY);
    let (events, o) = collect(&h, Duration::from_secs(60));
    let streamed: usize = events.iter().map(|(_, t)| t.len()).sum();
    assert_eq!(streamed, total);
    assert!(!o.is_error, "{o:?}");
    assert!(ws.root().join("finished").exists());
}

// ----------------------------------------------------------------------------- races

/// A directory `race/` flipped to a symlink to `outside/` and back in a tight loop while
/// the file tools use paths through it: nothing outside is ever read or changed.
#[test]
fn symlink_swap_race_never_reaches_outside() {
    let parent = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(parent.path()).unwrap();
    let root = base.join("ws");
    let outside = base.join("outside");
    fs::create_dir_all(root.join("race")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.txt"), "OUTSIDE-SECRET\n").unwrap();
    fs::write(outside.join("victim.txt"), "victim\n").unwrap();
    fs::write(root.join("race/secret.txt"), "inside\n").unwrap();
    fs::write(root.join("race/victim.txt"), "victim\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (root, outside, stop) = (root.clone(), outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let race = root.join("race");
            let parked = root.join("race.real");
            while !stop.load(Ordering::SeqCst) {
                let _ = fs::rename(&race, &parked);
                let _ = std::os::unix::fs::symlink(&outside, &race);
                std::thread::yield_now();
                let _ = fs::remove_file(&race);
                let _ = fs::rename(&parked, &race);
            }
        })
    };
    let spill = tempfile::tempdir().unwrap();
    let ctx = ToolContext {
        workspace_root: root.clone(),
        cwd: root.clone(),
        permission_mode: PermissionMode::Standard,
        spill_dir: spill.path().to_path_buf(),
        default_timeout_ms: 10_000,
        output_cap_bytes: 4096,
        temp_dir: spill.path().join("tmp"),
        sandbox: Default::default(),
        background: None,
        max_background: 0,
    };
    let patch =
        "*** Begin Patch\n*** Update File: race/victim.txt\n@@\n-victim\n+pwned\n*** End Patch";
    let calls: [(&str, Value); 6] = [
        ("read_file", json!({"path": "race/secret.txt"})),
        (
            "write_file",
            json!({"path": "race/victim.txt", "content": "pwned\n"}),
        ),
        (
            "edit_file",
            json!({"path": "race/victim.txt", "old_string": "victim", "new_string": "pwned"}),
        ),
        ("apply_patch", json!({ "patch": patch })),
        ("grep", json!({"pattern": "OUTSIDE", "path": "."})),
        ("glob", json!({"pattern": "**/secret.txt"})),
    ];
    for i in 0..300 {
        let (name, args) = &calls[i % calls.len()];
        let o = call_ctx(name, &args.to_string(), ctx.clone()).1;
        assert!(!o.output.contains("OUTSIDE-SECRET"), "{name}: {o:?}");
        if *name == "grep" {
            assert!(!o.output.contains("OUTSIDE"), "{name}: {o:?}");
        }
        assert_eq!(
            fs::read_to_string(outside.join("victim.txt")).unwrap(),
            "victim\n",
            "round {i}: {name} changed the outside file: {o:?}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    flipper.join().unwrap();
    assert_eq!(
        fs::read_to_string(outside.join("victim.txt")).unwrap(),
        "victim\n"
    );
    assert_eq!(
        fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "OUTSIDE-SECRET\n"
    );
    let names: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}
