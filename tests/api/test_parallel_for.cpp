// fmha_set_parallel_for: a CPU handle runs its work items through the
// caller's parallel-for, with results bitwise identical to fmha's own pool
// whatever threads and order the caller uses; argument checks; a
// parallel-for that breaks its contract is reported, not ignored.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// A causal F32 problem with GQA and lse, large enough for many work items
// (batch x heads x query blocks) of very different lengths.
struct Problem {
  static constexpr int64_t B = 2, Hq = 8, Hk = 2, N = 300, D = 64;
  std::vector<float> q, k, v, o, lse;
  fmha_forward_params p;

  Problem() : q(B * Hq * N * D), k(B * Hk * N * D), v(B * Hk * N * D), o(B * Hq * N * D), lse(B * Hq * N) {
    uint32_t x = 12345u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f); };
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = 4.f * next();
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
  // Poisons the outputs, runs a forward on h with a fresh workspace.
  fmha_status run(fmha_handle h) {
    for (float& e : o) e = std::nanf("");
    for (float& e : lse) e = std::nanf("");
    size_t bytes = 0;
    const fmha_status s = fmha_forward_workspace_size(h, &p, &bytes);
    if (s != FMHA_SUCCESS) return s;
    std::vector<double> workspace(bytes / sizeof(double) + 1);  // 16-byte aligned by new
    return fmha_forward(h, &p, workspace.data(), bytes);
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The test's job systems. `user` counts the calls.
using Task = void (*)(void*, int64_t);

void reverse_serial(void* user, int64_t count, Task task, void* ctx) {
  ++*static_cast<int*>(user);
  for (int64_t i = count - 1; i >= 0; --i) task(ctx, i);
}

// `threads` std::threads; thread t runs t, t + threads, ... from the end.
template <int threads>
void strided_threads(void* user, int64_t count, Task task, void* ctx) {
  ++*static_cast<int*>(user);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      for (int64_t i = count - 1 - t; i >= 0; i -= threads) task(ctx, i);
    });
  for (std::thread& th : pool) th.join();
}

// One std::thread per task, all at once (more than any slot count here).
void thread_per_task(void* user, int64_t count, Task task, void* ctx) {
  ++*static_cast<int*>(user);
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < count; ++i) pool.emplace_back([=] { task(ctx, i); });
  for (std::thread& th : pool) th.join();
}

void runs_nothing(void*, int64_t, Task, void*) {}

void skips_last(void*, int64_t count, Task task, void* ctx) {
  for (int64_t i = 0; i + 1 < count; ++i) task(ctx, i);
}

void index_past_end(void*, int64_t count, Task task, void* ctx) {
  for (int64_t i = 0; i <= count; ++i) task(ctx, i);
}

}  // namespace

TEST_CASE("parallel_for: results are bitwise identical to fmha's pool, any threads, any order") {
  Problem prob;
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  REQUIRE(fmha_set_num_threads(h, 4) == FMHA_SUCCESS);
  REQUIRE(prob.run(h) == FMHA_SUCCESS);
  const std::vector<float> o_ref = prob.o, lse_ref = prob.lse;
  REQUIRE(std::all_of(o_ref.begin(), o_ref.end(), [](float e) { return std::isfinite(e); }));

  struct Case {
    const char* name;
    fmha_parallel_for_fn fn;
    int slots;  // fmha_set_num_threads
  };
  const Case cases[] = {
      {"reverse, serial", reverse_serial, 4},
      {"3 threads, strided, from the end", strided_threads<3>, 4},
      {"8 threads over 2 slots", strided_threads<8>, 2},
      {"a thread per task over 3 slots", thread_per_task, 3},
      {"a thread per task, 1 slot", thread_per_task, 1},
      {"3 threads, automatic slots", strided_threads<3>, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    int calls = 0;
    REQUIRE(fmha_set_parallel_for(h, c.fn, &calls) == FMHA_SUCCESS);
    REQUIRE(fmha_set_num_threads(h, c.slots) == FMHA_SUCCESS);
    REQUIRE(prob.run(h) == FMHA_SUCCESS);
    CHECK(calls >= 1);  // the forward went through it
    CHECK(same_bits(prob.o, o_ref));
    CHECK(same_bits(prob.lse, lse_ref));
  }

  // NULL restores fmha's own threads: the function is no longer called.
  int calls = 0;
  REQUIRE(fmha_set_parallel_for(h, reverse_serial, &calls) == FMHA_SUCCESS);
  REQUIRE(fmha_set_parallel_for(h, nullptr, nullptr) == FMHA_SUCCESS);
  REQUIRE(prob.run(h) == FMHA_SUCCESS);
  CHECK(calls == 0);
  CHECK(same_bits(prob.o, o_ref));
  CHECK(same_bits(prob.lse, lse_ref));
  fmha_destroy(h);
}

TEST_CASE("parallel_for: argument checks and a broken parallel-for") {
  CHECK(fmha_set_parallel_for(nullptr, reverse_serial, nullptr) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("handle is NULL") != std::string::npos);

  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  int user = 0;
  CHECK(fmha_set_parallel_for(h, nullptr, &user) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("user=") != std::string::npos);
  CHECK(fmha_set_parallel_for(h, nullptr, nullptr) == FMHA_SUCCESS);  // already fmha's threads

  Problem prob;
  REQUIRE(fmha_set_parallel_for(h, runs_nothing, nullptr) == FMHA_SUCCESS);
  CHECK(prob.run(h) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("returned after 0 of count=") != std::string::npos);

  REQUIRE(fmha_set_parallel_for(h, skips_last, nullptr) == FMHA_SUCCESS);
  CHECK(prob.run(h) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("parallel_for") != std::string::npos);

  REQUIRE(fmha_set_parallel_for(h, index_past_end, nullptr) == FMHA_SUCCESS);
  CHECK(prob.run(h) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("outside [0, count=") != std::string::npos);

  // The handle still works once a good function (or none) is set.
  REQUIRE(fmha_set_parallel_for(h, reverse_serial, &user) == FMHA_SUCCESS);
  CHECK(prob.run(h) == FMHA_SUCCESS);
  CHECK(user >= 1);
  fmha_destroy(h);
}

TEST_CASE("parallel_for: CUDA handles accept it and ignore it") {
  fmha_handle h = nullptr;
  if (fmha_create(&h, FMHA_DEVICE_CUDA, 0) != FMHA_SUCCESS) return;  // no GPU here: nothing to check
  int calls = 0;
  CHECK(fmha_set_parallel_for(h, reverse_serial, &calls) == FMHA_SUCCESS);
  CHECK(fmha_set_parallel_for(h, nullptr, nullptr) == FMHA_SUCCESS);
  CHECK(fmha_set_parallel_for(h, nullptr, &calls) == FMHA_ERROR_INVALID_ARGUMENT);  // checked on every handle
  CHECK(calls == 0);
  fmha_destroy(h);
}
