#!/usr/bin/env bash
# Checks for the tools a quick-start command needs and installs the missing
# ones when it can.
#
#   tools/deps.sh demo   what tools/demo.sh needs: C and C++ compilers,
#                        CMake >= 3.25, Ninja or make
#   tools/deps.sh test   what tools/test.sh needs (the default): the same and
#                        the doctest header; and what the optional tests use:
#                        Ninja, pkg-config, SWIG >= 4, the Python headers,
#                        numpy and pytest, cargo, bindgen
#
# A tool counts as present when the tool itself is found, whatever installed
# it (Debian, pip, conda, a toolkit, a source build): a command on PATH at the
# version needed, a module the build's Python imports, a header where CMake
# looks. Only what is missing is installed, as Debian packages with apt-get
# (as root, or with sudo). demo never installs Ninja (CMake's default
# generator builds instead); nothing installs cargo or nvcc. What is still
# missing afterwards:
#   required: one message naming each missing tool and how to get it; exit 1
#   optional: a note; ctest reports the tests that need it as skipped
# nvcc (on PATH or in /usr/local/cuda/bin) adds the CUDA backend; without it
# the build is CPU only.
#
# Environment:
#   FMHA_NO_INSTALL=1   check and report only; install nothing
#   FMHA_DEPS_STRICT=1  the optional tools apt-get can install are required
#                       (CI: a binding test must not become a skip unnoticed)
set -euo pipefail
source "$(dirname "$0")/common.sh"

mode=${1:-test}
case "$mode" in
  demo | test) ;;
  *) echo "usage: tools/deps.sh [demo|test]" >&2; exit 2 ;;
esac
me="deps.sh $mode"

# ---- probes ----------------------------------------------------------------
# probe_<id> succeeds when the tool is usable. It sets `found` to what it
# found (a path, a version), or to "" when it found nothing.

first_command() {  # prints the path of the first of its arguments that is a command
  local c p
  for c in "$@"; do
    # bash's `command -v` falls back to a file that is not executable.
    [ -n "$c" ] && p=$(command -v "$c" 2>/dev/null) && [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

version_at_least() {  # version_at_least HAVE WANT
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# The interpreter the Python bindings are built for, chosen the way
# bindings/python/CMakeLists.txt chooses it (keep the two in step): outside a
# virtualenv or conda env /usr/bin/python3, Debian's, which apt-get can
# serve; else the python3 on PATH.
resolve_python() {
  if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CONDA_PREFIX:-}" ]; then
    system_python=1
    if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=$(first_command python3 || true); fi
  else
    system_python=0
    python=$(first_command python3 || true)
  fi
}

probe_cc() {
  local cc=${CC:-}
  found=$(first_command "${cc%% *}" cc gcc clang) || { found=""; return 1; }
}
probe_cxx() {
  local cxx=${CXX:-}
  found=$(first_command "${cxx%% *}" c++ g++ clang++) || { found=""; return 1; }
}
probe_cmake() {
  local c v
  c=$(first_command cmake) || { found=""; return 1; }
  v=$("$c" --version 2>/dev/null | sed -n '1s/^cmake[0-9]* version \([0-9][0-9.]*\).*/\1/p')
  found="cmake ${v:-of unknown version} at $c"
  [ -n "$v" ] && version_at_least "$v" 3.25
}
probe_generator() { found=$(first_command ninja ninja-build make gmake) || { found=""; return 1; }; }
probe_ninja() { found=$(first_command ninja ninja-build) || { found=""; return 1; }; }
# Where tests/CMakeLists.txt's find_path looks: <prefix>/include for each
# prefix on CMAKE_PREFIX_PATH, each <prefix>/bin on PATH, the conda env and
# the system prefixes.
probe_doctest() {
  local d dirs=() IFS=:
  for d in ${CMAKE_PREFIX_PATH:-} ${CONDA_PREFIX:-}; do dirs+=("$d/include"); done
  for d in ${CMAKE_INCLUDE_PATH:-}; do dirs+=("$d"); done
  for d in $PATH; do
    case "$d" in */bin | */sbin) dirs+=("${d%/*}/include") ;; esac
  done
  dirs+=(/usr/local/include /usr/include)
  for d in "${dirs[@]}"; do
    [ -f "$d/doctest/doctest.h" ] && { found="$d/doctest/doctest.h"; return 0; }
  done
  found=""
  return 1
}
probe_pkgconfig() { found=$(first_command pkg-config) || { found=""; return 1; }; }
probe_swig() {
  local s v
  s=$(first_command swig4.0 swig) || { found=""; return 1; }
  v=$("$s" -version 2>/dev/null | sed -n 's/^SWIG Version \([0-9][0-9.]*\).*/\1/p')
  found="swig ${v:-of unknown version} at $s"
  [ -n "$v" ] && version_at_least "$v" 4.0
}
probe_pydev() {
  found=""
  [ -n "$python" ] && "$python" -c 'import os, sysconfig
raise SystemExit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    >/dev/null 2>&1
}
probe_numpy() { found=""; [ -n "$python" ] && "$python" -c 'import numpy' >/dev/null 2>&1; }
probe_pytest() { found=""; [ -n "$python" ] && "$python" -c 'import pytest' >/dev/null 2>&1; }
# Where bindings/rust/CMakeLists.txt looks: PATH, then rustup's folder.
probe_cargo() {
  local homes=()
  [ -z "${CARGO_HOME:-}" ] || homes+=("$CARGO_HOME/bin/cargo")
  [ -z "${HOME:-}" ] || homes+=("$HOME/.cargo/bin/cargo")
  found=$(first_command cargo "${homes[@]}") || { found=""; return 1; }
  "$found" --version >/dev/null 2>&1
}
probe_bindgen() { found=$(first_command bindgen) || { found=""; return 1; }; }

# ---- what this command needs -------------------------------------------------
# need ID ROLE DEBIAN_PACKAGE WHAT OTHER_WAYS [WHAT_IS_SKIPPED]
# ROLE: required or optional. DEBIAN_PACKAGE: "" when apt-get must not
# install it for this command. OTHER_WAYS: how to get it without apt-get.
ids=()
declare -A role deb what ways skips
need() { ids+=("$1"); role[$1]=$2; deb[$1]=$3; what[$1]=$4; ways[$1]=$5; skips[$1]=${6:-}; }

resolve_python
need cc required gcc "a C compiler" "conda install -c conda-forge c-compiler"
need cxx required g++ "a C++17 compiler" "conda install -c conda-forge cxx-compiler"
need cmake required cmake "CMake >= 3.25" "pip install cmake | conda install -c conda-forge cmake"
need generator required ninja-build "a build tool: Ninja or make" \
  "pip install ninja | conda install -c conda-forge ninja"
if [ "$mode" = demo ]; then
  need ninja optional "" "Ninja" "apt-get install ninja-build | pip install ninja | conda install -c conda-forge ninja" \
    "builds use CMake's default generator (make)"
else
  need ninja optional ninja-build "Ninja" "pip install ninja | conda install -c conda-forge ninja" \
    "builds use CMake's default generator (make)"
  need doctest required doctest-dev "the doctest header doctest/doctest.h" \
    "conda install -c conda-forge doctest | doctest.h from https://github.com/doctest/doctest in <prefix>/include/doctest/, <prefix> on CMAKE_PREFIX_PATH"
  need pkgconfig optional pkg-config "pkg-config" "conda install -c conda-forge pkg-config" \
    "test_package_consumers leaves out its pkg-config consumer"
  need swig optional swig "SWIG >= 4" "pip install swig | conda install -c conda-forge swig" \
    "ctest skips python_bindings, example_decoder_layer_python"
  # apt-get serves Debian's interpreter only.
  py=${python:-python3}
  pydeb() { ((system_python)) && echo "$1" || true; }
  need pydev optional "$(pydeb python3-dev)" "the Python 3 headers (Python.h) of $py" \
    "the -dev package of that Python | conda install python" "ctest skips python_bindings, example_decoder_layer_python"
  need numpy optional "$(pydeb python3-numpy)" "numpy for $py" \
    "$py -m pip install numpy | conda install numpy" "ctest skips python_bindings, example_decoder_layer_python"
  need pytest optional "$(pydeb python3-pytest)" "pytest for $py" \
    "$py -m pip install pytest | conda install pytest" "ctest skips python_bindings"
  need cargo optional "" "cargo" "rustup (https://rustup.rs) | apt-get install cargo" \
    "ctest skips rust_bindings, example_decoder_layer_rust"
  need bindgen optional bindgen "bindgen" "cargo install bindgen-cli" "ctest skips rust_sys_bindings_fresh"
fi

if [ "${FMHA_DEPS_STRICT:-0}" = 1 ]; then
  for id in "${ids[@]}"; do
    [ -z "${deb[$id]}" ] || role[$id]=required
  done
fi

declare -A detail
probe_all() {  # fills `missing` and detail[id]
  missing=()
  resolve_python
  hash -r
  for id in "${ids[@]}"; do
    if ! "probe_$id"; then
      missing+=("$id")
    fi
    detail[$id]=$found
  done
}

# ---- install what is missing, when apt-get can -------------------------------
# Why nothing can be installed here, or "".
install_blocker() {
  if [ "${FMHA_NO_INSTALL:-0}" = 1 ]; then echo "FMHA_NO_INSTALL=1 is set"
  elif ! first_command apt-get >/dev/null; then echo "apt-get not found (not a Debian/Ubuntu system)"
  elif [ "$(id -u)" -ne 0 ] && ! first_command sudo >/dev/null; then echo "not root, and sudo not found"
  fi
}

# apt_install PACKAGE...: sets apt_problem to "" or to why it failed (the log
# is kept then). apt-get update succeeds even when no server can be reached,
# so its warnings are what tell that the network is missing.
apt_install() {
  local sudo="" log offline=0 p failed=()
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  log=$(mktemp "${TMPDIR:-/tmp}/fmha-apt.XXXXXX")
  echo "$me: installing Debian packages: $*" >&2
  $sudo apt-get update -qq >>"$log" 2>&1 || offline=1
  grep -qE '^(W: Failed to fetch|E: )' "$log" && offline=1
  if $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >>"$log" 2>&1; then
    rm -f "$log"
    apt_problem=""
    return
  fi
  # One package the distribution lacks should not keep the others out:
  # retry one by one, unless the servers were out of reach.
  if ((! offline)) && (($# > 1)); then
    for p in "$@"; do
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >>"$log" 2>&1 || failed+=("$p")
    done
  else
    failed=("$@")
  fi
  if ((offline)); then
    apt_problem="apt-get could not reach the package servers (no network?); its log: $log."
  else
    apt_problem="apt-get could not install ${failed[*]}; its log: $log."
  fi
}

probe_all
packages=()
for id in "${missing[@]}"; do
  p=${deb[$id]}
  [ -n "$p" ] && [[ " ${packages[*]} " != *" $p "* ]] && packages+=("$p")
done
problem=""
if ((${#packages[@]})); then
  problem=$(install_blocker)
  if [ -n "$problem" ]; then
    problem="Nothing was installed: $problem."
  else
    apt_install "${packages[@]}"
    problem=$apt_problem
    probe_all
  fi
fi

# ---- report ------------------------------------------------------------------
required=() optional=()
for id in "${missing[@]}"; do
  if [ "${role[$id]}" = required ]; then required+=("$id"); else optional+=("$id"); fi
done

# describe ID: what is missing (and what was found instead), what goes
# without it, how to get it.
describe() {
  local id=$1 how=${ways[$1]}
  [ -z "${deb[$id]}" ] || how="apt-get install ${deb[$id]} | $how"
  printf '  - %s%s\n' "${what[$id]}" "${detail[$id]:+ (found: ${detail[$id]})}"
  [ -z "${skips[$id]}" ] || [ "${role[$id]}" = required ] || printf '      without it: %s\n' "${skips[$id]}"
  printf '      get it: %s\n' "$how"
}

# One message: what stops the command, then what it goes without.
{
  if ((${#required[@]})); then
    echo "$me: cannot continue, required and missing:"
    for id in "${required[@]}"; do describe "$id"; done
    ((${#optional[@]})) && echo "$me: optional and missing:"
  elif ((${#optional[@]})); then
    echo "$me: optional and missing:"
  fi
  for id in "${optional[@]}"; do describe "$id"; done
  if ((${#required[@]} + ${#optional[@]})) && [ -n "$problem" ]; then
    echo "  $problem"
  fi
  if ((${#required[@]})); then
    echo "  Install what is required (from any source: on PATH, or under a prefix on CMAKE_PREFIX_PATH), then run again."
  fi
} >&2
((${#required[@]} == 0)) || exit 1
if ! nvcc=$(first_command nvcc) || ! "$nvcc" --version >/dev/null 2>&1; then
  echo "$me: no working nvcc (on PATH or in /usr/local/cuda/bin): the build is CPU only" >&2
fi
exit 0
