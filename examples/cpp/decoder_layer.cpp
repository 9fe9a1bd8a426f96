// decoder_layer (C++17): one decoder layer's attention with a KV cache,
// through fmha's C API, on the CPU backend.
//
// Llama-style grouped-query attention (32 query heads, 8 KV heads, head_dim
// 128), causal, FP32, log-sum-exp returned. The KV cache is [B, Hk, capacity,
// D]; a prompt of N tokens is attended to (prefill), then one new token
// (decode: Nq = 1, Nk = N + 1). fmha's bottom-right causal alignment puts
// the diagonal of query i at key i + Nk - Nq, which is exactly "a new token
// sees the whole cache and itself" for both calls. The cache is viewed up to
// its current length: dims say N, strides keep the capacity.
//
//   decoder_layer_cpp [N]      (prompt length, default 256)
//
// Checks a few rows against a float64 reference; exits non-zero on failure.
#include <fmha/fmha.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kHeadsQ = 32, kHeadsKV = 8, kHeadDim = 128;

void check(fmha_status s, const char* what) {
  if (s != FMHA_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + fmha_status_string(s) + " (" +
                             fmha_last_error_message() + ")");
}

// A handle that releases itself.
using Handle = std::unique_ptr<fmha_context, decltype(&fmha_destroy)>;

Handle make_cpu_handle() {
  fmha_handle h = nullptr;
  check(fmha_create(&h, FMHA_DEVICE_CPU, 0), "fmha_create");
  return Handle(h, &fmha_destroy);
}

// [1, heads, len, D] view of a contiguous [1, heads, capacity, D] buffer.
fmha_tensor view(float* data, int heads, int len, int capacity) {
  fmha_tensor t{};
  t.data = data;
  t.dtype = FMHA_DTYPE_F32;
  const int64_t dims[4] = {1, heads, len, kHeadDim};
  const int64_t strides[4] = {int64_t{heads} * capacity * kHeadDim, int64_t{capacity} * kHeadDim,
                              kHeadDim, 1};
  std::copy(dims, dims + 4, t.dims);
  std::copy(strides, strides + 4, t.strides);
  return t;
}

// O = attention(q, k, v) with causal masking and lse, workspace handled here.
void attention(fmha_handle h, const fmha_tensor& q, const fmha_tensor& k, const fmha_tensor& v,
               const fmha_tensor& o, float* lse) {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = q, p.k = k, p.v = v, p.o = o;
  p.mask_flags = FMHA_MASK_CAUSAL;
  p.lse = lse;
  size_t bytes = 0;
  check(fmha_forward_workspace_size(h, &p, &bytes), "fmha_forward_workspace_size");
  std::vector<float> workspace((bytes + sizeof(float) - 1) / sizeof(float));  // 16-byte aligned
  check(fmha_forward(h, &p, workspace.data(), bytes), "fmha_forward");
}

// Max |o - reference| of query row i, head h (keys 0..last visible).
double row_error(const fmha_tensor& q, const fmha_tensor& k, const fmha_tensor& v,
                 const fmha_tensor& o, const float* lse, int h, int i) {
  auto at = [](const fmha_tensor& t, int head, int row, int d) {
    return double(static_cast<const float*>(t.data)[head * t.strides[1] + row * t.strides[2] + d]);
  };
  const int kv = h / (kHeadsQ / kHeadsKV);
  const int last = int(i + k.dims[2] - q.dims[2]);  // bottom-right diagonal
  std::vector<double> s(last + 1);
  for (int j = 0; j <= last; ++j) {
    double dot = 0;
    for (int d = 0; d < kHeadDim; ++d) dot += at(q, h, i, d) * at(k, kv, j, d);
    s[j] = dot / std::sqrt(double(kHeadDim));
  }
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0, err = 0;
  for (double x : s) sum += std::exp(x - m);
  for (int d = 0; d < kHeadDim; ++d) {
    double acc = 0;
    for (int j = 0; j <= last; ++j) acc += std::exp(s[j] - m) * at(v, kv, j, d);
    err = std::max(err, std::abs(acc / sum - at(o, h, i, d)));
  }
  return std::max(err, std::abs(m + std::log(sum) - lse[h * q.dims[2] + i]));
}

}  // namespace

int main(int argc, char** argv) try {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  if (n <= 0) throw std::invalid_argument("usage: decoder_layer_cpp [N > 0]");
  const int capacity = n + 16;

  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto random_buffer = [&](size_t size) {
    std::vector<float> b(size);
    for (float& x : b) x = normal(rng);
    return b;
  };
  // KV cache with room for more tokens; the prompt's queries; outputs.
  std::vector<float> k_cache = random_buffer(size_t{kHeadsKV} * capacity * kHeadDim);
  std::vector<float> v_cache = random_buffer(k_cache.size());
  std::vector<float> q = random_buffer(size_t{kHeadsQ} * n * kHeadDim);
  std::vector<float> o(q.size()), lse(size_t{kHeadsQ} * n);

  Handle handle = make_cpu_handle();

  // Prefill: N queries against the N cached tokens.
  const fmha_tensor qv = view(q.data(), kHeadsQ, n, n), ov = view(o.data(), kHeadsQ, n, n);
  attention(handle.get(), qv, view(k_cache.data(), kHeadsKV, n, capacity),
            view(v_cache.data(), kHeadsKV, n, capacity), ov, lse.data());
  double err = 0;
  for (int h : {0, 13, 31})
    for (int i : {0, n / 3, n - 1})
      err = std::max(err, row_error(qv, view(k_cache.data(), kHeadsKV, n, capacity),
                                    view(v_cache.data(), kHeadsKV, n, capacity), ov, lse.data(), h, i));

  // Decode: one new token (its K/V already appended at row N) sees N + 1 keys.
  std::vector<float> q1 = random_buffer(size_t{kHeadsQ} * kHeadDim), o1(q1.size()), lse1(kHeadsQ);
  const fmha_tensor q1v = view(q1.data(), kHeadsQ, 1, 1), o1v = view(o1.data(), kHeadsQ, 1, 1);
  const fmha_tensor kv1 = view(k_cache.data(), kHeadsKV, n + 1, capacity);
  const fmha_tensor vv1 = view(v_cache.data(), kHeadsKV, n + 1, capacity);
  attention(handle.get(), q1v, kv1, vv1, o1v, lse1.data());
  for (int h = 0; h < kHeadsQ; h += 5) err = std::max(err, row_error(q1v, kv1, vv1, o1v, lse1.data(), h, 0));

  std::printf("decoder_layer_cpp: Hq=%d Hk=%d D=%d causal fp32, prefill N=%d + 1 decode step, "
              "max error vs float64 = %.2e\n", kHeadsQ, kHeadsKV, kHeadDim, n, err);
  return err < 1e-4 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "decoder_layer_cpp: %s\n", e.what());
  return 1;
}
