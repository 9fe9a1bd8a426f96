#include "common/compare.h"

#include <algorithm>
#include <cmath>

namespace fmha_test {

ErrorStats compare_values(const double* actual, const uint8_t* unwritten, const double* expected,
                          int64_t n) {
  ErrorStats st;
  st.count = n;
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t e = 0; e < n; ++e) {
    const double r = expected[e];
    ref2 += r * r;
    st.ref_max_abs = std::max(st.ref_max_abs, std::fabs(r));
    if (unwritten != nullptr && unwritten[e]) {
      ++st.unwritten;
      if (st.first_bad < 0) st.first_bad = e;
      continue;
    }
    const double a = actual[e];
    if (!std::isfinite(a)) {
      ++st.nonfinite;
      if (st.first_bad < 0) st.first_bad = e;
      continue;
    }
    const double d = std::fabs(a - r);
    err2 += d * d;
    if (st.worst < 0 || d > st.max_abs) {
      st.max_abs = d;
      st.worst = e;
    }
  }
  st.rel_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (st.first_bad >= 0) st.worst = st.first_bad;
  return st;
}

LseStats compare_lse(const float* actual, const uint8_t* unwritten, const double* expected, int64_t n) {
  LseStats st;
  st.count = n;
  for (int64_t e = 0; e < n; ++e) {
    auto bad = [&](int64_t* counter) {
      ++*counter;
      if (st.first_bad < 0) st.first_bad = e;
    };
    if (unwritten != nullptr && unwritten[e]) {
      bad(&st.unwritten);
      continue;
    }
    const double a = actual[e];
    const double r = expected[e];
    if (std::isinf(r) && r < 0) {  // a row that sees no key
      if (!(std::isinf(a) && a < 0)) bad(&st.wrong_masked);
      continue;
    }
    if (!std::isfinite(a)) {
      bad(&st.nonfinite);
      continue;
    }
    const double err = std::fabs(a - r) / std::max(1.0, std::fabs(r));
    if (st.worst < 0 || err > st.max_err) {
      st.max_err = err;
      st.worst = e;
    }
  }
  if (st.first_bad >= 0) st.worst = st.first_bad;
  return st;
}

}  // namespace fmha_test
