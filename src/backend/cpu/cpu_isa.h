// The instruction-set paths of the CPU backend and the one place that picks
// among them: cpuid (what the CPU and the OS support), then the
// FMHA_CPU_ISA environment variable, read once per process.
//
// The paths of one architecture, each a superset of the one before:
//   baseline    what the compiler targets by default (SSE2 on x86-64,
//               ASIMD (NEON) with FP32 arithmetic on AArch64); F16 converts
//               in software (core/numeric.h)
// x86-64:
//   avx2        AVX2 + FMA + F16C (hardware F16 conversion)
//   avx512      AVX-512 F/BW/DQ/VL (+ the avx2 set)
//   avx512bf16  avx512 + AVX512-BF16: BF16 Q.K^T (query blocks and decode
//               dot products) with vdpbf16ps, FP32 sums; P.V stays FP32
// AArch64 (cpu_attention_neon.h):
//   neon        ASIMD intrinsics: hardware F16 conversion (FCVTL/FCVTN),
//               FP32 arithmetic
//   neonfp16    neon + FP16 arithmetic (asimdhp) with the FP16 multiply-add
//               long of FEAT_FHM (asimdfhm): F16 Q.K^T multiplies F16 pairs
//               exactly into FP32 sums (FMLAL/FMLAL2); P.V stays FP32.
//               Plain FP16 FMLA (FP16 sums) would miss the F16 tolerance.
// A path of the other architecture is never available; the names reserved
// for kernels this build does not have (amx, avx512fp16) are recognized and
// refused with a message. Only x86-64 and AArch64 builds with GCC or Clang
// have paths above baseline; elsewhere everything is baseline.
#pragma once

#include <string>

namespace fmha::cpu {

enum class CpuIsa : int {
  kBaseline = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kAvx512Bf16 = 3,
  kNeon = 4,
  kNeonFp16 = 5,
};

// Whether the path is one of x86-64 (avx2 and above) or of AArch64 (neon and
// above); the baseline is neither.
constexpr bool isa_is_x86(CpuIsa isa) { return isa >= CpuIsa::kAvx2 && isa <= CpuIsa::kAvx512Bf16; }
constexpr bool isa_is_arm(CpuIsa isa) { return isa >= CpuIsa::kNeon; }

// "baseline", "avx2", "avx512", "avx512bf16", "neon", "neonfp16".
const char* isa_name(CpuIsa isa);

// Whether this build has the path and this CPU (and OS: the register state
// must be enabled in XCR0) can run it. Baseline is always available.
bool isa_available(CpuIsa isa);

// The best available path.
CpuIsa best_isa();

// The path for a value of FMHA_CPU_ISA (null or "" or "auto": automatic).
// A name that is unknown, reserved for a kernel this build lacks, or not
// available on this CPU gives the best available path instead, and `message`
// (when not null) says why in one line; otherwise `message` is left empty.
CpuIsa choose_isa(const char* request, std::string* message);

// The path every CPU forward of this process uses: choose_isa of
// FMHA_CPU_ISA, read on the first call. When the request could not be
// honoured, the message goes to stderr once, prefixed "fmha: ".
CpuIsa active_isa();

}  // namespace fmha::cpu
