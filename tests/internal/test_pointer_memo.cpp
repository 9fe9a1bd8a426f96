// The per-call memo of device allocations (core/pointer_memo.h): exact range
// bounds, what it refuses to hold, and that it lives for one scope on one
// thread only. The CUDA side (what gets remembered, and that a freed
// allocation is looked up again) is tests/gpu/test_gpu_pointer_checks.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <thread>

#include "core/pointer_memo.h"

using fmha::PointerMemo;
using fmha::PointerMemoScope;

TEST_CASE("pointer memo: a remembered range holds exactly its bytes") {
  PointerMemo m;
  CHECK(m.find(0x1000) == -1);
  m.remember(0x1000, 0x100, 3);
  CHECK(m.find(0x1000) == 3);
  CHECK(m.find(0x10ff) == 3);
  CHECK(m.find(0x1100) == -1);  // one past the end
  CHECK(m.find(0x0fff) == -1);  // one before the start
  m.remember(0x2000, 0x10, 0);
  CHECK(m.find(0x2008) == 0);
  CHECK(m.find(0x1008) == 3);
  CHECK(m.find(0x1800) == -1);  // between the two
}

TEST_CASE("pointer memo: a range at the top of the address space does not wrap to address 0") {
  PointerMemo m;
  const uintptr_t top = UINTPTR_MAX - 15;
  m.remember(top, 16, 1);
  CHECK(m.find(UINTPTR_MAX) == 1);
  CHECK(m.find(top) == 1);
  CHECK(m.find(0) == -1);
  CHECK(m.find(top - 1) == -1);
}

TEST_CASE("pointer memo: empty ranges, negative devices and ranges past capacity are not held") {
  PointerMemo m;
  m.remember(0x1000, 0, 0);
  m.remember(0x2000, 0x10, -1);
  CHECK(m.size() == 0);
  CHECK(m.find(0x1000) == -1);
  CHECK(m.find(0x2000) == -1);
  for (int i = 0; i < PointerMemo::kCapacity; ++i) m.remember(0x10000 * (i + 1), 0x100, i);
  CHECK(m.size() == PointerMemo::kCapacity);
  m.remember(0x900000, 0x100, 7);  // full: forgotten, so looked up again
  CHECK(m.size() == PointerMemo::kCapacity);
  CHECK(m.find(0x900000) == -1);
  for (int i = 0; i < PointerMemo::kCapacity; ++i) CHECK(m.find(0x10000 * (i + 1) + 0x80) == i);
}

TEST_CASE("pointer memo: a scope's memo is fresh, nests, ends with the scope and is per thread") {
  CHECK(PointerMemoScope::current() == nullptr);
  {
    PointerMemoScope outer;
    PointerMemo* a = PointerMemoScope::current();
    REQUIRE(a != nullptr);
    CHECK(a->size() == 0);
    a->remember(0x1000, 0x100, 0);
    {
      PointerMemoScope inner;
      PointerMemo* b = PointerMemoScope::current();
      REQUIRE(b != nullptr);
      CHECK(b != a);
      CHECK(b->find(0x1000) == -1);  // the inner call starts empty
      b->remember(0x5000, 0x100, 1);
    }
    CHECK(PointerMemoScope::current() == a);
    CHECK(a->find(0x1000) == 0);
    CHECK(a->find(0x5000) == -1);
    // Another thread sees no scope of this thread.
    PointerMemo* seen = a;
    std::thread([&] { seen = PointerMemoScope::current(); }).join();
    CHECK(seen == nullptr);
  }
  CHECK(PointerMemoScope::current() == nullptr);
  // A later call (scope) remembers nothing of the earlier one.
  PointerMemoScope next;
  CHECK(PointerMemoScope::current()->size() == 0);
  CHECK(PointerMemoScope::current()->find(0x1000) == -1);
}
