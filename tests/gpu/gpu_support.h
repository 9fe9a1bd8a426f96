// What the GPU tests share: CUDA memory for the common case runner, the list
// of registered CUDA kernels, the quick-mode switch, and tensors filled on
// the device from a hash of the element offset, so that problems too large
// for a host reference (N = 65536, tensors past 2^31 elements) can still be
// checked: the host recomputes any element from its offset and takes the
// float64 reference of a sample of rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/device_memory.h"
#include "fmha/fmha.h"

namespace fmha_gpu_test {

// FMHA_TEST_QUICK=1: a smaller suite for compute-sanitizer runs (a third of
// the case matrix, no large or timing tests); FMHA_TEST_QUICK=n (n >= 2):
// every n-th case of the matrix.
bool quick_mode();
// 1 outside quick mode, else the stride over each case group.
int quick_stride();

// The automatic choice's explain text of the params a run is given (its
// device pointers), taken through PreparedServingCase::run's edit hook (a
// plain function pointer, hence the static state): set handle, pass
// ExplainCapture::edit, read text.
struct ExplainCapture {
  static inline fmha_handle handle = nullptr;
  static inline std::string text;
  static void edit(fmha_forward_params* p) {
    const char* forced = p->kernel;
    p->kernel = nullptr;
    char buf[4096];
    fmha_forward_explain(handle, p, buf, sizeof buf);
    text = buf;
    p->kernel = forced;
  }
};

// Names of the registered CUDA kernels ("cuda_*"), in registry order.
std::vector<std::string> cuda_kernel_names();

// Whether a forced kernel declined only because this build compiled fewer
// instances than the default lists: a reduced FMHA_SM80_INSTANCES /
// FMHA_SM90_INSTANCES (CMake; FMHA_TEST_REDUCED_INSTANCES), whose refusals
// say "not instantiated", "does not run dtype" or "does not run head_dim".
// With the default lists it is always false, so a refusal of a built
// instance still fails the test.
bool instance_not_built(fmha_status status, const std::string& message);

// The runner's memory on the current CUDA device; synchronize() waits for
// `stream` (the stream the handle was given; null = legacy default).
class CudaMemory final : public fmha_test::DeviceMemory {
 public:
  explicit CudaMemory(cudaStream_t stream = nullptr) : stream_(stream) {}
  fmha_device_kind kind() const override { return FMHA_DEVICE_CUDA; }
  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  bool to_device(void* device_dst, const void* host_src, size_t bytes) override;
  bool to_host(void* host_dst, const void* device_src, size_t bytes) override;
  bool synchronize() override;

 private:
  cudaStream_t stream_;
};

// A CUDA handle for device 0, destroyed with the object.
class GpuHandle {
 public:
  GpuHandle();
  ~GpuHandle();
  GpuHandle(const GpuHandle&) = delete;
  GpuHandle& operator=(const GpuHandle&) = delete;
  fmha_handle get() const { return handle_; }
  fmha_status status() const { return status_; }

 private:
  fmha_handle handle_ = nullptr;
  fmha_status status_;
};

// cudaMalloc'd memory, freed with the object.
class CudaBuffer {
 public:
  explicit CudaBuffer(size_t bytes);
  ~CudaBuffer();
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Memory for explain-only checks (fmha_forward_explain reads no data): one
// 2 MiB allocation, out() its first MiB for o (and lse), in() the second for
// the inputs, whose views may claim far more than the buffer holds. o lies
// below every input view, so none of those claimed ranges overlaps it (a
// separate allocation could sit inside one).
class ExplainBuffers {
 public:
  ExplainBuffers() : all_(2 << 20) {}
  bool ok() const { return all_.ok(); }
  void* out() const { return all_.get(); }
  void* in() const { return static_cast<char*>(all_.get()) + (1 << 20); }

 private:
  CudaBuffer all_;
};

// fmha_forward_explain's text for p on handle h, or on failure the detail
// message; with the status.
inline std::pair<fmha_status, std::string> explain_text(fmha_handle h, const fmha_forward_params& p) {
  char text[4096];
  const fmha_status st = fmha_forward_explain(h, &p, text, sizeof text);
  return {st, std::string(st == FMHA_SUCCESS ? text : fmha_last_error_message())};
}

// A row-major (contiguous) [d0, d1, d2, d3] view of `data`.
inline fmha_tensor contiguous_tensor(void* data, fmha_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  fmha_tensor t{};
  t.data = data;
  t.dtype = dtype;
  const int64_t dims[4] = {d0, d1, d2, d3};
  const int64_t strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  for (int i = 0; i < 4; ++i) {
    t.dims[i] = dims[i];
    t.strides[i] = strides[i];
  }
  return t;
}

// ---- hashed tensors -------------------------------------------------------

// The value of element `offset` (in elements) of a hashed buffer with
// `seed`, before rounding to the dtype: uniform in [-sqrt(3), sqrt(3))
// (unit variance), with 24 random bits. Identical on host and device.
float hashed_value(uint64_t seed, uint64_t offset);

// Fills `count` elements of `dtype` at device `ptr` with hashed_value(seed,
// e) rounded to the dtype (device kernel, asynchronous on `stream`).
cudaError_t fill_hashed(void* ptr, fmha_dtype dtype, int64_t count, uint64_t seed, cudaStream_t stream);

// One operand of a hashed problem: element [b, h, n, d] is
// round_to_dtype(hashed_value(seed, b s0 + h s1 + n s2 + d s3)).
struct HashedOperand {
  uint64_t seed = 0;
  int64_t strides[4] = {0, 0, 0, 0};
  int64_t extent() const;  // elements the buffer must hold, given dims
  int64_t dims[4] = {0, 0, 0, 0};
};

// A problem whose inputs are hashed device buffers, with the float64
// reference of single rows.
struct HashedProblem {
  fmha_dtype dtype = FMHA_DTYPE_F16;
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 1, seq_k = 1, head_dim = 64;
  uint32_t mask_flags = FMHA_MASK_NONE;
  int32_t window_left = -1, window_right = -1;
  float softcap = 0.f;
  float scale = 0.f;
  HashedOperand q, k, v;

  // Contiguous [B, H, N, D] strides for q (and k, v) with distinct seeds.
  void set_contiguous(uint64_t seed);
  // One row's O (head_dim values) and lse, in double, from the header's
  // contract. Returns the number of visible keys.
  int64_t reference_row(int64_t b, int64_t h, int64_t i, double* o, double* lse) const;
};

// The result of checking sampled rows.
struct RowCheck {
  int64_t rows = 0;
  int64_t unwritten = 0;  // non-finite o elements (the output was poisoned with NaN)
  double o_rel_l2 = 0.0;  // over the sampled rows
  double o_max_abs = 0.0;
  double lse_max_err = 0.0;  // |lse - ref| / max(1, |ref|); inf when -inf disagrees
  std::string worst;         // where the largest o error is
};

// Runs `hp` on device buffers and compares the rows (b, h, i) listed in
// `rows` (flattened triples) with the float64 reference, computing the
// references on several host threads. o_host: the whole o copied back,
// contiguous [B, H, Nq, D] in the dtype; lse_host: [B, H, Nq] or empty.
RowCheck check_rows(const HashedProblem& hp, const std::vector<int64_t>& rows,
                    const std::vector<unsigned char>& o_host, const std::vector<float>& lse_host);

// Sample rows of a problem: first, last, block edges and random ones for a
// few heads; `count` random rows per head.
std::vector<int64_t> sample_rows(const HashedProblem& hp, int count, uint64_t seed);

}  // namespace fmha_gpu_test
