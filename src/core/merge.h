// fmha_merge: the validated description of a merge of partial attention
// results (fmha.h, "merge of partial results"), and its validation.
//
//   lse = log(sum_i exp(lse_i)),   o = sum_i exp(lse_i - lse) * o_i
//
// Like Problem for fmha_forward, a MergeProblem is what every backend reads
// and never an invalid one: build_merge_problem() makes it or fails with a
// specific status and a message naming the field and value at fault.
// Nothing here writes to any tensor.
#pragma once

#include <cstdint>

#include "core/problem.h"
#include "core/validate.h"

namespace fmha {

struct MergeProblem {
  // [batch, heads, seq, head_dim] of every part and of o; batch and seq may
  // be 0 (empty work).
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;

  int32_t num_parts = 0;
  // The caller's arrays, valid for the duration of the call: num_parts
  // views of one dtype (parts_dtype) and their [batch, heads, seq] FP32
  // contiguous lse arrays.
  const fmha_tensor* parts = nullptr;
  const float* const* lse_parts = nullptr;
  fmha_dtype parts_dtype = FMHA_DTYPE_F32;

  // The result: o (o_dtype, strides in elements) and the optional lse.
  void* o = nullptr;
  fmha_dtype o_dtype = FMHA_DTYPE_F32;
  int64_t o_stride[4] = {0, 0, 0, 0};
  float* lse = nullptr;

  int64_t rows() const { return batch * heads * seq; }
  bool empty() const { return rows() == 0; }
};

// Checks params: struct_size, num_parts >= 1, the arrays and every pointer
// in them, dtypes, dims (heads and head_dim >= 1; batch and seq >= 0; all up
// to FMHA_MAX_DIM), strides and extents, the parts' common shape and dtype,
// o's shape, lse alignment and extent, and overlap (exact, core/overlap.h):
// o shares no byte with itself, with a part or with an lse array, except
// that o may be exactly o_parts[0] (same data, dtype and strides); lse
// shares no byte with any operand except that it may be lse_parts[0].
fmha_status build_merge_problem(const fmha_merge_params* params, MergeProblem* out);

// Checks that every pointer the merge reads or writes lives where the
// handle's device can use it; a null query skips the check (as
// check_memory_location does for a forward).
fmha_status check_merge_memory_location(const MergeProblem& p, const DeviceInfo& dev,
                                        PointerKindQuery pointer_kind);

}  // namespace fmha
