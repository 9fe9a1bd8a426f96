// One forward in a serving layout (fmha.h 0.2: packed queries, packed keys,
// seqused_k, paged K/V), built on the host, run on any device through a
// DeviceMemory and checked against reference_forward_serving, the way
// case_runner.h checks a dense case:
//
//   fmha_test::ServingCase c;
//   c.len_q = {3, 0, 17};  c.len_k = {40, 5, 0};
//   c.q_layout = fmha_test::QLayout::kRagged;
//   c.kv_layout = fmha_test::KvLayout::kPaged;  c.page_size = 16;
//   fmha_test::PreparedServingCase pc(c);
//   fmha_test::CaseResult r = pc.run(handle, memory, opt);
//   CHECK_MESSAGE(r.ok(), r.report());
//
// What one run checks, beyond the dense runner's checks (poisoned o, lse
// and workspace; poisoned guards around o and lse; inputs and metadata
// unchanged): every row that belongs to a sequence is written and matches
// the reference, and every row of a packed q outside all sequences keeps its
// poison (counted as writes outside o/lse). Unused page slots, unused pages
// and the keys past each sequence's seqused_k hold NaN: a kernel that lets
// one of them reach a row it does not belong to poisons that row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/case_runner.h"
#include "common/device_memory.h"
#include "common/random.h"
#include "common/reference.h"
#include "fmha/fmha.h"

namespace fmha_test {

enum class QLayout {
  kDense,   // q, o: [B, Hq, Nq, D] (every len_q equal)
  kRagged,  // q, o: [1, Hq, total_q, D] with cu_seqlens_q
};

enum class KvLayout {
  kDense,   // k, v: [B, Hk, capacity, D]; seqused_k when lengths differ
  kRagged,  // k, v: [1, Hk, total_k, D] with cu_seqlens_k
  kPaged,   // k, v: [num_pages, Hk, page_size, D] with block_table + seqused_k
};

// How the pages of a paged k/v are stored (both are [pages, Hk, page_size,
// D] views, only the strides differ).
enum class PageStorage {
  kHeadMajor,   // [pages, Hk, page_size, D] (FlashInfer's HND)
  kTokenMajor,  // [pages, page_size, Hk, D] (vLLM's, FlashAttention's)
};

// An additive bias (fmha.h 0.3) of the problem's [B, Hq, Nq, Nk], each
// with -inf entries and at least one row that is -inf throughout.
enum class BiasPattern {
  kNone,
  kFull,        // [B, Hq, Nq, Nk] contiguous, random values and -inf entries
  kMask,        // [1, 1, Nq, Nk] (dims of 1 broadcast): a shared mask
  kKeyPadding,  // dims [B, Hq, Nq, Nk], strides {Nk, 0, 0, 1}: per-sequence key padding
};

struct ServingCase {
  fmha_dtype dtype = FMHA_DTYPE_F32;  // q's (and, unless set below, k/v's and o's)
  // fmha.h 0.3, inference numerics. kv_dtype / o_dtype 0 = dtype.
  fmha_dtype kv_dtype = static_cast<fmha_dtype>(0);
  fmha_dtype o_dtype = static_cast<fmha_dtype>(0);
  bool q_descale = false, k_descale = false, v_descale = false;  // random factors in [0.5, 2)
  bool negative_k_descale = false;  // with k_descale: every other factor negated (the formula allows it)
  // q's magnitudes (a BF16 or F32 q; an F16 q would overflow): every q
  // element x 2^q_exponent, and q_descale's factors (when given) x
  // 2^-q_exponent, so the logits keep their size. q_spread: each q row
  // (head, query) x 2^e more, e drawn per row in [-24, 24], and every fourth
  // element of a row x 2^-40 more (far below the row's largest values:
  // cuda_sm80_tc's F16 Q K^T over an FP8 cache flushes them).
  int q_exponent = 0;
  bool q_spread = false;
  // Logits that jump between blocks of 128 keys (attention_case.h's
  // kRisingLogits, in values FP8 e4m3 holds exactly): k[.., j, 0] =
  // 32 (j / 128) (j < 1024), q[.., i, 0] = {4, 64, 2, -4} by (i / 16) % 4,
  // the other q and k elements in {+-1, +-2}: at D=128's default scale a
  // block's logits lie 11, 181, 6 or -11 nats above the last block's.
  bool rising_logits = false;
  BiasPattern bias = BiasPattern::kNone;
  fmha_dtype bias_dtype = FMHA_DTYPE_F32;
  int alibi = 0;  // 0 none, 1 [Hq] slopes (stride 0), 2 [B, Hq] slopes (stride Hq + 1)
  // With a bias: every key j with j % kHiddenKeyPeriod == kHiddenKeyPhase
  // is -inf in every row of the bias (hidden from every query) and its V
  // row holds NaN and inf. A kernel whose P V lets a hidden key's zero
  // weight meet V (0 x NaN) poisons the rows.
  bool hidden_nonfinite_v = false;
  static constexpr int64_t kHiddenKeyPeriod = 37, kHiddenKeyPhase = 5;

  fmha_dtype k_type() const { return kv_dtype != 0 ? kv_dtype : dtype; }
  fmha_dtype o_type() const { return o_dtype != 0 ? o_dtype : dtype; }
  int64_t heads_q = 2;
  int64_t heads_kv = 1;
  int64_t head_dim = 64;
  // Per sequence: its query rows Nq(b) and the keys it sees Nk(b).
  std::vector<int64_t> len_q;
  std::vector<int64_t> len_k;
  QLayout q_layout = QLayout::kRagged;
  // q and o stored token-major, [B, N, Hq, D] (packed: [total_q, Hq, D],
  // FlashAttention's varlen layout); else [B, Hq, N, D].
  bool q_token_major = false;
  KvLayout kv_layout = KvLayout::kDense;
  // V stored transposed, [B, Hk, D, capacity] in memory (dense K/V only):
  // dims stay [B, Hk, capacity, D], v.strides[2] = 1, and v.strides[3] is
  // the capacity rounded up to 16 elements (the FP8 MMA's K-major V^T,
  // cuda_sm90_ws; the padding holds NaN).
  bool v_transposed = false;
  // Give seqused_k (always with kPaged; with kDense whenever lengths
  // differ). Each sequence then holds kv_spare keys beyond the ones it sees
  // (NaN-filled: they must not be read into its rows).
  bool seqused_k = false;
  int64_t kv_spare = 3;
  // Packed q: rows after the last sequence (owned by none, must stay
  // untouched). Packed k: keys after the last sequence.
  int64_t q_tail = 0;
  int64_t k_tail = 0;
  // Paged: keys per page, storage, pages nobody uses, a shuffled page
  // order, and block-table entries per sequence beyond the most any needs.
  int64_t page_size = 16;
  PageStorage storage = PageStorage::kHeadMajor;
  int64_t spare_pages = 2;
  bool shuffle_pages = true;
  int64_t table_slack = 1;
  // max_seqlen_q / max_seqlen_k: -1 = the largest length (paged: 0, i.e.
  // block_table_stride * page_size); else this value.
  int32_t max_seqlen_q = -1;
  int32_t max_seqlen_k = -1;
  uint32_t mask_flags = FMHA_MASK_NONE;
  int32_t window_left = -1;
  int32_t window_right = -1;
  float softcap = 0.f;
  float scale = 0.f;
  bool with_lse = true;

  int64_t num_seqs() const { return static_cast<int64_t>(len_q.size()); }
  // A unique, readable description; it seeds the data.
  std::string name() const;
  // Null when the case describes a valid problem, else why not.
  const char* invalid_reason() const;
};

// The serving-layout case matrix every backend runs (CPU in tests/cpu,
// each CUDA kernel forced by name in tests/gpu): packed q with dense,
// packed and paged k; dense k with seqused_k; paged decode with both page
// storages, page sizes 1, 16, 64 and 256 and shuffled pages; sequences of
// length 0 and 1, Nq > Nk inside a sequence; both causal alignments,
// windows and softcap per sequence; GQA and MQA; F32, F16 and BF16; rows
// and keys owned by no sequence; empty batches and Nk = 0. Small enough
// that the float64 reference over all of it takes about a second.
std::vector<ServingCase> serving_case_matrix();

// The inference-numerics matrix (fmha.h 0.3): every dtype combination
// (FP8 K/V under F16/BF16 q, all-FP8, o of another dtype), descales, the
// bias patterns with -inf rows, ALiBi [Hq] and [B, Hq], over dense,
// ragged and paged batches with causal masks, windows and GQA.
std::vector<ServingCase> numerics_case_matrix();

// A case with its host tensors, metadata and reference built once.
class PreparedServingCase {
 public:
  // Throws std::invalid_argument when c.invalid_reason() is set.
  explicit PreparedServingCase(const ServingCase& c, uint64_t base = base_seed());

  const ServingCase& spec() const { return case_; }
  const ServingReference& reference() const { return ref_; }
  // The params over host memory (o and lse null), as the reference saw them.
  const fmha_forward_params& host_params() const { return host_params_; }

  // One run on `handle`, whose device must be where `memory` allocates.
  // `edit`, when given, changes the params after they are filled and before
  // the run (e.g. a V1 struct_size); metadata pointers are device pointers
  // there.
  CaseResult run(fmha_handle handle, DeviceMemory& memory, const RunOptions& options = {},
                 void (*edit)(fmha_forward_params*) = nullptr) const;

 private:
  ServingCase case_;
  uint64_t base_seed_ = 0;
  uint64_t seed_ = 0;
  int64_t q_dims_[4] = {0, 0, 0, 0};
  int64_t q_strides_[4] = {0, 0, 0, 0};  // q's and o's
  int64_t kv_dims_[4] = {0, 0, 0, 0};
  int64_t kv_strides_[4] = {0, 0, 0, 0};
  int64_t v_strides_[4] = {0, 0, 0, 0};  // kv_strides_, or V^T's (v_transposed)
  std::vector<unsigned char> q_, k_, v_;  // host tensors, contiguous (k, v: kv_strides_)
  // 0.3 inputs: descales [B, Hk] (empty = none), the bias, ALiBi slopes.
  std::vector<float> q_descale_, k_descale_, v_descale_, alibi_;
  std::vector<unsigned char> bias_;
  int64_t bias_dims_[4] = {0, 0, 0, 0};
  int64_t bias_strides_[4] = {0, 0, 0, 0};
  std::vector<int32_t> cu_q_, cu_k_, seqused_, table_;
  int64_t table_stride_ = 0;
  int32_t max_q_ = 0, max_k_ = 0;
  fmha_forward_params host_params_{};
  ServingReference ref_;
};

}  // namespace fmha_test
