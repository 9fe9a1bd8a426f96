// libFuzzer target over the whole C API (issue 7). The input bytes choose a
// call sequence and every field of fmha_forward_params: shapes from tiny to
// past FMHA_MAX_DIM, strides from the usual layouts (BHND, BNHD, packed QKV,
// strided head dim, broadcast) to arbitrary values, pointers into an arena
// (aligned or not, overlapping or not) or wild, dtypes and other enums as
// any int, masks, windows, scale and softcap as raw bits, forced kernels and
// splits. For each input it checks:
//
//   - every status is a defined fmha_status; the thread's message is empty
//     after a success and non-empty after a failure;
//   - fmha_forward_workspace_size, fmha_forward_explain (into a buffer of
//     1..24 bytes with guard bytes after it) and fmha_forward agree on
//     validation, explain stays NUL-terminated inside its buffer;
//   - a failed call writes nothing: the whole arena is unchanged;
//   - a forward that succeeds writes nothing outside the bytes of o and lse
//     (nor past the workspace);
//   - validation's overlap verdicts match a brute-force byte comparison;
//   - small accepted problems match a float64 reference computed from the
//     header's definitions (masks, scale, softcap; 0.3's FP8 and mixed
//     dtypes, o dtype, descales, bias with any broadcast dims and strides,
//     ALiBi slopes [Hq] or [B, Hq]), with the NaN rules of fmha.h: keys a
//     row does not see never matter, a NaN or inf in a row's logits gives O
//     and lse NaN, a row that sees no key (or whose every logit is -inf, a
//     -inf bias) gives O = 0 and lse = -inf;
//   - validation never accepts descales, a bias or slopes that share a byte
//     with o or lse.
//
// Inputs that start with kMergeTag drive fmha_merge instead (run_merge:
// parts of any dtype, dims and strides, in-place o and lse, -inf and NaN
// lse values) with the same kinds of checks against a float64 merge.
//
// A broken invariant prints what and aborts (libFuzzer reports a crash).
// Built two ways (tests/fuzz/CMakeLists.txt): with clang's -fsanitize=fuzzer
// as the fuzzer, and with any compiler plus replay_main.cpp as a ctest test
// that replays the committed corpus.
#include <fmha/fmha.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api/c_callers.h"

#ifndef FMHA_FUZZ_CUDA
#define FMHA_FUZZ_CUDA 0
#endif
#if FMHA_FUZZ_CUDA
#include <cuda_runtime.h>
#endif

namespace {

// ---- input bytes -------------------------------------------------------------

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return n_ ? (--n_, *p_++) : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | u8();
    return v;
  }
  uint64_t u64() { return static_cast<uint64_t>(u32()) << 32 | u32(); }
  // A value in [0, n).
  uint32_t below(uint32_t n) { return n ? u8() % n : 0; }
  float f32() {
    const uint32_t b = u32();
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Wrapping int64 arithmetic for the layouts built from fuzzed (possibly
// huge) dims: the values only have to be something validation can judge.
int64_t wmul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
int64_t wadd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wmul3(int64_t a, int64_t b, int64_t c) { return wmul(wmul(a, b), c); }

[[noreturn]] void violated(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "fuzz_api: invariant broken: ");
  std::vfprintf(stderr, fmt, args);
  std::fprintf(stderr, "\n");
  va_end(args);
  std::abort();
}

// The status and message rules every entry point follows.
fmha_status checked(fmha_status s, const char* call) {
  int32_t v;
  std::memcpy(&v, &s, sizeof v);
  if (v < 0 || v >= FMHA_STATUS_COUNT_) violated("%s returned status %d", call, v);
  const char* msg = fmha_last_error_message();
  if (msg == nullptr) violated("%s: fmha_last_error_message() is NULL", call);
  if (s == FMHA_SUCCESS && msg[0] != '\0') violated("%s succeeded but left message \"%s\"", call, msg);
  if (s != FMHA_SUCCESS && msg[0] == '\0') violated("%s failed (%d) without a message", call, v);
  return s;
}

// ---- element values ------------------------------------------------------------

int elem_size(int32_t dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F32: return 4;
    case FMHA_DTYPE_F16: case FMHA_DTYPE_BF16: return 2;
    case FMHA_DTYPE_F8E4M3: case FMHA_DTYPE_F8E5M2: return 1;
    default: return 0;
  }
}
bool is_fp8(int32_t dtype) { return dtype == FMHA_DTYPE_F8E4M3 || dtype == FMHA_DTYPE_F8E5M2; }

// The OCP 8-bit floats of fmha.h: E4M3 (bias 7, no inf, NaN = S.1111.111)
// and E5M2 (bias 15, IEEE-like), decoded from their definition.
double fp8_value(uint8_t b, int32_t dtype) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (dtype == FMHA_DTYPE_F8E4M3) {
    const int e = (b >> 3) & 0xf, m = b & 0x7;
    if (e == 0xf && m == 0x7) return std::numeric_limits<double>::quiet_NaN();
    return sign * (e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
  }
  const int e = (b >> 2) & 0x1f, m = b & 0x3;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * (e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17));
}

// The byte of x: a multiple of 1/8 (E4M3) or 1/4 (E5M2) in [-2, 2], both
// exact in the format, or a non-finite value (NaN for E4M3's +-inf, which
// it cannot hold).
uint8_t fp8_byte(double x, int32_t dtype) {
  const bool e4m3 = dtype == FMHA_DTYPE_F8E4M3;
  if (std::isnan(x) || (e4m3 && std::isinf(x))) return e4m3 ? 0x7f : 0x7e;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isinf(x)) return sign | 0x7c;
  if (x == 0.0) return sign;
  int ex;
  const double f = std::frexp(std::fabs(x), &ex);  // |x| = f * 2^ex, f in [0.5, 1)
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int mant = static_cast<int>((2 * f - 1) * (1 << mbits));
  return static_cast<uint8_t>(sign | ((ex - 1 + bias) << mbits) | mant);
}

double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}

double read_elem(const unsigned char* at, int32_t dtype) {
  if (is_fp8(dtype)) return fp8_value(*at, dtype);
  if (dtype == FMHA_DTYPE_F32) {
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, at, 2);
  if (dtype == FMHA_DTYPE_F16) return half_value(h);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// An element of value x (exactly representable: a multiple of 1/64 in
// [-2, 2]) or one of the non-finite values.
void write_elem(unsigned char* at, int32_t dtype, double x) {
  if (is_fp8(dtype)) {
    *at = fp8_byte(x, dtype);
    return;
  }
  if (dtype == FMHA_DTYPE_F32) {
    const float f = static_cast<float>(x);
    std::memcpy(at, &f, 4);
    return;
  }
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t h;
  if (dtype == FMHA_DTYPE_BF16) {
    h = static_cast<uint16_t>(u >> 16);  // exact for the values used here
  } else if (std::isnan(x)) {
    h = 0x7e00;
  } else if (std::isinf(x)) {
    h = x > 0 ? 0x7c00 : 0xfc00;
  } else {
    // |x| in {0} U [2^-6, 2]: normal in binary16, 10 mantissa bits suffice.
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    h = a == 0 ? sign : static_cast<uint16_t>(sign | (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff));
  }
  std::memcpy(at, &h, 2);
}

// ---- the arena -----------------------------------------------------------------

constexpr size_t kArena = 1 << 16;  // tensors of accepted small problems live here
constexpr size_t kGuard = 64;

// FMHA_FUZZ_CUDA (fuzz_replay_cuda, tools/device/sanitize.sh): the same
// inputs on a CUDA handle, with the arena and the workspace in managed
// memory so the host-side checks read them directly after a synchronize.
#if FMHA_FUZZ_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) violated("%s: %s", what, cudaGetErrorString(e));
}
unsigned char* device_bytes(size_t n) {
  void* p = nullptr;
  cuda_check(cudaMallocManaged(&p, n), "cudaMallocManaged");
  return static_cast<unsigned char*>(p);
}
#endif

struct Arena {
#if FMHA_FUZZ_CUDA
  unsigned char* bytes = device_bytes(kArena);
#else
  alignas(64) unsigned char bytes[kArena];
#endif
  bool contains(uintptr_t first, uint64_t len) const {
    const uintptr_t base = reinterpret_cast<uintptr_t>(bytes);
    return len > 0 && first >= base && first - base <= kArena && len <= kArena - (first - base);
  }
};

Arena& arena() {
  static Arena a;
  return a;
}

// The serving metadata (cu_seqlens_q/k, seqused_k, block_table): kMetaLen
// int32 each, outside the arena (the kernels read them; o never aliases
// them), device-visible on a CUDA handle.
constexpr size_t kMetaLen = 64;
int32_t* metadata() {
#if FMHA_FUZZ_CUDA
  static int32_t* m = reinterpret_cast<int32_t*>(device_bytes(4 * kMetaLen * sizeof(int32_t)));
  return m;
#else
  static int32_t m[4 * kMetaLen];
  return m;
#endif
}

// The 0.3 inputs outside the arena (device-visible on a CUDA handle): kAux
// floats for the descales and ALiBi slopes, and kBiasBytes for the bias.
// Pointers into them may also be wild or into the arena (at o: validation
// must refuse the overlap).
constexpr size_t kAux = 1024;
constexpr size_t kBiasBytes = 1 << 15;
float* aux_floats() {
#if FMHA_FUZZ_CUDA
  static float* a = reinterpret_cast<float*>(device_bytes(kAux * sizeof(float)));
  return a;
#else
  static float a[kAux];
  return a;
#endif
}
unsigned char* bias_bytes() {
#if FMHA_FUZZ_CUDA
  static unsigned char* b = device_bytes(kBiasBytes);
  return b;
#else
  alignas(64) static unsigned char b[kBiasBytes];
  return b;
#endif
}

// [first, first + len) lies inside [base, base + size).
bool inside(const void* first, uint64_t len, const void* base, size_t size) {
  const uintptr_t f = reinterpret_cast<uintptr_t>(first), b = reinterpret_cast<uintptr_t>(base);
  return f >= b && f - b <= size && len <= size - (f - b);
}

// The element offsets of a tensor (none for an empty one), or false when there are more than `cap`
// elements or the offsets overflow.
bool tensor_offsets(const fmha_tensor& t, size_t cap, std::vector<int64_t>* out) {
  out->clear();
  uint64_t count = 1;
  for (int d = 0; d < 4; ++d) {
    if (t.dims[d] < 0 || t.strides[d] < 0) return false;  // 0: an empty tensor, no offsets
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(t.dims[d]), &count) || count > cap) return false;
  }
  for (int64_t b = 0; b < t.dims[0]; ++b)
    for (int64_t h = 0; h < t.dims[1]; ++h)
      for (int64_t i = 0; i < t.dims[2]; ++i)
        for (int64_t e = 0; e < t.dims[3]; ++e) {
          int64_t off = 0, term;
          const int64_t idx[4] = {b, h, i, e};
          for (int d = 0; d < 4; ++d)
            if (__builtin_mul_overflow(idx[d], t.strides[d], &term) || __builtin_add_overflow(off, term, &off))
              return false;
          // Callers scale offsets by an element size (at most 8 bytes): an
          // offset whose byte distance overflows cannot lie in memory this
          // harness owns.
          if (off > INT64_MAX / 8) return false;
          out->push_back(off);
        }
  return true;
}

// ---- building the params ---------------------------------------------------------

int64_t pick_dim(Bytes& in, int64_t small_max) {
  switch (in.below(16)) {
    case 0: return static_cast<int64_t>(in.u64());  // anything, negative included
    case 1: return FMHA_MAX_DIM + in.below(3) - 1;
    case 2: return INT64_MAX - in.below(2);
    case 3: return 0;
    default: return 1 + static_cast<int64_t>(in.below(static_cast<uint32_t>(small_max)));
  }
}

int64_t pick_head_dim(Bytes& in) {
  static const int64_t kDims[] = {1, 2, 3, 4, 8, 16, 17, 32, 64, 96, 128, 256, 512, 513};
  return in.below(8) == 0 ? pick_dim(in, 40) : kDims[in.below(sizeof kDims / sizeof kDims[0])];
}

float pick_float(Bytes& in, const float* usual, int n_usual) {
  const uint32_t c = in.below(static_cast<uint32_t>(n_usual) + 2);
  if (c < static_cast<uint32_t>(n_usual)) return usual[c];
  return c == static_cast<uint32_t>(n_usual) ? in.f32() : std::ldexp(1.f, static_cast<int>(in.below(80)) - 40);
}

struct Shape {
  int64_t B, Hq, Hk, Nq, Nk, D;
};

// Layouts for one tensor of dims [B, H, N, D] (element strides); `packed_w`
// and `packed_off` place it in a packed [B, N, W, D] buffer.
void pick_strides(Bytes& in, const int64_t dims[4], int64_t packed_w, int64_t packed_off, int64_t strides[4],
                  int64_t* offset) {
  const int64_t B = dims[0], H = dims[1], N = dims[2], D = dims[3];
  *offset = 0;
  switch (in.below(10)) {
    case 0: case 1: case 2:  // BHND
      strides[0] = wmul3(H, N, D); strides[1] = wmul(N, D); strides[2] = D; strides[3] = 1;
      break;
    case 3:  // BNHD
      strides[0] = wmul3(N, H, D); strides[1] = D; strides[2] = wmul(H, D); strides[3] = 1;
      break;
    case 4:  // a slice of a packed buffer
      strides[0] = wmul3(N, packed_w, D); strides[1] = D; strides[2] = wmul(packed_w, D); strides[3] = 1;
      *offset = wmul(packed_off, D);
      break;
    case 5:  // head-dim stride 2, padded rows
      strides[3] = 2; strides[2] = wadd(wmul(2, D), 3); strides[1] = wmul(N, strides[2]); strides[0] = wmul(H, strides[1]);
      break;
    case 6:  // broadcast: batch and head stride 0
      strides[0] = 0; strides[1] = 0; strides[2] = D; strides[3] = 1;
      break;
    case 7:  // small arbitrary strides (may self-overlap)
      for (int d = 0; d < 4; ++d) strides[d] = static_cast<int64_t>(in.below(40)) - (in.below(16) == 0 ? 3 : 0);
      break;
    case 8:  // huge strides
      for (int d = 0; d < 4; ++d) strides[d] = in.below(4) == 0 ? static_cast<int64_t>(in.u64() >> in.below(64)) : 1;
      break;
    default:  // BHND with a gap between batches
      strides[3] = 1; strides[2] = D; strides[1] = wmul(N, D); strides[0] = wadd(wmul3(H, N, D), in.below(7));
      break;
  }
  (void)B;
}

// A pointer: into the arena (at a fuzzed, possibly misaligned offset), NULL,
// or wild.
void* pick_pointer(Bytes& in, size_t default_offset) {
  unsigned char* base = arena().bytes;
  switch (in.below(24)) {
    case 0: return nullptr;
    case 1: return reinterpret_cast<void*>(UINTPTR_MAX - in.below(64));
    case 2: return reinterpret_cast<void*>(static_cast<uintptr_t>(in.u64()) & ~uintptr_t{3});
    case 3: return base + in.below(256) * 4;  // likely overlapping another tensor
    case 4: return base + default_offset + 1 + in.below(3);  // misaligned
    default: return base + default_offset;
  }
}

// ---- the 0.3 numerics fields ---------------------------------------------------

// Descales, bias and ALiBi slopes: pointers into aux_floats() and
// bias_bytes(), now and then wild (the extent wraps), misaligned or at o
// (validation must refuse what shares a byte with o or lse).
void pick_numerics(Bytes& in, fmha_forward_params& p, const Shape& sh) {
  float* aux = aux_floats();
  auto aux_ptr = [&]() -> const float* {
    switch (in.below(16)) {
      case 0: return reinterpret_cast<const float*>(UINTPTR_MAX - 3 - 4 * in.below(16));
      case 1: return reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(aux) + 1 + in.below(3));
      case 2: return static_cast<const float*>(p.o.data);
      default: return aux + in.below(kAux / 4);
    }
  };
  if (in.below(2)) p.q_descale = aux_ptr();
  if (in.below(2)) p.k_descale = aux_ptr();
  if (in.below(2)) p.v_descale = aux_ptr();
  if (in.below(2)) {
    p.alibi_slopes = aux_ptr();
    const uint32_t c = in.below(8);
    p.alibi_slopes_stride = c < 4 ? 0 : c < 7 ? wadd(wadd(sh.Hq, in.below(3)), in.below(8) == 0 ? -1 : 0)
                                              : static_cast<int64_t>(in.u64() >> in.below(64));
  } else if (in.below(32) == 0) {
    p.alibi_slopes_stride = 1 + in.below(4);  // without slopes: refused
  }
  if (in.below(3) == 0) return;  // no bias
  const int64_t full[4] = {p.q.dims[0], p.q.dims[1], p.q.dims[2], p.k.dims[2]};
  int64_t* n = p.bias.dims;
  for (int d = 0; d < 4; ++d) {
    const uint32_t c = in.below(16);
    n[d] = c < 10 ? full[d] : c < 15 ? 1 : pick_dim(in, 8);
  }
  int64_t* st = p.bias.strides;
  const auto contiguous = [&]() {
    st[3] = 1; st[2] = n[3]; st[1] = wmul(n[2], n[3]); st[0] = wmul3(n[1], n[2], n[3]);
  };
  switch (in.below(6)) {
    case 3:  // a [.., Nk, Nq] buffer read transposed
      st[2] = 1; st[3] = n[2]; st[1] = wmul(n[2], n[3]); st[0] = wmul3(n[1], n[2], n[3]);
      break;
    case 4:  // stride 0 on some of the full dims (np.broadcast_to, torch's expand)
      contiguous();
      for (int d = 0; d < 4; ++d)
        if (in.below(2)) st[d] = 0;
      break;
    case 5:  // small arbitrary strides
      for (int d = 0; d < 4; ++d) st[d] = static_cast<int64_t>(in.below(40)) - (in.below(16) == 0 ? 1 : 0);
      break;
    default:
      contiguous();
      break;
  }
  static const int32_t kBiasDtypes[] = {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
  const uint32_t dc = in.below(24);
  c_set_dtype(&p.bias, dc == 0 ? static_cast<int>(in.u32()) : dc == 1 ? FMHA_DTYPE_F8E4M3
                                                                       : kBiasDtypes[in.below(3)]);
  switch (in.below(16)) {
    case 0: p.bias.data = nullptr; break;  // no bias: the other fields are ignored
    case 1: p.bias.data = p.o.data; break;
    case 2: p.bias.data = bias_bytes() + 1 + 2 * in.below(2); break;  // misaligned for F16/F32
    case 3: p.bias.data = reinterpret_cast<void*>(UINTPTR_MAX - in.below(64)); break;
    default: p.bias.data = bias_bytes() + 4 * in.below(64); break;
  }
}

// Values for the 0.3 inputs: descales and slopes mostly +-2^-2 .. 2^2 (k/64
// otherwise, never 0); the bias k/64 in [-2, 2] of its dtype with runs of
// -inf (whole rows masked out) and, rarely, +inf or NaN.
void fill_numerics(Bytes& in, const fmha_forward_params& p) {
  uint32_t seed = in.u32() | 1u;
  const auto next = [&]() {
    seed = seed * 1664525u + 1013904223u;
    return seed ^ (seed >> 15);
  };
  float* aux = aux_floats();
  for (size_t x = 0; x < kAux; ++x) {
    const uint32_t r = next();
    const float sign = (r & 2u) ? -1.f : 1.f;
    const int k = static_cast<int>(r >> 8 & 63u) + 1;
    aux[x] = (r & 1u) ? sign * std::ldexp(1.f, static_cast<int>(r >> 4 & 7u) % 5 - 2) : sign * static_cast<float>(k) / 64.f;
  }
  int32_t dtype;
  std::memcpy(&dtype, &p.bias.dtype, sizeof dtype);
  const int32_t fill = elem_size(dtype) > 1 ? dtype : FMHA_DTYPE_F32;
  unsigned char* const buf = bias_bytes();
  // Elements counted from bias.data when it lies in the buffer, so that
  // they are aligned as the tensor reads them.
  unsigned char* first = buf;
  if (inside(p.bias.data, 1, buf, kBiasBytes)) first = static_cast<unsigned char*>(p.bias.data);
  const size_t esz = static_cast<size_t>(elem_size(fill));
  const size_t count = (kBiasBytes - static_cast<size_t>(first - buf)) / esz;
  for (size_t x = 0; x < count; ++x)
    write_elem(first + x * esz, fill, static_cast<double>(static_cast<int>(next() >> 8 & 255u) - 128) / 64.0);
  const int runs = in.below(3) == 0 ? 1 + static_cast<int>(in.below(4)) : 0;
  for (int r = 0; r < runs && count > 0; ++r) {
    const size_t start = in.below(2) ? in.below(64) : next() % count;
    const size_t len = 1 + in.below(80);
    const double value = in.below(12) == 0 ? (in.below(2) ? INFINITY : NAN) : -INFINITY;
    for (size_t x = start; x < std::min(count, start + len); ++x) write_elem(first + x * esz, fill, value);
  }
}

// ---- what the inputs reached (fuzz_replay prints it) -----------------------------

struct Stats {
  long inputs = 0, accepted = 0, forwards = 0, serving_forwards = 0, numerics_forwards = 0, fp8_forwards = 0,
       rows_checked = 0, rows_nan = 0, rows_empty = 0;
  long merge_inputs = 0, merges = 0, merge_rows_checked = 0;
} g_stats;

// ---- the float64 reference -----------------------------------------------------

bool visible(int64_t i, int64_t j, int64_t nq, int64_t nk, uint32_t flags, int32_t wl, int32_t wr) {
  // fmha.h, "masks": diagonal d(i) = i + Nk - Nq, or i with the top-left flag.
  const int64_t d = (flags & FMHA_MASK_CAUSAL_TOP_LEFT) ? i : i + nk - nq;
  if (flags != 0 && j > d) return false;
  if (wl >= 0 && j < d - wl) return false;
  if (wr >= 0 && j > d + wr) return false;
  return true;
}

struct Views {
  const fmha_tensor* t[4];  // q, k, v, o
};

double at(const unsigned char* snapshot, const fmha_tensor& t, int32_t dtype, int64_t b, int64_t h, int64_t i,
          int64_t e) {
  const unsigned char* base = snapshot + (static_cast<const unsigned char*>(t.data) - arena().bytes);
  const int64_t off = b * t.strides[0] + h * t.strides[1] + i * t.strides[2] + e * t.strides[3];
  return read_elem(base + off * elem_size(dtype), dtype);
}

// The 0.3 terms of the logit of (b, h, i, j) and the factors of a row, as
// fmha.h defines them; all neutral when the struct does not carry them.
struct Numerics {
  const fmha_forward_params& p;
  const unsigned char* snapshot;
  bool on;  // struct_size covers the 0.3 fields

  static double factor(const float* f, int64_t at) { return f ? static_cast<double>(f[at]) : 1.0; }
  double qk_descale(int64_t b, int64_t hk) const {
    return on ? factor(p.q_descale, b * p.k.dims[1] + hk) * factor(p.k_descale, b * p.k.dims[1] + hk) : 1.0;
  }
  double v_descale(int64_t b, int64_t hk) const { return on ? factor(p.v_descale, b * p.k.dims[1] + hk) : 1.0; }
  // bias[b, h, i, j] - slope[b, h] * |d(i) - j|.
  double additive(int64_t b, int64_t h, int64_t i, int64_t j, int64_t diag) const {
    if (!on) return 0.0;
    double x = 0.0;
    if (p.bias.data != nullptr) {
      const int64_t idx[4] = {b, h, i, j};
      int64_t off = 0;
      for (int d = 0; d < 4; ++d) off += (p.bias.dims[d] == 1 ? 0 : idx[d]) * p.bias.strides[d];
      int32_t dtype;
      std::memcpy(&dtype, &p.bias.dtype, sizeof dtype);
      const unsigned char* base = static_cast<const unsigned char*>(p.bias.data);
      if (arena().contains(reinterpret_cast<uintptr_t>(base), 1)) base = snapshot + (base - arena().bytes);
      x += read_elem(base + off * elem_size(dtype), dtype);
    }
    if (p.alibi_slopes != nullptr)
      x -= static_cast<double>(p.alibi_slopes[b * p.alibi_slopes_stride + h]) * static_cast<double>(std::llabs(diag - j));
    return x;
  }
};

// Compares o and lse of an accepted forward with the float64 reference,
// computed from `snapshot` (the arena before the call). dt: the dtypes of
// q, k, v and o.
void check_numerics(const fmha_forward_params& p, const int32_t dt[4], const unsigned char* snapshot) {
  const int64_t B = p.q.dims[0], Hq = p.q.dims[1], Hk = p.k.dims[1], Nq = p.q.dims[2], Nk = p.k.dims[2],
                D = p.q.dims[3];
  const Numerics num{p, snapshot, p.struct_size == FMHA_FORWARD_PARAMS_SIZE_V3};
  const double scale = p.scale != 0.f ? static_cast<double>(p.scale)
                                      : static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))));
  auto eps = [](int32_t dtype) {
    return dtype == FMHA_DTYPE_F32 ? 1e-6 : dtype == FMHA_DTYPE_F16 ? 1e-3 : dtype == FMHA_DTYPE_BF16 ? 8e-3
           : dtype == FMHA_DTYPE_F8E4M3 ? 0.0625 : 0.125;
  };
  const double out_eps = eps(dt[3]);
  // The CUDA tensor-core kernel rounds the probabilities to the input dtype
  // for P V: an error of that order times max |v|. The CPU keeps them FP32,
  // except its amx path beside BF16 q or K/V, which rounds P to BF16 (at
  // most 2^-9 relative, granted twice; README, the accuracy table). Its P
  // for F16 q with F16 or FP8 K/V keeps 16 bits (2^-17 relative, random in
  // sign), which the FP32 terms below cover: no grant there.
  const bool p_bf16 = dt[0] == FMHA_DTYPE_BF16 || dt[1] == FMHA_DTYPE_BF16;
  const double p_eps = FMHA_FUZZ_CUDA ? eps(dt[2]) : p_bf16 ? 0x1p-8 : 0.0;
  // A scale this large makes scale * q overflow FP32 inside the kernel
  // (inf, or NaN against a zero k) where float64 stays finite: only the
  // memory invariants apply then. (Descales are at most 4 in magnitude.)
  if (scale > 1e28) return;
  // Empty work: no row to check (and Nk may then be anything a stride-0
  // view allows, far past what a score row can hold).
  if (B == 0 || Nq == 0) return;
  std::vector<double> s(static_cast<size_t>(Nk));
  std::vector<char> vis(static_cast<size_t>(Nk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hk);
      const double qk_scale = scale * num.qk_descale(b, hk), vd = num.v_descale(b, hk);
      for (int64_t i = 0; i < Nq; ++i) {
        const int64_t diag = (p.mask_flags & FMHA_MASK_CAUSAL_TOP_LEFT) ? i : i + Nk - Nq;
        const double lse_got = p.lse ? p.lse[(b * Hq + h) * Nq + i] : 0.0;
        auto o_got = [&](int64_t e) { return read_elem(static_cast<const unsigned char*>(p.o.data) +
                                                           (b * p.o.strides[0] + h * p.o.strides[1] +
                                                            i * p.o.strides[2] + e * p.o.strides[3]) * elem_size(dt[3]),
                                                       dt[3]); };
        // Keys with weight: visible, and a logit above -inf (e^-inf = 0).
        int64_t n_vis = 0;
        bool logits_nan = false;
        double abs_dot_max = 0.0, extra_max = 0.0;
        for (int64_t j = 0; j < Nk; ++j) {
          vis[j] = visible(i, j, Nq, Nk, p.mask_flags, p.window_left, p.window_right);
          if (!vis[j]) continue;
          double dot = 0.0, abs_dot = 0.0;
          for (int64_t e = 0; e < D; ++e) {
            const double qv = at(snapshot, p.q, dt[0], b, h, i, e), kv = at(snapshot, p.k, dt[1], b, hk, j, e);
            dot += qv * kv;
            abs_dot += std::fabs(qv * kv);
          }
          if (std::isfinite(abs_dot))
            abs_dot_max = std::max(abs_dot_max, abs_dot * std::max(scale, std::fabs(qk_scale)));
          double x = dot * qk_scale;
          if (p.softcap != 0.f) x = p.softcap * std::tanh(x / p.softcap);  // +-inf -> +-softcap
          const double extra = num.additive(b, h, i, j, diag);
          if (std::isfinite(extra)) extra_max = std::max(extra_max, std::fabs(extra));
          x += extra;
          s[j] = x;
          if (std::isnan(x) || x == INFINITY) logits_nan = true;  // fmha.h: the row is NaN
          if (x == -INFINITY) vis[j] = 2;                         // seen, weight 0
          n_vis += vis[j] == 1;
        }
        if (logits_nan) {  // NaN or +inf reached the logits: O and lse NaN
          ++g_stats.rows_nan;
          if (p.lse && !std::isnan(lse_got)) violated("row (%lld,%lld,%lld) has a non-finite logit but lse = %g", (long long)b, (long long)h, (long long)i, lse_got);
          for (int64_t e = 0; e < D; ++e)
            if (!std::isnan(o_got(e))) violated("row (%lld,%lld,%lld) has a non-finite logit but O[%lld] = %g", (long long)b, (long long)h, (long long)i, (long long)e, o_got(e));
          continue;
        }
        if (n_vis == 0 && !logits_nan) {  // no key with weight: O = 0 exactly, lse = -inf
          ++g_stats.rows_empty;
          for (int64_t e = 0; e < D; ++e)
            if (o_got(e) != 0.0) violated("row (%lld,%lld,%lld) sees no key but O[%lld] = %g", (long long)b, (long long)h, (long long)i, (long long)e, o_got(e));
          if (p.lse && !(std::isinf(lse_got) && lse_got < 0)) violated("row sees no key but lse = %g", lse_got);
          continue;
        }
        // F32 logits overflow (or lose every digit) past this; the row is then
        // only checked for not crashing.
        if (abs_dot_max > 1e30) continue;
        double m = -INFINITY;
        for (int64_t j = 0; j < Nk; ++j)
          if (vis[j] == 1) m = std::max(m, s[j]);
        double l = 0.0;
        for (int64_t j = 0; j < Nk; ++j)
          if (vis[j] == 1) l += std::exp(s[j] - m);
        const double lse_ref = m + std::log(l);
        ++g_stats.rows_checked;
        // Error budget: the logits are rounded to FP32 relative to the sum of
        // |q_d k_d| (times scale), which moves probabilities by that much.
        // (Worst case: D roundings of 2^-24 each; the softcap's tanh adds
        // ~3e-7 of softcap; the bias and ALiBi terms are added in FP32.)
        const double logit_err = 1.2e-7 * static_cast<double>(D) * (abs_dot_max + 1.0) +
                                 (p.softcap != 0.f ? 4e-7 * p.softcap : 0.0) + 2.4e-7 * (extra_max + 1.0);
        if (p.lse && !(std::fabs(lse_got - lse_ref) <= 1e-5 * std::fabs(lse_ref) + 4 * logit_err + 1e-5))
          violated("row (%lld,%lld,%lld): lse %.9g, reference %.9g", (long long)b, (long long)h, (long long)i, lse_got, lse_ref);
        for (int64_t e = 0; e < D; ++e) {
          double ref = 0.0, vmax = 0.0;
          bool v_nonfinite = false;
          for (int64_t j = 0; j < Nk; ++j) {
            if (!vis[j]) continue;
            const double vv = at(snapshot, p.v, dt[2], b, hk, j, e);
            if (!std::isfinite(vv)) v_nonfinite = true;  // at any key the row sees
            if (vis[j] != 1) continue;
            vmax = std::max(vmax, std::fabs(vv));
            ref += std::exp(s[j] - m) / l * vv;
          }
          if (v_nonfinite) continue;  // NaN or inf, or finite at weight 0: fmha.h
          ref *= vd;
          if (dt[3] == FMHA_DTYPE_F16 && std::fabs(ref) > 65000.0) continue;  // past F16: inf is right
          const double got = o_got(e);
          const double tol = out_eps * std::fabs(ref) + (8 * logit_err + 4e-6 + p_eps) * vmax * std::fabs(vd);
          if (!(std::fabs(got - ref) <= tol))
            violated("row (%lld,%lld,%lld) O[%lld] = %.9g, reference %.9g (tol %.3g, dtypes q %d kv %d o %d)",
                     (long long)b, (long long)h, (long long)i, (long long)e, got, ref, tol, dt[0], dt[1], dt[3]);
        }
      }
    }
}

// ---- one input -----------------------------------------------------------------

#if FMHA_FUZZ_CUDA
// The CUDA handle every input runs on (the thread count byte is ignored);
// exits 77, "skipped", without a usable GPU.
fmha_handle cpu_handle(int) {
  static fmha_handle h = nullptr;
  if (h == nullptr && fmha_create(&h, FMHA_DEVICE_CUDA, 0) != FMHA_SUCCESS) {
    std::printf("fuzz_replay_cuda: skipped: %s\n", fmha_last_error_message());
    std::exit(77);
  }
  return h;
}
#else
fmha_handle cpu_handle(int threads) {
  static fmha_handle handles[4] = {};
  fmha_handle& h = handles[threads - 1];
  if (h == nullptr) {
    if (checked(fmha_create(&h, FMHA_DEVICE_CPU, 0), "fmha_create") != FMHA_SUCCESS) violated("no CPU handle");
    checked(fmha_set_num_threads(h, threads), "fmha_set_num_threads");
  }
  return h;
}
#endif

void side_calls(Bytes& in) {
  // Enum arguments of any int, through C (c_callers.c), and the other
  // entry points with odd arguments.
  const int value = static_cast<int>(in.u32());
  const char* text = c_status_string(value);
  if (text == nullptr || text[0] == '\0') violated("fmha_status_string(%d) is empty", value);
  fmha_handle h = reinterpret_cast<fmha_handle>(0x10);
  const int kind = in.below(4) == 0 ? static_cast<int>(in.u32()) : static_cast<int>(in.below(3));
  const int ordinal = in.below(4) == 0 ? static_cast<int>(in.u32()) : 0;
  const fmha_status s = checked(c_create_with_kind(&h, kind, ordinal), "fmha_create");
  if (s != FMHA_SUCCESS && h != nullptr) violated("fmha_create failed but set a handle");
  if (s == FMHA_SUCCESS) {
    checked(fmha_set_num_threads(h, static_cast<int>(in.u32() % 5) - 1), "fmha_set_num_threads");
    checked(fmha_set_stream(h, in.below(2) ? nullptr : reinterpret_cast<void*>(0x20)), "fmha_set_stream");
    // fmha_set_parallel_for (no input bytes, so the corpus reads as before):
    // a user without fn is refused on every handle; NULL restores the pool.
    if (checked(fmha_set_parallel_for(h, nullptr, &in), "fmha_set_parallel_for") != FMHA_ERROR_INVALID_ARGUMENT)
      violated("fmha_set_parallel_for accepted user without fn");
    checked(fmha_set_parallel_for(h, nullptr, nullptr), "fmha_set_parallel_for");
    fmha_destroy(h);
  }
  const int idx = static_cast<int>(in.u32());
  const char* name = fmha_kernel_name(idx);
  if ((idx >= 0 && idx < fmha_kernel_count()) != (name != nullptr)) violated("fmha_kernel_name(%d)", idx);
}

void run_one(Bytes& in) {
  if (in.below(8) == 0) side_calls(in);
  fmha_handle h = cpu_handle(1 + static_cast<int>(in.below(3)));

  // Shape and dtype.
  Shape sh;
  sh.B = in.below(6) == 0 ? pick_dim(in, 4) : 1 + in.below(2);
  sh.Hk = in.below(6) == 0 ? pick_dim(in, 4) : 1 + in.below(2);
  sh.Hq = in.below(6) == 0 ? pick_dim(in, 8) : wmul(sh.Hk, 1 + in.below(3));
  sh.Nq = in.below(6) == 0 ? pick_dim(in, 70) : 1 + in.below(70);
  sh.Nk = in.below(6) == 0 ? pick_dim(in, 70) : 1 + in.below(70);
  sh.D = pick_head_dim(in);
  static const int32_t kDtypes[] = {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
  const int32_t dtype = in.below(16) == 0 ? static_cast<int32_t>(in.u32()) : kDtypes[in.below(3)];
  const int esz = elem_size(dtype) ? elem_size(dtype) : 2;
  // The dtype each tensor should have: dtype, until the 0.3 dtypes below
  // retype them (a tensor given a random dtype keeps it).
  int32_t want_dtype[4] = {dtype, dtype, dtype, dtype};
  bool random_dtype[4] = {};

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  const int64_t qdims[4] = {sh.B, sh.Hq, sh.Nq, sh.D}, kvdims[4] = {sh.B, sh.Hk, sh.Nk, sh.D};
  const int64_t W = wadd(sh.Hq, wmul(2, sh.Hk)) > 0 ? wadd(sh.Hq, wmul(2, sh.Hk)) : 1;  // packed q|k|v heads
  fmha_tensor* ts[4] = {&p.q, &p.k, &p.v, &p.o};
  const int64_t* dims_of[4] = {qdims, kvdims, kvdims, qdims};
  const int64_t packed_head[4] = {0, sh.Hq, wadd(sh.Hq, sh.Hk), 0};
  // Default placement: q, k, v and o one after another, or q, k, v packed.
  size_t cursor = 0;
  for (int t = 0; t < 4; ++t) {
    std::memcpy(ts[t]->dims, dims_of[t], sizeof ts[t]->dims);
    int64_t offset = 0;
    pick_strides(in, dims_of[t], W, packed_head[t], ts[t]->strides, &offset);
    if (in.below(12) == 0)  // one dim of another size
      ts[t]->dims[in.below(4)] = pick_dim(in, 8);
    // Extent in elements (saturating), to place the next tensor after it.
    uint64_t extent = 1;
    for (int d = 0; d < 4; ++d) {
      const int64_t n = ts[t]->dims[d], s = ts[t]->strides[d];
      uint64_t term;
      if (n > 0 && s > 0 &&
          (__builtin_mul_overflow(static_cast<uint64_t>(n - 1), static_cast<uint64_t>(s), &term) ||
           __builtin_add_overflow(extent, term, &extent)))
        extent = UINT64_MAX / 8;
    }
    const bool packed = offset != 0 || (t == 0 && ts[t]->strides[2] == wmul(W, sh.D) && ts[t]->strides[1] == sh.D);
    const size_t at = packed ? static_cast<size_t>(offset) * static_cast<size_t>(esz) : cursor;
    ts[t]->data = pick_pointer(in, at % kArena);
    if (!packed || t == 3) cursor = std::min<uint64_t>(kArena, cursor + (extent + 3) / 4 * 4 * esz);
    if (t == 0 && packed)
      cursor = std::min<uint64_t>(kArena, static_cast<uint64_t>(wmul(wmul3(sh.B, sh.Nq, W), wmul(sh.D, esz))));
    random_dtype[t] = in.below(24) == 0;
    if (random_dtype[t]) want_dtype[t] = static_cast<int32_t>(in.u32());
    c_set_dtype(ts[t], want_dtype[t]);
  }
  // lse after everything else, or elsewhere.
  const uint32_t lse_choice = in.below(6);
  if (lse_choice < 2) {
    p.lse = nullptr;
  } else {
    p.lse = static_cast<float*>(pick_pointer(in, (cursor + 3) / 4 * 4 % kArena));
  }

  // Everything else.
  p.mask_flags = in.below(8) == 0 ? in.u32() : in.below(4);
  auto window = [&]() -> int32_t {
    const uint32_t c = in.below(10);
    return c < 3 ? -1 : c < 8 ? static_cast<int32_t>(in.below(20)) : static_cast<int32_t>(in.u32());
  };
  p.window_left = window();
  p.window_right = window();
  static const float kScales[] = {0.f, 0.f, 0.f, 1.f, 0.5f, 0.125f, 3.f};
  static const float kCaps[] = {0.f, 0.f, 0.f, 0.f, 1.f, 5.f, 30.f, FLT_MIN, 1e-39f, 1e-3f};
  p.scale = pick_float(in, kScales, sizeof kScales / sizeof kScales[0]);
  p.softcap = pick_float(in, kCaps, sizeof kCaps / sizeof kCaps[0]);
  static const char* const kKernels[] = {nullptr, nullptr, nullptr, "cpu_tiled", "cuda_generic", "cuda_sm80_tc", "", "x"};
  p.kernel = kKernels[in.below(8)];
  p.num_splits = in.below(6) == 0 ? static_cast<int32_t>(in.u32()) : static_cast<int32_t>(in.below(3));
  if (in.below(32) == 0) p.reserved_ = static_cast<int32_t>(in.u32());
  // The 0.2 serving fields, now and then: host-known values small, at the
  // edges or anything; metadata contents anything (the kernels must stay
  // in bounds whatever they hold). A V1 struct_size must hide them.
  bool serving = false;
  if (in.below(4) == 0) {
    serving = true;
    int32_t* meta = metadata();
    // From a seed, so the contents do not use up the input: mostly small
    // (-2..37), a quarter anything (huge and negative included).
    uint32_t x32 = in.u32() | 1u;
    for (size_t x = 0; x < 4 * kMetaLen; ++x) {
      x32 = x32 * 1664525u + 1013904223u;
      const uint32_t r = x32 ^ (x32 >> 15) * 2654435761u;
      meta[x] = (r & 3u) == 0 ? static_cast<int32_t>(r) : static_cast<int32_t>(r >> 8 & 0xffu) % 40 - 2;
    }
    const uint32_t which = in.u8();
    const bool ragged_q = which & 1u, paged = which & 4u, ragged_k = (which & 2u) && !paged;
    auto small_or_any = [&](uint32_t edge) -> int32_t {
      return in.below(8) == 0 ? static_cast<int32_t>(in.u32()) : static_cast<int32_t>(in.below(edge));
    };
    auto upto = [&](int64_t n) {  // in [0, min(n, 80)]
      return static_cast<int32_t>(in.below(static_cast<uint32_t>(std::clamp<int64_t>(n, 0, 80) + 1)));
    };
    if (ragged_q) p.cu_seqlens_q = meta;
    if (ragged_k) p.cu_seqlens_k = meta + kMetaLen;
    if (paged || (which & 8u)) p.seqused_k = meta + 2 * kMetaLen;
    if (paged) p.block_table = meta + 3 * kMetaLen;
    if (in.below(8) == 0) {  // fields at random: mostly refused, each with its message
      p.num_seqs = small_or_any(kMetaLen - 1);
      p.max_seqlen_q = small_or_any(80);
      p.max_seqlen_k = small_or_any(80);
      p.block_table_stride = in.below(8) == 0 ? static_cast<int64_t>(in.u64()) : static_cast<int64_t>(in.below(8));
      if (which & 16u) p.cu_seqlens_k = meta + kMetaLen;  // with a block table: exclusive
      if (which & 32u) p.seqused_k = nullptr;
    } else {  // consistent fields, so that forwards run
      if (ragged_q) p.q.dims[0] = p.o.dims[0] = 1;
      if (ragged_k) p.k.dims[0] = p.v.dims[0] = 1;
      if (ragged_q || ragged_k)
        p.num_seqs = !ragged_q ? static_cast<int32_t>(std::clamp<int64_t>(p.q.dims[0], 0, INT32_MAX))
                     : !ragged_k && !paged ? static_cast<int32_t>(std::clamp<int64_t>(p.k.dims[0], 0, INT32_MAX))
                                           : static_cast<int32_t>(in.below(kMetaLen));
      if (ragged_q) p.max_seqlen_q = upto(p.q.dims[2]);
      if (ragged_k) p.max_seqlen_k = upto(p.k.dims[2]);
      if (paged) {
        p.block_table_stride = 1 + in.below(7);
        p.max_seqlen_k = in.below(2) ? 0 : upto(p.block_table_stride * std::clamp<int64_t>(p.k.dims[2], 0, 80));
      }
    }
    if (in.below(16) == 0) p.reserved2_ = static_cast<int32_t>(in.u32());
  }
  // 0.3 dtypes, read here (after the fields above, so the corpus of 0.2
  // reads as before; an exhausted input reads 0 = none): FP8 K/V under an
  // F16/BF16/FP8 q, another o dtype, and combinations validation refuses
  // (F32 q over FP8 K/V, an FP8 o, v not k). The tensors were placed for
  // dtype's element size: q, k, v only shrink; o grows (F32 over 16-bit
  // inputs) only without an lse, which would otherwise follow it.
  {
    int32_t nd[4] = {dtype, dtype, dtype, dtype};
    switch (in.below(8)) {
      case 1: case 2: {
        static const int32_t kQ[] = {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F8E4M3, FMHA_DTYPE_F8E5M2};
        nd[0] = kQ[in.below(4)];
        nd[1] = nd[2] = in.below(2) ? FMHA_DTYPE_F8E4M3 : FMHA_DTYPE_F8E5M2;
        nd[3] = kDtypes[in.below(3)];
        break;
      }
      case 3:
        nd[3] = kDtypes[in.below(3)];
        break;
      case 4: {  // refused combinations
        const uint32_t c = in.below(3);
        if (c == 0) { nd[0] = FMHA_DTYPE_F32; nd[1] = nd[2] = FMHA_DTYPE_F8E4M3; }
        if (c == 1) nd[3] = FMHA_DTYPE_F8E5M2;
        if (c == 2) nd[2] = FMHA_DTYPE_F8E4M3;
        break;
      }
      default:
        break;
    }
    if (elem_size(nd[3]) > esz && p.lse != nullptr) nd[3] = FMHA_DTYPE_F16;
    for (int t = 0; t < 4; ++t)
      if (!random_dtype[t] && elem_size(dtype) != 0 && (elem_size(nd[t]) <= esz || t == 3)) {
        want_dtype[t] = nd[t];
        c_set_dtype(ts[t], nd[t]);
      }
  }
  // The 0.3 numerics fields, now and then (all NULL/0 otherwise).
  const bool numerics = in.below(3) == 1;
  if (numerics) pick_numerics(in, p, sh);
  if (in.below(32) == 0) {
    const uint32_t c = in.below(4);
    p.struct_size = c == 0 ? FMHA_FORWARD_PARAMS_SIZE_V1 : c == 1 ? FMHA_FORWARD_PARAMS_SIZE_V2 : in.u32();
  }
  const bool null_params = in.below(64) == 0;

  // Data: values k/64 in [-2, 2] (k/8 or k/4 in FP8), a few non-finite
  // ones when asked for.
  Arena& a = arena();
  uint32_t seed = in.u32() | 1u;
  const int32_t fill_dtype = elem_size(want_dtype[0]) > 1 ? want_dtype[0] : elem_size(dtype) ? dtype : FMHA_DTYPE_F16;
  const int fill_esz = elem_size(fill_dtype);
  for (size_t off = 0; off + fill_esz <= kArena; off += fill_esz) {
    seed = seed * 1664525u + 1013904223u;
    write_elem(a.bytes + off, fill_dtype, static_cast<double>(static_cast<int>(seed >> 24) - 128) / 64.0);
  }
  // FP8 inputs: their own elements rewritten in their format (where the
  // views are small enough to enumerate and lie in the arena).
  std::vector<int64_t> fp8_offs;
  for (int t = 0; t < 3; ++t) {
    if (!is_fp8(want_dtype[t]) || !tensor_offsets(*ts[t], 1 << 15, &fp8_offs)) continue;
    for (int64_t off : fp8_offs) {
      const uintptr_t addr = reinterpret_cast<uintptr_t>(ts[t]->data) + static_cast<uintptr_t>(off);
      if (!a.contains(addr, 1)) continue;  // (address arithmetic: the pointer may be wild)
      unsigned char* at = reinterpret_cast<unsigned char*>(addr);
      seed = seed * 1664525u + 1013904223u;
      const int steps = want_dtype[t] == FMHA_DTYPE_F8E4M3 ? 8 : 4;  // exact multiples of 1/steps
      write_elem(at, want_dtype[t], static_cast<double>(static_cast<int>(seed >> 24) % (2 * steps + 1) - steps) * 2 / (2 * steps));
    }
  }
  const int nonfinite = in.below(4) == 0 ? 1 + static_cast<int>(in.below(6)) : 0;
  for (int n = 0; n < nonfinite; ++n) {
    // Near the start of q, k or v, where small problems read.
    const uint32_t t = in.below(3);
    const uintptr_t base = reinterpret_cast<uintptr_t>(ts[t]->data);
    const uintptr_t arena_base = reinterpret_cast<uintptr_t>(a.bytes);
    const size_t start = base >= arena_base && base - arena_base < kArena ? base - arena_base : 0;
    const int32_t bad_dtype = is_fp8(want_dtype[t]) ? want_dtype[t] : fill_dtype;
    const size_t bsz = static_cast<size_t>(elem_size(bad_dtype));
    const size_t off = (start + in.below(256) * bsz * (1 + in.below(4))) % kArena / bsz * bsz;
    static const double kBad[] = {NAN, INFINITY, -INFINITY};
    write_elem(a.bytes + off, bad_dtype, kBad[in.below(3)]);
  }
  if (numerics) fill_numerics(in, p);
  const std::vector<unsigned char> snapshot(a.bytes, a.bytes + kArena);

  // 1. The workspace query.
  size_t ws_bytes = 0;
  const fmha_status s_ws = checked(fmha_forward_workspace_size(h, null_params ? nullptr : &p,
                                                               in.below(32) == 0 ? nullptr : &ws_bytes),
                                   "fmha_forward_workspace_size");
  const std::string ws_message = fmha_last_error_message();

  // 2. explain into a tiny buffer with guard bytes.
  const size_t len = 1 + in.below(24);
  char buf[24 + kGuard];
  std::memset(buf, 0x5a, sizeof buf);
  const fmha_status s_ex = checked(fmha_forward_explain(h, null_params ? nullptr : &p, buf, len), "fmha_forward_explain");
  if (std::memchr(buf, '\0', len) == nullptr) violated("explain left no NUL in its %zu bytes", len);
  for (size_t i = len; i < sizeof buf; ++i)
    if (buf[i] != 0x5a) violated("explain wrote past its %zu bytes", len);
  if (std::memcmp(a.bytes, snapshot.data(), kArena) != 0) violated("a query wrote to the tensors");

  // The overlap verdicts against brute force, for small in-arena views:
  // byte sets of q, k, v, o (elements enumerated) and lse.
  std::vector<int64_t> offs[4];
  bool in_arena = !null_params;
  for (int t = 0; t < 4 && in_arena; ++t) {
    int32_t t_dtype;
    std::memcpy(&t_dtype, &ts[t]->dtype, sizeof t_dtype);
    if (t_dtype != want_dtype[t] || elem_size(t_dtype) == 0) in_arena = false;
  }
  for (int t = 0; t < 4 && in_arena; ++t) {
    const int es = elem_size(want_dtype[t]);
    in_arena = tensor_offsets(*ts[t], 1 << 14, &offs[t]);
    for (int64_t off : offs[t])
      if (!in_arena || off > static_cast<int64_t>(kArena) ||
          !a.contains(reinterpret_cast<uintptr_t>(ts[t]->data) + static_cast<uintptr_t>(off * es), es))
        in_arena = false;
  }
  const int64_t rows = in_arena ? p.q.dims[0] * p.q.dims[1] * p.q.dims[2] : 0;
  if (in_arena && p.lse != nullptr && !a.contains(reinterpret_cast<uintptr_t>(p.lse), rows * 4)) in_arena = false;

  // The 0.3 inputs as the library reads them (only with a struct that
  // carries them): byte ranges of the descales and slopes, offsets of the
  // bias. `numerics_readable`: all lie in memory this harness owns, so an
  // accepted forward may run.
  const bool v3 = p.struct_size == FMHA_FORWARD_PARAMS_SIZE_V3;
  const int64_t batch = p.cu_seqlens_q || p.cu_seqlens_k ? p.num_seqs : p.q.dims[0];
  struct Extra {
    const void* data;
    uint64_t bytes;                 // descales, slopes
    std::vector<int64_t> offsets;   // bias: element offsets
    int esize;
  } extra[5] = {};
  bool numerics_readable = true;
  if (v3 && !null_params) {
    const float* descale[3] = {p.q_descale, p.k_descale, p.v_descale};
    for (int i = 0; i < 3; ++i) {
      extra[i].data = descale[i];
      if (descale[i] != nullptr && batch > 0 && p.k.dims[1] > 0)
        extra[i].bytes = static_cast<uint64_t>(std::min<double>(static_cast<double>(batch) * static_cast<double>(p.k.dims[1]) * 4.0, 1e18));
    }
    extra[4].data = p.alibi_slopes;
    if (p.alibi_slopes != nullptr && batch > 0)
      extra[4].bytes = static_cast<uint64_t>(std::clamp<double>(
          (static_cast<double>(batch - 1) * static_cast<double>(p.alibi_slopes_stride) + static_cast<double>(p.q.dims[1])) * 4.0,
          0.0, 1e18));
    if (p.bias.data != nullptr) {
      int32_t bd;
      std::memcpy(&bd, &p.bias.dtype, sizeof bd);
      extra[3].data = p.bias.data;
      extra[3].esize = elem_size(bd);
      // Dims of 1 broadcast (their stride is ignored): tensor_offsets reads index 0 only.
      if (extra[3].esize == 0 || !tensor_offsets(p.bias, 1 << 16, &extra[3].offsets)) numerics_readable = false;
      for (int64_t off : extra[3].offsets) {
        const uintptr_t at = reinterpret_cast<uintptr_t>(p.bias.data) + static_cast<uintptr_t>(off * extra[3].esize);
        if (!inside(reinterpret_cast<const void*>(at), extra[3].esize, bias_bytes(), kBiasBytes) &&
            !a.contains(at, extra[3].esize)) {
          numerics_readable = false;
          break;
        }
      }
    }
    for (int i : {0, 1, 2, 4})
      if (extra[i].bytes > 0 && !inside(extra[i].data, extra[i].bytes, aux_floats(), kAux * sizeof(float)) &&
          !a.contains(reinterpret_cast<uintptr_t>(extra[i].data), extra[i].bytes))
        numerics_readable = false;
  }

  if (in_arena) {
    static const char* const kNames[10] = {"q", "k", "v", "o", "lse", "q_descale", "k_descale", "v_descale", "bias",
                                           "alibi_slopes"};
    std::vector<uint32_t> owner(kArena, 0);  // bit t: tensor t (4 = lse, 5.. the 0.3 inputs) holds the byte
    bool o_self = false;
    auto mark = [&](int t, size_t at, size_t n) {
      for (size_t x = 0; x < n && at + x < kArena; ++x) {
        if (t == 3 && (owner[at + x] & 8u)) o_self = true;
        owner[at + x] |= 1u << t;
      }
    };
    for (int t = 0; t < 4; ++t) {
      const int es = elem_size(want_dtype[t]);
      for (int64_t off : offs[t]) mark(t, reinterpret_cast<unsigned char*>(ts[t]->data) - a.bytes + off * es, es);
    }
    if (p.lse) mark(4, reinterpret_cast<unsigned char*>(p.lse) - a.bytes, rows * 4);
    // The 0.3 inputs that point into the arena (at o), where they lie in it.
    for (int i = 0; i < 5; ++i) {
      const uintptr_t at = reinterpret_cast<uintptr_t>(extra[i].data);
      if (i == 3) {
        for (int64_t off : extra[3].offsets) {
          const uintptr_t e = at + static_cast<uintptr_t>(off * extra[3].esize);
          if (a.contains(e, extra[3].esize)) mark(5 + i, e - reinterpret_cast<uintptr_t>(a.bytes), extra[3].esize);
        }
      } else if (extra[i].bytes > 0 && a.contains(at, 1)) {
        mark(5 + i, at - reinterpret_cast<uintptr_t>(a.bytes), extra[i].bytes);
      }
    }
    bool pairs[10][10] = {};  // x and y share a byte
    for (uint32_t w : owner)
      if (w & (w - 1))
        for (int x = 0; x < 10; ++x)
          for (int y = 0; y < 10; ++y)
            if (x != y && (w >> x & 1u) && (w >> y & 1u)) pairs[x][y] = true;
    auto meet = [&](int x, int y) { return pairs[x][y]; };
    if (s_ws == FMHA_SUCCESS) {
      if (o_self) violated("accepted an o that overlaps itself");
      for (int y : {0, 1, 2})
        if (meet(3, y)) violated("accepted an o that overlaps %s", kNames[y]);
      for (int y : {0, 1, 2, 3})
        if (p.lse && meet(4, y)) violated("accepted an lse that overlaps %s", kNames[y]);
      for (int y = 5; y < 10; ++y) {
        if (meet(3, y)) violated("accepted an o that overlaps %s", kNames[y]);
        if (p.lse && meet(4, y)) violated("accepted an lse that overlaps %s", kNames[y]);
      }
    }
    // An exact refusal ("X overlaps Y (", "makes o overlap itself") must be true.
    for (int x : {3, 4})
      for (int y : {0, 1, 2, 3, 5, 6, 7, 8, 9}) {
        const std::string claim = std::string(kNames[x]) + " overlaps " + kNames[y] + " (";
        if (ws_message.rfind(claim, 0) == 0 && !meet(x, y))
          violated("refused as \"%s\" but they are disjoint: %s", claim.c_str(), ws_message.c_str());
      }
    if (ws_message.find("makes o overlap itself") != std::string::npos && !o_self)
      violated("refused o as self-overlapping, but it is not: %s", ws_message.c_str());
  }

  // 3. The forward, when the query succeeded.
  if (s_ws != FMHA_SUCCESS || null_params) return;
  ++g_stats.accepted;
  const bool small = in_arena && static_cast<double>(rows) * p.k.dims[2] * p.q.dims[3] <= 2e5;
  const uint32_t ws_choice = in.below(8);
  const size_t give = ws_choice == 0 && ws_bytes > 0 ? ws_bytes - 1 : ws_bytes;
  if (!small) return;  // accepted but too large (or outside the arena) to run here
  if (!numerics_readable) return;  // descales, bias or slopes outside memory this harness owns
  if (serving && p.struct_size != FMHA_FORWARD_PARAMS_SIZE_V1) {
    // The metadata arrays hold kMetaLen entries: a batch that needs more
    // is the caller's error (memory smaller than described), not run.
    const int64_t batch = p.cu_seqlens_q || p.cu_seqlens_k ? p.num_seqs : p.q.dims[0];
    if (batch + 1 > static_cast<int64_t>(kMetaLen)) return;
    if (p.block_table && batch * p.block_table_stride > static_cast<int64_t>(kMetaLen)) return;
  }
#if FMHA_FUZZ_CUDA
  struct Managed {
    unsigned char* p;
    ~Managed() { cudaFree(p); }
  } ws_mem{device_bytes(give + 2 * kGuard + 64)};
  std::memset(ws_mem.p, 0xa5, give + 2 * kGuard + 64);
  unsigned char* ws_base = ws_mem.p;
#else
  std::vector<unsigned char> ws(give + 2 * kGuard + 64, 0xa5);
  unsigned char* ws_base = ws.data();
#endif
  unsigned char* wsp = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(ws_base) + kGuard + 63) & ~uintptr_t{63});
  const fmha_status s_fw = checked(fmha_forward(h, &p, give ? wsp : nullptr, give), "fmha_forward");
#if FMHA_FUZZ_CUDA
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after fmha_forward");
#endif
  ++g_stats.forwards;
  if (serving && p.struct_size != FMHA_FORWARD_PARAMS_SIZE_V1) ++g_stats.serving_forwards;
  if (v3 && (p.q_descale || p.k_descale || p.v_descale || p.bias.data || p.alibi_slopes)) ++g_stats.numerics_forwards;
  if (is_fp8(want_dtype[0]) || is_fp8(want_dtype[1])) ++g_stats.fp8_forwards;
  if (ws_choice == 0 && ws_bytes > 0) {
    if (s_fw != FMHA_ERROR_WORKSPACE_TOO_SMALL) violated("a workspace one byte short gave status %d", s_fw);
  } else if (s_fw != FMHA_SUCCESS) {
    violated("the workspace query accepted the problem but the forward failed: %s", fmha_last_error_message());
  }
  for (size_t i = 0; i < kGuard; ++i)
    if (wsp[-1 - static_cast<ptrdiff_t>(i)] != 0xa5 || wsp[give + i] != 0xa5) violated("the forward wrote outside its workspace");
  if (s_fw != FMHA_SUCCESS) {
    if (std::memcmp(a.bytes, snapshot.data(), kArena) != 0) violated("a failed forward wrote to the tensors");
    return;
  }
  // Nothing outside o and lse changed.
  std::vector<unsigned char> writable(kArena, 0);
  const int o_es = elem_size(want_dtype[3]);
  for (int64_t off : offs[3])
    std::memset(&writable[reinterpret_cast<unsigned char*>(p.o.data) - a.bytes + off * o_es], 1, o_es);
  if (p.lse) std::memset(&writable[reinterpret_cast<unsigned char*>(p.lse) - a.bytes], 1, rows * 4);
  for (size_t i = 0; i < kArena; ++i)
    if (!writable[i] && a.bytes[i] != snapshot[i]) violated("the forward wrote arena byte %zu outside o and lse", i);
  // The dense reference only; serving layouts (when the struct carries
  // them) are checked against theirs in tests/cpu and tests/gpu.
  if (!serving || p.struct_size == FMHA_FORWARD_PARAMS_SIZE_V1) check_numerics(p, want_dtype, snapshot.data());
}


// ---- fmha_merge ------------------------------------------------------------------

// Inputs whose first byte is kMergeTag (no file of the forward's corpus
// starts with it) drive fmha_merge instead: num_parts views of any dtype,
// dims and strides in the arena, their lse arrays, o (now and then
// o_parts[0] itself) and lse (now and then lse_parts[0] itself). Checks:
// the status rules; a refusal writes nothing; an accepted merge writes
// nothing outside o and lse, never accepts an o or lse that shares a byte
// with what it must not (fmha.h), and matches the float64 merge of the
// snapshot: lse = log sum exp(lse_i), o = sum exp(lse_i - lse) o_i, a row
// whose parts are all -inf gets o = 0 and lse = -inf, a NaN lse_i a NaN row.
// fmha_merge validates and runs in one call, so it is only called when every
// view lies in the arena, or when a field validation must refuse before any
// memory is read (a dtype, dim or stride out of range, a NULL array).
constexpr uint8_t kMergeTag = 0x0b;
constexpr int kMaxParts = 6;

// Validation refuses this view from its fields alone (fmha_tensor's rules).
bool view_refused(const fmha_tensor& t) {
  int32_t dt;
  std::memcpy(&dt, &t.dtype, sizeof dt);
  if (elem_size(dt) == 0) return true;
  for (int d = 0; d < 4; ++d)
    if (t.dims[d] < 0 || t.dims[d] > FMHA_MAX_DIM || t.strides[d] < 0 || (t.dims[d] == 0 && (d == 1 || d == 3)))
      return true;
  return false;
}

void run_merge(Bytes& in) {
  ++g_stats.merge_inputs;
  fmha_handle h = cpu_handle(1 + static_cast<int>(in.below(3)));
  Arena& a = arena();
  const int64_t B = in.below(8) == 0 ? pick_dim(in, 3) : 1 + in.below(2);
  const int64_t H = in.below(8) == 0 ? pick_dim(in, 3) : 1 + in.below(3);
  const int64_t N = in.below(8) == 0 ? pick_dim(in, 9) : 1 + in.below(9);
  static const int64_t kDims[] = {1, 2, 3, 8, 16, 17, 64};
  const int64_t D = in.below(8) == 0 ? pick_dim(in, 20) : kDims[in.below(7)];
  static const int32_t kDtypes[] = {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16};
  auto pick_dtype = [&](int32_t usual) -> int32_t {
    switch (in.below(16)) {
      case 0: return static_cast<int32_t>(in.u32());
      case 1: return in.below(2) ? FMHA_DTYPE_F8E4M3 : FMHA_DTYPE_F8E5M2;  // not a partial output: refused
      case 2: return kDtypes[in.below(3)];
      default: return usual;
    }
  };
  const int32_t dtype = kDtypes[in.below(3)];
  const uint32_t n_choice = in.below(16);
  const int32_t num_parts = n_choice == 0 ? static_cast<int32_t>(in.below(3)) - 1 : 1 + static_cast<int32_t>(n_choice % kMaxParts);
  const int n_views = std::clamp(num_parts, 0, kMaxParts);
  const int64_t dims[4] = {B, H, N, D};

  // Views one after another in the arena (pick_pointer now and then moves
  // one onto another, misaligns it, or makes it NULL or wild).
  fmha_tensor parts[kMaxParts] = {}, o = {};
  int32_t want[kMaxParts + 1];  // dtypes of the parts, then o
  size_t cursor = 0;
  auto place = [&](fmha_tensor& t, int32_t dt) {
    std::memcpy(t.dims, dims, sizeof t.dims);
    int64_t offset = 0;
    pick_strides(in, dims, H, 0, t.strides, &offset);
    if (in.below(16) == 0) t.dims[in.below(4)] = pick_dim(in, 8);  // one dim of another size
    c_set_dtype(&t, dt);
    const int es = elem_size(dt) ? elem_size(dt) : 4;
    t.data = pick_pointer(in, cursor % kArena);
    uint64_t extent = 1;
    for (int d = 0; d < 4; ++d) {
      uint64_t term;
      if (t.dims[d] > 0 && t.strides[d] > 0 &&
          (__builtin_mul_overflow(static_cast<uint64_t>(t.dims[d] - 1), static_cast<uint64_t>(t.strides[d]), &term) ||
           __builtin_add_overflow(extent, term, &extent)))
        extent = UINT64_MAX / 8;
    }
    cursor = std::min<uint64_t>(kArena, cursor + (extent + 3) / 4 * 4 * es);
  };
  for (int i = 0; i < n_views; ++i) {
    want[i] = pick_dtype(dtype);
    place(parts[i], want[i]);
  }
  want[kMaxParts] = pick_dtype(dtype);
  const bool in_place = n_views > 0 && in.below(4) == 0;
  if (in_place) {
    o = parts[0];
    want[kMaxParts] = want[0];
  } else {
    place(o, want[kMaxParts]);
  }
  // The lse arrays: [B, H, N] FP32 each, after the views.
  const int64_t lse_rows = B > 0 && H > 0 && N > 0 && B <= 64 && H <= 64 && N <= 4096 ? B * H * N : 0;
  const float* lse_parts[kMaxParts] = {};
  for (int i = 0; i < n_views; ++i) {
    lse_parts[i] = static_cast<const float*>(pick_pointer(in, (cursor + 3) / 4 * 4 % kArena));
    cursor = std::min<uint64_t>(kArena, (cursor + 3) / 4 * 4 + static_cast<uint64_t>(lse_rows) * 4);
  }
  float* lse = nullptr;
  switch (in.below(4)) {
    case 0: break;
    case 1:
      if (n_views > 0) lse = const_cast<float*>(lse_parts[0]);  // in place
      break;
    default:
      lse = static_cast<float*>(pick_pointer(in, (cursor + 3) / 4 * 4 % kArena));
      break;
  }

  fmha_merge_params p;
  fmha_merge_params_init(&p);
  if (in.below(32) == 0) p.struct_size = in.u32();
  p.num_parts = num_parts;
  p.o_parts = in.below(32) == 0 ? nullptr : parts;
  p.lse_parts = in.below(32) == 0 ? nullptr : lse_parts;
  p.o = o;
  p.lse = lse;

  // Values: the views' bytes in `dtype`, then the lse arrays: finite in
  // [-8, 8] mostly, -inf often (parts that saw no key), NaN and +inf rarely.
  uint32_t seed = in.u32() | 1u;
  const int esz = elem_size(dtype);
  for (size_t off = 0; off + esz <= kArena; off += esz) {
    seed = seed * 1664525u + 1013904223u;
    write_elem(a.bytes + off, dtype, static_cast<double>(static_cast<int>(seed >> 24) - 128) / 32.0);
  }
  const uint32_t lse_mix = in.below(4);  // 0: no -inf, 1: some, 2: many, 3: NaN and +inf too
  for (int i = 0; i < n_views; ++i) {
    if (lse_rows == 0 || !a.contains(reinterpret_cast<uintptr_t>(lse_parts[i]), static_cast<uint64_t>(lse_rows) * 4) ||
        reinterpret_cast<uintptr_t>(lse_parts[i]) % 4 != 0)
      continue;
    float* l = const_cast<float*>(lse_parts[i]);
    for (int64_t r = 0; r < lse_rows; ++r) {
      seed = seed * 1664525u + 1013904223u;
      const uint32_t c = seed >> 24;
      float x = static_cast<float>(static_cast<int>(seed >> 8 & 0xffffu) - 32768) / 4096.f;
      if ((lse_mix == 1 && c < 40) || (lse_mix >= 2 && c < 140)) x = -INFINITY;
      if (lse_mix == 3 && c >= 250) x = c & 1u ? NAN : INFINITY;
      l[r] = x;
    }
  }
  const std::vector<unsigned char> snapshot(a.bytes, a.bytes + kArena);

  // Where every view lies: element offsets, all inside the arena?
  std::vector<int64_t> offs[kMaxParts + 1];
  const fmha_tensor* views[kMaxParts + 1];
  for (int i = 0; i < n_views; ++i) views[i] = &parts[i];
  views[kMaxParts] = &o;
  // Refused before any memory is read: a field out of range, or views that
  // disagree (dims, the parts' dtype) or are not partial outputs (FP8).
  auto dtype_of = [](const fmha_tensor& t) {
    int32_t dt;
    std::memcpy(&dt, &t.dtype, sizeof dt);
    return dt;
  };
  auto is_merge_dtype = [](int32_t dt) { return dt == FMHA_DTYPE_F16 || dt == FMHA_DTYPE_BF16 || dt == FMHA_DTYPE_F32; };
  bool refused_by_fields = p.struct_size != FMHA_MERGE_PARAMS_SIZE_V1 || num_parts < 1 || p.o_parts == nullptr ||
                           p.lse_parts == nullptr || view_refused(o) || !is_merge_dtype(dtype_of(o));
  for (int i = 0; i < n_views; ++i) {
    refused_by_fields = refused_by_fields || view_refused(parts[i]) || dtype_of(parts[i]) != dtype_of(parts[0]) ||
                        !is_merge_dtype(dtype_of(parts[i]));
    for (int d = 0; d < 4; ++d)
      refused_by_fields = refused_by_fields || parts[i].dims[d] != parts[0].dims[d] || o.dims[d] != parts[0].dims[d];
  }
  // What validation accepts has o_parts[0]'s dims (which a changed dim on
  // every view may have moved away from `dims`).
  const int64_t* vd = n_views > 0 ? parts[0].dims : dims;
  const int64_t rows = vd[0] > 0 && vd[1] > 0 && vd[2] > 0 && vd[0] <= 64 && vd[1] <= 64 && vd[2] <= 4096
                           ? vd[0] * vd[1] * vd[2] : 0;
  bool owned = !refused_by_fields && rows > 0 && vd[3] <= 4096;
  for (int v = 0; v <= kMaxParts && owned; ++v) {
    if (v < kMaxParts && v >= n_views) continue;
    int32_t dt;
    std::memcpy(&dt, &views[v]->dtype, sizeof dt);
    const int es = elem_size(dt);
    owned = tensor_offsets(*views[v], 1 << 14, &offs[v]);
    for (int64_t off : offs[v])
      if (!owned || !a.contains(reinterpret_cast<uintptr_t>(views[v]->data) + static_cast<uintptr_t>(off * es), es))
        owned = false;
  }
  for (int i = 0; i < n_views && owned; ++i)
    owned = a.contains(reinterpret_cast<uintptr_t>(lse_parts[i]), static_cast<uint64_t>(rows) * 4);
  if (owned && lse != nullptr) owned = a.contains(reinterpret_cast<uintptr_t>(lse), static_cast<uint64_t>(rows) * 4);
  // An empty merge (batch or seq 0) reads and writes nothing: it may run too.
  const bool empty = !refused_by_fields && n_views > 0 && (vd[0] == 0 || vd[2] == 0);
  if (!owned && !refused_by_fields && !empty) return;

  const fmha_status st = checked(fmha_merge(h, &p), "fmha_merge");
#if FMHA_FUZZ_CUDA
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after fmha_merge");
#endif
  if (st != FMHA_SUCCESS || empty) {
    if (std::memcmp(a.bytes, snapshot.data(), kArena) != 0) violated("a refused or empty merge wrote to the arena");
    return;
  }
  if (refused_by_fields) violated("fmha_merge accepted a field it must refuse (num_parts=%d)", num_parts);
  ++g_stats.merges;

  // The bytes each operand covers: o (bit 0), lse (1), parts (2..), lse_parts (2 + kMaxParts ..).
  std::vector<uint32_t> owner(kArena, 0);
  auto byte_at = [&](const void* ptr) { return static_cast<size_t>(static_cast<const unsigned char*>(ptr) - a.bytes); };
  bool o_self = false;
  int32_t o_dt, p_dt;
  std::memcpy(&o_dt, &o.dtype, sizeof o_dt);
  std::memcpy(&p_dt, &parts[0].dtype, sizeof p_dt);
  for (int64_t off : offs[kMaxParts])
    for (int x = 0; x < elem_size(o_dt); ++x) {
      uint32_t& w = owner[byte_at(o.data) + off * elem_size(o_dt) + x];
      if (w & 1u) o_self = true;
      w |= 1u;
    }
  if (lse) for (int64_t r = 0; r < rows * 4; ++r) owner[byte_at(lse) + r] |= 2u;
  for (int i = 0; i < n_views; ++i) {
    for (int64_t off : offs[i])
      for (int x = 0; x < elem_size(p_dt); ++x) owner[byte_at(parts[i].data) + off * elem_size(p_dt) + x] |= 4u << i;
    for (int64_t r = 0; r < rows * 4; ++r) owner[byte_at(lse_parts[i]) + r] |= 4u << (kMaxParts + i);
  }
  // o_parts[0] itself / lse_parts[0] itself: fmha.h's in-place merges.
  bool o_is_part0 = o.data == parts[0].data && o_dt == p_dt;
  for (int d = 0; d < 4; ++d)
    o_is_part0 = o_is_part0 && o.dims[d] == parts[0].dims[d] && (o.dims[d] <= 1 || o.strides[d] == parts[0].strides[d]);
  const bool lse_is_part0 = lse != nullptr && lse == lse_parts[0];
  if (o_self) violated("accepted an o that overlaps itself");
  for (uint32_t w : owner) {
    if (w & 1u)
      for (int i = 0; i < n_views; ++i) {
        if ((w >> (2 + i) & 1u) && !(i == 0 && o_is_part0)) violated("accepted an o that overlaps o_parts[%d]", i);
        if (w >> (2 + kMaxParts + i) & 1u) violated("accepted an o that overlaps lse_parts[%d]", i);
      }
    if (w & 2u) {
      if (w & 1u) violated("accepted an lse that overlaps o");
      for (int i = 0; i < n_views; ++i) {
        if (w >> (2 + i) & 1u) violated("accepted an lse that overlaps o_parts[%d]", i);
        if ((w >> (2 + kMaxParts + i) & 1u) && !(i == 0 && lse_is_part0)) violated("accepted an lse that overlaps lse_parts[%d]", i);
      }
    }
  }
  for (size_t x = 0; x < kArena; ++x)
    if (!(owner[x] & 3u) && a.bytes[x] != snapshot[x]) violated("fmha_merge wrote arena byte %zu outside o and lse", x);

  // The float64 merge of the snapshot, row by row.
  auto elem = [&](const fmha_tensor& t, int32_t dt, int64_t b, int64_t hh, int64_t i, int64_t e, const unsigned char* mem) {
    const int64_t off = b * t.strides[0] + hh * t.strides[1] + i * t.strides[2] + e * t.strides[3];
    return read_elem(mem + byte_at(t.data) + off * elem_size(dt), dt);
  };
  auto lse_of = [&](const float* l, int64_t r) {
    float x;
    std::memcpy(&x, snapshot.data() + byte_at(l) + r * 4, 4);
    return static_cast<double>(x);
  };
  const double o_eps = o_dt == FMHA_DTYPE_F32 ? 1e-6 : o_dt == FMHA_DTYPE_F16 ? 1e-3 : 8e-3;
  for (int64_t b = 0; b < vd[0]; ++b)
    for (int64_t hh = 0; hh < vd[1]; ++hh)
      for (int64_t i = 0; i < vd[2]; ++i) {
        const int64_t r = (b * vd[1] + hh) * vd[2] + i;
        double m = -INFINITY;
        bool nan = false, pos_inf = false;
        for (int k = 0; k < n_views; ++k) {
          const double x = lse_of(lse_parts[k], r);
          nan = nan || std::isnan(x);
          pos_inf = pos_inf || x == INFINITY;
          m = std::max(m, x);
        }
        const double lse_got = lse ? static_cast<double>(lse[r]) : 0.0;
        if (nan) {
          if (lse && !std::isnan(lse_got)) violated("merge row %lld: a NaN lse_i but lse = %g", (long long)r, lse_got);
          for (int64_t e = 0; e < vd[3]; ++e)
            if (!std::isnan(elem(o, o_dt, b, hh, i, e, a.bytes)))
              violated("merge row %lld: a NaN lse_i but o[%lld] is not NaN", (long long)r, (long long)e);
          continue;
        }
        if (pos_inf) continue;  // fmha.h leaves it undefined
        if (m == -INFINITY) {
          if (lse && !(std::isinf(lse_got) && lse_got < 0)) violated("merge row %lld: every part -inf but lse = %g", (long long)r, lse_got);
          for (int64_t e = 0; e < vd[3]; ++e)
            if (elem(o, o_dt, b, hh, i, e, a.bytes) != 0.0)
              violated("merge row %lld: every part -inf but o[%lld] != 0", (long long)r, (long long)e);
          continue;
        }
        double sum = 0.0;
        for (int k = 0; k < n_views; ++k) sum += std::exp(lse_of(lse_parts[k], r) - m);
        const double lse_ref = m + std::log(sum);
        ++g_stats.merge_rows_checked;
        if (lse && !(std::fabs(lse_got - lse_ref) <= 2e-6 * (std::fabs(lse_ref) + 1.0)))
          violated("merge row %lld: lse %.9g, reference %.9g", (long long)r, lse_got, lse_ref);
        for (int64_t e = 0; e < vd[3]; ++e) {
          double ref = 0.0, mag = 0.0;
          bool finite = true;
          for (int k = 0; k < n_views; ++k) {
            const double w = std::exp(lse_of(lse_parts[k], r) - lse_ref);
            if (w == 0.0) continue;
            const double x = elem(parts[k], p_dt, b, hh, i, e, snapshot.data());
            finite = finite && std::isfinite(x);
            ref += w * x;
            mag += w * std::fabs(x);
          }
          // Past the o dtype's range (inf is right), or near FP32's (the sum may round to inf).
          if (!finite || std::fabs(ref) > 1e38 || (o_dt == FMHA_DTYPE_F16 && std::fabs(ref) > 65000.0)) continue;
          const double got = elem(o, o_dt, b, hh, i, e, a.bytes);
          // o_eps relative, FP32's sum of the weighted parts, F16's subnormal spacing (2^-24).
          if (!(std::fabs(got - ref) <= o_eps * std::fabs(ref) + 1e-5 * mag + (o_dt == FMHA_DTYPE_F16 ? 0x1p-24 : 1e-30)))
            violated("merge row %lld o[%lld] = %.9g, reference %.9g (parts %d, dtypes %d -> %d)", (long long)r,
                     (long long)e, got, ref, n_views, p_dt, o_dt);
        }
      }
}
}  // namespace

extern "C" void fmha_fuzz_stats(char* buf, size_t len) {
  std::snprintf(buf, len,
                "%ld inputs: %ld accepted by validation, %ld forwards run (%ld with serving fields, %ld with "
                "descales/bias/ALiBi, %ld with FP8 inputs); rows checked against float64: %ld, NaN rows: %ld, "
                "rows without keys: %ld; fmha_merge: %ld inputs, %ld merges run, rows checked: %ld",
                g_stats.inputs, g_stats.accepted, g_stats.forwards, g_stats.serving_forwards,
                g_stats.numerics_forwards, g_stats.fp8_forwards, g_stats.rows_checked,
                g_stats.rows_nan,
                g_stats.rows_empty, g_stats.merge_inputs, g_stats.merges, g_stats.merge_rows_checked);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ++g_stats.inputs;
  if (size > 0 && data[0] == kMergeTag) {
    Bytes in(data + 1, size - 1);
    run_merge(in);
    return 0;
  }
  Bytes in(data, size);
  run_one(in);
  return 0;
}
