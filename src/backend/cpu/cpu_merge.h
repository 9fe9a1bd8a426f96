// fmha_merge on the CPU: the merge of partial attention results
// (core/merge.h) over the handle's threads, in FP64.
#pragma once

#include "core/merge.h"

namespace fmha {
class ThreadPool;
}

namespace fmha::cpu {

// Writes p.o (and p.lse) with `pool` (null: the calling thread). Allocates
// nothing.
fmha_status merge(const MergeProblem& p, ThreadPool* pool);

}  // namespace fmha::cpu
