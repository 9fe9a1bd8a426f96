// The C contract of the 0.2 serving fields: every host-known field is
// validated with a message naming it and its value, nothing is written on
// failure; empty work succeeds; metadata and struct sizes.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_f32_problem.h"

namespace {

// A valid problem with packed queries over a paged cache: 3 sequences,
// q/o [1, Hq, 20, D], k/v [6 pages, Hk, 8, D], block table 3 x 4.
struct Serving : fmha_api_test::CpuF32Problem {
  static constexpr int64_t Hq = 4, Hk = 2, D = 16, Tq = 20, Pages = 6, Ps = 8, Stride = 4;
  std::vector<float> q, k, v;
  std::vector<int32_t> cu_q{0, 5, 5, 20}, used{9, 0, 30}, table{1, 4, 0, 0, 2, 2, 2, 2, 5, 3, 0, 1};

  Serving() : q(Hq * Tq * D), k(Pages * Hk * Ps * D), v(k.size()) {
    o.assign(q.size(), 0.f);
    lse.assign(Hq * Tq, 0.f);
    uint32_t x = 11u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f); };
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = next();
    poison();
    view(&p.q, q.data(), 1, Hq, Tq);
    view(&p.k, k.data(), Pages, Hk, Ps);
    view(&p.v, v.data(), Pages, Hk, Ps);
    view(&p.o, o.data(), 1, Hq, Tq);
    p.lse = lse.data();
    p.num_seqs = 3;
    p.max_seqlen_q = 15;
    p.cu_seqlens_q = cu_q.data();
    p.seqused_k = used.data();
    p.block_table = table.data();
    p.block_table_stride = Stride;
    size_t bytes = 0;
    REQUIRE_MESSAGE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS, fmha_last_error_message());
    workspace.assign(bytes + 64, 0);
  }

  static void view(fmha_tensor* t, float* data, int64_t b, int64_t heads, int64_t n) {
    CpuF32Problem::view(t, data, b, heads, n, D);
  }
};

}  // namespace

TEST_CASE("serving: a valid packed + paged forward writes exactly the sequences' rows") {
  Serving f;
  REQUIRE(f.run() == FMHA_SUCCESS);
  for (float e : f.o) CHECK(std::isfinite(e));
  // Sequence 1 has no rows, sequence 0 sees 9 keys, 2 sees 30: every row
  // has keys (no mask), so every lse is finite.
  for (float e : f.lse) CHECK(std::isfinite(e));
  char buf[1024];
  REQUIRE(fmha_forward_explain(f.h, &f.p, buf, sizeof buf) == FMHA_SUCCESS);
  CHECK(std::string(buf).find("chosen: cpu_tiled") != std::string::npos);
}

TEST_CASE("serving: every host-known field is validated") {
  Serving f;
  SUBCASE("reserved2_") {
    f.p.reserved2_ = 7;
    f.expect_failure("reserved2_=7 must be 0");
  }
  SUBCASE("num_seqs") {
    f.p.num_seqs = -1;
    f.expect_failure("num_seqs=-1 must be >= 0");
  }
  SUBCASE("num_seqs without cu_seqlens") {
    f.p.cu_seqlens_q = nullptr;
    f.p.max_seqlen_q = 0;
    Serving::view(&f.p.q, f.q.data(), 1, Serving::Hq, Serving::Tq);
    f.expect_failure("num_seqs=3 must be 0 without cu_seqlens_q or cu_seqlens_k");
  }
  SUBCASE("packed q needs batch 1") {
    Serving::view(&f.p.q, f.q.data(), 2, Serving::Hq, Serving::Tq / 2);
    Serving::view(&f.p.o, f.o.data(), 2, Serving::Hq, Serving::Tq / 2);
    f.expect_failure("q.dims[0]=2 must be 1 with cu_seqlens_q");
  }
  SUBCASE("max_seqlen_q") {
    f.p.max_seqlen_q = 21;
    f.expect_failure("max_seqlen_q=21 must be in [0, q.dims[2]=20]");
    f.p.max_seqlen_q = -3;
    f.expect_failure("max_seqlen_q=-3");
    f.p.cu_seqlens_q = nullptr;
    f.p.num_seqs = 0;
    Serving::view(&f.p.q, f.q.data(), 3, Serving::Hq, 5);
    Serving::view(&f.p.o, f.o.data(), 3, Serving::Hq, 5);
    f.p.max_seqlen_q = 5;
    f.expect_failure("max_seqlen_q=5 must be 0 without cu_seqlens_q");
  }
  SUBCASE("block_table without seqused_k") {
    f.p.seqused_k = nullptr;
    f.expect_failure("needs seqused_k");
  }
  SUBCASE("cu_seqlens_k with a block_table") {
    f.p.cu_seqlens_k = f.cu_q.data();
    f.expect_failure("are exclusive");
  }
  SUBCASE("block_table_stride") {
    f.p.block_table_stride = 0;
    f.expect_failure("block_table_stride=0 must be >= 1 with a block_table");
    f.p.block_table_stride = INT64_MAX / 2;
    f.expect_failure("exceeds FMHA_MAX_DIM");
    f.p.block_table = nullptr;
    f.p.block_table_stride = 4;
    Serving::view(&f.p.k, f.k.data(), 3, Serving::Hk, 16);
    Serving::view(&f.p.v, f.v.data(), 3, Serving::Hk, 16);
    f.expect_failure("block_table_stride=4 must be 0 without a block_table");
  }
  SUBCASE("max_seqlen_k with a block_table") {
    f.p.max_seqlen_k = 33;  // 4 entries x 8 keys = 32
    f.expect_failure("max_seqlen_k=33 must be in [0, block_table_stride x page_size = 32]");
  }
  SUBCASE("paged page_size 0") {
    Serving::view(&f.p.k, f.k.data(), Serving::Pages, Serving::Hk, 0);
    Serving::view(&f.p.v, f.v.data(), Serving::Pages, Serving::Hk, 0);
    f.expect_failure("k.dims[2]=0 (page_size) must be >= 1");
  }
  SUBCASE("paged with no pages") {
    Serving::view(&f.p.k, f.k.data(), 0, Serving::Hk, Serving::Ps);
    Serving::view(&f.p.v, f.v.data(), 0, Serving::Hk, Serving::Ps);
    f.expect_failure("k.dims[0]=0 (num_pages) must be >= 1");
  }
  SUBCASE("dense keys with packed queries: batch is num_seqs") {
    f.p.block_table = nullptr;
    f.p.block_table_stride = 0;
    Serving::view(&f.p.k, f.k.data(), 4, Serving::Hk, 8);
    Serving::view(&f.p.v, f.v.data(), 4, Serving::Hk, 8);
    f.expect_failure("k.dims[0]=4 (batch) differs from num_seqs=3");
    Serving::view(&f.p.k, f.k.data(), 3, Serving::Hk, 8);
    Serving::view(&f.p.v, f.v.data(), 3, Serving::Hk, 8);
    f.p.max_seqlen_k = 8;
    f.expect_failure("max_seqlen_k=8 must be 0 with dense keys");
  }
  SUBCASE("packed keys") {
    f.p.block_table = nullptr;
    f.p.block_table_stride = 0;
    f.p.cu_seqlens_k = f.cu_q.data();
    Serving::view(&f.p.k, f.k.data(), 2, Serving::Hk, 48);
    Serving::view(&f.p.v, f.v.data(), 2, Serving::Hk, 48);
    f.expect_failure("k.dims[0]=2 must be 1 with cu_seqlens_k");
    Serving::view(&f.p.k, f.k.data(), 1, Serving::Hk, 96);
    Serving::view(&f.p.v, f.v.data(), 1, Serving::Hk, 96);
    f.p.max_seqlen_k = 97;
    f.expect_failure("max_seqlen_k=97 must be in [0, k.dims[2]=96] with cu_seqlens_k");
  }
  SUBCASE("dense queries with packed keys: batch is num_seqs") {
    f.p.block_table = nullptr;
    f.p.block_table_stride = 0;
    f.p.cu_seqlens_q = nullptr;
    f.p.max_seqlen_q = 0;
    f.p.cu_seqlens_k = f.cu_q.data();
    f.p.max_seqlen_k = 15;
    Serving::view(&f.p.k, f.k.data(), 1, Serving::Hk, 96);
    Serving::view(&f.p.v, f.v.data(), 1, Serving::Hk, 96);
    Serving::view(&f.p.q, f.q.data(), 2, Serving::Hq, 10);
    Serving::view(&f.p.o, f.o.data(), 2, Serving::Hq, 10);
    f.expect_failure("q.dims[0]=2 (batch) differs from num_seqs=3");
  }
  SUBCASE("ragged lse size in the overlap checks") {
    // lse is [Hq, total_q] = 80 floats: ending right before o is fine,
    // one float later overlaps it.
    std::vector<float> both(Serving::Hq * Serving::Tq + f.o.size() + 1);
    f.p.lse = both.data();
    f.p.o.data = both.data() + Serving::Hq * Serving::Tq;
    CHECK(f.run() == FMHA_SUCCESS);
    f.p.o.data = both.data() + Serving::Hq * Serving::Tq - 1;
    f.expect_failure("lse overlaps o");
  }
}

TEST_CASE("serving: the workspace overlap check uses the ragged lse size") {
  // lse [Hq, total_q] = 80 floats at the start of one buffer, the workspace
  // right after it is fine, one float earlier overlaps (a dense-sized lse,
  // num_seqs x Hq x max_seqlen_q = 180 floats, would refuse both).
  Serving f;
  size_t need = 0;
  REQUIRE(fmha_forward_workspace_size(f.h, &f.p, &need) == FMHA_SUCCESS);
  const size_t lse_bytes = Serving::Hq * Serving::Tq * sizeof(float);
  std::vector<unsigned char> buf(lse_bytes + need + 64);
  unsigned char* base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(buf.data()) + 15) & ~uintptr_t{15});
  f.p.lse = reinterpret_cast<float*>(base);
  CHECK_MESSAGE(fmha_forward(f.h, &f.p, base + lse_bytes, need) == FMHA_SUCCESS, fmha_last_error_message());
  CHECK(fmha_forward(f.h, &f.p, base + lse_bytes - 16, need) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("workspace overlaps lse") != std::string::npos);
}

TEST_CASE("struct_size: the message names every shipped size") {
  Serving f;
  f.p.struct_size = 100;
  f.expect_failure("struct_size=100 is not a size fmha has shipped (0.1: 368, 0.2: 424, 0.3: 544)");
}

TEST_CASE("a V1 struct_size ignores the serving fields' memory") {
  // struct_size = V1: the bytes after reserved_ are not the caller's, so
  // garbage there must not be read (the problem is then dense).
  std::vector<float> q(2 * 3 * 5 * 8, 0.25f), k(q.size(), 0.5f), v(q.size(), 1.f), o(q.size(), std::nanf(""));
  fmha_forward_params p;
  std::memset(&p, 0xee, sizeof p);  // garbage everywhere, then the V1 fields
  fmha_forward_params init;
  fmha_forward_params_init(&init);
  std::memcpy(&p, &init, FMHA_FORWARD_PARAMS_SIZE_V1);
  p.struct_size = FMHA_FORWARD_PARAMS_SIZE_V1;
  for (auto [t, data] : {std::pair{&p.q, q.data()}, {&p.k, k.data()}, {&p.v, v.data()}, {&p.o, o.data()}}) {
    t->data = data;
    t->dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {2, 3, 5, 8}, strides[4] = {120, 40, 8, 1};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, strides, sizeof strides);
  }
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  size_t bytes = 0;
  REQUIRE_MESSAGE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS, fmha_last_error_message());
  std::vector<unsigned char> ws(bytes + 16);
  void* w = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 15) & ~uintptr_t{15});
  CHECK(fmha_forward(h, &p, w, bytes) == FMHA_SUCCESS);
  for (float e : o) CHECK(e == doctest::Approx(1.f));  // v is all ones
  fmha_destroy(h);
}

TEST_CASE("empty work succeeds and writes only rows that exist") {
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  const int64_t H = 2, D = 8;
  auto view = [&](fmha_tensor* t, void* data, int64_t b, int64_t n) {
    t->data = data;
    t->dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {b, H, n, D}, strides[4] = {H * n * D, n * D, D, 1};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, strides, sizeof strides);
  };
  std::vector<float> q(3 * H * 4 * D, 0.5f), k(3 * H * 6 * D, 0.25f), o(q.size()), lse(3 * H * 4);
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  auto poison = [&] {
    for (float& e : o) e = std::nanf("");
    for (float& e : lse) e = std::nanf("");
  };
  auto untouched = [&] {
    for (float e : o)
      if (!std::isnan(e)) return false;
    for (float e : lse)
      if (!std::isnan(e)) return false;
    return true;
  };
  char buf[512];
  size_t bytes = 1;

  SUBCASE("batch 0, NULL data") {
    view(&p.q, nullptr, 0, 4);
    view(&p.k, nullptr, 0, 6);
    view(&p.v, nullptr, 0, 6);
    view(&p.o, nullptr, 0, 4);
    p.lse = lse.data();
    poison();
    CHECK(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS);
    CHECK(bytes == 0);
    CHECK(fmha_forward(h, &p, nullptr, 0) == FMHA_SUCCESS);
    CHECK(untouched());
    REQUIRE(fmha_forward_explain(h, &p, buf, sizeof buf) == FMHA_SUCCESS);
    CHECK(std::string(buf).find("empty problem") != std::string::npos);
    p.kernel = "no_such_kernel";
    CHECK(fmha_forward(h, &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  }
  SUBCASE("Nq = 0") {
    view(&p.q, q.data(), 3, 0);
    view(&p.k, k.data(), 3, 6);
    view(&p.v, k.data(), 3, 6);
    view(&p.o, o.data(), 3, 0);
    poison();
    CHECK(fmha_forward(h, &p, nullptr, 0) == FMHA_SUCCESS);
    CHECK(untouched());
  }
  SUBCASE("Nk = 0: rows see no key, o = 0, lse = -inf") {
    for (const char* kernel : {"cpu_tiled", static_cast<const char*>(nullptr)})
      for (uint32_t mask : {FMHA_MASK_NONE, FMHA_MASK_CAUSAL}) {
        view(&p.q, q.data(), 3, 4);
        view(&p.k, nullptr, 3, 0);
        view(&p.v, nullptr, 3, 0);
        view(&p.o, o.data(), 3, 4);
        p.lse = lse.data();
        p.kernel = kernel;
        p.mask_flags = mask;
        poison();
        REQUIRE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS);
        std::vector<unsigned char> ws(bytes + 64);
        void* w = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t{63});
        REQUIRE_MESSAGE(fmha_forward(h, &p, w, bytes) == FMHA_SUCCESS, fmha_last_error_message());
        for (float e : o) CHECK(e == 0.f);
        for (float e : lse) CHECK(std::isinf(e));
        for (float e : lse) CHECK(e < 0);
      }
  }
  SUBCASE("heads and head_dim stay >= 1") {
    view(&p.q, q.data(), 3, 4);
    view(&p.k, k.data(), 3, 6);
    view(&p.v, k.data(), 3, 6);
    view(&p.o, o.data(), 3, 4);
    p.q.dims[1] = 0;
    CHECK(fmha_forward(h, &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(fmha_last_error_message()).find("q.dims[1]=0 (heads) must be positive") != std::string::npos);
    p.q.dims[1] = H;
    p.k.dims[3] = 0;
    CHECK(fmha_forward(h, &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(fmha_last_error_message()).find("k.dims[3]=0 (head_dim) must be positive") != std::string::npos);
  }
  fmha_destroy(h);
}
