// Runs one AttentionCase through fmha_forward on any device and checks it
// against the float64 reference.
//
//   fmha_test::HostMemory mem;                       // or the GPU tests' CUDA one
//   fmha_test::PreparedCase pc(c);                   // data + reference, once
//   for (const char* k : {"cpu_tiled", nullptr}) {   // forced, then automatic
//     fmha_test::RunOptions opt;
//     opt.kernel = k;
//     fmha_test::CaseResult r = pc.run(handle, mem, opt);
//     CHECK_MESSAGE(r.ok(), r.report());
//   }
//
// What one run does: copy the inputs to the device; poison o, lse and the
// workspace with NaN bit patterns, with poisoned guard bytes around o and
// lse; query the workspace size, run fmha_forward, synchronize, copy back;
// then check that every element of o and lse was written and is finite,
// the errors against the reference, that fully masked rows are exactly 0
// with lse = -inf, that nothing outside o and lse changed (guards, the gaps
// of a strided o) and that the inputs are unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "common/compare.h"
#include "common/device_memory.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/tolerance.h"
#include "fmha/fmha.h"

namespace fmha_test {

struct RunOptions {
  const char* kernel = nullptr;      // a registered kernel to force; null = automatic
  int32_t num_splits = 0;            // params.num_splits
  size_t extra_workspace_bytes = 0;  // given beyond fmha_forward_workspace_size()
  bool keep_outputs = false;         // fill CaseResult::o_bytes and lse_values
};

struct CaseResult {
  std::string case_name;
  uint64_t base_seed = 0;  // base_seed() the data came from ($FMHA_TEST_SEED)
  uint64_t seed = 0;       // case_seed(case_name, base_seed)
  std::string kernel;  // the forced name, or "(automatic)"
  Tolerance tolerance{};

  // The library's answer: the status of the workspace query or, when that
  // succeeded, of fmha_forward; message is fmha_last_error_message().
  fmha_status status = FMHA_SUCCESS;
  std::string message;
  // Set when the harness itself failed (allocation, copy, synchronize).
  std::string harness_error;
  size_t workspace_bytes = 0;  // as queried

  ErrorStats o;                  // over every element of o
  double o_worst_actual = 0.0;   // o at o.worst, and the reference there
  double o_worst_expected = 0.0;
  bool lse_checked = false;
  LseStats lse;
  double lse_worst_actual = 0.0;
  double lse_worst_expected = 0.0;
  int64_t masked_rows = 0;          // rows that see no key
  int64_t masked_rows_not_zero = 0; // of those, rows whose O is not exactly 0
  int64_t outside_writes = 0;       // guard or gap elements that lost their poison
  bool inputs_unchanged = true;
  double max_abs_logit = 0.0;       // from the reference

  // Raw o buffer (gaps included, guards excluded) and lse, for bitwise
  // comparisons between runs; only with RunOptions::keep_outputs.
  std::vector<unsigned char> o_bytes;
  std::vector<float> lse_values;

  // The kernel declined the problem (forced kernel that does not support it,
  // or no kernel at all): a skip, not a failure, for a forced kernel.
  bool unsupported() const { return status == FMHA_ERROR_UNSUPPORTED && harness_error.empty(); }
  // Ran, and every check passed within `tolerance`.
  bool ok() const;
  // Multi-line description: case, seed, kernel, each check against its
  // bound, and the worst element with its coordinates.
  std::string report() const;

  // Coordinates of o element / lse row, for reports: [b, h, i, d].
  int64_t batch = 0, heads_q = 0, seq_q = 0, head_dim = 0;
};

// A case with its data and reference built once, to run on any number of
// kernels, devices and thread counts.
class PreparedCase {
 public:
  // Builds the host tensors from case_seed(c.name(), base) and the
  // reference. Throws std::invalid_argument when c.invalid_reason() is set.
  explicit PreparedCase(const AttentionCase& c, uint64_t base = base_seed());

  const AttentionCase& spec() const { return case_; }
  uint64_t seed() const { return seed_; }
  const ReferenceResult& reference() const { return ref_; }

  // One run on `handle`, whose device must be where `memory` allocates.
  CaseResult run(fmha_handle handle, DeviceMemory& memory, const RunOptions& options = {}) const;

 private:
  // Where a tensor lives: which input buffer (or the o buffer), the element
  // offset of [0, 0, 0, 0] and the strides.
  struct View {
    int buffer = 0;
    int64_t offset = 0;
    int64_t strides[4] = {0, 0, 0, 0};
  };

  fmha_tensor tensor(const View& v, const int64_t dims[4], void* const* buffers) const;
  void fill_inputs();

  AttentionCase case_;
  uint64_t base_seed_ = 0;
  uint64_t seed_ = 0;
  std::vector<std::vector<unsigned char>> inputs_;  // host input buffers
  View q_, k_, v_, o_;                             // o_.buffer is unused
  int64_t o_elements_ = 0;                         // o buffer size, gaps included
  int64_t q_dims_[4] = {0, 0, 0, 0};
  int64_t kv_dims_[4] = {0, 0, 0, 0};
  ReferenceResult ref_;
};

// PreparedCase(c).run(handle, memory, options).
CaseResult run_case(fmha_handle handle, DeviceMemory& memory, const AttentionCase& c,
                    const RunOptions& options = {});

// Every registered kernel name (fmha_kernel_count / fmha_kernel_name), CPU
// and CUDA alike: forcing one on a handle of the other device gives
// FMHA_ERROR_UNSUPPORTED, i.e. CaseResult::unsupported().
std::vector<std::string> registered_kernels();

}  // namespace fmha_test
