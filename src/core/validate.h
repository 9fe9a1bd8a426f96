// Validation: turns caller-written fmha_forward_params into a Problem, or
// fails with a specific status and a message naming the field and value.
// Nothing here writes to any tensor.
#pragma once

#include "core/device_info.h"
#include "core/overlap.h"
#include "core/problem.h"

#include <cstddef>

namespace fmha {

// Checks everything that does not depend on the device: struct_size,
// pointers, dtypes, dims, strides (extent overflow, o aliasing itself),
// shapes, GQA divisibility, mask bits and windows, scale, softcap, element
// alignment, dims up to FMHA_MAX_DIM, the host-known serving fields
// (num_seqs, max_seqlen_q/k, block_table_stride, which fields go together
// and the shapes they imply), and overlap (exact, core/overlap.h) of o and
// lse (ragged: [Hq, total_q]) with the inputs and of o with itself. Batch
// and seq may be 0 (empty work: Problem::no_rows()); an empty tensor may
// have data NULL. A 0.1-sized struct reads as the dense layout.
fmha_status build_problem(const fmha_forward_params* params, Problem* out);

// Pointer, dtype, dims, strides and the extent of one tensor view named
// `name` in the messages: batch and seq may be 0 (an empty view, whose data
// may be NULL); heads and head_dim may not; data is aligned to the element
// and the extent neither overflows int64 nor wraps the address space.
fmha_status check_tensor(const char* name, const fmha_tensor& t);

// The bytes of a tensor view (core/overlap.h), for the overlap checks.
StridedBytes tensor_view(const fmha_tensor& t);

// Fails (naming both) unless the write target `out` shares no byte with
// `in`; a layout too irregular to decide counts as an overlap.
fmha_status check_disjoint(const char* out_name, const StridedBytes& out, const char* in_name,
                           const StridedBytes& in);

// Fails unless no two elements of the tensor share a byte.
fmha_status check_no_self_overlap(const char* name, const fmha_tensor& t);

// Checks that the `bytes` of workspace a kernel will use share no byte with
// q, k, v, o or lse.
fmha_status check_workspace(const Problem& p, const void* workspace, size_t bytes);

// Where a pointer lives (*device receives the owning device of kDevice
// memory). Supplied by the API layer, which knows whether a GPU runtime is
// there to ask; validation itself calls no runtime.
using PointerKindQuery = PointerKind (*)(const void* ptr, int* device);

// Checks that the tensors and the metadata arrays (cu_seqlens_q/k,
// seqused_k, block_table) live where the handle's device can use them
// (a host pointer on a CUDA handle, a device pointer on a CPU handle), as
// `pointer_kind` reports it; a null query skips the check.
fmha_status check_memory_location(const Problem& p, const DeviceInfo& dev, PointerKindQuery pointer_kind);

}  // namespace fmha
