// The CUDA side of the API contract: bitwise determinism, the handle's
// stream, CUDA-graph capture, memory on the wrong device, the workspace,
// unsupported problems and the explain text.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/case_runner.h"
#include "common/numeric_types.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;

#define REQUIRE_CUDA(expr)                                                  \
  do {                                                                      \
    const cudaError_t err_ = (expr);                                        \
    REQUIRE_MESSAGE(err_ == cudaSuccess, #expr ": " << std::string(cudaGetErrorString(err_))); \
  } while (0)

// A small contiguous problem on device buffers: q [B, Hq, Nq, D], k and v
// [B, Hk, Nk, D] filled with hashed values, o and lse poisoned with 0xff
// bytes (NaN in every dtype).
struct DeviceProblem {
  fmha_gpu_test::HashedProblem hp;
  CudaBuffer q, k, v, o, lse;
  fmha_forward_params params;

  static size_t bytes(const fmha_gpu_test::HashedOperand& op, fmha_dtype t) {
    return static_cast<size_t>(op.extent()) * fmha_test::dtype_bytes(t);
  }
  explicit DeviceProblem(const fmha_gpu_test::HashedProblem& p)
      : hp(p),
        q(bytes(p.q, p.dtype)),
        k(bytes(p.k, p.dtype)),
        v(bytes(p.v, p.dtype)),
        o(bytes(p.q, p.dtype)),
        lse(static_cast<size_t>(p.batch * p.heads_q * p.seq_q) * sizeof(float)) {
    REQUIRE((q.ok() && k.ok() && v.ok() && o.ok() && lse.ok()));
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(q.get(), hp.dtype, hp.q.extent(), hp.q.seed, nullptr));
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(k.get(), hp.dtype, hp.k.extent(), hp.k.seed, nullptr));
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(v.get(), hp.dtype, hp.v.extent(), hp.v.seed, nullptr));
    poison();
    fmha_forward_params_init(&params);
    auto tensor = [&](void* data, const fmha_gpu_test::HashedOperand& op) {
      fmha_tensor t{};
      t.data = data;
      t.dtype = hp.dtype;
      std::memcpy(t.dims, op.dims, sizeof t.dims);
      std::memcpy(t.strides, op.strides, sizeof t.strides);
      return t;
    };
    params.q = tensor(q.get(), hp.q);
    params.k = tensor(k.get(), hp.k);
    params.v = tensor(v.get(), hp.v);
    params.o = tensor(o.get(), hp.q);
    params.lse = static_cast<float*>(lse.get());
    params.mask_flags = hp.mask_flags;
  }
  void poison() {
    REQUIRE_CUDA(cudaMemset(o.get(), 0xff, o.bytes()));
    REQUIRE_CUDA(cudaMemset(lse.get(), 0xff, lse.bytes()));
    REQUIRE_CUDA(cudaDeviceSynchronize());
  }
  std::vector<unsigned char> o_host() const {
    std::vector<unsigned char> out(o.bytes());
    REQUIRE_CUDA(cudaMemcpy(out.data(), o.get(), o.bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<float> lse_host() const {
    std::vector<float> out(lse.bytes() / sizeof(float));
    REQUIRE_CUDA(cudaMemcpy(out.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
  // True when o and lse still hold nothing but 0xff bytes.
  bool untouched() const {
    for (unsigned char c : o_host())
      if (c != 0xff) return false;
    const std::vector<float> l = lse_host();
    const std::vector<unsigned char> raw(reinterpret_cast<const unsigned char*>(l.data()),
                                         reinterpret_cast<const unsigned char*>(l.data() + l.size()));
    for (unsigned char c : raw)
      if (c != 0xff) return false;
    return true;
  }
  // Every row against the float64 reference (the problems here are small).
  void check_all_rows(const char* what) const {
    std::vector<int64_t> rows;
    for (int64_t b = 0; b < hp.batch; ++b)
      for (int64_t h = 0; h < hp.heads_q; ++h)
        for (int64_t i = 0; i < hp.seq_q; ++i) rows.insert(rows.end(), {b, h, i});
    const fmha_gpu_test::RowCheck rc = fmha_gpu_test::check_rows(hp, rows, o_host(), lse_host());
    const fmha_test::Tolerance tol = fmha_test::tolerance_for(hp.dtype);
    INFO(std::string(what) << ": rel-L2 " << rc.o_rel_l2 << ", worst " << rc.worst << ", lse err " << rc.lse_max_err);
    CHECK(rc.unwritten == 0);
    CHECK(rc.o_rel_l2 <= tol.o_rel_l2);
    CHECK(rc.lse_max_err <= tol.lse_abs);
  }
};

// Decode-like GQA problem: one query row per head against 3000 keys, so
// cuda_generic splits the keys (workspace > 0) by default.
fmha_gpu_test::HashedProblem decode_problem(uint64_t seed) {
  fmha_gpu_test::HashedProblem hp;
  hp.dtype = FMHA_DTYPE_BF16;
  hp.batch = 2;
  hp.heads_q = 8;
  hp.heads_kv = 2;
  hp.seq_q = 1;
  hp.seq_k = 3000;
  hp.head_dim = 128;
  hp.set_contiguous(seed);
  return hp;
}

fmha_gpu_test::HashedProblem prefill_problem(uint64_t seed) {
  fmha_gpu_test::HashedProblem hp;
  hp.dtype = FMHA_DTYPE_F16;
  hp.batch = 1;
  hp.heads_q = 4;
  hp.heads_kv = 4;
  hp.seq_q = 300;
  hp.seq_k = 700;
  hp.head_dim = 64;
  hp.mask_flags = FMHA_MASK_CAUSAL;
  hp.set_contiguous(seed);
  return hp;
}

}  // namespace

TEST_CASE("two runs are bitwise equal") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  fmha_test::AttentionCase c;
  c.dtype = FMHA_DTYPE_F16;
  c.batch = 2;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seq_q = 200;
  c.seq_k = 333;
  c.head_dim = 128;
  c.mask_flags = FMHA_MASK_CAUSAL;
  const fmha_test::PreparedCase pc(c);
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    for (int32_t splits : {1, 3}) {
      fmha_test::RunOptions opt;
      opt.kernel = name.c_str();
      opt.num_splits = splits;
      opt.keep_outputs = true;
      const fmha_test::CaseResult a = pc.run(h.get(), mem, opt);
      const fmha_test::CaseResult b = pc.run(h.get(), mem, opt);
      if (a.unsupported()) continue;
      INFO(name << " num_splits=" << splits);
      CHECK_MESSAGE(a.ok(), a.report());
      CHECK(a.o_bytes == b.o_bytes);
      CHECK(a.lse_values.size() == b.lse_values.size());
      CHECK(std::memcmp(a.lse_values.data(), b.lse_values.data(), a.lse_values.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("cuda_sm90_ws: persistent CTAs over several work tiles each, every head dim, partial key tiles") {
  // More work tiles than the H200 has SMs (132), so each persistent CTA takes
  // two or more in turn: what runs across work tiles (the work tile the
  // producer publishes to the consumers, the turn ring, the K/V ring, the L2
  // bands of GQA groups) is exercised; key counts that leave a partial last
  // key tile for every tile width (80 at D=256, 128). Forced cuda_sm90_ws,
  // one split and the automatic split count; a build or device without it
  // declines.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  struct Shape {
    fmha_dtype dtype;
    int64_t heads_q, heads_kv, seq_q, seq_k, head_dim;
    uint32_t mask;
  };
  const Shape shapes[] = {
      {FMHA_DTYPE_F16, 72, 18, 300, 300, 128, FMHA_MASK_CAUSAL},  // 216 tiles of 128 rows
      {FMHA_DTYPE_BF16, 72, 18, 300, 333, 128, FMHA_MASK_NONE},
      {FMHA_DTYPE_F16, 48, 12, 260, 260, 256, FMHA_MASK_CAUSAL},  // 144 tiles
      {FMHA_DTYPE_F16, 48, 48, 260, 301, 256, FMHA_MASK_NONE},
      {FMHA_DTYPE_F16, 64, 16, 390, 390, 64, FMHA_MASK_CAUSAL},  // 192 tiles of 192 rows
  };
  int ran = 0;
  for (const Shape& sh : shapes) {
    fmha_test::AttentionCase c;
    c.dtype = sh.dtype;
    c.heads_q = sh.heads_q;
    c.heads_kv = sh.heads_kv;
    c.seq_q = sh.seq_q;
    c.seq_k = sh.seq_k;
    c.head_dim = sh.head_dim;
    c.mask_flags = sh.mask;
    const fmha_test::PreparedCase pc(c);
    for (int32_t splits : {0, 1}) {
      fmha_test::RunOptions opt;
      opt.kernel = "cuda_sm90_ws";
      opt.num_splits = splits;
      const fmha_test::CaseResult r = pc.run(h.get(), mem, opt);
      if (r.unsupported()) continue;
      INFO("num_splits=" << splits);
      CHECK_MESSAGE(r.ok(), r.report());
      ++ran;
    }
  }
  MESSAGE("cuda_sm90_ws ran " << ran << " of 10");
}

TEST_CASE("the handle's stream is used, and fmha_forward captures into a CUDA graph") {
  // The forward is captured (global mode) on a non-blocking stream given to
  // fmha_set_stream: work on any other stream would fail the capture. The
  // output must stay poisoned until the graph is launched, then be right;
  // a second launch after new q data must give the new answer.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE(fmha_set_stream(h.get(), stream) == FMHA_SUCCESS);
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    for (const fmha_gpu_test::HashedProblem& hp : {decode_problem(7), prefill_problem(8)}) {
      DeviceProblem dp(hp);
      dp.params.kernel = name.c_str();
      size_t ws_bytes = 0;
      const fmha_status qs = fmha_forward_workspace_size(h.get(), &dp.params, &ws_bytes);
      if (qs == FMHA_ERROR_UNSUPPORTED) continue;
      REQUIRE(qs == FMHA_SUCCESS);
      INFO(name << ", seq_q=" << hp.seq_q << ", workspace " << ws_bytes << " bytes");
      CudaBuffer ws(ws_bytes);
      REQUIRE(ws.ok());

      cudaGraph_t graph = nullptr;
      REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      const fmha_status s = fmha_forward(h.get(), &dp.params, ws.get(), ws_bytes);
      const std::string msg = fmha_last_error_message();
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      REQUIRE_MESSAGE(s == FMHA_SUCCESS, msg);
      REQUIRE_CUDA(end);
      size_t nodes = 0;
      REQUIRE_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
      CHECK(nodes >= 1);
      REQUIRE_CUDA(cudaDeviceSynchronize());
      CHECK_MESSAGE(dp.untouched(), "o or lse was written during capture: not on the handle's stream");

      cudaGraphExec_t exec = nullptr;
      REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
      REQUIRE_CUDA(cudaStreamSynchronize(stream));
      dp.check_all_rows("graph launch");

      // Replay with new queries: the graph reads the buffers afresh.
      dp.hp.q.seed ^= 0xabcdef;
      REQUIRE_CUDA(fmha_gpu_test::fill_hashed(dp.q.get(), hp.dtype, hp.q.extent(), dp.hp.q.seed, nullptr));
      dp.poison();
      REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
      REQUIRE_CUDA(cudaStreamSynchronize(stream));
      dp.check_all_rows("graph replay with new q");

      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  REQUIRE(fmha_set_stream(h.get(), nullptr) == FMHA_SUCCESS);
  cudaStreamDestroy(stream);
}

TEST_CASE("back-to-back split decode steps on one stream and one workspace each get their own answer") {
  // A split decode step's forward writes its partials to the workspace and
  // the combine (on sm_90 a programmatic dependent launch of the forward,
  // which may start before the forward ends) reads them; the next step's
  // forward, queued right behind it on the same stream into the same
  // workspace, must not overwrite them before that combine has read them.
  // Four steps of different K/V lengths (so different split ranges) back to
  // back without a sync, every row of each checked; then the four captured
  // in one graph, replayed twice.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE(fmha_set_stream(h.get(), stream) == FMHA_SUCCESS);
  constexpr int kSteps = 4;
  std::vector<std::unique_ptr<DeviceProblem>> steps;
  for (int i = 0; i < kSteps; ++i) {
    fmha_gpu_test::HashedProblem hp = decode_problem(40 + i);
    hp.seq_k = 3000 + 1700 * i;
    hp.set_contiguous(40 + i);
    steps.push_back(std::make_unique<DeviceProblem>(hp));
  }
  int ran = 0;
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    for (int32_t splits : {0, 8}) {
      size_t ws_bytes = 0;
      bool supported = true;
      for (auto& dp : steps) {
        dp->params.kernel = name.c_str();
        dp->params.num_splits = splits;
        size_t n = 0;
        const fmha_status qs = fmha_forward_workspace_size(h.get(), &dp->params, &n);
        if (qs == FMHA_ERROR_UNSUPPORTED) supported = false;
        else REQUIRE(qs == FMHA_SUCCESS);
        ws_bytes = n > ws_bytes ? n : ws_bytes;
      }
      if (!supported) continue;
      INFO(name << ", num_splits=" << splits << ", workspace " << ws_bytes << " bytes");
      CudaBuffer ws(ws_bytes);
      REQUIRE(ws.ok());
      for (auto& dp : steps) dp->poison();
      for (auto& dp : steps) REQUIRE(fmha_forward(h.get(), &dp->params, ws.get(), ws_bytes) == FMHA_SUCCESS);
      REQUIRE_CUDA(cudaStreamSynchronize(stream));
      for (auto& dp : steps) dp->check_all_rows("back to back");

      cudaGraph_t graph = nullptr;
      REQUIRE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      fmha_status s = FMHA_SUCCESS;
      for (auto& dp : steps)
        if (s == FMHA_SUCCESS) s = fmha_forward(h.get(), &dp->params, ws.get(), ws_bytes);
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      REQUIRE(s == FMHA_SUCCESS);
      REQUIRE_CUDA(end);
      cudaGraphExec_t exec = nullptr;
      REQUIRE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int replay = 0; replay < 2; ++replay) {
        for (auto& dp : steps) dp->poison();
        REQUIRE_CUDA(cudaGraphLaunch(exec, stream));
        REQUIRE_CUDA(cudaStreamSynchronize(stream));
        for (auto& dp : steps) dp->check_all_rows("graph of four steps");
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      ++ran;
    }
  }
  CHECK(ran > 0);
  REQUIRE(fmha_set_stream(h.get(), nullptr) == FMHA_SUCCESS);
  cudaStreamDestroy(stream);
}

TEST_CASE("the forward waits on the handle's stream") {
  // Work queued before the forward on the same stream (a copy into q) must
  // be seen by it: the forward is ordered after it, so the output matches
  // the copied data, not what q held before.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  cudaStream_t stream = nullptr;
  REQUIRE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  REQUIRE(fmha_set_stream(h.get(), stream) == FMHA_SUCCESS);
  fmha_gpu_test::HashedProblem hp = prefill_problem(21);
  DeviceProblem dp(hp);
  fmha_gpu_test::HashedProblem other = hp;
  other.q.seed ^= 0x1234;
  CudaBuffer q2(dp.q.bytes());
  REQUIRE(q2.ok());
  REQUIRE_CUDA(fmha_gpu_test::fill_hashed(q2.get(), hp.dtype, hp.q.extent(), other.q.seed, nullptr));
  REQUIRE_CUDA(cudaDeviceSynchronize());
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    dp.params.kernel = name.c_str();
    size_t ws_bytes = 0;
    if (fmha_forward_workspace_size(h.get(), &dp.params, &ws_bytes) != FMHA_SUCCESS) continue;
    CudaBuffer ws(ws_bytes);
    dp.poison();
    REQUIRE_CUDA(fmha_gpu_test::fill_hashed(dp.q.get(), hp.dtype, hp.q.extent(), hp.q.seed, nullptr));
    REQUIRE_CUDA(cudaDeviceSynchronize());
    // A large copy queued first on the stream, then the forward.
    REQUIRE_CUDA(cudaMemcpyAsync(dp.q.get(), q2.get(), dp.q.bytes(), cudaMemcpyDeviceToDevice, stream));
    REQUIRE(fmha_forward(h.get(), &dp.params, ws.get(), ws_bytes) == FMHA_SUCCESS);
    REQUIRE_CUDA(cudaStreamSynchronize(stream));
    INFO(name);
    dp.hp.q.seed = other.q.seed;  // what q held when the forward ran
    dp.check_all_rows("after a copy queued on the stream");
    dp.hp.q.seed = hp.q.seed;
  }
  REQUIRE(fmha_set_stream(h.get(), nullptr) == FMHA_SUCCESS);
  cudaStreamDestroy(stream);
}

TEST_CASE("host memory on a CUDA handle and device memory on a CPU handle are rejected") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  DeviceProblem dp(prefill_problem(3));
  std::vector<unsigned char> host_q(dp.q.bytes(), 0);

  // CUDA handle, q in (pageable) host memory: nothing may be written.
  fmha_forward_params p = dp.params;
  p.q.data = host_q.data();
  CHECK(fmha_forward(h.get(), &p, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  MESSAGE("CUDA handle, host q: " << std::string(fmha_last_error_message()));
  CHECK(std::string(fmha_last_error_message()).find("q.data") != std::string::npos);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  CHECK(dp.untouched());

  // CPU handle, q in device memory, o and lse in poisoned host memory.
  fmha_handle cpu = nullptr;
  REQUIRE(fmha_create(&cpu, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  std::vector<unsigned char> host_o(dp.o.bytes(), 0xff);
  std::vector<float> host_lse(dp.lse.bytes() / sizeof(float));
  std::memset(host_lse.data(), 0xff, dp.lse.bytes());
  std::vector<unsigned char> host_k(dp.k.bytes(), 0), host_v(dp.v.bytes(), 0);
  fmha_forward_params pc = dp.params;  // q stays on the device
  pc.k.data = host_k.data();
  pc.v.data = host_v.data();
  pc.o.data = host_o.data();
  pc.lse = host_lse.data();
  CHECK(fmha_forward(cpu, &pc, nullptr, 0) == FMHA_ERROR_INVALID_ARGUMENT);
  MESSAGE("CPU handle, device q: " << std::string(fmha_last_error_message()));
  for (unsigned char c : host_o) REQUIRE(c == 0xff);
  for (float x : host_lse) REQUIRE(std::isnan(x));
  fmha_destroy(cpu);
}

TEST_CASE("a workspace smaller than asked for is refused") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  int kernels_with_workspace = 0;
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    DeviceProblem dp(decode_problem(11));
    dp.params.kernel = name.c_str();
    dp.params.num_splits = 4;
    size_t need = 0;
    if (fmha_forward_workspace_size(h.get(), &dp.params, &need) != FMHA_SUCCESS) continue;
    if (need == 0) continue;
    ++kernels_with_workspace;
    INFO(name << " needs " << need << " bytes");
    CudaBuffer ws(need);
    REQUIRE(ws.ok());
    CHECK(fmha_forward(h.get(), &dp.params, ws.get(), need - 1) == FMHA_ERROR_WORKSPACE_TOO_SMALL);
    CHECK(fmha_forward(h.get(), &dp.params, nullptr, 0) == FMHA_ERROR_WORKSPACE_TOO_SMALL);
    REQUIRE_CUDA(cudaDeviceSynchronize());
    CHECK(dp.untouched());
    // Poisoned workspace of the right size: the result must not depend on
    // what the workspace held.
    REQUIRE_CUDA(cudaMemset(ws.get(), 0xff, need));
    CHECK(fmha_forward(h.get(), &dp.params, ws.get(), need) == FMHA_SUCCESS);
    REQUIRE_CUDA(cudaDeviceSynchronize());
    dp.check_all_rows("4 splits, poisoned workspace");
  }
  CHECK_MESSAGE(kernels_with_workspace >= 1, "cuda_generic with num_splits=4 should need a workspace");
}

TEST_CASE("problems no CUDA kernel runs are UNSUPPORTED and write nothing") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  fmha_gpu_test::HashedProblem hp = prefill_problem(5);
  hp.head_dim = 320;  // the CPU backend runs it; no CUDA kernel does
  hp.set_contiguous(5);
  DeviceProblem dp(hp);
  CHECK(fmha_forward(h.get(), &dp.params, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
  MESSAGE("head_dim=320, automatic: " << std::string(fmha_last_error_message()));
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    dp.params.kernel = name.c_str();
    CHECK(fmha_forward(h.get(), &dp.params, nullptr, 0) == FMHA_ERROR_UNSUPPORTED);
    MESSAGE("head_dim=320, " << name << ": " << std::string(fmha_last_error_message()));
  }
  REQUIRE_CUDA(cudaDeviceSynchronize());
  CHECK(dp.untouched());
  char buf[1024];
  dp.params.kernel = nullptr;
  CHECK(fmha_forward_explain(h.get(), &dp.params, buf, sizeof buf) == FMHA_ERROR_UNSUPPORTED);
  MESSAGE("explain, head_dim=320:\n" << buf);
}

TEST_CASE("explain names the chosen kernel and why faster ones were passed over") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  fmha_gpu_test::HashedProblem hp = prefill_problem(9);
  // head_dim stride 2: only the general kernel takes it.
  hp.q.strides[3] = 2;
  hp.q.strides[2] = 2 * hp.head_dim;
  hp.q.strides[1] = hp.q.strides[2] * hp.seq_q;
  hp.q.strides[0] = hp.q.strides[1] * hp.heads_q;
  DeviceProblem dp(hp);
  dp.params.o.strides[3] = 1;  // o stays contiguous
  dp.params.o.strides[2] = hp.head_dim;
  dp.params.o.strides[1] = hp.head_dim * hp.seq_q;
  dp.params.o.strides[0] = hp.head_dim * hp.seq_q * hp.heads_q;
  char buf[2048];
  REQUIRE(fmha_forward_explain(h.get(), &dp.params, buf, sizeof buf) == FMHA_SUCCESS);
  const std::string text = buf;
  MESSAGE("explain, q.strides[3]=2:\n" << text);
  CHECK(text.find("chosen: cuda_generic (") != std::string::npos);
  CHECK(text.find("workspace: ") != std::string::npos);
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names())
    if (name == "cuda_sm80_tc") CHECK(text.find("passed over cuda_sm80_tc: needs q.strides[3]=1") != std::string::npos);
  // And it runs, right.
  size_t ws_bytes = 0;
  REQUIRE(fmha_forward_workspace_size(h.get(), &dp.params, &ws_bytes) == FMHA_SUCCESS);
  CudaBuffer ws(ws_bytes);
  REQUIRE(fmha_forward(h.get(), &dp.params, ws.get(), ws_bytes) == FMHA_SUCCESS);
  REQUIRE_CUDA(cudaDeviceSynchronize());
  dp.check_all_rows("q head_dim stride 2");
}

TEST_CASE("on compute capability 9.0 prefill runs cuda_sm90_ws, decode steps aside for cuda_sm80_tc") {
  int major = 0, minor = 0;
  REQUIRE_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  REQUIRE_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  char buf[2048];
  DeviceProblem prefill(prefill_problem(21));
  REQUIRE(fmha_forward_explain(h.get(), &prefill.params, buf, sizeof buf) == FMHA_SUCCESS);
  const std::string prefill_text = buf;
  DeviceProblem decode(decode_problem(22));
  REQUIRE(fmha_forward_explain(h.get(), &decode.params, buf, sizeof buf) == FMHA_SUCCESS);
  const std::string decode_text = buf;
  MESSAGE("prefill:\n" << prefill_text << "decode:\n" << decode_text);
  if (major == 9 && minor == 0) {
    CHECK(prefill_text.find("chosen: cuda_sm90_ws (") != std::string::npos);
    CHECK(decode_text.find("passed over cuda_sm90_ws (it could run): decode-like") != std::string::npos);
    CHECK(decode_text.find("chosen: cuda_sm80_tc (") != std::string::npos);
  } else {
    CHECK(prefill_text.find("passed over cuda_sm90_ws: needs sm_90..sm_90") != std::string::npos);
  }
}
