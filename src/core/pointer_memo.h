// The device allocations one API call has already looked up, so that
// tensors carved from one allocation (q, k, v packed in one buffer; a
// caching allocator's segment holding q, k, v, o, lse and the workspace)
// cost one runtime query per allocation instead of one per pointer.
//
// A memo lives for one API call on one thread (PointerMemoScope, declared by
// the C API entry points), and only there may the CUDA pointer query consult
// it: while a call runs, the caller guarantees that its buffers stay
// allocated (fmha.h), so a remembered range cannot be freed and reused under
// it. Nothing is kept across calls, by design: once a call returns, the
// caller may free a buffer and the address may come back as another device's
// memory or (after the driver returns the range to the OS) as host memory,
// and CUDA offers nothing cheaper than the pointer query itself to tell
// (there is no notification of frees; a buffer id, CU_POINTER_ATTRIBUTE_
// BUFFER_ID, is itself a pointer query). A cross-call cache would let a
// host pointer or another device's pointer pass the memory-location check.
//
// Only ranges that are exactly one allocation on one device may be
// remembered (the CUDA side admits cudaMalloc allocations, not VMM
// reservations, which can map several devices' memory into one range).
#pragma once

#include <cstdint>

namespace fmha {

class PointerMemo {
 public:
  static constexpr int kCapacity = 8;  // q, k, v, o, lse, workspace and the 0.2 metadata arrays

  // The device of the remembered allocation that holds `address`, or -1.
  int find(uintptr_t address) const {
    for (int i = 0; i < count_; ++i)
      if (address - ranges_[i].begin < ranges_[i].size) return ranges_[i].device;
    return -1;
  }

  // Remembers [begin, begin + size) as one allocation of device memory on
  // `device` (>= 0). Ignored when size is 0 or the memo is full.
  void remember(uintptr_t begin, uint64_t size, int device) {
    if (size == 0 || device < 0 || count_ == kCapacity) return;
    ranges_[count_++] = Range{begin, size, device};
  }

  int size() const { return count_; }

 private:
  struct Range {
    uintptr_t begin;
    uint64_t size;
    int device;
  };
  Range ranges_[kCapacity];
  int count_ = 0;
};

// Makes a fresh memo the calling thread's current one for the scope's
// lifetime (one API call), then restores the previous one (scopes nest).
class PointerMemoScope {
 public:
  PointerMemoScope() : previous_(current_) { current_ = &memo_; }
  ~PointerMemoScope() { current_ = previous_; }
  PointerMemoScope(const PointerMemoScope&) = delete;
  PointerMemoScope& operator=(const PointerMemoScope&) = delete;

  // The innermost live scope's memo on this thread, or null outside any.
  static PointerMemo* current() { return current_; }

 private:
  PointerMemo memo_;
  PointerMemo* previous_;
  static inline thread_local PointerMemo* current_ = nullptr;
};

}  // namespace fmha
