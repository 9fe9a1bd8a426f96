// Comparing a kernel's output with the float64 reference, element by
// element: every element must be written and finite, then the error norms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fmha_test {

struct ErrorStats {
  int64_t count = 0;      // elements compared
  int64_t unwritten = 0;  // still holding the poison pattern
  int64_t nonfinite = 0;  // NaN or inf (poison not counted again)
  double rel_l2 = 0.0;    // ||a - r||_2 / ||r||_2 (||a - r||_2 when ||r||_2 = 0)
  double max_abs = 0.0;   // max |a - r| over finite elements
  double ref_max_abs = 0.0;  // max |r|
  int64_t worst = -1;     // element of max_abs, or the first bad one
  int64_t first_bad = -1; // first unwritten or non-finite element, -1 if none

  bool all_finite() const { return unwritten == 0 && nonfinite == 0; }
  // max_abs / max |r| (max_abs when the reference is all zero).
  double max_abs_rel() const { return ref_max_abs > 0 ? max_abs / ref_max_abs : max_abs; }
};

// actual[e] against expected[e] for e < n. unwritten may be null; else
// unwritten[e] != 0 marks an element that still held poison.
ErrorStats compare_values(const double* actual, const uint8_t* unwritten, const double* expected,
                          int64_t n);

struct LseStats {
  int64_t count = 0;
  int64_t unwritten = 0;
  int64_t nonfinite = 0;       // NaN, or inf where the reference is finite
  int64_t wrong_masked = 0;    // reference -inf (row sees no key) but not -inf
  double max_err = 0.0;        // max |a - r| / max(1, |r|) over finite rows
  int64_t worst = -1;
  int64_t first_bad = -1;

  bool all_valid() const { return unwritten == 0 && nonfinite == 0 && wrong_masked == 0; }
};

// lse rows: actual[r] (FP32 as written by the kernel) against expected[r].
LseStats compare_lse(const float* actual, const uint8_t* unwritten, const double* expected, int64_t n);

}  // namespace fmha_test
