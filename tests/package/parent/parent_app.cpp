// An engine's program: built with the parent's own flags (no build type,
// -fno-exceptions, C++14), it includes fmha's header and runs a forward on
// its own "job system" (fmha_set_parallel_for) and on fmha's pool, and
// checks that the two agree to the bit.
#include <fmha/fmha.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#if defined(PARENT_NO_EXCEPTIONS) && (defined(__EXCEPTIONS) || defined(__cpp_exceptions))
#error "the parent builds with -fno-exceptions, but its program got exceptions enabled"
#endif
#if defined(PARENT_NO_BUILD_TYPE) && (defined(NDEBUG) || defined(__OPTIMIZE__))
#error "the parent has no build type, but its program got optimization or NDEBUG flags"
#endif
#if __cplusplus != 201402L
#error "the parent's C++14 changed"
#endif

namespace {

constexpr int64_t B = 1, H = 4, N = 70, D = 32;

// The engine's job system: two threads, odd and even indices.
void job_system(void* user, int64_t count, void (*task)(void*, int64_t), void* ctx) {
  ++*static_cast<int*>(user);
  std::thread odd([=] {
    for (int64_t i = 1; i < count; i += 2) task(ctx, i);
  });
  for (int64_t i = 0; i < count; i += 2) task(ctx, i);
  odd.join();
}

void view(fmha_tensor* t, float* data) {
  t->data = data;
  t->dtype = FMHA_DTYPE_F32;
  const int64_t dims[4] = {B, H, N, D}, strides[4] = {H * N * D, N * D, D, 1};
  std::memcpy(t->dims, dims, sizeof dims);
  std::memcpy(t->strides, strides, sizeof strides);
}

bool forward(fmha_handle h, fmha_forward_params* p) {
  size_t bytes = 0;
  if (fmha_forward_workspace_size(h, p, &bytes) != FMHA_SUCCESS) return false;
  std::vector<double> workspace(bytes / sizeof(double) + 1);
  return fmha_forward(h, p, workspace.data(), bytes) == FMHA_SUCCESS;
}

}  // namespace

int main() {
  std::vector<float> q(B * H * N * D), k(q.size()), v(q.size()), o(q.size()), o_jobs(q.size());
  uint32_t x = 99u;
  for (auto* t : {&q, &k, &v})
    for (float& e : *t) e = (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f);
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  view(&p.q, q.data());
  view(&p.k, k.data());
  view(&p.v, v.data());
  view(&p.o, o.data());
  p.mask_flags = FMHA_MASK_CAUSAL;

  fmha_handle h = nullptr;
  int calls = 0;
  bool ok = fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS && forward(h, &p);
  p.o.data = o_jobs.data();
  ok = ok && fmha_set_parallel_for(h, job_system, &calls) == FMHA_SUCCESS && forward(h, &p);
  if (!ok) {
    std::fprintf(stderr, "parent_app: %s\n", fmha_last_error_message());
    return 1;
  }
  fmha_destroy(h);
  for (float e : o)
    if (!std::isfinite(e)) return std::fprintf(stderr, "parent_app: non-finite output\n"), 1;
  if (calls < 1 || std::memcmp(o.data(), o_jobs.data(), o.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "parent_app: the job system's result differs from the pool's (%d calls)\n", calls);
    return 1;
  }
  std::printf("parent_app: fmha %u, job system and pool agree bitwise\n", fmha_version());
  return 0;
}
