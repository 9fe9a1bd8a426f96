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
// starts first. With FwdParams::unit_band, the units go in bands of that
// many (the last may be shorter), each band's tiles in that order before
// the next band's: the tiles in flight together then read the K/V of one
// band's units, which the launch sized to stay in L2, rather than of all.
FMHA_HOST_DEVICE WorkTile schedule_tile(const FwdParams& p, int64_t index) {
  WorkTile w;
  int64_t blk = index;
  w.split = static_cast<int>(blk % p.num_splits);
  blk /= p.num_splits;
  if (p.unit_band > 0 && p.unit_band < p.units) {
    // 32-bit: the launches' tile counts are below 2^31.
    const uint32_t b = static_cast<uint32_t>(blk), band = static_cast<uint32_t>(p.unit_band);
    const uint32_t m_tiles = static_cast<uint32_t>(p.num_m_tiles), units = static_cast<uint32_t>(p.units);
    const uint32_t first = b / (band * m_tiles) * band;  // the band's first unit
    const uint32_t width = units - first < band ? units - first : band;
    const uint32_t at = b - first * m_tiles;  // position in the band
    w.unit = first + at % width;
    w.m_block = static_cast<int>(m_tiles - 1 - at / width);
  } else {
    w.unit = blk % p.units;
    w.m_block = p.num_m_tiles - 1 - static_cast<int>(blk / p.units);
  }
  const int64_t slots = p.heads_q / p.pack;
  w.b = w.unit / slots;
  w.hs = w.unit % slots;
  w.hk = w.hs * p.pack / p.group;
  return w;
}

// The band for FwdParams::unit_band: as many units as read K and V (the
// keys of every sequence, per KV head, shared by its group's query heads)
// that fit in budget_bytes together, whole GQA groups, at least one group;
// 0 (one band) when that covers every unit or the budget is 0.
inline int64_t unit_band(const FwdParams& p, int elem_bytes, int64_t budget_bytes) {
  const int64_t kv_head_bytes = 2 * static_cast<int64_t>(p.seq_k) * p.head_dim * elem_bytes;
  if (budget_bytes <= 0 || kv_head_bytes <= 0) return 0;
  const int64_t group_units = p.group / p.pack > 1 ? p.group / p.pack : 1;  // units that read one KV head
  const int64_t kv_heads = budget_bytes / kv_head_bytes;
  const int64_t band = (kv_heads > 1 ? kv_heads : 1) * group_units;
  return band < p.units ? band : 0;
}

}  // namespace fmha::cuda
