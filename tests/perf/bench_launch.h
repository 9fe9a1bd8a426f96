/* bench_launch.cu's C interface (bench_overhead's "launch" rows): an empty
 * kernel enqueued each way fmha could enqueue one. Two builds of it, the
 * same functions under two prefixes: bench_launch_* (linked into
 * bench_overhead, the runtime that created the stream) and
 * bench_launch_static_* (libbench_launch_static.so, its own static runtime,
 * as libfmha). */
#ifndef FMHA_BENCH_LAUNCH_H
#define FMHA_BENCH_LAUNCH_H

#include <stddef.h>

#if defined(BENCH_LAUNCH_STATIC) && BENCH_LAUNCH_STATIC
#define BENCH_LAUNCH_FN(name) bench_launch_static_##name
#define BENCH_LAUNCH_EXPORT __attribute__((visibility("default")))
#else
#define BENCH_LAUNCH_FN(name) bench_launch_##name
#define BENCH_LAUNCH_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* For each prefix P: the rows, by index 0 .. P rows() - 1, and their
 * names; sizeof(FwdParams), the by-value parameter of the "FwdParams" rows;
 * prepare(): once, on the current device, the shared-memory opt-in, the
 * driver's cuLaunchKernel and the kernels' handles (0 on success); once():
 * one launch of `row` on `stream` (a cudaStream_t): 0 on success, 1 when the
 * row cannot run here, -1 on a CUDA error. */
#define BENCH_LAUNCH_DECLARE_(P)              \
  int P##rows(void);                          \
  const char* P##name(int row);               \
  size_t P##param_bytes(void);                \
  int P##prepare(void);                       \
  int P##once(int row, void* stream);
BENCH_LAUNCH_DECLARE_(bench_launch_)
BENCH_LAUNCH_DECLARE_(bench_launch_static_)
#undef BENCH_LAUNCH_DECLARE_

#ifdef __cplusplus
}
#endif

#endif
