// Exact overlap tests for strided views, used by validation.
//
// A view is the set of byte addresses base + sum_d i_d * stride_d for
// 0 <= i_d < count_d, with the element's bytes as one more dimension
// (count = element size, stride 1), so "two views overlap" means "some byte
// belongs to both". This is exact for any strides, not a comparison of
// [first, last] ranges: the rows of q, k, v and o interleaved in one packed
// buffer are disjoint and pass, while two views that share a single byte do
// not.
//
// The test descends dimension by dimension, the largest stride first, and
// keeps only the sub-views whose byte ranges can still meet; when both
// views have a dimension of the same stride (every interleaved layout) the
// pair of indices collapses to their difference, so such layouts take a
// handful of steps whatever their sizes. Layouts where neither applies could
// take many steps: the search stops after kOverlapBudget of them and answers
// kUnknown, which validation treats as an overlap (and says so).
#pragma once

#include <cstdint>

namespace fmha {

struct StridedBytes {
  static constexpr int kMaxDims = 5;
  uintptr_t base = 0;
  int dims = 0;
  int64_t count[kMaxDims] = {};   // >= 1
  int64_t stride[kMaxDims] = {};  // bytes, >= 0
};

// A tensor of 4 dims with element strides and `elem` bytes per element.
StridedBytes tensor_bytes(const void* data, const int64_t dims[4], const int64_t strides[4], int elem);
// `bytes` contiguous bytes at `data` (bytes >= 1).
StridedBytes contiguous_bytes(const void* data, uint64_t bytes);

enum class Overlap { kDisjoint, kOverlap, kUnknown };

constexpr int kOverlapBudget = 1 << 14;

// Whether some byte belongs to both views.
Overlap views_overlap(const StridedBytes& a, const StridedBytes& b);
// Whether two different index tuples of the view name the same byte.
Overlap view_overlaps_itself(const StridedBytes& a);

}  // namespace fmha
