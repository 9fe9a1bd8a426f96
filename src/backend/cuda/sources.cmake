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
# cuda_sm80_tc also takes <dtype>_f8kv:<head_dim>: q (and o) in f16/bf16
# with an FP8 K/V cache (either FP8 kind, a run-time branch), instantiated
# only for the head dims of KV caches in use (64, 128, 256), on its own
# decode and prefill tiles (Sm80Tuning::NarrowFp8Kv, WideFp8Kv).
set(FMHA_SM80_INSTANCES_DEFAULT
  "f16:32;f16:64;f16:96;f16:128;f16:256;bf16:32;bf16:64;bf16:96;bf16:128;bf16:256;f16_f8kv:64;f16_f8kv:128;f16_f8kv:256;bf16_f8kv:64;bf16_f8kv:128;bf16_f8kv:256"
  CACHE INTERNAL "the default FMHA_SM80_INSTANCES (test_gpu tells reduced builds by it)")
set(FMHA_SM80_INSTANCES "${FMHA_SM80_INSTANCES_DEFAULT}"
  CACHE STRING "cuda_sm80_tc instantiations, dtype:head_dim pairs (dtype f16, bf16, f16_f8kv or bf16_f8kv)")
# cuda_sm90_ws also takes e4m3:<head_dim> / e5m2:<head_dim>: q, k and v all
# FP8 (V transposed), o F16 or BF16, on wgmma FP8 (head dim 128 only).
set(FMHA_SM90_INSTANCES_DEFAULT "f16:64;f16:128;f16:256;bf16:64;bf16:128;bf16:256;e4m3:128"
  CACHE INTERNAL "the default FMHA_SM90_INSTANCES")
set(FMHA_SM90_INSTANCES "${FMHA_SM90_INSTANCES_DEFAULT}"
  CACHE STRING "cuda_sm90_ws instantiations, dtype:head_dim pairs (dtype f16, bf16, e4m3 or e5m2)")

# cuda_sm90_ws's 16-bit kernels (issue 8; docs/performance.md, "Issue 8:
# cuda_sm90_ws's plain 16-bit kernel toward cuDNN", has the H200 run): the
# L2 budget (MiB) of the work order's bands of (batch, head) units (0: one
# band; 16 MiB: +2-8% over one band, 32 MiB within noise of 16).
set(FMHA_SM90_L2_BAND_MIB "16" CACHE STRING "cuda_sm90_ws: L2 budget in MiB of the work order's unit bands (0: none)")
if(NOT FMHA_SM90_L2_BAND_MIB MATCHES "^[0-9]+$")
  message(FATAL_ERROR "FMHA_SM90_L2_BAND_MIB (MiB): '${FMHA_SM90_L2_BAND_MIB}'")
endif()

# Benchmarking builds only: the sm90 FP8 units also compile the candidate tile
# configs that FMHA_SM90_FP8_TILE picks at run time (fp8_tile_config.h).
option(FMHA_SM90_FP8_EXPERIMENTS "cuda_sm90_ws FP8: compile the candidate tile configs too" OFF)

# Benchmarking builds only: the sm80 D=128 units also compile candidate
# decode tiles that FMHA_SM80_PAGED_TILE / FMHA_SM80_STREAM_TILE pick at run
# time (sm80/tile_config.h).
option(FMHA_SM80_DECODE_EXPERIMENTS "cuda_sm80_tc: compile the candidate D=128 decode tiles too" OFF)

# cuda_sm80_tc's dense instantiations (16-bit units): each tile (wide:
# prefill, 128 rows; narrow: decode, 16 rows) has a plain and a softcap
# kernel that reads no sequence metadata, or runs dense problems in its
# contiguous-serving kernel (2 kernels fewer per tile and unit, per
# architecture). "wide" keeps them for the prefill tile only: decode streams
# K/V and is bound by memory, not by the few registers the metadata costs
# (docs/performance.md, "Build time and library size").
set(FMHA_SM80_DENSE_KERNELS "wide" CACHE STRING "cuda_sm80_tc tiles with dense kernels of their own: all, wide or none")
set_property(CACHE FMHA_SM80_DENSE_KERNELS PROPERTY STRINGS all wide none)
if(FMHA_SM80_DENSE_KERNELS STREQUAL "all")
  set(FMHA_SM80_DENSE_WIDE 1)
  set(FMHA_SM80_DENSE_NARROW 1)
elseif(FMHA_SM80_DENSE_KERNELS STREQUAL "wide")
  set(FMHA_SM80_DENSE_WIDE 1)
  set(FMHA_SM80_DENSE_NARROW 0)
elseif(FMHA_SM80_DENSE_KERNELS STREQUAL "none")
  set(FMHA_SM80_DENSE_WIDE 0)
  set(FMHA_SM80_DENSE_NARROW 0)
else()
  message(FATAL_ERROR "FMHA_SM80_DENSE_KERNELS=${FMHA_SM80_DENSE_KERNELS}: all, wide or none")
endif()

set(FMHA_GENERATED_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)

# fmha_kernel_instances(family FAMILY out_var): generates the family's
# translation units and instances.h from FMHA_<FAMILY>_INSTANCES; the
# templates read FMHA_<FAMILY>_{DTYPE,T,D} (per unit) and
# FMHA_<FAMILY>_{INSTANCE_XS,HEAD_DIM_XS,HEAD_DIM_LIST,HEAD_DIM_COUNT,
# HEAD_DIM_TEXT,DTYPE_XS,FP8KV_INSTANCE_XS} (the header). out_var receives
# the units. A <dtype>_f8kv entry (FP8 K/V under a 16-bit q; sm80 only)
# goes to FP8KV_INSTANCE_XS instead of INSTANCE_XS and adds both FP8 dtypes.
function(fmha_kernel_instances family FAMILY out_var)
  set(gen ${FMHA_GENERATED_DIR}/backend/cuda/${family})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/backend/cuda/${family})
  set(units "")
  set(xs "")
  set(dims "")
  set(dtypes "")
  set(fp8kv_xs "")
  set(fp8_xs "")
  foreach(entry IN LISTS FMHA_${FAMILY}_INSTANCES)
    if(family STREQUAL "sm90" AND entry MATCHES "^(e4m3|e5m2):([0-9]+)$")
      # FP8 q, k and v (sm90 only): its own unit template and list.
      set(FMHA_${FAMILY}_DTYPE ${CMAKE_MATCH_1})
      set(FMHA_${FAMILY}_D ${CMAKE_MATCH_2})
      if(CMAKE_MATCH_1 STREQUAL "e4m3")
        set(FMHA_${FAMILY}_T __nv_fp8_e4m3)
        set(enum FMHA_DTYPE_F8E4M3)
      else()
        set(FMHA_${FAMILY}_T __nv_fp8_e5m2)
        set(enum FMHA_DTYPE_F8E5M2)
      endif()
      set(unit ${gen}/fwd_${FMHA_${FAMILY}_DTYPE}_d${FMHA_${FAMILY}_D}.cu)
      string(APPEND fp8_xs " X(${enum}, ${FMHA_${FAMILY}_T}, ${FMHA_${FAMILY}_D})")
      # and the o dtypes it writes (the registry row checks o's dtype too)
      list(APPEND dtypes ${enum} FMHA_DTYPE_F16 FMHA_DTYPE_BF16)
      configure_file(${src}/fwd_fp8_instance.cu.in ${unit} @ONLY)
      list(APPEND units ${unit})
      list(APPEND dims ${FMHA_${FAMILY}_D})
      continue()
    endif()
    if(NOT entry MATCHES "^(f16|bf16)(_f8kv)?:([0-9]+)$" OR (CMAKE_MATCH_2 AND NOT family STREQUAL "sm80"))
      message(FATAL_ERROR "FMHA_${FAMILY}_INSTANCES: '${entry}' is not f16:<head_dim> or bf16:<head_dim>"
                          " (sm80 also: f16_f8kv:<head_dim>, bf16_f8kv:<head_dim>; sm90 also: e4m3:<head_dim>,"
                          " e5m2:<head_dim>)")
    endif()
    set(fp8kv ${CMAKE_MATCH_2})
    set(FMHA_${FAMILY}_DTYPE ${CMAKE_MATCH_1}${CMAKE_MATCH_2})
    set(FMHA_${FAMILY}_D ${CMAKE_MATCH_3})
    if(CMAKE_MATCH_1 STREQUAL "f16")
      set(FMHA_${FAMILY}_T __half)
      set(enum FMHA_DTYPE_F16)
    else()
      set(FMHA_${FAMILY}_T __nv_bfloat16)
      set(enum FMHA_DTYPE_BF16)
    endif()
    set(unit ${gen}/fwd_${FMHA_${FAMILY}_DTYPE}_d${FMHA_${FAMILY}_D}.cu)
    if(fp8kv)
      set(FMHA_${FAMILY}_FP8KV true)
      string(APPEND fp8kv_xs " X(${enum}, ${FMHA_${FAMILY}_T}, ${FMHA_${FAMILY}_D})")
      list(APPEND dtypes ${enum} FMHA_DTYPE_F8E4M3 FMHA_DTYPE_F8E5M2)
    else()
      set(FMHA_${FAMILY}_FP8KV false)
      string(APPEND xs " X(${enum}, ${FMHA_${FAMILY}_T}, ${FMHA_${FAMILY}_D})")
      list(APPEND dtypes ${enum})
    endif()
    configure_file(${src}/fwd_instance.cu.in ${unit} @ONLY)
    list(APPEND units ${unit})
    list(APPEND dims ${FMHA_${FAMILY}_D})
  endforeach()
  list(REMOVE_DUPLICATES dims)
  list(SORT dims COMPARE NATURAL)
  list(REMOVE_DUPLICATES dtypes)
  set(FMHA_${FAMILY}_INSTANCE_XS "${xs}")
  set(FMHA_${FAMILY}_FP8KV_INSTANCE_XS "${fp8kv_xs}")
  set(FMHA_${FAMILY}_FP8_INSTANCE_XS "${fp8_xs}")
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

# Benchmarking builds only: the FP8 K/V units' plain kernels (ScoreOps::kNone)
# also compile candidate decode tiles that FMHA_SM80_FP8KV_TILE picks at run
# time (sm80/tile_config.h: with_fp8kv_decode_tile; tools/device/fp8dec3.sh).
option(FMHA_SM80_FP8KV_EXPERIMENTS "cuda_sm80_tc: compile the candidate FP8 K/V decode tiles too" OFF)

# cuda_sm80_tc's FP8 K/V units (<dtype>_f8kv entries) convert FP8 in
# registers with cvt.f16x2.e4m3x2, which sm_89 and newer have; on sm_80 the
# conversion is a software decode in every fragment load, which cost 119-216 s
# per unit in CI (docs/performance.md, "FP8 KV decode, second pass").
# So they build machine code (and PTX) for the architectures of
# CMAKE_CUDA_ARCHITECTURES from 89 up only, as their own object library
# (src/CMakeLists.txt: fmha_sm80_fp8kv_objects, outside FMHA_CUDA_SHARED_PTX),
# and the registry row runs FP8 K/V problems from the lowest of them up
# (FMHA_SM80_FP8KV_SM_MIN; an A100 runs an FP8 cache on cuda_generic). A
# list without any (80 alone) builds no FP8 K/V unit; a list CMake spells
# otherwise (native, all, 90a) builds them with the library's architectures,
# software decode included, from sm_80 up.
set(FMHA_SM80_FP8KV_ARCHS "")
set(FMHA_SM80_FP8KV_SM_MIN 0)
set(_fp8kv_own_archs ON)
foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(NOT arch MATCHES "^([0-9]+)(-real|-virtual)?$")
    set(_fp8kv_own_archs OFF)
    break()
  endif()
  if(CMAKE_MATCH_1 GREATER_EQUAL 89)
    list(APPEND FMHA_SM80_FP8KV_ARCHS ${arch})
    if(FMHA_SM80_FP8KV_SM_MIN EQUAL 0 OR CMAKE_MATCH_1 LESS FMHA_SM80_FP8KV_SM_MIN)
      set(FMHA_SM80_FP8KV_SM_MIN ${CMAKE_MATCH_1})
    endif()
  endif()
endforeach()
if(NOT _fp8kv_own_archs)
  set(FMHA_SM80_FP8KV_ARCHS "")
  set(FMHA_SM80_FP8KV_SM_MIN 80)
elseif(NOT FMHA_SM80_FP8KV_ARCHS)
  # No architecture from 89 up: no FP8 K/V unit (this scope's copy of the list).
  set(_sm80_list "")
  set(_dropped "")
  foreach(entry IN LISTS FMHA_SM80_INSTANCES)
    if(entry MATCHES "_f8kv:")
      list(APPEND _dropped ${entry})
    else()
      list(APPEND _sm80_list ${entry})
    endif()
  endforeach()
  if(_dropped)
    message(STATUS "fmha: CMAKE_CUDA_ARCHITECTURES has none from 89 up: no cuda_sm80_tc FP8 K/V units (${_dropped})")
  endif()
  set(FMHA_SM80_INSTANCES "${_sm80_list}")
endif()

# cuda_sm80_tc: its 16-bit units build with the library's architectures,
# its FP8 K/V units with FMHA_SM80_FP8KV_ARCHS (when set).
fmha_kernel_instances(sm80 SM80 _sm80_units)
set(FMHA_SM80_FP8KV_SOURCES "")
if(FMHA_SM80_FP8KV_ARCHS)
  foreach(unit IN LISTS _sm80_units)
    if(unit MATCHES "_f8kv_d[0-9]+\\.cu$")
      list(APPEND FMHA_SM80_FP8KV_SOURCES ${unit})
    endif()
  endforeach()
  if(FMHA_SM80_FP8KV_SOURCES)
    list(REMOVE_ITEM _sm80_units ${FMHA_SM80_FP8KV_SOURCES})
    message(STATUS "fmha: cuda_sm80_tc FP8 K/V units for ${FMHA_SM80_FP8KV_ARCHS} (FP8 K/V from sm_${FMHA_SM80_FP8KV_SM_MIN})")
  endif()
endif()
list(APPEND FMHA_SOURCES ${_sm80_units})
# Experiments only: another D=128 FP8 K/V tile (sm80/tile_config.h), given
# to the FP8 units and the host plan (sm80_forward.cu), which must agree.
set(FMHA_SM80_FP8KV_TILE_D128 "" CACHE STRING
    "experiments: cuda_sm80_tc's D=128 FP8 K/V tile as kBlockN,kMinBlocksPerSm,kRawStages[,kKeyWarps] (empty: the tuned one)")
if(FMHA_SM80_FP8KV_TILE_D128)
  if(NOT FMHA_SM80_FP8KV_TILE_D128 MATCHES "^[0-9]+,[0-9]+,[0-9]+(,[0-9]+)?$")
    message(FATAL_ERROR "FMHA_SM80_FP8KV_TILE_D128: '${FMHA_SM80_FP8KV_TILE_D128}' is not kBlockN,kMinBlocksPerSm,kRawStages[,kKeyWarps]")
  endif()
  set(_fp8kv_sources backend/cuda/sm80/sm80_forward.cu)
  foreach(unit IN LISTS _sm80_units FMHA_SM80_FP8KV_SOURCES)
    if(unit MATCHES "_f8kv_d128\\.cu$")
      list(APPEND _fp8kv_sources ${unit})
    endif()
  endforeach()
  # Three definitions: nvcc would split one -D value at its commas.
  string(REPLACE "," ";" _fp8kv_tile "${FMHA_SM80_FP8KV_TILE_D128}")
  list(GET _fp8kv_tile 0 _fp8kv_n)
  list(GET _fp8kv_tile 1 _fp8kv_ctas)
  list(GET _fp8kv_tile 2 _fp8kv_stages)
  set(_fp8kv_key_warps 1)
  list(LENGTH _fp8kv_tile _fp8kv_fields)
  if(_fp8kv_fields EQUAL 4)
    list(GET _fp8kv_tile 3 _fp8kv_key_warps)
  endif()
  set_source_files_properties(${_fp8kv_sources} PROPERTIES COMPILE_DEFINITIONS
                              "FMHA_SM80_FP8KV_D128_N=${_fp8kv_n};FMHA_SM80_FP8KV_D128_CTAS=${_fp8kv_ctas};FMHA_SM80_FP8KV_D128_STAGES=${_fp8kv_stages};FMHA_SM80_FP8KV_D128_KEY_WARPS=${_fp8kv_key_warps}")
endif()
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
