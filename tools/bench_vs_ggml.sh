#!/usr/bin/env bash
# fmha's CPU forward beside ggml's ggml_flash_attn_ext (llama.cpp's CPU flash
# attention), same shapes, same threads, one run (tests/perf/bench_ggml.cpp).
#
#   tools/bench_vs_ggml.sh [--fetch] [-- bench_ggml arguments]
#
# Opt-in, never part of the default build or CI: it needs ggml's sources,
# which fmha does not carry. GGML_SRC (default .devbin/ggml) is the `ggml`
# folder of llama.cpp (CMakeLists.txt, cmake/, include/, src/ with its
# top-level files and src/ggml-cpu/ are all the CPU backend needs). --fetch
# makes it from llama-cpp-python's source distribution on PyPI (GGML_VERSION,
# default 0.3.36, which vendors llama.cpp under vendor/llama.cpp), as
#   pip download --no-deps --no-binary=llama-cpp-python llama-cpp-python==0.3.36
# The environment, all optional:
#   GGML_SRC     ggml's source folder (above)
#   BUILD_DIR    where the builds go (default build-ggml)
#   FMHA_BUILD   an existing fmha build whose src/libfmha.so to use; else a
#                CPU-only fmha is built under BUILD_DIR/fmha
#   JOBS         build parallelism (default 2)
#   GGML_NATIVE  ON (default: -march=native, so build it on the machine that
#                runs it) or OFF
# Everything after `--` goes to bench_ggml (--threads, --reps, --dtypes,
# --shapes, --nk, --rows; see its header).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

fetch=0
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --fetch) fetch=1 ;;
    --) shift; args=("$@"); break ;;
    *) echo "usage: tools/bench_vs_ggml.sh [--fetch] [-- bench_ggml arguments]" >&2; exit 2 ;;
  esac
  shift
done

GGML_SRC=${GGML_SRC:-$ROOT/.devbin/ggml}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-ggml}
JOBS=${JOBS:-2}
GGML_NATIVE=${GGML_NATIVE:-ON}
GGML_VERSION=${GGML_VERSION:-0.3.36}
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)

if [[ $fetch == 1 && ! -f $GGML_SRC/CMakeLists.txt ]]; then
  dl=$(mktemp -d)
  pip download --no-deps --no-binary=llama-cpp-python "llama-cpp-python==$GGML_VERSION" -d "$dl"
  tar -xzf "$dl"/llama_cpp_python-*.tar.gz -C "$dl"
  src=$(echo "$dl"/llama_cpp_python-*/vendor/llama.cpp/ggml)
  mkdir -p "$GGML_SRC/src"
  cp -r "$src"/CMakeLists.txt "$src"/cmake "$src"/include "$GGML_SRC"/
  find "$src" -maxdepth 1 -type f -exec cp {} "$GGML_SRC"/ \;
  find "$src/src" -maxdepth 1 -type f -exec cp {} "$GGML_SRC"/src/ \;
  cp -r "$src/src/ggml-cpu" "$GGML_SRC"/src/
  echo "llama-cpp-python $GGML_VERSION (PyPI sdist), vendor/llama.cpp/ggml" > "$GGML_SRC/SOURCE.txt"
  rm -rf "$dl"
fi
if [[ ! -f $GGML_SRC/CMakeLists.txt ]]; then
  echo "no ggml sources at $GGML_SRC: set GGML_SRC or run with --fetch" >&2
  exit 2
fi
# A standalone ggml configures a pkg-config file from ggml.pc.in, which
# llama-cpp-python's copy leaves out.
[[ -f $GGML_SRC/ggml.pc.in ]] || : > "$GGML_SRC/ggml.pc.in"

# GIT_EXE=OFF: ggml would take the commit of whatever repository holds
# GGML_SRC (fmha's, for .devbin/ggml) as its own; SOURCE.txt says where the
# sources came from instead.
echo "== ggml CPU backend ($GGML_SRC: $(cat "$GGML_SRC/SOURCE.txt" 2>/dev/null || echo 'origin unknown'),"\
  "GGML_NATIVE=$GGML_NATIVE)"
cmake -S "$GGML_SRC" -B "$BUILD_DIR/ggml" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE="$GGML_NATIVE" \
  -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DGIT_EXE=OFF \
  > "$BUILD_DIR/ggml-configure.log"
cmake --build "$BUILD_DIR/ggml" -j "$JOBS" --target ggml > "$BUILD_DIR/ggml-build.log"

if [[ -z ${FMHA_BUILD:-} ]]; then
  echo "== fmha, CPU only"
  FMHA_BUILD=$BUILD_DIR/fmha
  cmake -S "$ROOT" -B "$FMHA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFMHA_ENABLE_CUDA=OFF \
    -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_TESTS=OFF > "$BUILD_DIR/fmha-configure.log"
  cmake --build "$FMHA_BUILD" -j "$JOBS" --target fmha > "$BUILD_DIR/fmha-build.log"
fi
FMHA_BUILD=$(cd "$FMHA_BUILD" && pwd)

echo "== bench_ggml"
libs=()
for name in ggml ggml-cpu ggml-base; do
  lib=$(find "$BUILD_DIR/ggml/" -name "lib$name.a" | head -n 1)
  [[ -n $lib ]] || { echo "lib$name.a not found under $BUILD_DIR/ggml" >&2; exit 1; }
  libs+=("$lib")
done
"${CXX:-g++}" -O2 -std=c++17 -I "$ROOT/include" -I "$ROOT/src" -I "$GGML_SRC/include" \
  "$ROOT/tests/perf/bench_ggml.cpp" -o "$BUILD_DIR/bench_ggml" \
  -L "$FMHA_BUILD/src" -lfmha -Wl,-rpath,"$FMHA_BUILD/src" \
  -Wl,--start-group "${libs[@]}" -Wl,--end-group -fopenmp -lpthread -ldl -lm

"$BUILD_DIR/bench_ggml" "${args[@]}"
