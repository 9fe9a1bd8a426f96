# CUDA sources, included from src/CMakeLists.txt when FMHA_WITH_CUDA is on.
# One translation unit per family key keeps compile time bounded.
list(APPEND FMHA_SOURCES
  # cuda_generic: exact CUDA-core fallback, one TU per dtype
  backend/cuda/generic/generic.cpp
  backend/cuda/generic/generic_f16.cu
  backend/cuda/generic/generic_bf16.cu
  backend/cuda/generic/generic_f32.cu
)
