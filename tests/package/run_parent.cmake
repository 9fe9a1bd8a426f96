# Builds tests/package/parent, a parent project (an engine) that takes fmha
# by ROUTE (subdir, fetchcontent, package), with -fno-exceptions and no build
# type, installs it and runs the installed programs. CPU only. Invoked by
# ctest with ROUTE, FMHA_SOURCE_DIR, FMHA_BINARY_DIR, WORK_DIR, GENERATOR,
# C/CXX_COMPILER.
#   subdir        static libfmha (the default when vendored), FMHA_INSTALL off:
#                 the installed program needs nothing of fmha's
#   fetchcontent  BUILD_SHARED_LIBS=ON and FMHA_INSTALL=ON: libfmha.so, the
#                 header and the CMake package install beside the program, and
#                 the parent exports a library of its own that links fmha
#   package       fmha installed from this build, then find_package()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
unset(ENV{LD_LIBRARY_PATH})  # the installed programs find libfmha on their own

function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${ARGN}\n${out}")
endfunction()

set(args -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DFMHA_ROUTE=${ROUTE} -DFMHA_SOURCE_DIR=${FMHA_SOURCE_DIR} "-DCMAKE_CXX_FLAGS=-fno-exceptions"
    -DCMAKE_INSTALL_PREFIX=${prefix} -DFMHA_ENABLE_CUDA=OFF)
if(ROUTE STREQUAL "fetchcontent")
  list(APPEND args -DBUILD_SHARED_LIBS=ON -DFMHA_INSTALL=ON)
elseif(ROUTE STREQUAL "package")
  set(fmha_prefix ${WORK_DIR}/fmha-prefix)
  step(${CMAKE_COMMAND} --install ${FMHA_BINARY_DIR} --prefix ${fmha_prefix})
  list(APPEND args -DCMAKE_PREFIX_PATH=${fmha_prefix})
endif()

step(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/parent -B ${WORK_DIR}/build ${args})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${CMAKE_COMMAND} --install ${WORK_DIR}/build)

file(GLOB_RECURSE shared ${prefix}/libfmha.so*)
file(GLOB_RECURSE config ${prefix}/fmhaConfig.cmake)
if(ROUTE STREQUAL "subdir")
  if(NOT EXISTS ${WORK_DIR}/build/fmha/src/libfmha.a)
    message(FATAL_ERROR "vendored without BUILD_SHARED_LIBS, libfmha should be static")
  endif()
  if(shared OR config OR EXISTS ${prefix}/include/fmha/fmha.h)
    message(FATAL_ERROR "FMHA_INSTALL is off when vendored, but fmha installed files into ${prefix}")
  endif()
elseif(ROUTE STREQUAL "fetchcontent")
  if(NOT shared OR NOT config OR NOT EXISTS ${prefix}/include/fmha/fmha.h
     OR NOT EXISTS ${prefix}/lib/cmake/parent/parentTargets.cmake)
    message(FATAL_ERROR "FMHA_INSTALL=ON with BUILD_SHARED_LIBS=ON: libfmha.so, fmhaConfig.cmake and "
                        "fmha/fmha.h (and the parent's parentTargets.cmake) should be in ${prefix} "
                        "(found: '${shared}' '${config}')")
  endif()
endif()

step(${prefix}/bin/parent_app)
step(${prefix}/bin/parent_consumer_c)
