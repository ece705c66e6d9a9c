//! Generates the protocol's JSON Schema bundle (`wuu_protocol::schema::bundle`) at build
//! time into `$OUT_DIR/wuu-app-server.schema.json` (compact JSON), which
//! `wuu app-server generate-json-schema` embeds: the schema generator and every type's
//! schema code then stay out of the binary. Reruns whenever `wuu-protocol` changes (the
//! script is rebuilt with it).

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("wuu-app-server.schema.json");
    let bundle = wuu_protocol::schema::bundle();
    let text = serde_json::to_string(&bundle).expect("the schema bundle serializes");
    std::fs::write(&out, text).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed=build.rs");
}
