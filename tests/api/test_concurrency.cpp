// Threads with their own handles, at once: handle create/destroy churn,
// forwards on pools of 1..3 workers, and per-thread error messages that
// other threads' calls must not disturb. CI runs it under ThreadSanitizer
// (tools/ci_sanitizers.sh), which turns any data race into a failure.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kN = 70, kD = 16, kH = 2;

void view(fmha_tensor* t, float* data) {
  t->data = data;
  t->dtype = FMHA_DTYPE_F32;
  const int64_t dims[4] = {1, kH, kN, kD}, strides[4] = {kH * kN * kD, kN * kD, kD, 1};
  std::memcpy(t->dims, dims, sizeof dims);
  std::memcpy(t->strides, strides, sizeof strides);
}

struct Inputs {
  std::vector<float> q, k, v;
  Inputs() : q(kH * kN * kD), k(q.size()), v(q.size()) {
    uint32_t x = 5u;
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f);
  }
};

// One causal forward on `h`; false on any failure.
bool forward(fmha_handle h, const Inputs& in, std::vector<float>* o) {
  o->assign(in.q.size(), std::nanf(""));
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  view(&p.q, const_cast<float*>(in.q.data()));
  view(&p.k, const_cast<float*>(in.k.data()));
  view(&p.v, const_cast<float*>(in.v.data()));
  view(&p.o, o->data());
  p.mask_flags = FMHA_MASK_CAUSAL;
  size_t bytes = 0;
  if (fmha_forward_workspace_size(h, &p, &bytes) != FMHA_SUCCESS) return false;
  std::vector<uint64_t> ws(bytes / 8 + 2);
  char* base = reinterpret_cast<char*>(ws.data());
  base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
  return fmha_forward(h, &p, base, bytes) == FMHA_SUCCESS && fmha_last_error_message()[0] == '\0';
}

}  // namespace

TEST_CASE("concurrency: own handles per thread, create/destroy churn, per-thread messages") {
  const Inputs in;
  std::vector<float> expected;
  {
    fmha_handle h = nullptr;
    REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    REQUIRE(fmha_set_num_threads(h, 1) == FMHA_SUCCESS);
    REQUIRE(forward(h, in, &expected));
    fmha_destroy(h);
  }

  constexpr int kThreads = 6, kRounds = 12;
  std::atomic<int> failures{0};
  std::atomic<int> arrived{0};
  std::vector<std::string> what(kThreads);
  auto worker = [&](int t) {
    auto fail = [&](const std::string& why) {
      if (what[t].empty()) what[t] = why;
      ++failures;
    };
    for (int round = 0; round < kRounds; ++round) {
      fmha_handle h = nullptr;
      if (fmha_create(&h, FMHA_DEVICE_CPU, 0) != FMHA_SUCCESS) return fail("create");
      // A failure whose message names this thread and round ...
      const int bad = -(t * 100 + round + 1);
      if (fmha_set_num_threads(h, bad) != FMHA_ERROR_INVALID_ARGUMENT) return fail("set_num_threads accepted a negative count");
      const std::string mine = "num_threads=" + std::to_string(bad);
      // ... survives every other thread's failures and successes meanwhile.
      ++arrived;
      while (arrived.load() < kThreads * (round + 1) && failures.load() == 0) std::this_thread::yield();
      if (std::string(fmha_last_error_message()).find(mine) == std::string::npos)
        return fail("message lost: " + std::string(fmha_last_error_message()));
      if (fmha_set_num_threads(h, 1 + (t + round) % 3) != FMHA_SUCCESS) return fail("set_num_threads");
      std::vector<float> o;
      if (!forward(h, in, &o)) return fail(std::string("forward: ") + fmha_last_error_message());
      // Bitwise equal for any worker count (the CPU backend's reduction
      // order does not depend on the threads).
      if (std::memcmp(o.data(), expected.data(), o.size() * sizeof(float)) != 0) return fail("result differs");
      fmha_destroy(h);
      // Churn: handles created and destroyed without use.
      for (int i = 0; i < 3; ++i) {
        fmha_handle x = nullptr;
        if (fmha_create(&x, FMHA_DEVICE_CPU, 0) != FMHA_SUCCESS) return fail("create (churn)");
        fmha_destroy(x);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK_MESSAGE(what[t].empty(), "thread ", t, ": ", what[t]);
  CHECK(failures.load() == 0);
}
