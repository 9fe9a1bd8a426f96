// The key-tile partition every backend uses (src/core/key_tiles.h), checked
// against core/mask.h's per-row ranges: the tiles cover exactly the keys the
// rows need, splits partition them in order, and a tile called unmasked is
// visible to every row.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>

#include "core/key_tiles.h"
#include "core/mask.h"

TEST_CASE("key_tiles: band coverage, split partition, unmasked interior") {
  for (int64_t nq : {1, 7, 40})
    for (int64_t nk : {1, 9, 64, 100})
      for (int64_t offset : {int64_t{0}, nk - nq})
        for (int64_t left : {-1, 0, 5, 30})
          for (int64_t right : {-1, 0, 3})
            for (int64_t block_n : {4, 16})
              for (int64_t q0 = 0; q0 < nq; q0 += 5) {
                const int64_t q1 = q0 + 4 < nq ? q0 + 4 : nq - 1;
                CAPTURE(nq); CAPTURE(nk); CAPTURE(offset); CAPTURE(left); CAPTURE(right);
                CAPTURE(block_n); CAPTURE(q0); CAPTURE(q1);
                const fmha::KeyRange first = fmha::key_range(q0, nk, offset, left, right);
                const fmha::KeyRange last = fmha::key_range(q1, nk, offset, left, right);
                const fmha::KeyTiles all = fmha::key_tiles(q0, q1, nk, offset, left, right, block_n, 0, 1);
                if (last.hi <= first.lo) {
                  CHECK(all.t_end <= all.t_begin);
                  continue;
                }
                // The unsplit tiles are exactly those holding a needed key.
                CHECK(all.t_begin == first.lo / block_n);
                CHECK(all.t_end == (last.hi + block_n - 1) / block_n);
                CHECK(all.lo == first.lo);
                CHECK(all.hi == last.hi);
                // Unmasked tiles are visible to every row in full.
                for (int64_t t = all.t_begin; t < all.t_end; ++t) {
                  const int64_t n0 = t * block_n, n1 = n0 + block_n;
                  if (!all.unmasked(n0, n1)) continue;
                  for (int64_t q = q0; q <= q1; ++q) {
                    const fmha::KeyRange r = fmha::key_range(q, nk, offset, left, right);
                    CHECK(r.lo <= n0);
                    CHECK(r.hi >= n1);
                  }
                }
                // Splits cut [t_begin, t_end) into consecutive runs, and the
                // int instantiation agrees with the int64 one.
                for (int64_t splits : {2, 3, 8}) {
                  int64_t next = all.t_begin;
                  for (int64_t s = 0; s < splits; ++s) {
                    const fmha::KeyTiles k = fmha::key_tiles(q0, q1, nk, offset, left, right, block_n, s, splits);
                    const fmha::KeyTilesOf<int> k32 =
                        fmha::key_tiles<int>(q0, q1, nk, offset, left, right, block_n, s, splits);
                    CHECK(k32.t_begin == k.t_begin);
                    CHECK(k32.t_end == k.t_end);
                    CHECK(k32.full_lo == k.full_lo);
                    CHECK(k32.full_hi == k.full_hi);
                    if (k.t_end <= k.t_begin) continue;
                    CHECK(k.t_begin == next);
                    next = k.t_end;
                    CHECK(k.lo == (first.lo > k.t_begin * block_n ? first.lo : k.t_begin * block_n));
                    CHECK(k.hi == (last.hi < k.t_end * block_n ? last.hi : k.t_end * block_n));
                  }
                  CHECK(next == all.t_end);
                }
              }
}
