//! With the `cuda` feature, lets the linker find libcudart: $FMHA_CUDA_LIB_DIR,
//! else $CUDA_PATH/lib64, $CUDA_HOME/lib64 or /usr/local/cuda/lib64 (libfmha
//! itself is linked by fmha-sys).
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=FMHA_CUDA_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CUDA_PATH");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let roots = [
        env::var("CUDA_PATH").ok(),
        env::var("CUDA_HOME").ok(),
        Some("/usr/local/cuda".into()),
    ];
    for root in roots.into_iter().flatten() {
        let lib = PathBuf::from(root).join("lib64");
        if lib.exists() {
            println!("cargo:rustc-link-search=native={}", lib.display());
            return;
        }
    }
}
