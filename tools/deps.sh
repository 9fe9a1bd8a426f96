#!/usr/bin/env bash
# Installs the Debian packages fmha's build and tests need, if any is
# missing. Uses sudo when not root. CUDA is optional (nvcc on PATH or in
# /usr/local/cuda enables the GPU backend).
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config doctest-dev swig python3-dev python3-numpy python3-pytest bindgen)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
