// Tests of the test helpers in tests/common: the conversions, the float64
// reference, the comparison, the case matrix and the runner's detection of
// bad outputs. A numerics suite is only as good as its oracle.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/numerics.h"

namespace ft = fmha_test;

namespace {

float bits_to_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// A small F32 BHND problem on host vectors for hand-checked references.
struct Tiny {
  int64_t B, Hq, Hk, Nq, Nk, D;
  std::vector<float> q, k, v;
  fmha_forward_params params;

  Tiny(int64_t b, int64_t hq, int64_t hk, int64_t nq, int64_t nk, int64_t d)
      : B(b), Hq(hq), Hk(hk), Nq(nq), Nk(nk), D(d),
        q(static_cast<size_t>(b * hq * nq * d)), k(static_cast<size_t>(b * hk * nk * d)),
        v(static_cast<size_t>(b * hk * nk * d)) {
    fmha_forward_params_init(&params);
  }
  fmha_forward_params& bind() {
    auto set = [](fmha_tensor& t, std::vector<float>& data, int64_t b, int64_t h, int64_t n, int64_t d) {
      t.data = data.data();
      t.dtype = FMHA_DTYPE_F32;
      const int64_t dims[4] = {b, h, n, d}, strides[4] = {h * n * d, n * d, d, 1};
      for (int i = 0; i < 4; ++i) {
        t.dims[i] = dims[i];
        t.strides[i] = strides[i];
      }
    };
    set(params.q, q, B, Hq, Nq, D);
    set(params.k, k, B, Hk, Nk, D);
    set(params.v, v, B, Hk, Nk, D);
    return params;
  }
};

}  // namespace

TEST_CASE("helpers: FP16 conversion rounds to nearest even") {
  CHECK(ft::float_to_half(1.0f) == 0x3c00);
  CHECK(ft::float_to_half(-2.0f) == 0xc000);
  CHECK(ft::float_to_half(0.0f) == 0x0000);
  CHECK(ft::float_to_half(-0.0f) == 0x8000);
  CHECK(ft::float_to_half(65504.0f) == 0x7bff);     // largest finite
  CHECK(ft::float_to_half(65519.99f) == 0x7bff);    // just below the overflow tie
  CHECK(ft::float_to_half(65520.0f) == 0x7c00);     // tie rounds to even = inf
  CHECK(ft::float_to_half(1e6f) == 0x7c00);
  CHECK(ft::float_to_half(-INFINITY) == 0xfc00);
  CHECK(ft::float_to_half(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(ft::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);         // tie to even (0)
  CHECK(ft::float_to_half(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(ft::float_to_half(std::ldexp(3.0f, -25)) == 0x0002);         // tie 1.5 units -> 2
  CHECK(ft::float_to_half(std::ldexp(1.0f, -14)) == 0x0400);         // smallest normal
  CHECK(ft::float_to_half(std::ldexp(1023.5f, -24)) == 0x0400);      // subnormal rounds up to normal
  CHECK(ft::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie, even stays
  CHECK(ft::float_to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // tie, odd goes up
  CHECK(ft::float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  const uint16_t nan = ft::float_to_half(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);
  // Every half survives half -> float -> half; NaNs stay NaN.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = ft::half_to_float(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(f));
    } else {
      REQUIRE(ft::float_to_half(f) == h);
    }
  }
// The compiler's own binary16 type: _Float16 where C++ has it (x86-64 GCC
// 12, Clang), __fp16 on AArch64 (GCC 12's C++ lacks _Float16 there).
#if defined(__aarch64__) && !defined(__CUDACC__)
  using CompilerHalf = __fp16;
#define FMHA_TEST_COMPILER_HALF 1
#elif defined(__FLT16_MAX__) && !defined(__CUDACC__)
  using CompilerHalf = _Float16;
#define FMHA_TEST_COMPILER_HALF 1
#endif
#if defined(FMHA_TEST_COMPILER_HALF)
  // Against the compiler's own conversion, on many random floats.
  ft::Rng rng(7);
  for (int n = 0; n < 200000; ++n) {
    const uint32_t bits = static_cast<uint32_t>(rng.next_u64());
    const float f = bits_to_float(bits);
    if (std::isnan(f)) continue;
    const CompilerHalf h = static_cast<CompilerHalf>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    REQUIRE(ft::float_to_half(f) == hb);
  }
#endif
}

TEST_CASE("helpers: BF16 conversion rounds to nearest even") {
  CHECK(ft::float_to_bf16(1.0f) == 0x3f80);
  CHECK(ft::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie, even stays
  CHECK(ft::float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie, odd goes up
  CHECK(ft::float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(ft::float_to_bf16(bits_to_float(0x7f7fffff)) == 0x7f80);  // FLT_MAX rounds to inf
  CHECK(ft::float_to_bf16(-0.0f) == 0x8000);
  const uint16_t nan = ft::float_to_bf16(bits_to_float(0x7f800001));  // signalling NaN
  CHECK((nan & 0x7f80) == 0x7f80);
  CHECK((nan & 0x007f) != 0);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = ft::bf16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    REQUIRE(ft::float_to_bf16(f) == b);
  }
}

TEST_CASE("helpers: element access and poison") {
  for (fmha_dtype t : {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16}) {
    INFO("dtype ", std::string(ft::dtype_label(t)));
    std::vector<unsigned char> buf(16 * ft::dtype_bytes(t));
    ft::fill_poison(buf.data(), t, 16);
    for (int e = 0; e < 16; ++e) {
      CHECK(ft::is_poison(buf.data(), t, e));
      CHECK(std::isnan(ft::load_element(buf.data(), t, e)));
    }
    ft::store_element(buf.data(), t, 3, 1.5f);
    CHECK(!ft::is_poison(buf.data(), t, 3));
    CHECK(ft::load_element(buf.data(), t, 3) == 1.5);
    // A NaN that arithmetic makes is not the poison.
    ft::store_element(buf.data(), t, 4, std::numeric_limits<float>::quiet_NaN());
    CHECK(!ft::is_poison(buf.data(), t, 4));
    ft::store_element(buf.data(), t, 5, 0.1f);
    CHECK(ft::load_element(buf.data(), t, 5) == static_cast<double>(ft::round_to_dtype(0.1f, t)));
  }
}

TEST_CASE("helpers: the mask follows the header's rules") {
  using ft::key_visible;
  // Nq = 3, Nk = 5. Bottom-right: d(i) = i + 2.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_NONE, -1, -1));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_CAUSAL, -1, -1) == (j <= i + 2));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_CAUSAL_TOP_LEFT, -1, -1) == (j <= i));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_NONE, 1, -1) == (j >= i + 1));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_NONE, -1, 0) == (j <= i + 2));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_NONE, 0, 0) == (j == i + 2));
      CHECK(key_visible(i, j, 3, 5, FMHA_MASK_CAUSAL_TOP_LEFT, 1, 0) == (j == i || j == i - 1));
    }
  // Nq = 5 > Nk = 2, bottom-right causal: d(i) = i - 3, rows 0..2 see nothing.
  for (int64_t i = 0; i < 5; ++i) {
    bool any = false;
    for (int64_t j = 0; j < 2; ++j) any = any || key_visible(i, j, 5, 2, FMHA_MASK_CAUSAL, -1, -1);
    CHECK(any == (i >= 3));
  }
}

TEST_CASE("helpers: the reference on problems solvable by hand") {
  SUBCASE("one key: O = v, lse = the logit") {
    Tiny t(1, 1, 1, 2, 1, 2);
    t.q = {1, 2, 3, -1};
    t.k = {0.5f, 0.25f};
    t.v = {7, -3};
    t.bind().scale = 2.f;
    const ft::ReferenceResult r = ft::reference_forward(t.params);
    CHECK(r.o == std::vector<double>{7, -3, 7, -3});
    CHECK(r.lse[0] == doctest::Approx(2.0 * (0.5 + 0.5)));
    CHECK(r.lse[1] == doctest::Approx(2.0 * (1.5 - 0.25)));
  }
  SUBCASE("equal logits: O = mean of the visible v, lse = log(count)") {
    Tiny t(1, 1, 1, 3, 3, 1);
    t.q = {0, 0, 0};
    t.k = {1, 2, 3};
    t.v = {3, 6, 12};
    t.bind().mask_flags = FMHA_MASK_CAUSAL;
    const ft::ReferenceResult r = ft::reference_forward(t.params);
    CHECK(r.o[0] == doctest::Approx(3.0));
    CHECK(r.o[1] == doctest::Approx(4.5));
    CHECK(r.o[2] == doctest::Approx(7.0));
    CHECK(r.lse[2] == doctest::Approx(std::log(3.0)));
  }
  SUBCASE("two keys: softmax weights, default scale, softcap") {
    Tiny t(1, 1, 1, 1, 2, 4);
    t.q = {1, 1, 1, 1};
    t.k = {1, 0, 0, 0, 0, 0, 0, 1};  // raw dots 1 and 1
    t.k[1] = 1;                      // dots 2 and 1 -> logits 1 and 0.5 (scale 1/2)
    t.v = {1, 0, 0, 0, 0, 1, 0, 0};
    t.bind();
    ft::ReferenceResult r = ft::reference_forward(t.params);
    const double w0 = std::exp(1.0) / (std::exp(1.0) + std::exp(0.5));
    CHECK(r.scale == 0.5);
    CHECK(r.o[0] == doctest::Approx(w0));
    CHECK(r.o[1] == doctest::Approx(1 - w0));
    CHECK(r.lse[0] == doctest::Approx(std::log(std::exp(1.0) + std::exp(0.5))));
    t.params.softcap = 0.75f;  // logits -> 0.75 tanh(s / 0.75)
    r = ft::reference_forward(t.params);
    const double s0 = 0.75 * std::tanh(1.0 / 0.75), s1 = 0.75 * std::tanh(0.5 / 0.75);
    CHECK(r.o[0] == doctest::Approx(std::exp(s0) / (std::exp(s0) + std::exp(s1))));
    CHECK(r.max_abs_logit == doctest::Approx(s0));
  }
  SUBCASE("GQA: query head h reads kv head h / (Hq / Hk)") {
    Tiny t(1, 4, 2, 1, 1, 1);
    t.q = {1, 1, 1, 1};
    t.k = {1, 1};
    t.v = {10, 20};
    t.bind();
    const ft::ReferenceResult r = ft::reference_forward(t.params);
    CHECK(r.o == std::vector<double>{10, 10, 20, 20});
  }
  SUBCASE("a row that sees no key: O = 0, lse = -inf") {
    Tiny t(1, 1, 1, 3, 1, 2);
    t.q = {1, 2, 3, 4, 5, 6};
    t.k = {1, 1};
    t.v = {5, 5};
    t.bind().mask_flags = FMHA_MASK_CAUSAL;  // d(i) = i - 2: rows 0, 1 empty
    const ft::ReferenceResult r = ft::reference_forward(t.params);
    CHECK(r.visible_keys == std::vector<int64_t>{0, 0, 1});
    CHECK(r.o == std::vector<double>{0, 0, 0, 0, 5, 5});
    CHECK(std::isinf(r.lse[0]));
    CHECK(r.lse[0] < 0);
  }
}

TEST_CASE("helpers: comparison flags every unwritten or non-finite element") {
  const std::vector<double> ref = {1, 2, 3, 4};
  SUBCASE("exact") {
    const ft::ErrorStats s = ft::compare_values(ref.data(), nullptr, ref.data(), 4);
    CHECK(s.all_finite());
    CHECK(s.rel_l2 == 0.0);
    CHECK(s.max_abs == 0.0);
  }
  SUBCASE("errors") {
    const std::vector<double> a = {1, 2, 3, 4.3};
    const ft::ErrorStats s = ft::compare_values(a.data(), nullptr, ref.data(), 4);
    CHECK(s.rel_l2 == doctest::Approx(0.3 / std::sqrt(30.0)));
    CHECK(s.max_abs == doctest::Approx(0.3));
    CHECK(s.worst == 3);
    CHECK(s.max_abs_rel() == doctest::Approx(0.3 / 4));
  }
  SUBCASE("NaN, inf and unwritten") {
    const std::vector<double> a = {1, std::nan(""), INFINITY, 4};
    const std::vector<uint8_t> unwritten = {0, 0, 0, 1};
    const ft::ErrorStats s = ft::compare_values(a.data(), unwritten.data(), ref.data(), 4);
    CHECK(s.nonfinite == 2);
    CHECK(s.unwritten == 1);
    CHECK(s.first_bad == 1);
    CHECK(!s.all_finite());
  }
  SUBCASE("lse: -inf rows and relative error") {
    const std::vector<double> want = {-INFINITY, 2.0, 1e4};
    const std::vector<float> got = {-INFINITY, 2.00001f, 1e4f + 1.f};
    const ft::LseStats s = ft::compare_lse(got.data(), nullptr, want.data(), 3);
    CHECK(s.all_valid());
    CHECK(s.max_err == doctest::Approx(1e-4).epsilon(1e-3));
    const std::vector<float> bad = {0.f, 2.f, NAN};
    const ft::LseStats t = ft::compare_lse(bad.data(), nullptr, want.data(), 3);
    CHECK(t.wrong_masked == 1);
    CHECK(t.nonfinite == 1);
  }
}

TEST_CASE("helpers: the case matrix is valid, named uniquely and affordable") {
  std::set<std::string> names;
  double work = 0;
  int count = 0;
  for (const ft::CaseGroup& g : ft::case_matrix()) {
    INFO("group ", std::string(g.name));
    CHECK(!g.cases.empty());
    for (const ft::AttentionCase& c : g.cases) {
      CAPTURE(c.name());
      CHECK(c.invalid_reason() == nullptr);
      CHECK(names.insert(c.name()).second);
      work += c.work();
      ++count;
    }
  }
  // Keeps the float64 reference plus two kernel runs per case around a
  // second in a release build (sanitizer builds run ~10x slower).
  INFO(count, " cases, ", work / 1e6, " M (B*Hq*Nq*Nk*D)");
  // 1.5e8 before the windows at tensor-core head dims (sm90 runs D >= 64
  // only), 1.8e8 before the rising logits (~30 M).
  CHECK(work < 2.0e8);
}

TEST_CASE("helpers: seeded data is reproducible and differs between cases") {
  ft::AttentionCase a;
  a.seq_q = a.seq_k = 9;
  a.head_dim = 16;
  ft::AttentionCase b = a;
  b.seq_k = 10;
  const ft::PreparedCase a1(a, 1), a2(a, 1), a3(a, 2), b1(b, 1);
  CHECK(a1.seed() == a2.seed());
  CHECK(a1.reference().o == a2.reference().o);
  CHECK(a1.seed() != a3.seed());
  CHECK(a1.reference().o != a3.reference().o);
  CHECK(a1.seed() != b1.seed());
  // Inputs are never exactly zero, so no output row is trivially 0.
  for (double x : a1.reference().o) CHECK(x != 0.0);
}

namespace {

// Host memory that lets a test tamper with the outputs after the forward
// ran (in synchronize()), to prove the runner notices.
class TamperingMemory final : public ft::DeviceMemory {
 public:
  struct Allocation {
    unsigned char* ptr;
    size_t bytes;
  };
  std::function<void(std::vector<Allocation>&)> tamper;

  fmha_device_kind kind() const override { return FMHA_DEVICE_CPU; }
  void* allocate(size_t bytes) override {
    void* p = host_.allocate(bytes);
    allocations_.push_back({static_cast<unsigned char*>(p), bytes});
    return p;
  }
  void release(void* ptr) override {
    const auto it = std::find_if(allocations_.begin(), allocations_.end(),
                                 [&](const Allocation& a) { return a.ptr == ptr; });
    if (it != allocations_.end()) allocations_.erase(it);
    host_.release(ptr);
  }
  bool to_device(void* d, const void* h, size_t n) override { return host_.to_device(d, h, n); }
  bool to_host(void* h, const void* d, size_t n) override { return host_.to_host(h, d, n); }
  bool synchronize() override {
    if (tamper) tamper(allocations_);
    return true;
  }

 private:
  ft::HostMemory host_;
  std::vector<Allocation> allocations_;
};

}  // namespace

TEST_CASE("helpers: the runner catches bad outputs") {
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  ft::AttentionCase c;  // BHND F32, rows 0..19 of 30 see no key
  c.heads_q = 2;
  c.seq_q = 30;
  c.seq_k = 10;
  c.head_dim = 16;
  c.mask_flags = FMHA_MASK_CAUSAL;
  const ft::PreparedCase pc(c);
  const int64_t o_elems = c.rows() * c.head_dim;
  const size_t o_alloc = static_cast<size_t>(o_elems) * 4 + 512;  // o plus its guards
  const size_t lse_alloc = static_cast<size_t>(c.rows()) * 4 + 512;
  auto find = [](std::vector<TamperingMemory::Allocation>& all, size_t bytes) -> float* {
    for (auto& a : all)
      if (a.bytes == bytes) return reinterpret_cast<float*>(a.ptr + 256);
    FAIL("allocation not found");
    return nullptr;
  };
  TamperingMemory mem;

  const ft::CaseResult clean = pc.run(h, mem);
  CHECK_MESSAGE(clean.ok(), clean.report());
  CHECK(clean.masked_rows == 40);

  SUBCASE("an element left unwritten") {
    mem.tamper = [&](auto& all) {
      const uint32_t poison = ft::kPoisonF32;
      std::memcpy(find(all, o_alloc) + o_elems - 1, &poison, 4);
    };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(r.o.unwritten == 1);
    CHECK(!r.ok());
  }
  SUBCASE("one wrong element in a large tensor") {
    mem.tamper = [&](auto& all) { find(all, o_alloc)[o_elems - 3] += 0.01f; };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(!r.ok());
  }
  SUBCASE("a masked row that is not exactly 0") {
    mem.tamper = [&](auto& all) { find(all, o_alloc)[5] = 1e-30f; };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(r.masked_rows_not_zero == 1);
    CHECK(!r.ok());
  }
  SUBCASE("a write just past o") {
    mem.tamper = [&](auto& all) { find(all, o_alloc)[o_elems] = 0.f; };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(r.outside_writes == 1);
    CHECK(!r.ok());
  }
  SUBCASE("lse: inf, a finite value on a masked row, a write before lse") {
    mem.tamper = [&](auto& all) {
      float* lse = find(all, lse_alloc);
      lse[c.rows() - 1] = INFINITY;
      lse[0] = 0.f;
      lse[-1] = 0.f;
    };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(r.lse.nonfinite == 1);
    CHECK(r.lse.wrong_masked == 1);
    CHECK(r.outside_writes == 1);
    CHECK(!r.ok());
  }
  SUBCASE("an input modified") {
    mem.tamper = [&](auto& all) {
      for (auto& a : all)
        if (a.bytes == static_cast<size_t>(c.heads_q * c.seq_q * c.head_dim) * 4) a.ptr[0] ^= 1;
    };
    const ft::CaseResult r = pc.run(h, mem);
    CHECK(!r.inputs_unchanged);
    CHECK(!r.ok());
  }
  fmha_destroy(h);
}

TEST_CASE("helpers: a forced kernel that does not exist is reported, not crashed") {
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  ft::HostMemory mem;
  ft::AttentionCase c;
  c.seq_q = c.seq_k = 4;
  c.head_dim = 8;
  ft::RunOptions opt;
  opt.kernel = "no_such_kernel";
  const ft::CaseResult r = ft::run_case(h, mem, c, opt);
  CHECK(r.status == FMHA_ERROR_INVALID_ARGUMENT);
  CHECK(!r.ok());
  CHECK(r.report().find("no_such_kernel") != std::string::npos);
  fmha_destroy(h);
}
