// Host-side element types for the tests: FP16/BF16 <-> float conversion
// (round to nearest, ties to even, as the hardware does) and reading or
// writing one element of an fmha_dtype buffer.
//
// Needs only the public header; no CUDA, no library internals, so the same
// code serves the CPU tests and the GPU tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fmha/fmha.h"

namespace fmha_test {

// IEEE binary16 bits -> float. Exact (every half is a float).
float half_to_float(uint16_t bits);
// float -> IEEE binary16 bits, round to nearest even; overflow gives +-inf,
// NaN stays NaN (quiet), subnormals are produced.
uint16_t float_to_half(float value);

// bfloat16 bits -> float. Exact.
float bf16_to_float(uint16_t bits);
// float -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet).
uint16_t float_to_bf16(float value);

// OCP FP8 (FMHA_DTYPE_F8E4M3 / F8E5M2) bits -> float, exact, from the
// formats' definitions; float -> FP8 bits, round to nearest even,
// saturating to the largest finite value (NaN stays NaN).
float fp8_to_float(uint8_t bits, fmha_dtype dtype);
uint8_t float_to_fp8(float value, fmha_dtype dtype);

// Bytes per element (1 for FP8, 2, 2, 4); 0 for a value outside fmha_dtype.
size_t dtype_bytes(fmha_dtype dtype);
// "F16", "BF16", "F32" ("?" otherwise).
const char* dtype_label(fmha_dtype dtype);

// `value` rounded to the nearest `dtype` value (float is exact for all three).
float round_to_dtype(float value, fmha_dtype dtype);

// Element `index` (in elements, not bytes) of a buffer of `dtype`, read as
// its exact value.
double load_element(const void* base, fmha_dtype dtype, int64_t index);
// Stores `value` rounded to `dtype` into element `index`.
void store_element(void* base, fmha_dtype dtype, int64_t index, float value);

// The poison written over outputs before a run: a quiet NaN with a payload
// no arithmetic produces, so "still poison" means "never written".
uint32_t poison_bits(fmha_dtype dtype);
constexpr uint32_t kPoisonF32 = 0x7fc0dead;  // also used for lse and workspace
constexpr uint16_t kPoisonF16 = 0x7e5a;
constexpr uint16_t kPoisonBF16 = 0x7fda;
// Fills `count` elements of `dtype` at `base` with poison_bits(dtype).
void fill_poison(void* base, fmha_dtype dtype, size_t count);
// True when element `index` still holds poison_bits(dtype).
bool is_poison(const void* base, fmha_dtype dtype, int64_t index);

}  // namespace fmha_test
