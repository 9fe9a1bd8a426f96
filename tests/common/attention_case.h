// One attention problem to test, and the matrix of them that every kernel
// (the CPU backend, and each CUDA kernel forced by name) is checked over.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fmha/fmha.h"

namespace fmha_test {

// How q, k, v and o are laid out in memory.
enum class Layout {
  kBHND,            // each tensor contiguous [B, H, N, D]
  kBNHD,            // each tensor contiguous [B, N, H, D]
  kPackedQKV,       // q, k, v: slices of one [B, N, Hq + 2 Hk, D] buffer
                    // (needs Nq == Nk); o contiguous [B, N, Hq, D]
  kStridedHeadDim,  // [B, H, N, D] with head_dim stride 2 and rows padded
                    // to 2D + 3 elements; the gaps of the inputs hold NaN,
                    // the gaps of o must stay poisoned
};

// What the inputs hold.
enum class Data {
  kNormal,  // q, k, v ~ N(0, 1) rounded to the dtype, never exactly 0
  // Logits of magnitude 5e3..1e4 (either sign) that are exact in FP32, with
  // O(5) differences between keys, so the softmax is well conditioned and
  // the tight tolerances still apply: q[..., 0] = +-odd integer in
  // [129, 255], k[..., 0] = 160, the other q and k elements in {+-1, +-2},
  // v ~ N(0, 1). Needs head_dim >= 2 and scale = 1/4 for the stated range.
  kLargeLogits,
  // Logits that jump between blocks of 128 keys (one key tile of most
  // kernels), so a row's running max moves a long way at once, in steps that
  // differ by the row's group of 16 (one warp's rows on the tensor-core
  // kernels): k[..., j, 0] = 128 (j / 128), q[..., i, 0] = {1, 4, 1/2, -1}
  // by (i / 16) % 4, the other q and k elements in {+-1, +-2}, v ~ N(0, 1).
  // At scale = 1/4 a block's logits lie 32 q[i, 0] above the last block's
  // (+32, +128, +16 and -32: moves of 46, 185 and 23 in log2 units, past
  // what a lazily rescaled softmax absorbs, and one whose maximum stays in
  // the first block), with O(5) differences inside a block; every product
  // and sum is exact in FP32 (|logit| < 1100). Needs head_dim >= 2.
  kRisingLogits,
};

const char* layout_label(Layout layout);

struct AttentionCase {
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t seq_q = 1;
  int64_t seq_k = 1;
  int64_t head_dim = 64;
  fmha_dtype dtype = FMHA_DTYPE_F32;
  uint32_t mask_flags = FMHA_MASK_NONE;
  int32_t window_left = -1;   // -1 = unbounded
  int32_t window_right = -1;  // -1 = unbounded
  float softcap = 0.f;        // 0 = off
  float scale = 0.f;          // 0 = 1/sqrt(D)
  Layout layout = Layout::kBHND;
  bool with_lse = true;
  Data data = Data::kNormal;

  // A unique, readable description, e.g.
  // "F16 B2 H8/2 N65x129 D64 causal-br wl=8 BNHD lse". It seeds the data.
  std::string name() const;
  // Null when the case is a valid fmha problem and a layout it supports,
  // else why not.
  const char* invalid_reason() const;
  int64_t rows() const { return batch * heads_q * seq_q; }
  // B * Hq * Nq * Nk * D: the size of the work (reference and kernel).
  double work() const;
};

// The case matrix, in named groups. Each group is small enough that the
// float64 reference over all of them takes well under a second.
struct CaseGroup {
  const char* name;
  std::vector<AttentionCase> cases;
};

// F32, F16, BF16 x head_dim 16, 32, 64, 80, 96, 128, 256, no mask and causal.
std::vector<AttentionCase> cases_dtypes_head_dims();
// N in {1, 7, 63, 65, 129, 257}, Nq == Nk and Nq != Nk both ways, with no
// mask, bottom-right causal and top-left causal.
std::vector<AttentionCase> cases_seq_lengths();
// Sliding windows: left only, right only, both, zero-width; without a causal
// flag and with either causal alignment; Nq == Nk and Nq != Nk.
std::vector<AttentionCase> cases_windows();
// GQA group sizes 1, 4, 8 and MQA (Hk = 1), batch > 1.
std::vector<AttentionCase> cases_gqa();
// BNHD, packed QKV and a head_dim stride of 2, every dtype, with and without
// lse.
std::vector<AttentionCase> cases_layouts();
// Rows that see no key: bottom-right causal with Nq > Nk, windows that miss
// every key of the first or the last rows.
std::vector<AttentionCase> cases_fully_masked_rows();
// Empty work: Nk = 0 (every row sees no key) and no rows at all (B = 0,
// Nq = 0).
std::vector<AttentionCase> cases_empty();
// Data::kLargeLogits, every dtype, with and without causal.
std::vector<AttentionCase> cases_large_logits();
// Data::kRisingLogits, every dtype, without a mask and causal, Nk spanning
// 5 blocks; and BF16 D=256 causal.
std::vector<AttentionCase> cases_rising_logits();
// softcap (mild and saturating) and explicit scales.
std::vector<AttentionCase> cases_softcap_scale();

// All groups above, in that order.
std::vector<CaseGroup> case_matrix();

}  // namespace fmha_test
