// ctest's test_cpu_isa_<path> variants (tests/CMakeLists.txt) run this
// suite with FMHA_CPU_ISA=<path>. On a CPU without that path the library
// falls back to the best path it has, which another variant (and test_cpu
// itself) already runs: such a variant would repeat the whole suite on a
// path it does not name (two of six on the CI machine, 40% of the suite's
// sanitizer time). So it stops before the first case, with the library's
// own message and ctest's skip code, using the library's own choice
// (src/backend/cpu/cpu_isa.cpp is compiled into this program).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_isa.h"

namespace {

const bool kForcedPathMissing = [] {
  std::string message;
  fmha::cpu::choose_isa(std::getenv("FMHA_CPU_ISA"), &message);
  if (message.empty()) return false;
  std::printf("test_cpu: skipped: %s\n", message.c_str());
  std::fflush(stdout);
  std::exit(77);
}();

}  // namespace
