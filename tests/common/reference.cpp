#include "common/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/numeric_types.h"

namespace fmha_test {
namespace {

// A strided tensor read into a contiguous [B, H, N, D] array of doubles.
std::vector<double> gather(const fmha_tensor& t) {
  const int64_t* n = t.dims;
  const int64_t* s = t.strides;
  std::vector<double> out(static_cast<size_t>(n[0] * n[1] * n[2] * n[3]));
  size_t w = 0;
  for (int64_t b = 0; b < n[0]; ++b)
    for (int64_t h = 0; h < n[1]; ++h)
      for (int64_t i = 0; i < n[2]; ++i)
        for (int64_t d = 0; d < n[3]; ++d)
          out[w++] = load_element(t.data, t.dtype, b * s[0] + h * s[1] + i * s[2] + d * s[3]);
  return out;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("reference_forward: " + what);
}

// Any 0.3 inference-numerics field set (read only when struct_size has it).
bool has_numerics(const fmha_forward_params& p) {
  if (p.struct_size < FMHA_FORWARD_PARAMS_SIZE_V3) return false;
  return p.q_descale != nullptr || p.k_descale != nullptr || p.v_descale != nullptr || p.bias.data != nullptr ||
         p.alibi_slopes != nullptr;
}

}  // namespace

bool key_visible(int64_t i, int64_t j, int64_t seq_q, int64_t seq_k, uint32_t mask_flags,
                 int32_t window_left, int32_t window_right) {
  // The diagonal of query i: bottom-right unless the top-left flag is set.
  const bool top_left = (mask_flags & FMHA_MASK_CAUSAL_TOP_LEFT) != 0;
  const int64_t diag = top_left ? i : i + seq_k - seq_q;
  if ((mask_flags & (FMHA_MASK_CAUSAL | FMHA_MASK_CAUSAL_TOP_LEFT)) != 0 && j > diag) return false;
  if (window_left >= 0 && j < diag - window_left) return false;
  if (window_right >= 0 && j > diag + window_right) return false;
  return true;
}

ReferenceResult reference_forward(const fmha_forward_params& p) {
  const fmha_tensor& q = p.q;
  const fmha_tensor& k = p.k;
  const fmha_tensor& v = p.v;
  for (int d = 0; d < 4; ++d) {
    require(q.dims[d] >= 0 && k.dims[d] >= 0, "dims must be non-negative");
    require(v.dims[d] == k.dims[d], "v.dims must equal k.dims");
  }
  // An empty tensor (batch or seq 0) may have no data.
  auto has_data = [](const fmha_tensor& t) { return t.data != nullptr || t.dims[0] == 0 || t.dims[2] == 0; };
  require(has_data(q) && has_data(k) && has_data(v), "q, k and v need host data");
  require(k.dims[0] == q.dims[0] && k.dims[3] == q.dims[3], "k batch/head_dim must match q");
  require(q.dims[1] % k.dims[1] == 0, "k heads must divide q heads");
  // Descales, bias and ALiBi: the serving reference implements them (and
  // equals this one on a dense batch).
  if (has_numerics(p)) return reference_forward_serving(p);

  ReferenceResult r;
  r.batch = q.dims[0];
  r.heads_q = q.dims[1];
  r.seq_q = q.dims[2];
  r.head_dim = q.dims[3];
  const int64_t heads_kv = k.dims[1];
  const int64_t seq_k = k.dims[2];
  const int64_t D = r.head_dim;
  const int64_t group = r.heads_q / heads_kv;
  r.scale = p.scale != 0.f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  const double softcap = p.softcap;

  const std::vector<double> qd = gather(q), kd = gather(k), vd = gather(v);
  r.o.assign(static_cast<size_t>(r.rows() * D), 0.0);
  r.lse.assign(static_cast<size_t>(r.rows()), -std::numeric_limits<double>::infinity());
  r.visible_keys.assign(static_cast<size_t>(r.rows()), 0);

  std::vector<int64_t> keys;  // visible keys of the current row
  std::vector<double> logits;
  keys.reserve(static_cast<size_t>(seq_k));
  logits.reserve(static_cast<size_t>(seq_k));
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t h = 0; h < r.heads_q; ++h) {
      const int64_t hk = h / group;
      const double* kh = kd.data() + (b * heads_kv + hk) * seq_k * D;  // (kd may be empty: Nk = 0)
      const double* vh = vd.data() + (b * heads_kv + hk) * seq_k * D;
      for (int64_t i = 0; i < r.seq_q; ++i) {
        const int64_t row = (b * r.heads_q + h) * r.seq_q + i;
        const double* qi = &qd[static_cast<size_t>(row * D)];
        keys.clear();
        logits.clear();
        for (int64_t j = 0; j < seq_k; ++j) {
          if (!key_visible(i, j, r.seq_q, seq_k, p.mask_flags, p.window_left, p.window_right))
            continue;
          const double* kj = kh + j * D;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
          double s = dot * r.scale;
          if (softcap != 0.0) s = softcap * std::tanh(s / softcap);
          keys.push_back(j);
          logits.push_back(s);
          r.max_abs_logit = std::max(r.max_abs_logit, std::fabs(s));
        }
        r.visible_keys[static_cast<size_t>(row)] = static_cast<int64_t>(keys.size());
        if (keys.empty()) continue;  // O = 0, lse = -inf (already set)
        const double m = *std::max_element(logits.begin(), logits.end());
        double sum = 0.0;
        for (double& s : logits) {
          s = std::exp(s - m);
          sum += s;
        }
        double* oi = &r.o[static_cast<size_t>(row * D)];
        for (size_t t = 0; t < keys.size(); ++t) {
          const double w = logits[t] / sum;
          const double* vj = vh + keys[t] * D;
          for (int64_t d = 0; d < D; ++d) oi[d] += w * vj[d];
        }
        r.lse[static_cast<size_t>(row)] = m + std::log(sum);
      }
    }
  return r;
}

ServingReference reference_forward_serving(const fmha_forward_params& p) {
  const fmha_tensor& q = p.q;
  const fmha_tensor& k = p.k;
  const fmha_tensor& v = p.v;
  require(q.data && k.data && v.data, "q, k and v need host data");
  for (int d = 0; d < 4; ++d) {
    require(q.dims[d] >= 0 && k.dims[d] >= 0, "dims must be non-negative");
    require(v.dims[d] == k.dims[d], "v.dims must equal k.dims");
  }
  require(q.dims[1] > 0 && k.dims[1] > 0 && q.dims[3] > 0, "heads and head_dim must be positive");
  require(k.dims[3] == q.dims[3], "k head_dim must match q");
  require(q.dims[1] % k.dims[1] == 0, "k heads must divide q heads");
  const bool ragged_q = p.cu_seqlens_q != nullptr;
  const bool ragged_k = p.cu_seqlens_k != nullptr;
  const bool paged = p.block_table != nullptr;
  require(!(ragged_k && paged), "cu_seqlens_k and block_table are exclusive");
  require(!paged || p.seqused_k != nullptr, "a block_table needs seqused_k");

  ServingReference r;
  r.batch = q.dims[0];
  r.heads_q = q.dims[1];
  r.seq_q = q.dims[2];
  r.head_dim = q.dims[3];
  const int64_t D = r.head_dim;
  const int64_t heads_kv = k.dims[1];
  const int64_t group = r.heads_q / heads_kv;
  r.scale = p.scale != 0.f ? static_cast<double>(p.scale) : 1.0 / std::sqrt(static_cast<double>(D));
  const double softcap = p.softcap;
  const bool numerics = has_numerics(p);
  r.o.assign(static_cast<size_t>(r.rows() * D), 0.0);
  r.lse.assign(static_cast<size_t>(r.rows()), -std::numeric_limits<double>::infinity());
  r.visible_keys.assign(static_cast<size_t>(r.rows()), 0);
  r.owned.assign(static_cast<size_t>(r.rows()), ragged_q ? 0 : 1);

  // The sequences and their extents, from the header's prose.
  const int64_t B = ragged_q || ragged_k ? p.num_seqs : q.dims[0];
  require(B >= 0, "num_seqs must be >= 0");
  if (ragged_q) require(q.dims[0] == 1, "packed queries need q.dims[0] = 1");
  if (!ragged_q) require(q.dims[0] == B, "dense queries: q.dims[0] must be the batch");
  if (ragged_k) require(k.dims[0] == 1, "packed keys need k.dims[0] = 1");
  if (!ragged_k && !paged) require(k.dims[0] == B, "dense keys: k.dims[0] must be the batch");
  auto check_cu = [&](const int32_t* cu, int64_t total, int32_t max_len, const char* name) {
    require(cu[0] == 0, std::string(name) + "[0] must be 0");
    for (int64_t b = 0; b < B; ++b) {
      require(cu[b + 1] >= cu[b], std::string(name) + " must be non-decreasing");
      require(cu[b + 1] - cu[b] <= max_len, std::string(name) + ": a length exceeds its max_seqlen");
    }
    require(cu[B] <= total, std::string(name) + " runs past the tensor");
  };
  if (ragged_q) check_cu(p.cu_seqlens_q, q.dims[2], p.max_seqlen_q, "cu_seqlens_q");
  if (ragged_k) check_cu(p.cu_seqlens_k, k.dims[2], p.max_seqlen_k, "cu_seqlens_k");
  r.num_seqs = B;
  r.len_q.resize(static_cast<size_t>(B));
  r.len_k.resize(static_cast<size_t>(B));
  r.q_begin.resize(static_cast<size_t>(B));
  const int64_t page_size = k.dims[2];
  for (int64_t b = 0; b < B; ++b) {
    const size_t bi = static_cast<size_t>(b);
    r.q_begin[bi] = ragged_q ? p.cu_seqlens_q[b] : 0;
    r.len_q[bi] = ragged_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : q.dims[2];
    int64_t nk = ragged_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : paged ? INT64_MAX : k.dims[2];
    if (p.seqused_k != nullptr) {
      require(p.seqused_k[b] >= 0, "seqused_k must be >= 0");
      nk = std::min<int64_t>(nk, p.seqused_k[b]);
    }
    if (paged) {
      require(nk <= p.block_table_stride * page_size, "a paged sequence exceeds its block-table row");
      if (p.max_seqlen_k != 0) require(nk <= p.max_seqlen_k, "seqused_k exceeds max_seqlen_k");
    }
    r.len_k[bi] = nk;
  }

  // Key j of sequence b: its (batch, seq) coordinates in k and v.
  auto key_at = [&](int64_t b, int64_t j, int64_t* kb, int64_t* kj) {
    if (ragged_k) {
      *kb = 0;
      *kj = p.cu_seqlens_k[b] + j;
    } else if (paged) {
      const int64_t page = p.block_table[b * p.block_table_stride + j / page_size];
      require(page >= 0 && page < k.dims[0], "block_table names a page outside k");
      *kb = page;
      *kj = j % page_size;
    } else {
      *kb = b;
      *kj = j;
    }
  };
  auto at = [](const fmha_tensor& t, int64_t b, int64_t h, int64_t i, int64_t d) {
    return b * t.strides[0] + h * t.strides[1] + i * t.strides[2] + d * t.strides[3];
  };
  // fmha.h 0.3: descales [B, Hk] (NULL = 1); bias element [b, h, i, j] of
  // the sequence's local positions, a dim of 1 broadcasting; ALiBi slope
  // of (b, h): alibi_slopes[b * alibi_slopes_stride + h].
  auto descale = [&](const float* f, int64_t b, int64_t hk) {
    return numerics && f != nullptr ? static_cast<double>(f[b * heads_kv + hk]) : 1.0;
  };
  const bool has_bias = numerics && p.bias.data != nullptr;
  const bool has_alibi = numerics && p.alibi_slopes != nullptr;
  auto bias_at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const fmha_tensor& t = p.bias;
    const int64_t idx[4] = {b, h, i, j};
    int64_t e = 0;
    for (int d = 0; d < 4; ++d) e += (t.dims[d] == 1 ? 0 : idx[d]) * t.strides[d];
    return load_element(t.data, t.dtype, e);
  };

  std::vector<double> qi(static_cast<size_t>(D)), logits, kd, vd;
  for (int64_t b = 0; b < B; ++b) {
    const size_t bi = static_cast<size_t>(b);
    const int64_t nq = r.len_q[bi], nk = r.len_k[bi];
    // This sequence's keys, gathered once per kv head.
    kd.assign(static_cast<size_t>(heads_kv * nk * D), 0.0);
    vd.assign(kd.size(), 0.0);
    for (int64_t j = 0; j < nk; ++j) {
      int64_t kb, kj;
      key_at(b, j, &kb, &kj);
      for (int64_t hk = 0; hk < heads_kv; ++hk)
        for (int64_t d = 0; d < D; ++d) {
          const size_t e = static_cast<size_t>((hk * nk + j) * D + d);
          kd[e] = load_element(k.data, k.dtype, at(k, kb, hk, kj, d));
          vd[e] = load_element(v.data, v.dtype, at(v, kb, hk, kj, d));
        }
    }
    const int64_t qb = ragged_q ? 0 : b;
    for (int64_t h = 0; h < r.heads_q; ++h) {
      const int64_t hk = h / group;
      const double logit_scale = r.scale * descale(p.q_descale, b, hk) * descale(p.k_descale, b, hk);
      const double out_scale = descale(p.v_descale, b, hk);
      const double slope = has_alibi ? p.alibi_slopes[b * p.alibi_slopes_stride + h] : 0.0;
      for (int64_t i = 0; i < nq; ++i) {
        // The active diagonal of query i (as key_visible derives it).
        const int64_t diag = (p.mask_flags & FMHA_MASK_CAUSAL_TOP_LEFT) ? i : i + nk - nq;
        const int64_t qrow = r.q_begin[bi] + i;
        const int64_t row = (qb * r.heads_q + h) * r.seq_q + qrow;
        r.owned[static_cast<size_t>(row)] = 1;
        for (int64_t d = 0; d < D; ++d)
          qi[static_cast<size_t>(d)] = load_element(q.data, q.dtype, at(q, qb, h, qrow, d));
        logits.assign(static_cast<size_t>(nk), 0.0);
        int64_t seen = 0;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < nk; ++j) {
          if (!key_visible(i, j, nq, nk, p.mask_flags, p.window_left, p.window_right)) {
            logits[static_cast<size_t>(j)] = -std::numeric_limits<double>::infinity();
            continue;
          }
          const double* kj = &kd[static_cast<size_t>((hk * nk + j) * D)];
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += qi[static_cast<size_t>(d)] * kj[d];
          double s = dot * logit_scale;
          if (softcap != 0.0) s = softcap * std::tanh(s / softcap);
          if (has_bias) s += bias_at(b, h, i, j);
          if (has_alibi) s -= slope * static_cast<double>(std::llabs(diag - j));
          logits[static_cast<size_t>(j)] = s;
          if (s == -std::numeric_limits<double>::infinity()) continue;  // a -inf bias: weight 0
          m = std::max(m, s);
          r.max_abs_logit = std::max(r.max_abs_logit, std::fabs(s));
          ++seen;
        }
        r.visible_keys[static_cast<size_t>(row)] = seen;
        // No key, or every logit -inf: O = 0, lse = -inf (already set).
        if (seen == 0) continue;
        double sum = 0.0;
        for (double& s : logits) {
          s = std::exp(s - m);  // exp(-inf) = 0 for keys the row does not see
          sum += s;
        }
        double* orow = &r.o[static_cast<size_t>(row * D)];
        for (int64_t j = 0; j < nk; ++j) {
          const double w = logits[static_cast<size_t>(j)] / sum * out_scale;
          if (w == 0.0) continue;
          const double* vj = &vd[static_cast<size_t>((hk * nk + j) * D)];
          for (int64_t d = 0; d < D; ++d) orow[d] += w * vj[d];
        }
        r.lse[static_cast<size_t>(row)] = m + std::log(sum);
      }
    }
  }
  return r;
}

}  // namespace fmha_test
