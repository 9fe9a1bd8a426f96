// fmha_merge on CUDA: the merge of random parts against a float64 merge
// and the CPU handle's (1 to 8 parts, 64, 65 and 130: the rounds of
// kMergeMaxParts), -inf and NaN rows, in place, mixed dtypes, a strided o;
// key-slice forwards of every CUDA kernel merged and compared with one
// float64 forward over all the keys; the handle's stream and graph capture;
// validation (host memory, rounds without lse) writing nothing.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::GpuHandle;
using fmha_test::dtype_bytes;

#define REQUIRE_CUDA(expr)                                                                      \
  do {                                                                                          \
    const cudaError_t err_ = (expr);                                                            \
    REQUIRE_MESSAGE(err_ == cudaSuccess, #expr ": " << std::string(cudaGetErrorString(err_))); \
  } while (0)

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Shape {
  int64_t B = 2, H = 3, N = 17, D = 72;
  int64_t rows() const { return B * H * N; }
  int64_t elems() const { return rows() * D; }
};

// Host parts: contiguous [B, H, N, D] values of `dtype` (as bytes) and lse
// rows with -inf parts, all--inf rows (every 5th row) and a NaN row.
struct HostParts {
  Shape s;
  fmha_dtype dtype;
  int parts;
  std::vector<std::vector<unsigned char>> o;
  std::vector<std::vector<float>> lse;

  HostParts(Shape shape, fmha_dtype t, int n, uint64_t seed, bool nan_row) : s(shape), dtype(t), parts(n) {
    fmha_test::Rng rng(seed);
    for (int i = 0; i < n; ++i) {
      o.emplace_back(static_cast<size_t>(s.elems()) * dtype_bytes(t));
      for (int64_t e = 0; e < s.elems(); ++e)
        fmha_test::store_element(o.back().data(), t, e, static_cast<float>(rng.normal()));
      lse.emplace_back(static_cast<size_t>(s.rows()));
      for (int64_t r = 0; r < s.rows(); ++r) {
        const bool dead = r % 5 == 0 || rng.below(4) == 0;
        lse.back()[r] = dead ? kNegInf : static_cast<float>(3.0 * rng.normal());
        if (dead)  // a part without keys contributes nothing, whatever o holds
          for (int64_t d = 0; d < s.D; ++d) fmha_test::store_element(o.back().data(), t, r * s.D + d, std::nanf(""));
      }
    }
    if (nan_row) lse[n - 1][1] = std::nanf("");
  }

  // The float64 merge of row r: o (D values) and lse; with `mag`, also
  // sum_i w_i |o_i| per column, the scale of FP32 rounding in the merge.
  void merge_row(int64_t r, double* out, double* out_lse, double* mag = nullptr) const {
    double m = -INFINITY;
    bool nan = false;
    for (int i = 0; i < parts; ++i) {
      nan |= std::isnan(lse[i][r]);
      m = std::max<double>(m, lse[i][r]);
    }
    if (nan || m == -INFINITY) {
      for (int64_t d = 0; d < s.D; ++d) out[d] = nan ? NAN : 0.0;
      *out_lse = nan ? NAN : -INFINITY;
      return;
    }
    double sum = 0;
    for (int i = 0; i < parts; ++i) sum += std::exp(lse[i][r] - m);
    for (int64_t d = 0; d < s.D; ++d) {
      double acc = 0, abs_acc = 0;
      for (int i = 0; i < parts; ++i)
        if (lse[i][r] != -INFINITY) {
          const double term = std::exp(lse[i][r] - m) / sum * fmha_test::load_element(o[i].data(), dtype, r * s.D + d);
          acc += term;
          abs_acc += std::fabs(term);
        }
      out[d] = acc;
      if (mag != nullptr) mag[d] = abs_acc;
    }
    *out_lse = m + std::log(sum);
  }
};

// The parts on the device, and the merge params over them.
struct DeviceParts {
  std::vector<CudaBuffer*> o, lse;
  std::vector<fmha_tensor> views;
  std::vector<const float*> lse_ptrs;

  explicit DeviceParts(const HostParts& hp) {
    for (int i = 0; i < hp.parts; ++i) {
      o.push_back(new CudaBuffer(hp.o[i].size()));
      lse.push_back(new CudaBuffer(hp.lse[i].size() * sizeof(float)));
      REQUIRE((o.back()->ok() && lse.back()->ok()));
      REQUIRE_CUDA(cudaMemcpy(o.back()->get(), hp.o[i].data(), hp.o[i].size(), cudaMemcpyHostToDevice));
      REQUIRE_CUDA(cudaMemcpy(lse.back()->get(), hp.lse[i].data(), hp.lse[i].size() * sizeof(float),
                              cudaMemcpyHostToDevice));
      fmha_tensor t{o.back()->get(), hp.dtype, {hp.s.B, hp.s.H, hp.s.N, hp.s.D},
                    {hp.s.H * hp.s.N * hp.s.D, hp.s.N * hp.s.D, hp.s.D, 1}};
      views.push_back(t);
      lse_ptrs.push_back(static_cast<const float*>(lse.back()->get()));
    }
  }
  ~DeviceParts() {
    for (CudaBuffer* b : o) delete b;
    for (CudaBuffer* b : lse) delete b;
  }
};

// o's layout: contiguous, or BNHD with 3 elements of padding per row.
fmha_tensor out_view(void* data, fmha_dtype t, const Shape& s, bool strided) {
  const int64_t row = s.H * s.D + 3;
  if (strided) return {data, t, {s.B, s.H, s.N, s.D}, {s.N * row, s.D, row, 1}};
  return {data, t, {s.B, s.H, s.N, s.D}, {s.H * s.N * s.D, s.N * s.D, s.D, 1}};
}
int64_t out_elems(const Shape& s, bool strided) { return strided ? s.B * s.N * (s.H * s.D + 3) : s.elems(); }

struct MergeRun {
  int parts = 3;
  fmha_dtype in = FMHA_DTYPE_F16, out = FMHA_DTYPE_F16;
  bool strided = false, in_place = false, with_lse = true;
};

void check_random_merge(const MergeRun& m, uint64_t seed) {
  CAPTURE(m.parts);
  CAPTURE(fmha_test::dtype_label(m.in));
  CAPTURE(fmha_test::dtype_label(m.out));
  CAPTURE(m.strided);
  CAPTURE(m.in_place);
  Shape s;
  const HostParts hp(s, m.in, m.parts, seed, /*nan_row=*/true);
  DeviceParts dp(hp);
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);

  const fmha_dtype out_t = m.in_place ? m.in : m.out;
  const bool strided = m.strided && !m.in_place;
  CudaBuffer o(static_cast<size_t>(out_elems(s, strided)) * dtype_bytes(out_t));
  CudaBuffer lse(static_cast<size_t>(s.rows()) * sizeof(float));
  REQUIRE((o.ok() && lse.ok()));
  REQUIRE_CUDA(cudaMemset(o.get(), 0xff, o.bytes()));
  REQUIRE_CUDA(cudaMemset(lse.get(), 0xff, lse.bytes()));
  fmha_merge_params p;
  fmha_merge_params_init(&p);
  p.num_parts = m.parts;
  p.o_parts = dp.views.data();
  p.lse_parts = dp.lse_ptrs.data();
  p.o = m.in_place ? dp.views[0] : out_view(o.get(), out_t, s, strided);
  float* lse_out = m.in_place ? const_cast<float*>(dp.lse_ptrs[0]) : static_cast<float*>(lse.get());
  p.lse = m.with_lse ? lse_out : nullptr;
  REQUIRE_MESSAGE(fmha_merge(h.get(), &p) == FMHA_SUCCESS, fmha_last_error_message());
  REQUIRE_CUDA(cudaDeviceSynchronize());

  std::vector<unsigned char> o_host(static_cast<size_t>(out_elems(s, strided)) * dtype_bytes(out_t));
  REQUIRE_CUDA(cudaMemcpy(o_host.data(), p.o.data, o_host.size(), cudaMemcpyDeviceToHost));
  std::vector<float> lse_host(static_cast<size_t>(s.rows()));
  if (m.with_lse)
    REQUIRE_CUDA(cudaMemcpy(lse_host.data(), lse_out, lse_host.size() * sizeof(float), cudaMemcpyDeviceToHost));

  // FP32 math: each of the up to 64 terms of a round carries a few ulps
  // (the weight's expf, the division, the product, the sum), relative to
  // sum_i w_i |o_i| (cancellation makes that larger than |o|); then o is
  // rounded to its dtype (once per round of kMergeMaxParts parts). The
  // error is measured relative to max(1, |o|).
  const int rounds = m.parts > 64 ? 1 + (m.parts - 64 + 62) / 63 : 1;
  const double o_round = (out_t == FMHA_DTYPE_F32 ? 0 : out_t == FMHA_DTYPE_F16 ? 1e-3 : 8e-3) * rounds;
  const double fp32_terms = 8.0 * std::ldexp(1.0, -24) * (std::min(m.parts, 64) + 4) * rounds;
  std::vector<double> want(static_cast<size_t>(s.D)), mag(static_cast<size_t>(s.D));
  double worst = 0, lse_worst = 0;
  int64_t wrong_special = 0, pad_touched = 0, worst_row = -1;
  double worst_raw = 0;
  for (int64_t r = 0; r < s.rows(); ++r) {
    double want_lse;
    hp.merge_row(r, want.data(), &want_lse, mag.data());
    const int64_t n = r % s.N, hh = r / s.N % s.H, b = r / s.N / s.H;
    for (int64_t d = 0; d < s.D; ++d) {
      const int64_t off = b * p.o.strides[0] + hh * p.o.strides[1] + n * p.o.strides[2] + d;
      const double got = fmha_test::load_element(o_host.data(), out_t, off);
      if (std::isnan(want[d]) || want_lse == -INFINITY)
        wrong_special += std::isnan(want[d]) ? !std::isnan(got) : got != 0.0;
      else
      {
        const double e = std::fabs(got - want[d]) / std::max(1.0, std::fabs(want[d])) /
                         (o_round + fp32_terms * std::max(1.0, mag[d]) / std::max(1.0, std::fabs(want[d])));
        if (!(e <= worst)) worst_row = r, worst_raw = got - want[d];
        worst = std::max(worst, e);
      }
    }
    if (m.with_lse) {
      if (std::isnan(want_lse) || want_lse == -INFINITY)
        wrong_special += std::isnan(want_lse) ? !std::isnan(lse_host[r]) : lse_host[r] != kNegInf;
      else
        lse_worst = std::max(lse_worst, std::fabs(lse_host[r] - want_lse) / std::max(1.0, std::fabs(want_lse)));
    }
  }
  if (strided) {  // the pads between rows keep their 0xff bytes
    const size_t esize = dtype_bytes(out_t);
    for (int64_t e = 0; e < out_elems(s, true); ++e)
      if (e % (s.H * s.D + 3) >= s.H * s.D)
        for (size_t byte = 0; byte < esize; ++byte) pad_touched += o_host[e * esize + byte] != 0xff;
  }
  CAPTURE(worst);
  CAPTURE(lse_worst);
  CAPTURE(worst_row);
  CAPTURE(worst_raw);
  CHECK(wrong_special == 0);
  CHECK(worst <= 1.0);  // errors in units of the bound above
  CHECK(lse_worst <= 4e-6 * rounds);
  CHECK(pad_touched == 0);
}

}  // namespace

TEST_CASE("cuda merge: random parts against a float64 merge") {
  uint64_t seed = 1;
  for (int parts : {1, 2, 5, 8})
    for (fmha_dtype in : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32})
      for (fmha_dtype out : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32}) {
        MergeRun m;
        m.parts = parts;
        m.in = in;
        m.out = out;
        m.strided = (parts + in + out) % 2 == 0;
        m.with_lse = parts != 5;
        check_random_merge(m, seed++);
      }
}

TEST_CASE("cuda merge: in place, and the rounds beyond 64 parts") {
  for (int parts : {2, 7, 64, 65, 130})
    for (bool in_place : {false, true}) {
      MergeRun m;
      m.parts = parts;
      m.in = m.out = parts % 2 ? FMHA_DTYPE_F32 : FMHA_DTYPE_BF16;
      m.in_place = in_place;
      check_random_merge(m, 1000 + parts * 2 + in_place);
    }
}

TEST_CASE("cuda merge: the same rows as the CPU handle's merge") {
  Shape s;
  const HostParts hp(s, FMHA_DTYPE_BF16, 6, 77, true);
  DeviceParts dp(hp);
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaBuffer o(static_cast<size_t>(s.elems()) * sizeof(float)), lse(static_cast<size_t>(s.rows()) * sizeof(float));
  fmha_merge_params p;
  fmha_merge_params_init(&p);
  p.num_parts = 6;
  p.o_parts = dp.views.data();
  p.lse_parts = dp.lse_ptrs.data();
  p.o = out_view(o.get(), FMHA_DTYPE_F32, s, false);
  p.lse = static_cast<float*>(lse.get());
  REQUIRE(fmha_merge(h.get(), &p) == FMHA_SUCCESS);
  std::vector<float> gpu_o(static_cast<size_t>(s.elems())), gpu_lse(static_cast<size_t>(s.rows()));
  REQUIRE_CUDA(cudaMemcpy(gpu_o.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
  REQUIRE_CUDA(cudaMemcpy(gpu_lse.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));

  fmha_handle cpu = nullptr;
  REQUIRE(fmha_create(&cpu, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  std::vector<fmha_tensor> views;
  std::vector<const float*> lses;
  for (int i = 0; i < 6; ++i) {
    views.push_back(dp.views[i]);
    views.back().data = const_cast<unsigned char*>(hp.o[i].data());
    lses.push_back(hp.lse[i].data());
  }
  std::vector<float> cpu_o(gpu_o.size()), cpu_lse(gpu_lse.size());
  p.o_parts = views.data();
  p.lse_parts = lses.data();
  p.o.data = cpu_o.data();
  p.lse = cpu_lse.data();
  REQUIRE(fmha_merge(cpu, &p) == FMHA_SUCCESS);
  fmha_destroy(cpu);
  double worst = 0;
  int64_t mismatched_special = 0;
  for (size_t e = 0; e < gpu_o.size(); ++e) {
    if (!std::isfinite(cpu_o[e]) || cpu_o[e] == 0.f)
      mismatched_special += std::isnan(cpu_o[e]) != std::isnan(gpu_o[e]) || (cpu_o[e] == 0.f && gpu_o[e] != 0.f);
    else
      worst = std::max<double>(worst, std::fabs(gpu_o[e] - cpu_o[e]) / std::max(1.f, std::fabs(cpu_o[e])));
  }
  for (size_t r = 0; r < gpu_lse.size(); ++r)
    if (!std::isfinite(cpu_lse[r])) mismatched_special += std::isnan(cpu_lse[r]) != std::isnan(gpu_lse[r]) ||
                                                          (std::isinf(cpu_lse[r]) && gpu_lse[r] != cpu_lse[r]);
  CHECK(mismatched_special == 0);
  CHECK(worst <= 2e-6);
}

TEST_CASE("cuda merge: key-slice forwards of each CUDA kernel merge to one forward over all keys") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  const int64_t B = 2, Hq = 8, Hk = 2, Nq = 40, Nk = 300, D = 128;
  const fmha_dtype t = FMHA_DTYPE_BF16;
  fmha_test::Rng rng(4242);
  const int64_t q_elems = B * Hq * Nq * D, kv_elems = B * Hk * Nk * D, rows = B * Hq * Nq;
  std::vector<unsigned char> q(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2);
  for (auto* buf : {&q, &k, &v})
    for (size_t e = 0; e < buf->size() / 2; ++e) fmha_test::store_element(buf->data(), t, e, static_cast<float>(rng.normal()));
  CudaBuffer dq(q.size()), dk(k.size()), dv(v.size());
  REQUIRE_CUDA(cudaMemcpy(dq.get(), q.data(), q.size(), cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaMemcpy(dk.get(), k.data(), k.size(), cudaMemcpyHostToDevice));
  REQUIRE_CUDA(cudaMemcpy(dv.get(), v.data(), v.size(), cudaMemcpyHostToDevice));
  auto view = [&](void* data, int64_t heads, int64_t n) {
    return fmha_tensor{data, t, {B, heads, n, D}, {heads * n * D, n * D, D, 1}};
  };
  fmha_forward_params full;
  fmha_forward_params_init(&full);
  full.q = view(q.data(), Hq, Nq);
  full.k = view(k.data(), Hk, Nk);
  full.v = view(v.data(), Hk, Nk);
  full.mask_flags = FMHA_MASK_CAUSAL;
  const fmha_test::ReferenceResult ref = fmha_test::reference_forward(full);

  const int64_t cut[] = {0, 37, 200, Nk};  // three slices
  const int parts = 3;
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    CAPTURE(name);
    std::vector<CudaBuffer*> o_parts, lse_parts;
    std::vector<fmha_tensor> views;
    std::vector<const float*> lses;
    bool unsupported = false;
    for (int i = 0; i < parts && !unsupported; ++i) {
      o_parts.push_back(new CudaBuffer(q.size()));
      lse_parts.push_back(new CudaBuffer(static_cast<size_t>(rows) * sizeof(float)));
      fmha_forward_params p = full;
      p.q = view(dq.get(), Hq, Nq);
      p.k = view(static_cast<unsigned char*>(dk.get()) + cut[i] * D * 2, Hk, cut[i + 1] - cut[i]);
      p.v = view(static_cast<unsigned char*>(dv.get()) + cut[i] * D * 2, Hk, cut[i + 1] - cut[i]);
      p.k.strides[0] = p.v.strides[0] = Hk * Nk * D;  // slices of the full k/v
      p.k.strides[1] = p.v.strides[1] = Nk * D;
      p.mask_flags = FMHA_MASK_NONE;
      p.window_right = static_cast<int32_t>(Nk - cut[i + 1]);  // the causal diagonal of all the keys
      p.o = view(o_parts.back()->get(), Hq, Nq);
      p.lse = static_cast<float*>(lse_parts.back()->get());
      p.kernel = name.c_str();
      size_t ws_bytes = 0;
      const fmha_status qs = fmha_forward_workspace_size(h.get(), &p, &ws_bytes);
      if (qs == FMHA_ERROR_UNSUPPORTED) {
        unsupported = true;
        break;
      }
      REQUIRE_MESSAGE(qs == FMHA_SUCCESS, fmha_last_error_message());
      CudaBuffer ws(ws_bytes);
      REQUIRE_MESSAGE(fmha_forward(h.get(), &p, ws.get(), ws_bytes) == FMHA_SUCCESS, fmha_last_error_message());
      REQUIRE_CUDA(cudaDeviceSynchronize());
      views.push_back(p.o);
      lses.push_back(p.lse);
    }
    if (!unsupported) {
      CudaBuffer o(static_cast<size_t>(q_elems) * sizeof(float)), lse(static_cast<size_t>(rows) * sizeof(float));
      REQUIRE_CUDA(cudaMemset(o.get(), 0xff, o.bytes()));
      fmha_merge_params mp;
      fmha_merge_params_init(&mp);
      mp.num_parts = parts;
      mp.o_parts = views.data();
      mp.lse_parts = lses.data();
      mp.o = fmha_tensor{o.get(), FMHA_DTYPE_F32, {B, Hq, Nq, D}, {Hq * Nq * D, Nq * D, D, 1}};
      mp.lse = static_cast<float*>(lse.get());
      REQUIRE(fmha_merge(h.get(), &mp) == FMHA_SUCCESS);
      std::vector<float> got(static_cast<size_t>(q_elems)), got_lse(static_cast<size_t>(rows));
      REQUIRE_CUDA(cudaMemcpy(got.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
      REQUIRE_CUDA(cudaMemcpy(got_lse.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));
      double err2 = 0, ref2 = 0, lse_err = 0;
      int64_t bad = 0;
      for (int64_t e = 0; e < q_elems; ++e) {
        bad += !std::isfinite(got[e]);
        err2 += (got[e] - ref.o[e]) * (got[e] - ref.o[e]);
        ref2 += ref.o[e] * ref.o[e];
      }
      for (int64_t r = 0; r < rows; ++r)
        lse_err = std::max(lse_err, std::fabs(got_lse[r] - ref.lse[r]) / std::max(1.0, std::fabs(ref.lse[r])));
      const fmha_test::Tolerance tol = fmha_test::tolerance_for(t);
      CHECK(bad == 0);
      CHECK(std::sqrt(err2 / ref2) <= tol.o_rel_l2);
      CHECK(lse_err <= tol.lse_abs);
    }
    for (CudaBuffer* b : o_parts) delete b;
    for (CudaBuffer* b : lse_parts) delete b;
  }
}

TEST_CASE("cuda merge: on the handle's stream, captured into a CUDA graph") {
  Shape s;
  const HostParts hp(s, FMHA_DTYPE_F16, 4, 99, false);
  DeviceParts dp(hp);
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE(fmha_set_stream(h.get(), stream) == FMHA_SUCCESS);
  CudaBuffer o(static_cast<size_t>(s.elems()) * 2), lse(static_cast<size_t>(s.rows()) * 4);
  REQUIRE_CUDA(cudaMemset(o.get(), 0xff, o.bytes()));
  fmha_merge_params p;
  fmha_merge_params_init(&p);
  p.num_parts = 4;
  p.o_parts = dp.views.data();
  p.lse_parts = dp.lse_ptrs.data();
  p.o = out_view(o.get(), FMHA_DTYPE_F16, s, false);
  p.lse = static_cast<float*>(lse.get());
  cudaGraph_t graph = nullptr;
  REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const fmha_status st = fmha_merge(h.get(), &p);
  REQUIRE_CUDA(cudaStreamEndCapture(stream, &graph));
  REQUIRE_MESSAGE(st == FMHA_SUCCESS, fmha_last_error_message());
  std::vector<uint16_t> before(static_cast<size_t>(s.elems()));
  REQUIRE_CUDA(cudaMemcpy(before.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
  CHECK(std::all_of(before.begin(), before.end(), [](uint16_t x) { return x == 0xffff; }));  // captured, not run
  cudaGraphExec_t exec = nullptr;
  REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
  REQUIRE_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint16_t> after(static_cast<size_t>(s.elems()));
  REQUIRE_CUDA(cudaMemcpy(after.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
  std::vector<double> want(static_cast<size_t>(s.D));
  double worst = 0;
  for (int64_t r = 0; r < s.rows(); ++r) {
    double wl;
    hp.merge_row(r, want.data(), &wl);
    for (int64_t d = 0; d < s.D; ++d)
      worst = std::max(worst, std::fabs(fmha_test::half_to_float(after[r * s.D + d]) - want[d]) /
                                  std::max(1.0, std::fabs(want[d])));
  }
  CHECK(worst <= 1e-3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  REQUIRE(fmha_set_stream(h.get(), nullptr) == FMHA_SUCCESS);
  cudaStreamDestroy(stream);
}

TEST_CASE("cuda merge: host memory, rounds without lse and empty work") {
  Shape s;
  const HostParts hp(s, FMHA_DTYPE_F32, 65, 5, false);
  DeviceParts dp(hp);
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaBuffer o(static_cast<size_t>(s.elems()) * 4);
  REQUIRE_CUDA(cudaMemset(o.get(), 0xff, o.bytes()));
  fmha_merge_params p;
  fmha_merge_params_init(&p);
  p.num_parts = 65;
  p.o_parts = dp.views.data();
  p.lse_parts = dp.lse_ptrs.data();
  p.o = out_view(o.get(), FMHA_DTYPE_F32, s, false);
  CHECK(fmha_merge(h.get(), &p) == FMHA_ERROR_UNSUPPORTED);  // 65 parts need lse for the rounds
  CHECK(std::string(fmha_last_error_message()).find("num_parts=65") != std::string::npos);
  p.num_parts = 64;
  std::vector<float> host_lse(static_cast<size_t>(s.rows()), 1.f);
  p.lse = host_lse.data();
  CHECK(fmha_merge(h.get(), &p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("lse=") != std::string::npos);
  CHECK(std::string(fmha_last_error_message()).find("is host memory") != std::string::npos);
  p.lse = nullptr;
  std::vector<const float*> lses = dp.lse_ptrs;
  lses[3] = hp.lse[3].data();
  p.lse_parts = lses.data();
  CHECK(fmha_merge(h.get(), &p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(fmha_last_error_message()).find("lse_parts[3]=") != std::string::npos);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> raw(o.bytes());
  REQUIRE_CUDA(cudaMemcpy(raw.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
  CHECK(std::all_of(raw.begin(), raw.end(), [](unsigned char c) { return c == 0xff; }));
  p.lse_parts = dp.lse_ptrs.data();
  p.o.dims[2] = 0;
  for (int i = 0; i < 64; ++i) dp.views[i].dims[2] = 0;
  CHECK(fmha_merge(h.get(), &p) == FMHA_SUCCESS);
}
