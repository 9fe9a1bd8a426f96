// The key tiles a block of query rows visits: the mask band (core/mask.h)
// reduced to whole tiles of block_n keys, then partitioned among key splits.
// Shared by every backend (the CPU backend, cuda_generic, the CUDA tensor-core
// families), host and device code, so all of them skip the same tiles and
// split the same way. The band is evaluated in int64 (key_range); tile and
// key positions are int64 too unless the caller asks for int (KeyTilesOf).
//
// Tile t holds keys [t * block_n, (t + 1) * block_n). Both ends of a row's key
// range are non-decreasing in the query (mask.h), so the rows of queries
// [q_first, q_last] need keys [lo(q_first), hi(q_last)), and a key in
// [lo(q_last), hi(q_first)) is visible to every one of them: a tile inside
// that interior needs no element-wise mask. A tile that straddles either
// edge of the interior (or the end of the sequence) does.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "core/mask.h"

namespace fmha {

// Index: the type of the tile and key positions, int64_t unless a caller
// bounds every position to int32 (a kernel family that refuses sequences
// past kMaxFwdSeq may ask for int and keep its prologue in 32-bit
// arithmetic: cuda_sm80_tc does, because 64-bit divisions there changed its
// register allocation and spills). The band itself, key_range, is always
// evaluated in int64.
template <class Index>
struct KeyTilesOf {
  Index t_begin;  // key tiles [t_begin, t_end) of this split; empty when
  Index t_end;    // t_end <= t_begin
  Index lo;       // the keys of those tiles that any row needs: [lo, hi)
  Index hi;       // (the first and last tile may be partly outside)
  Index full_lo;  // every row sees all keys of [full_lo, full_hi); may
  Index full_hi;  // be empty (full_hi <= full_lo)

  // True when the tile of keys [n0, n1) lies inside the interior, i.e. needs
  // no element-wise mask.
  FMHA_HOST_DEVICE bool unmasked(Index n0, Index n1) const { return n0 >= full_lo && n1 <= full_hi; }
};

using KeyTiles = KeyTilesOf<int64_t>;

// The tiles of split `split` (< num_splits) for the rows of queries
// [q_first, q_last] (q_first <= q_last) under the band (diag_offset,
// window_left, window_right) over seq_k keys. The band's tiles
// [lo(q_first) / block_n, ceil(hi(q_last) / block_n)) are cut into
// num_splits runs of ceil(tiles / num_splits) tiles, in order; trailing
// splits may get none. num_splits = 1 is the whole band.
template <class Index = int64_t>
FMHA_HOST_DEVICE KeyTilesOf<Index> key_tiles(int64_t q_first, int64_t q_last, int64_t seq_k, int64_t diag_offset,
                                             int64_t window_left, int64_t window_right, int64_t block_n_,
                                             int64_t split_, int64_t num_splits_) {
  const Index block_n = static_cast<Index>(block_n_);
  const Index split = static_cast<Index>(split_);
  const Index num_splits = static_cast<Index>(num_splits_);
  const KeyRange first = key_range(q_first, seq_k, diag_offset, window_left, window_right);
  const KeyRange last = key_range(q_last, seq_k, diag_offset, window_left, window_right);
  const Index n_begin = static_cast<Index>(first.lo);
  const Index n_end = static_cast<Index>(last.hi);
  KeyTilesOf<Index> k;
  k.t_begin = n_begin / block_n;
  k.t_end = n_end > n_begin ? (n_end + block_n - 1) / block_n : k.t_begin;
  if (num_splits > 1) {
    const Index total = k.t_end - k.t_begin;
    const Index per = (total + num_splits - 1) / num_splits;
    const Index s_begin = k.t_begin + (total < split * per ? total : split * per);
    k.t_end = k.t_begin + (total < (split + 1) * per ? total : (split + 1) * per);
    k.t_begin = s_begin;
  }
  const Index t0 = k.t_begin * block_n;
  const Index t1 = k.t_end * block_n;
  k.lo = n_begin > t0 ? n_begin : t0;
  k.hi = n_end < t1 ? n_end : t1;
  k.full_lo = static_cast<Index>(last.lo);
  k.full_hi = static_cast<Index>(first.hi);
  return k;
}

}  // namespace fmha
