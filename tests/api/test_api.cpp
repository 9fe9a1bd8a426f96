// The C API contract: every status path, the messages, params init and
// struct_size, explain, kernel listing and forcing a kernel by name. Every
// failing call is checked to leave the output untouched.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cpu_f32_problem.h"

namespace {

// A small valid F32 problem on the CPU with poisoned output.
struct Fixture {
  static constexpr int64_t B = 2, Hq = 4, Hk = 2, N = 40, D = 16;
  std::vector<float> q, k, v, o, lse;
  std::vector<unsigned char> workspace;
  fmha_handle h = nullptr;
  fmha_forward_params p;

  Fixture() : q(B * Hq * N * D), k(B * Hk * N * D), v(B * Hk * N * D), o(B * Hq * N * D), lse(B * Hq * N) {
    uint32_t x = 7u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f); };
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = next();
    poison();
    REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    fmha_forward_params_init(&p);
    view(&p.q, q.data(), Hq);
    view(&p.k, k.data(), Hk);
    view(&p.v, v.data(), Hk);
    view(&p.o, o.data(), Hq);
    p.lse = lse.data();
    size_t bytes = 0;
    REQUIRE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS);
    workspace.assign(bytes + 64, 0);
  }
  ~Fixture() { fmha_destroy(h); }

  static void view(fmha_tensor* t, float* data, int64_t heads) {
    fmha_api_test::CpuF32Problem::view(t, data, B, heads, N, D);
  }
  void poison() {
    for (float& e : o) e = std::nanf("");
    for (float& e : lse) e = std::nanf("");
  }
  void* ws() { return aligned(workspace.data()); }
  static void* aligned(unsigned char* ptr) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ptr) + 63) & ~uintptr_t{63});
  }
  size_t ws_bytes() const { return workspace.size() - 64; }
  fmha_status run() { return fmha_forward(h, &p, ws(), ws_bytes()); }
  bool untouched() const {
    for (float e : o)
      if (!std::isnan(e)) return false;
    for (float e : lse)
      if (!std::isnan(e)) return false;
    return true;
  }
  // Runs, expects `status` and a message containing `needle`, and checks
  // that nothing was written.
  void expect_failure(fmha_status status, const char* needle) {
    poison();
    const fmha_status got = run();
    CHECK_MESSAGE(got == status, fmha_last_error_message());
    const std::string msg = fmha_last_error_message();
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, "message: ", msg, " | expected: ", needle);
    CHECK(untouched());
    size_t bytes = 0;
    CHECK(fmha_forward_workspace_size(h, &p, &bytes) == (status == FMHA_ERROR_WORKSPACE_TOO_SMALL ? FMHA_SUCCESS : status));
  }
};

}  // namespace

TEST_CASE("status strings and versions") {
  CHECK(std::string(fmha_status_string(FMHA_SUCCESS)) == "success");
  for (int s = 0; s < FMHA_STATUS_COUNT_; ++s) CHECK(std::strlen(fmha_status_string(static_cast<fmha_status>(s))) > 0);
  CHECK(std::string(fmha_status_string(static_cast<fmha_status>(99))) == "unknown status");
  CHECK(fmha_version() == FMHA_VERSION_NUMBER);
  CHECK(FMHA_VERSION_NUMBER == FMHA_VERSION_MAJOR * 10000 + FMHA_VERSION_MINOR * 100 + FMHA_VERSION_PATCH);
}

TEST_CASE("params init sets struct_size and the defaults") {
  fmha_forward_params p;
  std::memset(&p, 0xab, sizeof p);
  fmha_forward_params_init(&p);
  CHECK(p.struct_size == FMHA_FORWARD_PARAMS_SIZE_V3);
  CHECK(p.struct_size == sizeof(fmha_forward_params));
  CHECK(p.mask_flags == FMHA_MASK_NONE);
  CHECK(p.scale == 0.f);
  CHECK(p.softcap == 0.f);
  CHECK(p.window_left == -1);
  CHECK(p.window_right == -1);
  CHECK(p.kernel == nullptr);
  CHECK(p.lse == nullptr);
  CHECK(p.num_splits == 0);
  CHECK(p.q.data == nullptr);
  CHECK(p.num_seqs == 0);
  CHECK(p.cu_seqlens_q == nullptr);
  CHECK(p.block_table == nullptr);
  CHECK(p.max_seqlen_k == 0);
  fmha_forward_params_init(nullptr);  // ignored, no crash
}

TEST_CASE("params init never writes past the caller's struct (a program built against 0.1)") {
  // A 0.1 program's struct is FMHA_FORWARD_PARAMS_SIZE_V1 bytes and it calls
  // the exported symbol, not the macro.
  unsigned char buf[sizeof(fmha_forward_params) + 64];
  std::memset(buf, 0xab, sizeof buf);
  auto* p = reinterpret_cast<fmha_forward_params*>(buf);
  (fmha_forward_params_init)(p);
  CHECK(p->struct_size == FMHA_FORWARD_PARAMS_SIZE_V1);
  CHECK(p->window_left == -1);
  CHECK(p->window_right == -1);
  CHECK(p->reserved_ == 0);
  for (size_t i = FMHA_FORWARD_PARAMS_SIZE_V1; i < sizeof buf; ++i) REQUIRE(buf[i] == 0xab);

  // The sized init writes exactly the size it is given: a future, larger
  // struct is zeroed whole (and then refused by forward); a tiny one only
  // gets its struct_size.
  std::memset(buf, 0xab, sizeof buf);
  fmha_forward_params_init_sized(p, FMHA_FORWARD_PARAMS_SIZE_V3 + 16);
  CHECK(p->struct_size == FMHA_FORWARD_PARAMS_SIZE_V3 + 16);
  for (size_t i = 4; i < FMHA_FORWARD_PARAMS_SIZE_V3 + 16; ++i)
    if (i < offsetof(fmha_forward_params, window_left) || i >= offsetof(fmha_forward_params, window_right) + 4)
      REQUIRE(buf[i] == 0);
  for (size_t i = FMHA_FORWARD_PARAMS_SIZE_V3 + 16; i < sizeof buf; ++i) REQUIRE(buf[i] == 0xab);
  std::memset(buf, 0xab, sizeof buf);
  fmha_forward_params_init_sized(p, 8);
  CHECK(p->struct_size == 8u);
  for (size_t i = 8; i < sizeof buf; ++i) REQUIRE(buf[i] == 0xab);
  fmha_forward_params_init_sized(p, 3);  // no room for struct_size: ignored
  CHECK(p->struct_size == 8u);
}

TEST_CASE("handles: create, destroy, stream, threads") {
  fmha_handle h = reinterpret_cast<fmha_handle>(0x1);
  CHECK(fmha_create(nullptr, FMHA_DEVICE_CPU, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()) == "handle is NULL");
  CHECK(fmha_create(&h, FMHA_DEVICE_CPU, 1) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(h == nullptr);
  CHECK(std::string(fmha_last_error_message()).find("device_ordinal=1") != std::string::npos);
  CHECK(fmha_create(&h, static_cast<fmha_device_kind>(5), 0) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("kind=5") != std::string::npos);

  // A CUDA handle for a device that does not exist.
  CHECK(fmha_create(&h, FMHA_DEVICE_CUDA, 4096) == FMHA_ERROR_NOT_AVAILABLE);
  CHECK(h == nullptr);
  CHECK(std::strlen(fmha_last_error_message()) > 0);

  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  CHECK(std::string(fmha_last_error_message()).empty());  // success clears
  CHECK(fmha_set_stream(h, nullptr) == FMHA_SUCCESS);
  CHECK(fmha_set_stream(h, reinterpret_cast<void*>(0x10)) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("CPU handle") != std::string::npos);
  CHECK(fmha_set_stream(nullptr, nullptr) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(fmha_set_num_threads(h, -1) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("num_threads=-1") != std::string::npos);
  CHECK(fmha_set_num_threads(h, 3) == FMHA_SUCCESS);
  CHECK(fmha_set_num_threads(h, 0) == FMHA_SUCCESS);
  CHECK(fmha_set_num_threads(nullptr, 1) == FMHA_ERROR_INVALID_ARGUMENT);
  fmha_destroy(h);
  fmha_destroy(nullptr);
}

TEST_CASE("a valid forward succeeds and writes every element") {
  Fixture f;
  REQUIRE(f.run() == FMHA_SUCCESS);
  CHECK(std::string(fmha_last_error_message()).empty());
  for (float e : f.o) REQUIRE(std::isfinite(e));
  for (float e : f.lse) REQUIRE(std::isfinite(e));
}

TEST_CASE("null and malformed arguments") {
  Fixture f;
  CHECK(fmha_forward(nullptr, &f.p, f.ws(), f.ws_bytes()) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()) == "handle is NULL");
  CHECK(fmha_forward(f.h, nullptr, f.ws(), f.ws_bytes()) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()) == "params is NULL");
  size_t bytes;
  CHECK(fmha_forward_workspace_size(f.h, &f.p, nullptr) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(fmha_forward_workspace_size(nullptr, &f.p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(f.untouched());

  SUBCASE("struct_size") {
    f.p.struct_size = FMHA_FORWARD_PARAMS_SIZE_V1 - 4;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "struct_size");
    f.p.struct_size = 0;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "struct_size=0");
    f.p.struct_size = FMHA_FORWARD_PARAMS_SIZE_V1 + 8;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "struct_size");
  }
  SUBCASE("null data") {
    f.p.v.data = nullptr;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "v.data is NULL");
  }
  SUBCASE("bad dtype") {
    f.p.k.dtype = static_cast<fmha_dtype>(9);
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "k.dtype=9");
  }
  SUBCASE("dtype mismatch") {
    f.p.k.dtype = FMHA_DTYPE_F16;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "v.dtype=F32 differs from k.dtype=F16");
  }
  SUBCASE("o FP8") {
    f.p.o.dtype = FMHA_DTYPE_F8E4M3;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "o.dtype=F8E4M3 must be F16, BF16 or F32");
  }
  SUBCASE("non-positive dims") {
    // batch and seq may be 0 (empty work, test_serving_api.cpp); heads and
    // head_dim may not, and nothing may be negative.
    f.p.q.dims[1] = 0;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "q.dims[1]=0 (heads) must be positive");
    f.p.q.dims[1] = Fixture::Hq;
    f.p.q.dims[2] = -5;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "q.dims[2]=-5 (seq) must be non-negative");
  }
  SUBCASE("negative stride") {
    f.p.k.strides[2] = -16;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "k.strides[2]=-16");
  }
  SUBCASE("batch mismatch") {
    f.p.k.dims[0] = 1;
    f.p.v.dims[0] = 1;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "k.dims[0]=1 (batch) differs from q.dims[0]=2");
  }
  SUBCASE("head dim mismatch") {
    f.p.k.dims[3] = 8;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "k.dims[3]=8 (head_dim) differs from q.dims[3]=16");
  }
  SUBCASE("v shape differs from k") {
    f.p.v.dims[2] = 39;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "v.dims[2]=39 differs from k.dims[2]=40");
  }
  SUBCASE("Hq % Hk != 0") {
    f.p.k.dims[1] = 3;
    f.p.v.dims[1] = 3;
    f.p.k.strides[0] = f.p.v.strides[0] = 3 * Fixture::N * Fixture::D;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "k.dims[1]=3 does not divide q.dims[1]=4");
  }
  SUBCASE("o shape differs from q") {
    f.p.o.dims[2] = 20;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "o.dims[2]=20 differs from q.dims[2]=40");
  }
  SUBCASE("unknown mask bits") {
    f.p.mask_flags = 0x10;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "mask_flags=0x10 has unknown bits");
    f.p.mask_flags = FMHA_MASK_CAUSAL | FMHA_MASK_CAUSAL_TOP_LEFT;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "sets both");
  }
  SUBCASE("windows") {
    f.p.window_left = -2;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "window_left=-2");
    f.p.window_left = 4;
    f.p.window_right = -7;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "window_right=-7");
    f.p.window_right = 3;
    f.p.mask_flags = FMHA_MASK_CAUSAL;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "window_right=3 conflicts with the causal mask");
  }
  SUBCASE("scale and softcap") {
    f.p.scale = std::nanf("");
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "scale=nan");
    f.p.scale = INFINITY;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "scale=inf");
    f.p.scale = -0.5f;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "scale=-0.5");
    f.p.scale = 0.f;
    f.p.softcap = -1.f;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "softcap=-1");
    f.p.softcap = INFINITY;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "softcap=inf");
  }
  SUBCASE("num_splits and reserved") {
    f.p.num_splits = -1;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "num_splits=-1");
    f.p.num_splits = 0;
    f.p.reserved_ = 3;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "reserved_=3");
  }
  SUBCASE("strides whose extent overflows int64") {
    f.p.k.strides[0] = INT64_MAX / 2;
    f.p.v.strides[0] = INT64_MAX / 2;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "overflows int64");
  }
  SUBCASE("o overlapping q, k or v") {
    f.p.o.data = f.q.data() + 8;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "overlaps q");
    f.p.o.data = f.v.data();
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "overlaps v");
    f.p.o.data = f.o.data();
    f.p.lse = reinterpret_cast<float*>(f.k.data());
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "lse overlaps k");
  }
  SUBCASE("o aliasing itself") {
    f.p.o.strides[2] = 0;
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "makes o overlap itself");
  }
  SUBCASE("misaligned lse") {
    f.p.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(f.lse.data()) + 1);
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "not 4-byte aligned");
  }
}

TEST_CASE("workspace checks") {
  Fixture f;
  size_t need = 0;
  REQUIRE(fmha_forward_workspace_size(f.h, &f.p, &need) == FMHA_SUCCESS);
  REQUIRE(need > 0);  // the CPU backend keeps per-thread tiles there
  CHECK(fmha_forward(f.h, &f.p, f.ws(), need - 1) == FMHA_ERROR_WORKSPACE_TOO_SMALL);
  CHECK(std::string(fmha_last_error_message()).find("workspace_bytes=" + std::to_string(need - 1)) != std::string::npos);
  CHECK(f.untouched());
  CHECK(fmha_forward(f.h, &f.p, nullptr, need) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("workspace is NULL") != std::string::npos);
  CHECK(fmha_forward(f.h, &f.p, static_cast<char*>(f.ws()) + 4, need) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("16-byte aligned") != std::string::npos);
  CHECK(f.untouched());
  CHECK(fmha_forward(f.h, &f.p, f.ws(), need) == FMHA_SUCCESS);

  // More threads need more per-thread scratch.
  REQUIRE(fmha_set_num_threads(f.h, 1) == FMHA_SUCCESS);
  size_t one = 0, four = 0;
  REQUIRE(fmha_forward_workspace_size(f.h, &f.p, &one) == FMHA_SUCCESS);
  REQUIRE(fmha_set_num_threads(f.h, 4) == FMHA_SUCCESS);
  REQUIRE(fmha_forward_workspace_size(f.h, &f.p, &four) == FMHA_SUCCESS);
  CHECK(four > one);
}

TEST_CASE("kernel listing and forcing a kernel by name") {
  const int n = fmha_kernel_count();
  REQUIRE(n >= 1);
  bool has_cpu = false;
  for (int i = 0; i < n; ++i) {
    REQUIRE(fmha_kernel_name(i) != nullptr);
    has_cpu |= std::string(fmha_kernel_name(i)) == "cpu_tiled";
  }
  CHECK(has_cpu);
  CHECK(fmha_kernel_name(-1) == nullptr);
  CHECK(fmha_kernel_name(n) == nullptr);

  Fixture f;
  f.p.kernel = "cpu_tiled";
  CHECK(f.run() == FMHA_SUCCESS);
  f.p.kernel = "no_such_kernel";
  f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, "kernel=\"no_such_kernel\" is not a registered kernel");
  for (int i = 0; i < n; ++i) {
    const std::string name = fmha_kernel_name(i);
    if (name.rfind("cuda_", 0) != 0) continue;
    f.p.kernel = fmha_kernel_name(i);  // a CUDA kernel on a CPU handle
    f.expect_failure(FMHA_ERROR_UNSUPPORTED, "runs on CUDA handles");
  }
}

TEST_CASE("unsupported problems say so") {
  Fixture f;
  // A head dim no kernel runs: 1024 (the CPU kernel runs up to 512).
  std::vector<float> q(1024), k(1024), v(1024), o(1024, std::nanf(""));
  auto one_row = [](fmha_tensor* t, float* data) {
    t->data = data;
    t->dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {1, 1, 1, 1024}, strides[4] = {1024, 1024, 1024, 1};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, strides, sizeof strides);
  };
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  one_row(&p.q, q.data());
  one_row(&p.k, k.data());
  one_row(&p.v, v.data());
  one_row(&p.o, o.data());
  CHECK(fmha_forward(f.h, &p, f.ws(), f.ws_bytes()) == FMHA_ERROR_UNSUPPORTED);
  CHECK(std::string(fmha_last_error_message()).find("head_dim=1024") != std::string::npos);
  for (float e : o) CHECK(std::isnan(e));
  char buf[1024];
  CHECK(fmha_forward_explain(f.h, &p, buf, sizeof buf) == FMHA_ERROR_UNSUPPORTED);
  CHECK(std::string(buf).find("cpu_tiled: does not run head_dim=1024") != std::string::npos);
}

TEST_CASE("explain names the chosen kernel and the workspace") {
  Fixture f;
  char buf[1024];
  REQUIRE(fmha_forward_explain(f.h, &f.p, buf, sizeof buf) == FMHA_SUCCESS);
  const std::string text = buf;
  CHECK(text.find("chosen: cpu_tiled") != std::string::npos);
  CHECK(text.find("workspace: ") != std::string::npos);
  // Truncation keeps the buffer terminated.
  char small[8];
  REQUIRE(fmha_forward_explain(f.h, &f.p, small, sizeof small) == FMHA_SUCCESS);
  CHECK(std::strlen(small) == sizeof small - 1);
  CHECK(fmha_forward_explain(f.h, &f.p, nullptr, 10) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(fmha_forward_explain(f.h, &f.p, buf, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  f.p.q.dims[0] = 0;
  CHECK(fmha_forward_explain(f.h, &f.p, buf, sizeof buf) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(f.untouched());
}

TEST_CASE("the error message is per thread") {
  fmha_handle h = nullptr;
  CHECK(fmha_create(nullptr, FMHA_DEVICE_CPU, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  std::string other;
  std::thread t([&] { other = fmha_last_error_message(); });
  t.join();
  CHECK(other.empty());
  CHECK(std::string(fmha_last_error_message()) == "handle is NULL");
  (void)h;
}
