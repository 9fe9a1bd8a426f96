#include "common/attention_case.h"

#include <cstdio>

#include "common/numeric_types.h"

namespace fmha_test {
namespace {

constexpr fmha_dtype kAllDtypes[] = {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
constexpr uint32_t kCausalBR = FMHA_MASK_CAUSAL;
constexpr uint32_t kCausalTL = FMHA_MASK_CAUSAL_TOP_LEFT;

// Shorthand for the cases below; everything else keeps its default.
AttentionCase make(fmha_dtype dtype, int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seq_q,
                   int64_t seq_k, int64_t head_dim, uint32_t mask = FMHA_MASK_NONE) {
  AttentionCase c;
  c.dtype = dtype;
  c.batch = batch;
  c.heads_q = heads_q;
  c.heads_kv = heads_kv;
  c.seq_q = seq_q;
  c.seq_k = seq_k;
  c.head_dim = head_dim;
  c.mask_flags = mask;
  return c;
}

AttentionCase windowed(AttentionCase c, int32_t left, int32_t right) {
  c.window_left = left;
  c.window_right = right;
  return c;
}

const char* mask_label(uint32_t flags) {
  return flags == kCausalBR ? "causal-br" : flags == kCausalTL ? "causal-tl" : flags == 0 ? "" : "mask?";
}

}  // namespace

const char* layout_label(Layout layout) {
  switch (layout) {
    case Layout::kBHND:
      return "BHND";
    case Layout::kBNHD:
      return "BNHD";
    case Layout::kPackedQKV:
      return "packed-QKV";
    case Layout::kStridedHeadDim:
      return "D-stride-2";
  }
  return "?";
}

std::string AttentionCase::name() const {
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  std::string s = dtype_label(dtype);
  s += " B" + std::to_string(batch) + " H" + std::to_string(heads_q) + "/" + std::to_string(heads_kv) + " N" +
       std::to_string(seq_q) + "x" + std::to_string(seq_k) + " D" + std::to_string(head_dim);
  if (mask_flags != 0) s += std::string(" ") + mask_label(mask_flags);
  if (window_left >= 0) s += " wl=" + std::to_string(window_left);
  if (window_right >= 0) s += " wr=" + std::to_string(window_right);
  if (softcap != 0.f) s += " softcap=" + num(softcap);
  if (scale != 0.f) s += " scale=" + num(scale);
  s += std::string(" ") + layout_label(layout);
  if (with_lse) s += " lse";
  if (data == Data::kLargeLogits) s += " large-logits";
  if (data == Data::kRisingLogits) s += " rising-logits";
  return s;
}

const char* AttentionCase::invalid_reason() const {
  if (batch < 0 || heads_q < 1 || heads_kv < 1 || seq_q < 0 || seq_k < 0 || head_dim < 1)
    return "heads and head_dim must be >= 1, batch and seq >= 0";
  if (heads_q % heads_kv != 0) return "heads_kv must divide heads_q";
  if (dtype_bytes(dtype) == 0) return "dtype is not an fmha_dtype";
  if ((mask_flags & ~(kCausalBR | kCausalTL)) != 0 || mask_flags == (kCausalBR | kCausalTL))
    return "mask_flags must be NONE, CAUSAL or CAUSAL_TOP_LEFT";
  if (window_left < -1 || window_right < -1) return "windows must be >= -1";
  if (mask_flags != 0 && window_right > 0) return "a causal mask allows window_right -1 or 0 only";
  if (!(scale >= 0.f) || !(softcap >= 0.f)) return "scale and softcap must be >= 0";
  if (layout == Layout::kPackedQKV && seq_q != seq_k) return "packed QKV needs seq_q == seq_k";
  if (data == Data::kLargeLogits && head_dim < 2) return "large logits need head_dim >= 2";
  if (data == Data::kRisingLogits && head_dim < 2) return "rising logits need head_dim >= 2";
  return nullptr;
}

double AttentionCase::work() const {
  return static_cast<double>(batch) * static_cast<double>(heads_q) * static_cast<double>(seq_q) *
         static_cast<double>(seq_k) * static_cast<double>(head_dim);
}

std::vector<AttentionCase> cases_dtypes_head_dims() {
  std::vector<AttentionCase> out;
  for (fmha_dtype t : kAllDtypes)
    for (int64_t d : {16, 32, 64, 80, 96, 128, 256}) {
      out.push_back(make(t, 1, 2, 2, 47, 65, d));
      out.push_back(make(t, 1, 2, 1, 65, 65, d, kCausalBR));
    }
  return out;
}

std::vector<AttentionCase> cases_seq_lengths() {
  const int64_t pairs[][2] = {{1, 1},   {7, 7},  {63, 63}, {65, 65},  {129, 129}, {257, 257}, {1, 257},
                              {257, 1}, {7, 129}, {129, 7}, {63, 65}, {65, 63},   {1, 64},    {64, 1}};
  std::vector<AttentionCase> out;
  int n = 0;
  for (const auto& p : pairs)
    for (uint32_t mask : {FMHA_MASK_NONE, kCausalBR, kCausalTL}) {
      // Alternate the dtype so both precisions see every shape class.
      const fmha_dtype t = (n++ % 2) ? FMHA_DTYPE_F16 : FMHA_DTYPE_F32;
      out.push_back(make(t, 1, 2, 2, p[0], p[1], p[0] == 257 && p[1] == 257 ? 32 : 64, mask));
    }
  // A long key sequence with a large head dim (decode-like).
  out.push_back(make(FMHA_DTYPE_BF16, 1, 2, 1, 1, 257, 256, kCausalBR));
  out.push_back(make(FMHA_DTYPE_F32, 1, 1, 1, 129, 257, 128, kCausalTL));
  return out;
}

std::vector<AttentionCase> cases_windows() {
  const int64_t pairs[][2] = {{65, 65}, {40, 100}, {100, 40}};
  // (left, right) without a causal flag: left only, right only, both,
  // zero-width (the diagonal alone), and a wide one.
  const int32_t free_windows[][2] = {{8, -1}, {-1, 8}, {5, 3}, {0, 0}, {70, 2}};
  // With a causal flag right must be -1 or 0.
  const int32_t causal_windows[][2] = {{8, -1}, {8, 0}, {0, -1}, {33, 0}};
  std::vector<AttentionCase> out;
  int n = 0;
  for (const auto& p : pairs) {
    for (const auto& w : free_windows) {
      const fmha_dtype t = (n++ % 2) ? FMHA_DTYPE_BF16 : FMHA_DTYPE_F32;
      out.push_back(windowed(make(t, 1, 2, 1, p[0], p[1], 32), w[0], w[1]));
    }
    for (uint32_t mask : {kCausalBR, kCausalTL})
      for (const auto& w : causal_windows) {
        const fmha_dtype t = (n++ % 2) ? FMHA_DTYPE_F16 : FMHA_DTYPE_F32;
        out.push_back(windowed(make(t, 1, 2, 1, p[0], p[1], 32, mask), w[0], w[1]));
      }
  }
  // Several query blocks per head (the CPU backend takes 128 rows at a
  // time), so the key range of a block differs from the next one's.
  out.push_back(windowed(make(FMHA_DTYPE_F32, 1, 1, 1, 260, 300, 16), 40, 10));
  out.push_back(windowed(make(FMHA_DTYPE_F16, 1, 1, 1, 300, 260, 16, kCausalTL), 70, 0));
  // The tensor-core head dims, with bands that cross several key tiles of
  // 64 and 128 and query blocks of 128 rows (a window on every kernel).
  out.push_back(windowed(make(FMHA_DTYPE_F16, 1, 1, 1, 200, 260, 128, kCausalBR), 100, 0));
  out.push_back(windowed(make(FMHA_DTYPE_BF16, 1, 2, 2, 257, 200, 64), 50, 30));
  out.push_back(windowed(make(FMHA_DTYPE_F16, 1, 1, 1, 136, 300, 256), -1, 140));
  return out;
}

std::vector<AttentionCase> cases_gqa() {
  // (Hq, Hk): group 1, 4, 8, MQA with a power-of-two and an odd head count.
  const int64_t heads[][2] = {{4, 4}, {8, 2}, {16, 2}, {8, 1}, {5, 1}};
  std::vector<AttentionCase> out;
  int n = 0;
  for (const auto& h : heads)
    for (fmha_dtype t : kAllDtypes) {
      const uint32_t mask = (n % 3 == 0) ? FMHA_MASK_NONE : (n % 3 == 1) ? kCausalBR : kCausalTL;
      // Batch 2 for one dtype per head shape: kv heads must be found per batch too.
      const int64_t batch = t == FMHA_DTYPE_F16 ? 2 : 1;
      ++n;
      out.push_back(make(t, batch, h[0], h[1], 23, 70, 64, mask));
    }
  // GQA with a window.
  out.push_back(windowed(make(FMHA_DTYPE_F16, 2, 8, 2, 70, 70, 32, kCausalBR), 16, 0));
  return out;
}

std::vector<AttentionCase> cases_layouts() {
  std::vector<AttentionCase> out;
  int n = 0;
  for (Layout layout : {Layout::kBNHD, Layout::kPackedQKV, Layout::kStridedHeadDim})
    for (fmha_dtype t : kAllDtypes)
      for (int gqa = 0; gqa < 2; ++gqa) {
        const int64_t hq = gqa ? 4 : 3, hk = gqa ? 1 : 3;
        const int64_t d = layout == Layout::kBNHD ? 96 : layout == Layout::kPackedQKV ? 64 : 80;
        AttentionCase c = make(t, 2, hq, hk, 49, 49, d, gqa ? kCausalBR : FMHA_MASK_NONE);
        c.layout = layout;
        c.with_lse = (n++ % 2) == 0;
        out.push_back(c);
      }
  // Nq != Nk in the layouts that allow it.
  for (Layout layout : {Layout::kBNHD, Layout::kStridedHeadDim}) {
    AttentionCase c = make(FMHA_DTYPE_F16, 2, 4, 2, 30, 77, 64, kCausalTL);
    c.layout = layout;
    out.push_back(c);
    AttentionCase w = windowed(make(FMHA_DTYPE_F32, 1, 4, 1, 77, 30, 32), 6, 2);
    w.layout = layout;
    out.push_back(w);
  }
  return out;
}

std::vector<AttentionCase> cases_fully_masked_rows() {
  std::vector<AttentionCase> out;
  for (fmha_dtype t : kAllDtypes) {
    // Bottom-right causal, Nq > Nk: rows i < Nq - Nk see no key.
    out.push_back(make(t, 1, 2, 1, 70, 20, 64, kCausalBR));
    out.push_back(make(t, 2, 2, 2, 129, 7, 32, kCausalBR));
    out.push_back(make(t, 1, 1, 1, 65, 1, 16, kCausalBR));
    // Window around the bottom-right diagonal d(i) = i - 30: rows i < 28
    // see no key.
    out.push_back(windowed(make(t, 1, 2, 1, 40, 10, 64), 2, 2));
    // Top-left causal with window_left = 0 and Nq > Nk: row i sees key i
    // only, so rows i >= Nk see none (the last rows this time).
    out.push_back(windowed(make(t, 1, 2, 2, 30, 10, 32, kCausalTL), 0, 0));
    // Right-only window off the bottom-right diagonal, Nq > Nk.
    out.push_back(windowed(make(t, 1, 1, 1, 67, 17, 64), -1, 3));
  }
  return out;
}

std::vector<AttentionCase> cases_empty() {
  std::vector<AttentionCase> out;
  // No keys at all (Nk = 0: every row gets O = 0, lse = -inf; the kernels
  // run with no key tile), and no rows (B = 0, Nq = 0: nothing is written).
  out.push_back(make(FMHA_DTYPE_F32, 2, 4, 2, 65, 0, 64));
  out.push_back(make(FMHA_DTYPE_F16, 1, 8, 2, 1, 0, 128, kCausalBR));
  out.push_back(make(FMHA_DTYPE_BF16, 1, 2, 2, 130, 0, 64, kCausalTL));
  out.push_back(make(FMHA_DTYPE_F32, 0, 2, 2, 5, 5, 64));
  out.push_back(make(FMHA_DTYPE_F16, 2, 2, 1, 0, 17, 64));
  return out;
}

std::vector<AttentionCase> cases_large_logits() {
  std::vector<AttentionCase> out;
  for (fmha_dtype t : kAllDtypes)
    for (int64_t d : {64, 128})
      for (uint32_t mask : {FMHA_MASK_NONE, kCausalBR}) {
        // Several key tiles per row, so the running max is rescaled by
        // factors like exp(-1e4) and exp(+-small) between tiles.
        AttentionCase c = d == 64 ? make(t, 1, 2, 1, 65, 150, d, mask) : make(t, 1, 2, 1, 40, 130, d, mask);
        c.data = Data::kLargeLogits;
        c.scale = 0.25f;
        out.push_back(c);
      }
  return out;
}

std::vector<AttentionCase> cases_rising_logits() {
  // 64 rows: one group of 16 per q[i, 0]; 520 keys: 4 whole blocks and 8
  // keys of a fifth, so a kernel's running max jumps on 4 key tiles after
  // its first.
  auto rising = [](fmha_dtype t, int64_t d, uint32_t mask) {
    AttentionCase c = make(t, 1, 1, 1, 64, 520, d, mask);
    c.data = Data::kRisingLogits;
    c.scale = 0.25f;
    return c;
  };
  std::vector<AttentionCase> out;
  // D=128 for the 16-bit dtypes (one key tile of 128 on cuda_sm90_ws), 64
  // for F32.
  for (fmha_dtype t : kAllDtypes)
    for (uint32_t mask : {FMHA_MASK_NONE, kCausalBR}) out.push_back(rising(t, t == FMHA_DTYPE_F32 ? 64 : 128, mask));
  // D=256 (cuda_sm90_ws: key tiles of 80, Q from shared memory), causal.
  out.push_back(rising(FMHA_DTYPE_BF16, 256, kCausalBR));
  return out;
}

std::vector<AttentionCase> cases_softcap_scale() {
  std::vector<AttentionCase> out;
  int n = 0;
  for (fmha_dtype t : kAllDtypes) {
    // Mild cap at the default scale (logits ~ N(0, 1) barely reach it).
    AttentionCase mild = make(t, 1, 2, 1, 65, 65, 64, (n++ % 2) ? kCausalBR : FMHA_MASK_NONE);
    mild.softcap = 30.f;
    out.push_back(mild);
    // Scale 1 makes logits ~ N(0, 64); a cap of 2 saturates most of them.
    AttentionCase hard = make(t, 1, 2, 2, 33, 65, 64, (n++ % 2) ? kCausalBR : FMHA_MASK_NONE);
    hard.scale = 1.f;
    hard.softcap = 2.f;
    out.push_back(hard);
    // Softcap with a window and GQA.
    AttentionCase win = windowed(make(t, 1, 4, 1, 65, 65, 32), 10, 4);
    win.softcap = 5.f;
    win.scale = 0.5f;
    out.push_back(win);
    // Explicit scales without softcap.
    for (float s : {0.05f, 1.f}) {
      AttentionCase c = make(t, 1, 2, 1, 40, 65, 32, (n++ % 2) ? kCausalTL : FMHA_MASK_NONE);
      c.scale = s;
      out.push_back(c);
    }
  }
  return out;
}

std::vector<CaseGroup> case_matrix() {
  return {
      {"dtypes x head dims", cases_dtypes_head_dims()},
      {"sequence lengths", cases_seq_lengths()},
      {"sliding windows", cases_windows()},
      {"GQA and MQA", cases_gqa()},
      {"layouts", cases_layouts()},
      {"fully masked rows", cases_fully_masked_rows()},
      {"empty work", cases_empty()},
      {"large logits", cases_large_logits()},
      {"rising logits", cases_rising_logits()},
      {"softcap and scale", cases_softcap_scale()},
  };
}

}  // namespace fmha_test
