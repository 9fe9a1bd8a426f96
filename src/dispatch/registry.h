// The kernel registry: one table of entries, each declaring what it
// supports; dispatch takes the best-ranked entry that supports the problem.
//
// Adding a kernel family = one row in registry.cpp plus its files. What no
// row supports is FMHA_ERROR_UNSUPPORTED, never a wrong answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device_info.h"
#include "core/problem.h"

namespace fmha {

constexpr uint32_t dtype_bit(fmha_dtype t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kAllDtypes =
    dtype_bit(FMHA_DTYPE_F16) | dtype_bit(FMHA_DTYPE_BF16) | dtype_bit(FMHA_DTYPE_F32);
constexpr uint32_t kHalfDtypes = dtype_bit(FMHA_DTYPE_F16) | dtype_bit(FMHA_DTYPE_BF16);
constexpr uint32_t kFp8Dtypes = dtype_bit(FMHA_DTYPE_F8E4M3) | dtype_bit(FMHA_DTYPE_F8E5M2);

// Problem features a kernel must declare to be chosen for them.
enum Feature : uint32_t {
  kFeatureCausal = 1u << 0,   // a causal flag (either alignment)
  kFeatureWindow = 1u << 1,   // sliding window bounds
  kFeatureSoftcap = 1u << 2,
  kFeatureLse = 1u << 3,
  kFeatureGqa = 1u << 4,      // heads_q != heads_kv
  kFeatureRagged = 1u << 5,   // cu_seqlens_q or cu_seqlens_k (packed sequences)
  kFeatureSeqUsedK = 1u << 6, // seqused_k (KV-cache fill levels)
  kFeaturePaged = 1u << 7,    // block_table (paged K/V)
  // fmha.h 0.3, inference numerics. An entry's dtypes column must also
  // hold each of q's, k/v's and o's dtypes (FP8 ones included).
  kFeatureMixedDtypes = 1u << 8,  // q, k/v and o not all one dtype
  kFeatureDescale = 1u << 9,      // q_descale, k_descale or v_descale
  kFeatureBias = 1u << 10,        // an additive bias tensor
  kFeatureAlibi = 1u << 11,       // ALiBi slopes
  // V stored transposed: v.strides[2] = 1 with head_dim strided (the FP8
  // MMA's K-major V^T). An entry with an alignment contract that declares
  // it checks V's seq stride where it would check the head_dim stride.
  kFeatureTransposedV = 1u << 12,
  kFeatureDense = 0x1fu,          // every feature of the 0.1 dense layout
  kFeatureServing = 0xffu,        // every feature of 0.2 (dense + serving layouts)
  kFeatureAll = 0x1fffu,
};

// The head dims an entry runs: every multiple of `multiple` up to `max`,
// or, when `only` has non-zero values, exactly those.
struct HeadDims {
  int max = 0;
  int multiple = 1;
  int only[6] = {0, 0, 0, 0, 0, 0};
};

struct KernelEntry {
  const char* name;             // stable: tests and benchmarks force it
  const char* summary;          // one line for explain()
  fmha_device_kind device;
  int sm_min, sm_max;           // CUDA: compute capability * 10, inclusive
  uint32_t dtypes;              // dtype_bit() set
  HeadDims head_dims;
  uint32_t features;            // Feature set
  // > 0: every base pointer and every non-dim stride must be a multiple of
  // this many bytes, and the head_dim stride must be 1.
  int align_bytes;
  int rank;                     // lower runs first when several support
  // Further limits beyond the declared fields; returns null when supported,
  // else a short reason. May be null.
  const char* (*supports)(const Problem&, const DeviceInfo&);
  // Workspace bytes for this problem (null = none).
  size_t (*workspace_bytes)(const Problem&, const DeviceInfo&);
  fmha_status (*run)(const Problem&, const LaunchContext&);
  // Automatic dispatch only: a kernel that can run `p` may still step aside
  // for the next-ranked one where that one is faster; returns the reason
  // (shown by explain) or null. Forcing the kernel by name ignores it. May
  // be null.
  const char* (*declines)(const Problem&, const DeviceInfo&) = nullptr;
  // CUDA: problems with an FP8 K/V cache (k/v F8E4M3 or F8E5M2) need a
  // compute capability * 10 of at least this (0: sm_min, as every other).
  int fp8_kv_sm_min = 0;
  // explain() only: how the chosen entry would run `p` (its tile, grid,
  // splits), written into buf (len bytes, NUL-terminated); returns buf, or
  // null when it has nothing to say. May be null.
  const char* (*describe)(const Problem&, const DeviceInfo&, char* buf, size_t len) = nullptr;
};

int kernel_count();
const KernelEntry& kernel_at(int index);
const KernelEntry* find_kernel(const char* name);

// Null when `entry` can run `p` on `dev`; else a short reason written into
// `reason_buf` (never null) or a static string. With format_reason false
// nothing is formatted (the per-forward dispatch, where no one reads the
// reason): the reason is a static string without the values.
const char* why_not(const KernelEntry& entry, const Problem& p, const DeviceInfo& dev,
                    char* reason_buf, size_t reason_len, bool format_reason = true);

// The entry to run: the forced one if p.forced_kernel is set (INVALID_ARGUMENT
// when no kernel has that name, UNSUPPORTED when it cannot run p), else the
// best-ranked supporting one. When `explain` is non-null it receives the
// decision in prose.
fmha_status select_kernel(const Problem& p, const DeviceInfo& dev, const KernelEntry** out,
                          std::string* explain);

}  // namespace fmha
