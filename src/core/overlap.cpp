#include "core/overlap.h"

#include <algorithm>

namespace fmha {
namespace {

// Addresses, spans and shifts in 128 bits: a shifted sub-view may start
// below 0 or end past 2^64 before the range test discards it.
using i128 = __int128;

// A view without dimensions of count 1 or stride 0 (they add no address),
// strides descending, and each dimension merged into the next smaller one
// when together they are one evenly strided run.
struct Canon {
  i128 base = 0;
  int nd = 0;
  i128 n[StridedBytes::kMaxDims] = {};  // >= 2
  i128 s[StridedBytes::kMaxDims] = {};  // >= 1, descending
  i128 last() const {
    i128 x = base;
    for (int d = 0; d < nd; ++d) x += (n[d] - 1) * s[d];
    return x;
  }
  // The view without its outermost dimension, moved by `shift` bytes.
  Canon inner(i128 shift) const {
    Canon c;
    c.base = base + shift;
    c.nd = nd - 1;
    for (int d = 1; d < nd; ++d) {
      c.n[d - 1] = n[d];
      c.s[d - 1] = s[d];
    }
    return c;
  }
};

Canon canonical(const StridedBytes& v) {
  Canon c;
  c.base = static_cast<i128>(v.base);
  for (int d = 0; d < v.dims; ++d)
    if (v.count[d] > 1 && v.stride[d] > 0) {
      c.n[c.nd] = v.count[d];
      c.s[c.nd] = v.stride[d];
      ++c.nd;
    }
  // Insertion sort by stride, descending (at most 5 entries).
  for (int i = 1; i < c.nd; ++i)
    for (int j = i; j > 0 && c.s[j] > c.s[j - 1]; --j) {
      std::swap(c.s[j], c.s[j - 1]);
      std::swap(c.n[j], c.n[j - 1]);
    }
  // Merge (outer, inner) when outer.stride == inner.stride * inner.count.
  int out = 0;
  for (int d = 0; d < c.nd; ++d) {
    if (out > 0 && c.s[out - 1] == c.s[d] * c.n[d]) {
      c.n[out - 1] *= c.n[d];
      c.s[out - 1] = c.s[d];
      continue;
    }
    c.n[out] = c.n[d];
    c.s[out] = c.s[d];
    ++out;
  }
  c.nd = out;
  return c;
}

i128 floor_div(i128 a, i128 b) {  // b > 0
  const i128 q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
i128 ceil_div(i128 a, i128 b) { return -floor_div(-a, b); }

struct Search {
  int budget = kOverlapBudget;

  Overlap both(const Canon& a, const Canon& b) {
    if (--budget < 0) return Overlap::kUnknown;
    const i128 a_last = a.last();
    const i128 b_last = b.last();
    if (a_last < b.base || b_last < a.base) return Overlap::kDisjoint;
    if (a.nd == 0 && b.nd == 0) return Overlap::kOverlap;  // two single bytes, same address
    if (a.nd > 0 && b.nd > 0 && a.s[0] == b.s[0]) {
      // a = U_i (a' + i s), b = U_j (b' + j s): they meet iff a' meets
      // b' + k s for some k = j - i in [-(n_a - 1), n_b - 1], and only the k
      // whose ranges meet can.
      const i128 s = a.s[0];
      const Canon ai = a.inner(0);
      const Canon bi = b.inner(0);
      const i128 k0 = std::max<i128>(-(a.n[0] - 1), ceil_div(ai.base - bi.last(), s));
      const i128 k1 = std::min<i128>(b.n[0] - 1, floor_div(ai.last() - bi.base, s));
      for (i128 k = k0; k <= k1; ++k) {
        const Overlap r = both(ai, shifted(bi, k * s));
        if (r != Overlap::kDisjoint) return r;
      }
      return Overlap::kDisjoint;
    }
    // Split the view with the larger outermost stride; keep the slices whose
    // range meets the other view's.
    const bool split_a = b.nd == 0 || (a.nd > 0 && a.s[0] > b.s[0]);
    const Canon& x = split_a ? a : b;
    const Canon& y = split_a ? b : a;
    const i128 y_last = split_a ? b_last : a_last;
    const i128 s = x.s[0];
    const Canon xi = x.inner(0);
    const i128 i0 = std::max<i128>(0, ceil_div(y.base - xi.last(), s));
    const i128 i1 = std::min<i128>(x.n[0] - 1, floor_div(y_last - xi.base, s));
    for (i128 i = i0; i <= i1; ++i) {
      const Overlap r = both(shifted(xi, i * s), y);
      if (r != Overlap::kDisjoint) return r;
    }
    return Overlap::kDisjoint;
  }

  Overlap self(const Canon& a) {
    if (--budget < 0) return Overlap::kUnknown;
    if (a.nd == 0) return Overlap::kDisjoint;
    // a = U_i (a' + i s): two index tuples collide within one slice (a'
    // overlaps itself) or across slices i < j, i.e. a' meets a' + k s for
    // some k = j - i in [1, n - 1] whose ranges meet.
    const Canon ai = a.inner(0);
    Overlap r = self(ai);
    if (r != Overlap::kDisjoint) return r;
    const i128 span = ai.last() - ai.base;
    const i128 k1 = std::min<i128>(a.n[0] - 1, floor_div(span, a.s[0]));
    for (i128 k = 1; k <= k1; ++k)
      if ((r = both(ai, shifted(ai, k * a.s[0]))) != Overlap::kDisjoint) return r;
    return Overlap::kDisjoint;
  }

  static Canon shifted(const Canon& c, i128 by) {
    Canon x = c;
    x.base += by;
    return x;
  }
};

// The view's last byte: base + sum (count - 1) * stride.
i128 last_byte(const StridedBytes& v) {
  i128 x = static_cast<i128>(v.base);
  for (int d = 0; d < v.dims; ++d) x += static_cast<i128>(v.count[d] - 1) * v.stride[d];
  return x;
}

// A sufficient test for "no two index tuples name one byte", exact when it
// answers true: with the dimensions of count > 1 in ascending stride order,
// each stride exceeds the reach (count - 1) * stride summed over all smaller
// ones, so the index tuple is a mixed-radix number and distinct tuples land
// on distinct bytes. Every dense or padded layout (BHND, BNHD, slices of a
// wider buffer) passes; what fails goes to the exact search. Strides must be
// > 0 where count > 1 (the caller checked).
bool strides_nest(const StridedBytes& v) {
  int64_t n[StridedBytes::kMaxDims], s[StridedBytes::kMaxDims];
  int nd = 0;
  for (int d = 0; d < v.dims; ++d)
    if (v.count[d] > 1) {
      // Insertion by stride, ascending (at most 5 entries).
      int j = nd++;
      for (; j > 0 && s[j - 1] > v.stride[d]; --j) {
        s[j] = s[j - 1];
        n[j] = n[j - 1];
      }
      s[j] = v.stride[d];
      n[j] = v.count[d];
    }
  i128 reach = 0;
  for (int d = 0; d < nd; ++d) {
    if (static_cast<i128>(s[d]) <= reach) return false;
    reach += static_cast<i128>(n[d] - 1) * s[d];
  }
  return true;
}

}  // namespace

StridedBytes tensor_bytes(const void* data, const int64_t dims[4], const int64_t strides[4], int elem) {
  StridedBytes v;
  v.base = reinterpret_cast<uintptr_t>(data);
  v.dims = 5;
  for (int d = 0; d < 4; ++d) {
    v.count[d] = dims[d];
    // A dim of size 1 adds no address, and its stride is unbounded (fuzzing
    // found stride * elem overflowing): leave it out. Any other stride fits,
    // since validation bounded (dims - 1) * strides * elem.
    v.stride[d] = dims[d] > 1 ? strides[d] * elem : 0;
  }
  v.count[4] = elem;
  v.stride[4] = 1;
  return v;
}

StridedBytes contiguous_bytes(const void* data, uint64_t bytes) {
  StridedBytes v;
  v.base = reinterpret_cast<uintptr_t>(data);
  v.dims = 1;
  v.count[0] = static_cast<int64_t>(bytes);
  v.stride[0] = 1;
  return v;
}

Overlap views_overlap(const StridedBytes& a, const StridedBytes& b) {
  // Views whose byte ranges do not meet share no byte: the answer for
  // tensors in separate buffers (every forward checks several such pairs),
  // without building the canonical forms.
  if (last_byte(a) < static_cast<i128>(b.base) || last_byte(b) < static_cast<i128>(a.base))
    return Overlap::kDisjoint;
  Search s;
  return s.both(canonical(a), canonical(b));
}

Overlap view_overlaps_itself(const StridedBytes& a) {
  // A dimension of stride 0 repeats its bytes (canonical() drops it).
  for (int d = 0; d < a.dims; ++d)
    if (a.count[d] > 1 && a.stride[d] == 0) return Overlap::kOverlap;
  if (strides_nest(a)) return Overlap::kDisjoint;
  Search s;
  return s.self(canonical(a));
}

}  // namespace fmha
