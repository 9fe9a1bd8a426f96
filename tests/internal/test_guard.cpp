// The C boundary guard: every exception maps to a status with a message,
// and nothing escapes. Together with tests/api this reaches every status.
#include <doctest/doctest.h>

#include <new>
#include <stdexcept>
#include <string>

#include "api/guard.h"

using fmha::guard;

TEST_CASE("guard maps exceptions to statuses") {
  CHECK(guard("ok", [] { return FMHA_SUCCESS; }) == FMHA_SUCCESS);
  CHECK(std::string(fmha::last_error()).empty());

  CHECK(guard("entry", []() -> fmha_status { throw std::bad_alloc(); }) == FMHA_ERROR_OUT_OF_MEMORY);
  CHECK(std::string(fmha::last_error()) == "entry: out of host memory");

  CHECK(guard("entry", []() -> fmha_status { throw fmha::DeviceError{2, "out of memory"}; }) ==
        FMHA_ERROR_DEVICE);
  CHECK(std::string(fmha::last_error()) == "entry: CUDA error 2: out of memory");

  CHECK(guard("entry", []() -> fmha_status { throw std::runtime_error("boom"); }) == FMHA_ERROR_INTERNAL);
  CHECK(std::string(fmha::last_error()) == "entry: boom");

  CHECK(guard("entry", []() -> fmha_status {
          throw fmha::CallerError{FMHA_ERROR_INVALID_ARGUMENT, "callback ran 1 of 2"};
        }) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha::last_error()) == "entry: callback ran 1 of 2");

  CHECK(guard("entry", []() -> fmha_status { throw 42; }) == FMHA_ERROR_INTERNAL);
  CHECK(std::string(fmha::last_error()) == "entry: unknown exception");

  // A failing body keeps its own message; success clears it.
  CHECK(guard("entry", [] { return fmha::fail(FMHA_ERROR_UNSUPPORTED, "x=%d", 3); }) == FMHA_ERROR_UNSUPPORTED);
  CHECK(std::string(fmha::last_error()) == "x=3");
  CHECK(guard("entry", [] { return FMHA_SUCCESS; }) == FMHA_SUCCESS);
  CHECK(std::string(fmha::last_error()).empty());
}

TEST_CASE("fail truncates long messages safely") {
  const std::string longer(2000, 'x');
  CHECK(fmha::fail(FMHA_ERROR_INVALID_ARGUMENT, "%s", longer.c_str()) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha::last_error()).size() < 1000);
}
