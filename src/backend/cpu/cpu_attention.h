// The exact CPU backend: the seed's online softmax over K/V tiles, FP32
// accumulation for every input dtype, multi-threaded over
// (batch, head, query tile), or for decode shapes over (batch, kv head, key
// split) with the query heads of a GQA group packed together. It is a product feature (fmha without CUDA)
// and the oracle the GPU tests compare against.
#pragma once

#include <cstddef>

#include "core/device_info.h"
#include "core/problem.h"

namespace fmha::cpu {

// Per-thread scratch times the threads that take part: dev.num_threads, or
// fewer when the problem has fewer work items (batch x heads x query blocks,
// or batch x kv heads x key splits), plus, when a decode block's keys are
// split, one (m, l, o) partial per work item. Neither the split count nor
// the partials depend on the thread count.
size_t workspace_bytes(const Problem& p, const DeviceInfo& dev);

// Computes p.o (and p.lse) with ctx.pool; ctx.workspace holds at least
// workspace_bytes(p, *ctx.device).
fmha_status forward(const Problem& p, const LaunchContext& ctx);

}  // namespace fmha::cpu
