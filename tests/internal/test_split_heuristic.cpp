// The CUDA families' split heuristic (src/backend/cuda/common/fwd_params.cpp,
// choose_splits): requested counts are honoured within their caps, and the
// automatic choice for decode-like tiles (SplitShape) fills one wave when
// the tile streams K/V and makes at least four waves when the sequences'
// key counts are unknown to the host. The grids are the H200's (132 SMs)
// with cuda_sm80_tc's decode tile (3 CTAs per SM) and the serving bench's
// shapes (GQA 32/8, 64-key tiles). Host code only; built with the CUDA
// backend.
#include <doctest/doctest.h>

#if FMHA_WITH_CUDA

#include <cmath>
#include <cstdint>

#include "backend/cuda/common/fwd_params.h"

namespace {

using fmha::cuda::choose_splits;
using fmha::cuda::kMaxFwdSplits;
using fmha::cuda::SplitShape;

constexpr int kSms = 132;
constexpr int kSlotsPerSm = 3;
constexpr int64_t kSlots = int64_t{kSms} * kSlotsPerSm;

SplitShape shape(bool stream_bound, bool uneven) {
  SplitShape s;
  s.stream_bound = stream_bound;
  s.uneven_keys = uneven;
  return s;
}

double waves(int64_t blocks, int splits) { return static_cast<double>(blocks * splits) / kSlots; }

}  // namespace

TEST_CASE("choose_splits: requested counts within their caps, whatever the shape") {
  for (const SplitShape& sh : {shape(false, false), shape(true, false), shape(true, true)}) {
    CHECK(choose_splits(8, kSlotsPerSm, 2048, kSms, 1, sh) == 1);
    CHECK(choose_splits(8, kSlotsPerSm, 2048, kSms, 7, sh) == 7);
    CHECK(choose_splits(8, kSlotsPerSm, 2048, kSms, 1000, sh) == kMaxFwdSplits);
    CHECK(choose_splits(8, kSlotsPerSm, 5, kSms, 40, sh) == 5);  // at most one split per key tile
    // Too few key tiles to split automatically.
    CHECK(choose_splits(8, kSlotsPerSm, 15, kSms, 0, sh) == 1);
  }
}

TEST_CASE("choose_splits: stream-bound decode fills one wave") {
  // B=1 Nk=131072: 8 units, 2048 key tiles. The old rule (fewest splits
  // within 85% of the best efficiency) took 42 (336 of 396 slots).
  CHECK(choose_splits(8, kSlotsPerSm, 2048, kSms, 0, shape(false, false)) == 42);
  const int s = choose_splits(8, kSlotsPerSm, 2048, kSms, 0, shape(true, false));
  CHECK(s == 49);
  CHECK(waves(8, s) <= 1.0);
  CHECK(waves(8, s + 1) > 1.0);
  // B=16 Nk=8192: 128 units; 3 splits fill 384 of 396 slots either way.
  CHECK(choose_splits(128, kSlotsPerSm, 128, kSms, 0, shape(true, false)) == 3);
  // A grid whose one-wave split fills too little (200 units: 1 split, 51%)
  // takes the old rule's choice instead.
  CHECK(choose_splits(200, kSlotsPerSm, 128, kSms, 0, shape(true, false)) ==
        choose_splits(200, kSlotsPerSm, 128, kSms, 0, shape(false, false)));
  // A grid that fills the slots is not split.
  CHECK(choose_splits(400, kSlotsPerSm, 128, kSms, 0, shape(true, false)) == 1);
}

TEST_CASE("choose_splits: per-sequence key counts get at least four waves") {
  // B=64 mixed seqused_k (Nk <= 4096, 64 tiles): 512 units, 1.3 waves
  // unsplit; the old rules did not split it.
  CHECK(choose_splits(512, kSlotsPerSm, 64, kSms, 0, shape(true, false)) == 1);
  const int s = choose_splits(512, kSlotsPerSm, 64, kSms, 0, shape(true, true));
  CHECK(s == 4);
  CHECK(waves(512, s) >= 4.0);
  // The fewest splits of at least four waves whose last wave is not mostly
  // empty (600 units: 1.5 waves unsplit).
  const int s600 = choose_splits(600, kSlotsPerSm, 128, kSms, 0, shape(true, true));
  CHECK(waves(600, s600) >= 4.0);
  CHECK(waves(600, s600 - 1) < 4.0);
  CHECK(waves(600, s600) / std::ceil(waves(600, s600)) >= 0.85 * 0.95);
  // B=16 paged: 128 units fit one wave unsplit; the one-wave rule's 3
  // splits (measured 0.160 ms against 0.177-0.217 at 4-16 splits).
  CHECK(choose_splits(128, kSlotsPerSm, 128, kSms, 0, shape(true, true)) == 3);
  // B=1 paged cannot reach four waves within kMaxFwdSplits: one full wave.
  CHECK(choose_splits(8, kSlotsPerSm, 2048, kSms, 0, shape(true, true)) == 49);
  // Grids already past four waves are not split.
  CHECK(choose_splits(4000, kSlotsPerSm, 64, kSms, 0, shape(true, true)) == 1);
}

TEST_CASE("choose_splits: a cap above kMaxFwdSplits lets a few units fill a tile of many CTAs per SM") {
  // cuda_sm80_tc's NarrowPagedMany (16 keys, 7 CTAs per SM: 924 slots), B=1
  // Nk=131072 paged: 8 units, 8192 key tiles. Capped at 64, one wave
  // cannot be filled, and the fewest splits near the best efficiency are 55
  // (440 CTAs).
  SplitShape sh = shape(true, true);
  CHECK(choose_splits(8, 7, 8192, kSms, 0, sh) == 55);
  sh.max_splits = fmha::cuda::kCombineMaxSplits;
  const int s = choose_splits(8, 7, 8192, kSms, 0, sh);
  CHECK(s == 115);  // 920 of 924 slots
  // Requested counts take the same cap; it never passes what the combine merges.
  CHECK(choose_splits(8, 7, 8192, kSms, 1000, sh) == fmha::cuda::kCombineMaxSplits);
  sh.max_splits = 100000;
  CHECK(choose_splits(8, 7, 8192, kSms, 1000, sh) == fmha::cuda::kCombineMaxSplits);
}

TEST_CASE("choose_splits: per-sequence key counts from half a wave unsplit") {
  // The mixed B=64 batch (512 units, 256 key tiles of 16) on the 7-CTA
  // tile: 0.55 of a wave unsplit. Four waves: 8 splits (the one-wave rules
  // took 5, 2.8 waves).
  const int s = choose_splits(512, 7, 256, kSms, 0, shape(true, true));
  CHECK(s == 8);
  CHECK(choose_splits(512, 7, 256, kSms, 0, shape(true, false)) == 5);
  // Under half a wave (B=16 paged, 128 units): the one-wave rule.
  CHECK(choose_splits(128, 7, 512, kSms, 0, shape(true, true)) == 7);
}

TEST_CASE("choose_splits: a tile of one CTA per SM (cuda_sm80_tc's key-warp decode tile)") {
  // B=1 Nk=131072 (8 units, 1024 key tiles of 128): the most splits that
  // keep one wave, 16 (128 of 132 SMs), paged or not.
  CHECK(choose_splits(8, 1, 1024, kSms, 0, shape(true, false)) == 16);
  CHECK(choose_splits(8, 1, 1024, kSms, 0, shape(true, true)) == 16);
  // B=16 Nk=8192 (128 units: one CTA per SM at most) runs unsplit, paged
  // (per-sequence key counts) or not: no combine.
  CHECK(choose_splits(128, 1, 64, kSms, 0, shape(true, false)) == 1);
  CHECK(choose_splits(128, 1, 64, kSms, 0, shape(true, true)) == 1);
  // The mixed B=64 batch (512 units, 32 key tiles): 3.9 waves unsplit, four
  // or more with 2 splits.
  const int s = choose_splits(512, 1, 32, kSms, 0, shape(true, true));
  CHECK(s == 2);
  CHECK(static_cast<double>(512 * s) / kSms >= 4.0);
}

#endif  // FMHA_WITH_CUDA
