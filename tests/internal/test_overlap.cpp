// The exact overlap tests of src/core/overlap.h against brute force: every
// byte of small random views enumerated into a set.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "core/overlap.h"

namespace {

using fmha::Overlap;
using fmha::StridedBytes;

std::vector<uintptr_t> bytes_of(const StridedBytes& v) {
  std::vector<uintptr_t> out{v.base};
  for (int d = 0; d < v.dims; ++d) {
    std::vector<uintptr_t> next;
    for (uintptr_t b : out)
      for (int64_t i = 0; i < v.count[d]; ++i) next.push_back(b + static_cast<uintptr_t>(i * v.stride[d]));
    out.swap(next);
  }
  return out;
}

bool brute_overlap(const StridedBytes& a, const StridedBytes& b) {
  const std::vector<uintptr_t> x = bytes_of(a);
  const std::set<uintptr_t> sx(x.begin(), x.end());
  for (uintptr_t e : bytes_of(b))
    if (sx.count(e)) return true;
  return false;
}

bool brute_self(const StridedBytes& a) {
  const std::vector<uintptr_t> x = bytes_of(a);
  return std::set<uintptr_t>(x.begin(), x.end()).size() != x.size();
}

StridedBytes tensor(uintptr_t base, std::initializer_list<int64_t> dims, std::initializer_list<int64_t> strides,
                    int elem) {
  int64_t d[4], s[4];
  std::copy(dims.begin(), dims.end(), d);
  std::copy(strides.begin(), strides.end(), s);
  return fmha::tensor_bytes(reinterpret_cast<const void*>(base), d, s, elem);
}

}  // namespace

TEST_CASE("overlap: packed q|k|v|o rows of one buffer are disjoint, exactly") {
  // [B=2, N=5, W=Hq+Hk+Hk+Hq=2+1+1+2 heads, D=8] F16; o takes the last 2 heads.
  const int64_t B = 2, N = 5, W = 6, D = 8;
  const uintptr_t buf = 1 << 20;
  const int e = 2;
  auto view = [&](int64_t head0, int64_t heads) {
    return tensor(buf + static_cast<uintptr_t>(head0 * D * e), {B, heads, N, D}, {N * W * D, D, W * D, 1}, e);
  };
  const StridedBytes q = view(0, 2), k = view(2, 1), v = view(3, 1), o = view(4, 2);
  for (const StridedBytes* in : {&q, &k, &v}) CHECK(fmha::views_overlap(o, *in) == Overlap::kDisjoint);
  CHECK(fmha::view_overlaps_itself(o) == Overlap::kDisjoint);
  // o one element to the left reaches into v's last element of each row.
  const StridedBytes o_shifted = tensor(buf + static_cast<uintptr_t>((4 * D - 1) * e), {B, 2, N, D},
                                        {N * W * D, D, W * D, 1}, e);
  CHECK(fmha::views_overlap(o_shifted, v) == Overlap::kOverlap);
  CHECK(brute_overlap(o_shifted, v));
}

TEST_CASE("overlap: a view that only interleaves with itself is not self-overlapping") {
  // Addresses {0, 2, 4} + {0, 3}: 0 2 4 3 5 7, all distinct, though the
  // stride-sorted rule (each stride past the extent of the smaller) fails.
  const StridedBytes v = tensor(4096, {1, 1, 2, 3}, {0, 0, 3, 2}, 1);
  CHECK(!brute_self(v));
  CHECK(fmha::view_overlaps_itself(v) == Overlap::kDisjoint);
  CHECK(fmha::view_overlaps_itself(tensor(4096, {1, 1, 3, 4}, {0, 0, 3, 2}, 1)) == Overlap::kOverlap);  // 2*3 = 3*2
  CHECK(fmha::view_overlaps_itself(tensor(4096, {1, 2, 1, 4}, {0, 0, 4, 1}, 4)) == Overlap::kOverlap);
}

TEST_CASE("overlap: random small views agree with brute force") {
  std::mt19937_64 rng(12345);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto random_view = [&]() {
    const int e = 1 << pick(0, 2);
    int64_t d[4], s[4];
    for (int i = 0; i < 4; ++i) {
      d[i] = pick(1, 4);
      s[i] = pick(0, 3) == 0 ? 0 : pick(1, 24);
    }
    return fmha::tensor_bytes(reinterpret_cast<const void*>(static_cast<uintptr_t>(1000 + pick(0, 60) * e)), d, s,
                              e);
  };
  int overlapping = 0, self_overlapping = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const StridedBytes a = random_view();
    const StridedBytes b = trial % 3 == 0 ? fmha::contiguous_bytes(reinterpret_cast<const void*>(
                                                                       static_cast<uintptr_t>(1000 + pick(0, 300))),
                                                                   static_cast<uint64_t>(pick(1, 40)))
                                          : random_view();
    const bool want = brute_overlap(a, b);
    overlapping += want;
    CAPTURE(trial);
    REQUIRE(fmha::views_overlap(a, b) == (want ? Overlap::kOverlap : Overlap::kDisjoint));
    REQUIRE(fmha::views_overlap(b, a) == (want ? Overlap::kOverlap : Overlap::kDisjoint));
    const bool self = brute_self(a);
    self_overlapping += self;
    REQUIRE(fmha::view_overlaps_itself(a) == (self ? Overlap::kOverlap : Overlap::kDisjoint));
  }
  // Both answers must be well represented, or the comparison says little.
  CHECK(overlapping > 400);
  CHECK(overlapping < 3600);
  CHECK(self_overlapping > 400);
  CHECK(self_overlapping < 3600);
}

TEST_CASE("overlap: huge interleaved views take few steps; irregular ones give up as kUnknown") {
  // Two F16 views of 2^40 rows each, alternating rows of one buffer.
  const int64_t rows = int64_t{1} << 40;
  const StridedBytes a = tensor(1 << 20, {1, 1, rows, 64}, {0, 0, 128, 1}, 2);
  const StridedBytes b = tensor((1 << 20) + 128, {1, 1, rows, 64}, {0, 0, 128, 1}, 2);
  CHECK(fmha::views_overlap(a, b) == Overlap::kDisjoint);
  CHECK(fmha::view_overlaps_itself(a) == Overlap::kDisjoint);
  // Even bytes against odd ones, strides 2 and 4 over 2^20 positions: disjoint,
  // but with no common stride to collapse the proof would take 2^20 steps,
  // so the search gives up (validation then reports a possible overlap).
  const StridedBytes c = tensor(1 << 20, {1, 1, 1 << 20, 1}, {0, 0, 2, 1}, 1);
  const StridedBytes d = tensor((1 << 20) + 1, {1, 1, 1 << 19, 1}, {0, 0, 4, 1}, 1);
  CHECK(fmha::views_overlap(c, d) == Overlap::kUnknown);
}
