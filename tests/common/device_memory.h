// Where the runner puts a case's tensors: an interface the CPU tests fill
// with malloc/memcpy and the GPU tests with cudaMalloc/cudaMemcpy, so that
// tests/common needs no CUDA header.
//
// A GPU implementation, in the GPU test's own file (sketch):
//   struct CudaMemory final : fmha_test::DeviceMemory {
//     cudaStream_t stream;
//     fmha_device_kind kind() const override { return FMHA_DEVICE_CUDA; }
//     void* allocate(size_t n) override { void* p = nullptr;
//       return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr; }
//     void release(void* p) override { cudaFree(p); }
//     bool to_device(void* d, const void* h, size_t n) override {
//       return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess; }
//     bool to_host(void* h, const void* d, size_t n) override {
//       return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess; }
//     bool synchronize() override {
//       return cudaStreamSynchronize(stream) == cudaSuccess; }
//   };
#pragma once

#include <cstddef>

#include "fmha/fmha.h"

namespace fmha_test {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The device the memory lives on (the handle passed with it must match).
  virtual fmha_device_kind kind() const = 0;
  // `bytes` (> 0) of device memory, at least 256-byte aligned; null on
  // failure.
  virtual void* allocate(size_t bytes) = 0;
  // Frees what allocate() returned. Null is fine.
  virtual void release(void* ptr) = 0;
  // Blocking copies; false on failure.
  virtual bool to_device(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual bool to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Waits until work queued on the handle's stream is done (the forward is
  // asynchronous on CUDA); false when that work failed.
  virtual bool synchronize() = 0;
};

// Plain host memory, for CPU handles.
class HostMemory final : public DeviceMemory {
 public:
  fmha_device_kind kind() const override { return FMHA_DEVICE_CPU; }
  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  bool to_device(void* device_dst, const void* host_src, size_t bytes) override;
  bool to_host(void* host_dst, const void* device_src, size_t bytes) override;
  bool synchronize() override { return true; }
};

// One allocation, released when it goes out of scope.
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceMemory& memory, size_t bytes)
      : memory_(&memory), ptr_(bytes > 0 ? memory.allocate(bytes) : nullptr), bytes_(bytes) {}
  ~DeviceBuffer() { memory_->release(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return bytes_ == 0 || ptr_ != nullptr; }

 private:
  DeviceMemory* memory_;
  void* ptr_;
  size_t bytes_;
};

}  // namespace fmha_test
