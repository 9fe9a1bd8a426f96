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
//!
//! When none of these has the library, the build stops with a message
//! saying which variable to set, instead of the linker's bare
//! "unable to find library -lfmha" (RUSTFLAGS with `-L` is left to the linker).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    for var in [
        "FMHA_LIB_DIR",
        "FMHA_STATIC",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG",
        "LIBRARY_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let static_link = env::var("FMHA_STATIC").is_ok_and(|v| !v.is_empty() && v != "0");
    let file = if static_link {
        "libfmha.a"
    } else {
        "libfmha.so"
    };

    if let Ok(dir) = env::var("FMHA_LIB_DIR") {
        if !Path::new(&dir).join(file).exists() {
            panic!(
                "FMHA_LIB_DIR={dir} holds no {file}: set FMHA_LIB_DIR to the folder that does \
                 (a CMake build's src/, e.g. FMHA_LIB_DIR=$PWD/build/src, or an install's lib/){}",
                if static_link {
                    "; libfmha.a comes from a build with -DFMHA_BUILD_SHARED=OFF"
                } else {
                    ""
                }
            );
        }
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
    } else if !in_default_search_path(file) && !rustflags_add_search_path() {
        panic!(
            "libfmha not found: set FMHA_LIB_DIR to the folder holding {file} (a CMake build's \
             src/, e.g. FMHA_LIB_DIR=$PWD/build/src, or an install's lib/), or PKG_CONFIG_PATH \
             to the folder holding an installed fmha.pc; at run time the loader must find \
             libfmha.so.0 too (LD_LIBRARY_PATH)"
        );
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

/// Whether `file` is in one of the folders the linker searches by default
/// (LIBRARY_PATH, then the usual system library folders).
fn in_default_search_path(file: &str) -> bool {
    let mut dirs: Vec<PathBuf> = env::var_os("LIBRARY_PATH")
        .map(|p| env::split_paths(&p).collect())
        .unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    for dir in [
        "/usr/local/lib",
        "/usr/local/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/lib",
        "/lib64",
    ] {
        dirs.push(dir.into());
    }
    for prefix in ["/usr/lib", "/lib"] {
        dirs.push(format!("{prefix}/{arch}-linux-gnu").into());
    }
    dirs.iter().any(|d| d.join(file).exists())
}

/// Whether RUSTFLAGS give the linker a search path of their own.
fn rustflags_add_search_path() -> bool {
    env::var("CARGO_ENCODED_RUSTFLAGS")
        .map(|f| f.split('\x1f').any(|flag| flag.starts_with("-L")))
        .unwrap_or(false)
}
