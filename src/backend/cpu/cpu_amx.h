// AMX tiles for the CPU backend's amx path (cpu_isa.h): the two products of
// a query block, S = K_tile . Q^T and o += P . V_tile, as BF16 tile products
// (tdpbf16ps) with FP32 sums.
//
// Exactness. tdpbf16ps multiplies BF16 pairs exactly and adds the products
// into FP32 accumulators (round to nearest even; BF16 and FP32 subnormals
// flushed, far below any score's or weight's resolution). An operand that is
// not BF16 goes in as the sum of two BF16 planes, hi = bf16(x) and lo =
// bf16(x - hi) (split below), and a product takes the three terms
// hi.hi + hi.lo + lo.hi (lo.lo is at most 2^-18 of the product for F16
// data, 2^-16 for FP32):
//   - F16 inputs (11 significant bits): hi + lo == x exactly (|lo| <=
//     2^-9 |hi|), so F16 scores and P.V lose ~2^-18 relative per product
//     beyond FP32 summation, ~10^4 below the F16 tolerance. A plain conversion to BF16
//     would round every element to 8 bits, ~2^-9 relative error on O: at
//     the F16 tolerance (2e-3 rel L2), so it is not used.
//   - P (FP32 weights in [0, 1]): hi + lo carries 16 significant bits
//     (2^-17 relative), against 2^-9 for P rounded to one BF16 plane. Beside
//     F16 V the split keeps F16's accuracy; beside BF16 V, P rounded to BF16
//     stays well inside the BF16 tolerance (measured in cpu_attention.cpp),
//     as the GPU kernels' P does.
//   - FP8 values (2-3 mantissa bits, within BF16's exponent range) and
//     BF16 values are exact in one plane.
// So a product takes one term (hi.hi) plus one per operand that has a lo
// plane: BF16 data one, F16 data three. An inf or NaN keeps lo = 0 (split),
// so a cross term can meet 0 * inf = NaN where the product is +-inf; the
// caller recomputes such sums (cpu_attention.cpp, amx_fix_scores).
//
// Layouts (element indices, BF16 values as uint16):
//   A operand (left, m x depth): row-major, A[i][d] at i * lda + d.
//   B operand (right, depth x n): VNNI form, pairs of depth interleaved,
//     B[d][c] at vnni_at(d, c, ldb) = (d / 2) * 2 * ldb + 2 * c + d % 2,
//     so one tile row holds the pairs (d, d + 1) of 16 columns.
//   C (m x n FP32): row-major, C[i][c] at i * ldc + c.
// m, n and depth are multiples of kBlock and kDepth; the caller zeroes the
// padding (a NaN in a padding row or column of A or B would reach real
// sums through 0 * NaN).
//
// Tiles (palette 1, each 16 rows x 64 bytes): 0-3 the 2 x 2 accumulators of
// a 32 x 32 block of C, 4-5 two 16-row strips of A, 6-7 two 16-column strips
// of B. The blocking loop (gemm) is written once over a Tiles policy: the
// AMX one (cpu_amx.cpp, the hardware) and ModelTiles below, a scalar model
// of the same tile loads, stores and tdpbf16ps that tests run on any CPU.
//
// Developer builds on a CPU without AMX: compiled with -DFMHA_CPU_AMX_MODEL
// (CMAKE_CXX_FLAGS), gemm_amx runs ModelTiles instead of the hardware and
// cpu_isa.cpp offers the amx and avx512fp16 paths wherever avx512bf16 runs
// (neither run_block variant holds an AMX instruction then), so the
// whole CPU suite runs the amx path's packing and blocking, slowly (the
// two run_block variants then target avx512bf16 only: with avx512fp16 GCC
// moves 16-bit values through vmovw). Never
// for a release: the paths' names would then lie about the hardware.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/numeric.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FMHA_CPU_BASELINE_ONLY)
#define FMHA_CPU_AMX 1
// The AMX instructions only; the caller's own target adds AVX-512.
#define FMHA_CPU_TARGET_AMX_TILES __attribute__((target("amx-tile,amx-bf16")))
#else
#define FMHA_CPU_AMX 0
#define FMHA_CPU_TARGET_AMX_TILES
#endif

namespace fmha::cpu::amx {

constexpr int64_t kTileRows = 16;   // rows of every tile
constexpr int64_t kTileBytes = 64;  // bytes of a tile row
constexpr int64_t kDepth = kTileBytes / 2;         // BF16 elements of an A row: one tdpbf16ps's depth
constexpr int64_t kCols = kTileBytes / 4;          // FP32 columns of an accumulator tile
constexpr int64_t kBlock = 2 * kTileRows;          // a 2 x 2 block of accumulators: 32 x 32
static_assert(kCols == kTileRows, "square accumulator tiles: the 2 x 2 block is kBlock both ways");

// B[d][c] of a VNNI operand with ldb columns.
inline int64_t vnni_at(int64_t d, int64_t c, int64_t ldb) { return (d >> 1) * 2 * ldb + 2 * c + (d & 1); }

// x = hi + lo as two BF16 values (exactly for F16 values; for FP32 to 16
// significant bits). A non-finite x keeps it in hi with lo = 0 (x - hi
// would be NaN for an infinity).
inline void split(float x, uint16_t* hi, uint16_t* lo) {
  const uint16_t h = float_to_bf16(x);
  *hi = h;
  const float r = x - bf16_to_float(h);
  *lo = std::isfinite(x) ? float_to_bf16(r) : 0;
}

// The 64-byte tile configuration (ldtilecfg's operand): palette 1, tiles
// 0-7 of 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

inline TileConfig tile_config() {
  TileConfig c;
  std::memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = static_cast<uint16_t>(kTileBytes);
    c.rows[t] = static_cast<uint8_t>(kTileRows);
  }
  return c;
}

// One product term: A_t and B_t.
struct Term {
  const uint16_t* a;
  const uint16_t* b;
};
constexpr int kMaxTerms = 3;

// C = (accumulate ? C : 0) + sum over terms t of A_t . B_t, m x n, over
// `depth` (see the layouts above). Per 32 x 32 block of C the four
// accumulators stay in tiles across every term and depth step; the sums run
// in a fixed order (term, then depth), so the result never depends on the
// thread that runs it.
template <class Tiles>
FMHA_CPU_TARGET_AMX_TILES inline void gemm(Tiles& tiles, const Term* terms, int nterms, int64_t lda, int64_t ldb,
                                           float* c, int64_t ldc, int64_t m, int64_t n, int64_t depth,
                                           bool accumulate) {
  const int64_t a_stride = lda * 2, b_stride = ldb * 4, c_stride = ldc * 4;  // bytes between tile rows
  for (int64_t i = 0; i < m; i += kBlock)
    for (int64_t j = 0; j < n; j += kBlock) {
      float* c00 = c + i * ldc + j;
      float* c10 = c00 + kTileRows * ldc;
      if (accumulate) {
        tiles.load(0, c00, c_stride);
        tiles.load(1, c00 + kCols, c_stride);
        tiles.load(2, c10, c_stride);
        tiles.load(3, c10 + kCols, c_stride);
      } else {
        for (int t = 0; t < 4; ++t) tiles.zero(t);
      }
      for (int t = 0; t < nterms; ++t)
        for (int64_t d = 0; d < depth; d += kDepth) {
          const uint16_t* a = terms[t].a + i * lda + d;
          const uint16_t* b = terms[t].b + vnni_at(d, j, ldb);
          tiles.load(4, a, a_stride);
          tiles.load(5, a + kTileRows * lda, a_stride);
          tiles.load(6, b, b_stride);
          tiles.load(7, b + 2 * kCols, b_stride);
          tiles.dp(0);  // c00 += a0 . b0
          tiles.dp(1);  // c01 += a0 . b1
          tiles.dp(2);  // c10 += a1 . b0
          tiles.dp(3);  // c11 += a1 . b1
        }
      tiles.store(0, c00, c_stride);
      tiles.store(1, c00 + kCols, c_stride);
      tiles.store(2, c10, c_stride);
      tiles.store(3, c10 + kCols, c_stride);
    }
}

// The scalar model of the tiles: 8 tiles of 16 x 64 bytes, loads and stores
// with a row stride in bytes, and tdpbf16ps as Intel's pseudocode states it
// (per row m, pair k, column n: c += a[m][2k] b[k][2n] + a[m][2k+1]
// b[k][2n+1] in FP32, BF16 subnormal inputs read as zero, subnormal results
// flushed to zero; the hardware's rounding within one pair may differ, so
// compare with FP32-level tolerances, not bits).
struct ModelTiles {
  unsigned char t[8][kTileRows][kTileBytes];

  void load(int x, const void* p, int64_t stride) {
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(t[x][r], static_cast<const char*>(p) + r * stride, kTileBytes);
  }
  void store(int x, void* p, int64_t stride) {
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(static_cast<char*>(p) + r * stride, t[x][r], kTileBytes);
  }
  void zero(int x) { std::memset(t[x], 0, sizeof t[x]); }
  float f32(int x, int64_t r, int64_t col) const {
    float v;
    std::memcpy(&v, &t[x][r][4 * col], 4);
    return v;
  }
  float bf16(int x, int64_t r, int64_t e) const {
    uint16_t v;
    std::memcpy(&v, &t[x][r][2 * e], 2);
    if ((v & 0x7f80u) == 0) v &= 0x8000u;  // DAZ
    return bf16_to_float(v);
  }
  // Accumulator c (0-3) += A tile 4 + c / 2 times B tile 6 + c % 2.
  void dp(int c) {
    const int a = 4 + c / 2, b = 6 + c % 2;
    for (int64_t r = 0; r < kTileRows; ++r)
      for (int64_t col = 0; col < kCols; ++col) {
        float acc = f32(c, r, col);
        for (int64_t k = 0; k < kTileRows; ++k)
          acc += bf16(a, r, 2 * k) * bf16(b, k, 2 * col) + bf16(a, r, 2 * k + 1) * bf16(b, k, 2 * col + 1);
        if (std::fabs(acc) < 0x1p-126f) acc = std::copysign(0.f, acc);  // FTZ
        std::memcpy(&t[c][r][4 * col], &acc, 4);
      }
  }
};

#if FMHA_CPU_AMX
// gemm on the AMX tiles of this thread, configuring them first (ldtilecfg)
// when `configure`; a caller that makes many products in a row (a query
// block: two per key tile) configures on the first only, with nothing
// between them that could release or reconfigure the tiles. Call only on
// the amx path (isa_available(CpuIsa::kAmx): the CPU has AMX-BF16 and the
// process holds the tile-data permission).
void gemm_amx(const Term* terms, int nterms, int64_t lda, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
              int64_t depth, bool accumulate, bool configure = true);
// Returns this thread's tiles to their initial state (tilerelease), so a
// context switch saves no tile data; the next gemm_amx configures them again.
void release_amx();
#endif

}  // namespace fmha::cpu::amx
