# CUDA sources, included from src/CMakeLists.txt when FMHA_WITH_CUDA is on.
# One translation unit per family key keeps compile time bounded.
list(APPEND FMHA_SOURCES
  # common: primitives shared by the families (split-KV combine, one TU for
  # all output types; the shared-memory opt-in; the forward params and the
  # split heuristic)
  backend/cuda/common/smem_opt_in.cpp
  backend/cuda/common/split_combine.cu
  backend/cuda/common/fwd_params.cpp
  # cuda_sm90_ws: the host side (registry hooks; tensor maps through the
  # driver entry point); its kernels are FMHA_SM90_KERNEL_SOURCES below
  backend/cuda/sm90/sm90_forward.cu
  backend/cuda/sm90/tma.cpp
  # cuda_generic: exact CUDA-core fallback, one TU per dtype
  backend/cuda/generic/generic.cpp
  backend/cuda/generic/generic_f16.cu
  backend/cuda/generic/generic_bf16.cu
  backend/cuda/generic/generic_f32.cu
  # cuda_sm80_tc: the host dispatch; the instantiations are generated below
  backend/cuda/sm80/sm80_forward.cu
)

# cuda_sm80_tc's instantiations: the one list of (dtype, head dim) pairs.
# Each entry becomes a translation unit (from sm80/fwd_instance.cu.in), and
# the generated header sm80/instances.h gives the same list to the extern
# declarations, the dispatch, the tuning check and the registry row. A build
# may list fewer (faster builds); each head dim needs an Sm80Tuning
# specialization (sm80/tile_config.h), and the registry row's head-dim
# column holds at most 6.
set(FMHA_SM80_INSTANCES
  "f16:32;f16:64;f16:96;f16:128;f16:256;bf16:32;bf16:64;bf16:96;bf16:128;bf16:256"
  CACHE STRING "cuda_sm80_tc instantiations, dtype:head_dim pairs (dtype f16 or bf16)")

set(FMHA_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)
set(_sm80_gen ${FMHA_GENERATED_DIR}/backend/cuda/sm80)
set(FMHA_SM80_INSTANCE_XS "")
set(_sm80_dims "")
set(_sm80_dtypes "")
foreach(_entry IN LISTS FMHA_SM80_INSTANCES)
  if(NOT _entry MATCHES "^(f16|bf16):([0-9]+)$")
    message(FATAL_ERROR "FMHA_SM80_INSTANCES: '${_entry}' is not f16:<head_dim> or bf16:<head_dim>")
  endif()
  set(FMHA_SM80_DTYPE ${CMAKE_MATCH_1})
  set(FMHA_SM80_D ${CMAKE_MATCH_2})
  if(FMHA_SM80_DTYPE STREQUAL "f16")
    set(FMHA_SM80_T __half)
    set(_enum FMHA_DTYPE_F16)
  else()
    set(FMHA_SM80_T __nv_bfloat16)
    set(_enum FMHA_DTYPE_BF16)
  endif()
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/backend/cuda/sm80/fwd_instance.cu.in
                 ${_sm80_gen}/fwd_${FMHA_SM80_DTYPE}_d${FMHA_SM80_D}.cu @ONLY)
  list(APPEND FMHA_SOURCES ${_sm80_gen}/fwd_${FMHA_SM80_DTYPE}_d${FMHA_SM80_D}.cu)
  string(APPEND FMHA_SM80_INSTANCE_XS " X(${_enum}, ${FMHA_SM80_T}, ${FMHA_SM80_D})")
  list(APPEND _sm80_dims ${FMHA_SM80_D})
  list(APPEND _sm80_dtypes ${_enum})
endforeach()
list(REMOVE_DUPLICATES _sm80_dims)
list(SORT _sm80_dims COMPARE NATURAL)
list(REMOVE_DUPLICATES _sm80_dtypes)
list(LENGTH _sm80_dims FMHA_SM80_HEAD_DIM_COUNT)
string(REPLACE ";" ", " FMHA_SM80_HEAD_DIM_LIST "${_sm80_dims}")
set(FMHA_SM80_HEAD_DIM_TEXT "${FMHA_SM80_HEAD_DIM_LIST}")
set(FMHA_SM80_HEAD_DIM_XS "")
foreach(_d IN LISTS _sm80_dims)
  string(APPEND FMHA_SM80_HEAD_DIM_XS " X(${_d})")
endforeach()
set(FMHA_SM80_DTYPE_XS "")
foreach(_t IN LISTS _sm80_dtypes)
  string(APPEND FMHA_SM80_DTYPE_XS " X(${_t})")
endforeach()
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/backend/cuda/sm80/instances.h.in ${_sm80_gen}/instances.h @ONLY)

# cuda_sm90_ws kernels, one TU per (dtype, head dim): sm_90a machine code
# only, built as their own object library (src/CMakeLists.txt) and linked
# into libfmha beside the other objects. The head dims are the ones
# sm90_forward.cu dispatches and the registry row lists (64, 128, 256).
set(FMHA_SM90_KERNEL_SOURCES
  backend/cuda/sm90/fwd_f16_d64.cu
  backend/cuda/sm90/fwd_f16_d128.cu
  backend/cuda/sm90/fwd_f16_d256.cu
  backend/cuda/sm90/fwd_bf16_d64.cu
  backend/cuda/sm90/fwd_bf16_d128.cu
  backend/cuda/sm90/fwd_bf16_d256.cu
)
