// An inf in Q or K (fmha.h, "Non-finite data"): a logit of -inf is a key of
// weight 0, a logit of +inf or NaN makes the row's O and lse NaN, a row
// whose every logit is -inf gives O = 0 and lse = -inf. Over F16 and BF16
// q with K/V of q's dtype or E5M2 (which has an inf), where the amx path
// (cpu_amx.h) splits F16 values into two BF16 planes whose cross terms meet
// 0 * inf (fuzz corpus regressions; every path runs this, test_cpu_isa_amx
// the amx one). And a NaN or inf in V: it reaches the rows that see its key
// and no other (decode blocks, below).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/cpu_handle.h"
#include "common/numeric_types.h"
#include "common/tolerance.h"

namespace ft = fmha_test;

namespace {

// Element `at` of a `t` buffer set to x (an inf too: FP8 stores saturate,
// so E5M2's inf goes in as its byte).
void put(std::vector<unsigned char>& buf, fmha_dtype t, int64_t at, float x) {
  if (t == FMHA_DTYPE_F8E5M2 && std::isinf(x))
    buf[at] = x > 0 ? 0x7c : 0xfc;
  else
    ft::store_element(buf.data(), t, at, x);
}

void view(fmha_tensor* x, void* data, fmha_dtype dt, int64_t n, int64_t d, int64_t heads = 1) {
  x->data = data;
  x->dtype = dt;
  const int64_t dims[4] = {1, heads, n, d}, strides[4] = {heads * n * d, n * d, d, 1};
  std::memcpy(x->dims, dims, sizeof dims);
  std::memcpy(x->strides, strides, sizeof strides);
}

}  // namespace

TEST_CASE("an inf in Q or K: -inf logits weigh 0, +inf and 0 * inf give NaN rows, all -inf gives O = 0") {
  constexpr int64_t Nq = 48, Nk = 70, D = 64;
  constexpr int64_t kInfKey = 5, kInfDim = 4;  // K[5][4] = +inf
  constexpr int64_t kNegRow = Nq - 1, kNegDim = 7;  // Q[47][7] = -inf against K[.][7] > 0
  const float inf = std::numeric_limits<float>::infinity();
  const fmha_dtype kinds[4][2] = {{FMHA_DTYPE_F16, FMHA_DTYPE_F16},
                                  {FMHA_DTYPE_BF16, FMHA_DTYPE_BF16},
                                  {FMHA_DTYPE_F16, FMHA_DTYPE_F8E5M2},
                                  {FMHA_DTYPE_BF16, FMHA_DTYPE_F8E5M2}};
  ft::CpuHandle h;
  for (const auto& kind : kinds) {
    const fmha_dtype qt = kind[0], kvt = kind[1];
    INFO("q ", std::string(ft::dtype_label(qt)), ", K/V ", std::string(ft::dtype_label(kvt)));
    std::mt19937 rng(1234 + 7 * qt + kvt);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    std::vector<unsigned char> q(Nq * D * ft::dtype_bytes(qt)), k(Nk * D * ft::dtype_bytes(kvt)), v(k.size());
    for (int64_t x = 0; x < Nq * D; ++x) put(q, qt, x, uni(rng));
    for (int64_t x = 0; x < Nk * D; ++x) {
      put(k, kvt, x, uni(rng));
      put(v, kvt, x, uni(rng));
    }
    // Row r % 3: 0 sees K[5][4] = inf through a negative q (logit -inf),
    // 1 through a positive one (+inf: NaN row), 2 through a zero (NaN).
    put(k, kvt, kInfKey * D + kInfDim, inf);
    for (int64_t r = 0; r < Nq; ++r) {
      const float mag = 0.25f + std::fabs(uni(rng));
      put(q, qt, r * D + kInfDim, r % 3 == 0 ? -mag : r % 3 == 1 ? mag : 0.f);
    }
    // The last row: every logit -inf (q = -inf against positive K there).
    for (int64_t j = 0; j < Nk; ++j) put(k, kvt, j * D + kNegDim, 0.125f + std::fabs(uni(rng)));
    put(q, qt, kNegRow * D + kNegDim, -inf);
    put(q, qt, kNegRow * D + kInfDim, -0.5f);

    std::vector<float> o(Nq * D, std::nanf("")), lse(Nq, std::nanf(""));
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    view(&p.q, q.data(), qt, Nq, D);
    view(&p.k, k.data(), kvt, Nk, D);
    view(&p.v, v.data(), kvt, Nk, D);
    view(&p.o, o.data(), FMHA_DTYPE_F32, Nq, D);
    p.lse = lse.data();
    size_t bytes = 0;
    REQUIRE(fmha_forward_workspace_size(h.get(), &p, &bytes) == FMHA_SUCCESS);
    std::vector<unsigned char> ws(bytes + 64);
    REQUIRE_MESSAGE(fmha_forward(h.get(), &p, ws.data(), ws.size()) == FMHA_SUCCESS, fmha_last_error_message());

    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const double tol = ft::tolerance_for(qt, kvt, FMHA_DTYPE_F32).o_max_abs_rel;
    int finite_rows = 0, nan_rows = 0;
    for (int64_t r = 0; r < Nq; ++r) {
      CAPTURE(r);
      const float* orow = o.data() + r * D;
      if (r == kNegRow) {
        for (int64_t e = 0; e < D; ++e) CHECK(orow[e] == 0.f);
        CHECK(lse[r] == -inf);
        continue;
      }
      if (r % 3 != 0) {
        ++nan_rows;
        for (int64_t e = 0; e < D; ++e) CHECK(std::isnan(orow[e]));
        CHECK(std::isnan(lse[r]));
        continue;
      }
      // Logit -inf at key 5: the softmax over the other keys, in float64.
      ++finite_rows;
      std::vector<double> s(Nk);
      double m = -HUGE_VAL;
      for (int64_t j = 0; j < Nk; ++j) {
        if (j == kInfKey) continue;
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d)
          dot += ft::load_element(q.data(), qt, r * D + d) * ft::load_element(k.data(), kvt, j * D + d);
        s[j] = scale * dot;
        m = std::max(m, s[j]);
      }
      double l = 0.0;
      for (int64_t j = 0; j < Nk; ++j)
        if (j != kInfKey) l += std::exp(s[j] - m);
      CHECK(std::fabs(lse[r] - (m + std::log(l))) <= 1e-5 * (1.0 + std::fabs(m)));
      for (int64_t e = 0; e < D; ++e) {
        double ref = 0.0;
        for (int64_t j = 0; j < Nk; ++j)
          if (j != kInfKey) ref += std::exp(s[j] - m) / l * ft::load_element(v.data(), kvt, j * D + e);
        CAPTURE(e);
        CHECK(std::fabs(orow[e] - ref) <= tol);  // |v| <= 1
      }
    }
    CHECK(finite_rows == 16);
    CHECK(nan_rows == 31);
  }
}

// A packed decode block (the Nq queries of the G query heads that share a kv
// head, cpu_attention.cpp) runs P . V without looking at V unless a weight
// of the tile is zero. A NaN or inf in the v of a key some row does not see
// (causal: the last keys, seen by the last queries only) must still stay out
// of that row, and reach the rows that see it. head_dim 128 (K/V rows read
// in place on the AVX-512 paths) and 80 (rows staged as FP32), F16, BF16 and
// F32 K/V.
TEST_CASE("a NaN or inf in the v of a key a decode row does not see stays out of that row") {
  constexpr int64_t Hq = 8, Hk = 2, G = Hq / Hk, Nq = 3, Nk = 70;
  constexpr int64_t kNanKey = Nk - 1, kInfKey = Nk - 2;  // seen by query 2, and by queries 1 and 2
  const float inf = std::numeric_limits<float>::infinity();
  ft::CpuHandle h;
  for (const int64_t D : {int64_t{128}, int64_t{80}}) {
    for (const fmha_dtype dt : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32}) {
      INFO("D ", D, ", ", std::string(ft::dtype_label(dt)));
      std::mt19937 rng(4321 + static_cast<unsigned>(D) + 11 * dt);
      std::uniform_real_distribution<float> uni(-1.f, 1.f);
      std::vector<unsigned char> q(Hq * Nq * D * ft::dtype_bytes(dt)), k(Hk * Nk * D * ft::dtype_bytes(dt)),
          v(k.size());
      for (int64_t x = 0; x < Hq * Nq * D; ++x) put(q, dt, x, uni(rng));
      for (int64_t x = 0; x < Hk * Nk * D; ++x) {
        put(k, dt, x, uni(rng));
        put(v, dt, x, uni(rng));
      }
      for (int64_t hk = 0; hk < Hk; ++hk)
        for (int64_t e = 0; e < D; ++e) {
          put(v, dt, (hk * Nk + kNanKey) * D + e, std::nanf(""));
          if (e % 2 == 0) put(v, dt, (hk * Nk + kInfKey) * D + e, inf);
        }

      std::vector<float> o(Hq * Nq * D, std::nanf(""));
      fmha_forward_params p;
      fmha_forward_params_init(&p);
      p.mask_flags = FMHA_MASK_CAUSAL;  // bottom-right: query i sees keys [0, Nk - Nq + i + 1)
      view(&p.q, q.data(), dt, Nq, D, Hq);
      view(&p.k, k.data(), dt, Nk, D, Hk);
      view(&p.v, v.data(), dt, Nk, D, Hk);
      view(&p.o, o.data(), FMHA_DTYPE_F32, Nq, D, Hq);
      size_t bytes = 0;
      REQUIRE(fmha_forward_workspace_size(h.get(), &p, &bytes) == FMHA_SUCCESS);
      std::vector<unsigned char> ws(bytes + 64);
      REQUIRE_MESSAGE(fmha_forward(h.get(), &p, ws.data(), ws.size()) == FMHA_SUCCESS, fmha_last_error_message());

      const double scale = 1.0 / std::sqrt(static_cast<double>(D));
      const double tol = ft::tolerance_for(dt, dt, FMHA_DTYPE_F32).o_max_abs_rel;
      for (int64_t hq = 0; hq < Hq; ++hq)
        for (int64_t i = 0; i < Nq; ++i) {
          CAPTURE(hq);
          CAPTURE(i);
          const int64_t hk = hq / G, keys = Nk - Nq + i + 1;
          const float* orow = o.data() + (hq * Nq + i) * D;
          // The softmax over the keys the row sees, in float64; the columns
          // a non-finite v reaches are checked for that instead.
          std::vector<double> s(keys);
          double m = -HUGE_VAL;
          for (int64_t j = 0; j < keys; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d)
              dot += ft::load_element(q.data(), dt, (hq * Nq + i) * D + d) *
                     ft::load_element(k.data(), dt, (hk * Nk + j) * D + d);
            s[j] = scale * dot;
            m = std::max(m, s[j]);
          }
          double l = 0.0;
          for (int64_t j = 0; j < keys; ++j) l += std::exp(s[j] - m);
          for (int64_t e = 0; e < D; ++e) {
            CAPTURE(e);
            if (keys > kNanKey) {
              CHECK(std::isnan(orow[e]));
            } else if (keys > kInfKey && e % 2 == 0) {
              CHECK(orow[e] == inf);
            } else {
              double ref = 0.0;
              for (int64_t j = 0; j < keys; ++j)
                ref += std::exp(s[j] - m) / l * ft::load_element(v.data(), dt, (hk * Nk + j) * D + e);
              CHECK(std::fabs(orow[e] - ref) <= tol);  // |v| <= 1
            }
          }
        }
    }
  }
}
