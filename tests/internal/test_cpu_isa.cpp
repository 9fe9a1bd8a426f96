// The CPU backend's path choice (src/backend/cpu/cpu_isa.h): FMHA_CPU_ISA
// names a path, and every value that cannot be honoured falls back to the
// best available path with a message that names the value and the path
// used.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_isa.h"

using fmha::cpu::CpuIsa;

TEST_CASE("cpu isa: automatic, forced, refused") {
  const CpuIsa best = fmha::cpu::best_isa();
  CHECK(fmha::cpu::isa_available(CpuIsa::kBaseline));
  CHECK(fmha::cpu::isa_available(best));
  const std::string best_name = std::string("best CPU path here: ") + fmha::cpu::isa_name(best);
  MESSAGE(best_name);
  // A CI stage that knows its CPU (an emulated core: tools/ci_aarch64.sh)
  // says which path the detection must find.
  if (const char* expect = std::getenv("FMHA_TEST_EXPECT_ISA")) CHECK(std::string(fmha::cpu::isa_name(best)) == expect);
  std::string msg = "stale";
  for (const char* automatic : {static_cast<const char*>(nullptr), "", "auto", "AUTO"}) {
    CHECK(fmha::cpu::choose_isa(automatic, &msg) == best);
    CHECK(msg.empty());
  }
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kNeon,
                     CpuIsa::kNeonFp16}) {
    const CpuIsa got = fmha::cpu::choose_isa(fmha::cpu::isa_name(isa), &msg);
    CAPTURE(fmha::cpu::isa_name(isa));
    if (fmha::cpu::isa_available(isa)) {
      CHECK(got == isa);
      CHECK(msg.empty());
    } else {
      CHECK(got == best);
      CHECK(msg.find("not available") != std::string::npos);
    }
    // Availability is monotone: each path includes the ones below it, and
    // no CPU has paths of both architectures.
    if (fmha::cpu::isa_available(isa)) CHECK(static_cast<int>(isa) <= static_cast<int>(best));
    if (fmha::cpu::isa_available(isa) && fmha::cpu::isa_is_x86(isa)) CHECK(!fmha::cpu::isa_is_arm(best));
    if (fmha::cpu::isa_available(isa) && fmha::cpu::isa_is_arm(isa)) CHECK(!fmha::cpu::isa_is_x86(best));
  }
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
  CHECK(fmha::cpu::isa_available(CpuIsa::kNeon));  // ASIMD is part of AArch64
#endif
#if defined(__x86_64__)
  CHECK(!fmha::cpu::isa_available(CpuIsa::kNeon));
  CHECK(fmha::cpu::choose_isa("neon", &msg) == best);
  CHECK(msg.find("not available") != std::string::npos);
#endif
  CHECK(fmha::cpu::choose_isa("AVX2", &msg) ==
        (fmha::cpu::isa_available(CpuIsa::kAvx2) ? CpuIsa::kAvx2 : best));
  for (const char* reserved : {"amx", "avx512fp16"}) {
    CHECK(fmha::cpu::choose_isa(reserved, &msg) == best);
    CHECK(msg.find(std::string("FMHA_CPU_ISA=") + reserved) == 0);
    CHECK(msg.find("build") != std::string::npos);
    CHECK(msg.find(std::string("using ") + fmha::cpu::isa_name(best)) != std::string::npos);
  }
  for (const char* bad : {"sse9", "avx512 ", "avx", "baseline2"}) {
    CHECK(fmha::cpu::choose_isa(bad, &msg) == best);
    CHECK(msg.find("unknown value") != std::string::npos);
    CHECK(msg.find("avx512bf16|avx512|avx2|neonfp16|neon|baseline") != std::string::npos);
  }
}
