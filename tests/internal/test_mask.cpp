// The per-row key range every backend implements (src/core/mask.h),
// checked against the definition in include/fmha/fmha.h element by element.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

#include "core/mask.h"

namespace {

// The header's definition, one key at a time.
bool visible(int64_t i, int64_t j, int64_t diag_offset, int64_t left, int64_t right) {
  const int64_t d = i + diag_offset;
  return (left < 0 || j >= d - left) && (right < 0 || j <= d + right);
}

}  // namespace

TEST_CASE("key_range matches the mask definition and is monotonic") {
  for (int64_t nq : {1, 5, 17})
    for (int64_t nk : {1, 4, 17, 30})
      for (int64_t offset : {int64_t{0}, nk - nq})
        for (int64_t left : {-1, 0, 3})
          for (int64_t right : {-1, 0, 2}) {
            CAPTURE(nq); CAPTURE(nk); CAPTURE(offset); CAPTURE(left); CAPTURE(right);
            fmha::KeyRange prev{0, 0};
            for (int64_t i = 0; i < nq; ++i) {
              const fmha::KeyRange r = fmha::key_range(i, nk, offset, left, right);
              CHECK(r.lo >= 0);
              CHECK(r.hi <= nk);
              for (int64_t j = 0; j < nk; ++j) CHECK(visible(i, j, offset, left, right) == (j >= r.lo && j < r.hi));
              if (i > 0) {
                CHECK(r.lo >= prev.lo);
                CHECK(r.hi >= prev.hi);
              }
              prev = r;
            }
          }
}
