// The tile scheduler of the forward families: which work tile (key split,
// unit = (batch, head slot), query block) a work index names. Host and
// device code (FMHA_HOST_DEVICE), so host tests and plans can enumerate it.
// The key tiles a work tile visits come from core/key_tiles.h.
#pragma once

#include <cstdint>

#include "backend/cuda/common/fwd_params.h"
#include "core/host_device.h"

namespace fmha::cuda {

struct WorkTile {
  int split;       // key split, < FwdParams::num_splits
  int64_t unit;    // (batch, head slot) unit, see FwdParams::pack
  int64_t b;       // batch
  int64_t hs;      // head slot: query heads [hs * pack, (hs + 1) * pack)
  int64_t hk;      // their KV head
  int m_block;     // query block of the unit, < FwdParams::num_m_tiles

  // Head and query of row r (< FwdParams::rows) of this unit.
  FMHA_HOST_DEVICE void locate(const FwdParams& p, int r, int64_t* h, int* i) const {
    *h = hs * p.pack + r % p.pack;
    *i = r / p.pack;
  }
};

// Work index (< num_m_tiles * units * num_splits) -> tile. Splits vary
// fastest, then units (unpacked GQA heads sharing a KV head are neighbours,
// so their K/V reads meet in L2), and query blocks run in reverse: under a
// causal mask the last blocks see the most keys, so the longest work
// starts first.
FMHA_HOST_DEVICE WorkTile schedule_tile(const FwdParams& p, int64_t index) {
  WorkTile w;
  int64_t blk = index;
  w.split = static_cast<int>(blk % p.num_splits);
  blk /= p.num_splits;
  w.unit = blk % p.units;
  w.m_block = p.num_m_tiles - 1 - static_cast<int>(blk / p.units);
  const int64_t slots = p.heads_q / p.pack;
  w.b = w.unit / slots;
  w.hs = w.unit % slots;
  w.hk = w.hs * p.pack / p.group;
  return w;
}

}  // namespace fmha::cuda
