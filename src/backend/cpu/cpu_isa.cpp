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
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
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
  bool avx512fp16 = false;  // AVX512_FP16
  bool amx = false;         // AMX-TILE + AMX-BF16, tile state enabled in XCR0
  bool amx_permitted = false;  // ... and the OS let this process use it
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

#if FMHA_CPU_X86_PATHS
// Linux hands out the AMX tile-data state (XTILEDATA, 8 KiB of register
// file per thread) only to a process that asked for it: without the grant
// the first tile instruction faults. The request is process-wide and
// covers threads started later; it fails when the kernel is too old or a
// thread's sigaltstack is too small for the larger signal frame. Other
// systems: no AMX path.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
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
  if (f.amx) f.amx_permitted = request_amx_permission();
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

constexpr CpuIsa kAll[] = {CpuIsa::kBaseline,   CpuIsa::kAvx2,       CpuIsa::kAvx512, CpuIsa::kAvx512Bf16,
                           CpuIsa::kAvx512Fp16, CpuIsa::kAmx,        CpuIsa::kNeon,   CpuIsa::kNeonFp16};
constexpr const char* kNames = "amx|avx512fp16|avx512bf16|avx512|avx2|neonfp16|neon|baseline|auto";

}  // namespace

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline: return "baseline";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512bf16";
    case CpuIsa::kAvx512Fp16: return "avx512fp16";
    case CpuIsa::kAmx: return "amx";
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
#if defined(FMHA_CPU_AMX_MODEL)  // cpu_amx.h: the scalar tile model, for developer builds
    case CpuIsa::kAvx512Fp16:
    case CpuIsa::kAmx: return f.avx512bf16;
#else
    case CpuIsa::kAvx512Fp16: return f.avx512bf16 && f.avx512fp16;
    case CpuIsa::kAmx: return f.avx512bf16 && f.avx512fp16 && f.amx && f.amx_permitted;
#endif
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
  const CpuFeatures& f = features();
  for (CpuIsa isa : kAll)
    if (equals_lower(request, isa_name(isa))) {
      if (isa_available(isa)) return isa;
      if (isa == CpuIsa::kAmx && f.amx && !f.amx_permitted)
        return refuse("not available: the OS refused the AMX tile-data permission (arch_prctl)");
      return refuse("not available on this CPU");
    }
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
