// fmha_merge on a CUDA handle (core/merge.h): one kernel, enqueued on the
// handle's stream, shared by every kernel family.
//
// The o_parts and lse_parts arrays are host memory; their targets are device
// memory. The kernel receives the parts by value in its parameters,
// kMergeMaxParts at a time, so nothing is allocated or copied and the merge
// can be captured in a CUDA graph. Beyond kMergeMaxParts parts the merge
// runs in rounds: round r > 0 merges the running result (o and lse, as the
// previous round wrote them) with the next kMergeMaxParts - 1 parts, which
// the merge's associativity makes exact up to the rounding of o to its
// dtype between rounds. Those rounds need the caller's lse to hold the
// running lse: without it such a merge is FMHA_ERROR_UNSUPPORTED.
#pragma once

#include "core/merge.h"

namespace fmha::cuda {

constexpr int kMergeMaxParts = 64;

// Enqueues the merge on `stream` (a cudaStream_t). The handle's device is
// current.
fmha_status launch_merge(const MergeProblem& p, void* stream);

}  // namespace fmha::cuda
