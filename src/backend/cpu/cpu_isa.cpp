// The CPU backend's instruction-set paths (see cpu_isa.h).
#include "backend/cpu/cpu_isa.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_X86_PATHS 1
#include <cpuid.h>
#else
#define FMHA_CPU_X86_PATHS 0
#endif
// AArch64 Linux: ASIMD is part of the architecture; FP16 arithmetic and the
// FP16 multiply-add long are optional and read from the kernel's hwcaps.
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_ARM_PATHS 1
#if defined(__linux__)
#include <sys/auxv.h>  // getauxval; glibc's bits/hwcap.h has the HWCAP_* bits
#endif
#else
#define FMHA_CPU_ARM_PATHS 0
#endif

namespace fmha::cpu {
namespace {

// What cpuid and XCR0 say, read once.
struct CpuFeatures {
  bool avx2 = false;        // AVX2 + FMA + F16C, AVX state enabled by the OS
  bool avx512 = false;      // AVX-512 F/BW/DQ/VL, opmask and zmm state enabled
  bool avx512bf16 = false;  // AVX512_BF16
  bool avx512fp16 = false;  // reported in messages only: no kernel in this build
  bool amx = false;         // AMX-TILE + AMX-BF16, likewise
  bool neon = false;        // AArch64 ASIMD (always, on AArch64)
  bool neonfp16 = false;    // asimdhp (FP16 arithmetic) + asimdfhm (FMLAL/FMLAL2)
};

#if FMHA_CPU_X86_PATHS
// XCR0, the register state the OS saves (xgetbv needs OSXSAVE, checked by
// the caller). Inline assembly, so this file needs no -mxsave.
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if FMHA_CPU_X86_PATHS
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;                // SSE, AVX
  const bool zmm_state = ymm_state && (xcr0 & 0xe0) == 0xe0;  // opmask, zmm0-15 high, zmm16-31
  const bool amx_state = (xcr0 & (3u << 17)) == (3u << 17);   // XTILECFG, XTILEDATA
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31));
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx512 = f.avx2 && zmm_state && avx512;
  f.avx512fp16 = f.avx512 && (d & (1u << 23));
  f.amx = amx_state && (d & (1u << 22)) && (d & (1u << 24));
  const unsigned max_sub = a;
  if (max_sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512bf16 = f.avx512 && (a & (1u << 5));
  }
#endif
#if FMHA_CPU_ARM_PATHS
  f.neon = true;
#if defined(__linux__) && defined(HWCAP_ASIMDHP) && defined(HWCAP_ASIMDFHM)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  f.neonfp16 = (hwcap & HWCAP_ASIMDHP) && (hwcap & HWCAP_ASIMDFHM);
#endif
#endif
  return f;
}

const CpuFeatures& features() {
  static const CpuFeatures f = detect();
  return f;
}

bool equals_lower(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b)
    if (std::tolower(static_cast<unsigned char>(*a)) != *b) return false;
  return *a == *b;
}

constexpr CpuIsa kAll[] = {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16,
                           CpuIsa::kNeon, CpuIsa::kNeonFp16};
constexpr const char* kNames = "avx512bf16|avx512|avx2|neonfp16|neon|baseline|auto";

}  // namespace

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline: return "baseline";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kNeon: return "neon";
    case CpuIsa::kNeonFp16: return "neonfp16";
  }
  return "unknown";
}

bool isa_available(CpuIsa isa) {
  const CpuFeatures& f = features();
  switch (isa) {
    case CpuIsa::kBaseline: return true;
    case CpuIsa::kAvx2: return f.avx2;
    case CpuIsa::kAvx512: return f.avx512;
    case CpuIsa::kAvx512Bf16: return f.avx512bf16;
    case CpuIsa::kNeon: return f.neon;
    case CpuIsa::kNeonFp16: return f.neonfp16;
  }
  return false;
}

CpuIsa best_isa() {
  CpuIsa best = CpuIsa::kBaseline;
  for (CpuIsa isa : kAll)
    if (isa_available(isa)) best = isa;
  return best;
}

CpuIsa choose_isa(const char* request, std::string* message) {
  if (message != nullptr) message->clear();
  const CpuIsa best = best_isa();
  if (request == nullptr || request[0] == '\0' || equals_lower(request, "auto")) return best;
  auto refuse = [&](const char* why) {
    if (message != nullptr) {
      char line[256];
      std::snprintf(line, sizeof line, "FMHA_CPU_ISA=%.40s: %s; using %s", request, why, isa_name(best));
      *message = line;
    }
    return best;
  };
  for (CpuIsa isa : kAll)
    if (equals_lower(request, isa_name(isa)))
      return isa_available(isa) ? isa : refuse("not available on this CPU");
  const CpuFeatures& f = features();
  if (equals_lower(request, "amx"))
    return refuse(f.amx ? "this CPU has AMX-BF16 but this build has no AMX kernel"
                        : "not available in this build or on this CPU");
  if (equals_lower(request, "avx512fp16"))
    return refuse(f.avx512fp16 ? "this CPU has AVX512-FP16 but this build has no AVX512-FP16 kernel"
                               : "not available in this build or on this CPU");
  char why[128];
  std::snprintf(why, sizeof why, "unknown value (expected %s)", kNames);
  return refuse(why);
}

CpuIsa active_isa() {
  static const CpuIsa isa = [] {
    std::string message;
    const CpuIsa chosen = choose_isa(std::getenv("FMHA_CPU_ISA"), &message);
    if (!message.empty()) std::fprintf(stderr, "fmha: %s\n", message.c_str());
    return chosen;
  }();
  return isa;
}

}  // namespace fmha::cpu
