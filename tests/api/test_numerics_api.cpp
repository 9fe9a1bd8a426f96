// The C contract of the 0.3 inference-numerics fields (FP8 dtypes, mixed
// dtypes, descales, bias, ALiBi): every rule is validated with a message
// naming the field and its value, nothing is written on failure, and
// structs of the 0.1 and 0.2 sizes keep working (they cannot hold the new
// fields, and the library must not read past them).
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_f32_problem.h"

namespace {

// A valid dense F32 problem: q/o [B, Hq, Nq, D], k/v [B, Hk, Nk, D].
struct Numerics : fmha_api_test::CpuF32Problem {
  static constexpr int64_t B = 2, Hq = 4, Hk = 2, Nq = 5, Nk = 7, D = 16;
  std::vector<float> q, k, v, bias, descale, slopes;

  Numerics()
      : q(B * Hq * Nq * D), k(B * Hk * Nk * D), v(k.size()), bias(Nq * Nk), descale(B * Hk), slopes(B * Hq) {
    o.assign(q.size(), 0.f);
    lse.assign(B * Hq * Nq, 0.f);
    uint32_t x = 29u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f); };
    for (auto* t : {&q, &k, &v, &bias})
      for (float& e : *t) e = next();
    for (float& e : descale) e = 1.f + next();
    for (float& e : slopes) e = 0.25f + next() * 0.1f;
    poison();
    view(&p.q, q.data(), Hq, Nq);
    view(&p.k, k.data(), Hk, Nk);
    view(&p.v, v.data(), Hk, Nk);
    view(&p.o, o.data(), Hq, Nq);
    p.lse = lse.data();
    workspace.assign(1 << 20, 0);
  }

  static void view(fmha_tensor* t, void* data, int64_t heads, int64_t n) {
    CpuF32Problem::view(t, data, B, heads, n, D);
  }
  // The [1, 1, Nq, Nk] bias, a mask shared by the batch.
  void set_bias() {
    p.bias.data = bias.data();
    p.bias.dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {1, 1, Nq, Nk}, strides[4] = {0, 0, Nk, 1};
    std::memcpy(p.bias.dims, dims, sizeof dims);
    std::memcpy(p.bias.strides, strides, sizeof strides);
  }
};

}  // namespace

TEST_CASE("numerics: a forward with every 0.3 field runs on cpu_tiled") {
  Numerics f;
  f.set_bias();
  f.p.q_descale = f.p.k_descale = f.p.v_descale = f.descale.data();
  f.p.alibi_slopes = f.slopes.data();
  f.p.alibi_slopes_stride = Numerics::Hq;
  f.p.mask_flags = FMHA_MASK_CAUSAL;
  REQUIRE_MESSAGE(f.run() == FMHA_SUCCESS, fmha_last_error_message());
  for (float e : f.o) CHECK(std::isfinite(e));
  char buf[1024];
  REQUIRE(fmha_forward_explain(f.h, &f.p, buf, sizeof buf) == FMHA_SUCCESS);
  CHECK(std::string(buf).find("chosen: cpu_tiled") != std::string::npos);
}

TEST_CASE("numerics: dtype combinations") {
  Numerics f;
  std::vector<uint8_t> k8(f.k.size(), 0x38), v8(f.v.size(), 0x30);  // 1.0 and 0.5 (E4M3)
  SUBCASE("FP8 K/V under an F32 q") {
    f.p.k.data = k8.data();
    f.p.v.data = v8.data();
    f.p.k.dtype = f.p.v.dtype = FMHA_DTYPE_F8E4M3;
    f.expect_failure("q.dtype=F32 with k.dtype=F8E4M3: with FP8 K/V, q must be F16, BF16 or FP8");
  }
  SUBCASE("k and v differ") {
    f.p.k.data = k8.data();
    f.p.k.dtype = FMHA_DTYPE_F8E4M3;
    f.expect_failure("v.dtype=F32 differs from k.dtype=F8E4M3 (k and v share a dtype)");
  }
  SUBCASE("FP8 k and v of different kinds") {
    f.p.k.data = k8.data();
    f.p.v.data = v8.data();
    f.p.k.dtype = FMHA_DTYPE_F8E4M3;
    f.p.v.dtype = FMHA_DTYPE_F8E5M2;
    f.expect_failure("v.dtype=F8E5M2 differs from k.dtype=F8E4M3");
  }
  SUBCASE("FP8 q over 16-bit K/V") {
    std::vector<uint8_t> q8(f.q.size(), 0x38);
    f.p.q.data = q8.data();
    f.p.q.dtype = FMHA_DTYPE_F8E4M3;
    f.expect_failure("k.dtype=F32 differs from q.dtype=F8E4M3 (only FP8 K/V may differ from q; an FP8 q needs FP8 K/V)");
  }
  SUBCASE("F16 k under an F32 q") {
    f.p.k.dtype = f.p.v.dtype = FMHA_DTYPE_F16;
    f.expect_failure("k.dtype=F16 differs from q.dtype=F32 (only FP8 K/V may differ from q)");
  }
  SUBCASE("FP8 o") {
    f.p.o.dtype = FMHA_DTYPE_F8E5M2;
    f.expect_failure("o.dtype=F8E5M2 must be F16, BF16 or F32 (FP8 is for inputs only)");
  }
  SUBCASE("not an fmha_dtype") {
    f.p.q.dtype = static_cast<fmha_dtype>(6);
    f.expect_failure("q.dtype=6 is not an fmha_dtype (F16=1, BF16=2, F32=3, F8E4M3=4, F8E5M2=5)");
  }
  SUBCASE("o F16 under F32 inputs is valid") {
    std::vector<uint16_t> o16(f.o.size(), 0x7e5a);
    f.p.o.data = o16.data();
    f.p.o.dtype = FMHA_DTYPE_F16;
    CHECK(f.run() == FMHA_SUCCESS);
    for (uint16_t e : o16) CHECK(e != 0x7e5a);
  }
}

TEST_CASE("numerics: the bias is validated") {
  Numerics f;
  f.set_bias();
  SUBCASE("dtype") {
    f.p.bias.dtype = FMHA_DTYPE_F8E4M3;
    f.expect_failure("bias.dtype=4 must be F16 (1), BF16 (2) or F32 (3)");
  }
  SUBCASE("dims: neither the problem's nor 1") {
    f.p.bias.dims[3] = 6;
    f.expect_failure("bias.dims[3]=6 must be 7 (Nk) or 1 (broadcast)");
  }
  SUBCASE("dims: batch") {
    f.p.bias.dims[0] = 3;
    f.expect_failure("bias.dims[0]=3 must be 2 (batch) or 1 (broadcast)");
  }
  SUBCASE("negative stride") {
    f.p.bias.strides[2] = -1;
    f.expect_failure("bias.strides[2]=-1 must be non-negative");
  }
  SUBCASE("misaligned") {
    f.p.bias.data = reinterpret_cast<char*>(f.bias.data()) + 2;
    f.expect_failure("bias.data=");
    CHECK(std::string(fmha_last_error_message()).find("is not 4-byte aligned (F32 elements)") != std::string::npos);
  }
  SUBCASE("extent overflows") {
    f.p.bias.strides[3] = INT64_MAX / 2;
    f.expect_failure("bias: dims x strides overflows int64");
  }
  SUBCASE("o overlaps the bias") {
    f.p.bias.data = f.o.data() + 8;
    f.expect_failure("o overlaps bias");
  }
  SUBCASE("lse overlaps the bias") {
    f.p.bias.data = f.lse.data();
    f.p.bias.dims[2] = 1;
    f.p.bias.dims[3] = 1;
    f.expect_failure("lse overlaps bias");
  }
  SUBCASE("a NULL bias ignores its other fields") {
    f.p.bias.data = nullptr;
    f.p.bias.dtype = static_cast<fmha_dtype>(77);
    f.p.bias.dims[0] = -5;
    CHECK(f.run() == FMHA_SUCCESS);
  }
}

TEST_CASE("numerics: descales and ALiBi slopes are validated") {
  Numerics f;
  SUBCASE("misaligned descale") {
    f.p.k_descale = reinterpret_cast<const float*>(reinterpret_cast<const char*>(f.descale.data()) + 1);
    f.expect_failure("k_descale=");
    CHECK(std::string(fmha_last_error_message()).find("is not 4-byte aligned") != std::string::npos);
  }
  SUBCASE("o overlaps a descale") {
    f.p.v_descale = f.o.data() + 3;
    f.expect_failure("o overlaps v_descale");
  }
  SUBCASE("lse overlaps a descale") {
    f.p.q_descale = f.lse.data() + 1;
    f.expect_failure("lse overlaps q_descale");
  }
  SUBCASE("a stride without slopes") {
    f.p.alibi_slopes_stride = 4;
    f.expect_failure("alibi_slopes_stride=4 must be 0 without alibi_slopes");
  }
  SUBCASE("a stride below Hq") {
    f.p.alibi_slopes = f.slopes.data();
    f.p.alibi_slopes_stride = 3;
    f.expect_failure("alibi_slopes_stride=3 must be 0 ([Hq] slopes) or >= q.dims[1]=4 ([B, Hq] slopes)");
  }
  SUBCASE("a stride that overflows") {
    f.p.alibi_slopes = f.slopes.data();
    f.p.alibi_slopes_stride = INT64_MAX;
    f.expect_failure("alibi_slopes: 2 rows of stride alibi_slopes_stride=9223372036854775807 overflow int64");
  }
  SUBCASE("misaligned slopes") {
    f.p.alibi_slopes = reinterpret_cast<const float*>(reinterpret_cast<const char*>(f.slopes.data()) + 2);
    f.expect_failure("alibi_slopes=");
    CHECK(std::string(fmha_last_error_message()).find("is not 4-byte aligned") != std::string::npos);
  }
  SUBCASE("o overlaps the slopes") {
    f.p.alibi_slopes = f.o.data();
    f.expect_failure("o overlaps alibi_slopes");
  }
  SUBCASE("the workspace must not overlap the 0.3 inputs") {
    f.set_bias();
    f.p.q_descale = f.descale.data();
    size_t bytes = 0;
    REQUIRE(fmha_forward_workspace_size(f.h, &f.p, &bytes) == FMHA_SUCCESS);
    REQUIRE(bytes > 0);
    std::vector<float> block(bytes / 4 + 64);
    for (const char* which : {"q_descale", "bias"}) {
      CAPTURE(which);
      void* ws = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(block.data()) + 15) & ~uintptr_t{15});
      if (std::string(which) == "bias") {
        f.p.q_descale = f.descale.data();
        f.p.bias.data = ws;
      } else {
        f.p.bias.data = f.bias.data();
        f.p.q_descale = static_cast<const float*>(ws);
      }
      f.poison();
      CHECK(fmha_forward(f.h, &f.p, ws, bytes) == FMHA_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(fmha_last_error_message()).find(std::string("workspace overlaps ") + which) !=
            std::string::npos);
      CHECK(f.untouched());
    }
  }
}

TEST_CASE("numerics: structs of the 0.1 and 0.2 sizes keep working, read to their end and no further") {
  Numerics f;
  f.p.mask_flags = FMHA_MASK_CAUSAL;
  REQUIRE(f.run() == FMHA_SUCCESS);
  const std::vector<float> o_full = f.o, lse_full = f.lse;
  for (uint32_t size : {FMHA_FORWARD_PARAMS_SIZE_V1, FMHA_FORWARD_PARAMS_SIZE_V2}) {
    CAPTURE(size);
    // Exactly `size` bytes on the heap: AddressSanitizer catches a read past
    // them.
    auto* block = static_cast<unsigned char*>(std::malloc(size));
    REQUIRE(block != nullptr);
    std::memcpy(block, &f.p, size);
    std::memcpy(block, &size, sizeof size);  // struct_size
    f.poison();
    const auto* old = reinterpret_cast<const fmha_forward_params*>(block);
    size_t bytes = 0;
    CHECK(fmha_forward_workspace_size(f.h, old, &bytes) == FMHA_SUCCESS);
    CHECK(bytes <= f.ws_bytes());
    CHECK(fmha_forward(f.h, old, f.ws(), f.ws_bytes()) == FMHA_SUCCESS);
    CHECK(std::memcmp(f.o.data(), o_full.data(), o_full.size() * 4) == 0);
    CHECK(std::memcmp(f.lse.data(), lse_full.data(), lse_full.size() * 4) == 0);
    char buf[512];
    CHECK(fmha_forward_explain(f.h, old, buf, sizeof buf) == FMHA_SUCCESS);
    std::free(block);
  }
  // A full-size struct whose struct_size says 0.2: the 0.3 fields' memory
  // is not read, whatever it holds.
  fmha_forward_params p = f.p;
  p.struct_size = FMHA_FORWARD_PARAMS_SIZE_V2;
  p.q_descale = reinterpret_cast<const float*>(uintptr_t{8});
  p.bias.data = reinterpret_cast<void*>(uintptr_t{1});
  p.bias.dtype = static_cast<fmha_dtype>(99);
  p.alibi_slopes_stride = -3;
  f.poison();
  CHECK(f.run(&p) == FMHA_SUCCESS);
  CHECK(std::memcmp(f.o.data(), o_full.data(), o_full.size() * 4) == 0);
}

TEST_CASE("numerics: a -inf bias row gives O = 0 and lse = -inf; +inf or NaN in a seen key's bias gives NaN") {
  Numerics f;
  f.set_bias();
  const float inf = INFINITY;
  for (int64_t j = 0; j < Numerics::Nk; ++j) f.bias[0 * Numerics::Nk + j] = -inf;  // row 0: all -inf
  f.bias[1 * Numerics::Nk + 3] = inf;                                           // row 1: one +inf
  f.bias[2 * Numerics::Nk + 6] = std::nanf("");                                 // row 2: NaN on a masked key
  f.bias[3 * Numerics::Nk + 0] = -inf;                                          // row 3: one -inf
  f.bias[4 * Numerics::Nk + 2] = std::nanf("");                                 // row 4: NaN on a seen key
  f.p.mask_flags = FMHA_MASK_CAUSAL;  // d(i) = i + Nk - Nq = i + 2: row i sees keys 0..i+2
  REQUIRE(f.run() == FMHA_SUCCESS);
  for (int64_t b = 0; b < Numerics::B; ++b)
    for (int64_t h = 0; h < Numerics::Hq; ++h) {
      CAPTURE(b);
      CAPTURE(h);
      const int64_t row0 = (b * Numerics::Hq + h) * Numerics::Nq;
      CHECK(f.lse[row0] == -inf);
      for (int64_t d = 0; d < Numerics::D; ++d) CHECK(f.o[row0 * Numerics::D + d] == 0.f);
      CHECK(std::isnan(f.lse[row0 + 1]));
      CHECK(std::isnan(f.o[(row0 + 1) * Numerics::D]));
      // Row 2 sees keys 0..4: the NaN at key 6 is masked and never matters.
      CHECK(std::isfinite(f.lse[row0 + 2]));
      CHECK(std::isfinite(f.o[(row0 + 2) * Numerics::D]));
      CHECK(std::isfinite(f.lse[row0 + 3]));
      CHECK(std::isfinite(f.o[(row0 + 3) * Numerics::D]));
      CHECK(std::isnan(f.lse[row0 + 4]));
      CHECK(std::isnan(f.o[(row0 + 4) * Numerics::D]));
    }
}
