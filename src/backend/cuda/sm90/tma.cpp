#include "backend/cuda/sm90/tma.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

#include "core/error.h"

namespace fmha::cuda::sm90 {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(cudaDriverEntryPointQueryResult* found) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &result) ==
            cudaSuccess &&
        result == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    else
      (void)cudaGetLastError();
  });
  *found = result;
  return fn;
}

constexpr int64_t kMaxStrideBytes = int64_t{1} << 40;
constexpr int64_t kMaxDim = int64_t{1} << 32;

}  // namespace

const char* panel_map_unsupported(const Tensor4d& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return "the copy engine needs 16-byte aligned data";
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = t.strides[i] * (t.fp8 ? 1 : 2);
    if (bytes % 16 != 0) return "the copy engine needs strides that are multiples of 16 bytes";
    if (bytes < 0 || bytes >= kMaxStrideBytes) return "the copy engine needs strides below 2^40 bytes";
  }
  for (int64_t d : t.dims)
    if (d < 1 || d >= kMaxDim) return "the copy engine needs extents below 2^32";
  return nullptr;
}

fmha_status make_panel_map(const Tensor4d& t, int box_rows, CUtensorMap* out, int box_bytes) {
  if (const char* why = panel_map_unsupported(t)) return fail(FMHA_ERROR_INTERNAL, "cuda_sm90_ws: %s", why);
  cudaDriverEntryPointQueryResult found;
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_fn(&found);
  if (encode == nullptr)
    return fail(FMHA_ERROR_DEVICE, "cuda_sm90_ws: the driver has no cuTensorMapEncodeTiled (query result %d)",
                static_cast<int>(found));
  cuuint64_t dims[4];
  cuuint64_t strides[3];
  for (int i = 0; i < 4; ++i) dims[i] = static_cast<cuuint64_t>(t.dims[i]);
  const int elem = t.fp8 ? 1 : 2;
  for (int i = 0; i < 3; ++i) strides[i] = static_cast<cuuint64_t>(t.strides[i] * elem);
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_bytes / elem), static_cast<cuuint32_t>(box_rows), 1, 1};
  const CUtensorMapDataType type = t.fp8    ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : t.bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                            : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(out, type, 4,
                            const_cast<void*>(t.data), dims, strides, box, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE,
                            box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fail(FMHA_ERROR_DEVICE, "cuda_sm90_ws: cuTensorMapEncodeTiled failed (CUresult %d)", static_cast<int>(r));
  return FMHA_SUCCESS;
}

}  // namespace fmha::cuda::sm90
