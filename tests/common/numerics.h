// Everything a numerics test needs, in one include:
//   numeric_types.h   FP16/BF16 <-> float, element access, poison patterns
//   random.h          seeded generator, per-case seeds
//   reference.h       the float64 reference forward
//   compare.h         element-wise checks and error norms
//   tolerance.h       the tolerances, per dtype
//   attention_case.h  AttentionCase and the case matrix
//   device_memory.h   DeviceMemory (host or device buffers), HostMemory
//   case_runner.h     PreparedCase / run_case: one case through fmha_forward
#pragma once

#include "common/attention_case.h"
#include "common/case_runner.h"
#include "common/compare.h"
#include "common/device_memory.h"
#include "common/numeric_types.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/tolerance.h"
