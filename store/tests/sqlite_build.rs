//! The bundled SQLite is built with what the store uses (the workspace's
//! `.cargo/config.toml` sets its options, `LIBSQLITE3_FLAGS`): the trigram FTS5 index of
//! the search and the JSON functions answer.

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
