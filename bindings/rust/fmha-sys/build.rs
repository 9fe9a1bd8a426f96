//! Links libfmha. Where from, in order:
//!   1. FMHA_LIB_DIR: a directory holding libfmha.so (or libfmha.a with
//!      FMHA_STATIC=1), e.g. a CMake build's `src/` or an install's `lib/`;
//!   2. pkg-config's `fmha` (fmha.pc, installed with the library; honours
//!      PKG_CONFIG_PATH), when pkg-config is present and knows it;
//!   3. a static libfmha that this script builds itself with CMake from the
//!      repository it sits in (so `cargo build` in a checkout just works):
//!      CPU-only unless FMHA_SYS_CUDA=AUTO or ON (then the CUDA backend too,
//!      linked with the static CUDA runtime); the build lives in OUT_DIR;
//!      the `cmake` program comes from $CMAKE, else PATH;
//!   4. the linker's default search path (no checkout or no cmake).
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
        "FMHA_SYS_CUDA",
        "CMAKE",
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
    } else if let Some(root) = source_root().filter(|_| cmake_works()) {
        build_from_source(&root);
        return;
    } else if !in_default_search_path(file) && !rustflags_add_search_path() {
        panic!(
            "libfmha not found: set FMHA_LIB_DIR to the folder holding {file} (a CMake build's \
             src/, e.g. FMHA_LIB_DIR=$PWD/build/src, or an install's lib/), or PKG_CONFIG_PATH \
             to the folder holding an installed fmha.pc; at run time the loader must find \
             libfmha.so.0 too (LD_LIBRARY_PATH). Inside an fmha checkout, with cmake on PATH \
             (or $CMAKE), this script builds a static libfmha itself{}",
            if source_root().is_some() {
                ": cmake was not found (or does not run)"
            } else {
                ""
            }
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

/// The fmha repository holding this crate (bindings/rust/fmha-sys), when the
/// crate is built from a checkout.
fn source_root() -> Option<PathBuf> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent()?.parent()?.parent()?.to_path_buf();
    (root.join("CMakeLists.txt").exists() && root.join("include/fmha/fmha.h").exists())
        .then_some(root)
}

fn cmake_program() -> String {
    env::var("CMAKE").unwrap_or_else(|_| "cmake".into())
}

fn cmake_works() -> bool {
    Command::new(cmake_program())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd`, stopping the build with its output when it fails (its output
/// is not passed through: cargo reads a build script's stdout).
fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}): {cmd:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n\
             (or set FMHA_LIB_DIR to the folder of a libfmha built or installed separately)",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Builds a static libfmha from the sources at `root` in OUT_DIR with CMake
/// and links it, with the C++ runtime, the thread library and, when the CUDA
/// backend was built, the static CUDA runtime.
fn build_from_source(root: &Path) {
    let given = env::var("FMHA_SYS_CUDA").unwrap_or_default();
    let cuda = match given.to_ascii_uppercase().as_str() {
        "" | "OFF" | "0" => "OFF",
        "ON" | "1" => "ON",
        "AUTO" => "AUTO",
        _ => panic!("FMHA_SYS_CUDA={given}: expected OFF (the default), AUTO or ON"),
    };
    for path in ["CMakeLists.txt", "cmake", "src", "include"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    // One build folder per CUDA setting: a cache configured with CUDA keeps
    // its CUDA entries after a reconfigure without.
    let build = out_dir.join(format!("fmha-build-cuda-{}", cuda.to_ascii_lowercase()));
    let cmake = cmake_program();
    let mut configure = Command::new(&cmake);
    configure
        .arg("-S")
        .arg(root)
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .arg("-DFMHA_BUILD_SHARED=OFF")
        .arg(format!("-DFMHA_ENABLE_CUDA={cuda}"));
    for off in [
        "FMHA_BUILD_TESTS",
        "FMHA_BUILD_EXAMPLES",
        "FMHA_BUILD_BENCHMARKS",
        "FMHA_BUILD_PYTHON",
        "FMHA_BUILD_RUST",
        "FMHA_INSTALL",
    ] {
        configure.arg(format!("-D{off}=OFF"));
    }
    run(&mut configure, "configuring libfmha with cmake");
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "1".into());
    run(
        Command::new(&cmake).arg("--build").arg(&build).args([
            "--target",
            "fmha",
            "--config",
            "Release",
            "--parallel",
            &jobs,
        ]),
        "building libfmha with cmake",
    );
    let lib = ["src/libfmha.a", "src/Release/libfmha.a"]
        .iter()
        .map(|p| build.join(p))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("the CMake build in {} made no libfmha.a", build.display()));
    println!(
        "cargo:rustc-link-search=native={}",
        lib.parent().unwrap().display()
    );
    println!("cargo:rustc-link-lib=static=fmha");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=pthread");

    // CUDA was built when the cache has a CUDA compiler (check_language).
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap_or_default();
    let entry = |name: &str| {
        cache.lines().find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.split(':').next() == Some(name)).then(|| value.to_string())
        })
    };
    let with_cuda = cuda != "OFF"
        && entry("CMAKE_CUDA_COMPILER").is_some_and(|c| !c.is_empty() && !c.ends_with("NOTFOUND"));
    if with_cuda {
        // find_package(CUDAToolkit) caches the library's path.
        let cudart = entry("CUDA_cudart_static_LIBRARY")
            .filter(|p| Path::new(p).exists())
            .unwrap_or_else(|| {
                panic!(
                    "the CUDA build in {} has no libcudart_static.a",
                    build.display()
                )
            });
        let dir = Path::new(&cudart).parent().unwrap();
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=static=cudart_static");
        println!("cargo:rustc-link-lib=dylib=dl");
        println!("cargo:rustc-link-lib=dylib=rt");
    }
}
