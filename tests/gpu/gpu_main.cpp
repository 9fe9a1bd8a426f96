// test_gpu's main: skips (exit code 77, which ctest reports as skipped) when
// no CUDA device is usable, else runs the doctest suite.
//
// This file implements doctest itself, so the linker never pulls the
// shared tests/common/doctest_main.cpp out of fmha_test_common: every doctest
// symbol it would define is already defined here.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "fmha/fmha.h"
#include "gpu/gpu_support.h"

namespace {

constexpr int kSkipped = 77;

// Why the suite cannot run here, or "" when it can.
std::string unavailable_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device present";
  fmha_handle h = nullptr;
  const fmha_status s = fmha_create(&h, FMHA_DEVICE_CUDA, 0);
  fmha_destroy(h);
  if (s == FMHA_ERROR_NOT_AVAILABLE) return std::string("fmha_create(CUDA): ") + fmha_last_error_message();
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string why = unavailable_reason();
  if (!why.empty()) {
    std::printf("test_gpu: skipped: no CUDA device (%s)\n", why.c_str());
    return kSkipped;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::string kernels;
  for (const std::string& k : fmha_gpu_test::cuda_kernel_names()) kernels += " " + k;
  std::printf("test_gpu: %s (sm_%d%d, %d SMs), CUDA kernels:%s%s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, kernels.c_str(),
              fmha_gpu_test::quick_mode() ? " [FMHA_TEST_QUICK: reduced suite]" : "");
  std::fflush(stdout);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
