// The exact CPU backend: the seed's online softmax over K/V tiles, FP32
// accumulation for every input dtype, multi-threaded over
// (batch, head, query tile). It is a product feature (fmha without CUDA)
// and the oracle the GPU tests compare against.
#pragma once

#include <cstddef>

#include "core/device_info.h"
#include "core/problem.h"

namespace fmha::cpu {

// Per-thread scratch times the threads that take part: dev.num_threads, or
// fewer when the problem has fewer work items (batch x heads x query blocks).
size_t workspace_bytes(const Problem& p, const DeviceInfo& dev);

// Computes p.o (and p.lse) with ctx.pool; ctx.workspace holds at least
// workspace_bytes(p, *ctx.device).
fmha_status forward(const Problem& p, const LaunchContext& ctx);

}  // namespace fmha::cpu
