#include "gpu/gpu_support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "common/numeric_types.h"
#include "common/random.h"
#include "common/reference.h"
#include "gpu/gpu_hash.h"

namespace fmha_gpu_test {

bool quick_mode() {
  const char* v = std::getenv("FMHA_TEST_QUICK");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

int quick_stride() {
  if (!quick_mode()) return 1;
  const int n = std::atoi(std::getenv("FMHA_TEST_QUICK"));
  return n >= 2 ? n : 3;
}

std::vector<std::string> cuda_kernel_names() {
  std::vector<std::string> out;
  for (int i = 0; i < fmha_kernel_count(); ++i) {
    const char* name = fmha_kernel_name(i);
    if (name != nullptr && std::strncmp(name, "cuda_", 5) == 0) out.emplace_back(name);
  }
  return out;
}

bool instance_not_built(fmha_status status, const std::string& message) {
#if FMHA_TEST_REDUCED_INSTANCES
  if (status != FMHA_ERROR_UNSUPPORTED) return false;
  for (const char* refusal : {"not instantiated", "does not run dtype", "does not run head_dim"})
    if (message.find(refusal) != std::string::npos) return true;
  return false;
#else
  (void)status, (void)message;
  return false;
#endif
}

// ---- memory ---------------------------------------------------------------

void* CudaMemory::allocate(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

void CudaMemory::release(void* ptr) {
  if (ptr != nullptr) cudaFree(ptr);
}

bool CudaMemory::to_device(void* device_dst, const void* host_src, size_t bytes) {
  return bytes == 0 || cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

bool CudaMemory::to_host(void* host_dst, const void* device_src, size_t bytes) {
  return bytes == 0 || cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

bool CudaMemory::synchronize() {
  if (cudaStreamSynchronize(stream_) != cudaSuccess) return false;
  return cudaGetLastError() == cudaSuccess;
}

// Each test starts with a fresh handle; clearing the runtime's last error
// keeps a failure in one test from showing up in the next.
GpuHandle::GpuHandle() : status_(fmha_create(&handle_, FMHA_DEVICE_CUDA, 0)) { cudaGetLastError(); }
GpuHandle::~GpuHandle() { fmha_destroy(handle_); }

CudaBuffer::CudaBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
  }
}
CudaBuffer::~CudaBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

// ---- hashed tensors -------------------------------------------------------

float hashed_value(uint64_t seed, uint64_t offset) { return hashed_value_impl(seed, offset); }

int64_t HashedOperand::extent() const {
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) last += (dims[d] - 1) * strides[d];
  return last + 1;
}

void HashedProblem::set_contiguous(uint64_t seed) {
  auto set = [](HashedOperand& op, uint64_t s, int64_t b, int64_t h, int64_t n, int64_t d) {
    op.seed = s;
    const int64_t dims[4] = {b, h, n, d};
    std::copy(dims, dims + 4, op.dims);
    op.strides[3] = 1;
    op.strides[2] = d;
    op.strides[1] = n * d;
    op.strides[0] = h * n * d;
  };
  set(q, mix64(seed + 1), batch, heads_q, seq_q, head_dim);
  set(k, mix64(seed + 2), batch, heads_kv, seq_k, head_dim);
  set(v, mix64(seed + 3), batch, heads_kv, seq_k, head_dim);
}

namespace {

double element(const HashedOperand& op, fmha_dtype dtype, int64_t b, int64_t h, int64_t n, int64_t d) {
  const int64_t off = b * op.strides[0] + h * op.strides[1] + n * op.strides[2] + d * op.strides[3];
  return fmha_test::round_to_dtype(hashed_value_impl(op.seed, static_cast<uint64_t>(off)), dtype);
}

}  // namespace

int64_t HashedProblem::reference_row(int64_t b, int64_t h, int64_t i, double* o, double* lse) const {
  const int64_t hk = h / (heads_q / heads_kv);
  const double sc = scale != 0.f ? static_cast<double>(scale) : 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> qrow(static_cast<size_t>(head_dim));
  for (int64_t d = 0; d < head_dim; ++d) qrow[d] = element(q, dtype, b, h, i, d);
  // Visible keys (the oracle's rule) and their logits, then a max-shifted
  // softmax in double.
  std::vector<int64_t> keys;
  std::vector<double> logits;
  for (int64_t j = 0; j < seq_k; ++j) {
    if (!fmha_test::key_visible(i, j, seq_q, seq_k, mask_flags, window_left, window_right)) continue;
    double s = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) s += qrow[d] * element(k, dtype, b, hk, j, d);
    s *= sc;
    if (softcap != 0.f) s = softcap * std::tanh(s / softcap);
    keys.push_back(j);
    logits.push_back(s);
  }
  std::fill(o, o + head_dim, 0.0);
  if (keys.empty()) {
    *lse = -std::numeric_limits<double>::infinity();
    return 0;
  }
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (size_t n = 0; n < keys.size(); ++n) {
    const double p = std::exp(logits[n] - mx);
    sum += p;
    for (int64_t d = 0; d < head_dim; ++d) o[d] += p * element(v, dtype, b, hk, keys[n], d);
  }
  for (int64_t d = 0; d < head_dim; ++d) o[d] /= sum;
  *lse = mx + std::log(sum);
  return static_cast<int64_t>(keys.size());
}

RowCheck check_rows(const HashedProblem& hp, const std::vector<int64_t>& rows,
                    const std::vector<unsigned char>& o_host, const std::vector<float>& lse_host) {
  const size_t n = rows.size() / 3;
  const int64_t D = hp.head_dim;
  std::vector<double> ref(n * D), ref_lse(n);
  unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t r = t; r < n; r += threads)
        hp.reference_row(rows[3 * r], rows[3 * r + 1], rows[3 * r + 2], &ref[r * D], &ref_lse[r]);
    });
  for (auto& th : pool) th.join();

  RowCheck out;
  out.rows = static_cast<int64_t>(n);
  double err2 = 0.0, ref2 = 0.0;
  for (size_t r = 0; r < n; ++r) {
    const int64_t b = rows[3 * r], h = rows[3 * r + 1], i = rows[3 * r + 2];
    const int64_t row = (b * hp.heads_q + h) * hp.seq_q + i;
    for (int64_t d = 0; d < D; ++d) {
      const double a = fmha_test::load_element(o_host.data(), hp.dtype, row * D + d);
      const double e = ref[r * D + d];
      if (!std::isfinite(a)) {
        ++out.unwritten;
        continue;
      }
      err2 += (a - e) * (a - e);
      ref2 += e * e;
      if (std::fabs(a - e) > out.o_max_abs) {
        out.o_max_abs = std::fabs(a - e);
        char buf[160];
        std::snprintf(buf, sizeof buf, "[b=%lld h=%lld i=%lld d=%lld] got %.7g want %.7g",
                      static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(i),
                      static_cast<long long>(d), a, e);
        out.worst = buf;
      }
    }
    if (!lse_host.empty()) {
      const double a = lse_host[static_cast<size_t>(row)];
      const double e = ref_lse[r];
      double err;
      if (std::isinf(e) || std::isinf(a) || std::isnan(a))
        err = (a == e) ? 0.0 : std::numeric_limits<double>::infinity();
      else
        err = std::fabs(a - e) / std::max(1.0, std::fabs(e));
      out.lse_max_err = std::max(out.lse_max_err, err);
    }
  }
  out.o_rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return out;
}

std::vector<int64_t> sample_rows(const HashedProblem& hp, int count, uint64_t seed) {
  fmha_test::Rng rng(seed);
  std::vector<int64_t> out;
  const int64_t heads[] = {0, hp.heads_q - 1};
  const int64_t batches[] = {0, hp.batch - 1};
  for (int64_t b : batches) {
    for (int64_t h : heads) {
      std::vector<int64_t> is = {0, 1, hp.seq_q / 2, hp.seq_q - 1, 63, 64, 127, 128};
      for (int n = 0; n < count; ++n) is.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(hp.seq_q))));
      for (int64_t i : is) {
        if (i < 0 || i >= hp.seq_q) continue;
        out.insert(out.end(), {b, h, i});
      }
      if (hp.heads_q == 1) break;
    }
    if (hp.batch == 1) break;
  }
  return out;
}

}  // namespace fmha_gpu_test
