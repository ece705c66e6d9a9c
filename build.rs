//! Generates the protocol's JSON Schema bundle (`wuu_protocol::schema::bundle`) at build
//! time into `$OUT_DIR/wuu-app-server.schema.json.zz` (compact JSON, zlib-compressed:
//! about a fifth of the text), which the binary embeds and inflates when it is read
//! (`wuu app-server generate-json-schema`, the path of an invalid param): the schema
//! generator and every type's schema code then stay out of the binary. Reruns whenever `wuu-protocol` changes (the
//! script is rebuilt with it).
//!
//! Optimized Linux/glibc builds also link the `wuu` binary with packed relative
//! relocations (`-z pack-relative-relocs`, DT_RELR: the PIE's relocation table shrinks from
//! 24 bytes per pointer to about a bit per pointer), when the C toolchain accepts the flag
//! without a warning — that is, binutils ≥ 2.38 (or lld) and a glibc ≥ 2.36, which the
//! binary then needs to run. `WUU_NO_RELR=1` turns it off (for a binary that must run on
//! an older glibc than the one it is built on).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let out = out_dir.join("wuu-app-server.schema.json.zz");
    let bundle = wuu_protocol::schema::bundle();
    let text = serde_json::to_string(&bundle).expect("the schema bundle serializes");
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(text.as_bytes(), 10);
    std::fs::write(&out, packed).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=WUU_NO_RELR");
    if wants_relr() && linker_packs_relocs(&out_dir) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// An optimized build for a Linux glibc target, not turned off by `WUU_NO_RELR`.
fn wants_relr() -> bool {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("PROFILE") == "release"
        && var("HOST") == var("TARGET")
        && std::env::var_os("WUU_NO_RELR").is_none_or(|v| v.is_empty() || v == "0")
}

/// Whether `cc` links a trivial PIE with `-z pack-relative-relocs` and no warning (an older
/// binutils ignores the flag with a warning; a glibc without `GLIBC_ABI_DT_RELR` makes the
/// linker warn or fail).
fn linker_packs_relocs(out_dir: &Path) -> bool {
    let src = out_dir.join("relr_probe.c");
    let exe = out_dir.join("relr_probe");
    if std::fs::write(
        &src,
        "static int x; int *p = &x; int main(void) { return *p; }\n",
    )
    .is_err()
    {
        return false;
    }
    Command::new("cc")
        .arg("-pie")
        .arg("-fPIE")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(["-Wl,-z,pack-relative-relocs", "-Wl,--fatal-warnings"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
