// The exact CPU backend (see cpu_attention.h).
//
// One work item = one block of query rows of one (batch, query head). For
// it, the rows' FP32 state (running max m, running sum l, unnormalized
// output o) lives in per-thread scratch while the K/V tiles of the block's
// visible key range stream through, each converted once to FP32. Per tile
// the block does, with s = scale * q . k (soft-capped when asked):
//
//   S   = K_tile . Q^T                      (scores, transposed: keys x rows)
//   S   = -inf outside each row's key range (edge tiles only)
//   m~  = max_j s_j                         seed section 4, tile max
//   m'  = max(m, m~),  alpha = e^(m - m')   seed section 4, new max, rescale
//   P   = e^(S - m'),  l = alpha l + sum P  seed section 4, l update
//   o   = alpha o + P . V_tile              seed section 4, o update
//
// and at the end O = o / l, lse = m + log l.
//
// Layout choices, all in FP32 scratch:
//   Q is stored transposed (head_dim x rows) and pre-multiplied by scale, so
//   the score product runs over rows in its innermost loop and the scores
//   come out keys x rows. Every softmax step below is then an element-wise
//   loop over rows (max, exp, sums), which vectorizes without any horizontal
//   reduction, and K/V tiles are plain row-major copies (no transpose).
//   Both products go through one register-blocked kernel (gemm_rows) whose
//   inner loop is a fixed-width axpy the compiler vectorizes.
//   On the avx512bf16 path (cpu_isa.h) a BF16 query block keeps Q (pair-
//   interleaved, unscaled) and its K tiles raw, and its scores come from
//   bf16_score_tile (vdpbf16ps, FP32 sums) instead; a packed decode block
//   likewise from bf16_dot_tile. The avx512fp16 and amx paths do the same
//   (amx for packed decode blocks only). The neonfp16 path does the same for
//   F16 with FMLAL (cpu_fp16_neon.h; Q^T raw, unscaled). P . V stays FP32.
//   On the amx path a query block with BF16 or F16 q runs both products on
//   AMX tiles (cpu_amx.h) with its scores rows x keys, as a decode block's:
//   S = Q . K_tile^T, the softmax (amx_softmax_tile, AVX-512), then o += P .
//   V_tile, per 32-row chunk, with K and V packed as BF16 into the tiles'
//   pair-interleaved (VNNI) form once per (batch, kv head) before the
//   blocks run (PackLayout, pack_kv_amx).
//
// Decode (few query rows, GQA): when the Nq query rows of all G query heads
// that share a kv head fit in one block (G * Nq <= rows), one work item
// packs them (row r = query head r / Nq of the group, query r % Nq), so each
// K/V element is loaded and converted once per kv head instead of once per
// query head; with up to kDotRows rows the scores are per-key dot products
// rather than a product padded to kMicroCols rows. On the AVX-512 paths a
// block of up to kDecode16Rows rows with F16/BF16 K/V reads the K and V rows
// in place instead of staging them (decode16 below). Such a block's keys are
// also cut into splits (core/key_tiles.h) when there are few kv heads: each
// split writes its unnormalized (m, l, o) to the workspace and a second pass
// merges them in split order, in FP64 (log-sum-exp). The split count depends
// on the problem only, never on the thread count, so any number of threads
// gives bitwise the same result.
//
// Serving layouts (packed q/k, seqused_k, paged K/V): a work item belongs
// to one sequence b, whose extent comes from core/seq_layout.h (seq_extent,
// clamped; page_slot for each paged key), so its query rows, keys and mask
// diagonal are its own; the plan (blocks, splits) is that of the bound
// problem (max_seqlen_q/k), and blocks or splits past a shorter sequence's
// end are empty. The metadata is never read outside those two functions.
//
// Threads: the work items, (batch, query head, query block) or, packed,
// (batch, kv head, key split), go to the pool longest first; each worker
// computes in its own cache-line-aligned slice of the caller's workspace, so
// forward allocates nothing.
#include "backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_amx.h"
#include "backend/cpu/cpu_convert.h"
#include "backend/cpu/cpu_fp16_neon.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/thread_pool.h"
#include "core/arith.h"
#include "core/error.h"
#include "core/key_tiles.h"
#include "core/mask.h"
#include "core/numeric.h"
#include "core/seq_layout.h"

#if defined(__GNUC__)
#define FMHA_CPU_INLINE inline __attribute__((always_inline))
#else
#define FMHA_CPU_INLINE inline
#endif

// On x86-64 with GCC or Clang the work-item function is compiled once per
// path of cpu_isa.h (amx, avx512fp16, avx512bf16, avx512, avx2 + FMA +
// F16C, baseline),
// through target attributes on thin wrappers around one force-inlined body
// templated on the path; forward takes the one active_isa() names (cpuid,
// then FMHA_CPU_ISA: the one dispatch point). Everything the body calls is
// force-inlined too, so the chosen ISA reaches every inner loop, except the
// intrinsic helpers of cpu_convert.h, which carry their own target
// attributes and are called out of line once per row. The build stays
// portable (no -march flag: outside these functions the objects hold
// baseline code only) and needs no ifunc. On AArch64 the same body is
// compiled for the neon and neonfp16 paths, which need no attribute (ASIMD
// is the AArch64 baseline): they differ from baseline in the out-of-line
// kernels they call (cpu_convert.h's FCVTL/FCVTN rows, cpu_fp16_neon.h's
// FMLAL scores). Other targets compile the baseline only.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_X86_VARIANTS 1
#if !defined(FMHA_CPU_AMX_MODEL)
#define FMHA_CPU_TARGET_AMX                                                                               \
  __attribute__((target("amx-tile,amx-bf16,avx512fp16,avx512bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma," \
                        "f16c")))
#define FMHA_CPU_TARGET_AVX512FP16 \
  __attribute__((target("avx512fp16,avx512bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#else  // cpu_amx.h's developer model: these paths run where avx512bf16 does
        // (under avx512fp16 GCC moves 16-bit values with vmovw)
#define FMHA_CPU_TARGET_AMX __attribute__((target("avx512bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define FMHA_CPU_TARGET_AVX512FP16 FMHA_CPU_TARGET_AMX
#endif
#define FMHA_CPU_TARGET_AVX512BF16 \
  __attribute__((target("avx512bf16,avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define FMHA_CPU_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define FMHA_CPU_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define FMHA_CPU_X86_VARIANTS 0
#endif
#if FMHA_CPU_X86_VARIANTS
#include <immintrin.h>
#endif
#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_ARM_VARIANTS 1
#else
#define FMHA_CPU_ARM_VARIANTS 0
#endif

namespace fmha::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kAlignBytes = 64;  // scratch arrays start on a cache line

// ---- tuning ---------------------------------------------------------------

// The register tile of gemm_strip is kRows x kMicroCols FP32 accumulators,
// kRows fixed per ISA variant. Measured on one Zen 4 core (GCC 12, -O3,
// operands in L1):
//   AVX-512 (32 zmm): 4 x 32 = 8 registers, ~100 GFLOP/s (3 x 32: ~55)
//   AVX2    (16 ymm): 3 x 32 = 12 registers, ~80 GFLOP/s (4 x 32 = 16
//                     registers spills: ~57)
// A 16-wide tile let GCC vectorize the wrong loop (10x slower), so the
// width stays 32 and the row count follows the register file. AVX-512 now
// takes 8 x 32 = 16 accumulators: two FMA ports of 4-cycle latency (Sapphire
// Rapids) need 8 independent sums in flight, which 4 x 32 only just had;
// on the Zen 4 core, F32 prefill H8 N2048 D128 causal went from 54.4 to
// 52.1 ms at one thread (a loaded machine: one measurement each). The baseline
// and the neon paths use 3 (not measured on AArch64 hardware, only run under
// qemu: 3 x 32 = 24 accumulators of its 32 128-bit registers).
constexpr int64_t kMicroCols = 32;
constexpr int64_t kRowsAvx512 = 8;
constexpr int64_t kRowsOther = 3;

// Query rows per work item and keys per streamed tile, by head dim. More
// rows amortize the K/V conversion over more of the product; the scratch
// (roughly (2 rows + 2 keys) x head_dim floats) should stay within a core's
// L2. Rows must be a multiple of kMicroCols. bench_cpu (D=128, N=2048,
// causal FP16, one Zen 4 core), rows x keys: 128 x 64 81 GFLOP/s,
// 128 x 128 76, 128 x 32 71, 64 x 64 68, 256 x 64 63. The shapes for
// larger head dims only keep the scratch in L2; they were not tuned.
struct TileShape {
  int64_t rows;
  int64_t keys;
};

// The amx path with packed K/V (PackLayout) streams tiles of kAmxTileKeys
// keys whatever the head dim: it stages nothing per tile, and each tile
// pays per row the horizontal max and sum, alpha and, in P . V, a load and
// a store of o's accumulator tiles, which 128 keys amortize over twice the
// keys of tile_shape's 64.
constexpr int64_t kAmxTileKeys = 128;

constexpr TileShape tile_shape(int64_t head_dim) {
  return head_dim <= 128 ? TileShape{128, 64} : head_dim <= 256 ? TileShape{64, 64} : TileShape{64, 32};
}

// A packed block of at most kDotRows rows computes its scores as per-key
// dot products over kLanes-wide partial sums (dot_strip) instead of the
// product padded to kMicroCols rows: Nq = 1 with a GQA group of 4 would pad
// 4 rows to 32, 8x the score work. The dot strip is kDotKeys keys x
// kDotStripRows rows of accumulators.
constexpr int64_t kDotRows = 16;
// Dot-product blocks stream kDotTileKeys keys per tile (the scratch keeps
// room for the layout's L.keys): fewer keys keep their FP32 K and V tiles
// nearer L1 (32 keys x 128 x 4 B x 2 = 32 KiB at D = 128) between the
// conversion, the scores and P.V, but pay the per-tile rescale of o more
// often. bench_cpu --decode --nk 16384, median ms at 1 / 2 threads, one
// interleaved run, tiles of 16 / 32 / 64 keys:
//   bf16 Nq=1  5.00 / 2.59   5.25 / 2.60   6.18 / 3.27
//   f16  Nq=1  6.48 / 3.36   6.22 / 3.27   6.10 / 3.18
//   f16  Nq=4  14.58 / 7.61  12.59 / 6.56  12.08 / 6.23
// 32 is the compromise (F16 then converted in software, which hides the memory
// latency that smaller tiles save); prefetching 2 or 4 tiles ahead instead
// of 1 was no better.
constexpr int64_t kDotTileKeys = 32;
static_assert(kDotTileKeys <= 32, "a dot-product tile must fit the scratch of every tile_shape");
// decode16 blocks (K/V rows read in place, below) stream 64 keys per tile
// (tile_shape's L.keys where that is smaller): the per-tile work (P's zero
// check, o's rescale, loading and storing o) halves against 32, and nothing
// is staged, so a tile costs no scratch. bench_cpu --decode --nk 2048 (K/V
// in L3), 1 thread, min ms, 32 / 64 keys: f16 0.30 / 0.27, bf16 0.26 / 0.23.
constexpr int64_t kDecode16TileKeys = 64;
// decode16 takes packed blocks of up to 32 rows (Nq 5-8 with G = 4 would
// otherwise pad 20-28 rows to the staged product's 32): bench_cpu --decode
// --nk 2048, F16, 1 thread, min ms staged / decode16: Nq=5 1.71 / 1.10,
// Nq=6 1.81 / 1.29, Nq=8 1.97 / 1.73.
constexpr int64_t kDecode16Rows = 32;
// Build-time switches for measuring decode16 against what it replaced, on
// the machine in question (tools/device/ggml.sh builds the variants):
// FMHA_CPU_DECODE16=0 leaves packed decode blocks on the staged path,
// FMHA_CPU_DECODE16_PREFETCH is how many tiles ahead the software prefetch
// runs: 1 (the next tile), 2, or 0 (none: the hardware prefetchers only).
#if !defined(FMHA_CPU_DECODE16)
#define FMHA_CPU_DECODE16 1
#endif
#if !defined(FMHA_CPU_DECODE16_PREFETCH)
#define FMHA_CPU_DECODE16_PREFETCH 1
#endif
static_assert(FMHA_CPU_DECODE16_PREFETCH >= 0 && FMHA_CPU_DECODE16_PREFETCH <= 2, "a ring of 3 tiles' rows");
constexpr int64_t kLanes = 16;
constexpr int64_t kDotKeys = 2;
constexpr int64_t kDotStripRows = 4;

// Key splits of a packed block: enough work items for kSplitTargetItems
// (batch x kv heads x splits), each split at least kMinSplitTiles key tiles
// of tile_shape's size
// (so the merge and the per-split Q load stay small beside the keys), at
// most kMaxSplits. None of this reads the thread count: results must not
// depend on it.
constexpr int64_t kSplitTargetItems = 128;
constexpr int64_t kMinSplitTiles = 8;
constexpr int64_t kMaxSplits = 64;

// How the work is cut: per (batch, query head, query block), or packed per
// (batch, kv head, key split).
struct Plan {
  bool packed;         // G * Nq rows of a kv group in one block
  int64_t rows;        // rows of a block: G * Nq when packed
  int64_t splits;      // key splits per packed block (1 otherwise)
  int64_t items;       // work items of the first pass
};

// With a serving layout the plan is that of the bound problem (seq_q, seq_k
// = max_seqlen_q/k): sequences shorter than the bound leave some of their
// query blocks or key splits empty. It never reads the metadata, so the
// split count, like the thread count, cannot change the result's bits.
Plan make_plan(const Problem& p) {
  const TileShape t = tile_shape(p.head_dim);
  Plan plan{};
  plan.packed = p.seq_q * p.group_size() <= t.rows;
  plan.splits = 1;
  if (!plan.packed) {
    plan.rows = t.rows;
    plan.items = (p.seq_q + t.rows - 1) / t.rows * p.batch * p.heads_q;
    return plan;
  }
  plan.rows = p.seq_q * p.group_size();
  const int64_t groups = p.batch * p.heads_kv;
  const KeyTiles all = key_tiles(0, p.seq_q - 1, p.seq_k, p.diag_offset, p.window_left, p.window_right, t.keys, 0, 1);
  const int64_t tiles = std::max<int64_t>(all.t_end - all.t_begin, 0);
  const int64_t wanted = (kSplitTargetItems + groups - 1) / groups;
  plan.splits = std::clamp<int64_t>(std::min(wanted, tiles / kMinSplitTiles), 1, kMaxSplits);
  plan.items = groups * plan.splits;
  return plan;
}

// The split partials of a packed block (m, l, then o as rows x head_dim):
// bytes per work item, cache-line aligned.
int64_t partial_bytes(const Problem& p, const Plan& plan) {
  return round_up(plan.rows * (p.head_dim + 2) * static_cast<int64_t>(sizeof(float)), kAlignBytes);
}

// ---- amx path helpers ----------------------------------------------------------

#if FMHA_CPU_AMX
// The amx path's scores where Q or K holds an inf or NaN. amx::split keeps
// such a value in its hi plane with lo = 0, so a cross term (q lo . k hi,
// q hi . k lo) meets 0 * inf = NaN where the product q . k is +-inf (a -inf
// logit is a key of weight 0, fmha.h "Non-finite data"). Only a NaN sum can
// be such a case (the cross terms of finite values are finite): each is
// recomputed here as the FP32 sum of the products of the values hi + lo
// (exact for F16 and BF16 values, and the value itself for an inf or NaN),
// as the FP32 path sums them. S and Q are rows of lds and DP elements, K
// in VNNI form (cpu_amx.h) with ldk columns.
void amx_fix_scores(const uint16_t* q_hi, const uint16_t* q_lo, bool q_split, const uint16_t* k_hi,
                    const uint16_t* k_lo, bool k_split, int64_t ldk, int64_t DP, int64_t lds, float* s, int64_t nr,
                    int64_t bc) {
  auto value = [](const uint16_t* hi, const uint16_t* lo, bool split, int64_t at) {
    return split ? bf16_to_float(hi[at]) + bf16_to_float(lo[at]) : bf16_to_float(hi[at]);
  };
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t j = 0; j < bc; ++j) {
      float* sr = s + r * lds + j;
      if (!std::isnan(*sr)) continue;
      float sum = 0.f;
      for (int64_t d = 0; d < DP; ++d)
        sum += value(q_hi, q_lo, q_split, r * DP + d) * value(k_hi, k_lo, k_split, amx::vnni_at(d, j, ldk));
      *sr = sum;
    }
}
#endif

// ---- per-thread scratch -----------------------------------------------------

// Offsets (bytes, each kAlignBytes-aligned) of the arrays in one thread's
// slice of the workspace.
struct ScratchLayout {
  int64_t rows, keys, dp;  // tile shape; dp = head_dim padded to kMicroCols
  int64_t ls;              // amx path: leading dimension of S and P (max(keys, kAmxTileKeys) + 32)
  int64_t qt, k, v, s, o;  // float arrays
  int64_t pp;              // amx path: P as BF16 hi and lo planes, rows x ls each
  int64_t stage;           // amx path: V rows (hi, lo: keys x dp each), one K row (hi, lo: dp each), BF16
  int64_t row;             // float[dp]: one converted row
  int64_t m, l, alpha, m_safe, tile_max, tile_sum;  // float[rows]
  int64_t lo, hi;          // int64[rows]: each row's key range
  int64_t c0, c1;          // int32[rows]: the range relative to one tile
  int64_t bytes;           // the slice size
};

ScratchLayout scratch_layout(const Problem& p) {
  ScratchLayout s{};
  const TileShape t = tile_shape(p.head_dim);
  s.rows = t.rows;
  s.keys = t.keys;
  s.dp = round_up(p.head_dim, kMicroCols);
  // The amx path's tiles over packed K/V (PackLayout) hold kAmxTileKeys
  // keys and may start one key early (their base is even), one more 32-key
  // step of columns.
  s.ls = std::max(s.keys, kAmxTileKeys) + amx::kBlock;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += round_up(bytes, kAlignBytes);
    return off;
  };
  const int64_t f = sizeof(float);
  s.qt = take(s.dp * s.rows * f);        // Q^T: head_dim x rows (or Q: rows x dp)
  s.k = take(s.keys * s.dp * f);         // K tile: keys x dp
  s.v = take(s.keys * s.dp * f);         // V tile: keys x dp
  s.s = take(s.ls * s.rows * f);         // S, then P: keys x rows (rows x keys: dot, rows x ls: amx blocks)
  s.o = take(s.rows * s.dp * f);         // o: rows x dp
  s.pp = take(2 * s.rows * s.ls * static_cast<int64_t>(sizeof(uint16_t)));
  s.stage = take(2 * (s.keys + 1) * s.dp * static_cast<int64_t>(sizeof(uint16_t)));
  s.row = take(s.dp * f);
  s.m = take(s.rows * f);
  s.l = take(s.rows * f);
  s.alpha = take(s.rows * f);
  s.m_safe = take(s.rows * f);
  s.tile_max = take(s.rows * f);
  s.tile_sum = take(s.rows * f);
  s.lo = take(s.rows * sizeof(int64_t));
  s.hi = take(s.rows * sizeof(int64_t));
  s.c0 = take(s.rows * sizeof(int32_t));
  s.c1 = take(s.rows * sizeof(int32_t));
  s.bytes = at;
  return s;
}

// The amx path's K and V, packed once per (batch, kv head) before the query
// blocks run (pack_kv_amx), instead of once per query block and key tile: a
// causal N = 2048 head with 128-row blocks restaged each key tile ~8 times,
// and the staging (K's transpose into VNNI form, V's pair interleave, the
// F16 hi/lo split) cost about as much as the tile products themselves.
// Per group (batch b, kv head hk), `keys` = round_up(seq_k, 32) + 32 columns
// (a tile's last 32-key step and an even base one key early stay inside),
// zero past the sequence's keys and past head_dim:
//   k_hi, k_lo  K^T in VNNI form, element (d, j) at amx::vnni_at(d, j, keys)
//   v_hi, v_lo  V in VNNI form, element (j, x) at amx::vnni_at(j, x, dp)
//   flags       one byte per key: bit 0 its K row, bit 1 its V row holds an
//               inf or NaN (the hi planes: an F16 inf or NaN stays one)
// The lo planes exist for F16 K/V only (planes = 2). Packing is on for the
// amx path's blocks (query blocks of the padded product, q BF16 or F16, K/V
// BF16, F16 or FP8) while the packs of all groups fit in kMaxPackBytes;
// otherwise every block stages its tiles itself as before.
constexpr int64_t kMaxPackBytes = int64_t{256} << 20;
// Packing runs over (group, chunk of kPackChunkKeys keys), so 16 threads
// have work with 8 kv heads at N = 2048 (even: V's pairs stay in a chunk).
constexpr int64_t kPackChunkKeys = 512;
static_assert(kPackChunkKeys % 2 == 0, "a chunk holds whole key pairs");
// Keys ahead whose K and V rows the packing prefetches (not tuned).
constexpr int64_t kPackPrefetchKeys = 8;

// Whether the amx path's tiles run a problem's query blocks: q BF16 or F16,
// K/V BF16, F16 or FP8, and o F16 or BF16. P goes onto the tiles as BF16
// planes, at most 16 bits (hi + lo: amx_p_one_plane), short of an F32 o's
// precision (tolerance 2e-5 relative), so an F32 o takes the FP32 path: with
// P on the tiles a BF16 problem's F32 o was off by 2e-3 and an F16 one's by
// 2.3e-5 under a v_descale of up to 4 (the Rust and Python bindings' descale
// tests on a Sapphire Rapids CI machine, 2026-12-02).
constexpr bool amx_tiles_run(fmha_dtype q, fmha_dtype kv, fmha_dtype o) {
  return (q == FMHA_DTYPE_BF16 || q == FMHA_DTYPE_F16) &&
         (kv == FMHA_DTYPE_BF16 || kv == FMHA_DTYPE_F16 || kv == FMHA_DTYPE_F8E4M3 || kv == FMHA_DTYPE_F8E5M2) &&
         o != FMHA_DTYPE_F32;
}
// P rounded to BF16 (one plane) instead of split to 16 bits (two): only for
// a BF16 o of a BF16 q or K/V, whose tolerance allows it (bench_cpu H2 N512
// D128 causal BF16: rel-L2 1.6e-3 against 1.3e-3 with FP32 P, the BF16
// tolerance 1e-2).
constexpr bool amx_p_one_plane(fmha_dtype q, fmha_dtype kv, fmha_dtype o) {
  return o == FMHA_DTYPE_BF16 && (q == FMHA_DTYPE_BF16 || kv == FMHA_DTYPE_BF16);
}

struct PackLayout {
  int64_t keys;    // columns of K^T, rows of V (0: no packing)
  int64_t planes;  // 1, or 2 with lo planes
  int64_t chunks;  // pack work items per group: keys cut into kPackChunkKeys
  int64_t k_hi, k_lo, v_hi, v_lo, flags;  // byte offsets in a group's pack
  int64_t bytes;   // one group's pack, cache-line aligned
};

PackLayout pack_layout(const Problem& p, const Plan& plan) {
  PackLayout k{};
#if FMHA_CPU_X86_VARIANTS && FMHA_CPU_AMX
  const fmha_dtype kvt = p.kv_dtype;
  if (active_isa() != CpuIsa::kAmx || plan.packed || !amx_tiles_run(p.dtype, kvt, p.o_dtype)) return k;
  const int64_t dp = round_up(p.head_dim, kMicroCols);
  const int64_t keys = round_up(p.seq_k, amx::kBlock) + amx::kBlock;
  k.planes = kvt == FMHA_DTYPE_F16 ? 2 : 1;
  int64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const int64_t off = at;
    at += round_up(bytes, kAlignBytes);
    return off;
  };
  const int64_t plane = keys * dp * static_cast<int64_t>(sizeof(uint16_t));
  k.k_hi = take(plane);
  k.k_lo = k.planes == 2 ? take(plane) : k.k_hi;
  k.v_hi = take(plane);
  k.v_lo = k.planes == 2 ? take(plane) : k.v_hi;
  k.flags = take(keys);
  k.bytes = at;
  if (k.bytes * p.batch * p.heads_kv > kMaxPackBytes) return PackLayout{};
  k.keys = keys;
  k.chunks = (keys + kPackChunkKeys - 1) / kPackChunkKeys;
#else
  (void)p, (void)plan;
#endif
  return k;
}

template <typename T>
T* at_offset(void* base, int64_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// ---- element access -----------------------------------------------------------

// Every FP8 byte decoded once (core/numeric.h): a load is a table lookup.
struct Fp8Tables {
  float e4m3[256];
  float e5m2[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = fp8_e4m3_to_float(static_cast<uint8_t>(i));
      e5m2[i] = fp8_e5m2_to_float(static_cast<uint8_t>(i));
    }
  }
};
const Fp8Tables kFp8;

// One element of a bias-like operand as float.
FMHA_CPU_INLINE float load_scalar(const void* src, int64_t at, fmha_dtype t) {
  switch (t) {
    case FMHA_DTYPE_F32: return static_cast<const float*>(src)[at];
    case FMHA_DTYPE_BF16: return bf16_to_float(static_cast<const uint16_t*>(src)[at]);
    default: return half_to_float(static_cast<const uint16_t*>(src)[at]);
  }
}

// dst[0..n) = float(src[i * stride]). The stride-1 loops vectorize (the
// conversions in numeric.h are branch-free); any other stride is a gather.
// Contiguous F16 rows convert in hardware on the avx2, avx512 and neon
// paths (cpu_convert.h, bit for bit the software result).
template <CpuIsa kIsa>
FMHA_CPU_INLINE void load_row(const void* src, int64_t stride, int64_t n, fmha_dtype t, float* dst) {
#if FMHA_CPU_NEON_F16
  if constexpr (isa_is_arm(kIsa))
    if (t == FMHA_DTYPE_F16 && stride == 1) {
      f16_to_f32_neon(static_cast<const uint16_t*>(src), n, dst);
      return;
    }
#endif
#if FMHA_CPU_HW_F16
  if constexpr (isa_is_x86(kIsa))
    if (t == FMHA_DTYPE_F16 && stride == 1) {
      if constexpr (kIsa >= CpuIsa::kAvx512)
        f16_to_f32_avx512(static_cast<const uint16_t*>(src), n, dst);
      else
        f16_to_f32_f16c(static_cast<const uint16_t*>(src), n, dst);
      return;
    }
#endif
  switch (t) {
    case FMHA_DTYPE_F32: {
      const float* s = static_cast<const float*>(src);
      if (stride == 1)
        std::memcpy(dst, s, n * sizeof(float));
      else
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      break;
    }
    case FMHA_DTYPE_BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      if (stride == 1)
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      else
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i * stride]);
      break;
    }
    case FMHA_DTYPE_F8E4M3:
    case FMHA_DTYPE_F8E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      const float* table = t == FMHA_DTYPE_F8E4M3 ? kFp8.e4m3 : kFp8.e5m2;
      for (int64_t i = 0; i < n; ++i) dst[i] = table[s[i * stride]];
      break;
    }
    default: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      if (stride == 1)
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i]);
      else
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i * stride]);
      break;
    }
  }
}

// dst[i * stride] = src[i] * mul, rounded to nearest even for F16/BF16;
// contiguous F16 rows in hardware on the avx2, avx512 and neon paths, as in
// load_row. (BF16 stays in software: vcvtneps2bf16 flushes subnormals.)
template <CpuIsa kIsa>
FMHA_CPU_INLINE void store_row(const float* src, float mul, int64_t n, fmha_dtype t, void* dst,
                               int64_t stride) {
#if FMHA_CPU_NEON_F16
  if constexpr (isa_is_arm(kIsa))
    if (t == FMHA_DTYPE_F16 && stride == 1) {
      f32_to_f16_neon(src, mul, n, static_cast<uint16_t*>(dst));
      return;
    }
#endif
#if FMHA_CPU_HW_F16
  if constexpr (isa_is_x86(kIsa))
    if (t == FMHA_DTYPE_F16 && stride == 1) {
      if constexpr (kIsa >= CpuIsa::kAvx512)
        f32_to_f16_avx512(src, mul, n, static_cast<uint16_t*>(dst));
      else
        f32_to_f16_f16c(src, mul, n, static_cast<uint16_t*>(dst));
      return;
    }
#endif
  switch (t) {
    case FMHA_DTYPE_F32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i] * mul;
      break;
    }
    case FMHA_DTYPE_BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_bf16(src[i] * mul);
      break;
    }
    default: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_half(src[i] * mul);
      break;
    }
  }
}

// A hint to bring the cache line of p in for reading; nothing where the
// compiler has no such builtin.
FMHA_CPU_INLINE void prefetch_read(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 3);
#else
  (void)p;
#endif
}

// ---- math -----------------------------------------------------------------------

// e^x for x <= 0 (the only arguments the softmax makes: s - m' <= 0), with
// e^-inf = 0 exactly, so masked scores and an empty running state (m = -inf)
// contribute nothing and never form -inf - -inf, and e^NaN = NaN, so a NaN
// logit reaches l (and so O and lse). Branch-free so the loops over it
// vectorize; libm's expf does not, and would cost as much as the two
// products together. Accuracy: degree-7 Taylor on |r| <= ln2/2 (truncation
// < 6e-9 relative), measured <= 1.2 ulp on [-87.3, 0]. Results below 2^-126
// flush to 0, which is below the resolution of any sum they join (the row
// max contributes 1).
FMHA_CPU_INLINE float exp_nonpositive(float x) {
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kMin = -87.33654475f;  // ln(2^-126)
  constexpr float kRound = 12582912.f;   // 1.5 * 2^23: adding it rounds to an integer
  // Clamped into [kMin, 0] with NaN sent to kMin, so the conversion of n
  // to int below is always defined (a NaN or out-of-range float to int is
  // undefined behaviour); the result for NaN is picked at the end.
  const float xc = x >= kMin ? (x <= 0.f ? x : 0.f) : kMin;
  const float n = (xc * kLog2e + kRound) - kRound;  // nearest integer, in [-126, 0]
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;   // |r| <= ln2/2
  float poly = 1.f / 5040.f;
  poly = poly * r + 1.f / 720.f;
  poly = poly * r + 1.f / 120.f;
  poly = poly * r + 1.f / 24.f;
  poly = poly * r + 1.f / 6.f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.f;
  poly = poly * r + 1.f;
  const float two_n = bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return x >= kMin ? poly * two_n : (x < kMin ? 0.f : x);  // x NaN: NaN
}

// tanh for the softcap, branch-free: (1 - e^-2|x|) / (1 + e^-2|x|) away
// from 0, a short odd series for |x| < 0.125 where that would cancel
// (truncation ~1e-9 relative). Measured: <= 2.7e-7 relative, <= 9e-8
// absolute, so the capped logit is off by at most ~1e-7 * softcap.
FMHA_CPU_INLINE float tanh_softcap(float x) {
  const float a = std::fabs(x);
  const float e = exp_nonpositive(-2.f * a);
  const float big = (1.f - e) / (1.f + e);
  const float a2 = a * a;
  const float small = a * (1.f + a2 * (-1.f / 3.f + a2 * (2.f / 15.f + a2 * (-17.f / 315.f))));
  const float t = a < 0.125f ? small : big;
  return std::copysign(t, x);
}

// ---- the register-blocked product ------------------------------------------

// One strip of kRows rows of c:
//   c[i][j] = (kRescale ? row_scale[i] * c[i][j] : 0) + sum_k a(i, k) * b[k][j]
// for i < kRows and j < n (a multiple of kMicroCols), with a(i, k) =
// a[i * a_row + k * a_k] (so either layout of the scores works as the left
// operand) and b, c row-major. Each kRows x kMicroCols block of c is held in
// registers over the whole k loop; per k the innermost loop is a
// fixed-width axpy of one row of b, which the compiler turns into
// full-width FMAs with a(i, k) broadcast.
template <int64_t kRows, bool kRescale>
FMHA_CPU_INLINE void gemm_strip(const float* a, int64_t a_row, int64_t a_k, const float* b,
                                int64_t ldb, float* c, int64_t ldc, int64_t n, int64_t k,
                                const float* row_scale) {
  for (int64_t j = 0; j < n; j += kMicroCols) {
    float acc[kRows][kMicroCols];
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t x = 0; x < kMicroCols; ++x)
        acc[r][x] = kRescale ? row_scale[r] * c[r * ldc + j + x] : 0.f;
    const float* bj = b + j;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* bk = bj + kk * ldb;
      for (int64_t r = 0; r < kRows; ++r) {
        const float ar = a[r * a_row + kk * a_k];
        for (int64_t x = 0; x < kMicroCols; ++x) acc[r][x] += ar * bk[x];
      }
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t x = 0; x < kMicroCols; ++x) c[r * ldc + j + x] = acc[r][x];
  }
}

// gemm_strip over rows [0, m): strips of kRows, then single rows.
template <int64_t kRows, bool kRescale>
FMHA_CPU_INLINE void gemm_rows(const float* a, int64_t a_row, int64_t a_k, const float* b,
                               int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                               int64_t k, const float* row_scale) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    gemm_strip<kRows, kRescale>(a + i * a_row, a_row, a_k, b, ldb, c + i * ldc, ldc, n, k,
                                kRescale ? row_scale + i : nullptr);
  for (; i < m; ++i)
    gemm_strip<1, kRescale>(a + i * a_row, a_row, a_k, b, ldb, c + i * ldc, ldc, n, k,
                            kRescale ? row_scale + i : nullptr);
}

// s[r * lds + j] = sum_d k[j * ldk + d] * q[r * ldq + d] for j < kKeys keys
// and r < kR rows, d over [0, dp) (dp a multiple of kLanes; the padding of k
// and q is zero). Each (key, row) sums kLanes-wide partial products, then
// folds the lanes in a fixed tree, so the result does not depend on the
// caller.
//
// With GCC 12+ or Clang the lanes are a generic vector type, which keeps
// the accumulators in registers (fixed-width float arrays, the gemm_strip
// idiom, stayed in memory here because of the fold: every FMA went through
// the stack) and folds with two half-width adds; elsewhere, plain arrays.
// Both fold in the same order.
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
typedef float LanesF __attribute__((vector_size(kLanes * sizeof(float))));
typedef float HalfF __attribute__((vector_size(kLanes / 2 * sizeof(float))));
typedef float QuarterF __attribute__((vector_size(kLanes / 4 * sizeof(float))));

// Vectors go by reference only: passed by value they change the calling
// convention between the ISA variants (GCC's -Wpsabi).
FMHA_CPU_INLINE void load_lanes(const float* p, LanesF& v) { std::memcpy(&v, p, sizeof v); }

// (h[x] = a[x] + a[x + 8], q[x] = h[x] + h[x + 4]), then (q0 + q2) + (q1 + q3).
FMHA_CPU_INLINE float fold_lanes(const LanesF& a) {
  const HalfF h = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
  const QuarterF q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (q[0] + q[2]) + (q[1] + q[3]);
}

template <int64_t kKeys, int64_t kR>
FMHA_CPU_INLINE void dot_strip(const float* k, int64_t ldk, const float* q, int64_t ldq, float* s, int64_t lds,
                               int64_t dp) {
  static_assert(kLanes == 16, "fold_lanes is written for 16 lanes");
  LanesF acc[kKeys][kR];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) acc[j][r] = LanesF{};
  for (int64_t d = 0; d < dp; d += kLanes) {
    LanesF kv[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) load_lanes(k + j * ldk + d, kv[j]);
    for (int64_t r = 0; r < kR; ++r) {
      LanesF qv;
      load_lanes(q + r * ldq + d, qv);
      for (int64_t j = 0; j < kKeys; ++j) acc[j][r] += kv[j] * qv;
    }
  }
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) s[r * lds + j] = fold_lanes(acc[j][r]);
}
#else
template <int64_t kKeys, int64_t kR>
FMHA_CPU_INLINE void dot_strip(const float* k, int64_t ldk, const float* q, int64_t ldq, float* s, int64_t lds,
                               int64_t dp) {
  static_assert(kLanes == 16, "the fold below is written for 16 lanes");
  float acc[kKeys][kR][kLanes];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r)
      for (int64_t x = 0; x < kLanes; ++x) acc[j][r][x] = 0.f;
  for (int64_t d = 0; d < dp; d += kLanes)
    for (int64_t j = 0; j < kKeys; ++j)
      for (int64_t r = 0; r < kR; ++r)
        for (int64_t x = 0; x < kLanes; ++x) acc[j][r][x] += k[j * ldk + d + x] * q[r * ldq + d + x];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) {
      const float* a = acc[j][r];
      float h8[8], h4[4];
      for (int64_t x = 0; x < 8; ++x) h8[x] = a[x] + a[x + 8];
      for (int64_t x = 0; x < 4; ++x) h4[x] = h8[x] + h8[x + 4];
      s[r * lds + j] = (h4[0] + h4[2]) + (h4[1] + h4[3]);
    }
}
#endif

// dot_strip over keys [0, nk) and rows [0, nr): the scores rows x keys.
FMHA_CPU_INLINE void dot_scores(const float* k, int64_t ldk, const float* q, int64_t ldq, float* s, int64_t lds,
                                int64_t nk, int64_t nr, int64_t dp) {
  int64_t j = 0;
  for (; j + kDotKeys <= nk; j += kDotKeys) {
    int64_t r = 0;
    for (; r + kDotStripRows <= nr; r += kDotStripRows)
      dot_strip<kDotKeys, kDotStripRows>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp);
    for (; r < nr; ++r) dot_strip<kDotKeys, 1>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp);
  }
  for (; j < nk; ++j) {
    int64_t r = 0;
    for (; r + kDotStripRows <= nr; r += kDotStripRows)
      dot_strip<1, kDotStripRows>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp);
    for (; r < nr; ++r) dot_strip<1, 1>(k + j * ldk, ldk, q + r * ldq, ldq, s + r * lds + j, lds, dp);
  }
}

// The softmax steps of one tile (seed section 4, as in run_block) for
// scores stored rows x keys (row r at s + r * lds, keys [0, bc)): every loop
// runs along one row's keys, and the max and the sum are taken in kLanes
// lanes folded in a fixed order (a tree). Each row is soft-capped, gets the bias
// and ALiBi terms (`extra`, null when the problem has neither) and, when
// `edge`, keys outside row r's [lo[r], hi[r]) are masked, in that order.
template <class Extra>
FMHA_CPU_INLINE void softmax_rows(float* s, int64_t lds, int64_t nr, int64_t bc, int64_t j0, bool edge,
                                  const int64_t* lo, const int64_t* hi, float softcap, float inv_softcap,
                                  const Extra* extra, float* m, float* l, float* alpha) {
  for (int64_t r = 0; r < nr; ++r) {
    float* sr = s + r * lds;
    if (softcap != 0.f)
      for (int64_t j = 0; j < bc; ++j) sr[j] = softcap * tanh_softcap(sr[j] * inv_softcap);
    if (extra != nullptr) extra->add(sr, 1, r, j0, bc);
    if (edge) {
      const int64_t c0 = std::clamp<int64_t>(lo[r] - j0, 0, bc);
      const int64_t c1 = std::clamp<int64_t>(hi[r] - j0, 0, bc);
      for (int64_t j = 0; j < bc; ++j) sr[j] = (j >= c0 && j < c1) ? sr[j] : -kInf;
    }
    float lane[kLanes];
    for (int64_t x = 0; x < kLanes; ++x) lane[x] = -kInf;
    int64_t j = 0;
    for (; j + kLanes <= bc; j += kLanes)
      for (int64_t x = 0; x < kLanes; ++x) lane[x] = sr[j + x] > lane[x] ? sr[j + x] : lane[x];
    float tile_max = -kInf;
    for (; j < bc; ++j) tile_max = sr[j] > tile_max ? sr[j] : tile_max;
    // The lanes fold as a tree (halves, then quarters, ...; fold_lanes'
    // order for the sum below): a serial fold is a chain of kLanes
    // dependent steps per row, which a block of 128 rows (the amx path)
    // pays in full.
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
      for (int64_t x = 0; x < w; ++x) lane[x] = lane[x + w] > lane[x] ? lane[x + w] : lane[x];
    tile_max = lane[0] > tile_max ? lane[0] : tile_max;
    // m' = max(m, m~), alpha = e^(m - m'), with 0 as the subtrahend while
    // m' = -inf (see run_block).
    const float mn = m[r] > tile_max ? m[r] : tile_max;
    const float ms = mn == -kInf ? 0.f : mn;
    alpha[r] = exp_nonpositive(m[r] - ms);
    m[r] = mn;
    for (int64_t x = 0; x < kLanes; ++x) lane[x] = 0.f;
    j = 0;
    for (; j + kLanes <= bc; j += kLanes)
      for (int64_t x = 0; x < kLanes; ++x) {
        const float e = exp_nonpositive(sr[j + x] - ms);
        sr[j + x] = e;
        lane[x] += e;
      }
    float sum = 0.f;
    for (; j < bc; ++j) {
      const float e = exp_nonpositive(sr[j] - ms);
      sr[j] = e;
      sum += e;
    }
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    {  // in registers (through the stack, the tree stalls on store forwarding)
      LanesF v;
      load_lanes(lane, v);
      sum += fold_lanes(v);
    }
#else
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
      for (int64_t x = 0; x < w; ++x) lane[x] += lane[x + w];
    sum += lane[0];
#endif
    l[r] = alpha[r] * l[r] + sum;
  }
}

// ---- BF16 scores with vdpbf16ps (the avx512bf16 path) ----------------------------

#if FMHA_CPU_X86_VARIANTS
// S = scale * K_tile . Q^T for BF16 operands, keys x rows, on the
// avx512bf16 path: vdpbf16ps multiplies BF16 pairs exactly and adds them
// into FP32 lanes (round to nearest even, subnormals flushed: a term below
// 2^-126 is far below any score's resolution), so the scores keep FP32
// accumulation and Q and K need no conversion at all. Q is not pre-scaled
// (scale * q rounded to BF16 would lose bits); the scale multiplies the
// FP32 sums instead.
//
// Operands: K row j at k + j * ldk, raw BF16, `pairs` element pairs (an odd
// head_dim's last pair padded with 0); Q pair-interleaved, qp[p * 2 * ldq +
// 2 * r + e] = q[row r][2p + e], ldq >= np rows, np a multiple of 32 (rows
// past the block's are 0). A strip of kKeys keys x 32 rows keeps 2 * kKeys
// zmm accumulators over the whole pair loop; per pair it broadcasts each
// key's pair and multiplies it against 32 rows' pairs.
template <int64_t kKeys>
FMHA_CPU_TARGET_AVX512BF16 FMHA_CPU_INLINE void bf16_score_strip(const uint16_t* k, int64_t ldk,
                                                                 const uint16_t* qp, int64_t ldq, float* s,
                                                                 int64_t lds, int64_t np, int64_t pairs,
                                                                 float scale) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < np; r += 32) {
    __m512 acc[kKeys][2];
    for (int64_t j = 0; j < kKeys; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* qrow = qp + p * 2 * ldq + 2 * r;
      const __m512i b0 = _mm512_loadu_si512(qrow);
      const __m512i b1 = _mm512_loadu_si512(qrow + 32);
      for (int64_t j = 0; j < kKeys; ++j) {
        uint32_t pair;
        std::memcpy(&pair, k + j * ldk + 2 * p, sizeof pair);
        const __m512i a = _mm512_set1_epi32(static_cast<int>(pair));
        acc[j][0] = _mm512_dpbf16_ps(acc[j][0], (__m512bh)a, (__m512bh)b0);
        acc[j][1] = _mm512_dpbf16_ps(acc[j][1], (__m512bh)a, (__m512bh)b1);
      }
    }
    for (int64_t j = 0; j < kKeys; ++j) {
      _mm512_storeu_ps(s + j * lds + r, _mm512_mul_ps(acc[j][0], vscale));
      _mm512_storeu_ps(s + j * lds + r + 16, _mm512_mul_ps(acc[j][1], vscale));
    }
  }
}

// Keys [0, nk) in strips of 4, then one at a time. Out of line: the
// caller (run_block) is compiled for the avx512bf16 path only through its
// wrapper, so the intrinsics live in a function carrying the target itself.
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512BF16 void bf16_score_tile(const uint16_t* k, int64_t ldk,
                                                                       const uint16_t* qp, int64_t ldq,
                                                                       float* s, int64_t lds, int64_t nk,
                                                                       int64_t np, int64_t pairs, float scale) {
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) bf16_score_strip<4>(k + j * ldk, ldk, qp, ldq, s + j * lds, lds, np, pairs, scale);
  for (; j < nk; ++j) bf16_score_strip<1>(k + j * ldk, ldk, qp, ldq, s + j * lds, lds, np, pairs, scale);
}

// Rows a decode kernel prefetches as it goes: with key j of its own tile it
// asks for row j of k and of v (`bytes` each; rows [0, n)), which are the
// next tile's (see decode16 below). n = 0: none.
struct Prefetch {
  const uint16_t* const* k;
  const uint16_t* const* v;
  int64_t n;
  int64_t bytes;

  FMHA_CPU_INLINE void rows(int64_t j0, int64_t count) const {
    for (int64_t j = j0; j < std::min(j0 + count, n); ++j)
      for (int64_t at = 0; at < bytes; at += kAlignBytes) {
        prefetch_read(reinterpret_cast<const char*>(k[j]) + at);
        prefetch_read(reinterpret_cast<const char*>(v[j]) + at);
      }
  }
};

// The dot-product form for packed decode blocks (dot_scores' layout: S rows
// x keys), on raw BF16: s[r * lds + j] = scale * sum_d k[j][d] * q[r][d],
// K row j at k[j] (a row pointer per key: rows read where they are, see
// decode16 below, or from a staged tile) and Q row r at q + r * ldq, both
// zero past head_dim up to dp (a multiple of 32) or dp == head_dim. Each
// (key, row) sums 16 FP32 lanes of vdpbf16ps pair products, folded in
// dot_strip's fixed order.
// In registers: h[x] = a[x] + a[x + 8], q[x] = h[x] + h[x + 4], then
// (q0 + q2) + (q1 + q3). (GCC 12's extract intrinsics pass an undefined
// operand that -Wmaybe-uninitialized reports once inlined: the header's
// doing.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE float fold_zmm(__m512 a) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  float x[4];
  _mm_storeu_ps(x, q);
  return (x[0] + x[2]) + (x[1] + x[3]);
}

// fold_zmm of 16 accumulators at once, a[j][r] for 4 keys x 4 rows, with
// the same additions in the same order, as a transpose: 128-bit lane r of
// the result holds rows r's sums of keys 0..3 (stored as 4 floats). The
// steps halve the width each time (h = low + high half, q = h's halves,
// then (q0 + q2) + (q1 + q3)), pairing vectors so every add works on 16
// useful lanes: 45 shuffles and adds for 16 sums, not ~10 per sum.
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE __m512 fold_zmm_4x4(const __m512 (&a)[4][4]) {
  __m512 z[4];
  for (int j = 0; j < 4; ++j) {
    // h of rows (0, 1) and (2, 3): [h0 lo, h0 hi, h1 lo, h1 hi] in 128-bit lanes.
    const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a[j][0], a[j][1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a[j][0], a[j][1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 y = _mm512_add_ps(_mm512_shuffle_f32x4(a[j][2], a[j][3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(a[j][2], a[j][3], _MM_SHUFFLE(3, 2, 3, 2)));
    // q of rows 0..3, one per 128-bit lane.
    z[j] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Per 128-bit lane (row): [q0 + q2, q1 + q3] of keys (0, 1), then (2, 3).
  const __m512 v0 = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 v1 = _mm512_add_ps(_mm512_shuffle_ps(z[2], z[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_ps(z[2], z[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Row r's 4 sums (lane r of fold_zmm_4x4) times scale to s[r * lds + 0..3].
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE void store_4x4(__m512 f, float scale, float* s, int64_t lds) {
  f = _mm512_mul_ps(f, _mm512_set1_ps(scale));
  _mm_storeu_ps(s, _mm512_castps512_ps128(f));
  _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(f, 1));
  _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(f, 2));
  _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(f, 3));
}

template <int64_t kKeys, int64_t kR>
FMHA_CPU_TARGET_AVX512BF16 FMHA_CPU_INLINE void bf16_dot_strip(const uint16_t* const* k, const uint16_t* q,
                                                               int64_t ldq, float* s, int64_t lds, int64_t dp,
                                                               float scale) {
  __m512 acc[kKeys][kR];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) acc[j][r] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dp; d += 32) {
    __m512i kv[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) kv[j] = _mm512_loadu_si512(k[j] + d);
    for (int64_t r = 0; r < kR; ++r) {
      const __m512i qv = _mm512_loadu_si512(q + r * ldq + d);
      for (int64_t j = 0; j < kKeys; ++j) acc[j][r] = _mm512_dpbf16_ps(acc[j][r], (__m512bh)kv[j], (__m512bh)qv);
    }
  }
  if constexpr (kKeys == 4 && kR == 4) {
    store_4x4(fold_zmm_4x4(acc), scale, s, lds);
    return;
  }
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) s[r * lds + j] = scale * fold_zmm(acc[j][r]);
}

// bf16_dot_strip over keys [0, nk) and rows [0, nr), as dot_scores.
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512BF16 void bf16_dot_tile(const uint16_t* const* k, const uint16_t* q,
                                                                         int64_t ldq, float* s, int64_t lds,
                                                                         int64_t nk, int64_t nr, int64_t dp,
                                                                         float scale, const Prefetch& ahead) {
  int64_t j = 0;
  for (; j + 4 <= nk; j += 4) {  // 4 x 4 accumulators + 4 K vectors
    ahead.rows(j, 4);
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) bf16_dot_strip<4, 4>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
    for (; r < nr; ++r) bf16_dot_strip<4, 1>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
  }
  for (; j < nk; ++j) {
    ahead.rows(j, j + 1 < nk ? 1 : ahead.n);  // the last key: the rest of the next tile
    int64_t r = 0;
    for (; r + kDotStripRows <= nr; r += kDotStripRows)
      bf16_dot_strip<1, kDotStripRows>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
    for (; r < nr; ++r) bf16_dot_strip<1, 1>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, dp, scale);
  }
}

// ---- decode16: packed decode blocks on F16/BF16 K and V rows in place ----------
//
// A packed decode block (G * Nq rows, few) does ~4 multiply-adds per K or V
// element, so staging each tile as FP32 (convert, store, load again, and
// scan V for non-finite values) cost as much as the products (bench_cpu
// --decode: ~115 cycles per key at one thread where the multiply-adds need
// ~64). On the AVX-512 paths, with head_dim a multiple of 32 and K/V rows
// contiguous, the block instead reads each key's K and V row where it lies
// (one row pointer per key, so dense, packed and paged layouts alike) and
// widens it in registers (vcvtph2ps; BF16 by a 16-bit shift), once per
// strip of rows. Within a tile the sums are those of the staged path, term
// for term and in the same order (the same lanes and folds for the scores,
// the same FMA chain over keys for P . V); the tiles are longer
// (kDecode16TileKeys), which moves the points where o is rescaled.

// 16 elements of a 16-bit row as FP32 (both conversions exact).
template <bool kBf16>
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE __m512 decode16_load(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kBf16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else
    return _mm512_cvtph_ps(h);
}

// s[r * lds + j] = sum_d k[j][d] * q[r][d] for kKeys keys and kR rows, d
// over [0, n) (n a multiple of 16): dot_strip's lanes and fold, with Q the
// block's FP32 rows (scaled) and K widened from 16 bits as it is loaded.
template <bool kBf16, int64_t kKeys, int64_t kR>
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE void decode16_dot_strip(const uint16_t* const* k, const float* q,
                                                               int64_t ldq, float* s, int64_t lds, int64_t n) {
  __m512 acc[kKeys][kR];
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) acc[j][r] = _mm512_setzero_ps();
  for (int64_t d = 0; d < n; d += 16) {
    __m512 kv[kKeys];
    for (int64_t j = 0; j < kKeys; ++j) kv[j] = decode16_load<kBf16>(k[j] + d);
    for (int64_t r = 0; r < kR; ++r) {
      const __m512 qv = _mm512_loadu_ps(q + r * ldq + d);
      for (int64_t j = 0; j < kKeys; ++j) acc[j][r] = _mm512_fmadd_ps(kv[j], qv, acc[j][r]);
    }
  }
  if constexpr (kKeys == 4 && kR == 4) {
    store_4x4(fold_zmm_4x4(acc), 1.f, s, lds);
    return;
  }
  for (int64_t j = 0; j < kKeys; ++j)
    for (int64_t r = 0; r < kR; ++r) s[r * lds + j] = fold_zmm(acc[j][r]);
}

template <bool kBf16>
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512 void decode16_dot_tile(const uint16_t* const* k, const float* q,
                                                                          int64_t ldq, float* s, int64_t lds,
                                                                          int64_t nk, int64_t nr, int64_t n,
                                                                          const Prefetch& ahead) {
  constexpr int64_t kKeys = 4;  // 4 x 4 accumulators + 4 K vectors: 21 of the 32 zmm
  int64_t j = 0;
  for (; j + kKeys <= nk; j += kKeys) {
    ahead.rows(j, kKeys);
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) decode16_dot_strip<kBf16, kKeys, 4>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, n);
    for (; r < nr; ++r) decode16_dot_strip<kBf16, kKeys, 1>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, n);
  }
  for (; j < nk; ++j) {
    ahead.rows(j, j + 1 < nk ? 1 : ahead.n);  // the last key: the rest of the next tile
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) decode16_dot_strip<kBf16, 1, 4>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, n);
    for (; r < nr; ++r) decode16_dot_strip<kBf16, 1, 1>(k + j, q + r * ldq, ldq, s + r * lds + j, lds, n);
  }
}

// Whether P (rows x keys, lds apart) holds a zero weight.
[[maybe_unused]] __attribute__((noinline)) FMHA_CPU_TARGET_AVX512 bool decode16_any_zero(const float* p, int64_t lds,
                                                                                         int64_t nr, int64_t nk) {
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 any = 0;
  for (int64_t r = 0; r < nr; ++r) {
    const float* pr = p + r * lds;
    int64_t j = 0;
    for (; j + 16 <= nk; j += 16) any |= _mm512_cmp_ps_mask(_mm512_loadu_ps(pr + j), zero, _CMP_EQ_OQ);
    if (j < nk) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (nk - j)) - 1);
      any |= _mm512_mask_cmp_ps_mask(tail, _mm512_maskz_loadu_ps(tail, pr + j), zero, _CMP_EQ_OQ);
    }
  }
  return any != 0;
}

// o[r][x0 + x] = alpha[r] * o[r][x0 + x] + sum_j p[r][j] * v[j][x0 + x] for
// kR rows and kC x 16 columns: gemm_strip's order (the old o scaled first,
// then one FMA per key in key order), with the accumulators in registers
// over the tile's keys and each V vector widened once for the kR rows.
template <bool kBf16, int64_t kR, int64_t kC>
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE void decode16_pv_strip(const float* p, int64_t ldp,
                                                              const uint16_t* const* v, int64_t x0, float* o,
                                                              int64_t ldo, const float* alpha, int64_t nk) {
  __m512 acc[kR][kC];
  for (int64_t r = 0; r < kR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    for (int64_t c = 0; c < kC; ++c) acc[r][c] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * ldo + x0 + 16 * c));
  }
  for (int64_t j = 0; j < nk; ++j) {
    __m512 vv[kC];
    for (int64_t c = 0; c < kC; ++c) vv[c] = decode16_load<kBf16>(v[j] + x0 + 16 * c);
    for (int64_t r = 0; r < kR; ++r) {
      const __m512 pr = _mm512_set1_ps(p[r * ldp + j]);
      for (int64_t c = 0; c < kC; ++c) acc[r][c] = _mm512_fmadd_ps(pr, vv[c], acc[r][c]);
    }
  }
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t c = 0; c < kC; ++c) _mm512_storeu_ps(o + r * ldo + x0 + 16 * c, acc[r][c]);
}

template <bool kBf16, int64_t kR>
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE void decode16_pv_rows(const float* p, int64_t ldp, const uint16_t* const* v,
                                                             float* o, int64_t ldo, const float* alpha, int64_t nk,
                                                             int64_t n) {
  int64_t x = 0;
  for (; x + 64 <= n; x += 64) decode16_pv_strip<kBf16, kR, 4>(p, ldp, v, x, o, ldo, alpha, nk);
  if (x < n) decode16_pv_strip<kBf16, kR, 2>(p, ldp, v, x, o, ldo, alpha, nk);  // n % 64 == 32
}

// o = alpha o + P . V_tile for the block's nr rows, columns [0, n) (n a
// multiple of 32), P rows x keys (ldp apart), V rows at v[j].
template <bool kBf16>
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512 void decode16_pv_tile(const float* p, int64_t ldp,
                                                                         const uint16_t* const* v, float* o,
                                                                         int64_t ldo, const float* alpha, int64_t nk,
                                                                         int64_t nr, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= nr; r += 4) decode16_pv_rows<kBf16, 4>(p + r * ldp, ldp, v, o + r * ldo, ldo, alpha + r, nk, n);
  switch (nr - r) {
    case 3: decode16_pv_rows<kBf16, 3>(p + r * ldp, ldp, v, o + r * ldo, ldo, alpha + r, nk, n); break;
    case 2: decode16_pv_rows<kBf16, 2>(p + r * ldp, ldp, v, o + r * ldo, ldo, alpha + r, nk, n); break;
    case 1: decode16_pv_rows<kBf16, 1>(p + r * ldp, ldp, v, o + r * ldo, ldo, alpha + r, nk, n); break;
    default: break;
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// ---- the amx path's softmax ------------------------------------------------------

#if FMHA_CPU_X86_VARIANTS && FMHA_CPU_AMX
// (GCC 12's intrinsics pass undefined operands that -Wmaybe-uninitialized
// reports once inlined, as for fold_zmm above.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// e^x on 16 lanes for x <= 0 (and NaN), as 2^t with t = x log2 e: n =
// round(t), f = t - n in [-1/2, 1/2] (exact), 2^f by a degree-5 polynomial
// (a relative-error fit on [-1/2, 1/2]: 2.6e-7 in exact arithmetic, 3.5e-7
// measured in FP32 Horner: far below P's own rounding to 8 or 16 bits; the
// degree-6 fit, 9.3e-8, changed no test's error), times 2^n by vscalefps.
// t's rounding adds |t| 2^-24 relative, which only weights far below the
// row max's 1 see.
// t is clamped below at -160 (vmaxps keeps a NaN: it returns its second
// operand when one is NaN): the polynomial (< 1.5) times 2^-160 rounds to
// 0, so a masked score (-inf) weighs exactly 0; t in (-160, -126) gives a
// subnormal weight where exp_nonpositive flushes to 0, which the row max's
// 1 leaves invisible either way.
FMHA_CPU_TARGET_AVX512BF16 FMHA_CPU_INLINE __m512 exp_nonpositive_zmm(__m512 x) {
  const __m512 t = _mm512_max_ps(_mm512_set1_ps(-160.f), _mm512_mul_ps(x, _mm512_set1_ps(kLog2e)));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(0.0012915669940412045f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009668530896306038f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.055516887456178665f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022264778614044f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931464672088623f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// amx::split of n values on 16 lanes: hi = bf16(x) (vcvtneps2bf16: round
// to nearest even, as float_to_bf16; it flushes FP32 subnormal inputs,
// which a 16-bit or FP8 value never is), lo = bf16(x - hi) (exact for F16
// values), lo = 0 where x is an inf or NaN. Returns whether some x is.
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512BF16 uint32_t split_row_amx(const float* x, int64_t n, uint16_t* hi,
                                                                           uint16_t* lo) {
  uint32_t bad = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_sub_ps(finite, v, hf))));
    bad |= finite != 0xffff;
  }
  for (; i < n; ++i) {
    amx::split(x[i], hi + i, lo + i);
    bad |= !std::isfinite(x[i]);
  }
  return bad;
}

// Keys j .. j + 15 of a tile that a row sees: columns in [c0, c1) (all of
// them when not `mask`). Vectors by reference (see load_lanes).
FMHA_CPU_TARGET_AVX512BF16 FMHA_CPU_INLINE __mmask16 visible_keys(bool mask, const __m512i& iota, int64_t j,
                                                                  const __m512i& c0, const __m512i& c1) {
  if (!mask) return 0xffff;
  const __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(j)));
  return _mm512_cmpge_epi32_mask(idx, c0) & _mm512_cmplt_epi32_mask(idx, c1);
}

// The softmax steps of one tile on the amx path (seed section 4, as
// softmax_rows), AVX-512 throughout, for scores rows x keys (row r at s + r *
// lds; key c of the tile is key `base` + c of the sequence): per row
//   pass 1: the tile max m~ of scale * s, with -inf outside the row's keys
//           [lo, hi) and for columns [nk, kp) when `mask` (tiles across an
//           edge of some row's range, or with padding columns: without it
//           kp == nk and every row sees every key);
//           m' = max(m, m~), alpha = e^(m - m') (0 as the subtrahend while
//           m' = -inf, as run_block);
//   pass 2: P = e^(scale * s - m') (one fused multiply-subtract), 0 where
//           masked; its sum into l = alpha l + sum P; P as BF16 into the
//           tiles' left operand: p_hi = bf16(P) (vcvtneps2bf16, round to
//           nearest even) and, when p_lo is not null, p_lo = bf16(P - p_hi)
//           (amx::split's planes; 0 for a NaN P), columns [0, kp), so the
//           padding columns are 0; and, when keep_p, P back into s (FP32,
//           for the exact path);
//   then o's row *= alpha (when o is not null and alpha != 1).
// The row max and sum are the only horizontal steps (vreduce's fixed tree:
// the result never depends on the thread).
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512BF16 void amx_softmax_tile(
    float* s, int64_t lds, int64_t nr, int64_t nk, int64_t kp, bool mask, int64_t base, const int64_t* lo,
    const int64_t* hi, float scale, float* m, float* l, float* alpha, uint16_t* p_hi, uint16_t* p_lo, bool keep_p,
    float* o, int64_t dp) {
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 ninf = _mm512_set1_ps(-kInf);
  // Pass 1 and the new maxima for 16 rows at a time: m' and alpha of the
  // 16 rows in one vector (exp_nonpositive_zmm), then pass 2 row by row.
  float tile_max[16], m_safe[16];
  for (int64_t r0 = 0; r0 < nr; r0 += 16) {
    const int64_t rn = std::min<int64_t>(16, nr - r0);
    for (int64_t i = 0; i < rn; ++i) {
      const int64_t r = r0 + i;
      const float* sr = s + r * lds;
      const __m512i c0 = _mm512_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(lo[r] - base, 0, nk)));
      const __m512i c1 = _mm512_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(hi[r] - base, 0, nk)));
      __m512 vmax = ninf;
      for (int64_t j = 0; j < kp; j += 16) {
        const __m512 v =
            _mm512_mask_mul_ps(ninf, visible_keys(mask, iota, j, c0, c1), _mm512_loadu_ps(sr + j), vscale);
        vmax = _mm512_max_ps(v, vmax);  // a NaN score never becomes the max (softmax_rows' rule)
      }
      tile_max[i] = _mm512_reduce_max_ps(vmax);
    }
    // m' = max(m, m~) (vmaxps(m, m~): m where m > m~, as run_block), the
    // subtrahend 0 while m' = -inf, alpha = e^(m - m').
    const __mmask16 rows = static_cast<__mmask16>((1u << rn) - 1);
    const __m512 vm = _mm512_mask_loadu_ps(ninf, rows, m + r0);
    const __m512 mn = _mm512_max_ps(vm, _mm512_mask_loadu_ps(ninf, rows, tile_max));
    const __m512 ms = _mm512_mask_mov_ps(mn, _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
    _mm512_mask_storeu_ps(alpha + r0, rows, exp_nonpositive_zmm(_mm512_sub_ps(vm, ms)));
    _mm512_mask_storeu_ps(m + r0, rows, mn);
    _mm512_storeu_ps(m_safe, ms);
    for (int64_t i = 0; i < rn; ++i) {
      const int64_t r = r0 + i;
      const float* sr = s + r * lds;
      const __m512i c0 = _mm512_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(lo[r] - base, 0, nk)));
      const __m512i c1 = _mm512_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(hi[r] - base, 0, nk)));
      const __m512 vms = _mm512_set1_ps(m_safe[i]);
      __m512 vsum = _mm512_setzero_ps();
      uint16_t* ph = p_hi + r * lds;
      uint16_t* pl = p_lo != nullptr ? p_lo + r * lds : nullptr;
      for (int64_t j = 0; j < kp; j += 16) {
        const __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(sr + j), vscale, vms);
        __m512 e = exp_nonpositive_zmm(x);
        if (mask) e = _mm512_maskz_mov_ps(visible_keys(mask, iota, j, c0, c1), e);
        if (keep_p) _mm512_storeu_ps(s + r * lds + j, e);
        vsum = _mm512_add_ps(vsum, e);
        const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ph + j), h);
        if (pl != nullptr) {
          const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          const __m512 rest = _mm512_maskz_sub_ps(_mm512_cmp_ps_mask(e, e, _CMP_ORD_Q), e, hf);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(pl + j),
                              reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(rest)));
        }
      }
      l[r] = alpha[r] * l[r] + _mm512_reduce_add_ps(vsum);
      // alpha = 1 (the row's max did not grow: most tiles once a row has
      // seen a few) leaves o as it is.
      if (o != nullptr && alpha[r] != 1.f) {
        const __m512 va = _mm512_set1_ps(alpha[r]);
        float* orow = o + r * dp;
        for (int64_t x = 0; x < dp; x += 16) _mm512_storeu_ps(orow + x, _mm512_mul_ps(_mm512_loadu_ps(orow + x), va));
      }
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// ---- raw 16-bit scores, per path -------------------------------------------------

// The x86 paths with vdpbf16ps: avx512bf16 and the two above it.
constexpr bool isa_has_bf16_dot(CpuIsa isa) {
  return isa == CpuIsa::kAvx512Bf16 || isa == CpuIsa::kAvx512Fp16 || isa == CpuIsa::kAmx;
}

// S = scale * K_tile . Q^T (keys x rows) from raw 16-bit K rows (ldk apart)
// and Q in the path's layout: BF16 pair-interleaved on avx512bf16
// (bf16_score_tile), F16 Q^T on neonfp16 (f16_score_tile_neon). run_block
// calls it only on those two paths.
template <CpuIsa kIsa>
FMHA_CPU_INLINE void raw_score_tile(const uint16_t* k, int64_t ldk, const uint16_t* q, int64_t ldq, float* s,
                                    int64_t lds, int64_t nk, int64_t np, int64_t head_dim, float scale) {
#if FMHA_CPU_X86_VARIANTS
  if constexpr (isa_has_bf16_dot(kIsa)) bf16_score_tile(k, ldk, q, ldq, s, lds, nk, np, (head_dim + 1) / 2, scale);
#endif
#if FMHA_CPU_NEON_FP16
  if constexpr (kIsa == CpuIsa::kNeonFp16) f16_score_tile_neon(k, ldk, q, ldq, s, lds, nk, np, head_dim, scale);
#endif
  (void)k, (void)ldk, (void)q, (void)ldq, (void)s, (void)lds, (void)nk, (void)np, (void)head_dim, (void)scale;
}

// The dot-product form (S rows x keys) for packed decode blocks:
// bf16_dot_tile or f16_dot_tile_neon, as raw_score_tile.
template <CpuIsa kIsa>
FMHA_CPU_INLINE void raw_dot_tile(const uint16_t* k, int64_t ldk, const uint16_t* q, int64_t ldq, float* s,
                                  int64_t lds, int64_t nk, int64_t nr, int64_t dp, float scale) {
#if FMHA_CPU_X86_VARIANTS
  if constexpr (isa_has_bf16_dot(kIsa)) {
    const uint16_t* rows[kDotTileKeys];  // the staged tile's rows (prefetched as it was staged)
    for (int64_t j = 0; j < nk; ++j) rows[j] = k + j * ldk;
    bf16_dot_tile(rows, q, ldq, s, lds, nk, nr, dp, scale, Prefetch{});
  }
#endif
#if FMHA_CPU_NEON_FP16
  if constexpr (kIsa == CpuIsa::kNeonFp16) f16_dot_tile_neon(k, ldk, q, ldq, s, lds, nk, nr, dp, scale);
#endif
  (void)k, (void)ldk, (void)q, (void)ldq, (void)s, (void)lds, (void)nk, (void)nr, (void)dp, (void)scale;
}

// ---- one sequence ---------------------------------------------------------------

// Where sequence b of the batch lives: its extent as core/seq_layout.h
// defines it (clamped: garbage metadata never leads outside the tensors),
// and the element offsets of its rows. A dense batch has no metadata: every
// sequence is the whole [seq_q, seq_k] of its batch entry.
struct Seq {
  const Problem* p;
  int64_t b;
  SeqExtent e;
  int64_t qb;  // batch index of its q/o rows (0 when packed)
  int64_t kb;  // batch index of its k/v rows (0 when packed; unused when paged)

  // Query row i (< e.len_q) of head h in q or o.
  FMHA_CPU_INLINE int64_t row_at(const Operand& op, int64_t h, int64_t i) const {
    return qb * op.stride[0] + h * op.stride[1] + (e.q_begin + i) * op.stride[2];
  }
  // Its lse entry: [batch, heads_q, seq_q], or [heads_q, total_q] packed.
  FMHA_CPU_INLINE int64_t lse_at(int64_t h, int64_t i) const {
    return p->layout.ragged_q() ? h * p->layout.total_q + e.q_begin + i : (b * p->heads_q + h) * p->seq_q + i;
  }
  // Key j (< e.len_k) of kv head hk: its element offsets in k and in v
  // (one block-table lookup for both; page_slot clamps the page id).
  FMHA_CPU_INLINE void key_at(int64_t hk, int64_t j, int64_t* k_at, int64_t* v_at) const {
    const Operand& k = p->k;
    const Operand& v = p->v;
    if (p->layout.paged()) {
      const PageSlot ps = page_slot(p->layout, b, j);
      *k_at = ps.page * k.stride[0] + hk * k.stride[1] + ps.slot * k.stride[2];
      *v_at = ps.page * v.stride[0] + hk * v.stride[1] + ps.slot * v.stride[2];
      return;
    }
    *k_at = kb * k.stride[0] + hk * k.stride[1] + (e.k_begin + j) * k.stride[2];
    *v_at = kb * v.stride[0] + hk * v.stride[1] + (e.k_begin + j) * v.stride[2];
  }
};

FMHA_CPU_INLINE Seq sequence(const Problem& p, int64_t b) {
  Seq s;
  s.p = &p;
  s.b = b;
  s.e = p.layout.any() ? seq_extent(p.layout, b) : SeqExtent{0, p.seq_q, 0, p.seq_k, p.diag_offset};
  s.qb = p.layout.ragged_q() ? 0 : b;
  s.kb = p.layout.ragged_k() ? 0 : b;
  return s;
}

// ---- bias and ALiBi ----------------------------------------------------------

// The additive terms of fmha.h 0.3 for the rows of one block: row r is query
// i(r) of head h(r) of sequence b, and
//   s(r, j) += bias[b, h(r), i(r), j] - slope(h(r)) * |d(i(r)) - j|
// with j the sequence's key index and d the sequence's diagonal. Added
// after the softcap and before the mask, so a masked key stays out.
struct Extra {
  const Problem* p;
  int64_t b;
  int64_t diag;          // d(i) = i + diag
  int64_t h0, nq;        // row r: head h0 + r / nq, query i0 + r % nq
  int64_t i0;
  bool packed;
  const char* bias;      // null: none
  const float* slopes;   // null: none (else row b's slopes, indexed by head)

  FMHA_CPU_INLINE int64_t head(int64_t r) const { return packed ? h0 + r / nq : h0; }
  FMHA_CPU_INLINE int64_t query(int64_t r) const { return packed ? r % nq : i0 + r; }

  // Row r's scores of keys j0 .. j0 + bc - 1 at sr[j * stride].
  FMHA_CPU_INLINE void add(float* sr, int64_t stride, int64_t r, int64_t j0, int64_t bc) const {
    const int64_t h = head(r), i = query(r);
    if (bias != nullptr) {
      const Operand& bo = p->bias;
      const int64_t row = b * bo.stride[0] + h * bo.stride[1] + i * bo.stride[2];
      for (int64_t j = 0; j < bc; ++j) sr[j * stride] += load_scalar(bias, row + (j0 + j) * bo.stride[3], p->bias_dtype);
    }
    if (slopes != nullptr) {
      const float slope = slopes[h];
      const int64_t d = i + diag;
      for (int64_t j = 0; j < bc; ++j) {
        const int64_t dist = d > j0 + j ? d - (j0 + j) : (j0 + j) - d;
        sr[j * stride] -= slope * static_cast<float>(dist);
      }
    }
  }
};

// o = alpha o + P . V_tile where V_tile holds a NaN or inf: every zero
// weight is skipped, so a key a row does not see (or whose weight
// underflowed) never reaches its O (fmha.h, "Non-finite data"). P(r, j) at
// p[r * p_row + j * p_key], V rows and o rows of n floats.
FMHA_CPU_INLINE void pv_skipping_zeros(const float* p, int64_t p_row, int64_t p_key, const float* vt, int64_t ldv,
                                       float* o, int64_t n, const float* alpha, int64_t nr, int64_t bc) {
  for (int64_t r = 0; r < nr; ++r) {
    float* orow = o + r * n;
    for (int64_t x = 0; x < n; ++x) orow[x] *= alpha[r];
    for (int64_t j = 0; j < bc; ++j) {
      const float pj = p[j * p_key + r * p_row];
      if (pj == 0.f) continue;
      const float* vj = vt + j * ldv;
      for (int64_t x = 0; x < n; ++x) orow[x] += pj * vj[x];
    }
  }
}

// ---- one work item ------------------------------------------------------------

struct Job {
  const Problem* p;
  ScratchLayout layout;
  Plan plan;
  char* scratch;      // kAlignBytes-aligned; worker w owns [w * bytes, (w + 1) * bytes)
  char* partials;     // packed with splits > 1: item i's (m, l, o) at i * partial_bytes
  int64_t partial_bytes;
  int64_t row_tiles;  // query blocks per (batch, head)
  PackLayout pack;    // amx path: K/V packed per (batch, kv head); pack.keys == 0: none
  char* packs;        // group b * heads_kv + hk's pack at that index * pack.bytes
  bool longest_last;  // the last query block has the most keys (e.g. causal)
  bool head_major;    // one thread: item i is block i % row_tiles of (batch, head) i / row_tiles
};

#if FMHA_CPU_X86_VARIANTS
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12's intrinsics, as for fold_zmm
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// A 16 x 16 transpose of 32-bit words: dst[q * ldd + i] = src[i * lds + q]
// (unpack 32-bit, unpack 64-bit, then two 128-bit lane shuffles): K rows
// as BF16 pairs into K^T's VNNI form (pack_kv_amx), FP32 Q rows into Q^T
// (run_block).
FMHA_CPU_TARGET_AVX512 FMHA_CPU_INLINE void transpose_words16(const uint32_t* src, int64_t lds, uint32_t* dst,
                                                              int64_t ldd) {
  __m512i r[16], a[16], b[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * lds);
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // b[4i + k], 128-bit lane L: word 4L + k of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // Word 4L + k of all 16 rows: lane L of b[k], b[4 + k], b[8 + k], b[12 + k].
  for (int k = 0; k < 4; ++k) {
    const __m512i x0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44);  // lanes 0, 1 of each
    const __m512i x1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xee);  // lanes 2, 3
    const __m512i x2 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44);
    const __m512i x3 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xee);
    _mm512_storeu_si512(dst + k * ldd, _mm512_shuffle_i32x4(x0, x2, 0x88));
    _mm512_storeu_si512(dst + (4 + k) * ldd, _mm512_shuffle_i32x4(x0, x2, 0xdd));
    _mm512_storeu_si512(dst + (8 + k) * ldd, _mm512_shuffle_i32x4(x1, x3, 0x88));
    _mm512_storeu_si512(dst + (12 + k) * ldd, _mm512_shuffle_i32x4(x1, x3, 0xdd));
  }
}

// qt[d * ldq + i] = o[i * ldo + d] for 16 rows i and d < D rounded up to
// 16: 16 columns of Q^T (run_block). Out of line, as bf16_score_tile: the
// caller is compiled for a path only through its wrapper.
__attribute__((noinline)) FMHA_CPU_TARGET_AVX512 void transpose_q16(const float* o, int64_t ldo, float* qt,
                                                                     int64_t ldq, int64_t D) {
  for (int64_t d0 = 0; d0 < D; d0 += 16)
    transpose_words16(reinterpret_cast<const uint32_t*>(o) + d0, ldo, reinterpret_cast<uint32_t*>(qt) + d0 * ldq,
                      ldq);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#if FMHA_CPU_X86_VARIANTS && FMHA_CPU_AMX
// The amx path's pack of group (batch b, kv head hk) = `group`, b * heads_kv
// + hk (PackLayout), in the scratch slice of `worker` (its row and staging
// arrays): each key's K and V rows as BF16 (raw for BF16, hi and lo
// planes for F16, one exact plane for FP8), K's into column j of K^T's
// VNNI form, V's into half of VNNI row j / 2; the columns and rows past the
// sequence's keys zero. V's pairs go in as 32-bit words: an even key's
// row zero-extended, an odd key's shifted into the high halves and or-ed in.
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12's intrinsics, as for fold_zmm
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
FMHA_CPU_TARGET_AMX void pack_kv_amx(const Job& job, int64_t item, int worker) {
  constexpr CpuIsa kIsa = CpuIsa::kAmx;
  const Problem& p = *job.p;
  const PackLayout& P = job.pack;
  const ScratchLayout& L = job.layout;
  const int64_t D = p.head_dim, DP = L.dp, NK = P.keys;
  const int64_t group = item / P.chunks;
  const int64_t c0 = item % P.chunks * kPackChunkKeys;    // this item's keys [c0, c1)
  const int64_t c1 = std::min(c0 + kPackChunkKeys, NK);
  const fmha_dtype kvt = p.kv_dtype;
  const bool split = P.planes == 2;
  const Seq sq = sequence(p, group / p.heads_kv);
  const int64_t hk = group % p.heads_kv;
  const int64_t nk = std::clamp<int64_t>(std::min(sq.e.len_k, NK - amx::kBlock), c0, c1);  // keys to pack: [c0, nk)
  char* pack = job.packs + group * P.bytes;
  uint16_t* k_hi = at_offset<uint16_t>(pack, P.k_hi);
  uint16_t* k_lo = at_offset<uint16_t>(pack, P.k_lo);
  uint16_t* v_hi = at_offset<uint16_t>(pack, P.v_hi);
  uint16_t* v_lo = at_offset<uint16_t>(pack, P.v_lo);
  uint8_t* flags = at_offset<uint8_t>(pack, P.flags);
  char* base = job.scratch + static_cast<int64_t>(worker) * L.bytes;
  float* row = at_offset<float>(base, L.row);
  // One key's V rows, then 16 keys' K rows (hi, then lo), DP each: K goes
  // into K^T 16 keys at a time (transpose_words16; c0 and c1 are multiples
  // of 16).
  uint16_t* vh = at_offset<uint16_t>(base, L.stage);
  uint16_t* vl = vh + DP;
  uint16_t* g_hi = vl + DP;
  uint16_t* g_lo = g_hi + 16 * DP;
  static_assert(kPackChunkKeys % 16 == 0 && amx::kBlock % 16 == 0, "packing goes 16 keys at a time");
  for (int64_t x = D; x < DP; ++x) vh[x] = vl[x] = 0;
  const Operand& k = p.k;
  const Operand& v = p.v;
  for (int64_t j = c0; j < nk; ++j) {
    uint16_t* kh = g_hi + (j % 16) * DP;
    uint16_t* kl = g_lo + (j % 16) * DP;
    if (j % 16 == 0)  // a new group: zero padding, and whole rows for keys past nk
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t from = j + i < nk ? D : 0;
        std::memset(g_hi + i * DP + from, 0, (DP - from) * sizeof(uint16_t));
        std::memset(g_lo + i * DP + from, 0, (DP - from) * sizeof(uint16_t));
      }
    int64_t k_at, v_at;
    if (j + kPackPrefetchKeys < nk && k.stride[3] == 1 && v.stride[3] == 1) {
      // The packing reads K and V from memory once: ask for a later key's
      // rows while this one converts (as the per-tile staging does).
      sq.key_at(hk, j + kPackPrefetchKeys, &k_at, &v_at);
      const char* kn = static_cast<const char*>(k.data) + k_at * dtype_size(kvt);
      const char* vn = static_cast<const char*>(v.data) + v_at * dtype_size(kvt);
      for (int64_t at = 0; at < D * dtype_size(kvt); at += kAlignBytes) {
        prefetch_read(kn + at);
        prefetch_read(vn + at);
      }
    }
    sq.key_at(hk, j, &k_at, &v_at);
    const char* ks = static_cast<const char*>(k.data) + k_at * dtype_size(kvt);
    const char* vs = static_cast<const char*>(v.data) + v_at * dtype_size(kvt);
    if (kvt == FMHA_DTYPE_BF16) {
      const uint16_t* k16 = reinterpret_cast<const uint16_t*>(ks);
      const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vs);
      for (int64_t d = 0; d < D; ++d) kh[d] = k16[d * k.stride[3]];
      for (int64_t x = 0; x < D; ++x) vh[x] = v16[x * v.stride[3]];
    } else {
      load_row<kIsa>(ks, k.stride[3], D, kvt, row);
      split_row_amx(row, D, kh, kl);
      load_row<kIsa>(vs, v.stride[3], D, kvt, row);
      split_row_amx(row, D, vh, vl);
    }
    uint32_t k_bad = 0, v_bad = 0;
    for (int64_t d = 0; d < D; ++d) {
      k_bad |= (kh[d] & 0x7f80u) == 0x7f80u;
      v_bad |= (vh[d] & 0x7f80u) == 0x7f80u;
    }
    flags[j] = static_cast<uint8_t>(k_bad | v_bad << 1);
    if (j % 16 == 15 || j == nk - 1) {  // the group's K rows into K^T columns j - j % 16 ..
      const int64_t g0 = j - j % 16;
      for (int plane = 0; plane < (split ? 2 : 1); ++plane)
        for (int64_t pr = 0; pr < DP / 2; pr += 16)
          transpose_words16(reinterpret_cast<const uint32_t*>(plane == 0 ? g_hi : g_lo) + pr, DP / 2,
                            reinterpret_cast<uint32_t*>(plane == 0 ? k_hi : k_lo) + pr * NK + g0, NK);
    }
    for (int plane = 0; plane < (split ? 2 : 1); ++plane) {
      const uint16_t* src = plane == 0 ? vh : vl;
      uint16_t* w = (plane == 0 ? v_hi : v_lo) + (j >> 1) * 2 * DP;  // VNNI row j / 2: DP words
      for (int64_t x = 0; x < DP; x += 16) {
        const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + x)));
        __m512i* at = reinterpret_cast<__m512i*>(w + 2 * x);
        if (j & 1)
          _mm512_storeu_si512(at, _mm512_or_si512(_mm512_loadu_si512(at), _mm512_slli_epi32(words, 16)));
        else
          _mm512_storeu_si512(at, words);
      }
    }
  }
  // Keys [nk, c1), past the sequence's: zero columns of K^T, zero V rows
  // (an odd nk's last pair has its high halves zero from the even key's
  // write).
  std::memset(flags + nk, 0, c1 - nk);
  for (int plane = 0; plane < (split ? 2 : 1); ++plane) {
    uint16_t* kt = plane == 0 ? k_hi : k_lo;
    uint16_t* vt = plane == 0 ? v_hi : v_lo;
    for (int64_t pr = 0; pr < DP / 2; ++pr) std::memset(kt + 2 * (pr * NK + nk), 0, (c1 - nk) * 2 * sizeof(uint16_t));
    const int64_t first = (nk + 1) / 2;
    std::memset(vt + first * 2 * DP, 0, (c1 / 2 - first) * 2 * DP * sizeof(uint16_t));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// One work item, in the scratch slice of `worker`, with a kRows-row register
// tile: query rows [i0, i0 + nr) of (batch b, query head h), or, packed, the
// G * Nq rows of (batch b, kv head hk) over the keys of one split.
template <CpuIsa kIsa>
FMHA_CPU_INLINE void run_block(const Job& job, int64_t item, int worker) {
  constexpr int64_t kRows = isa_is_x86(kIsa) && kIsa >= CpuIsa::kAvx512 ? kRowsAvx512 : kRowsOther;
  const Problem& p = *job.p;
  const ScratchLayout& L = job.layout;
  const fmha_dtype dt = p.dtype;      // q
  const fmha_dtype kvt = p.kv_dtype;  // k and v
  const fmha_dtype ot = p.o_dtype;    // o
  const int64_t D = p.head_dim;
  const int64_t BR = L.rows;  // leading dimension of Q^T and S
  const int64_t DP = L.dp;    // leading dimension of the K/V tiles and o

  // Work order: the pool hands out items in index order, so index 0 must
  // be the block with the most keys. Blocks are ordered by row position
  // first (all heads of the longest block, then the next), which for causal
  // masks starts the longest rows first and leaves the short ones to fill
  // the gaps at the end. One thread goes head by head instead
  // (job.head_major).
  //
  // Row r of the block is query i_of(r) of query head h_of(r); unpacked,
  // that is query i0 + r of head h; packed, query r % Nq of the group's
  // head r / Nq (the group's queries are [0, Nq), so i0 = 0).
  const Plan& plan = job.plan;
  const bool packed = plan.packed;
  int64_t b, h, hk, i0, nr, split;
  if (packed) {
    const int64_t group = item / plan.splits;
    split = item % plan.splits;
    b = group / p.heads_kv;
    hk = group % p.heads_kv;
    h = hk * p.group_size();  // first query head of the group
    i0 = 0;
    nr = plan.rows;
  } else {
    const int64_t heads = p.batch * p.heads_q;
    const int64_t rank = job.head_major ? item % job.row_tiles : item / heads;
    const int64_t bh = job.head_major ? item / job.row_tiles : item % heads;
    const int64_t tile = job.longest_last ? job.row_tiles - 1 - rank : rank;
    b = bh / p.heads_q;
    h = bh % p.heads_q;
    hk = h / p.group_size();  // GQA/MQA: the shared kv head, read in place
    i0 = tile * BR;
    nr = BR;  // cut to the sequence below
    split = 0;
  }
  // The sequence: its own Nq, Nk and diagonal (a dense batch: the Problem's).
  const Seq sq = sequence(p, b);
  const int64_t nq = sq.e.len_q;
  const int64_t seq_k = sq.e.len_k;
  const int64_t diag = sq.e.diag_offset;
  // Rows of this block that the sequence has: a packed block holds its Nq
  // queries of each of the G heads, an unpacked one what is left from i0.
  nr = packed ? nq * p.group_size() : std::min(BR, nq - i0);
  if (nr <= 0) return;  // a shorter sequence than the bound: nothing here (merge_splits skips it too)
  auto i_of = [&](int64_t r) { return packed ? r % nq : i0 + r; };
  auto h_of = [&](int64_t r) { return packed ? h + r / nq : h; };
  // Scores as dot products (few packed rows: Q row-major in qt, S rows x
  // keys) or as the padded product (Q^T in qt, S keys x rows).
  // decode16 (AVX-512 paths, packed dot-product blocks): K and V rows read
  // in place when they are F16 or BF16, contiguous, and head_dim is a
  // multiple of 32 (no padding past a row's end). Scores from Q as raw BF16
  // rows (raw_dots below, bf16_dot_tile) or as FP32 rows (decode16_dot_tile).
  // It takes packed blocks of up to kDecode16Rows rows (the staged dot form
  // up to kDotRows), except on the amx path, whose tiles take the blocks
  // past kDotRows.
#if FMHA_CPU_X86_VARIANTS
  constexpr bool kDecode16Isa = FMHA_CPU_DECODE16 && isa_is_x86(kIsa) && kIsa >= CpuIsa::kAvx512;
  constexpr int64_t kDecode16MaxRows = kIsa == CpuIsa::kAmx ? kDotRows : kDecode16Rows;
#else
  constexpr bool kDecode16Isa = false;
  constexpr int64_t kDecode16MaxRows = kDotRows;
#endif
  const bool kv_16 = kvt == FMHA_DTYPE_BF16 || kvt == FMHA_DTYPE_F16;
  const bool decode16_fits = kDecode16Isa && packed && kv_16 && D % 32 == 0 && p.k.stride[3] == 1 &&
                             p.v.stride[3] == 1;
  const bool dot = packed && nr <= (decode16_fits ? kDecode16MaxRows : kDotRows);
  const bool decode16 = decode16_fits && dot;
  const int64_t np = round_up(nr, kMicroCols);  // rows of the padded product (padding rows are discarded)
  // Scores from raw 16-bit Q and K: BF16 with vdpbf16ps on the avx512bf16
  // path and the x86 paths above it (see bf16_score_tile; on the amx path
  // for packed decode blocks only), F16 with FMLAL on the neonfp16 path
  // (cpu_fp16_neon.h). Q and the K tiles stay raw; V still converts to FP32.
  constexpr fmha_dtype kRawDtype = isa_has_bf16_dot(kIsa) ? FMHA_DTYPE_BF16
                                   : kIsa == CpuIsa::kNeonFp16 ? FMHA_DTYPE_F16
                                                               : FMHA_DTYPE_F32;  // F32: none
#if FMHA_CPU_X86_VARIANTS
  constexpr bool kAmx = kIsa == CpuIsa::kAmx;
#else
  constexpr bool kAmx = false;
#endif
  // AMX (amx path, blocks of the padded product, q BF16 or F16 and K/V
  // BF16, F16 or FP8): both products on tiles (cpu_amx.h), with the scores
  // rows x keys as in the dot form (S = Q . K_tile^T, then softmax_rows),
  // so P needs no transpose before P . V. Q (rows of DP, unscaled) goes in
  // as the left operand, each K tile and V tile in VNNI form (element
  // (d, j) of K^T at vnni_at(d, j, keys), (j, x) of V at vnni_at(j, x,
  // DP)), P rows x keys. Every operand is a BF16 plane (hi), exact for BF16
  // and FP8 values (FP8 has 2-3 mantissa bits and BF16's exponent range
  // covers it), with a second plane (lo, amx::split: exact) for F16 q or
  // K/V; P is rounded to BF16 (one plane) or split to 16 bits
  // (amx_p_one_plane). An F32 o takes the FP32 path (amx_tiles_run).
  const bool amx = kAmx && !dot && amx_tiles_run(dt, kvt, ot);
  [[maybe_unused]] const bool q_split = amx && dt == FMHA_DTYPE_F16;  // Q has a lo plane
  const bool kv_split = amx && kvt == FMHA_DTYPE_F16;  // K and V have lo planes
  [[maybe_unused]] const bool p_split = amx && !amx_p_one_plane(dt, kvt, ot);
  const bool kv_raw = amx && kvt == FMHA_DTYPE_BF16;   // K/V rows copied as they are
  // Q and K both of that dtype (fmha.h 0.3 allows FP8 K/V beside a 16-bit
  // q: those take the FP32 path, or the amx path's tiles).
  const bool raw_qk = kRawDtype != FMHA_DTYPE_F32 && dt == kRawDtype && p.kv_dtype == kRawDtype;
  const bool raw_scores = raw_qk && !dot && !amx;
  // Likewise for packed dot-product blocks (bf16_dot_tile, f16_dot_tile_neon):
  // Q rows and K tile rows raw, DP elements apart, zero past head_dim.
  const bool raw_dots = raw_qk && dot;
  const bool raw16 = raw_scores || raw_dots;
  const int64_t pairs = (D + 1) / 2;  // 16-bit element pairs of a row
  const int64_t k_raw_ld = raw_dots ? DP : 2 * pairs;  // 16-bit elements between raw K rows

  char* base = job.scratch + static_cast<int64_t>(worker) * L.bytes;
  float* qt = at_offset<float>(base, L.qt);
  float* kt = at_offset<float>(base, L.k);
  float* vt = at_offset<float>(base, L.v);
  float* s = at_offset<float>(base, L.s);
  float* o = at_offset<float>(base, L.o);
  float* m = at_offset<float>(base, L.m);
  float* l = at_offset<float>(base, L.l);
  float* alpha = at_offset<float>(base, L.alpha);
  float* m_safe = at_offset<float>(base, L.m_safe);
  float* tile_max = at_offset<float>(base, L.tile_max);
  float* tile_sum = at_offset<float>(base, L.tile_sum);
  int64_t* lo = at_offset<int64_t>(base, L.lo);
  int64_t* hi = at_offset<int64_t>(base, L.hi);
  int32_t* c0 = at_offset<int32_t>(base, L.c0);
  int32_t* c1 = at_offset<int32_t>(base, L.c1);
  float* row = at_offset<float>(base, L.row);
  // The amx path's BF16 planes: hi, then lo, in the arrays of Q^T, the K
  // and V tiles and pp.
  uint16_t* q_hi = reinterpret_cast<uint16_t*>(qt);
  uint16_t* q_lo = q_hi + DP * BR;
  uint16_t* k_hi = reinterpret_cast<uint16_t*>(kt);
  uint16_t* k_lo = k_hi + L.keys * DP;
  uint16_t* v_hi = reinterpret_cast<uint16_t*>(vt);
  uint16_t* v_lo = v_hi + L.keys * DP;
  uint16_t* p_hi = at_offset<uint16_t>(base, L.pp);
  uint16_t* p_lo = p_hi + BR * L.ls;
  const int64_t LS = L.ls;  // amx: S and P rows x LS
  // amx: this group's K/V packs (PackLayout; forward packed them before the
  // blocks ran), else the tiles are staged here per key tile.
  const bool use_pack = amx && job.pack.keys > 0;
  // Keys per streamed tile.
  const int64_t KT = decode16 ? std::min(kDecode16TileKeys, L.keys)
                     : dot    ? kDotTileKeys
                     : use_pack ? kAmxTileKeys
                                : L.keys;
  // FP32 K and V of the padded product read in place: rows of unit stride,
  // head_dim a multiple of kMicroCols (no padding columns) and keys at one
  // stride (not paged), so a tile is already the row-major operand the
  // products take, at the tensor's row stride. Copying it cost every query
  // block a pass over its keys (perf, F32 prefill: memmove ~6%).
  const bool kv_in_place = kvt == FMHA_DTYPE_F32 && !amx && !dot && !raw16 && !p.layout.paged() &&
                           p.k.stride[3] == 1 && p.v.stride[3] == 1 && D == DP;
  const int64_t NK = job.pack.keys;
  const char* pack = use_pack ? job.packs + (b * p.heads_kv + hk) * job.pack.bytes : nullptr;
  const uint16_t* pk_hi = use_pack ? at_offset<const uint16_t>(const_cast<char*>(pack), job.pack.k_hi) : nullptr;
  const uint16_t* pk_lo = use_pack ? at_offset<const uint16_t>(const_cast<char*>(pack), job.pack.k_lo) : nullptr;
  const uint16_t* pv_hi = use_pack ? at_offset<const uint16_t>(const_cast<char*>(pack), job.pack.v_hi) : nullptr;
  const uint16_t* pv_lo = use_pack ? at_offset<const uint16_t>(const_cast<char*>(pack), job.pack.v_lo) : nullptr;
  const uint8_t* pflags = use_pack ? at_offset<const uint8_t>(const_cast<char*>(pack), job.pack.flags) : nullptr;
  uint16_t* stage_v_hi = at_offset<uint16_t>(base, L.stage);
  uint16_t* stage_v_lo = stage_v_hi + L.keys * DP;
  uint16_t* stage_k_hi = stage_v_lo + L.keys * DP;
  uint16_t* stage_k_lo = stage_k_hi + DP;

  // Each row's visible keys [lo, hi) (mask.h). Padding rows copy the last
  // real row, so they never widen the block's range or add edge tiles.
  for (int64_t r = 0; r < np; ++r) {
    const KeyRange kr = key_range(i_of(std::min(r, nr - 1)), seq_k, diag, p.window_left, p.window_right);
    lo[r] = kr.lo;
    hi[r] = kr.hi;
  }
  // The block's key tiles, as every backend cuts them (core/key_tiles.h):
  // tiles of KT keys aligned to multiples of KT, clipped to the keys
  // [block_lo, block_hi) some row needs; every row sees all of
  // [full_lo, full_hi), so tiles inside that need no mask. A packed block
  // holds queries [0, Nq) of every head and takes split `split` of them.
  const KeyTiles tiles = key_tiles(i0, packed ? nq - 1 : i0 + nr - 1, seq_k, diag, p.window_left,
                                   p.window_right, KT, split, plan.splits);
  const int64_t block_lo = tiles.lo;
  const int64_t block_hi = tiles.hi;
  const int64_t full_lo = tiles.full_lo;
  const int64_t full_hi = tiles.full_hi;

  // Q^T scaled: qt[d][r] = scale * q[row r][d]; padding rows are 0. Each
  // row is converted (vectorized) into o's first row, then transposed. For
  // dot products Q stays row-major instead: qt[r][d], zero for d >= D.
  // The descales of this block's KV group (one factor per batch entry and
  // kv head; fmha.h 0.3) fold into the scale: the logits are scale *
  // q_descale * k_descale * (q . k).
  const int64_t g = b * p.heads_kv + hk;
  const float qk_scale = p.scale * (p.q_descale != nullptr ? p.q_descale[g] : 1.f) *
                         (p.k_descale != nullptr ? p.k_descale[g] : 1.f);
  // amx: some Q element of the block is an inf or NaN (see amx_fix_scores).
  [[maybe_unused]] uint32_t q_nonfinite = 0;
  {
    const Operand& q = p.q;
    const char* q_data = static_cast<const char*>(q.data);
    const float scale = qk_scale;
    if (amx) {
      // Q rows of DP, unscaled, zero past head_dim and for padding rows.
      for (int64_t r = 0; r < np; ++r) {
        uint16_t* qh = q_hi + r * DP;
        uint16_t* ql = q_lo + r * DP;
        if (r < nr) {
          const char* qr = q_data + sq.row_at(q, h_of(r), i_of(r)) * dtype_size(dt);
          if (dt == FMHA_DTYPE_BF16) {  // as it is (no lo plane: q_split is false)
            const uint16_t* q16 = reinterpret_cast<const uint16_t*>(qr);
            for (int64_t d = 0; d < D; ++d) qh[d] = q16[d * q.stride[3]];
            for (int64_t d = 0; d < D; ++d) q_nonfinite |= (qh[d] & 0x7f80u) == 0x7f80u;
          } else {
#if FMHA_CPU_X86_VARIANTS && FMHA_CPU_AMX
            load_row<kIsa>(qr, q.stride[3], D, dt, row);
            q_nonfinite |= split_row_amx(row, D, qh, ql);
#endif
          }
        }
        for (int64_t d = r < nr ? D : 0; d < DP; ++d) qh[d] = ql[d] = 0;
      }
      // P's padding rows stay zero (so o's stay zero): softmax_rows runs
      // over the block's rows only.
      std::memset(p_hi + nr * LS, 0, (np - nr) * LS * sizeof(uint16_t));
      std::memset(p_lo + nr * LS, 0, (np - nr) * LS * sizeof(uint16_t));
    } else if (raw_scores && kRawDtype == FMHA_DTYPE_F16) {
      // qh[d][row], unscaled; padding rows 0 (FMLAL's Q^T, cpu_fp16_neon.h).
      uint16_t* qh = reinterpret_cast<uint16_t*>(qt);
      for (int64_t r = 0; r < np; ++r) {
        if (r < nr) {
          const uint16_t* qr = reinterpret_cast<const uint16_t*>(q_data) + sq.row_at(q, h_of(r), i_of(r));
          for (int64_t d = 0; d < D; ++d) qh[d * BR + r] = qr[d * q.stride[3]];
        } else {
          for (int64_t d = 0; d < D; ++d) qh[d * BR + r] = 0;
        }
      }
    } else if (raw_scores) {
      // qp[pair][row][2], unscaled; zero past head_dim and for padding rows.
      uint16_t* qp = reinterpret_cast<uint16_t*>(qt);
      for (int64_t r = 0; r < np; ++r) {
        if (r < nr) {
          const uint16_t* qr = reinterpret_cast<const uint16_t*>(q_data) + sq.row_at(q, h_of(r), i_of(r));
          for (int64_t d = 0; d < D; ++d) qp[(d >> 1) * 2 * BR + 2 * r + (d & 1)] = qr[d * q.stride[3]];
          if (D & 1) qp[(pairs - 1) * 2 * BR + 2 * r + 1] = 0;
        } else {
          for (int64_t x = 0; x < pairs; ++x) qp[x * 2 * BR + 2 * r] = qp[x * 2 * BR + 2 * r + 1] = 0;
        }
      }
    } else if (raw_dots) {
      // qr[row][DP], unscaled, zero past head_dim.
      uint16_t* qr = reinterpret_cast<uint16_t*>(qt);
      for (int64_t r = 0; r < nr; ++r) {
        const uint16_t* src = reinterpret_cast<const uint16_t*>(q_data) + sq.row_at(q, h_of(r), i_of(r));
        for (int64_t d = 0; d < D; ++d) qr[r * DP + d] = src[d * q.stride[3]];
        for (int64_t d = D; d < DP; ++d) qr[r * DP + d] = 0;
      }
    }
    bool q_done = false;
#if FMHA_CPU_X86_VARIANTS
    // AVX-512: Q^T 16 rows at a time, a 16 x 16 word transpose per 16 head
    // dims, instead of the loop below's one strided store per element
    // (perf, F32 prefill at one thread: ~5%). The same values.
    if constexpr (isa_is_x86(kIsa) && kIsa >= CpuIsa::kAvx512)
      if (!raw16 && !amx && !dot) {
        for (int64_t r0 = 0; r0 < np; r0 += 16) {
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t r = r0 + i;
            float* orow = o + i * DP;
            int64_t d = 0;
            if (r < nr) {
              load_row<kIsa>(q_data + sq.row_at(q, h_of(r), i_of(r)) * dtype_size(dt), q.stride[3], D, dt, orow);
              for (; d < D; ++d) orow[d] = scale * orow[d];
            }
            for (; d < DP; ++d) orow[d] = 0.f;
          }
          transpose_q16(o, DP, qt + r0, BR, D);
        }
        q_done = true;
      }
#endif
    for (int64_t r = 0; r < np && !raw16 && !amx && !q_done; ++r) {
      if (r < nr) {
        const int64_t at = sq.row_at(q, h_of(r), i_of(r));
        load_row<kIsa>(q_data + at * dtype_size(dt), q.stride[3], D, dt, o);
        if (dot) {
          for (int64_t d = 0; d < D; ++d) qt[r * DP + d] = scale * o[d];
          for (int64_t d = D; d < DP; ++d) qt[r * DP + d] = 0.f;
        } else {
          for (int64_t d = 0; d < D; ++d) qt[d * BR + r] = scale * o[d];
        }
      } else if (!dot) {
        for (int64_t d = 0; d < D; ++d) qt[d * BR + r] = 0.f;
      }
    }
  }

  // Running state: m = -inf, l = 0, o = 0 (seed section 4, before tile 1).
  for (int64_t r = 0; r < np; ++r) {
    m[r] = -kInf;
    l[r] = 0.f;
  }
  std::memset(o, 0, static_cast<size_t>(np * DP) * sizeof(float));
  // The V tile's padding columns [D, DP) feed only o's discarded columns;
  // zero them once so nothing non-finite or subnormal circulates. The K
  // tile's meet Q's zero padding in the dot products.
  if (DP > D)
    for (int64_t j = 0; j < L.keys; ++j) {
      std::memset(vt + j * DP + D, 0, (DP - D) * sizeof(float));
      if (raw_dots)
        std::memset(reinterpret_cast<uint16_t*>(kt) + j * DP + D, 0, (DP - D) * sizeof(uint16_t));
      else if (dot)
        std::memset(kt + j * DP + D, 0, (DP - D) * sizeof(float));
    }

  const Operand& k = p.k;
  const Operand& v = p.v;
  const float softcap = p.softcap;
  const float inv_softcap = softcap != 0.f ? 1.f / softcap : 0.f;
  Extra extra{};
  extra.p = &p;
  extra.b = b;
  extra.diag = diag;
  extra.h0 = h;
  extra.nq = nq;
  extra.i0 = i0;
  extra.packed = packed;
  extra.bias = static_cast<const char*>(p.bias.data);
  extra.slopes = p.alibi_slopes != nullptr ? p.alibi_slopes + b * p.alibi_stride : nullptr;
  const Extra* extra_ptr = extra.bias != nullptr || extra.slopes != nullptr ? &extra : nullptr;

  // decode16: the K and V rows of key tile t (this tile's and the next's).
  // A ring of 3: this tile's, and those up to FMHA_CPU_DECODE16_PREFETCH ahead.
  constexpr int64_t kAhead = FMHA_CPU_DECODE16_PREFETCH;
  [[maybe_unused]] const uint16_t* rows_k[3][kDecode16TileKeys];
  [[maybe_unused]] const uint16_t* rows_v[3][kDecode16TileKeys];
  [[maybe_unused]] auto find_rows = [&](int64_t t, const uint16_t** kr, const uint16_t** vr) {
    const int64_t j0 = std::max(t * KT, block_lo);
    const int64_t n = std::min((t + 1) * KT, block_hi) - j0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t k_at, v_at;
      sq.key_at(hk, j0 + j, &k_at, &v_at);
      kr[j] = static_cast<const uint16_t*>(k.data) + k_at;
      vr[j] = static_cast<const uint16_t*>(v.data) + v_at;
    }
    return n;
  };

  // amx: the tiles are configured by this block's first product and kept
  // until release_amx below (nothing else runs on them in between).
  [[maybe_unused]] bool tiles_configured = false;
  for (int64_t t = tiles.t_begin; t < tiles.t_end; ++t) {
    const int64_t j0 = std::max(t * KT, block_lo);            // first key of this tile
    const int64_t bc = std::min((t + 1) * KT, block_hi) - j0;  // keys in this tile
    const bool edge = j0 < full_lo || j0 + bc > full_hi;

#if FMHA_CPU_X86_VARIANTS
    if constexpr (kDecode16Isa) {
      if (decode16) {
        // The tile's K and V rows where they are (found while an earlier
        // tile ran), and those of the tile kAhead further, which the score
        // kernels prefetch as they go, key by key. Rows that far ahead help
        // across 4 KiB page boundaries, where the hardware prefetchers stop
        // (paged K/V, or every 16 keys of a dense F16 head at D = 128).
        const int64_t cur = (t - tiles.t_begin) % 3;
        const uint16_t** krow = rows_k[cur];
        const uint16_t** vrow = rows_v[cur];
        if (t == tiles.t_begin)
          for (int64_t i = 0; i < kAhead && t + i < tiles.t_end; ++i) find_rows(t + i, rows_k[i], rows_v[i]);
        if (kAhead == 0) find_rows(t, krow, vrow);
        const int64_t far = (cur + kAhead) % 3;
        const int64_t far_bc =
            kAhead > 0 && t + kAhead < tiles.t_end ? find_rows(t + kAhead, rows_k[far], rows_v[far]) : 0;
        const Prefetch ahead{rows_k[far], rows_v[far], far_bc, D * 2};
        const bool bf16 = kvt == FMHA_DTYPE_BF16;
        if (raw_dots) {
          if constexpr (isa_has_bf16_dot(kIsa))
            bf16_dot_tile(krow, reinterpret_cast<const uint16_t*>(qt), DP, s, L.keys, bc, nr, D, qk_scale, ahead);
        } else if (bf16) {
          decode16_dot_tile<true>(krow, qt, DP, s, L.keys, bc, nr, D, ahead);
        } else {
          decode16_dot_tile<false>(krow, qt, DP, s, L.keys, bc, nr, D, ahead);
        }
        softmax_rows(s, L.keys, nr, bc, j0, edge, lo, hi, softcap, inv_softcap, extra_ptr, m, l, alpha);
        // A NaN or inf in V matters only where it meets a zero weight (see
        // v_nonfinite below): V is scanned only when the tile has one.
        const bool zero_p = decode16_any_zero(s, L.keys, nr, bc);
        bool v_bad = false;
        if (zero_p) {
          const uint16_t exp_mask = bf16 ? 0x7f80u : 0x7c00u;
          for (int64_t j = 0; j < bc; ++j)
            for (int64_t d = 0; d < D; ++d) v_bad |= (vrow[j][d] & exp_mask) == exp_mask;
        }
        if (!v_bad) {
          if (bf16)
            decode16_pv_tile<true>(s, L.keys, vrow, o, DP, alpha, bc, nr, D);
          else
            decode16_pv_tile<false>(s, L.keys, vrow, o, DP, alpha, bc, nr, D);
        } else {
          for (int64_t j = 0; j < bc; ++j) load_row<kIsa>(vrow[j], 1, D, kvt, vt + j * DP);
          pv_skipping_zeros(s, L.keys, 1, vt, DP, o, DP, alpha, nr, bc);
        }
        continue;
      }
    }
#endif
    // amx: the tile's first column is key a0 (with the packs, even: V's VNNI
    // rows pair keys (2i, 2i + 1); an odd j0 is a block's first key, which
    // every row's range excludes, so column 0 is masked), bcs columns of
    // keys, kp with the padding to whole 32-key steps.
    const int64_t a0 = use_pack ? j0 & ~int64_t{1} : j0;
    const int64_t bcs = bc + (j0 - a0);
    const int64_t kp = round_up(bcs, amx::kBlock);

    // Stream the tile in: one FP32 copy of K and of V rows j0..j0+bc, shared
    // by every row of the block.
    // While it converts, the next tile's rows are prefetched: a decode block
    // does little work per key, and without this the conversion waits on
    // memory (perf: a third of the time on the first use of each load).
    const int64_t next_bc = t + 1 < tiles.t_end ? std::min((t + 2) * KT, block_hi) - (t + 1) * KT : 0;
    const bool prefetch = k.stride[3] == 1 && v.stride[3] == 1;
    [[maybe_unused]] uint32_t k_nonfinite = 0;  // amx: some K element of the tile is an inf or NaN
    // The tile's K and V rows (ldk, ldv apart): the staging arrays, or the
    // tensors themselves (kv_in_place).
    const float* ktile = kt;
    const float* vtile = vt;
    int64_t ldk = DP, ldv = DP;
    if (kv_in_place) {
      int64_t k_at, v_at;
      sq.key_at(hk, j0, &k_at, &v_at);
      ktile = static_cast<const float*>(k.data) + k_at;
      vtile = static_cast<const float*>(v.data) + v_at;
      ldk = k.stride[2];
      ldv = v.stride[2];
    }
    for (int64_t j = 0; j < (use_pack || kv_in_place ? 0 : bc); ++j) {
      if (prefetch && j < next_bc) {
        const int64_t jn = (t + 1) * KT + j;
        int64_t k_at, v_at;
        sq.key_at(hk, jn, &k_at, &v_at);
        const char* kn = static_cast<const char*>(k.data) + k_at * dtype_size(kvt);
        const char* vn = static_cast<const char*>(v.data) + v_at * dtype_size(kvt);
        for (int64_t at = 0; at < D * dtype_size(kvt); at += kAlignBytes) {
          prefetch_read(kn + at);
          prefetch_read(vn + at);
        }
      }
      int64_t k_at, v_at;
      sq.key_at(hk, j0 + j, &k_at, &v_at);
      if (amx) {
        // Key j: its K row and its V row as BF16 rows (raw for BF16, hi and
        // lo for F16) in the staging area, zero past head_dim; the K row
        // goes on into column j of K^T's VNNI form (a pair (d, d + 1) is one
        // 32-bit word there), the V rows pair up into VNNI form after the
        // loop.
        const char* ks = static_cast<const char*>(k.data) + k_at * dtype_size(kvt);
        const char* vs = static_cast<const char*>(v.data) + v_at * dtype_size(kvt);
        uint16_t* vr_hi = stage_v_hi + j * DP;
        uint16_t* vr_lo = stage_v_lo + j * DP;
        if (!kv_raw) {
          load_row<kIsa>(ks, k.stride[3], D, kvt, row);
          for (int64_t d = 0; d < D; ++d) amx::split(row[d], stage_k_hi + d, stage_k_lo + d);
          load_row<kIsa>(vs, v.stride[3], D, kvt, row);
          for (int64_t x = 0; x < D; ++x) amx::split(row[x], vr_hi + x, vr_lo + x);
        } else {
          const uint16_t* k16 = reinterpret_cast<const uint16_t*>(ks);
          const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vs);
          if (k.stride[3] == 1)
            std::memcpy(stage_k_hi, k16, D * sizeof(uint16_t));
          else
            for (int64_t d = 0; d < D; ++d) stage_k_hi[d] = k16[d * k.stride[3]];
          if (v.stride[3] == 1)
            std::memcpy(vr_hi, v16, D * sizeof(uint16_t));
          else
            for (int64_t x = 0; x < D; ++x) vr_hi[x] = v16[x * v.stride[3]];
        }
        for (int64_t d = D; d < DP; ++d) stage_k_hi[d] = stage_k_lo[d] = vr_hi[d] = vr_lo[d] = 0;
        const int64_t KK = L.keys;
        for (int64_t pr = 0; pr < DP / 2; ++pr)
          std::memcpy(k_hi + 2 * (pr * KK + j), stage_k_hi + 2 * pr, 2 * sizeof(uint16_t));
        for (int64_t d = 0; d < D; ++d) k_nonfinite |= (stage_k_hi[d] & 0x7f80u) == 0x7f80u;
        if (kv_split)
          for (int64_t pr = 0; pr < DP / 2; ++pr)
            std::memcpy(k_lo + 2 * (pr * KK + j), stage_k_lo + 2 * pr, 2 * sizeof(uint16_t));
        continue;
      }
      if (raw16) {  // the raw 16-bit row, an odd head_dim padded to a whole pair
        uint16_t* kr = reinterpret_cast<uint16_t*>(kt) + j * k_raw_ld;
        const uint16_t* ks = static_cast<const uint16_t*>(k.data) + k_at;
        if (k.stride[3] == 1)
          std::memcpy(kr, ks, D * sizeof(uint16_t));
        else
          for (int64_t d = 0; d < D; ++d) kr[d] = ks[d * k.stride[3]];
        if (D & 1) kr[D] = 0;
      } else {
        load_row<kIsa>(static_cast<const char*>(k.data) + k_at * dtype_size(kvt), k.stride[3], D, kvt, kt + j * DP);
      }
      load_row<kIsa>(static_cast<const char*>(v.data) + v_at * dtype_size(kvt), v.stride[3], D, kvt, vt + j * DP);
    }

    // A NaN or inf in V meets zero probabilities in the product below (0 *
    // NaN = NaN): those of keys masked for some rows of the block, and of
    // visible keys whose weight underflowed. Such a tile takes the exact
    // path that skips every zero weight, so a key a row does not see never
    // reaches its O (fmha.h, "Non-finite data"). Finite tiles, the rule,
    // take the register-blocked product, where 0 * v = 0 exactly.
    uint32_t v_nonfinite = 0;
    // amx: the keys of the tile's last 32-key step past bc are zero in K
    // and V (a stale NaN there would meet P's zero padding); V is checked
    // on its hi plane (an F16 inf or NaN stays one in BF16, and no finite
    // F16 value overflows BF16).
    if (use_pack) {
      // Every key the tile products touch, padding included (P is 0 there,
      // and 0 * inf would be NaN): columns [a0, a0 + kp).
      uint32_t f = 0;
      for (int64_t j = a0; j < a0 + kp; ++j) f |= pflags[j];
      k_nonfinite = f & 1u;
      v_nonfinite = f >> 1 & 1u;
    } else if (amx) {
      for (int64_t j = bc; j < kp; ++j)
        for (int64_t x = 0; x < DP; ++x) k_hi[amx::vnni_at(x, j, L.keys)] = k_lo[amx::vnni_at(x, j, L.keys)] = 0;
      // V: staged rows (2 jp, 2 jp + 1) become VNNI row jp, interleaved
      // column by column (hi, and lo for F16); an odd last row pairs with
      // zero, and the rows of pairs up to kp are zero.
      const int64_t pairs_v = (bc + 1) / 2;
      for (int plane = 0; plane < (kv_split ? 2 : 1); ++plane) {
        uint16_t* src = plane == 0 ? stage_v_hi : stage_v_lo;
        uint16_t* dst = plane == 0 ? v_hi : v_lo;
        if (bc & 1) std::memset(src + bc * DP, 0, DP * sizeof(uint16_t));
        for (int64_t jp = 0; jp < pairs_v; ++jp) {
          const uint16_t* a = src + 2 * jp * DP;
          const uint16_t* b = a + DP;
          uint16_t* w = dst + jp * 2 * DP;
          for (int64_t x = 0; x < DP; ++x) {
            w[2 * x] = a[x];
            w[2 * x + 1] = b[x];
          }
        }
        std::memset(dst + pairs_v * 2 * DP, 0, (kp / 2 - pairs_v) * 2 * DP * sizeof(uint16_t));
      }
      // The VNNI rows of keys [0, bc) are contiguous; their padding (past
      // head_dim, an odd last key's partner) is zero.
      const int64_t v_elems = (bc + 1) / 2 * 2 * DP;
      for (int64_t i = 0; i < v_elems; ++i) v_nonfinite |= (v_hi[i] & 0x7f80u) == 0x7f80u;
    } else {
      // In kLanes lanes across the tile's rows (a per-row fold would cost
      // a horizontal step for every key: perf, F32 prefill ~3%).
      uint32_t lanes[kLanes] = {};
      for (int64_t j = 0; j < bc; ++j) {
        const float* vj = vtile + j * ldv;
        int64_t d = 0;
        for (; d + kLanes <= D; d += kLanes)
          for (int64_t x = 0; x < kLanes; ++x) lanes[x] |= (float_bits(vj[d + x]) & 0x7f800000u) == 0x7f800000u;
        for (; d < D; ++d) v_nonfinite |= (float_bits(vj[d]) & 0x7f800000u) == 0x7f800000u;
      }
      for (int64_t x = 0; x < kLanes; ++x) v_nonfinite |= lanes[x];
    }

    if (amx) {
#if FMHA_CPU_AMX
      // Per 32-row chunk of the block (one row of 2 x 2 accumulator blocks,
      // so the chunks load no tile more often than one product over all
      // rows would): S = Q . K_tile^T on tiles, rows x columns [0, kp)
      // (keys a0 + c); the softmax along the chunk's rows with the scale on
      // the FP32 sums (as bf16_score_tile), softcap and the bias terms
      // before it on scaled logits, as softmax_rows has them; then o += P .
      // V_tile for the chunk's rows. The chunk's S (32 x LS FP32) and o
      // stay in L1 from one step to the next, where the whole block's S
      // (128 x 128) would not. P is the hi and lo planes, or, when q or
      // K/V is BF16, P rounded to BF16 (one plane: bench_cpu H2 N512 D128
      // causal BF16, rel-L2 1.6e-3 against 1.3e-3 with FP32 P, the BF16
      // tolerance 1e-2). A tile with a non-finite V value takes the exact
      // path below for P . V instead (o not rescaled here then).
      const uint16_t* kh = use_pack ? pk_hi + 2 * a0 : k_hi;
      const uint16_t* kl = use_pack ? pk_lo + 2 * a0 : k_lo;
      const int64_t ldk = use_pack ? NK : L.keys;
      const uint16_t* vh = use_pack ? pv_hi + a0 * DP : v_hi;
      const uint16_t* vl = use_pack ? pv_lo + a0 * DP : v_lo;
      const bool mask = edge || a0 != j0 || bcs != kp;
      for (int64_t rc = 0; rc < nr; rc += amx::kBlock) {
        const int64_t cr = std::min(amx::kBlock, nr - rc);  // the chunk's rows of the block
        float* sc = s + rc * LS;
        uint16_t* qh = q_hi + rc * DP;
        uint16_t* ql = q_lo + rc * DP;
        amx::Term terms[amx::kMaxTerms] = {{qh, kh}};
        int nt = 1;
        if (q_split) terms[nt++] = {ql, kh};
        if (kv_split) terms[nt++] = {qh, kl};
        amx::gemm_amx(terms, nt, DP, ldk, sc, LS, amx::kBlock, kp, DP, false, !tiles_configured);
        tiles_configured = true;
        if (nt > 1 && (q_nonfinite | k_nonfinite))
          amx_fix_scores(qh, ql, q_split, kh, kl, kv_split, ldk, DP, LS, sc, cr, bcs);
        float scale = qk_scale;
        if (softcap != 0.f || extra_ptr != nullptr) {
          for (int64_t r = rc; r < rc + cr; ++r) {
            float* sr = s + r * LS;
            for (int64_t j = 0; j < bcs; ++j) sr[j] *= qk_scale;
            if (softcap != 0.f)
              for (int64_t j = 0; j < bcs; ++j) sr[j] = softcap * tanh_softcap(sr[j] * inv_softcap);
            if (extra_ptr != nullptr) extra.add(sr + (j0 - a0), 1, r, j0, bc);
          }
          scale = 1.f;
        }
        uint16_t* ph = p_hi + rc * LS;
        uint16_t* pl = p_lo + rc * LS;
        amx_softmax_tile(sc, LS, cr, bcs, kp, mask, a0, lo + rc, hi + rc, scale, m + rc, l + rc, alpha + rc, ph,
                         p_split ? pl : nullptr, v_nonfinite != 0, v_nonfinite ? nullptr : o + rc * DP, DP);
        if (!v_nonfinite) {
          amx::Term pv[amx::kMaxTerms] = {{ph, vh}};
          int npv = 1;
          if (p_split) pv[npv++] = {pl, vh};
          if (kv_split) pv[npv++] = {ph, vl};
          amx::gemm_amx(pv, npv, LS, DP, o + rc * DP, DP, amx::kBlock, DP, kp, true, false);
        }
      }
#endif
    } else if (dot) {
      // S = (scale Q) . K_tile^T, rows x keys, and the softmax along rows.
      if (raw_dots)
        raw_dot_tile<kIsa>(reinterpret_cast<const uint16_t*>(kt), DP, reinterpret_cast<const uint16_t*>(qt), DP, s,
                           L.keys, bc, nr, DP, qk_scale);
      else
        dot_scores(kt, DP, qt, DP, s, L.keys, bc, nr, DP);
      softmax_rows(s, L.keys, nr, bc, j0, edge, lo, hi, softcap, inv_softcap, extra_ptr, m, l, alpha);
    } else {
      // S = K_tile . (scale Q)^T, keys x rows.
      if (raw_scores)
        raw_score_tile<kIsa>(reinterpret_cast<const uint16_t*>(kt), 2 * pairs, reinterpret_cast<const uint16_t*>(qt),
                             BR, s, BR, bc, np, D, qk_scale);
      else
        gemm_rows<kRows, false>(ktile, ldk, 1, qt, BR, s, BR, bc, np, D, nullptr);

      // Softcap acts on the scaled logits, before the mask and the max, so
      // lse and the softmax both see the capped values.
      if (softcap != 0.f)
        for (int64_t j = 0; j < bc; ++j)
          for (int64_t r = 0; r < np; ++r) s[j * BR + r] = softcap * tanh_softcap(s[j * BR + r] * inv_softcap);
      // Bias and ALiBi on the capped logits, before the mask (fmha.h 0.3).
      if (extra_ptr != nullptr)
        for (int64_t r = 0; r < nr; ++r) extra.add(s + r, BR, r, j0, bc);

      // The mask goes in before the tile max (seed section 6): a masked score
      // that reached the max could make m' too large (underflowing every
      // visible e^(s - m')) or, for a row with no visible key, finite. Only
      // tiles across an edge of some row's range get here.
      if (edge) {
        for (int64_t r = 0; r < np; ++r) {
          c0[r] = static_cast<int32_t>(std::clamp<int64_t>(lo[r] - j0, 0, bc));
          c1[r] = static_cast<int32_t>(std::clamp<int64_t>(hi[r] - j0, 0, bc));
        }
        for (int64_t j = 0; j < bc; ++j) {
          const int32_t jj = static_cast<int32_t>(j);
          float* sj = s + j * BR;
          for (int64_t r = 0; r < np; ++r) sj[r] = (jj >= c0[r] && jj < c1[r]) ? sj[r] : -kInf;
        }
      }

      // m~ = max_j s_j over the tile.
      for (int64_t r = 0; r < np; ++r) tile_max[r] = -kInf;
      for (int64_t j = 0; j < bc; ++j) {
        const float* sj = s + j * BR;
        for (int64_t r = 0; r < np; ++r) tile_max[r] = sj[r] > tile_max[r] ? sj[r] : tile_max[r];
      }
      // m' = max(m, m~); alpha = e^(m - m'). A row that has seen no visible
      // key yet keeps m' = -inf; it uses 0 as the subtrahend instead, so
      // e^(-inf - 0) = 0 for its masked scores and its (zero) old state
      // rather than e^(-inf - -inf) = NaN.
      for (int64_t r = 0; r < np; ++r) {
        const float mn = m[r] > tile_max[r] ? m[r] : tile_max[r];
        const float ms = mn == -kInf ? 0.f : mn;
        alpha[r] = exp_nonpositive(m[r] - ms);
        m_safe[r] = ms;
        m[r] = mn;
        tile_sum[r] = 0.f;
      }
      // P = e^(s - m') in place of S, and its row sums: sum_j e^(s_j - m')
      // is the seed's beta * l~ (the tile sum taken directly against the new
      // max), so l = alpha l + sum P.
      for (int64_t j = 0; j < bc; ++j) {
        float* sj = s + j * BR;
        for (int64_t r = 0; r < np; ++r) {
          const float e = exp_nonpositive(sj[r] - m_safe[r]);
          sj[r] = e;
          tile_sum[r] += e;
        }
      }
      for (int64_t r = 0; r < np; ++r) l[r] = alpha[r] * l[r] + tile_sum[r];
    }

    // o = alpha o + P . V_tile: the old o is rescaled to the new max as it
    // is loaded into the accumulators, before the current tile's PV is
    // added (seed section 6: the other order mixes two scales). P is keys x
    // rows (s_key = BR, s_row = 1) or, dot, rows x keys.
    const int64_t s_key = dot || amx ? 1 : BR;
    const int64_t s_row = dot ? L.keys : amx ? LS : 1;
    if (!v_nonfinite && amx) {
      // done per row chunk above
    } else if (!v_nonfinite) {
      gemm_rows<kRows, true>(s, s_row, s_key, vtile, ldv, o, DP, nr, DP, bc, alpha);
    } else {
      if (amx)  // V again, as FP32 rows (over its planes), for the exact path
        for (int64_t j = 0; j < bc; ++j) {
          int64_t k_at, v_at;
          sq.key_at(hk, j0 + j, &k_at, &v_at);
          load_row<kIsa>(static_cast<const char*>(v.data) + v_at * dtype_size(kvt), v.stride[3], D, kvt, vt + j * DP);
          std::memset(vt + j * DP + D, 0, (DP - D) * sizeof(float));
        }
      for (int64_t r = 0; r < nr; ++r) {
        float* orow = o + r * DP;
        for (int64_t x = 0; x < DP; ++x) orow[x] *= alpha[r];
        for (int64_t j = 0; j < bc; ++j) {
          const float pj = s[(j + j0 - a0) * s_key + r * s_row];
          if (pj == 0.f) continue;
          const float* vj = amx ? vt + j * DP : vtile + j * ldv;
          for (int64_t x = 0; x < DP; ++x) orow[x] += pj * vj[x];
        }
      }
    }
  }

#if FMHA_CPU_AMX
  if (amx) amx::release_amx();
#endif

  // One of several splits: the unnormalized state goes to the partials,
  // for merge_splits.
  if (plan.splits > 1) {
    char* part = job.partials + item * job.partial_bytes;
    float* pm = reinterpret_cast<float*>(part);
    std::memcpy(pm, m, nr * sizeof(float));
    std::memcpy(pm + nr, l, nr * sizeof(float));
    for (int64_t r = 0; r < nr; ++r) std::memcpy(pm + 2 * nr + r * D, o + r * DP, D * sizeof(float));
    return;
  }

  // O = o / l and lse = m + log l. A row that saw no key has l = 0: O = 0
  // and lse = -inf (the public contract), with no 0/0. A NaN logit made l
  // NaN: O and lse are NaN, never the -inf of "no key".
  // v_descale multiplies the output (fmha.h 0.3).
  const Operand& out = p.o;
  char* o_data = static_cast<char*>(out.data);
  const float v_descale = p.v_descale != nullptr ? p.v_descale[b * p.heads_kv + hk] : 1.f;
  for (int64_t r = 0; r < nr; ++r) {
    const float inv = l[r] > 0.f ? 1.f / l[r] : l[r] == 0.f ? 0.f : l[r];
    const int64_t at = sq.row_at(out, h_of(r), i_of(r));
    store_row<kIsa>(o + r * DP, v_descale == 1.f ? inv : inv * v_descale, D, ot, o_data + at * dtype_size(ot),
                    out.stride[3]);
  }
  if (p.lse != nullptr)
    for (int64_t r = 0; r < nr; ++r)
      p.lse[sq.lse_at(h_of(r), i_of(r))] =
          l[r] > 0.f ? m[r] + std::log(l[r]) : l[r] == 0.f ? -kInf : l[r];
}

// The second pass of a split block: the splits' (m_s, l_s, o_s) of the
// packed block `group` (batch x kv head) merged in split order, in FP64
// (seed section 4's rescale, applied across splits):
//   M = max_s m_s,  w_s = e^(m_s - M),  L = sum_s w_s l_s,
//   O = (sum_s w_s o_s) / L,  lse = M + log L.
// M = -inf (no split saw a key) uses 0 instead, as the tile loop does, so
// w_s = 0 rather than NaN. A split with w_s = 0 adds nothing to O even when
// its o_s is not finite (its keys' weights underflowed: fmha.h allows O to
// stay finite then), while its l_s still reaches L, so a NaN logit makes
// O and lse NaN. The first split's o row holds the merged row until it is
// stored.
void merge_splits(const Job& job, int64_t group) {
  const Problem& p = *job.p;
  const Plan& plan = job.plan;
  const int64_t D = p.head_dim;
  const int64_t b = group / p.heads_kv;
  const int64_t h0 = group % p.heads_kv * p.group_size();
  // The rows run_block packed for this sequence (its own Nq x G).
  const Seq sq = sequence(p, b);
  const int64_t nq = sq.e.len_q;
  const int64_t nr = nq * p.group_size();
  auto part = [&](int64_t s) {
    return reinterpret_cast<float*>(job.partials + (group * plan.splits + s) * job.partial_bytes);
  };
  double w[kMaxSplits];
  const double v_descale = p.v_descale != nullptr ? p.v_descale[group] : 1.0;
  const Operand& out = p.o;
  char* o_data = static_cast<char*>(out.data);
  for (int64_t r = 0; r < nr; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < plan.splits; ++s) mx = std::max<double>(mx, part(s)[r]);
    const double ms = mx == -std::numeric_limits<double>::infinity() ? 0.0 : mx;
    double l = 0;
    for (int64_t s = 0; s < plan.splits; ++s) {
      w[s] = std::exp(static_cast<double>(part(s)[r]) - ms);
      l += w[s] * part(s)[nr + r];
    }
    float* merged = part(0) + 2 * nr + r * D;
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t s = 0; s < plan.splits; ++s)
        if (w[s] != 0.0) acc += w[s] * part(s)[2 * nr + r * D + d];
      merged[d] = static_cast<float>(l > 0 ? acc / l * v_descale : l == 0 ? 0.0 : l);
    }
    const int64_t h = h0 + r / nq, i = r % nq;
    store_row<CpuIsa::kBaseline>(merged, 1.f, D, p.o_dtype, o_data + sq.row_at(out, h, i) * dtype_size(p.o_dtype),
                                 out.stride[3]);
    if (p.lse != nullptr)
      p.lse[sq.lse_at(h, i)] =
          static_cast<float>(l > 0 ? mx + std::log(l) : l == 0 ? -std::numeric_limits<double>::infinity() : l);
  }
}

// The ISA variants of run_block, and the choice among them.
using BlockFn = void (*)(const Job&, int64_t, int);

void run_block_baseline(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kBaseline>(job, item, worker);
}

#if FMHA_CPU_X86_VARIANTS
FMHA_CPU_TARGET_AVX2 void run_block_avx2(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kAvx2>(job, item, worker);
}

FMHA_CPU_TARGET_AVX512 void run_block_avx512(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kAvx512>(job, item, worker);
}

FMHA_CPU_TARGET_AVX512BF16 void run_block_avx512bf16(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kAvx512Bf16>(job, item, worker);
}

FMHA_CPU_TARGET_AVX512FP16 void run_block_avx512fp16(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kAvx512Fp16>(job, item, worker);
}

FMHA_CPU_TARGET_AMX void run_block_amx(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kAmx>(job, item, worker);
}
#endif

#if FMHA_CPU_ARM_VARIANTS
void run_block_neon(const Job& job, int64_t item, int worker) { run_block<CpuIsa::kNeon>(job, item, worker); }

void run_block_neonfp16(const Job& job, int64_t item, int worker) {
  run_block<CpuIsa::kNeonFp16>(job, item, worker);
}
#endif

// The function of the path active_isa() chose (cpuid, then FMHA_CPU_ISA;
// it never names a path this CPU or build lacks).
BlockFn select_block_fn() {
  switch (active_isa()) {
#if FMHA_CPU_X86_VARIANTS
    case CpuIsa::kAmx: return run_block_amx;
    case CpuIsa::kAvx512Fp16: return run_block_avx512fp16;
    case CpuIsa::kAvx512Bf16: return run_block_avx512bf16;
    case CpuIsa::kAvx512: return run_block_avx512;
    case CpuIsa::kAvx2: return run_block_avx2;
#endif
#if FMHA_CPU_ARM_VARIANTS
    case CpuIsa::kNeonFp16: return run_block_neonfp16;
    case CpuIsa::kNeon: return run_block_neon;
#endif
    default: return run_block_baseline;
  }
}

// Threads that take part: no more than there are work items of the first
// pass or of the amx path's packing (ThreadPool::parallel_for numbers its
// workers below that count; the merge pass needs no scratch).
int64_t workers(const Problem& p, int num_threads) {
  const Plan plan = make_plan(p);
  const PackLayout pack = pack_layout(p, plan);
  const int64_t pack_items = pack.keys > 0 ? p.batch * p.heads_kv * pack.chunks : 0;  // the amx packing pass
  return std::min<int64_t>(std::max(num_threads, 1), std::max(plan.items, pack_items));
}

// The split partials: one slot per work item when a packed block is split.
int64_t partials_bytes(const Problem& p) {
  const Plan plan = make_plan(p);
  return plan.splits > 1 ? plan.items * partial_bytes(p, plan) : 0;
}

// The amx path's K/V packs of every (batch, kv head), or 0 (PackLayout).
int64_t packs_bytes(const Problem& p) {
  const PackLayout k = pack_layout(p, make_plan(p));
  return k.keys > 0 ? p.batch * p.heads_kv * k.bytes : 0;
}

}  // namespace

size_t workspace_bytes(const Problem& p, const DeviceInfo& dev) {
  // One slice per worker that can take part. kAlignBytes of slack: the
  // caller guarantees only 16-byte alignment, and forward rounds the base
  // up so every slice starts on a cache line.
  // The split partials follow the slices, then the amx path's K/V packs.
  return static_cast<size_t>(workers(p, dev.num_threads) * scratch_layout(p).bytes + partials_bytes(p) +
                             packs_bytes(p) + kAlignBytes);
}

fmha_status forward(const Problem& p, const LaunchContext& ctx) {
  const int threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  if (ctx.device == nullptr || threads > std::max(ctx.device->num_threads, 1))
    return fail(FMHA_ERROR_INTERNAL, "cpu forward: pool of %d threads but the workspace was sized for %d",
                threads, ctx.device != nullptr ? ctx.device->num_threads : 0);
  if (ctx.workspace_bytes < workspace_bytes(p, *ctx.device) || ctx.workspace == nullptr)
    return fail(FMHA_ERROR_WORKSPACE_TOO_SMALL, "cpu forward: workspace_bytes=%zu but needs %zu",
                ctx.workspace_bytes, workspace_bytes(p, *ctx.device));

  Job job;
  job.p = &p;
  job.layout = scratch_layout(p);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(ctx.workspace);
  job.scratch = static_cast<char*>(ctx.workspace) + (kAlignBytes - raw % kAlignBytes) % kAlignBytes;
  job.plan = make_plan(p);
  job.partials = job.scratch + workers(p, threads) * job.layout.bytes;
  job.partial_bytes = partial_bytes(p, job.plan);
  job.pack = pack_layout(p, job.plan);
  job.packs = job.partials + partials_bytes(p);
  job.row_tiles = (p.seq_q + job.layout.rows - 1) / job.layout.rows;
  // Keys seen by the first and the last query block: start from the larger.
  auto block_keys = [&](int64_t t) {
    const int64_t first = t * job.layout.rows;
    const int64_t last = std::min(first + job.layout.rows, p.seq_q) - 1;
    const KeyRange a = key_range(first, p.seq_k, p.diag_offset, p.window_left, p.window_right);
    const KeyRange z = key_range(last, p.seq_k, p.diag_offset, p.window_left, p.window_right);
    return std::max<int64_t>(z.hi - a.lo, 0);
  };
  job.longest_last = block_keys(job.row_tiles - 1) > block_keys(0);
  // One thread has no one to balance against: it takes the blocks head by
  // head, so the amx path's packs of a kv head (1 MiB of BF16 K/V at N =
  // 2048, D = 128) stay in its L2 over that head's blocks instead of
  // coming from L3 for every block. The order changes no result (each
  // block's work is its own).
  job.head_major = threads == 1;

  const int64_t items = job.plan.items;
  // The lambdas capture two pointers at most, so std::function stores them
  // inline: forward allocates nothing.
  const Job* jp = &job;
  const BlockFn run = select_block_fn();
#if FMHA_CPU_X86_VARIANTS && FMHA_CPU_AMX
  if (job.pack.keys > 0) {  // the amx path: K/V packed once per (batch, kv head) first
    auto pack = [jp](int64_t item, int worker) { pack_kv_amx(*jp, item, worker); };
    const int64_t pack_items = p.batch * p.heads_kv * job.pack.chunks;
    if (ctx.pool != nullptr)
      ctx.pool->parallel_for(pack_items, pack);
    else
      for (int64_t i = 0; i < pack_items; ++i) pack(i, 0);
  }
#endif
  auto body = [jp, run](int64_t item, int worker) { run(*jp, item, worker); };
  if (ctx.pool != nullptr)
    ctx.pool->parallel_for(items, body);
  else
    for (int64_t i = 0; i < items; ++i) body(i, 0);
  if (job.plan.splits > 1) {
    const int64_t groups = p.batch * p.heads_kv;
    auto merge = [jp](int64_t group, int) { merge_splits(*jp, group); };
    if (ctx.pool != nullptr)
      ctx.pool->parallel_for(groups, merge);
    else
      for (int64_t g = 0; g < groups; ++g) merge(g, 0);
  }
  return FMHA_SUCCESS;
}

}  // namespace fmha::cpu
