#!/bin/sh
# The copy-the-sources route (README, "Copying the sources"): the CPU-only
# library from its listed source files with one compiler command and no
# CMake, then examples/attention_main linked against it and run on the CPU.
# Copies only what the README says to copy (include/, src/ without
# backend/cuda/) into a temporary folder, so a missing file fails here.
#   copy_sources.sh SOURCE_DIR CXX CC SOURCE...   (SOURCE: relative to src/)
set -eu
root=$1 cxx=$2 cc=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The README lists every source the build compiles for the CPU library.
for s in "$@"; do
  grep -q "src/$s" "$root/README.md" || { echo "FAIL: README.md's copy-the-sources list lacks src/$s"; exit 1; }
done

mkdir -p "$tmp/fmha"
cp -R "$root/include" "$root/src" "$tmp/fmha/"
rm -rf "$tmp/fmha/src/backend/cuda"
cp "$root/examples/attention_main.c" "$tmp/"
cd "$tmp"
sources=""
for s in "$@"; do sources="$sources fmha/src/$s"; done

# The library, one command (the README's, with this build's compilers).
set -x
# shellcheck disable=SC2086
"$cxx" -std=c++17 -O2 -fPIC -fvisibility=hidden -shared -pthread -Ifmha/include -Ifmha/src $sources -o libfmha.so
"$cc" -std=c11 -O2 -Ifmha/include attention_main.c -o attention_main ./libfmha.so -lm
./attention_main --device cpu --n 128
