# Builds and runs tests/package/consumer three ways (add_subdirectory and
# FetchContent are run_parent.cmake's). Invoked by ctest with
# FMHA_BINARY_DIR, FMHA_SOURCE_DIR, WORK_DIR, GENERATOR, C/CXX_COMPILER.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
set(here ${CMAKE_CURRENT_LIST_DIR})

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${ARGN}")
endfunction()

set(compilers -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})

# 1. install into a temporary prefix, then find_package(fmha) from it.
step(${CMAKE_COMMAND} --install ${FMHA_BINARY_DIR} --prefix ${prefix})
step(${CMAKE_COMMAND} -S ${here}/consumer -B ${WORK_DIR}/find_package -G ${GENERATOR}
     ${compilers} -DCMAKE_PREFIX_PATH=${prefix})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/find_package)
step(${WORK_DIR}/find_package/consumer)

# 2. pkg-config against the same install.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  file(GLOB pcdir ${prefix}/lib*/pkgconfig)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs fmha OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs fmha failed")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  file(GLOB libdir ${prefix}/lib*)
  list(GET libdir 0 libdir)
  step(${C_COMPILER} ${here}/consumer/consumer.c -o ${WORK_DIR}/pkgconfig_consumer ${flags}
       -Wl,-rpath,${libdir} -lm)
  step(${WORK_DIR}/pkgconfig_consumer)
else()
  message(STATUS "pkg-config not found: pkg-config consumer skipped")
endif()

# 3. a static libfmha.a (CPU only), installed, then found by find_package():
#    its config must bring the private dependencies (threads) along.
set(static_prefix ${WORK_DIR}/static-prefix)
step(${CMAKE_COMMAND} -S ${FMHA_SOURCE_DIR} -B ${WORK_DIR}/static-build -G ${GENERATOR} ${compilers}
     -DCMAKE_BUILD_TYPE=Release -DFMHA_BUILD_SHARED=OFF -DFMHA_ENABLE_CUDA=OFF -DFMHA_BUILD_TESTS=OFF
     -DFMHA_BUILD_EXAMPLES=OFF -DFMHA_BUILD_BENCHMARKS=OFF -DFMHA_BUILD_PYTHON=OFF -DFMHA_BUILD_RUST=OFF
     -DFMHA_INSTALL=ON)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/static-build)
step(${CMAKE_COMMAND} --install ${WORK_DIR}/static-build --prefix ${static_prefix})
step(${CMAKE_COMMAND} -S ${here}/consumer -B ${WORK_DIR}/find_package_static -G ${GENERATOR}
     ${compilers} -DCMAKE_PREFIX_PATH=${static_prefix})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/find_package_static)
step(${WORK_DIR}/find_package_static/consumer)
