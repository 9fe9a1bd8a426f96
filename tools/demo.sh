#!/usr/bin/env bash
# Quick start, command 1: builds fmha and runs examples/attention_main on the
# seed's shape (B=1, H=32, D=128, causal FP16): on the GPU when one is
# present, else on the CPU backend at a smaller N. Extra arguments go to the
# program (e.g. --n 8192, --device cpu).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$root/tools/deps.sh" demo
cmake_generator "$root/build"
cmake -S "$root" -B "$root/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$jobs" --target attention_main
"$root/build/examples/attention_main" "$@"
