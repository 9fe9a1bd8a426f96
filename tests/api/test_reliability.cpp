// Regressions of the defects the API fuzzing found (issue 7), one test case
// per finding, each failing before its fix: inputs validation accepted that
// led to undefined behaviour, a hang or a wrong answer, and a resource
// failure that deadlocked. Some findings are undefined behaviour that only a
// sanitizer sees (marked); CI runs this file under clang's ASan + UBSan with
// float-cast-overflow and the integer checks (tools/ci_sanitizers.sh).
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#if defined(__unix__)
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#endif

#include "api/c_callers.h"
#include "common/reference.h"

// Sanitizer runtimes map terabytes of shadow memory: no address-space
// limit can be set under them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FMHA_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define FMHA_TEST_SANITIZED 1
#endif
#endif
#ifndef FMHA_TEST_SANITIZED
#define FMHA_TEST_SANITIZED 0
#endif

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

void set_tensor(fmha_tensor* t, void* data, fmha_dtype dtype, std::initializer_list<int64_t> dims,
                std::initializer_list<int64_t> strides) {
  t->data = data;
  t->dtype = dtype;
  std::copy(dims.begin(), dims.end(), t->dims);
  std::copy(strides.begin(), strides.end(), t->strides);
}

// A CPU handle and a workspace that follows the params.
class Cpu {
 public:
  explicit Cpu(int threads = 0) {
    REQUIRE(fmha_create(&h_, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    if (threads > 0) REQUIRE(fmha_set_num_threads(h_, threads) == FMHA_SUCCESS);
  }
  ~Cpu() { fmha_destroy(h_); }
  fmha_handle get() const { return h_; }
  size_t workspace(const fmha_forward_params& p) {
    size_t bytes = 0;
    REQUIRE_MESSAGE(fmha_forward_workspace_size(h_, &p, &bytes) == FMHA_SUCCESS, fmha_last_error_message());
    return bytes;
  }
  fmha_status run(const fmha_forward_params& p) {
    size_t bytes = 0;
    const fmha_status s = fmha_forward_workspace_size(h_, &p, &bytes);
    if (s != FMHA_SUCCESS) return s;
    ws_.assign(bytes / 8 + 16, 0);  // uint64_t elements: 8-byte aligned, round up to 16 below
    char* base = reinterpret_cast<char*>(ws_.data());
    base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
    return fmha_forward(h_, &p, base, bytes);
  }

 private:
  fmha_handle h_ = nullptr;
  std::vector<uint64_t> ws_;
};

// One (batch, head) F32 problem in separate contiguous buffers.
struct Single {
  int64_t nq, nk, d;
  std::vector<float> q, k, v, o, lse;
  fmha_forward_params p;
  Single(int64_t nq_, int64_t nk_, int64_t d_)
      : nq(nq_), nk(nk_), d(d_), q(nq * d), k(nk * d), v(nk * d), o(nq * d, kNaN), lse(nq, kNaN) {
    uint32_t x = 12345u;
    auto next = [&] { return (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f); };
    for (auto* t : {&q, &k, &v})
      for (float& e : *t) e = next();
    fmha_forward_params_init(&p);
    set_tensor(&p.q, q.data(), FMHA_DTYPE_F32, {1, 1, nq, d}, {nq * d, nq * d, d, 1});
    set_tensor(&p.k, k.data(), FMHA_DTYPE_F32, {1, 1, nk, d}, {nk * d, nk * d, d, 1});
    set_tensor(&p.v, v.data(), FMHA_DTYPE_F32, {1, 1, nk, d}, {nk * d, nk * d, d, 1});
    set_tensor(&p.o, o.data(), FMHA_DTYPE_F32, {1, 1, nq, d}, {nq * d, nq * d, d, 1});
    p.lse = lse.data();
  }
  bool untouched() const {
    for (float e : o)
      if (!std::isnan(e)) return false;
    for (float e : lse)
      if (!std::isnan(e)) return false;
    return true;
  }
};

bool has(const char* message, const char* needle) { return std::string(message).find(needle) != std::string::npos; }

// A NaN or inf planted at column 3 of k (in_v false) or v (in_v true) of one key.
struct Plant {
  int64_t key;
  bool in_v;
  float value;
};

// fmha.h's NaN rule for row i of s, which sees keys [lo, hi]: a row that sees
// no plant matches the clean reference; one that sees a planted k has NaN O
// and lse; one that sees only planted v keeps lse and every column but 3.
void check_nan_rule_row(const Single& s, const fmha_test::ReferenceResult& ref, int64_t i, int64_t lo, int64_t hi,
                        const Plant* plants, size_t count, int64_t d) {
  bool clean = true, sees_k_nan = false;
  for (size_t x = 0; x < count; ++x)
    if (plants[x].key >= lo && plants[x].key <= hi) {
      clean = false;
      sees_k_nan |= !plants[x].in_v;
    }
  CAPTURE(i);
  if (clean) {
    for (int64_t e = 0; e < d; ++e) REQUIRE(s.o[i * d + e] == doctest::Approx(ref.o[i * d + e]).epsilon(1e-5));
    REQUIRE(s.lse[i] == doctest::Approx(ref.lse[i]).epsilon(1e-5));
  } else if (sees_k_nan) {
    REQUIRE(std::isnan(s.lse[i]));
    for (int64_t e = 0; e < d; ++e) REQUIRE(std::isnan(s.o[i * d + e]));
  } else {
    REQUIRE(s.lse[i] == doctest::Approx(ref.lse[i]).epsilon(1e-5));
    REQUIRE(!std::isfinite(s.o[i * d + 3]));
    for (int64_t e = 0; e < d; ++e)
      if (e != 3) REQUIRE(s.o[i * d + e] == doctest::Approx(ref.o[i * d + e]).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("finding 1: q, k, v and o data must be aligned to their element size") {
  Cpu cpu;
  for (int which = 0; which < 4; ++which) {
    Single s(5, 7, 4);
    // 8 spare bytes at the end of every buffer for the shifted view.
    s.q.resize(s.q.size() + 2);
    s.k.resize(s.k.size() + 2);
    s.v.resize(s.v.size() + 2);
    s.o.resize(s.o.size() + 2, kNaN);
    s.p.q.data = s.q.data();
    s.p.k.data = s.k.data();
    s.p.v.data = s.v.data();
    s.p.o.data = s.o.data();
    fmha_tensor* t[4] = {&s.p.q, &s.p.k, &s.p.v, &s.p.o};
    const char* names[4] = {"q.data=", "k.data=", "v.data=", "o.data="};
    t[which]->data = static_cast<char*>(t[which]->data) + 2;  // an F32 tensor at a 2-byte offset
    CAPTURE(which);
    CHECK(cpu.run(s.p) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(has(fmha_last_error_message(), names[which]));
    CHECK(has(fmha_last_error_message(), "not 4-byte aligned"));
    CHECK(s.untouched());
  }
  // F16 at an odd address.
  std::vector<uint16_t> h(64, 0x3c00), out(64, 0x7e00);
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  set_tensor(&p.q, h.data(), FMHA_DTYPE_F16, {1, 1, 4, 8}, {32, 32, 8, 1});
  set_tensor(&p.k, h.data(), FMHA_DTYPE_F16, {1, 1, 4, 8}, {32, 32, 8, 1});
  set_tensor(&p.v, reinterpret_cast<char*>(h.data()) + 1, FMHA_DTYPE_F16, {1, 1, 4, 8}, {32, 32, 8, 1});
  set_tensor(&p.o, out.data(), FMHA_DTYPE_F16, {1, 1, 4, 8}, {32, 32, 8, 1});
  CHECK(cpu.run(p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "v.data="));
  CHECK(has(fmha_last_error_message(), "not 2-byte aligned"));
}

TEST_CASE("finding 2: dims above FMHA_MAX_DIM are refused; at the bound masks are exact") {
  Cpu cpu;
  // One key vector broadcast over seq_k keys (stride 0): every visible key
  // has the same logit, so O = v and lse = logit + ln(visible keys).
  float q[4] = {0.5f, -1.f, 0.25f, 2.f, }, k[2] = {1.f, 0.5f}, v[2] = {3.f, -5.f};
  float o[4], lse[2];
  const float logit = 0.5f * 1.f + -1.f * 0.5f;  // row 0; row 1: 0.25 + 1 = 1.25
  const float logits[2] = {logit, 0.25f * 1.f + 2.f * 0.5f};
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.scale = 1.f;
  set_tensor(&p.q, q, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
  set_tensor(&p.o, o, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
  p.lse = lse;

  SUBCASE("INT64_MAX keys: refused (it overflowed key_range, or hung the tile loop)") {
    set_tensor(&p.k, k, FMHA_DTYPE_F32, {1, 1, INT64_MAX, 2}, {0, 0, 0, 1});
    set_tensor(&p.v, v, FMHA_DTYPE_F32, {1, 1, INT64_MAX, 2}, {0, 0, 0, 1});
    size_t bytes = 0;
    p.window_left = 2;
    CHECK(fmha_forward_workspace_size(cpu.get(), &p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(has(fmha_last_error_message(), "k.dims[2]=9223372036854775807 (seq) exceeds FMHA_MAX_DIM"));
    set_tensor(&p.k, k, FMHA_DTYPE_F32, {1, 1, FMHA_MAX_DIM + 1, 2}, {0, 0, 0, 1});
    CHECK(fmha_forward_workspace_size(cpu.get(), &p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  }
  SUBCASE("FMHA_MAX_DIM keys with windows and causal masks: the right answer") {
    set_tensor(&p.k, k, FMHA_DTYPE_F32, {1, 1, FMHA_MAX_DIM, 2}, {0, 0, 0, 1});
    set_tensor(&p.v, v, FMHA_DTYPE_F32, {1, 1, FMHA_MAX_DIM, 2}, {0, 0, 0, 1});
    // Bottom-right diagonal d(i) = i + 2^62 - 2. Visible keys per row:
    struct Mask {
      uint32_t flags;
      int32_t left, right;
      int visible[2];
    } masks[] = {
        {FMHA_MASK_NONE, 2, 1, {4, 3}},         // [d-2, d+1], row 1 clipped at seq_k
        {FMHA_MASK_NONE, 2, INT32_MAX, {4, 3}},  // a right bound far past seq_k
        {FMHA_MASK_CAUSAL, 2, -1, {3, 3}},      // [d-2, d]
        {FMHA_MASK_CAUSAL, 0, 0, {1, 1}},       // the diagonal key only
        {FMHA_MASK_NONE, 5, -1, {7, 6}},        // [d-5, seq_k): no right bound
    };
    for (const Mask& m : masks) {
      CAPTURE(m.flags);
      CAPTURE(m.left);
      CAPTURE(m.right);
      p.mask_flags = m.flags;
      p.window_left = m.left;
      p.window_right = m.right;
      REQUIRE_MESSAGE(cpu.run(p) == FMHA_SUCCESS, fmha_last_error_message());
      for (int r = 0; r < 2; ++r) {
        CHECK(o[2 * r] == doctest::Approx(3.0).epsilon(1e-6));
        CHECK(o[2 * r + 1] == doctest::Approx(-5.0).epsilon(1e-6));
        CHECK(lse[r] == doctest::Approx(logits[r] + std::log(static_cast<double>(m.visible[r]))).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("finding 3: an extent of exactly INT64_MAX elements is an overflow, not a negative size") {
  Cpu cpu;
  Single s(1, 1, 1);
  set_tensor(&s.p.q, s.q.data(), FMHA_DTYPE_F32, {2, 1, 1, 1}, {INT64_MAX, 1, 1, 1});
  set_tensor(&s.p.k, s.k.data(), FMHA_DTYPE_F32, {2, 1, 1, 1}, {1, 1, 1, 1});
  set_tensor(&s.p.v, s.v.data(), FMHA_DTYPE_F32, {2, 1, 1, 1}, {1, 1, 1, 1});
  set_tensor(&s.p.o, s.o.data(), FMHA_DTYPE_F32, {2, 1, 1, 1}, {1, 1, 1, 1});
  CHECK(cpu.run(s.p) == FMHA_ERROR_INVALID_ARGUMENT);
  const std::string msg = fmha_last_error_message();
  CHECK_MESSAGE(has(msg.c_str(), "q: extent of 9223372036854775807 + 1 elements of 4 bytes overflows int64"), msg);
  CHECK(msg.find("-9223372036854775808") == std::string::npos);
}

TEST_CASE("fuzzing the fix: a dim of size 1 may have any stride (UBSan: stride * elem overflowed)") {
  // The exact overlap test once multiplied every stride by the element
  // size; a size-1 dim's stride is not bounded by the extent check.
  Cpu cpu;
  Single s(3, 5, 4);
  s.p.q.strides[0] = INT64_MAX;
  s.p.o.strides[1] = INT64_MAX / 2;
  REQUIRE_MESSAGE(cpu.run(s.p) == FMHA_SUCCESS, fmha_last_error_message());
  for (float e : s.o) CHECK(std::isfinite(e));
}

TEST_CASE("finding 4: enum arguments and fields holding any int are rejected (UBSan: invalid enum load)") {
  fmha_handle h = reinterpret_cast<fmha_handle>(0x1);
  for (int kind : {-1, INT_MIN, 2, 7}) {
    CAPTURE(kind);
    CHECK(c_create_with_kind(&h, kind, 0) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(h == nullptr);
    CHECK(has(fmha_last_error_message(), ("kind=" + std::to_string(kind)).c_str()));
  }
  for (int status : {-1, INT_MIN, 8, INT_MAX}) CHECK(std::string(c_status_string(status)) == "unknown status");
  CHECK(std::string(c_status_string(4)) == "out of memory");

  Cpu cpu;
  Single s(3, 3, 2);
  for (int dtype : {-1, 0, 6, INT_MIN}) {
    CAPTURE(dtype);
    c_set_dtype(&s.p.k, dtype);
    CHECK(cpu.run(s.p) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(has(fmha_last_error_message(), ("k.dtype=" + std::to_string(dtype) + " is not an fmha_dtype").c_str()));
    CHECK(s.untouched());
  }
}

TEST_CASE("finding 5: NaN, inf and overflowing logits give NaN rows, lse NaN (UBSan: NaN to int in exp)") {
  Cpu cpu;
  Single s(4, 5, 3);
  s.q[1 * 3 + 2] = kNaN;   // row 1: NaN in q
  s.q[2 * 3 + 0] = kInf;   // row 2: inf in q
  s.q[3 * 3 + 1] = 1e30f;  // row 3: an F32 logit past FLT_MAX
  s.k[4 * 3 + 1] = 1e30f;
  s.k[0] = 0.25f;          // q's inf meets a positive k: a +inf logit
  REQUIRE(cpu.run(s.p) == FMHA_SUCCESS);
  CHECK(std::isfinite(s.lse[0]));
  for (int64_t d = 0; d < 3; ++d) CHECK(std::isfinite(s.o[d]));
  for (int r = 1; r < 4; ++r) {
    CAPTURE(r);
    CHECK(std::isnan(s.lse[r]));  // was -inf, the value reserved for "no key visible"
    for (int64_t d = 0; d < 3; ++d) CHECK(std::isnan(s.o[r * 3 + d]));
  }
}

TEST_CASE("NaN semantics: keys a row does not see never affect it, NaN and inf included") {
  // Causal, several key tiles, and a sliding window: NaN/inf planted in k
  // and v of keys that only later rows see, and of keys left of a window.
  Cpu cpu(2);
  const int64_t n = 150, d = 8;
  const Plant plants[] = {{100, true, kNaN}, {70, true, kInf}, {130, false, kNaN}, {140, true, -kInf}};
  for (int32_t window_left : {-1, 40}) {
    Single s(n, n, d);
    s.p.mask_flags = FMHA_MASK_CAUSAL;
    s.p.window_left = window_left;
    const fmha_test::ReferenceResult ref = fmha_test::reference_forward(s.p);  // clean data
    for (const Plant& pl : plants) (pl.in_v ? s.v : s.k)[pl.key * d + 3] = pl.value;
    REQUIRE(cpu.run(s.p) == FMHA_SUCCESS);
    for (int64_t i = 0; i < n; ++i) {
      // Row i sees keys [max(0, i - window_left), i].
      const int64_t lo = window_left < 0 ? 0 : std::max<int64_t>(0, i - window_left);
      CAPTURE(window_left);
      check_nan_rule_row(s, ref, i, lo, i, plants, std::size(plants), d);
    }
  }
}

TEST_CASE("NaN semantics hold across key splits (decode: few query rows, many keys)") {
  // Nq = 4, Nk = 2000: the CPU backend cuts the keys into splits merged
  // afterwards (4 splits; 2 with the window); a split whose keys are only
  // planted ones, or whose planted key weighs nothing, must leave the same O
  // and lse as one pass over all keys. Causal bottom-right: row i sees keys
  // [lo, 1996 + i], lo = 0 or, with the window, 596 + i.
  Cpu cpu(2);
  const int64_t nq = 4, nk = 2000, d = 8;
  const Plant plants[] = {{100, true, kNaN}, {1997, true, kInf}, {1999, false, kNaN}, {500, true, -kInf}};
  for (int32_t window_left : {-1, 1400}) {
    Single s(nq, nk, d);
    s.p.mask_flags = FMHA_MASK_CAUSAL;
    s.p.window_left = window_left;
    const fmha_test::ReferenceResult ref = fmha_test::reference_forward(s.p);  // clean data
    for (const Plant& pl : plants) (pl.in_v ? s.v : s.k)[pl.key * d + 3] = pl.value;
    REQUIRE(cpu.run(s.p) == FMHA_SUCCESS);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t hi = nk - nq + i;
      const int64_t lo = window_left < 0 ? 0 : hi - window_left;
      CAPTURE(window_left);
      check_nan_rule_row(s, ref, i, lo, hi, plants, std::size(plants), d);
    }
  }
}

TEST_CASE("finding 6: softcap below FLT_MIN is refused; FLT_MIN gives the right answer") {
  Cpu cpu;
  float q[2] = {0.f, 0.f}, k[4] = {1.f, 0.f, -1.f, 0.f}, v[4] = {1.f, 2.f, 3.f, 4.f}, o[2] = {kNaN, kNaN};
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  set_tensor(&p.q, q, FMHA_DTYPE_F32, {1, 1, 1, 2}, {2, 2, 2, 1});
  set_tensor(&p.k, k, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
  set_tensor(&p.v, v, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
  set_tensor(&p.o, o, FMHA_DTYPE_F32, {1, 1, 1, 2}, {2, 2, 2, 1});
  p.softcap = 1e-39f;  // subnormal: 1 / softcap = inf, 0 * inf = NaN
  CHECK(cpu.run(p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "softcap=1e-39 must be 0 or at least"));
  CHECK(std::isnan(o[0]));
  p.scale = 1e30f;  // scale / softcap = 1e40 overflows FP32
  p.softcap = 1e-10f;
  CHECK(cpu.run(p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "scale/softcap"));
  p.scale = 0.f;
  p.softcap = FLT_MIN;
  REQUIRE(cpu.run(p) == FMHA_SUCCESS);
  CHECK(o[0] == doctest::Approx(2.0));
  CHECK(o[1] == doctest::Approx(3.0));
}

TEST_CASE("finding 7: a thread that cannot start gives OUT_OF_MEMORY and a usable handle") {
#if FMHA_TEST_SANITIZED || !defined(__unix__)
  MESSAGE("skipped: sanitizers reserve more address space than the limit this test sets");
#else
  // In a child, so the limit and a possible hang stay there: an address-space
  // limit a little above what the process maps leaves room for a few 8 MiB
  // thread stacks, not for 1000. Before the fix the pool's constructor
  // unwound past running threads and hung (or aborted).
  constexpr int kLimitNotEnforced = 70;  // the child's exit status when the limit does not hold
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    alarm(60);  // a hang fails the test instead of the whole suite
    fmha_handle h = nullptr;
    if (fmha_create(&h, FMHA_DEVICE_CPU, 0) != FMHA_SUCCESS || fmha_set_num_threads(h, 2) != FMHA_SUCCESS) _exit(10);
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    if (pages <= 0) _exit(11);
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (64u << 20);
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(12);
    // An emulator may not enforce the limit (qemu-user ignores a guest's
    // RLIMIT_AS, which would bind qemu itself): a mapping well past it then
    // succeeds, and there is nothing to check here.
    void* probe = mmap(nullptr, size_t{256} << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe != MAP_FAILED) {
      munmap(probe, size_t{256} << 20);
      _exit(kLimitNotEnforced);
    }
    if (fmha_set_num_threads(h, 1000) != FMHA_ERROR_OUT_OF_MEMORY) _exit(13);
    if (std::strlen(fmha_last_error_message()) == 0) _exit(14);
    // The handle keeps its two threads and still computes.
    float q[4] = {1, 0, 0, 1}, kv[4] = {1, 2, 3, 4}, o[4] = {0, 0, 0, 0};
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    set_tensor(&p.q, q, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
    set_tensor(&p.k, kv, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
    set_tensor(&p.v, kv, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
    set_tensor(&p.o, o, FMHA_DTYPE_F32, {1, 1, 2, 2}, {4, 4, 2, 1});
    size_t bytes = 0;
    if (fmha_forward_workspace_size(h, &p, &bytes) != FMHA_SUCCESS) _exit(15);
    static unsigned char ws[1 << 20] __attribute__((aligned(64)));
    if (bytes > sizeof ws || fmha_forward(h, &p, ws, bytes) != FMHA_SUCCESS) _exit(16);
    if (!(o[0] > 1.f && o[0] < 3.f)) _exit(17);
    // The automatic count runs with what it can start.
    if (fmha_set_num_threads(h, 0) != FMHA_SUCCESS) _exit(18);
    fmha_destroy(h);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_MESSAGE(WIFEXITED(status), "child killed by signal ", WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                " (SIGALRM = 14: it hung)");
  if (WIFEXITED(status) && WEXITSTATUS(status) == kLimitNotEnforced) {
    MESSAGE("RLIMIT_AS is not enforced here (an emulator such as qemu-user?): thread start failure not checked");
    return;
  }
  if (WIFEXITED(status)) CHECK_MESSAGE(WEXITSTATUS(status) == 0, "child step ", WEXITSTATUS(status), " failed");
#endif
}

TEST_CASE("lse and the workspace: address wrap and overlap with the operands are refused") {
  Cpu cpu;
  Single s(4, 6, 8);
  s.p.lse = reinterpret_cast<float*>(UINTPTR_MAX - 11);  // 4 rows of 4 bytes would end at UINTPTR_MAX + 4
  size_t bytes = 0;
  CHECK(fmha_forward_workspace_size(cpu.get(), &s.p, &bytes) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "wrap the address space"));
  s.p.lse = s.lse.data();

  // The workspace laid over q (which is large enough for it).
  const size_t need = cpu.workspace(s.p);
  std::vector<float> big(need / sizeof(float) + 64, 1.f);
  float* q_big = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(big.data()) + 63) & ~uintptr_t{63});
  s.p.q.data = q_big;
  const std::vector<float> before(big);
  CHECK(fmha_forward(cpu.get(), &s.p, q_big, need) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "workspace overlaps q"));
  CHECK(big == before);
  CHECK(s.untouched());
  CHECK(fmha_forward(cpu.get(), &s.p, s.lse.data(), need) != FMHA_SUCCESS);  // too small, or overlapping lse
  CHECK(s.untouched());
}

TEST_CASE("the CPU workspace follows the work items, not the thread count") {
  // Nq = 4: one query block per (batch, head), 2 x 3 = 6 work items.
  Single s(4, 64, 128);
  std::vector<float> q(2 * 3 * 4 * 128), o(2 * 3 * 4 * 128);
  set_tensor(&s.p.q, q.data(), FMHA_DTYPE_F32, {2, 3, 4, 128}, {3 * 4 * 128, 4 * 128, 128, 1});
  set_tensor(&s.p.o, o.data(), FMHA_DTYPE_F32, {2, 3, 4, 128}, {3 * 4 * 128, 4 * 128, 128, 1});
  set_tensor(&s.p.k, s.k.data(), FMHA_DTYPE_F32, {2, 1, 64, 128}, {0, 0, 128, 1});
  set_tensor(&s.p.v, s.v.data(), FMHA_DTYPE_F32, {2, 1, 64, 128}, {0, 0, 128, 1});
  s.p.lse = nullptr;
  Cpu one(1), six(6), many(64);
  const size_t w1 = one.workspace(s.p), w6 = six.workspace(s.p), w64 = many.workspace(s.p);
  CHECK(w6 > w1);
  CHECK(w64 == w6);  // was 64 slices: 235 KB per thread at D = 128
  REQUIRE(many.run(s.p) == FMHA_SUCCESS);
  for (float e : o) REQUIRE(std::isfinite(e));
}

TEST_CASE("overlap checks are exact: q|k|v|o rows interleaved in one packed buffer") {
  // [B, N, W = Hq + Hk + Hk + Hq heads, D] F32: q, k, v, then o, per token.
  const int64_t B = 2, N = 33, Hq = 4, Hk = 2, D = 16, W = Hq + 2 * Hk + Hq;
  std::vector<float> buf(B * N * W * D, kNaN);
  uint32_t x = 99u;
  for (int64_t t = 0; t < B * N; ++t)
    for (int64_t e = 0; e < (Hq + 2 * Hk) * D; ++e)
      buf[t * W * D + e] = (x = x * 1664525u + 1013904223u, static_cast<float>(x >> 8) / 16777216.f - .5f);
  auto packed = [&](fmha_tensor* t, int64_t head0, int64_t heads) {
    set_tensor(t, buf.data() + head0 * D, FMHA_DTYPE_F32, {B, heads, N, D}, {N * W * D, D, W * D, 1});
  };
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.mask_flags = FMHA_MASK_CAUSAL;
  packed(&p.q, 0, Hq);
  packed(&p.k, Hq, Hk);
  packed(&p.v, Hq + Hk, Hk);
  packed(&p.o, Hq + 2 * Hk, Hq);
  Cpu cpu;
  REQUIRE_MESSAGE(cpu.run(p) == FMHA_SUCCESS, fmha_last_error_message());  // was "o overlaps q"
  const fmha_test::ReferenceResult ref = fmha_test::reference_forward(p);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t e = 0; e < D; ++e)
          REQUIRE(buf[((b * N + i) * W + Hq + 2 * Hk + h) * D + e] ==
                  doctest::Approx(ref.o[((b * Hq + h) * N + i) * D + e]).epsilon(1e-5));
  // One element to the left, o's first column is v's last: refused.
  p.o.data = buf.data() + (Hq + 2 * Hk) * D - 1;
  p.o.dims[3] = D;
  CHECK(cpu.run(p) == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(has(fmha_last_error_message(), "o overlaps v"));
}
