# Sourced by the tools/ scripts: repository root, nvcc discovery, job count.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs="$(nproc 2>/dev/null || echo 2)"
