// The CUDA families' work order (src/backend/cuda/common/tile_scheduler.h):
// schedule_tile maps the work indices onto every (split, unit, query block)
// exactly once, in the documented order (splits fastest, then units, query
// blocks longest-first); with FwdParams::unit_band the units go in bands,
// each band's tiles before the next band's and in the same order inside
// it; unit_band sizes the bands to an L2 budget in whole GQA groups. Host
// code only; built with the CUDA backend.
#include <doctest/doctest.h>

#if FMHA_WITH_CUDA

#include <cstdint>
#include <vector>

#include "backend/cuda/common/tile_scheduler.h"

namespace {

using fmha::cuda::FwdParams;
using fmha::cuda::schedule_tile;
using fmha::cuda::unit_band;
using fmha::cuda::WorkTile;

FwdParams grid(int64_t batch, int64_t heads_q, int64_t group, int m_tiles, int splits) {
  FwdParams p{};
  p.pack = 1;
  p.heads_q = heads_q;
  p.group = group;
  p.units = batch * heads_q;
  p.num_m_tiles = m_tiles;
  p.num_splits = splits;
  return p;
}

// Every tile once; bands in order; inside a band, splits fastest, then the
// band's units, query blocks from the last.
void check_order(const FwdParams& p) {
  CAPTURE(p.units);
  CAPTURE(p.num_m_tiles);
  CAPTURE(p.num_splits);
  CAPTURE(p.unit_band);
  const int64_t total = p.units * p.num_m_tiles * p.num_splits;
  const int64_t band = p.unit_band > 0 && p.unit_band < p.units ? p.unit_band : p.units;
  std::vector<int> seen(static_cast<size_t>(total), 0);
  int64_t index = 0;
  for (int64_t first = 0; first < p.units; first += band) {
    const int64_t width = p.units - first < band ? p.units - first : band;
    for (int m = p.num_m_tiles - 1; m >= 0; --m)
      for (int64_t u = first; u < first + width; ++u)
        for (int s = 0; s < p.num_splits; ++s, ++index) {
          const WorkTile w = schedule_tile(p, index);
          REQUIRE(w.split == s);
          REQUIRE(w.unit == u);
          REQUIRE(w.m_block == m);
          REQUIRE(w.b == u / p.heads_q);
          REQUIRE(w.hs == u % p.heads_q);
          REQUIRE(w.hk == w.hs / p.group);
          ++seen[static_cast<size_t>((w.unit * p.num_m_tiles + w.m_block) * p.num_splits + w.split)];
        }
  }
  CHECK(index == total);
  for (int n : seen) REQUIRE(n == 1);
}

}  // namespace

TEST_CASE("schedule_tile: every tile once, longest query blocks first, with and without L2 bands") {
  const FwdParams grids[] = {grid(1, 32, 1, 64, 1), grid(8, 32, 4, 16, 1), grid(3, 5, 5, 7, 3), grid(2, 6, 2, 1, 2)};
  for (const FwdParams& base : grids) {
    for (int64_t band : {int64_t{0}, int64_t{1}, int64_t{3}, base.units - 1, base.units, base.units + 5}) {
      FwdParams p = base;
      p.unit_band = band < 0 ? 0 : band;
      check_order(p);
    }
  }
}

TEST_CASE("unit_band: the units whose K and V fit the budget, whole GQA groups") {
  // B1 H32 D128 N=8192 F16: 4 MiB of K and V per head.
  FwdParams p = grid(1, 32, 1, 64, 1);
  p.seq_k = 8192;
  p.head_dim = 128;
  CHECK(unit_band(p, 2, int64_t{32} << 20) == 8);
  CHECK(unit_band(p, 2, int64_t{16} << 20) == 4);
  CHECK(unit_band(p, 2, int64_t{1} << 20) == 1);      // at least one unit
  CHECK(unit_band(p, 2, int64_t{256} << 20) == 0);    // every unit fits: one band
  CHECK(unit_band(p, 2, 0) == 0);                     // no budget: one band
  // GQA 32/8 B8 N=2048: 1 MiB per KV head, 4 query heads each.
  FwdParams g = grid(8, 32, 4, 16, 1);
  g.seq_k = 2048;
  g.head_dim = 128;
  CHECK(unit_band(g, 2, int64_t{32} << 20) == 128);
  CHECK(unit_band(g, 2, int64_t{1} << 19) == 4);      // one group, though it does not fit
  g.seq_k = 0;
  CHECK(unit_band(g, 2, int64_t{32} << 20) == 0);     // no keys: one band
}

#endif  // FMHA_WITH_CUDA
