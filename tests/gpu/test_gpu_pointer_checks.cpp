// The memory-location check on the fast host path: tensors carved from one
// allocation (looked up once per call, core/pointer_memo.h) are still
// validated one by one and computed right; pinned and managed memory keep
// their kinds; and nothing is remembered across calls, so a freed
// allocation is refused on the next call. The memo itself (bounds, scopes,
// threads) is tests/internal/test_pointer_memo.cpp.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::GpuHandle;
using fmha_gpu_test::HashedOperand;
using fmha_gpu_test::HashedProblem;

#define REQUIRE_CUDA(expr)                                                                      \
  do {                                                                                          \
    const cudaError_t err_ = (expr);                                                            \
    REQUIRE_MESSAGE(err_ == cudaSuccess, #expr ": " << std::string(cudaGetErrorString(err_))); \
  } while (0)

// GQA decode with lse against 600 keys: small, and long enough that the
// CUDA kernels split the keys when asked (a workspace).
HashedProblem small_problem(uint64_t seed) {
  HashedProblem hp;
  hp.dtype = FMHA_DTYPE_F16;
  hp.batch = 1;
  hp.heads_q = 4;
  hp.heads_kv = 2;
  hp.seq_q = 3;
  hp.seq_k = 600;
  hp.head_dim = 64;
  hp.mask_flags = FMHA_MASK_CAUSAL;
  hp.set_contiguous(seed);
  return hp;
}

size_t round_up(size_t x) { return (x + 255) / 256 * 256; }

fmha_tensor tensor_of(void* data, const HashedProblem& hp, const HashedOperand& op) {
  fmha_tensor t{};
  t.data = data;
  t.dtype = hp.dtype;
  std::memcpy(t.dims, op.dims, sizeof t.dims);
  std::memcpy(t.strides, op.strides, sizeof t.strides);
  return t;
}

// q, k, v, o, lse and the workspace at 256-byte offsets of one region of
// `bytes()` bytes (a cudaMalloc allocation, as a caching allocator's segment
// holds them).
struct Carved {
  HashedProblem hp;
  size_t q_off = 0, k_off, v_off, o_off, lse_off, ws_off, ws_bytes, end;
  explicit Carved(const HashedProblem& p, size_t workspace) : hp(p), ws_bytes(workspace) {
    const size_t e = fmha_test::dtype_bytes(hp.dtype);
    k_off = q_off + round_up(static_cast<size_t>(hp.q.extent()) * e);
    v_off = k_off + round_up(static_cast<size_t>(hp.k.extent()) * e);
    o_off = v_off + round_up(static_cast<size_t>(hp.v.extent()) * e);
    lse_off = o_off + round_up(static_cast<size_t>(hp.q.extent()) * e);
    ws_off = lse_off + round_up(static_cast<size_t>(rows()) * sizeof(float));
    end = ws_off + round_up(ws_bytes);
  }
  int64_t rows() const { return hp.batch * hp.heads_q * hp.seq_q; }
  size_t o_bytes() const { return static_cast<size_t>(hp.q.extent()) * fmha_test::dtype_bytes(hp.dtype); }
  fmha_forward_params params(unsigned char* base) const {
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    p.q = tensor_of(base + q_off, hp, hp.q);
    p.k = tensor_of(base + k_off, hp, hp.k);
    p.v = tensor_of(base + v_off, hp, hp.v);
    p.o = tensor_of(base + o_off, hp, hp.q);
    p.lse = reinterpret_cast<float*>(base + lse_off);
    p.mask_flags = hp.mask_flags;
    return p;
  }
  // Fills q, k, v with their hashed values and poisons o and lse (0xff).
  void fill(unsigned char* base) const {
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(base + q_off, hp.dtype, hp.q.extent(), hp.q.seed, nullptr));
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(base + k_off, hp.dtype, hp.k.extent(), hp.k.seed, nullptr));
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(base + v_off, hp.dtype, hp.v.extent(), hp.v.seed, nullptr));
    REQUIRE_CUDA(cudaDeviceSynchronize());
    const size_t poison = lse_off - o_off + static_cast<size_t>(rows()) * sizeof(float);
    cudaPointerAttributes attr{};
    REQUIRE_CUDA(cudaPointerGetAttributes(&attr, base));
    if (attr.type == cudaMemoryTypeHost)
      std::memset(base + o_off, 0xff, poison);  // pinned host memory
    else
      REQUIRE_CUDA(cudaMemset(base + o_off, 0xff, poison));
    REQUIRE_CUDA(cudaDeviceSynchronize());
  }
  // Every row of o and lse against the float64 reference.
  void check(const unsigned char* base, const char* what) const {
    std::vector<unsigned char> o(o_bytes());
    std::vector<float> lse(static_cast<size_t>(rows()));
    REQUIRE_CUDA(cudaDeviceSynchronize());
    REQUIRE_CUDA(cudaMemcpy(o.data(), base + o_off, o.size(), cudaMemcpyDefault));
    REQUIRE_CUDA(cudaMemcpy(lse.data(), base + lse_off, lse.size() * sizeof(float), cudaMemcpyDefault));
    std::vector<int64_t> all;
    for (int64_t h = 0; h < hp.heads_q; ++h)
      for (int64_t i = 0; i < hp.seq_q; ++i) all.insert(all.end(), {0, h, i});
    const fmha_gpu_test::RowCheck rc = fmha_gpu_test::check_rows(hp, all, o, lse);
    const fmha_test::Tolerance tol = fmha_test::tolerance_for(hp.dtype);
    INFO(what << ": rel-L2 " << rc.o_rel_l2 << ", worst " << rc.worst << ", lse err " << rc.lse_max_err);
    CHECK(rc.unwritten == 0);
    CHECK(rc.o_rel_l2 <= tol.o_rel_l2);
    CHECK(rc.lse_max_err <= tol.lse_abs);
  }
};

bool message_has(const char* what) { return std::string(fmha_last_error_message()).find(what) != std::string::npos; }

// All bytes of a host buffer still 0xff.
bool poisoned(const std::vector<unsigned char>& b) {
  for (unsigned char c : b)
    if (c != 0xff) return false;
  return true;
}

}  // namespace

TEST_CASE("tensors and workspace carved from one allocation are each checked, and a freed one is refused") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  std::vector<std::string> kernels = fmha_gpu_test::cuda_kernel_names();
  kernels.insert(kernels.begin(), "");  // automatic choice first
  int ran = 0, with_workspace = 0;
  for (const std::string& name : kernels) {
    const HashedProblem hp = small_problem(41);
    // The workspace a 4-way split needs (a first query on separate buffers).
    Carved probe(hp, 0);
    unsigned char* base = nullptr;
    REQUIRE_CUDA(cudaMalloc(&base, probe.end));
    fmha_forward_params p = probe.params(base);
    p.kernel = name.empty() ? nullptr : name.c_str();
    p.num_splits = name.empty() ? 0 : 4;
    size_t need = 0;
    const fmha_status s = fmha_forward_workspace_size(h.get(), &p, &need);
    REQUIRE_CUDA(cudaFree(base));
    if (s == FMHA_ERROR_UNSUPPORTED) continue;
    REQUIRE(s == FMHA_SUCCESS);
    INFO((name.empty() ? "automatic" : name) << ", workspace " << need);

    const Carved c(hp, need);
    REQUIRE_CUDA(cudaMalloc(&base, c.end));
    c.fill(base);
    p = c.params(base);
    p.kernel = name.empty() ? nullptr : name.c_str();
    p.num_splits = name.empty() ? 0 : 4;
    void* ws = need > 0 ? base + c.ws_off : nullptr;
    REQUIRE(fmha_forward_workspace_size(h.get(), &p, &need) == FMHA_SUCCESS);
    CHECK(fmha_forward(h.get(), &p, ws, need) == FMHA_SUCCESS);
    c.check(base, "one allocation");
    ++ran;

    // After q, k and v came from the allocation, a host o, a host lse and a
    // host workspace are still refused, each by name, with nothing written.
    c.fill(base);
    std::vector<unsigned char> host(c.o_bytes() + 4096, 0xff);
    fmha_forward_params bad = p;
    bad.o.data = host.data();
    CHECK(fmha_forward_workspace_size(h.get(), &bad, &need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(fmha_forward(h.get(), &bad, ws, need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("o.data"));
    bad = p;
    bad.lse = reinterpret_cast<float*>(host.data());
    CHECK(fmha_forward(h.get(), &bad, ws, need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("lse"));
    if (need > 0) {
      ++with_workspace;
      std::vector<unsigned char> host_ws(need + 16);
      void* hws = host_ws.data() + (16 - reinterpret_cast<uintptr_t>(host_ws.data()) % 16) % 16;
      CHECK(fmha_forward(h.get(), &p, hws, need) == FMHA_ERROR_INVALID_ARGUMENT);
      CHECK(message_has("workspace"));
    }
    REQUIRE_CUDA(cudaDeviceSynchronize());
    CHECK(poisoned(host));
    std::vector<unsigned char> o_now(c.o_bytes());
    REQUIRE_CUDA(cudaMemcpy(o_now.data(), base + c.o_off, o_now.size(), cudaMemcpyDeviceToHost));
    CHECK(poisoned(o_now));

    // The same params after the allocation is freed: the earlier calls'
    // lookups must not vouch for it (the address is no CUDA memory now).
    REQUIRE_CUDA(cudaFree(base));
    CHECK(fmha_forward_workspace_size(h.get(), &p, &need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(fmha_forward(h.get(), &p, ws, need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(message_has("host memory"));
    REQUIRE_CUDA(cudaDeviceSynchronize());
  }
  CHECK(ran >= 2);  // automatic and at least one forced kernel
  CHECK(with_workspace >= 1);
}

TEST_CASE("pinned and managed memory keep their kinds: accepted by CUDA and CPU handles") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  const HashedProblem hp = small_problem(43);
  const Carved c(hp, 0);
  // One layout, three homes: device (reference point), pinned host, managed.
  unsigned char* pinned = nullptr;
  unsigned char* managed = nullptr;
  REQUIRE_CUDA(cudaMallocHost(&pinned, c.end));
  REQUIRE_CUDA(cudaMallocManaged(&managed, c.end));
  for (unsigned char* base : {pinned, managed}) {
    INFO((base == pinned ? "pinned" : "managed"));
    c.fill(base);
    fmha_forward_params p = c.params(base);
    size_t need = 0;
    REQUIRE(fmha_forward_workspace_size(h.get(), &p, &need) == FMHA_SUCCESS);
    REQUIRE(need == 0);  // the automatic choice of this shape does not split
    CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_SUCCESS);
    c.check(base, "CUDA handle");

    // A CPU handle (created after a CUDA handle, so it checks pointers too)
    // reads pinned and managed memory as well.
    fmha_handle cpu = nullptr;
    REQUIRE(fmha_create(&cpu, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    c.fill(base);
    REQUIRE(fmha_forward_workspace_size(cpu, &p, &need) == FMHA_SUCCESS);
    std::vector<unsigned char> ws(need + 64);
    void* wsp = ws.data() + (64 - reinterpret_cast<uintptr_t>(ws.data()) % 64) % 64;
    CHECK(fmha_forward(cpu, &p, need > 0 ? wsp : nullptr, need) == FMHA_SUCCESS);
    c.check(base, "CPU handle");
    fmha_destroy(cpu);
  }
  REQUIRE_CUDA(cudaFreeHost(pinned));
  REQUIRE_CUDA(cudaFree(managed));
}

TEST_CASE("a CPU handle refuses device memory carved from one allocation, each tensor by name") {
  GpuHandle h;  // the CUDA runtime in use, so CPU handles check pointers
  REQUIRE(h.status() == FMHA_SUCCESS);
  const HashedProblem hp = small_problem(47);
  const Carved c(hp, 0);
  unsigned char* base = nullptr;
  REQUIRE_CUDA(cudaMalloc(&base, c.end));
  c.fill(base);
  std::vector<unsigned char> host(c.end, 0);
  fmha_handle cpu = nullptr;
  REQUIRE(fmha_create(&cpu, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  // Each operand in turn on the device, the others on the host.
  const char* names[] = {"q.data", "k.data", "v.data", "o.data", "lse"};
  for (int which = 0; which < 5; ++which) {
    fmha_forward_params p = c.params(host.data());
    const fmha_forward_params d = c.params(base);
    switch (which) {
      case 0: p.q = d.q; break;
      case 1: p.k = d.k; break;
      case 2: p.v = d.v; break;
      case 3: p.o = d.o; break;
      default: p.lse = d.lse; break;
    }
    INFO(names[which]);
    size_t need = 0;
    CHECK(fmha_forward_workspace_size(cpu, &p, &need) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(message_has(names[which]));
    CHECK(message_has("CUDA device memory"));
  }
  fmha_destroy(cpu);
  REQUIRE_CUDA(cudaFree(base));
}

TEST_CASE("memory of another device is refused after the call looked up the handle's device") {
  int count = 0;
  REQUIRE_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) {
    MESSAGE("skipped: one CUDA device (needs two to put k on another device)");
    return;
  }
  GpuHandle h;  // device 0
  REQUIRE(h.status() == FMHA_SUCCESS);
  const HashedProblem hp = small_problem(53);
  const Carved c(hp, 0);
  unsigned char* base = nullptr;
  unsigned char* other = nullptr;
  REQUIRE_CUDA(cudaSetDevice(0));
  REQUIRE_CUDA(cudaMalloc(&base, c.end));
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaMalloc(&other, c.end));
  REQUIRE_CUDA(cudaSetDevice(0));
  fmha_forward_params p = c.params(base);
  p.k.data = other + c.k_off;  // q first (device 0, remembered), then k on device 1
  size_t need = 0;
  CHECK(fmha_forward_workspace_size(h.get(), &p, &need) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(message_has("k.data"));
  CHECK(message_has("lives on CUDA device 1"));
  REQUIRE_CUDA(cudaFree(base));
  REQUIRE_CUDA(cudaSetDevice(1));
  REQUIRE_CUDA(cudaFree(other));
  REQUIRE_CUDA(cudaSetDevice(0));
}
