//! The bundled SQLite is built with what the store uses and without the modules the
//! workspace's `.cargo/config.toml` leaves out (`LIBSQLITE3_FLAGS`): FTS5 and the JSON
//! functions answer; FTS3/4 and R-Tree tables cannot be created, and a database another
//! program made with such a table still opens and its other tables read.

use rusqlite::Connection;

#[test]
fn fts5_and_json_functions_are_built_in() {
    let c = Connection::open_in_memory().unwrap();
    c.execute_batch(
        "CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'trigram');
         INSERT INTO t(body) VALUES ('streaming deltas'), ('a listing');",
    )
    .unwrap();
    let hit: String = c
        .query_row("SELECT body FROM t WHERE t MATCH 'delta'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(hit, "streaming deltas");
    let v: String = c
        .query_row(
            "SELECT json_extract(json_set('{\"a\":1}', '$.b', 'x'), '$.b')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, "x");
}

#[test]
fn left_out_modules_are_absent() {
    let c = Connection::open_in_memory().unwrap();
    for module in ["fts3", "fts4", "rtree"] {
        let e = c
            .execute_batch(&format!("CREATE VIRTUAL TABLE v USING {module}(a, b, c)"))
            .unwrap_err();
        assert!(e.to_string().contains("no such module"), "{module}: {e}");
    }
    let e = c
        .query_row("SELECT soundex('wuu')", [], |r| r.get::<_, String>(0))
        .unwrap_err();
    assert!(e.to_string().contains("no such function"), "{e}");
}

/// A file whose schema names a module this build lacks (written here through
/// `writable_schema`, as another program's FTS3 index would be) opens; its plain tables
/// read; only the virtual table fails, with "no such module".
#[test]
fn a_database_with_an_fts3_table_still_reads_its_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE message (id TEXT, data TEXT);
             INSERT INTO message VALUES ('m1', '{}');
             PRAGMA writable_schema = ON;
             INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql)
               VALUES ('table', 'ft', 'ft', 0, 'CREATE VIRTUAL TABLE ft USING fts3(x)');
             PRAGMA writable_schema = OFF;",
        )
        .unwrap();
    }
    let c = Connection::open(&path).unwrap();
    let id: String = c
        .query_row("SELECT id FROM message", [], |r| r.get(0))
        .unwrap();
    assert_eq!(id, "m1");
    let e = c
        .query_row("SELECT count(*) FROM ft", [], |r| r.get::<_, i64>(0))
        .unwrap_err();
    assert!(e.to_string().contains("no such module"), "{e}");
}
