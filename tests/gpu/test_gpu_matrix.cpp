// Every registered CUDA kernel, forced by name, over the same case matrix as
// the CPU tests (tests/common/attention_case.h), against the float64
// reference, on fresh random data with poisoned outputs; plus the automatic
// choice of a CUDA handle. A case a kernel does not support must come back
// FMHA_ERROR_UNSUPPORTED (nothing else) and is then skipped for it.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <string>

#include "common/case_runner.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaMemory;
using fmha_gpu_test::GpuHandle;

struct Tally {
  int ran = 0;
  int unsupported = 0;
  int failed = 0;
};

// Runs `c` on every CUDA kernel (default splits and 4 splits) and on the
// automatic choice; tallies per kernel.
void run_everywhere(fmha_handle h, CudaMemory& mem, const fmha_test::AttentionCase& c,
                    std::map<std::string, Tally>* tally) {
  const fmha_test::PreparedCase pc(c);
  std::vector<std::string> kernels = fmha_gpu_test::cuda_kernel_names();
  kernels.emplace_back("");  // automatic
  for (const std::string& name : kernels) {
    for (int32_t splits : {0, 4}) {
      fmha_test::RunOptions opt;
      opt.kernel = name.empty() ? nullptr : name.c_str();
      opt.num_splits = splits;
      const fmha_test::CaseResult r = pc.run(h, mem, opt);
      Tally& t = (*tally)[name.empty() ? "(automatic)" : name];
      if (r.unsupported() && !name.empty()) {
        // A forced kernel may decline, but only with UNSUPPORTED and a reason.
        CHECK_MESSAGE(!r.message.empty(), r.report());
        ++t.unsupported;
        continue;
      }
      // The automatic choice must always find a CUDA kernel: cuda_generic
      // covers every case of the matrix (head_dim <= 256).
      const bool ok = r.ok();
      CHECK_MESSAGE(ok, "num_splits=" << splits << "\n" << r.report());
      ++(ok ? t.ran : t.failed);
    }
  }
}

}  // namespace

TEST_CASE("every CUDA kernel over the case matrix") {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  const size_t stride = static_cast<size_t>(fmha_gpu_test::quick_stride());
  REQUIRE_FALSE(fmha_gpu_test::cuda_kernel_names().empty());
  size_t group_index = 0;
  for (const fmha_test::CaseGroup& group : fmha_test::case_matrix()) {
    ++group_index;
    std::map<std::string, Tally> tally;
    int cases = 0;
    for (size_t n = 0; n < group.cases.size(); ++n) {
      if ((n + group_index) % stride != 0) continue;  // quick mode (compute-sanitizer): a sample
      run_everywhere(h.get(), mem, group.cases[n], &tally);
      ++cases;
    }
    std::string line = std::string(group.name) + ": " + std::to_string(cases) + " cases;";
    for (const auto& [name, t] : tally) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " %s ran %d, unsupported %d, failed %d;", name.c_str(), t.ran,
                    t.unsupported, t.failed);
      line += buf;
    }
    MESSAGE(line);
  }
}

TEST_CASE("more batch x heads than a grid dimension holds") {
  // 3 x 24000 = 72000 (batch, head) pairs > 65535, GQA 3:1, short rows.
  if (fmha_gpu_test::quick_mode()) return;
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  CudaMemory mem;
  fmha_test::AttentionCase c;
  c.dtype = FMHA_DTYPE_F16;
  c.batch = 3;
  c.heads_q = 24000;
  c.heads_kv = 8000;
  c.seq_q = 3;
  c.seq_k = 70;
  c.head_dim = 32;
  c.mask_flags = FMHA_MASK_CAUSAL;
  const fmha_test::PreparedCase pc(c);
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    fmha_test::RunOptions opt;
    opt.kernel = name.c_str();
    const fmha_test::CaseResult r = pc.run(h.get(), mem, opt);
    if (r.unsupported()) continue;
    CHECK_MESSAGE(r.ok(), r.report());
  }
}
