// The merge, row by row. For a row with parts' lse values lse_i:
//
//   M = max_i lse_i,   w_i = exp(lse_i - M),   S = sum_i w_i,
//   lse = M + log S,   o = sum_i (w_i / S) o_i
//
// in FP64, so the result is the exact merge rounded once to o's dtype. A
// part with lse_i = -inf has w_i = 0 and is skipped (whatever its o_i
// holds); a row whose parts are all -inf (M = -inf) gets o = 0 and lse =
// -inf; a NaN lse_i makes the row's o and lse NaN, and so does a +inf one
// (inf - inf).
//
// In place (o is o_parts[0], lse is lse_parts[0]) needs no copy: element d
// of o depends only on element d of the parts, and a row's weights are read
// before its lse is written.
#include "backend/cpu/cpu_merge.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "core/numeric.h"

namespace fmha::cpu {
namespace {

constexpr int kDimChunk = 64;          // dims accumulated at once (on the stack)
constexpr int64_t kItemsPerThread = 8;  // work items per thread, for balance
constexpr double kInf = std::numeric_limits<double>::infinity();

// load and store see only the dtypes merge() admits (is_merge_dtype).
bool is_merge_dtype(fmha_dtype t) { return t == FMHA_DTYPE_F16 || t == FMHA_DTYPE_BF16 || t == FMHA_DTYPE_F32; }

double load(const void* base, fmha_dtype t, int64_t offset) {
  switch (t) {
    case FMHA_DTYPE_F16: return half_to_float(static_cast<const uint16_t*>(base)[offset]);
    case FMHA_DTYPE_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    default: return static_cast<const float*>(base)[offset];  // F32
  }
}

void store(void* base, fmha_dtype t, int64_t offset, double x) {
  const float f = static_cast<float>(x);
  switch (t) {
    case FMHA_DTYPE_F16: static_cast<uint16_t*>(base)[offset] = float_to_half(f); break;
    case FMHA_DTYPE_BF16: static_cast<uint16_t*>(base)[offset] = float_to_bf16(f); break;
    default: static_cast<float*>(base)[offset] = f; break;  // F32
  }
}

// Element offset of row (b, h, i) in a view with these strides.
int64_t row_offset(const int64_t stride[4], int64_t b, int64_t h, int64_t i) {
  return b * stride[0] + h * stride[1] + i * stride[2];
}

void merge_row(const MergeProblem& p, int64_t row) {
  const int64_t i = row % p.seq;
  const int64_t h = row / p.seq % p.heads;
  const int64_t b = row / p.seq / p.heads;
  const int n = p.num_parts;

  double m = -kInf;
  bool nan = false;
  for (int k = 0; k < n; ++k) {
    const double x = p.lse_parts[k][row];
    nan |= std::isnan(x);
    m = std::max(m, x);
  }
  const int64_t o_row = row_offset(p.o_stride, b, h, i);
  const int64_t D = p.head_dim;
  if (nan || m == kInf || m == -kInf) {
    // NaN (a NaN or +inf lse_i), or no part saw a key.
    const double fill = m == -kInf && !nan ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    for (int64_t d = 0; d < D; ++d) store(p.o, p.o_dtype, o_row + d * p.o_stride[3], fill);
    if (p.lse != nullptr) p.lse[row] = m == -kInf && !nan ? -std::numeric_limits<float>::infinity()
                                                           : std::numeric_limits<float>::quiet_NaN();
    return;
  }
  double sum = 0.0;
  for (int k = 0; k < n; ++k) sum += std::exp(p.lse_parts[k][row] - m);  // -inf gives 0
  const double inv = 1.0 / sum;  // sum >= 1: the part at the max has w = 1

  double acc[kDimChunk];
  for (int64_t d0 = 0; d0 < D; d0 += kDimChunk) {
    const int64_t len = std::min<int64_t>(kDimChunk, D - d0);
    std::fill(acc, acc + len, 0.0);
    for (int k = 0; k < n; ++k) {
      const double x = p.lse_parts[k][row];
      if (x == -kInf) continue;  // contributes nothing, whatever o_k holds
      const double w = std::exp(x - m) * inv;
      const fmha_tensor& part = p.parts[k];
      const int64_t base = row_offset(part.strides, b, h, i) + d0 * part.strides[3];
      for (int64_t d = 0; d < len; ++d) acc[d] += w * load(part.data, p.parts_dtype, base + d * part.strides[3]);
    }
    for (int64_t d = 0; d < len; ++d) store(p.o, p.o_dtype, o_row + (d0 + d) * p.o_stride[3], acc[d]);
  }
  if (p.lse != nullptr) p.lse[row] = static_cast<float>(m + std::log(sum));
}

}  // namespace

fmha_status merge(const MergeProblem& p, ThreadPool* pool) {
  const int64_t rows = p.rows();
  if (rows == 0) return FMHA_SUCCESS;
  // Validation admits only these; a view read at the wrong width would run past its extent.
  if (!is_merge_dtype(p.parts_dtype) || !is_merge_dtype(p.o_dtype))
    return fail(FMHA_ERROR_INTERNAL, "cpu merge: parts dtype %s, o dtype %s", dtype_name(p.parts_dtype),
                dtype_name(p.o_dtype));
  const int64_t threads = pool != nullptr ? pool->size() : 1;
  const int64_t items = std::min<int64_t>(rows, threads * kItemsPerThread);
  const int64_t per_item = (rows + items - 1) / items;
  const MergeProblem* pp = &p;
  // Captures two words: std::function keeps it inline (no allocation).
  auto body = [pp, per_item](int64_t item, int) {
    const int64_t end = std::min(pp->rows(), (item + 1) * per_item);
    for (int64_t row = item * per_item; row < end; ++row) merge_row(*pp, row);
  };
  if (pool != nullptr && items > 1)
    pool->parallel_for(items, body);
  else
    for (int64_t k = 0; k < items; ++k) body(k, 0);
  return FMHA_SUCCESS;
}

}  // namespace fmha::cpu
