# The per-language examples (included from examples/CMakeLists.txt): one
# decoder layer's attention call (GQA 32/8, causal, lse) on the CPU backend,
# in C, C++, Python (SWIG binding), Python (ctypes) and Rust. ctest runs each
# so none of them rots.
set(FMHA_EXAMPLES_DIR ${CMAKE_CURRENT_LIST_DIR})

add_executable(decoder_layer_c ${FMHA_EXAMPLES_DIR}/c/decoder_layer.c)
target_link_libraries(decoder_layer_c PRIVATE fmha::fmha)
set_target_properties(decoder_layer_c PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
if(NOT MSVC)
  target_link_libraries(decoder_layer_c PRIVATE m)
endif()

# Serving: a paged decode step and its cascade (prefix + suffix merged with
# fmha_merge); CPU by default, CUDA with the argument "cuda".
add_executable(paged_cascade_c ${FMHA_EXAMPLES_DIR}/c/paged_cascade.c)
target_link_libraries(paged_cascade_c PRIVATE fmha::fmha)
set_target_properties(paged_cascade_c PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
if(NOT MSVC)
  target_link_libraries(paged_cascade_c PRIVATE m)
endif()
if(FMHA_WITH_CUDA)
  target_compile_definitions(paged_cascade_c PRIVATE FMHA_EXAMPLE_CUDA=1)
  target_link_libraries(paged_cascade_c PRIVATE CUDA::cudart)
endif()

# Context parallelism over NCCL (ring attention across the GPUs of one
# machine): needs CUDA and NCCL. NCCL is looked up in FMHA_NCCL_ROOT (a
# folder with include/nccl.h and lib/libnccl.so*, e.g. the nvidia-nccl-cu13
# wheel's site-packages/nvidia/nccl), then NCCL_ROOT, CUDA's and the system's
# folders; without it the example is skipped with a message.
set(FMHA_NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH
    "NCCL folder (include/nccl.h, lib/libnccl.so*) for examples/c/context_parallel.c")
set(fmha_context_parallel_c OFF)
if(FMHA_WITH_CUDA)
  find_path(FMHA_NCCL_INCLUDE_DIR nccl.h HINTS ${FMHA_NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  # The wheel ships libnccl.so.2 without the libnccl.so link: name both.
  find_library(FMHA_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS ${FMHA_NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})
  if(FMHA_NCCL_INCLUDE_DIR AND FMHA_NCCL_LIBRARY)
    set(fmha_context_parallel_c ON)
    message(STATUS "fmha: examples/c/context_parallel.c with NCCL ${FMHA_NCCL_LIBRARY}")
    add_executable(context_parallel_c ${FMHA_EXAMPLES_DIR}/c/context_parallel.c)
    target_include_directories(context_parallel_c PRIVATE ${FMHA_NCCL_INCLUDE_DIR})
    target_link_libraries(context_parallel_c PRIVATE fmha::fmha CUDA::cudart ${FMHA_NCCL_LIBRARY})
    get_filename_component(nccl_dir ${FMHA_NCCL_LIBRARY} DIRECTORY)
    set_target_properties(context_parallel_c PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON
                          BUILD_RPATH "${nccl_dir}")
    if(NOT MSVC)
      target_link_libraries(context_parallel_c PRIVATE m)
    endif()
  else()
    message(STATUS "fmha: examples/c/context_parallel.c skipped: NCCL not found "
                   "(set FMHA_NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so*, e.g. "
                   "pip install nvidia-nccl-cu13 and <site-packages>/nvidia/nccl)")
  endif()
else()
  message(STATUS "fmha: examples/c/context_parallel.c skipped: built without CUDA")
endif()

add_executable(decoder_layer_cpp ${FMHA_EXAMPLES_DIR}/cpp/decoder_layer.cpp)
target_link_libraries(decoder_layer_cpp PRIVATE fmha::fmha)

if(NOT FMHA_BUILD_TESTS)
  return()
endif()

add_test(NAME example_decoder_layer_c COMMAND decoder_layer_c 256)
add_test(NAME example_decoder_layer_cpp COMMAND decoder_layer_cpp 256)
add_test(NAME example_paged_cascade_c COMMAND paged_cascade_c)
set_tests_properties(example_decoder_layer_c example_decoder_layer_cpp example_paged_cascade_c
                     PROPERTIES LABELS "cpu;example")
if(FMHA_WITH_CUDA)
  add_test(NAME example_paged_cascade_cuda COMMAND paged_cascade_c cuda)
  set_tests_properties(example_paged_cascade_cuda PROPERTIES LABELS "gpu;example" SKIP_RETURN_CODE 77)
endif()
if(fmha_context_parallel_c)
  # Every visible GPU (one works too); an uneven sequence length.
  add_test(NAME example_context_parallel_c COMMAND context_parallel_c 4099)
  set_tests_properties(example_context_parallel_c PROPERTIES LABELS "gpu;example" SKIP_RETURN_CODE 77)
endif()

# Python (SWIG): needs the binding built (bindings/python) and numpy;
# reported skipped, with the reason bindings/python gave, without them.
get_property(fmha_python GLOBAL PROPERTY FMHA_PYTHON_EXECUTABLE)
get_property(fmha_python_dir GLOBAL PROPERTY FMHA_PYTHON_BUILD_DIR)
get_property(fmha_python_skip GLOBAL PROPERTY FMHA_PYTHON_SKIP_REASON)
if(fmha_python_skip)
  fmha_add_skipped_test(example_decoder_layer_python "${fmha_python_skip}" LABELS "cpu;example;python")
elseif(fmha_python)
  add_test(NAME example_decoder_layer_python
           COMMAND ${fmha_python} ${FMHA_EXAMPLES_DIR}/python/decoder_layer.py 256)
  set_tests_properties(example_decoder_layer_python PROPERTIES LABELS "cpu;example;python"
    ENVIRONMENT "PYTHONPATH=${fmha_python_dir};PYTHONDONTWRITEBYTECODE=1")
endif()

# Python (ctypes): any Python 3 and the shared library, nothing built.
if(FMHA_BUILD_SHARED)
  if(NOT fmha_python)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(fmha_python ${Python3_EXECUTABLE})
  endif()
  if(fmha_python)
    add_test(NAME example_ctypes_forward
             COMMAND ${fmha_python} ${FMHA_EXAMPLES_DIR}/python/ctypes_forward.py 256)
    set_tests_properties(example_ctypes_forward PROPERTIES LABELS "cpu;example;python"
      ENVIRONMENT "FMHA_LIBRARY=$<TARGET_FILE:fmha>;PYTHONDONTWRITEBYTECODE=1")
  endif()
endif()

# Context parallelism (examples/python/context_parallel.py): N = 1, 2, 3
# processes over gloo with the CPU backend, torchrun, lengths that do and do
# not divide by 2N, GQA/MQA, F32, BF16, FP16, checked against one forward. Needs
# torch (FMHA_TORCH_PYTHON: the interpreter that has it; default the bindings'
# or the found Python 3); reported skipped without it. Through ctypes (the
# shared library), and through the fmha package when it is built for that
# interpreter.
if(FMHA_BUILD_SHARED)
  set(FMHA_TORCH_PYTHON "${fmha_python}" CACHE FILEPATH
      "Python with torch for the context-parallel example's tests")
  set(torch_skip "")
  if(NOT FMHA_TORCH_PYTHON)
    set(torch_skip "no Python 3 interpreter found")
  else()
    execute_process(COMMAND ${FMHA_TORCH_PYTHON} -c "import torch.distributed as d; assert d.is_available()"
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(NOT rc EQUAL 0)
      string(CONCAT torch_skip "${FMHA_TORCH_PYTHON} cannot import torch.distributed (pip install torch, "
                               "or -DFMHA_TORCH_PYTHON=<a python that has it>)")
    endif()
  endif()
  set(cp_script ${FMHA_EXAMPLES_DIR}/python/context_parallel.py)
  set(cp_shape --device cpu --check --heads 4 --kv-heads 2 --dim 64)
  # N: sequence lengths (the first divides by 2N, the second does not), dtypes.
  set(cp_cases "1|1000,1001|f32,bf16" "2|1024,1001|f32,bf16,fp16" "3|1002,1001|f32,bf16")
  foreach(case IN LISTS cp_cases)
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 n)
    list(GET case 1 seqs)
    list(GET case 2 dtypes)
    set(name example_context_parallel_n${n})
    if(torch_skip)
      fmha_add_skipped_test(${name} "${torch_skip}" LABELS "cpu;example;python")
      continue()
    endif()
    set(kv_heads)
    if(n EQUAL 3)
      set(kv_heads --kv-heads 1)  # MQA
    endif()
    add_test(NAME ${name}
             COMMAND ${FMHA_TORCH_PYTHON} -m torch.distributed.run --standalone --nproc-per-node ${n}
                     ${cp_script} ${cp_shape} ${kv_heads} --seq ${seqs} --dtype ${dtypes} --fmha ctypes)
    set_tests_properties(${name} PROPERTIES LABELS "cpu;example;python" TIMEOUT 300
      ENVIRONMENT "FMHA_LIBRARY=$<TARGET_FILE:fmha>;PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
  endforeach()
  if(NOT torch_skip AND fmha_python_dir AND "${fmha_python}" STREQUAL "${FMHA_TORCH_PYTHON}")
    add_test(NAME example_context_parallel_package
             COMMAND ${FMHA_TORCH_PYTHON} -m torch.distributed.run --standalone --nproc-per-node 2
                     ${cp_script} ${cp_shape} --seq 1001 --dtype f32,bf16 --fmha package)
    set_tests_properties(example_context_parallel_package PROPERTIES LABELS "cpu;example;python"
      TIMEOUT 300 ENVIRONMENT "PYTHONPATH=${fmha_python_dir};PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
  endif()
endif()

# Rust: a cargo package using bindings/rust (needs cargo; see bindings/rust);
# reported skipped, with the reason bindings/rust gave, without it.
get_property(fmha_cargo GLOBAL PROPERTY FMHA_CARGO_EXECUTABLE)
get_property(fmha_cargo_env GLOBAL PROPERTY FMHA_CARGO_TEST_ENV)
get_property(fmha_cargo_env_mod GLOBAL PROPERTY FMHA_CARGO_TEST_ENV_MOD)
get_property(fmha_rust_skip GLOBAL PROPERTY FMHA_RUST_SKIP_REASON)
if(fmha_rust_skip)
  fmha_add_skipped_test(example_decoder_layer_rust "${fmha_rust_skip}" LABELS "cpu;example;rust")
elseif(fmha_cargo)
  add_test(NAME example_decoder_layer_rust
           COMMAND ${fmha_cargo} run --offline --quiet
                   --manifest-path ${FMHA_EXAMPLES_DIR}/rust/Cargo.toml -- 256)
  set_tests_properties(example_decoder_layer_rust PROPERTIES LABELS "cpu;example;rust"
    ENVIRONMENT "${fmha_cargo_env}" ENVIRONMENT_MODIFICATION "${fmha_cargo_env_mod}"
    RESOURCE_LOCK cargo_target_dir TIMEOUT 900)
endif()
