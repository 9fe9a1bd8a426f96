# Run by ctest after every test run (CTEST_CUSTOM_POST_TEST in the build's
# CTestCustom.cmake, written by cmake/skipped_test.cmake): ctest lists a
# skipped test as a bare "(Skipped)", so this prints, for each test skipped
# in the run, "skipped: <test>: <reason>", the reason being the first line of
# its output that mentions a skip or says "...: not available" (a forced CPU
# path this CPU lacks; ctest's Testing/Temporary/LastTest.log).
# A test counts as skipped when its SKIP_REGULAR_EXPRESSION matched, which is
# why the tests that skip by exit code also set one.
#   cmake -DLOG=<build>/Testing/Temporary/LastTest.log -P print_skipped.cmake
# While ctest runs (the post-test command included), this run's log is
# LastTest.log.tmp; LastTest.log is still the previous run's.
if(EXISTS "${LOG}.tmp")
  set(LOG "${LOG}.tmp")
elseif(NOT EXISTS "${LOG}")
  return()
endif()
file(STRINGS "${LOG}" lines ENCODING UTF-8)
set(name "")
set(reason "")
set(in_output FALSE)
foreach(line IN LISTS lines)
  if(line MATCHES "^[0-9]+/[0-9]+ Test: (.*)$")
    set(name "${CMAKE_MATCH_1}")
    set(reason "")
  elseif(line STREQUAL "Output:")
    set(in_output TRUE)
  elseif(line STREQUAL "<end of output>")
    set(in_output FALSE)
  elseif(in_output AND reason STREQUAL "" AND line MATCHES "[Ss][Kk][Ii][Pp]|: not available")
    string(STRIP "${line}" reason)
  elseif(line MATCHES "^Skip regular expression found in output")
    if(reason STREQUAL "")
      set(reason "(no reason printed)")
    endif()
    # On stdout: ctest shows a post-test command's standard output.
    execute_process(COMMAND ${CMAKE_COMMAND} -E echo "skipped: ${name}: ${reason}")
  endif()
endforeach()
