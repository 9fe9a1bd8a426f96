# CUDA sources, included from src/CMakeLists.txt when FMHA_WITH_CUDA is on.
# One translation unit per family key keeps compile time bounded.
list(APPEND FMHA_SOURCES
  # common: primitives shared by the families (split-KV combine, one TU for
  # all output types; the shared-memory opt-in)
  backend/cuda/common/smem_opt_in.cpp
  backend/cuda/common/split_combine.cu
  backend/cuda/common/fwd_params.cpp
  # cuda_generic: exact CUDA-core fallback, one TU per dtype
  backend/cuda/generic/generic.cpp
  backend/cuda/generic/generic_f16.cu
  backend/cuda/generic/generic_bf16.cu
  backend/cuda/generic/generic_f32.cu
  # cuda_sm80_tc: tensor-core family, one TU per (dtype, head dim) plus the host dispatch
  backend/cuda/sm80/sm80_forward.cu
  backend/cuda/sm80/fwd_f16_d32.cu
  backend/cuda/sm80/fwd_f16_d64.cu
  backend/cuda/sm80/fwd_f16_d96.cu
  backend/cuda/sm80/fwd_f16_d128.cu
  backend/cuda/sm80/fwd_f16_d256.cu
  backend/cuda/sm80/fwd_bf16_d32.cu
  backend/cuda/sm80/fwd_bf16_d64.cu
  backend/cuda/sm80/fwd_bf16_d96.cu
  backend/cuda/sm80/fwd_bf16_d128.cu
  backend/cuda/sm80/fwd_bf16_d256.cu
)
