# Sourced by the tools/ scripts: repository root, nvcc discovery, job count,
# CMake generator.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs="$(nproc 2>/dev/null || echo 2)"

# cmake_generator DIR: sets `generator` to the -G arguments for configuring
# DIR: Ninja when it is on PATH, else none, so that CMake's default (make) or
# $CMAKE_GENERATOR builds. A configured DIR keeps its generator.
cmake_generator() {
  local have_ninja=0 n
  for n in ninja ninja-build; do
    [ -x "$(command -v "$n")" ] && have_ninja=1
  done
  generator=()
  if [ -f "$1/CMakeCache.txt" ]; then
    if ((!have_ninja)) && grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$1/CMakeCache.txt"; then
      echo "$1 was configured for Ninja, which is not on PATH now; remove $1 to build with make" >&2
      return 1
    fi
  elif ((have_ninja)) && [ -z "${CMAKE_GENERATOR:-}" ]; then
    generator=(-G Ninja)
  fi
}
