// Additive bias and ALiBi (fmha.h 0.3, issue 14) on the tensor-core
// families, each forced by name and on the automatic choice, against the
// float64 reference (common/serving_case.h: outputs and workspace poisoned,
// every written row checked, rows whose logits are all -inf must be O = 0
// and lse = -inf exactly).
//
// The matrix: a [1, 1, Nq, Nk] F16 mask, a [B, Hq, Nq, Nk] key padding in
// F32 and BF16 (strides {Nk, 0, 0, 1}: stride-0 broadcasts over heads and
// queries), a full [B, Hq, Nq, Nk] BF16 bias, each with -inf entries and
// rows that are -inf throughout; ALiBi [Hq] and [B, Hq]; with causal
// masks of both alignments, windows, softcap, GQA, head dims 64, 128 and
// 256, lengths that are no multiple of any tile, decode (Nq = 1, the GQA
// group packed into one sm80 unit), key splits forced, and ragged and
// paged batches, whose bias is indexed by each sequence's local positions. q/k/v descales run on cuda_sm90_ws only: cuda_sm80_tc must
// decline them with UNSUPPORTED and name them.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include "common/serving_case.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;
using fmha_test::BiasPattern;
using fmha_test::KvLayout;
using fmha_test::QLayout;
using fmha_test::ServingCase;

constexpr const char* kSm80 = "cuda_sm80_tc";
constexpr const char* kSm90 = "cuda_sm90_ws";
constexpr fmha_dtype F16 = FMHA_DTYPE_F16, BF16 = FMHA_DTYPE_BF16, F32 = FMHA_DTYPE_F32;
constexpr uint32_t kBR = FMHA_MASK_CAUSAL, kTL = FMHA_MASK_CAUSAL_TOP_LEFT;

bool has_descale(const ServingCase& c) { return c.q_descale || c.k_descale || c.v_descale; }

struct Tally {
  int ran = 0, declined = 0, failed = 0;
};

// Whether a forced kernel may decline `c`, and the words its message must
// hold: off its architecture, a (dtype, head_dim) this build leaves out,
// a page size its copy engine cannot tile (sm90), descales (sm80).
bool may_decline(const std::string& kernel, const ServingCase& c, const std::string& message) {
  if (message.find("needs sm_") != std::string::npos || message.find("not instantiated") != std::string::npos ||
      message.find("does not run head_dim") != std::string::npos)
    return true;
  if (kernel == kSm90 && c.kv_layout == KvLayout::kPaged) return message.find("page_size") != std::string::npos;
  if (kernel == kSm80 && has_descale(c)) return message.find("descales") != std::string::npos;
  return false;
}

// `c` on both families forced and on the automatic choice, for each split count.
void run_case(fmha_handle h, CudaMemory& mem, const ServingCase& c, const std::vector<int32_t>& splits,
              std::map<std::string, Tally>* tally) {
  const fmha_test::PreparedServingCase pc(c);
  for (const char* kernel : {kSm80, kSm90, static_cast<const char*>(nullptr)}) {
    const std::string name = kernel ? kernel : "(automatic)";
    for (int32_t s : splits) {
      fmha_test::RunOptions opt;
      opt.kernel = kernel;
      opt.num_splits = s;
      const fmha_test::CaseResult r = pc.run(h, mem, opt);
      Tally& t = (*tally)[name];
      if (r.unsupported() && kernel != nullptr) {
        CHECK_MESSAGE(may_decline(name, c, r.message), r.report());
        ++t.declined;
        continue;
      }
      if (r.unsupported() && kernel == nullptr && has_descale(c)) {
        ++t.declined;  // descales on a device without cuda_sm90_ws (and a cuda_generic without them)
        continue;
      }
      const bool ok = r.ok();
      CHECK_MESSAGE(ok, "num_splits=" << s << "\n" << r.report());
      ++(ok ? t.ran : t.failed);
    }
  }
}

// must_run: a family that must have run some case (null: none; a device
// below sm_90 declines every forced sm90 run).
void run_group(const char* group, const std::vector<ServingCase>& cases, const std::vector<int32_t>& splits,
               const char* must_run = kSm80) {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  const size_t stride = static_cast<size_t>(fmha_gpu_test::quick_stride());
  std::map<std::string, Tally> tally;
  int n = 0;
  for (size_t i = 0; i < cases.size(); i += stride) {
    INFO("case " << cases[i].name());
    run_case(h.get(), mem, cases[i], splits, &tally);
    ++n;
  }
  std::string line = std::string(group) + ": " + std::to_string(n) + " cases;";
  for (const auto& [name, t] : tally)
    line += " " + name + " ran " + std::to_string(t.ran) + ", declined " + std::to_string(t.declined) +
            ", failed " + std::to_string(t.failed) + ";";
  MESSAGE(line);
  if (must_run != nullptr) CHECK(tally[must_run].ran > 0);
}

ServingCase make(fmha_dtype dt, int64_t hq, int64_t hk, int64_t d, std::vector<int64_t> len_q,
                 std::vector<int64_t> len_k, QLayout ql = QLayout::kDense, KvLayout kl = KvLayout::kDense) {
  ServingCase c;
  c.dtype = dt;
  c.heads_q = hq;
  c.heads_kv = hk;
  c.head_dim = d;
  c.len_q = std::move(len_q);
  c.len_k = std::move(len_k);
  c.q_layout = ql;
  c.kv_layout = kl;
  return c;
}

struct BiasSpec {
  BiasPattern pattern;
  fmha_dtype dtype;
};
constexpr BiasSpec kBiases[] = {
    {BiasPattern::kMask, F16},         // [1, 1, Nq, Nk]
    {BiasPattern::kKeyPadding, F32},   // [B, Hq, Nq, Nk], strides {Nk, 0, 0, 1}
    {BiasPattern::kFull, BF16},        // [B, Hq, Nq, Nk] contiguous
    {BiasPattern::kKeyPadding, BF16},
};

struct MaskSpec {
  uint32_t flags;
  int32_t wl, wr;
  float softcap;
};
constexpr MaskSpec kMasks[] = {
    {FMHA_MASK_NONE, -1, -1, 0.f}, {kBR, -1, -1, 0.f}, {kTL, 40, -1, 0.f}, {FMHA_MASK_NONE, 70, 20, 0.f},
    {kBR, -1, -1, 20.f},
};

void set_mask(ServingCase* c, const MaskSpec& m) {
  c->mask_flags = m.flags;
  c->window_left = m.wl;
  c->window_right = m.wr;
  c->softcap = m.softcap;
}

}  // namespace

TEST_CASE("bias and ALiBi, dense prefill: every bias pattern, mask, head dim; GQA") {
  std::vector<ServingCase> cases;
  int n = 0;
  for (int64_t d : {64, 128, 256})
    for (const BiasSpec& b : kBiases)
      for (const MaskSpec& m : kMasks) {
        // Lengths off every tile size (64, 128, 176 keys; 64, 128 rows), Nq
        // below and above Nk, GQA 4/2 and MHA, both dtypes.
        const bool wide = n % 2 == 0;
        ServingCase c = make(n % 3 == 0 ? BF16 : F16, 4, wide ? 2 : 4, d, {wide ? 200 : 77, wide ? 200 : 77},
                             {wide ? 200 : 261, wide ? 200 : 261});
        set_mask(&c, m);
        c.bias = b.pattern;
        c.bias_dtype = b.dtype;
        c.alibi = n % 5 == 0 ? 1 + (n / 5) % 2 : 0;  // some with ALiBi on top
        ++n;
        cases.push_back(c);
      }
  run_group("dense prefill, bias", cases, {1});
}

TEST_CASE("ALiBi [Hq] and [B, Hq], dense prefill, with and without a mask") {
  std::vector<ServingCase> cases;
  for (int alibi : {1, 2})
    for (int64_t d : {64, 128, 256})
      for (const MaskSpec& m : kMasks) {
        ServingCase c = make(d == 128 ? BF16 : F16, 8, 2, d, {150, 150}, {333, 333});
        set_mask(&c, m);
        c.alibi = alibi;
        cases.push_back(c);
      }
  run_group("dense prefill, ALiBi", cases, {1});
}

TEST_CASE("bias and ALiBi with key splits forced (the split partials and the combine)") {
  std::vector<ServingCase> cases;
  for (const BiasSpec& b : kBiases) {
    ServingCase c = make(F16, 4, 2, 128, {130, 130}, {1000, 1000});
    c.bias = b.pattern;
    c.bias_dtype = b.dtype;
    c.mask_flags = b.dtype == F32 ? kBR : FMHA_MASK_NONE;
    c.alibi = b.pattern == BiasPattern::kFull ? 2 : 0;
    cases.push_back(c);
  }
  ServingCase c = make(BF16, 4, 4, 64, {64, 64}, {700, 700});
  c.alibi = 1;
  c.mask_flags = kBR;
  c.window_left = 300;
  cases.push_back(c);
  run_group("key splits", cases, {0, 3, 7});
}

TEST_CASE("bias and ALiBi on decode (Nq = 1..4, the GQA group packed), splits automatic and forced") {
  std::vector<ServingCase> cases;
  int n = 0;
  for (int64_t nq : {1, 4})
    for (const BiasSpec& b : kBiases) {
      ServingCase c = make(n % 2 ? BF16 : F16, 8, 2, n % 3 == 0 ? 64 : 128, {nq, nq}, {1500, 1500});
      c.mask_flags = kBR;
      c.bias = b.pattern;
      c.bias_dtype = b.dtype;
      c.alibi = n % 3;
      ++n;
      cases.push_back(c);
    }
  run_group("decode", cases, {0, 1, 5});
}

TEST_CASE("bias and ALiBi on ragged and paged batches: local positions per sequence (cuda_sm80_tc)") {
  std::vector<ServingCase> cases;
  for (const BiasSpec& b : kBiases) {
    ServingCase c = make(F16, 4, 2, 128, {5, 0, 70, 133, 9}, {5, 7, 40, 200, 0}, QLayout::kRagged, KvLayout::kRagged);
    c.bias = b.pattern;
    c.bias_dtype = b.dtype;
    c.mask_flags = b.dtype == F16 ? kBR : b.dtype == BF16 ? kTL : 0u;
    if (b.dtype == F32) c.window_left = 20;
    c.alibi = b.pattern == BiasPattern::kFull ? 1 : 0;
    cases.push_back(c);
    // A paged KV cache under a chunked prefill and a decode step.
    c = make(BF16, 8, 2, 64, {16, 1, 40}, {80, 300, 41}, QLayout::kRagged, KvLayout::kPaged);
    c.page_size = 16;
    c.bias = b.pattern;
    c.bias_dtype = b.dtype;
    c.mask_flags = kBR;
    c.alibi = b.pattern == BiasPattern::kFull ? 0 : 2;
    cases.push_back(c);
  }
  ServingCase c = make(BF16, 4, 4, 64, {17, 64, 3}, {40, 64, 90}, QLayout::kRagged, KvLayout::kRagged);
  c.alibi = 2;
  c.mask_flags = kTL;
  c.softcap = 5.f;
  cases.push_back(c);
  run_group("ragged and paged", cases, {0, 1});
}

TEST_CASE("descales on cuda_sm90_ws (folded into the score factor, v_descale on O), with and without a bias") {
  std::vector<ServingCase> cases;
  for (int64_t d : {64, 128, 256})
    for (int variant = 0; variant < 6; ++variant) {
      // 4 and 5: 0 and 2 with every other k descale negative (the scores'
      // sign flips, the running max must stay a max), 5 with ALiBi too.
      const int base = variant == 4 ? 0 : variant == 5 ? 2 : variant;
      ServingCase c = make(variant % 2 ? BF16 : F16, 4, 2, d, {200, 200}, {261, 261});
      c.q_descale = base != 1;
      c.k_descale = true;
      c.negative_k_descale = variant >= 4;
      c.v_descale = base != 2;
      c.mask_flags = base == 0 ? kBR : FMHA_MASK_NONE;
      c.softcap = base == 3 ? 15.f : 0.f;
      if (base >= 2) {
        c.bias = BiasPattern::kMask;
        c.bias_dtype = F16;
        c.alibi = base == 3 || variant == 5 ? 2 : 0;
      }
      cases.push_back(c);
    }
  // Decode-like (the automatic choice keeps it on sm90: sm80 has no descales).
  ServingCase c = make(F16, 8, 2, 128, {1, 1}, {900, 900});
  c.k_descale = c.v_descale = true;
  c.mask_flags = kBR;
  cases.push_back(c);
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  run_group("descales", cases, {0, 1, 3}, major == 9 ? kSm90 : nullptr);
}

// cuda_sm90_ws's D=128 score-ops kernel multiplies Q by the score factor
// (scale x q_descale x k_descale, sign included) in registers where the
// factor lies in [2^-8, 1], and the bias and ALiBi terms then start Q K^T's
// accumulator as they are; outside that range (an explicit scale of 3, a
// scale of 1e-3) it adds the terms after Q K^T as s x factor + terms. Both
// sides, with a staged F16 / BF16 bias, a loaded F32 bias, ALiBi alone,
// positive and negative descales, masks, and softcap (never pre-scaled).
TEST_CASE("cuda_sm90_ws score factor in and out of Q's range: bias and ALiBi before or after Q K^T") {
  constexpr BiasSpec kSpecs[] = {
      {BiasPattern::kMask, F16}, {BiasPattern::kKeyPadding, F32}, {BiasPattern::kFull, BF16},
      {BiasPattern::kNone, F16},  // ALiBi alone
  };
  std::vector<ServingCase> cases;
  int n = 0;
  for (float scale : {0.f, 3.f, 1e-3f})
    for (const BiasSpec& b : kSpecs) {
      ServingCase c = make(n % 2 ? BF16 : F16, 4, 2, 128, {200, 200}, {264, 264});
      c.scale = scale;
      set_mask(&c, kMasks[n % 5]);
      c.bias = b.pattern;
      c.bias_dtype = b.dtype;
      c.alibi = b.pattern == BiasPattern::kNone || n % 2 ? 1 + n % 2 : 0;
      c.q_descale = n % 3 == 1;
      c.k_descale = n % 3 != 2;
      c.negative_k_descale = n % 2 == 0;
      ++n;
      cases.push_back(c);
    }
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  run_group("score factor", cases, {0, 1}, major == 9 ? kSm90 : nullptr);
}

// cuda_sm90_ws stages a 16-bit bias through the copy engine when it can
// address it (keys contiguous, base and strides 16-byte aligned; a bias
// broadcast over queries as one shared row), cuda_sm80_tc per warp with
// cp.async (the same alignment, without softcap), and both load the
// elements from global memory otherwise (an F32 bias, strides that are no
// multiple of 8 elements). Both paths, each bias pattern (broadcast heads and batches on
// the map's extent-1 coordinates), every mask and softcap (the bias added
// after the tanh), ALiBi on both sides of the diagonal and across it,
// lengths off every tile, key splits, ragged and paged batches, and keys
// that the bias hides from every row while their V holds NaN and inf (the
// staged path scans V only where a bias tile hides a key).
TEST_CASE("bias staged by the copy engine and by global loads: strides, broadcasts, masks, hidden keys, ALiBi") {
  constexpr BiasSpec kSpecs[] = {
      {BiasPattern::kFull, F16}, {BiasPattern::kMask, BF16}, {BiasPattern::kKeyPadding, F16},
      {BiasPattern::kFull, BF16}, {BiasPattern::kMask, F16}, {BiasPattern::kKeyPadding, BF16},
      {BiasPattern::kFull, F32},
  };
  std::vector<ServingCase> cases;
  int n = 0;
  // Nk = 264 and 1000: rows of 16-byte multiples (staged); 261: not (loaded).
  for (int64_t nk : {264, 261, 1000})
    for (const BiasSpec& b : kSpecs) {
      const int64_t d = n % 4 == 3 ? (n % 8 == 3 ? 64 : 256) : 128;
      ServingCase c = make(n % 2 ? BF16 : F16, 4, 2, d, {nk == 1000 ? 300 : 200, nk == 1000 ? 300 : 200}, {nk, nk});
      set_mask(&c, kMasks[n % 5]);
      c.bias = b.pattern;
      c.bias_dtype = b.dtype;
      c.alibi = n % 3 == 0 ? 1 + (n / 3) % 2 : 0;
      c.hidden_nonfinite_v = n % 2 == 0;
      ++n;
      cases.push_back(c);
    }
  // Ragged (max Nk 200) and paged (16-key pages) with a staged bias and hidden keys.
  for (const BiasSpec& b : {BiasSpec{BiasPattern::kFull, F16}, BiasSpec{BiasPattern::kKeyPadding, BF16}}) {
    ServingCase c = make(F16, 4, 2, 128, {5, 0, 70, 133, 9}, {5, 7, 40, 200, 0}, QLayout::kRagged, KvLayout::kRagged);
    c.bias = b.pattern;
    c.bias_dtype = b.dtype;
    c.mask_flags = b.dtype == F16 ? kBR : 0u;
    c.alibi = 2;
    c.hidden_nonfinite_v = true;
    cases.push_back(c);
    c = make(BF16, 8, 2, 128, {16, 1, 140}, {80, 300, 141}, QLayout::kRagged, KvLayout::kPaged);
    c.page_size = 16;
    c.bias = b.pattern;
    c.bias_dtype = b.dtype;
    c.mask_flags = kBR;
    c.softcap = b.dtype == F16 ? 0.f : 10.f;
    c.hidden_nonfinite_v = true;
    cases.push_back(c);
  }
  // The loop above ties "hidden" to an F16 q (both follow n % 2), so a
  // failure there cannot say which of the two it is: BF16 q with hidden
  // keys and F16 q without, on the staged (Nk 264, 1000) and the loaded
  // (Nk 261; F32) bias. And many key tiles (Nk 2048: 16 tiles of 128 keys,
  // a hidden key in each) so one split runs the key loop's steady state
  // with the guarded P V on every tile, where cuda_sm90_ws once released
  // the V stage before the other warps had read it (the guard's shared
  // reads end on a warpgroup barrier now). A key hidden on the plain path
  // (no bias, no score ops) has no case by design: only a bias can hide a
  // key from every row; without one a key is hidden by the mask or the
  // sequence length alone, which test_gpu_large.cpp's NaN test covers.
  struct Extra {
    fmha_dtype q;
    int64_t nk;
    BiasSpec bias;
    int mask;
    bool hidden;
  };
  constexpr Extra kExtras[] = {
      {BF16, 264, {BiasPattern::kFull, F16}, 0, true},  // staged
      {BF16, 261, {BiasPattern::kFull, BF16}, 0, true},  // loaded
      {BF16, 1000, {BiasPattern::kKeyPadding, F16}, 1, true},
      {BF16, 1000, {BiasPattern::kFull, F32}, 0, true},
      {F16, 264, {BiasPattern::kFull, F16}, 0, false},
      {F16, 261, {BiasPattern::kFull, BF16}, 0, false},
      {F16, 1000, {BiasPattern::kKeyPadding, F16}, 1, false},
      {F16, 2048, {BiasPattern::kFull, F16}, 0, true},
      {BF16, 2048, {BiasPattern::kMask, BF16}, 1, true},
      {F16, 2048, {BiasPattern::kFull, F32}, 0, true},
  };
  for (const Extra& e : kExtras) {
    const int64_t nq = e.nk < 1000 ? 200 : 300;
    ServingCase c = make(e.q, 4, 2, 128, {nq, nq}, {e.nk, e.nk});
    set_mask(&c, kMasks[e.mask]);
    c.bias = e.bias.pattern;
    c.bias_dtype = e.bias.dtype;
    c.alibi = e.nk == 2048 ? 1 : 0;
    c.hidden_nonfinite_v = e.hidden;
    cases.push_back(c);
  }
  // Decode (the GQA group packed into one sm80 unit: each staged row its own head).
  for (int64_t nq : {1, 3}) {
    ServingCase c = make(nq == 1 ? F16 : BF16, 8, 2, 128, {nq, nq}, {1024, 1024});
    c.mask_flags = kBR;
    c.bias = nq == 1 ? BiasPattern::kFull : BiasPattern::kMask;
    c.bias_dtype = nq == 1 ? F16 : BF16;
    c.alibi = nq == 1 ? 0 : 2;
    c.hidden_nonfinite_v = true;
    cases.push_back(c);
  }
  run_group("staged and loaded bias", cases, {1, 3});
}
