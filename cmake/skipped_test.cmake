# fmha_add_skipped_test(<name> <reason> [LABELS <label>...])
#
# Registers <name> as a test that runs nothing but prints "SKIPPED: <reason>",
# which ctest reports as skipped. For a test that cannot run because a tool
# it needs is missing (SWIG, numpy, cargo, ...): the omission then shows in
# every ctest run, not only in the configure log. A test turned off on
# purpose (FMHA_BUILD_PYTHON=OFF, ...) is not registered at all.
function(fmha_add_skipped_test name reason)
  cmake_parse_arguments(ARG "" "" "LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: ${reason}")
  set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "^SKIPPED: " LABELS "${ARG_LABELS}")
endfunction()

# ctest shows a skipped test as a bare "(Skipped)": in fmha's own build, every
# test run ends with each skipped test's reason (cmake/print_skipped.cmake).
# Tests that skip by exit code print "<program>: skipped: <reason>" (or
# "SKIP: <reason>") and set a SKIP_REGULAR_EXPRESSION that matches it, so
# the log says they were skipped.
if(PROJECT_IS_TOP_LEVEL)
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/CTestCustom.cmake CONTENT [=[
set(CTEST_CUSTOM_POST_TEST "\"@CMAKE_COMMAND@\" \"-DLOG=@CMAKE_BINARY_DIR@/Testing/Temporary/LastTest.log\" -P \"@PROJECT_SOURCE_DIR@/cmake/print_skipped.cmake\"")
]=] @ONLY)
endif()
