/* A contiguous [b, h, n, d] fmha_tensor view of data, for the C benchmarks
 * over the public API (bench_overhead.c, bench_load.c). */
#ifndef FMHA_BENCH_TENSOR_H
#define FMHA_BENCH_TENSOR_H

#include <string.h>

#include <fmha/fmha.h>

static inline fmha_tensor bench_tensor(void* data, fmha_dtype t, int64_t b, int64_t h, int64_t n, int64_t d) {
  fmha_tensor x;
  memset(&x, 0, sizeof x);
  x.data = data;
  x.dtype = t;
  x.dims[0] = b;
  x.dims[1] = h;
  x.dims[2] = n;
  x.dims[3] = d;
  x.strides[3] = 1;
  x.strides[2] = d;
  x.strides[1] = n * d;
  x.strides[0] = h * n * d;
  return x;
}

#endif
