// The amx path's tile products (src/backend/cpu/cpu_amx.h) on any CPU: the
// BF16 hi/lo split, and the blocking loop with its operand layouts run on
// the scalar model of the tiles (ModelTiles: tile loads and stores with
// byte strides, tdpbf16ps per Intel's pseudocode) against a float64
// product of the same operands; on a CPU with AMX (and the OS's tile
// permission) the same products on the hardware tiles (amx::gemm_amx),
// which test_cpu_isa_amx then runs through the whole CPU suite.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu_amx.h"
#include "backend/cpu/cpu_isa.h"
#include "core/numeric.h"

namespace amx = fmha::cpu::amx;

TEST_CASE("cpu amx: split gives F16 values exactly, FP32 weights to 16 bits") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = fmha::half_to_float(static_cast<uint16_t>(h));
    uint16_t hi, lo;
    amx::split(x, &hi, &lo);
    if (std::isnan(x)) {
      CHECK(std::isnan(fmha::bf16_to_float(hi)));
      CHECK(lo == 0);
    } else if (std::isinf(x)) {
      CHECK(fmha::bf16_to_float(hi) == x);
      CHECK(lo == 0);
    } else {
      CAPTURE(h);
      REQUIRE(fmha::bf16_to_float(hi) + fmha::bf16_to_float(lo) == x);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int i = 0; i < 100000; ++i) {
    const float p = u(rng);
    uint16_t hi, lo;
    amx::split(p, &hi, &lo);
    const double back = static_cast<double>(fmha::bf16_to_float(hi)) + fmha::bf16_to_float(lo);
    CHECK(std::fabs(back - p) <= std::ldexp(static_cast<double>(p), -16));
  }
}

TEST_CASE("cpu amx: tile configuration is palette 1, eight 16 x 64-byte tiles") {
  const amx::TileConfig c = amx::tile_config();
  CHECK(c.palette == 1);
  CHECK(c.start_row == 0);
  for (int t = 0; t < 16; ++t) {
    CHECK(c.colsb[t] == (t < 8 ? 64 : 0));
    CHECK(c.rows[t] == (t < 8 ? 16 : 0));
  }
}

namespace {

// A (m x depth, row-major) . B (depth x n) + C0 through amx::gemm on the
// model tiles, with A and B split into hi/lo planes (terms: hi.hi, hi.lo,
// lo.hi when `split3`, else hi.hi only on BF16-exact data), against float64.
void check_gemm(int64_t m, int64_t n, int64_t depth, int64_t lda, int64_t ldb, bool split3, bool accumulate,
                uint32_t seed, bool hardware = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  // F16 data (split3) or BF16 data: each element rounded to its type.
  auto value = [&] {
    const float x = nd(rng);
    return split3 ? fmha::half_to_float(fmha::float_to_half(x)) : fmha::bf16_to_float(fmha::float_to_bf16(x));
  };
  std::vector<float> a(m * depth), b(depth * n), c0(m * n);
  for (float& x : a) x = value();
  for (float& x : b) x = value();
  for (float& x : c0) x = nd(rng);
  // Planes, with junk (NaN) outside the operands' extents where the
  // strides leave room: the loop must never read it.
  const uint16_t kJunk = 0x7fc1;
  std::vector<uint16_t> a_hi(m * lda, kJunk), a_lo(m * lda, kJunk);
  std::vector<uint16_t> b_hi(depth * ldb, kJunk), b_lo(depth * ldb, kJunk);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t d = 0; d < depth; ++d) amx::split(a[i * depth + d], &a_hi[i * lda + d], &a_lo[i * lda + d]);
  for (int64_t d = 0; d < depth; ++d)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = amx::vnni_at(d, j, ldb);
      amx::split(b[d * n + j], &b_hi[at], &b_lo[at]);
    }
  const int64_t ldc = n + 16;
  std::vector<float> c(m * ldc, std::nanf(""));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = c0[i * n + j];
  const amx::Term terms[] = {{a_hi.data(), b_hi.data()}, {a_hi.data(), b_lo.data()}, {a_lo.data(), b_hi.data()}};
  if (hardware) {
#if FMHA_CPU_AMX
    amx::gemm_amx(terms, split3 ? 3 : 1, lda, ldb, c.data(), ldc, m, n, depth, accumulate);
    amx::release_amx();
#endif
  } else {
    amx::ModelTiles tiles;
    amx::gemm(tiles, terms, split3 ? 3 : 1, lda, ldb, c.data(), ldc, m, n, depth, accumulate);
  }
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = accumulate ? c0[i * n + j] : 0.0, mag = std::fabs(ref);
      for (int64_t d = 0; d < depth; ++d) {
        ref += static_cast<double>(a[i * depth + d]) * b[d * n + j];
        mag += std::fabs(static_cast<double>(a[i * depth + d]) * b[d * n + j]);
      }
      worst = std::max(worst, std::fabs(c[i * ldc + j] - ref) / mag);
    }
  // FP32 sums of exact products: a few ulps of the magnitude; with split
  // operands also the dropped lo . lo terms, each <= 2^-18 of its product.
  CHECK(worst <= (split3 ? 1e-5 : 1e-6));
  // The columns past n are untouched.
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n; j < ldc; ++j) CHECK(std::isnan(c[i * ldc + j]));
}

}  // namespace

TEST_CASE("cpu amx: gemm on the model tiles matches float64 (layouts, blocking, split terms)") {
  // The shapes of run_block: S = K_tile . Q^T (keys x rows over head_dim)
  // and o += P . V (rows x head_dim over keys), and small ones.
  check_gemm(32, 32, 32, 32, 32, false, false, 1);
  check_gemm(64, 128, 128, 128, 128, false, false, 2);   // S, BF16, D = 128
  check_gemm(64, 128, 128, 128, 128, true, false, 3);    // S, F16
  check_gemm(128, 128, 64, 64, 128, true, true, 4);      // P . V, F16, accumulated
  check_gemm(128, 160, 64, 64, 160, false, true, 5);     // P . V, head_dim padded to 160
  check_gemm(32, 64, 96, 112, 80, true, true, 6);        // strides wider than the extents
}

TEST_CASE("cpu amx: gemm on the hardware tiles matches float64") {
  if (!fmha::cpu::isa_available(fmha::cpu::CpuIsa::kAmx)) {
    MESSAGE("skipped: no amx path on this CPU (AMX-BF16 with the OS's tile permission)");
    return;
  }
  check_gemm(32, 32, 32, 32, 32, false, false, 11, true);
  check_gemm(128, 64, 128, 128, 64, false, false, 12, true);  // S = Q . K^T, BF16, D = 128
  check_gemm(128, 64, 128, 128, 64, true, false, 13, true);   // S, F16
  check_gemm(128, 128, 64, 64, 128, true, true, 14, true);    // P . V, F16, accumulated
  check_gemm(64, 288, 64, 64, 288, false, true, 15, true);    // P . V, head_dim padded to 288
  check_gemm(32, 64, 96, 112, 80, true, true, 16, true);      // strides wider than the extents
}
