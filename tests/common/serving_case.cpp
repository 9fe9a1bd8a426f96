#include "common/serving_case.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>

#include "common/numeric_types.h"

namespace fmha_test {
namespace {

// Poisoned bytes before and after o and lse (as case_runner.cpp).
constexpr size_t kGuardBytes = 256;

const char* kv_label(KvLayout k) {
  return k == KvLayout::kDense ? "dense" : k == KvLayout::kRagged ? "ragged" : "paged";
}

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

int64_t max_of(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

bool all_equal(const std::vector<int64_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

}  // namespace

std::string ServingCase::name() const {
  char buf[96];
  std::string s = dtype_label(dtype);
  if (k_type() != dtype) s += std::string("/kv") + dtype_label(k_type());
  if (o_type() != dtype) s += std::string("/o") + dtype_label(o_type());
  if (q_descale || k_descale || v_descale)
    s += std::string(" descale") + (q_descale ? "q" : "") + (k_descale ? "k" : "") + (v_descale ? "v" : "") +
         (k_descale && negative_k_descale ? " negk" : "");
  if (q_exponent != 0) s += " q*2^" + std::to_string(q_exponent);
  if (q_spread) s += " q-spread";
  if (rising_logits) s += " rising-logits";
  if (bias != BiasPattern::kNone)
    s += std::string(" bias-") +
         (bias == BiasPattern::kFull ? "full" : bias == BiasPattern::kMask ? "mask" : "keypad") + "-" +
         dtype_label(bias_dtype);
  if (alibi) s += alibi == 1 ? " alibi[H]" : " alibi[B,H]";
  if (hidden_nonfinite_v) s += " hidden-nonfinite-v";
  s += " H" + std::to_string(heads_q) + "/" + std::to_string(heads_kv) + " D" + std::to_string(head_dim);
  s += " q" + std::string(q_layout == QLayout::kRagged ? "-ragged" : "-dense") + "[" + list(len_q) + "]";
  if (q_token_major) s += " NHD";
  s += " k-" + std::string(kv_label(kv_layout)) + "[" + list(len_k) + "]";
  if (v_transposed) s += " vT";
  if (seqused_k || kv_layout == KvLayout::kPaged) s += " seqused+" + std::to_string(kv_spare);
  if (kv_layout == KvLayout::kPaged) {
    s += " ps" + std::to_string(page_size) + (storage == PageStorage::kHeadMajor ? " HND" : " NHD");
    s += " spare" + std::to_string(spare_pages) + (shuffle_pages ? " shuffled" : "") + " slack" +
         std::to_string(table_slack);
  }
  if (q_tail) s += " qtail" + std::to_string(q_tail);
  if (k_tail) s += " ktail" + std::to_string(k_tail);
  if (max_seqlen_q >= 0) s += " maxq=" + std::to_string(max_seqlen_q);
  if (max_seqlen_k >= 0) s += " maxk=" + std::to_string(max_seqlen_k);
  if (mask_flags == FMHA_MASK_CAUSAL) s += " causal-br";
  if (mask_flags == FMHA_MASK_CAUSAL_TOP_LEFT) s += " causal-tl";
  if (window_left >= 0) s += " wl=" + std::to_string(window_left);
  if (window_right >= 0) s += " wr=" + std::to_string(window_right);
  if (softcap != 0.f) {
    std::snprintf(buf, sizeof buf, " softcap=%g", static_cast<double>(softcap));
    s += buf;
  }
  if (scale != 0.f) {
    std::snprintf(buf, sizeof buf, " scale=%g", static_cast<double>(scale));
    s += buf;
  }
  if (with_lse) s += " lse";
  return s;
}

const char* ServingCase::invalid_reason() const {
  if (len_q.size() != len_k.size()) return "len_q and len_k need one entry per sequence";
  if (heads_q < 1 || heads_kv < 1 || head_dim < 1 || heads_q % heads_kv != 0)
    return "heads and head_dim must be >= 1, heads_kv dividing heads_q";
  if (dtype_bytes(dtype) == 0 || dtype_bytes(k_type()) == 0 || dtype_bytes(o_type()) == 0)
    return "dtype is not an fmha_dtype";
  for (size_t b = 0; b < len_q.size(); ++b)
    if (len_q[b] < 0 || len_k[b] < 0) return "lengths must be >= 0";
  if (q_layout == QLayout::kDense && !all_equal(len_q)) return "dense queries need equal len_q";
  if (q_layout == QLayout::kDense && q_tail != 0) return "q_tail needs packed queries";
  if (kv_layout == KvLayout::kDense && !seqused_k && !all_equal(len_k))
    return "dense keys of different lengths need seqused_k";
  if (kv_layout != KvLayout::kRagged && k_tail != 0) return "k_tail needs packed keys";
  if (kv_layout == KvLayout::kPaged && page_size < 1) return "page_size must be >= 1";
  if (v_transposed && kv_layout != KvLayout::kDense) return "a transposed V needs dense K/V";
  if (kv_spare < 0 || q_tail < 0 || k_tail < 0 || spare_pages < 0 || table_slack < 0)
    return "spares, tails and slack must be >= 0";
  if (hidden_nonfinite_v && bias == BiasPattern::kNone) return "hidden_nonfinite_v needs a bias to hide its keys";
  if ((q_exponent != 0 || q_spread) && dtype != FMHA_DTYPE_BF16 && dtype != FMHA_DTYPE_F32)
    return "q_exponent and q_spread need a BF16 or F32 q";
  if (rising_logits && (q_exponent != 0 || q_spread || head_dim < 2)) return "rising_logits needs a plain q and head_dim >= 2";
  if (rising_logits && max_of(len_k) > 1024) return "rising_logits: key blocks past 1024 keys leave e4m3's range";
  if (q_exponent < -100 || q_exponent > 100) return "q_exponent must be in [-100, 100]";
  return nullptr;
}

std::vector<ServingCase> serving_case_matrix() {
  std::vector<ServingCase> out;
  constexpr uint32_t kBR = FMHA_MASK_CAUSAL, kTL = FMHA_MASK_CAUSAL_TOP_LEFT;
  auto make = [](fmha_dtype t, int64_t hq, int64_t hk, int64_t d, std::vector<int64_t> lq, std::vector<int64_t> lk,
                 QLayout ql, KvLayout kl) {
    ServingCase c;
    c.dtype = t;
    c.heads_q = hq;
    c.heads_kv = hk;
    c.head_dim = d;
    c.len_q = std::move(lq);
    c.len_k = std::move(lk);
    c.q_layout = ql;
    c.kv_layout = kl;
    return c;
  };
  const fmha_dtype kTypes[] = {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
  // Packed q and packed k (varlen prefill): lengths 0 and 1, Nq > Nk, Nq <
  // Nk, every mask, a tail of rows and keys owned by no sequence.
  int n = 0;
  for (uint32_t mask : {0u, kBR, kTL})
    for (fmha_dtype t : kTypes) {
      ServingCase c = make(t, 4, 2, 64, {5, 0, 1, 70, 33, 9}, {5, 7, 1, 40, 130, 0}, QLayout::kRagged,
                           KvLayout::kRagged);
      c.mask_flags = mask;
      c.q_tail = n % 2 ? 3 : 0;
      c.k_tail = n % 2 ? 0 : 5;
      out.push_back(c);
      ++n;
    }
  // q and o token-major ([total_q, Hq, D], FlashAttention's varlen layout).
  for (fmha_dtype t : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16}) {
    ServingCase c = make(t, 8, 2, 128, {64, 1, 200, 0}, {64, 300, 150, 9}, QLayout::kRagged, KvLayout::kRagged);
    c.q_token_major = true;
    c.mask_flags = kBR;
    out.push_back(c);
  }
  // Windows and softcap per sequence (with and without a causal flag).
  {
    ServingCase c = make(FMHA_DTYPE_F32, 2, 1, 32, {17, 64, 3}, {40, 64, 90}, QLayout::kRagged, KvLayout::kRagged);
    c.window_left = 8;
    c.window_right = 4;
    out.push_back(c);
    c.mask_flags = kBR;
    c.window_right = 0;
    c.window_left = 16;
    c.softcap = 5.f;
    out.push_back(c);
    c.mask_flags = kTL;
    c.window_left = 3;
    c.softcap = 0.f;
    c.dtype = FMHA_DTYPE_F16;
    out.push_back(c);
  }
  // Packed q over dense k of equal lengths; seqused_k caps some.
  {
    ServingCase c = make(FMHA_DTYPE_F16, 4, 4, 80, {3, 12, 0, 7}, {50, 50, 50, 50}, QLayout::kRagged,
                         KvLayout::kDense);
    c.mask_flags = kBR;
    out.push_back(c);
    c.len_k = {50, 20, 0, 1};
    c.seqused_k = true;
    out.push_back(c);
  }
  // Dense q over dense k with seqused_k (a KV cache's fill levels): decode
  // (Nq = 1 and 4, GQA, packed decode blocks) and prefill.
  for (fmha_dtype t : kTypes) {
    ServingCase c = make(t, 8, 2, 128, {1, 1, 1, 1, 1}, {300, 0, 1, 77, 1024}, QLayout::kDense, KvLayout::kDense);
    c.seqused_k = true;
    out.push_back(c);
    c.len_q = {4, 4, 4, 4, 4};
    c.mask_flags = kBR;
    out.push_back(c);
  }
  {
    ServingCase c = make(FMHA_DTYPE_BF16, 2, 2, 64, {140, 140}, {200, 90}, QLayout::kDense, KvLayout::kDense);
    c.seqused_k = true;
    c.mask_flags = kTL;
    out.push_back(c);
  }
  // Paged decode: both storages, page sizes 1, 16, 64, 256, shuffled pages,
  // GQA 8/2 and MQA 4/1, long enough sequences for key splits.
  for (int64_t ps : {1, 16, 64, 256})
    for (PageStorage st : {PageStorage::kHeadMajor, PageStorage::kTokenMajor}) {
      ServingCase c = make(ps == 16 ? FMHA_DTYPE_BF16 : FMHA_DTYPE_F16, 8, 2, 128, {1, 1, 1, 1},
                           {ps == 1 ? 200 : 2100, 0, 1, 333}, QLayout::kDense, KvLayout::kPaged);
      c.page_size = ps;
      c.storage = st;
      c.q_token_major = st == PageStorage::kTokenMajor;
      c.mask_flags = st == PageStorage::kHeadMajor ? 0u : kBR;
      out.push_back(c);
    }
  {
    ServingCase c = make(FMHA_DTYPE_F32, 4, 1, 64, {3, 3, 3}, {64, 17, 129}, QLayout::kDense, KvLayout::kPaged);
    c.page_size = 16;
    c.mask_flags = kBR;
    c.window_left = 20;
    c.softcap = 8.f;
    out.push_back(c);
  }
  // Chunked prefill over a paged cache: packed q, paged k, Nq <= Nk and
  // Nq > Nk, both causal alignments, an explicit max_seqlen_k.
  for (uint32_t mask : {kBR, kTL}) {
    ServingCase c = make(FMHA_DTYPE_BF16, 4, 2, 64, {16, 1, 0, 40, 9}, {80, 1, 12, 20, 0}, QLayout::kRagged,
                         KvLayout::kPaged);
    c.page_size = 16;
    c.storage = PageStorage::kTokenMajor;
    c.q_token_major = mask == kBR;
    c.mask_flags = mask;
    out.push_back(c);
    c.page_size = 64;
    c.max_seqlen_k = 100;
    c.storage = PageStorage::kHeadMajor;
    c.dtype = FMHA_DTYPE_F32;
    out.push_back(c);
  }
  // Empty work: no sequence; sequences that are all empty; rows with no
  // key at all (Nk = 0 everywhere), packed and paged.
  out.push_back(make(FMHA_DTYPE_F32, 2, 1, 32, {}, {}, QLayout::kRagged, KvLayout::kRagged));
  {
    ServingCase c = make(FMHA_DTYPE_F16, 2, 1, 32, {}, {}, QLayout::kRagged, KvLayout::kRagged);
    c.q_tail = 4;  // rows of no sequence: untouched
    out.push_back(c);
  }
  out.push_back(make(FMHA_DTYPE_F32, 2, 1, 32, {0, 0, 0}, {3, 0, 9}, QLayout::kRagged, KvLayout::kRagged));
  out.push_back(make(FMHA_DTYPE_F32, 2, 2, 32, {4, 6}, {0, 0}, QLayout::kRagged, KvLayout::kRagged));
  {
    ServingCase c = make(FMHA_DTYPE_F16, 4, 2, 64, {1, 1, 1}, {0, 0, 0}, QLayout::kDense, KvLayout::kPaged);
    c.kv_spare = 0;
    out.push_back(c);
    c.kv_layout = KvLayout::kDense;
    c.seqused_k = true;
    out.push_back(c);
  }
  return out;
}

std::vector<ServingCase> numerics_case_matrix() {
  std::vector<ServingCase> out;
  constexpr uint32_t kBR = FMHA_MASK_CAUSAL, kTL = FMHA_MASK_CAUSAL_TOP_LEFT;
  constexpr fmha_dtype F16 = FMHA_DTYPE_F16, BF16 = FMHA_DTYPE_BF16, F32 = FMHA_DTYPE_F32;
  constexpr fmha_dtype E4M3 = FMHA_DTYPE_F8E4M3, E5M2 = FMHA_DTYPE_F8E5M2;
  auto make = [](fmha_dtype q, fmha_dtype kv, fmha_dtype o, int64_t hq, int64_t hk, int64_t d,
                 std::vector<int64_t> lq, std::vector<int64_t> lk, QLayout ql, KvLayout kl) {
    ServingCase c;
    c.dtype = q;
    c.kv_dtype = kv;
    c.o_dtype = o;
    c.heads_q = hq;
    c.heads_kv = hk;
    c.head_dim = d;
    c.len_q = std::move(lq);
    c.len_k = std::move(lk);
    c.q_layout = ql;
    c.kv_layout = kl;
    return c;
  };
  // Every dtype combination on a dense causal GQA batch (prefill blocks),
  // descales on every other one.
  const fmha_dtype kCombos[][3] = {{F16, E4M3, F16},   {BF16, E4M3, BF16}, {BF16, E5M2, F32}, {F16, E5M2, BF16},
                                   {E4M3, E4M3, BF16}, {E5M2, E5M2, F16},  {E4M3, E5M2, F32}, {E4M3, E4M3, F32},
                                   {F16, F16, F32},    {F32, F32, BF16},   {BF16, BF16, F16}, {F16, F16, F16}};
  int n = 0;
  for (const auto& t : kCombos) {
    ServingCase c = make(t[0], t[1], t[2], 4, 2, 64, {37, 37}, {53, 53}, QLayout::kDense, KvLayout::kDense);
    c.mask_flags = kBR;
    c.q_descale = c.k_descale = c.v_descale = n % 2 == 0;
    out.push_back(c);
    ++n;
  }
  // FP8 KV-cache decode: packed dot-product blocks and key splits (long
  // sequences, few kv heads) with descales; dense seqused_k and paged.
  for (fmha_dtype kv : {E4M3, E5M2}) {
    ServingCase c = make(BF16, kv, BF16, 8, 2, 128, {1, 1, 1, 1, 1}, {300, 0, 1, 77, 1024}, QLayout::kDense,
                         KvLayout::kDense);
    c.seqused_k = true;
    c.q_descale = c.k_descale = c.v_descale = true;
    out.push_back(c);
    c = make(F16, kv, F32, 8, 2, 128, {1, 1, 1, 1}, {2100, 0, 1, 333}, QLayout::kDense, KvLayout::kPaged);
    c.page_size = 16;
    c.k_descale = c.v_descale = true;
    c.alibi = 2;
    out.push_back(c);
  }
  // Bias patterns x bias dtypes on packed prefill (GQA, causal, a window).
  for (BiasPattern bp : {BiasPattern::kFull, BiasPattern::kMask, BiasPattern::kKeyPadding})
    for (fmha_dtype bt : {F32, F16, BF16}) {
      ServingCase c = make(F16, F16, F16, 4, 2, 64, {5, 0, 70, 33, 9}, {5, 7, 40, 130, 0}, QLayout::kRagged,
                           KvLayout::kRagged);
      c.bias = bp;
      c.bias_dtype = bt;
      c.mask_flags = bt == F16 ? kBR : bt == BF16 ? kTL : 0u;
      if (bt == F32) c.window_left = 20;
      out.push_back(c);
    }
  // Bias on the decode paths: dot-product blocks and split blocks.
  for (BiasPattern bp : {BiasPattern::kFull, BiasPattern::kKeyPadding}) {
    ServingCase c = make(F32, F32, F32, 4, 2, 64, {4, 4, 4}, {50, 70, 9}, QLayout::kDense, KvLayout::kDense);
    c.seqused_k = true;
    c.bias = bp;
    c.mask_flags = kBR;
    out.push_back(c);
    c = make(BF16, E4M3, BF16, 8, 2, 128, {1, 1}, {1500, 700}, QLayout::kDense, KvLayout::kPaged);
    c.page_size = 64;
    c.bias = bp;
    c.bias_dtype = BF16;
    out.push_back(c);
  }
  // ALiBi [Hq] and [B, Hq]: no mask, both causal alignments, windows,
  // softcap, dense and packed, Nq > Nk in a sequence.
  for (int alibi : {1, 2}) {
    ServingCase c = make(F32, F32, F32, 4, 2, 32, {17, 64, 3}, {40, 64, 90}, QLayout::kRagged, KvLayout::kRagged);
    c.alibi = alibi;
    out.push_back(c);
    c.mask_flags = kBR;
    out.push_back(c);
    c.mask_flags = kTL;
    c.window_left = 8;
    c.softcap = 5.f;
    out.push_back(c);
    c = make(F16, F16, F16, 4, 4, 64, {140, 140}, {200, 90}, QLayout::kDense, KvLayout::kDense);
    c.alibi = alibi;
    c.mask_flags = alibi == 1 ? kBR : 0u;
    c.window_left = 30;
    c.window_right = alibi == 1 ? 0 : 10;
    c.seqused_k = true;
    out.push_back(c);
  }
  // Everything at once: chunked prefill over an FP8 paged cache with
  // descales, a bias, ALiBi and o in F32.
  for (uint32_t mask : {kBR, kTL}) {
    ServingCase c = make(BF16, E4M3, F32, 4, 2, 64, {16, 1, 0, 40, 9}, {80, 1, 12, 20, 0}, QLayout::kRagged,
                         KvLayout::kPaged);
    c.page_size = 16;
    c.storage = PageStorage::kTokenMajor;
    c.mask_flags = mask;
    c.q_descale = c.k_descale = c.v_descale = true;
    c.bias = mask == kBR ? BiasPattern::kFull : BiasPattern::kMask;
    c.bias_dtype = F16;
    c.alibi = mask == kBR ? 1 : 2;
    c.softcap = mask == kBR ? 0.f : 10.f;
    out.push_back(c);
  }
  // A running max that jumps by up to 181 nats from one block of 128 keys
  // to the next (rising_logits): an FP8 cache under a BF16 q, all-FP8
  // inputs with V transposed (cuda_sm90_ws's FP8 kernel), and an F16 bias.
  auto rising = [&](fmha_dtype q, fmha_dtype kv, fmha_dtype o) {
    ServingCase c = make(q, kv, o, 2, 1, 128, {64}, {520}, QLayout::kDense, KvLayout::kDense);
    c.rising_logits = true;
    return c;
  };
  out.push_back(rising(BF16, E4M3, BF16));
  {
    ServingCase c = rising(E4M3, E4M3, BF16);
    c.v_transposed = true;
    c.mask_flags = kBR;
    out.push_back(c);
    c = rising(F16, F16, F16);
    c.bias = BiasPattern::kKeyPadding;
    c.bias_dtype = F16;
    out.push_back(c);
  }
  return out;
}

PreparedServingCase::PreparedServingCase(const ServingCase& c, uint64_t base) : case_(c) {
  if (const char* why = c.invalid_reason())
    throw std::invalid_argument("invalid serving case " + c.name() + ": " + why);
  base_seed_ = base;
  seed_ = case_seed(c.name(), base);
  Rng rng(seed_);
  const fmha_dtype dt = c.dtype, kvt = c.k_type();
  const int64_t B = c.num_seqs(), Hq = c.heads_q, Hk = c.heads_kv, D = c.head_dim;
  const bool used = c.seqused_k || c.kv_layout == KvLayout::kPaged;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto normal_as = [&](fmha_dtype t) {
    for (;;) {  // never exactly zero
      const float x = round_to_dtype(static_cast<float>(rng.normal()), t);
      if (x != 0.f) return x;
    }
  };
  auto normal = [&] { return normal_as(dt); };
  auto small_int = [&] {  // +-1 or +-2 (the draws in a fixed order)
    const float m = rng.below(2) ? 1.f : 2.f;
    return rng.below(2) ? -m : m;
  };
  auto alloc_as = [&](std::vector<unsigned char>& buf, int64_t elements, fmha_dtype t) {
    buf.assign(static_cast<size_t>(std::max<int64_t>(elements, 1)) * dtype_bytes(t), 0);
    for (int64_t e = 0; e < std::max<int64_t>(elements, 1); ++e) store_element(buf.data(), t, e, nan);
  };
  auto alloc = [&](std::vector<unsigned char>& buf, int64_t elements) { alloc_as(buf, elements, dt); };

  // q: dense [B, Hq, Nq, D] or packed [1, Hq, total + tail, D]; rows owned
  // by no sequence hold NaN.
  if (c.q_layout == QLayout::kRagged) {
    cu_q_.assign(1, 0);
    for (int64_t n : c.len_q) cu_q_.push_back(cu_q_.back() + static_cast<int32_t>(n));
    const int64_t dims[4] = {1, Hq, cu_q_.back() + c.q_tail, D};
    std::copy(dims, dims + 4, q_dims_);
  } else {
    const int64_t dims[4] = {B, Hq, B > 0 ? c.len_q[0] : 1, D};
    std::copy(dims, dims + 4, q_dims_);
  }
  alloc(q_, q_dims_[0] * Hq * q_dims_[2] * D);
  {
    const int64_t N = q_dims_[2];
    const int64_t bhnd[4] = {Hq * N * D, N * D, D, 1}, bnhd[4] = {N * Hq * D, D, Hq * D, 1};
    std::copy(c.q_token_major ? bnhd : bhnd, (c.q_token_major ? bnhd : bhnd) + 4, q_strides_);
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t qb = c.q_layout == QLayout::kRagged ? 0 : b;
    const int64_t first = c.q_layout == QLayout::kRagged ? cu_q_[static_cast<size_t>(b)] : 0;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < c.len_q[static_cast<size_t>(b)]; ++i) {
        // q_exponent, q_spread: powers of two (exact), then the dtype's rounding
        // (BF16 keeps F32's exponent range).
        int row_exp = c.q_exponent;
        if (c.q_spread) row_exp += static_cast<int>(rng.uniform() * 49.0) - 24;
        for (int64_t d = 0; d < D; ++d) {
          float x = normal();
          if (c.rising_logits) {
            static constexpr float kRisingQ[4] = {4.f, 64.f, 2.f, -4.f};  // by (i / 16) % 4
            x = d == 0 ? kRisingQ[i / 16 % 4] : small_int();
          }
          if (c.q_exponent != 0 || c.q_spread)
            x = round_to_dtype(std::ldexp(x, row_exp - (c.q_spread && d % 4 == 3 ? 40 : 0)), dt);
          store_element(q_.data(), dt, qb * q_strides_[0] + h * q_strides_[1] + (first + i) * q_strides_[2] + d, x);
        }
      }
  }

  // k, v: where key j of sequence b lives, (batch or page, seq or slot).
  std::vector<int64_t> held(static_cast<size_t>(B));  // keys each sequence holds
  for (int64_t b = 0; b < B; ++b) held[static_cast<size_t>(b)] = c.len_k[static_cast<size_t>(b)] + (used ? c.kv_spare : 0);
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(B));
  switch (c.kv_layout) {
    case KvLayout::kDense: {
      const int64_t cap = used ? max_of(held) : (B > 0 ? c.len_k[0] : 1);
      const int64_t dims[4] = {B, Hk, cap, D};
      std::copy(dims, dims + 4, kv_dims_);
      break;
    }
    case KvLayout::kRagged: {
      cu_k_.assign(1, 0);
      for (int64_t n : held) cu_k_.push_back(cu_k_.back() + static_cast<int32_t>(n));
      const int64_t dims[4] = {1, Hk, cu_k_.back() + c.k_tail, D};
      std::copy(dims, dims + 4, kv_dims_);
      break;
    }
    case KvLayout::kPaged: {
      int64_t total = c.spare_pages, most = 0;
      for (int64_t n : held) {
        const int64_t need = (n + c.page_size - 1) / c.page_size;
        total += need;
        most = std::max(most, need);
      }
      std::vector<int32_t> order(static_cast<size_t>(total));
      std::iota(order.begin(), order.end(), 0);
      if (c.shuffle_pages)
        for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
      table_stride_ = std::max<int64_t>(most + c.table_slack, 1);
      // Entries past a sequence's pages: values no kernel may use.
      table_.assign(static_cast<size_t>(B * table_stride_), 0);
      size_t next = 0;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t need = (held[static_cast<size_t>(b)] + c.page_size - 1) / c.page_size;
        for (int64_t e = 0; e < table_stride_; ++e)
          table_[static_cast<size_t>(b * table_stride_ + e)] =
              e < need ? order[next++] : (e % 2 ? std::numeric_limits<int32_t>::max() : -1);
      }
      const int64_t dims[4] = {total, Hk, c.page_size, D};
      std::copy(dims, dims + 4, kv_dims_);
      break;
    }
  }
  const int64_t S = kv_dims_[2];
  if (c.kv_layout == KvLayout::kPaged && c.storage == PageStorage::kTokenMajor) {
    const int64_t st[4] = {S * Hk * D, D, Hk * D, 1};
    std::copy(st, st + 4, kv_strides_);
  } else {
    const int64_t st[4] = {Hk * S * D, S * D, D, 1};
    std::copy(st, st + 4, kv_strides_);
  }
  std::copy(kv_strides_, kv_strides_ + 4, v_strides_);
  int64_t v_elements = kv_dims_[0] * Hk * S * D;
  if (c.v_transposed) {
    const int64_t pitch = (S + 15) / 16 * 16;
    const int64_t st[4] = {Hk * D * pitch, D * pitch, 1, pitch};
    std::copy(st, st + 4, v_strides_);
    v_elements = kv_dims_[0] * Hk * D * pitch;
  }
  alloc_as(k_, kv_dims_[0] * Hk * S * D, kvt);
  alloc_as(v_, v_elements, kvt);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < c.len_k[static_cast<size_t>(b)]; ++j) {
      int64_t kb = b, kj = j;
      if (c.kv_layout == KvLayout::kRagged) {
        kb = 0;
        kj = cu_k_[static_cast<size_t>(b)] + j;
      } else if (c.kv_layout == KvLayout::kPaged) {
        kb = table_[static_cast<size_t>(b * table_stride_ + j / c.page_size)];
        kj = j % c.page_size;
      }
      const bool hidden = c.hidden_nonfinite_v && j % ServingCase::kHiddenKeyPeriod == ServingCase::kHiddenKeyPhase;
      for (int64_t h = 0; h < Hk; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t at = kb * kv_strides_[0] + h * kv_strides_[1] + kj * kv_strides_[2] + d;
          const int64_t v_at = kb * v_strides_[0] + h * v_strides_[1] + kj * v_strides_[2] + d * v_strides_[3];
          float kx = normal_as(kvt);
          if (c.rising_logits)
            kx = d == 0 ? 32.f * static_cast<float>(j / 128) : small_int();
          store_element(k_.data(), kvt, at, kx);
          const float x = normal_as(kvt);  // drawn either way: the case's other values stay the same
          store_element(v_.data(), kvt, v_at, !hidden ? x : d % 2 ? nan : std::numeric_limits<float>::infinity());
        }
    }
  if (used)
    for (int64_t n : c.len_k) seqused_.push_back(static_cast<int32_t>(n));

  max_q_ = c.max_seqlen_q >= 0 ? c.max_seqlen_q
           : c.q_layout == QLayout::kRagged ? static_cast<int32_t>(max_of(c.len_q))
                                             : 0;
  max_k_ = c.max_seqlen_k >= 0 ? c.max_seqlen_k
           : c.kv_layout == KvLayout::kRagged ? static_cast<int32_t>(max_of(held))
                                               : 0;

  fmha_forward_params& p = host_params_;
  fmha_forward_params_init(&p);
  auto view = [&](fmha_tensor* t, void* data, const int64_t* dims, const int64_t* strides, fmha_dtype type) {
    t->data = data;
    t->dtype = type;
    std::copy(dims, dims + 4, t->dims);
    std::copy(strides, strides + 4, t->strides);
  };
  view(&p.q, q_.data(), q_dims_, q_strides_, dt);
  view(&p.k, k_.data(), kv_dims_, kv_strides_, kvt);
  view(&p.v, v_.data(), kv_dims_, v_strides_, kvt);
  p.mask_flags = c.mask_flags;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.scale = c.scale;
  p.softcap = c.softcap;
  const bool ragged = c.q_layout == QLayout::kRagged || c.kv_layout == KvLayout::kRagged;
  p.num_seqs = ragged ? static_cast<int32_t>(B) : 0;
  p.max_seqlen_q = max_q_;
  p.max_seqlen_k = max_k_;
  p.cu_seqlens_q = cu_q_.empty() ? nullptr : cu_q_.data();
  p.cu_seqlens_k = cu_k_.empty() ? nullptr : cu_k_.data();
  // A seqused_k of a batch of 0 still needs a pointer: point at a dummy.
  static const int32_t kNone = 0;
  p.seqused_k = used ? (seqused_.empty() ? &kNone : seqused_.data()) : nullptr;
  p.block_table = c.kv_layout == KvLayout::kPaged ? (table_.empty() ? &kNone : table_.data()) : nullptr;
  p.block_table_stride = c.kv_layout == KvLayout::kPaged ? table_stride_ : 0;

  // fmha.h 0.3: descales, bias, ALiBi. The bias spans the problem's
  // [B, Hq, Nq, Nk] with Nq, Nk the bounds the library derives.
  auto factors = [&](bool on, std::vector<float>& f) {
    if (!on) return;
    f.resize(static_cast<size_t>(std::max<int64_t>(B * Hk, 1)));
    for (float& x : f) x = static_cast<float>(0.5 + 1.5 * rng.uniform());
  };
  factors(c.q_descale, q_descale_);
  for (float& x : q_descale_) x = std::ldexp(x, -c.q_exponent);
  factors(c.k_descale, k_descale_);
  if (c.negative_k_descale)
    for (size_t i = 0; i < k_descale_.size(); i += 2) k_descale_[i] = -k_descale_[i];
  factors(c.v_descale, v_descale_);
  p.q_descale = c.q_descale ? q_descale_.data() : nullptr;
  p.k_descale = c.k_descale ? k_descale_.data() : nullptr;
  p.v_descale = c.v_descale ? v_descale_.data() : nullptr;
  if (c.bias != BiasPattern::kNone) {
    const int64_t nq = c.q_layout == QLayout::kRagged ? max_q_ : q_dims_[2];
    const int64_t nk = c.kv_layout == KvLayout::kRagged ? max_k_
                       : c.kv_layout == KvLayout::kPaged ? (max_k_ != 0 ? max_k_ : table_stride_ * c.page_size)
                                                          : kv_dims_[2];
    const fmha_dtype bt = c.bias_dtype;
    const float ninf = -std::numeric_limits<float>::infinity();
    int64_t elements = 0;
    if (c.bias == BiasPattern::kFull) {
      const int64_t d[4] = {B, Hq, nq, nk}, s[4] = {Hq * nq * nk, nq * nk, nk, 1};
      std::copy(d, d + 4, bias_dims_);
      std::copy(s, s + 4, bias_strides_);
      elements = B * Hq * nq * nk;
    } else if (c.bias == BiasPattern::kMask) {
      const int64_t d[4] = {1, 1, nq, nk}, s[4] = {7, 3, nk, 1};  // strides of dims of 1: ignored
      std::copy(d, d + 4, bias_dims_);
      std::copy(s, s + 4, bias_strides_);
      elements = nq * nk;
    } else {
      const int64_t d[4] = {B, Hq, nq, nk}, s[4] = {nk, 0, 0, 1};
      std::copy(d, d + 4, bias_dims_);
      std::copy(s, s + 4, bias_strides_);
      elements = B * nk;
    }
    alloc_as(bias_, elements, bt);
    for (int64_t e = 0; e < elements; ++e) {
      // Position of element e in its pattern: (row, key) for the masks.
      const int64_t j = nk > 0 ? e % nk : 0, row = nk > 0 ? e / nk : 0;
      float x = static_cast<float>(rng.normal());
      if (c.bias == BiasPattern::kFull) {
        if (rng.below(8) == 0 || row % 5 == 1) x = ninf;  // every fifth row: -inf throughout
      } else if (c.bias == BiasPattern::kMask) {
        if ((row * 3 + j) % 4 == 0 || row == 1) x = ninf;  // row 1: -inf throughout
      } else {
        if ((j + row) % 3 == 2 || row == 1) x = ninf;  // sequence 1: every key padded
      }
      if (c.hidden_nonfinite_v && j % ServingCase::kHiddenKeyPeriod == ServingCase::kHiddenKeyPhase) x = ninf;
      store_element(bias_.data(), bt, e, round_to_dtype(x, bt));
    }
    p.bias.data = bias_.data();
    p.bias.dtype = bt;
    std::copy(bias_dims_, bias_dims_ + 4, p.bias.dims);
    std::copy(bias_strides_, bias_strides_ + 4, p.bias.strides);
  }
  if (c.alibi != 0) {
    const int64_t stride = c.alibi == 1 ? 0 : Hq + 1;
    alibi_.resize(static_cast<size_t>(c.alibi == 1 ? Hq : std::max<int64_t>(B, 1) * stride));
    for (float& x : alibi_) x = static_cast<float>(std::ldexp(1.0, -1 - static_cast<int>(rng.below(8))));
    p.alibi_slopes = alibi_.data();
    p.alibi_slopes_stride = stride;
  }
  ref_ = reference_forward_serving(p);
}

CaseResult PreparedServingCase::run(fmha_handle handle, DeviceMemory& memory, const RunOptions& options,
                                    void (*edit)(fmha_forward_params*)) const {
  const ServingCase& c = case_;
  const fmha_dtype dt = c.o_type();  // o's dtype (the inputs keep their own)
  const size_t esize = dtype_bytes(dt);
  CaseResult r;
  r.case_name = c.name();
  r.base_seed = base_seed_;
  r.seed = seed_;
  r.kernel = options.kernel ? options.kernel : "(automatic)";
  r.tolerance = tolerance_for(c.dtype, c.k_type(), dt);
  r.max_abs_logit = ref_.max_abs_logit;
  r.batch = q_dims_[0];
  r.heads_q = q_dims_[1];
  r.seq_q = q_dims_[2];
  r.head_dim = q_dims_[3];

  // Inputs and metadata on the device (at least 4 bytes each, so an array
  // of a batch of 0 still has a pointer).
  struct Input {
    const void* host;
    size_t bytes;
    std::unique_ptr<DeviceBuffer> dev;
  };
  Input in[12] = {{q_.data(), q_.size(), nullptr},
                  {k_.data(), k_.size(), nullptr},
                  {v_.data(), v_.size(), nullptr},
                  {cu_q_.data(), cu_q_.size() * 4, nullptr},
                  {cu_k_.data(), cu_k_.size() * 4, nullptr},
                  {seqused_.data(), seqused_.size() * 4, nullptr},
                  {table_.data(), table_.size() * 4, nullptr},
                  {q_descale_.data(), q_descale_.size() * 4, nullptr},
                  {k_descale_.data(), k_descale_.size() * 4, nullptr},
                  {v_descale_.data(), v_descale_.size() * 4, nullptr},
                  {bias_.data(), bias_.size(), nullptr},
                  {alibi_.data(), alibi_.size() * 4, nullptr}};
  for (Input& x : in) {
    x.dev = std::make_unique<DeviceBuffer>(memory, std::max<size_t>(x.bytes, 4));
    if (!x.dev->ok() || (x.bytes > 0 && !memory.to_device(x.dev->get(), x.host, x.bytes))) {
      r.harness_error = "could not allocate or fill an input buffer";
      return r;
    }
  }

  const int64_t rows = ref_.rows();
  const int64_t D = c.head_dim;
  const size_t o_bytes = static_cast<size_t>(rows * D) * esize;
  std::vector<unsigned char> o_host(o_bytes + 2 * kGuardBytes);
  fill_poison(o_host.data(), dt, o_host.size() / esize);
  DeviceBuffer o_dev(memory, o_host.size());
  std::vector<unsigned char> lse_host(c.with_lse ? static_cast<size_t>(rows) * 4 + 2 * kGuardBytes : 0);
  fill_poison(lse_host.data(), FMHA_DTYPE_F32, lse_host.size() / 4);
  DeviceBuffer lse_dev(memory, lse_host.size());
  if (!o_dev.ok() || !lse_dev.ok() || !memory.to_device(o_dev.get(), o_host.data(), o_host.size()) ||
      (c.with_lse && !memory.to_device(lse_dev.get(), lse_host.data(), lse_host.size()))) {
    r.harness_error = "could not allocate or poison o/lse";
    return r;
  }

  fmha_forward_params p = host_params_;
  p.q.data = in[0].dev->get();
  p.k.data = in[1].dev->get();
  p.v.data = in[2].dev->get();
  if (p.cu_seqlens_q) p.cu_seqlens_q = static_cast<const int32_t*>(in[3].dev->get());
  if (p.cu_seqlens_k) p.cu_seqlens_k = static_cast<const int32_t*>(in[4].dev->get());
  if (p.seqused_k) p.seqused_k = static_cast<const int32_t*>(in[5].dev->get());
  if (p.block_table) p.block_table = static_cast<const int32_t*>(in[6].dev->get());
  if (p.q_descale) p.q_descale = static_cast<const float*>(in[7].dev->get());
  if (p.k_descale) p.k_descale = static_cast<const float*>(in[8].dev->get());
  if (p.v_descale) p.v_descale = static_cast<const float*>(in[9].dev->get());
  if (p.bias.data) p.bias.data = in[10].dev->get();
  if (p.alibi_slopes) p.alibi_slopes = static_cast<const float*>(in[11].dev->get());
  p.o = p.q;
  p.o.dtype = dt;
  p.o.data = static_cast<unsigned char*>(o_dev.get()) + kGuardBytes;
  std::copy(q_strides_, q_strides_ + 4, p.o.strides);  // o is stored like q
  p.lse = c.with_lse ? reinterpret_cast<float*>(static_cast<unsigned char*>(lse_dev.get()) + kGuardBytes) : nullptr;
  p.kernel = options.kernel;
  p.num_splits = options.num_splits;
  if (edit != nullptr) edit(&p);

  r.status = fmha_forward_workspace_size(handle, &p, &r.workspace_bytes);
  if (r.status != FMHA_SUCCESS) {
    r.message = fmha_last_error_message();
    return r;
  }
  const size_t ws_bytes = r.workspace_bytes + options.extra_workspace_bytes;
  DeviceBuffer ws(memory, ws_bytes);
  if (ws_bytes > 0) {
    std::vector<unsigned char> ws_host(ws_bytes);
    fill_poison(ws_host.data(), FMHA_DTYPE_F32, ws_bytes / 4);
    if (!ws.ok() || !memory.to_device(ws.get(), ws_host.data(), ws_bytes)) {
      r.harness_error = "could not allocate or poison the workspace";
      return r;
    }
  }
  r.status = fmha_forward(handle, &p, ws.get(), ws_bytes);
  r.message = fmha_last_error_message();
  if (!memory.synchronize()) r.harness_error = "synchronize() failed after fmha_forward";
  if (r.status != FMHA_SUCCESS || !r.harness_error.empty()) return r;

  std::vector<unsigned char> o_back(o_host.size()), lse_back(lse_host.size());
  if (!memory.to_host(o_back.data(), o_dev.get(), o_back.size()) ||
      (c.with_lse && !memory.to_host(lse_back.data(), lse_dev.get(), lse_back.size()))) {
    r.harness_error = "could not copy o/lse back";
    return r;
  }
  auto count_changed = [](const std::vector<unsigned char>& before, const std::vector<unsigned char>& after,
                          size_t from, size_t to, size_t elem) {
    int64_t n = 0;
    for (size_t e = from; e < to; e += elem) n += std::memcmp(&before[e], &after[e], elem) != 0;
    return n;
  };
  r.outside_writes += count_changed(o_host, o_back, 0, kGuardBytes, esize);
  r.outside_writes += count_changed(o_host, o_back, kGuardBytes + o_bytes, o_back.size(), esize);
  if (c.with_lse) {
    r.outside_writes += count_changed(lse_host, lse_back, 0, kGuardBytes, 4);
    r.outside_writes += count_changed(lse_host, lse_back, lse_back.size() - kGuardBytes, lse_back.size(), 4);
  }

  // o: owned rows against the reference; rows of no sequence must keep
  // their poison (and then compare as 0 = 0).
  const unsigned char* o_view = o_back.data() + kGuardBytes;
  std::vector<double> actual(static_cast<size_t>(rows * D));
  std::vector<uint8_t> unwritten(actual.size());
  for (int64_t row = 0; row < rows; ++row) {
    const bool owned = ref_.owned[static_cast<size_t>(row)] != 0;
    // Row (b, h, i) of the reference's [B, Hq, N] order, in o's storage.
    const int64_t i = row % q_dims_[2], h = row / q_dims_[2] % q_dims_[1], b = row / q_dims_[2] / q_dims_[1];
    const int64_t at = b * q_strides_[0] + h * q_strides_[1] + i * q_strides_[2];
    for (int64_t d = 0; d < D; ++d) {
      const int64_t e = row * D + d;
      const bool poison = is_poison(o_view, dt, at + d);
      if (!owned) {
        r.outside_writes += !poison;
        continue;  // actual = expected = 0
      }
      unwritten[static_cast<size_t>(e)] = poison;
      actual[static_cast<size_t>(e)] = load_element(o_view, dt, at + d);
    }
  }
  r.o = compare_values(actual.data(), unwritten.data(), ref_.o.data(), rows * D);
  if (r.o.worst >= 0) {
    r.o_worst_actual = actual[static_cast<size_t>(r.o.worst)];
    r.o_worst_expected = ref_.o[static_cast<size_t>(r.o.worst)];
  }
  for (int64_t row = 0; row < rows; ++row) {
    if (!ref_.owned[static_cast<size_t>(row)] || ref_.visible_keys[static_cast<size_t>(row)] != 0) continue;
    ++r.masked_rows;
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = static_cast<size_t>(row * D + d);
      if (unwritten[e] || actual[e] != 0.0) {
        ++r.masked_rows_not_zero;
        break;
      }
    }
  }

  if (c.with_lse) {
    r.lse_checked = true;
    std::vector<float> lse(static_cast<size_t>(rows));
    std::vector<uint8_t> lse_unwritten(lse.size());
    if (!lse.empty()) std::memcpy(lse.data(), lse_back.data() + kGuardBytes, lse.size() * 4);
    for (size_t e = 0; e < lse.size(); ++e) {
      const bool poison = is_poison(lse_back.data() + kGuardBytes, FMHA_DTYPE_F32, static_cast<int64_t>(e));
      if (!ref_.owned[e]) {
        r.outside_writes += !poison;
        lse[e] = -std::numeric_limits<float>::infinity();  // as the reference's
        continue;
      }
      lse_unwritten[e] = poison;
    }
    r.lse = compare_lse(lse.data(), lse_unwritten.data(), ref_.lse.data(), rows);
    if (r.lse.worst >= 0) {
      r.lse_worst_actual = lse[static_cast<size_t>(r.lse.worst)];
      r.lse_worst_expected = ref_.lse[static_cast<size_t>(r.lse.worst)];
    }
    if (options.keep_outputs) r.lse_values = std::move(lse);
  }

  // Inputs and metadata must come back bit for bit.
  for (const Input& x : in) {
    std::vector<unsigned char> back(x.bytes);
    if (x.bytes > 0 && !memory.to_host(back.data(), x.dev->get(), x.bytes)) {
      r.harness_error = "could not copy an input back";
      return r;
    }
    if (x.bytes > 0 && std::memcmp(back.data(), x.host, x.bytes) != 0) r.inputs_unchanged = false;
  }
  if (options.keep_outputs) r.o_bytes.assign(o_view, o_view + o_bytes);
  return r;
}

}  // namespace fmha_test
