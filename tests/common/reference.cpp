#include "common/reference.h"

#include <algorithm>
#include <cmath>
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
  require(q.data && k.data && v.data, "q, k and v need host data");
  for (int d = 0; d < 4; ++d) {
    require(q.dims[d] > 0 && k.dims[d] > 0, "dims must be positive");
    require(v.dims[d] == k.dims[d], "v.dims must equal k.dims");
  }
  require(k.dims[0] == q.dims[0] && k.dims[3] == q.dims[3], "k batch/head_dim must match q");
  require(q.dims[1] % k.dims[1] == 0, "k heads must divide q heads");

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
      const double* kh = &kd[static_cast<size_t>((b * heads_kv + hk) * seq_k * D)];
      const double* vh = &vd[static_cast<size_t>((b * heads_kv + hk) * seq_k * D)];
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

}  // namespace fmha_test
