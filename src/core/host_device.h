// FMHA_HOST_DEVICE: a function both the host backends and CUDA kernels call
// (core/mask.h, core/key_tiles.h, core/arith.h). Under nvcc it is an inlined
// __host__ __device__ function, elsewhere a plain inline one.
#pragma once

#ifndef FMHA_HOST_DEVICE
#if defined(__CUDACC__)
#define FMHA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FMHA_HOST_DEVICE inline
#endif
#endif
