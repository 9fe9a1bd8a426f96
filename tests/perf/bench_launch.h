/* bench_launch.cu's C interface (bench_overhead's "launch" rows): an empty
 * kernel enqueued each way fmha could enqueue one. */
#ifndef FMHA_BENCH_LAUNCH_H
#define FMHA_BENCH_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The rows, by index 0 .. bench_launch_rows() - 1, and their names. */
int bench_launch_rows(void);
const char* bench_launch_name(int row);
/* sizeof(FwdParams), the by-value parameter of the "FwdParams" rows. */
size_t bench_launch_param_bytes(void);
/* Once, on the current device: the shared-memory opt-in, the driver's
 * cuLaunchKernel and the kernels' handles. 0 on success. */
int bench_launch_prepare(void);
/* One launch of `row` on `stream` (a cudaStream_t): 0 on success, 1 when the
 * row cannot run here, -1 on a CUDA error. */
int bench_launch_once(int row, void* stream);

#ifdef __cplusplus
}
#endif

#endif
