// The per-thread reuse of the last validation (api/c_api.cpp, prepare): a
// workspace query followed by the forward with the same params validates
// once. Reuse must never change an answer: a rewritten forced-kernel name,
// a field changed in place, another handle configuration, a failed call
// and the params' struct_size each get a fresh validation, and a forward
// that reuses computes what a fresh one computes.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/reference.h"
#include "common/tolerance.h"

namespace {

// A small F32 problem on the CPU: B=2 Hq=4 Hk=2 N=40 D=16, causal, with lse.
struct Problem {
  static constexpr int64_t B = 2, Hq = 4, Hk = 2, N = 40, D = 16;
  std::vector<float> q, k, v, o, lse;
  fmha_forward_params p;

  Problem() : q(B * Hq * N * D), k(B * Hk * N * D), v(B * Hk * N * D), o(B * Hq * N * D), lse(B * Hq * N) {
    uint32_t x = 12345u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 8388608.f - 1.f); };
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = next();
    poison();
    fmha_forward_params_init(&p);
    view(&p.q, q.data(), Hq);
    view(&p.k, k.data(), Hk);
    view(&p.v, v.data(), Hk);
    view(&p.o, o.data(), Hq);
    p.lse = lse.data();
    p.mask_flags = FMHA_MASK_CAUSAL;
  }
  static void view(fmha_tensor* t, float* data, int64_t heads) {
    t->data = data;
    t->dtype = FMHA_DTYPE_F32;
    const int64_t dims[4] = {B, heads, N, D};
    const int64_t strides[4] = {heads * N * D, N * D, D, 1};
    std::memcpy(t->dims, dims, sizeof dims);
    std::memcpy(t->strides, strides, sizeof strides);
  }
  void poison() {
    for (float& e : o) e = std::nanf("");
    for (float& e : lse) e = std::nanf("");
  }
  // o and lse against the float64 reference.
  void check(const char* what) const {
    const fmha_test::ReferenceResult ref = fmha_test::reference_forward(p);
    double err = 0, norm = 0, lse_err = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      err += (o[i] - ref.o[i]) * (o[i] - ref.o[i]);
      norm += ref.o[i] * ref.o[i];
    }
    for (size_t i = 0; i < lse.size(); ++i) lse_err = std::fmax(lse_err, std::fabs(lse[i] - ref.lse[i]));
    const fmha_test::Tolerance tol = fmha_test::tolerance_for(FMHA_DTYPE_F32);
    INFO(what << ": rel-L2 " << std::sqrt(err / norm) << ", lse err " << lse_err);
    CHECK(std::sqrt(err / norm) <= tol.o_rel_l2);  // NaN (unwritten) fails too
    CHECK(lse_err <= tol.lse_abs);
  }
};

struct Handle {
  fmha_handle h = nullptr;
  explicit Handle(int threads) {
    REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    REQUIRE(fmha_set_num_threads(h, threads) == FMHA_SUCCESS);
  }
  ~Handle() { fmha_destroy(h); }
};

// 64-byte aligned workspace of `bytes`.
struct Workspace {
  std::vector<unsigned char> buf;
  explicit Workspace(size_t bytes) : buf(bytes + 64) {}
  void* get() { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63}); }
};

size_t workspace_of(fmha_handle h, const fmha_forward_params& p) {
  size_t bytes = 0;
  REQUIRE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS);
  return bytes;
}

// The workspace a thread that never validated anything computes.
size_t fresh_workspace_of(fmha_handle h, const fmha_forward_params& p) {
  size_t bytes = 0;
  fmha_status s = FMHA_ERROR_INTERNAL;
  std::thread([&] { s = fmha_forward_workspace_size(h, &p, &bytes); }).join();
  REQUIRE(s == FMHA_SUCCESS);
  return bytes;
}

bool message_has(const char* what) { return std::string(fmha_last_error_message()).find(what) != std::string::npos; }

}  // namespace

TEST_CASE("host path: the forward after its workspace query computes what a fresh one does") {
  Problem pr;
  Handle h(2);
  const size_t bytes = workspace_of(h.h, pr.p);
  Workspace ws(bytes);
  CHECK(fmha_forward(h.h, &pr.p, ws.get(), bytes) == FMHA_SUCCESS);  // reuses the query's validation
  pr.check("after the workspace query");
  pr.poison();
  CHECK(fmha_forward(h.h, &pr.p, ws.get(), bytes) == FMHA_SUCCESS);  // and again
  pr.check("second forward");
}

TEST_CASE("host path: a forced kernel's name rewritten in place is looked up again") {
  Problem pr;
  Handle h(1);
  char name[32] = "cpu_tiled";
  pr.p.kernel = name;  // the same pointer in every call below
  size_t bytes = 0;
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &bytes) == FMHA_SUCCESS);
  std::strcpy(name, "cuda_sm80_tc");  // a registered kernel (on CUDA builds) that cannot run on a CPU handle
  const fmha_status s = fmha_forward_workspace_size(h.h, &pr.p, &bytes);
  CHECK(s != FMHA_SUCCESS);
  CHECK((s == FMHA_ERROR_UNSUPPORTED || s == FMHA_ERROR_INVALID_ARGUMENT));
  std::strcpy(name, "no_such_kernel");
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(message_has("no_such_kernel"));
  std::strcpy(name, "cpu_tiled");
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &bytes) == FMHA_SUCCESS);
  // A name longer than what is remembered still works (validated each time).
  std::string long_name(200, 'x');
  pr.p.kernel = long_name.c_str();
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("host path: a field changed in place after a success is validated again") {
  Problem pr;
  Handle h(1);
  const size_t bytes = workspace_of(h.h, pr.p);
  Workspace ws(bytes);
  fmha_forward_params saved = pr.p;
  // o moved onto q: an overlap the earlier success must not vouch for.
  pr.p.o.data = pr.q.data();
  CHECK(fmha_forward(h.h, &pr.p, ws.get(), bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(message_has("overlaps"));
  pr.p = saved;
  // A mask bit flipped: another (valid) problem, another answer.
  pr.p.mask_flags = FMHA_MASK_NONE;
  pr.poison();
  CHECK(fmha_forward(h.h, &pr.p, ws.get(), workspace_of(h.h, pr.p)) == FMHA_SUCCESS);
  pr.check("mask changed in place");
  // An unknown mask bit after that success is refused.
  pr.p.mask_flags = 0x40;
  size_t b = 0;
  CHECK(fmha_forward_workspace_size(h.h, &pr.p, &b) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(message_has("mask_flags"));
}

TEST_CASE("host path: failures are not remembered, and neither is one handle's answer for another") {
  Problem pr;
  Handle one(1), two(2);
  const size_t w1 = fresh_workspace_of(one.h, pr.p);
  const size_t w2 = fresh_workspace_of(two.h, pr.p);
  CHECK(w1 != w2);  // the CPU workspace holds per-thread scratch
  for (int round = 0; round < 3; ++round) {
    CHECK(workspace_of(one.h, pr.p) == w1);
    CHECK(workspace_of(two.h, pr.p) == w2);
    CHECK(workspace_of(two.h, pr.p) == w2);
  }
  // The same handle reconfigured between the query and the forward.
  CHECK(workspace_of(one.h, pr.p) == w1);
  REQUIRE(fmha_set_num_threads(one.h, 2) == FMHA_SUCCESS);
  CHECK(workspace_of(one.h, pr.p) == w2);
  Workspace small(w1);
  CHECK(fmha_forward(one.h, &pr.p, small.get(), w1) == FMHA_ERROR_WORKSPACE_TOO_SMALL);
  // A failure, its fix, and the same failure again.
  fmha_forward_params bad = pr.p;
  bad.k.dims[3] = 8;
  size_t b = 0;
  CHECK(fmha_forward_workspace_size(one.h, &bad, &b) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(fmha_forward_workspace_size(one.h, &pr.p, &b) == FMHA_SUCCESS);
  CHECK(fmha_forward_workspace_size(one.h, &bad, &b) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(message_has("k.dims[3]"));
}

TEST_CASE("host path: a 0.1-sized params struct after a 0.2-sized one with the same leading bytes") {
  Problem pr;
  Handle h(1);
  const size_t bytes = workspace_of(h.h, pr.p);
  fmha_forward_params v1 = pr.p;
  v1.struct_size = FMHA_FORWARD_PARAMS_SIZE_V1;
  // Bytes past the 0.1 size are not the caller's: garbage there is ignored.
  std::memset(reinterpret_cast<unsigned char*>(&v1) + FMHA_FORWARD_PARAMS_SIZE_V1, 0xab,
              sizeof v1 - FMHA_FORWARD_PARAMS_SIZE_V1);
  CHECK(workspace_of(h.h, v1) == bytes);
  Workspace ws(bytes);
  pr.poison();
  CHECK(fmha_forward(h.h, &v1, ws.get(), bytes) == FMHA_SUCCESS);
  pr.check("0.1-sized params");
  // And back to the 0.2 size (serving fields 0: the same dense problem).
  CHECK(workspace_of(h.h, pr.p) == bytes);
  pr.poison();
  CHECK(fmha_forward(h.h, &pr.p, ws.get(), bytes) == FMHA_SUCCESS);
  pr.check("0.2-sized params again");
}
