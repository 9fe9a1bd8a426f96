// The AMX tiles of the amx path (see cpu_amx.h): gemm's Tiles policy on the
// hardware. Every function here carries the AMX target itself and is
// reached only through the amx path's dispatch, so the rest of the library
// stays free of tile instructions (tools/check_cpu_isa.sh).
#include "backend/cpu/cpu_amx.h"

#if FMHA_CPU_AMX
#include <immintrin.h>

namespace fmha::cpu::amx {
namespace {

#define FMHA_CPU_AMX_INLINE FMHA_CPU_TARGET_AMX_TILES inline __attribute__((always_inline))

// The tile number of an AMX instruction is part of its encoding (GCC's
// intrinsics paste it into the assembly), so each operation switches over
// the literal numbers; gemm calls them with constants, which folds the
// switch away once inlined.
struct AmxTiles {
  FMHA_CPU_AMX_INLINE void load(int x, const void* p, int64_t stride) {
    switch (x) {
      case 0: _tile_loadd(0, p, stride); break;
      case 1: _tile_loadd(1, p, stride); break;
      case 2: _tile_loadd(2, p, stride); break;
      case 3: _tile_loadd(3, p, stride); break;
      case 4: _tile_loadd(4, p, stride); break;
      case 5: _tile_loadd(5, p, stride); break;
      case 6: _tile_loadd(6, p, stride); break;
      default: _tile_loadd(7, p, stride); break;
    }
  }
  FMHA_CPU_AMX_INLINE void store(int x, void* p, int64_t stride) {
    switch (x) {
      case 0: _tile_stored(0, p, stride); break;
      case 1: _tile_stored(1, p, stride); break;
      case 2: _tile_stored(2, p, stride); break;
      default: _tile_stored(3, p, stride); break;
    }
  }
  FMHA_CPU_AMX_INLINE void zero(int x) {
    switch (x) {
      case 0: _tile_zero(0); break;
      case 1: _tile_zero(1); break;
      case 2: _tile_zero(2); break;
      default: _tile_zero(3); break;
    }
  }
  // Accumulator c += A tile 4 + c / 2 . B tile 6 + c % 2 (cpu_amx.h).
  FMHA_CPU_AMX_INLINE void dp(int c) {
    switch (c) {
      case 0: _tile_dpbf16ps(0, 4, 6); break;
      case 1: _tile_dpbf16ps(1, 4, 7); break;
      case 2: _tile_dpbf16ps(2, 5, 6); break;
      default: _tile_dpbf16ps(3, 5, 7); break;
    }
  }
};

}  // namespace

__attribute__((noinline)) FMHA_CPU_TARGET_AMX_TILES void gemm_amx(const Term* terms, int nterms, int64_t lda,
                                                                   int64_t ldb, float* c, int64_t ldc, int64_t m,
                                                                   int64_t n, int64_t depth, bool accumulate,
                                                                   bool configure) {
#if defined(FMHA_CPU_AMX_MODEL)
  (void)configure;
  ModelTiles tiles;
#else
  if (configure) {
    const TileConfig config = tile_config();
    _tile_loadconfig(&config);
  }
  AmxTiles tiles;
#endif
  gemm(tiles, terms, nterms, lda, ldb, c, ldc, m, n, depth, accumulate);
}

__attribute__((noinline)) FMHA_CPU_TARGET_AMX_TILES void release_amx() {
#if !defined(FMHA_CPU_AMX_MODEL)
  _tile_release();
#endif
}

}  // namespace fmha::cpu::amx
#endif
