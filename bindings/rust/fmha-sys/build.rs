//! Links libfmha. Where from, in order:
//!   1. FMHA_LIB_DIR: a directory holding libfmha.so (or libfmha.a with
//!      FMHA_STATIC=1), e.g. a CMake build's `src/` or an install's `lib/`;
//!   2. pkg-config's `fmha` (fmha.pc, installed with the library; honours
//!      PKG_CONFIG_PATH), when pkg-config is present and knows it;
//!   3. the linker's default search path.
//!
//! FMHA_STATIC=1 links the static library, with the C++ runtime and the
//! thread library it needs (a static libfmha built with CUDA also needs the
//! CUDA runtime: add it with RUSTFLAGS or a build script of your own).
//!
//! At run time a shared libfmha must be findable by the loader
//! (LD_LIBRARY_PATH, an rpath, or a system directory).
use std::env;
use std::process::Command;

fn main() {
    for var in [
        "FMHA_LIB_DIR",
        "FMHA_STATIC",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let static_link = env::var("FMHA_STATIC").is_ok_and(|v| !v.is_empty() && v != "0");

    if let Ok(dir) = env::var("FMHA_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    } else if let Some(flags) = pkg_config_libs(static_link) {
        for flag in flags.split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = flag.strip_prefix("-l") {
                if lib != "fmha" {
                    println!("cargo:rustc-link-lib={lib}");
                }
            }
        }
    }

    if static_link {
        println!("cargo:rustc-link-lib=static=fmha");
        println!("cargo:rustc-link-lib=dylib=stdc++");
        println!("cargo:rustc-link-lib=dylib=pthread");
    } else {
        println!("cargo:rustc-link-lib=dylib=fmha");
    }
}

/// `pkg-config --libs [--static] fmha`, or None when pkg-config is missing
/// or has no fmha.pc.
fn pkg_config_libs(static_link: bool) -> Option<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let mut cmd = Command::new(pkg_config);
    cmd.arg("--libs");
    if static_link {
        cmd.arg("--static");
    }
    let out = cmd.arg("fmha").output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}
