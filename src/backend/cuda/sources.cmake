# CUDA sources, included from src/CMakeLists.txt when FMHA_WITH_CUDA is on.
# One translation unit per family key keeps compile time bounded.
list(APPEND FMHA_SOURCES
  # common: primitives shared by the families (split-KV combine, one TU for
  # all output types; fmha_merge's kernel; the shared-memory opt-in; the
  # forward params and the split heuristic)
  backend/cuda/common/smem_opt_in.cpp
  backend/cuda/common/kernel_launch.cpp
  backend/cuda/common/split_combine.cu
  backend/cuda/common/merge.cu
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

# The kernel families' instantiations: for each family one list of
# (dtype, head dim) pairs, FMHA_<FAMILY>_INSTANCES. Each entry becomes a
# translation unit (from <family>/fwd_instance.cu.in), and the generated
# header <family>/instances.h gives the same list to the extern
# declarations, the dispatch, the tuning check and the registry row. A build
# may list fewer (faster builds); each head dim needs the family's tuning
# specialization, and a registry row's head-dim column holds at most 6.
set(FMHA_SM80_INSTANCES
  "f16:32;f16:64;f16:96;f16:128;f16:256;bf16:32;bf16:64;bf16:96;bf16:128;bf16:256"
  CACHE STRING "cuda_sm80_tc instantiations, dtype:head_dim pairs (dtype f16 or bf16)")
set(FMHA_SM90_INSTANCES
  "f16:64;f16:128;f16:256;bf16:64;bf16:128;bf16:256"
  CACHE STRING "cuda_sm90_ws instantiations, dtype:head_dim pairs (dtype f16 or bf16)")

set(FMHA_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)

# fmha_kernel_instances(family FAMILY out_var): generates the family's
# translation units and instances.h from FMHA_<FAMILY>_INSTANCES; the
# templates read FMHA_<FAMILY>_{DTYPE,T,D} (per unit) and
# FMHA_<FAMILY>_{INSTANCE_XS,HEAD_DIM_XS,HEAD_DIM_LIST,HEAD_DIM_COUNT,
# HEAD_DIM_TEXT,DTYPE_XS} (the header). out_var receives the units.
function(fmha_kernel_instances family FAMILY out_var)
  set(gen ${FMHA_GENERATED_DIR}/backend/cuda/${family})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/backend/cuda/${family})
  set(units "")
  set(xs "")
  set(dims "")
  set(dtypes "")
  foreach(entry IN LISTS FMHA_${FAMILY}_INSTANCES)
    if(NOT entry MATCHES "^(f16|bf16):([0-9]+)$")
      message(FATAL_ERROR "FMHA_${FAMILY}_INSTANCES: '${entry}' is not f16:<head_dim> or bf16:<head_dim>")
    endif()
    set(FMHA_${FAMILY}_DTYPE ${CMAKE_MATCH_1})
    set(FMHA_${FAMILY}_D ${CMAKE_MATCH_2})
    if(CMAKE_MATCH_1 STREQUAL "f16")
      set(FMHA_${FAMILY}_T __half)
      set(enum FMHA_DTYPE_F16)
    else()
      set(FMHA_${FAMILY}_T __nv_bfloat16)
      set(enum FMHA_DTYPE_BF16)
    endif()
    set(unit ${gen}/fwd_${CMAKE_MATCH_1}_d${CMAKE_MATCH_2}.cu)
    configure_file(${src}/fwd_instance.cu.in ${unit} @ONLY)
    list(APPEND units ${unit})
    string(APPEND xs " X(${enum}, ${FMHA_${FAMILY}_T}, ${FMHA_${FAMILY}_D})")
    list(APPEND dims ${FMHA_${FAMILY}_D})
    list(APPEND dtypes ${enum})
  endforeach()
  list(REMOVE_DUPLICATES dims)
  list(SORT dims COMPARE NATURAL)
  list(REMOVE_DUPLICATES dtypes)
  set(FMHA_${FAMILY}_INSTANCE_XS "${xs}")
  list(LENGTH dims FMHA_${FAMILY}_HEAD_DIM_COUNT)
  string(REPLACE ";" ", " FMHA_${FAMILY}_HEAD_DIM_LIST "${dims}")
  set(FMHA_${FAMILY}_HEAD_DIM_TEXT "${FMHA_${FAMILY}_HEAD_DIM_LIST}")
  set(dim_xs "")
  foreach(d IN LISTS dims)
    string(APPEND dim_xs " X(${d})")
  endforeach()
  set(FMHA_${FAMILY}_HEAD_DIM_XS "${dim_xs}")
  set(dtype_xs "")
  foreach(t IN LISTS dtypes)
    string(APPEND dtype_xs " X(${t})")
  endforeach()
  set(FMHA_${FAMILY}_DTYPE_XS "${dtype_xs}")
  configure_file(${src}/instances.h.in ${gen}/instances.h @ONLY)
  set(${out_var} ${units} PARENT_SCOPE)
endfunction()

# cuda_sm80_tc: its units build with the library's architectures.
fmha_kernel_instances(sm80 SM80 _sm80_units)
list(APPEND FMHA_SOURCES ${_sm80_units})
# cuda_sm90_ws: sm_90a machine code only, built as their own object library
# (src/CMakeLists.txt) and linked into libfmha beside the other objects.
fmha_kernel_instances(sm90 SM90 FMHA_SM90_KERNEL_SOURCES)

# FMHA_CUDA_LAUNCH (top-level CMakeLists.txt): only the launcher reads it.
if(FMHA_CUDA_LAUNCH STREQUAL "DRIVER")
  set_source_files_properties(backend/cuda/common/kernel_launch.cpp PROPERTIES COMPILE_DEFINITIONS
                              FMHA_CUDA_DRIVER_LAUNCH=1)
elseif(NOT FMHA_CUDA_LAUNCH STREQUAL "RUNTIME")
  message(FATAL_ERROR "FMHA_CUDA_LAUNCH=${FMHA_CUDA_LAUNCH}: RUNTIME or DRIVER")
endif()
