// fmha_merge on the CPU: merging the forwards of key slices equals one
// forward over all the keys (the float64 reference), with -inf rows, in
// place, mixed dtypes, strided outputs and many parts; every validation
// failure names its field and leaves the outputs untouched.
#include <doctest/doctest.h>
#include <fmha/fmha.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/random.h"
#include "common/reference.h"
#include "common/tolerance.h"

namespace {

using fmha_test::dtype_bytes;
using fmha_test::load_element;
using fmha_test::store_element;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A host tensor [B, H, N, D]: contiguous BHND, or a BNHD view with
// `pad` unused elements after each row of H*D (a strided layout).
struct HostTensor {
  std::vector<unsigned char> bytes;
  fmha_tensor t{};

  HostTensor() = default;
  HostTensor(fmha_dtype dtype, int64_t B, int64_t H, int64_t N, int64_t D, bool bnhd = false, int64_t pad = 0) {
    const int64_t row = H * D + pad;  // BNHD: one (b, n) holds H heads of D, then pad
    const int64_t elements = bnhd ? B * N * row : B * H * N * D;
    bytes.assign(static_cast<size_t>(std::max<int64_t>(elements, 1)) * dtype_bytes(dtype), 0);
    t.data = bytes.data();
    t.dtype = dtype;
    const int64_t dims[4] = {B, H, N, D};
    std::memcpy(t.dims, dims, sizeof dims);
    if (bnhd) {
      const int64_t strides[4] = {N * row, D, row, 1};
      std::memcpy(t.strides, strides, sizeof strides);
    } else {
      const int64_t strides[4] = {H * N * D, N * D, D, 1};
      std::memcpy(t.strides, strides, sizeof strides);
    }
  }
  int64_t offset(int64_t b, int64_t h, int64_t n, int64_t d) const {
    return b * t.strides[0] + h * t.strides[1] + n * t.strides[2] + d * t.strides[3];
  }
  double at(int64_t b, int64_t h, int64_t n, int64_t d) const { return load_element(t.data, t.dtype, offset(b, h, n, d)); }
  int64_t capacity() const { return static_cast<int64_t>(bytes.size() / dtype_bytes(t.dtype)); }
  void fill_random(fmha_test::Rng& rng) {
    for (int64_t e = 0; e < capacity(); ++e) store_element(t.data, t.dtype, e, static_cast<float>(rng.normal()));
  }
  void poison() { fmha_test::fill_poison(t.data, t.dtype, static_cast<size_t>(capacity())); }
  bool all_poison() const {
    for (int64_t e = 0; e < capacity(); ++e)
      if (!fmha_test::is_poison(t.data, t.dtype, e)) return false;
    return true;
  }
};

// The keys [begin, end) of k or v as a view.
fmha_tensor key_slice(const fmha_tensor& full, int64_t begin, int64_t end) {
  fmha_tensor s = full;
  s.data = static_cast<unsigned char*>(full.data) + begin * full.strides[2] * dtype_bytes(full.dtype);
  s.dims[2] = end - begin;
  return s;
}

fmha_test::Tolerance looser(fmha_test::Tolerance a, fmha_test::Tolerance b) {
  return {std::max(a.o_rel_l2, b.o_rel_l2), std::max(a.o_max_abs_rel, b.o_max_abs_rel), std::max(a.lse_abs, b.lse_abs)};
}

struct MergeCase {
  fmha_dtype in_dtype = FMHA_DTYPE_F32;  // q, k, v and the parts
  fmha_dtype out_dtype = FMHA_DTYPE_F32;
  int64_t B = 2, Hq = 4, Hk = 2, Nq = 9, Nk = 40, D = 24;
  int parts = 3;
  uint32_t mask = FMHA_MASK_NONE;  // over all the keys: FMHA_MASK_CAUSAL or none
  bool in_place = false;           // o = o_parts[0], lse = lse_parts[0]
  bool strided_out = false;        // o as a padded BNHD view
  bool poison_dead_parts = true;   // NaN in the o rows of parts with lse -inf
  uint64_t seed = 1;
};

// Runs the forwards of `c.parts` key slices, merges them, and checks o and
// lse against one float64 forward over all the keys.
void check_merge_case(const MergeCase& c) {
  CAPTURE(c.parts);
  CAPTURE(fmha_test::dtype_label(c.in_dtype));
  CAPTURE(fmha_test::dtype_label(c.out_dtype));
  CAPTURE(c.mask);
  CAPTURE(c.in_place);
  CAPTURE(c.strided_out);
  fmha_test::Rng rng(c.seed);
  HostTensor q(c.in_dtype, c.B, c.Hq, c.Nq, c.D), k(c.in_dtype, c.B, c.Hk, c.Nk, c.D), v(c.in_dtype, c.B, c.Hk, c.Nk, c.D);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);

  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);

  // Slice boundaries: parts - 1 distinct random cuts of the Nk keys, so
  // every slice holds at least one key.
  std::vector<int64_t> cut{0};
  {
    std::vector<int64_t> inner;
    for (int64_t j = 1; j < c.Nk; ++j) inner.push_back(j);
    for (size_t i = 0; i + 1 < inner.size(); ++i)
      std::swap(inner[i], inner[i + rng.below(static_cast<uint64_t>(inner.size() - i))]);
    inner.resize(static_cast<size_t>(c.parts - 1));
    std::sort(inner.begin(), inner.end());
    cut.insert(cut.end(), inner.begin(), inner.end());
    cut.push_back(c.Nk);
  }

  std::vector<HostTensor> o_parts(static_cast<size_t>(c.parts));
  std::vector<std::vector<float>> lse_parts(static_cast<size_t>(c.parts));
  const int64_t rows = c.B * c.Hq * c.Nq;
  for (int i = 0; i < c.parts; ++i) {
    o_parts[i] = HostTensor(c.in_dtype, c.B, c.Hq, c.Nq, c.D);
    lse_parts[i].assign(static_cast<size_t>(rows), 0.f);
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    p.q = q.t;
    p.k = key_slice(k.t, cut[i], cut[i + 1]);
    p.v = key_slice(v.t, cut[i], cut[i + 1]);
    p.o = o_parts[i].t;
    p.lse = lse_parts[i].data();
    if (c.mask == FMHA_MASK_CAUSAL) {
      // Key j of the slice is key cut[i] + j overall: visible iff
      // cut[i] + j <= q + Nk - Nq, i.e. the slice's bottom-right diagonal
      // (q + slice - Nq) plus a right window of Nk - cut[i+1].
      p.window_right = static_cast<int32_t>(c.Nk - cut[i + 1]);
    }
    size_t bytes = 0;
    REQUIRE(fmha_forward_workspace_size(h, &p, &bytes) == FMHA_SUCCESS);
    std::vector<unsigned char> ws(bytes + 16);
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 15) & ~uintptr_t{15});
    REQUIRE_MESSAGE(fmha_forward(h, &p, aligned, bytes) == FMHA_SUCCESS, fmha_last_error_message());
    if (c.poison_dead_parts)  // a part without keys contributes nothing, whatever its o holds
      for (int64_t r = 0; r < rows; ++r)
        if (lse_parts[i][r] == kNegInf)
          for (int64_t d = 0; d < c.D; ++d)
            store_element(o_parts[i].t.data, c.in_dtype, r * c.D + d, std::nanf(""));
  }

  // The result: o_parts[0] itself, or a fresh (maybe strided) poisoned o.
  HostTensor out;
  std::vector<float> out_lse_store(static_cast<size_t>(rows));
  float* out_lse = c.in_place ? lse_parts[0].data() : out_lse_store.data();
  if (!c.in_place) {
    out = HostTensor(c.out_dtype, c.B, c.Hq, c.Nq, c.D, c.strided_out, c.strided_out ? 5 : 0);
    out.poison();
    for (float& x : out_lse_store) x = std::nanf("");
  }
  std::vector<fmha_tensor> views;
  std::vector<const float*> lse_ptrs;
  for (int i = 0; i < c.parts; ++i) {
    views.push_back(o_parts[i].t);
    lse_ptrs.push_back(lse_parts[i].data());
  }
  fmha_merge_params mp;
  fmha_merge_params_init(&mp);
  mp.num_parts = c.parts;
  mp.o_parts = views.data();
  mp.lse_parts = lse_ptrs.data();
  mp.o = c.in_place ? o_parts[0].t : out.t;
  mp.lse = out_lse;
  REQUIRE_MESSAGE(fmha_merge(h, &mp) == FMHA_SUCCESS, fmha_last_error_message());
  CHECK(std::string(fmha_last_error_message()).empty());
  const HostTensor& result = c.in_place ? o_parts[0] : out;

  // One forward over all the keys, in float64.
  fmha_forward_params full;
  fmha_forward_params_init(&full);
  full.q = q.t;
  full.k = k.t;
  full.v = v.t;
  full.mask_flags = c.mask;
  const fmha_test::ReferenceResult ref = fmha_test::reference_forward(full);

  const fmha_test::Tolerance tol =
      looser(fmha_test::tolerance_for(c.in_dtype), fmha_test::tolerance_for(result.t.dtype));
  double err2 = 0, ref2 = 0, max_err = 0, ref_max = 0, lse_err = 0;
  int64_t bad = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t hh = 0; hh < c.Hq; ++hh)
      for (int64_t n = 0; n < c.Nq; ++n) {
        const int64_t r = (b * c.Hq + hh) * c.Nq + n;
        const double want_lse = ref.lse[r];
        if (ref.visible_keys[r] == 0) {  // every part -inf: o = 0, lse = -inf
          bad += out_lse[r] != kNegInf;
          for (int64_t d = 0; d < c.D; ++d) bad += result.at(b, hh, n, d) != 0.0;
          continue;
        }
        lse_err = std::max(lse_err, std::fabs(out_lse[r] - want_lse) / std::max(1.0, std::fabs(want_lse)));
        for (int64_t d = 0; d < c.D; ++d) {
          const double got = result.at(b, hh, n, d), want = ref.o[r * c.D + d];
          bad += !std::isfinite(got);
          err2 += (got - want) * (got - want);
          ref2 += want * want;
          max_err = std::max(max_err, std::fabs(got - want));
          ref_max = std::max(ref_max, std::fabs(want));
        }
      }
  CHECK(bad == 0);
  CHECK(std::sqrt(err2 / std::max(ref2, 1e-300)) <= tol.o_rel_l2);
  CHECK(max_err / std::max(ref_max, 1e-300) <= tol.o_max_abs_rel);
  CHECK(lse_err <= tol.lse_abs);
  if (c.strided_out) {  // the pads between rows keep their poison
    int64_t touched = 0;
    const int64_t row = c.Hq * c.D + 5;
    for (int64_t e = 0; e < out.capacity(); ++e)
      if (e % row >= c.Hq * c.D) touched += !fmha_test::is_poison(out.t.data, out.t.dtype, e);
    CHECK(touched == 0);
  }
  fmha_destroy(h);
}

}  // namespace

TEST_CASE("merge: params init") {
  fmha_merge_params p;
  std::memset(&p, 0xab, sizeof p);
  fmha_merge_params_init(&p);
  CHECK(p.struct_size == FMHA_MERGE_PARAMS_SIZE_V1);
  CHECK(p.struct_size == sizeof(fmha_merge_params));
  CHECK(p.num_parts == 0);
  CHECK(p.o_parts == nullptr);
  CHECK(p.lse_parts == nullptr);
  CHECK(p.o.data == nullptr);
  CHECK(p.lse == nullptr);
  fmha_merge_params_init(nullptr);  // ignored
}

TEST_CASE("merge: 1 to 8 parts equal one forward over all the keys") {
  for (int parts = 1; parts <= 8; ++parts)
    for (fmha_dtype dt : {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16}) {
      MergeCase c;
      c.parts = parts;
      c.in_dtype = c.out_dtype = dt;
      c.seed = 100 + parts * 7 + dt;
      check_merge_case(c);
    }
}

TEST_CASE("merge: causal slices give -inf parts and rows that see no key") {
  for (int parts : {2, 3, 5}) {
    MergeCase c;
    c.parts = parts;
    c.mask = FMHA_MASK_CAUSAL;
    c.Nq = 30;  // Nq > Nk: the first 6 rows see no key at all
    c.Nk = 24;
    c.seed = 200 + parts;
    check_merge_case(c);
    c.Nq = 12;  // Nq < Nk: early rows see only the first slices
    c.seed += 50;
    check_merge_case(c);
  }
}

TEST_CASE("merge: in place into o_parts[0] and lse_parts[0]") {
  for (fmha_dtype dt : {FMHA_DTYPE_F32, FMHA_DTYPE_BF16}) {
    MergeCase c;
    c.parts = 4;
    c.in_dtype = c.out_dtype = dt;
    c.in_place = true;
    c.mask = FMHA_MASK_CAUSAL;
    c.Nq = 20;
    c.Nk = 32;
    c.poison_dead_parts = false;  // part 0's rows are the output
    c.seed = 300 + dt;
    check_merge_case(c);
  }
}

TEST_CASE("merge: mixed dtypes of parts and o, and a strided o") {
  for (fmha_dtype in : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32})
    for (fmha_dtype out : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32}) {
      MergeCase c;
      c.parts = 3;
      c.in_dtype = in;
      c.out_dtype = out;
      c.strided_out = (in + out) % 2 == 0;
      c.seed = 400 + in * 3 + out;
      check_merge_case(c);
    }
}

TEST_CASE("merge: many parts (more than one CUDA round) on the CPU") {
  MergeCase c;
  c.parts = 70;
  c.B = 1;
  c.Hq = c.Hk = 2;
  c.Nq = 5;
  c.Nk = 140;
  c.D = 8;
  c.seed = 500;
  check_merge_case(c);
}

TEST_CASE("merge: NaN and +inf lse make the row NaN; -inf parts are skipped") {
  const int64_t D = 4;
  std::vector<float> a(2 * D), b(2 * D), o(2 * D, 7.f);
  for (int64_t d = 0; d < 2 * D; ++d) {
    a[d] = 1.f + static_cast<float>(d);
    b[d] = std::nanf("");  // b is -inf in row 0: never read there
  }
  std::vector<float> la = {0.5f, std::nanf("")}, lb = {kNegInf, 2.f}, lse(2, 3.f);
  fmha_tensor ta{a.data(), FMHA_DTYPE_F32, {1, 1, 2, D}, {2 * D, 2 * D, D, 1}};
  fmha_tensor tb = ta, to = ta;
  tb.data = b.data();
  to.data = o.data();
  const fmha_tensor parts[2] = {ta, tb};
  const float* lses[2] = {la.data(), lb.data()};
  fmha_merge_params mp;
  fmha_merge_params_init(&mp);
  mp.num_parts = 2;
  mp.o_parts = parts;
  mp.lse_parts = lses;
  mp.o = to;
  mp.lse = lse.data();
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  REQUIRE(fmha_merge(h, &mp) == FMHA_SUCCESS);
  for (int64_t d = 0; d < D; ++d) CHECK(o[d] == a[d]);  // row 0: only part a
  CHECK(lse[0] == doctest::Approx(0.5));
  for (int64_t d = D; d < 2 * D; ++d) CHECK(std::isnan(o[d]));
  CHECK(std::isnan(lse[1]));
  la[1] = std::numeric_limits<float>::infinity();
  REQUIRE(fmha_merge(h, &mp) == FMHA_SUCCESS);
  CHECK(std::isnan(lse[1]));
  CHECK(std::isnan(o[D]));
  fmha_destroy(h);
}

TEST_CASE("merge: empty work is success") {
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  for (int empty_dim : {0, 2}) {
    fmha_tensor t{nullptr, FMHA_DTYPE_F16, {2, 3, 4, 8}, {96, 32, 8, 1}};
    t.dims[empty_dim] = 0;
    const fmha_tensor parts[2] = {t, t};
    const float* lses[2] = {nullptr, nullptr};
    fmha_merge_params mp;
    fmha_merge_params_init(&mp);
    mp.num_parts = 2;
    mp.o_parts = parts;
    mp.lse_parts = lses;
    mp.o = t;
    CHECK_MESSAGE(fmha_merge(h, &mp) == FMHA_SUCCESS, fmha_last_error_message());
  }
  fmha_destroy(h);
}

namespace {

// A valid two-part F32 merge with poisoned outputs, for the failure cases.
struct MergeFixture {
  static constexpr int64_t B = 2, H = 3, N = 5, D = 8, kRows = B * H * N, kElems = kRows * D;
  std::vector<float> store;  // part 0, part 1, o, lse 0, lse 1, lse, in one buffer
  fmha_tensor parts[2];
  const float* lses[2];
  fmha_merge_params p;
  fmha_handle h = nullptr;

  MergeFixture() : store(3 * kElems + 3 * kRows) {
    fmha_test::Rng rng(9);
    for (float& x : store) x = static_cast<float>(rng.normal());
    for (int i = 0; i < 2; ++i) {
      parts[i] = view(part(i));
      lses[i] = lse_part(i);
    }
    REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
    fmha_merge_params_init(&p);
    p.num_parts = 2;
    p.o_parts = parts;
    p.lse_parts = lses;
    p.o = view(o());
    p.lse = lse();
  }
  ~MergeFixture() { fmha_destroy(h); }
  float* part(int i) { return store.data() + i * kElems; }
  float* o() { return store.data() + 2 * kElems; }
  float* lse_part(int i) { return store.data() + 3 * kElems + i * kRows; }
  float* lse() { return store.data() + 3 * kElems + 2 * kRows; }
  static fmha_tensor view(float* data) { return {data, FMHA_DTYPE_F32, {B, H, N, D}, {H * N * D, N * D, D, 1}}; }

  // Runs with poisoned o and lse; expects `status`, a message holding
  // `needle`, and every byte of the buffer but o and lse unchanged and o,
  // lse still poisoned.
  void expect_failure(fmha_status status, const char* needle) {
    for (int64_t e = 0; e < kElems; ++e) o()[e] = std::nanf("");
    for (int64_t r = 0; r < kRows; ++r) lse()[r] = std::nanf("");
    const std::vector<float> before = store;
    const fmha_status got = fmha_merge(h, &p);
    const std::string msg = fmha_last_error_message();
    CHECK_MESSAGE(got == status, msg);
    CHECK_MESSAGE(msg.find(needle) != std::string::npos, "message: ", msg, " | expected: ", needle);
    CHECK(std::memcmp(before.data(), store.data(), store.size() * sizeof(float)) == 0);
  }
};

}  // namespace

TEST_CASE("merge: every invalid argument names its field and writes nothing") {
  {
    MergeFixture f;
    CHECK(fmha_merge(nullptr, &f.p) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(fmha_last_error_message()).find("handle is NULL") != std::string::npos);
    CHECK(fmha_merge(f.h, nullptr) == FMHA_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(fmha_last_error_message()).find("params is NULL") != std::string::npos);
    REQUIRE(fmha_merge(f.h, &f.p) == FMHA_SUCCESS);  // the fixture is valid
  }
  struct Bad {
    const char* needle;
    void (*mutate)(MergeFixture&);
  };
  const Bad cases[] = {
      {"struct_size=7", [](MergeFixture& f) { f.p.struct_size = 7; }},
      {"num_parts=0 must be >= 1", [](MergeFixture& f) { f.p.num_parts = 0; }},
      {"num_parts=-3 must be >= 1", [](MergeFixture& f) { f.p.num_parts = -3; }},
      {"o_parts is NULL", [](MergeFixture& f) { f.p.o_parts = nullptr; }},
      {"lse_parts is NULL", [](MergeFixture& f) { f.p.lse_parts = nullptr; }},
      {"o_parts[1].data is NULL", [](MergeFixture& f) { f.parts[1].data = nullptr; }},
      {"o_parts[0].dtype=9 is not an fmha_dtype", [](MergeFixture& f) { f.parts[0].dtype = static_cast<fmha_dtype>(9); }},
      {"o.dtype=-1 is not an fmha_dtype", [](MergeFixture& f) { f.p.o.dtype = static_cast<fmha_dtype>(-1); }},
      {"o_parts[1].dtype=F16 differs from o_parts[0].dtype=F32", [](MergeFixture& f) { f.parts[1].dtype = FMHA_DTYPE_F16; }},
      // FP8 is an input dtype of the forward, never its o: not a partial output.
      {"o_parts[0].dtype=F8E4M3: fmha_merge takes F16, BF16 or F32", [](MergeFixture& f) {
         for (fmha_tensor& t : f.parts) t.dtype = FMHA_DTYPE_F8E4M3;
       }},
      {"o.dtype=F8E5M2: fmha_merge writes F16, BF16 or F32", [](MergeFixture& f) { f.p.o.dtype = FMHA_DTYPE_F8E5M2; }},
      {"o_parts[1].dims[2]=4 differs from o_parts[0].dims[2]=5", [](MergeFixture& f) { f.parts[1].dims[2] = 4; }},
      {"o.dims[3]=4 differs from o_parts[0].dims[3]=8", [](MergeFixture& f) { f.p.o.dims[3] = 4; }},
      {"o_parts[0].dims[1]=0 (heads) must be positive", [](MergeFixture& f) { f.parts[0].dims[1] = 0; }},
      {"o.dims[0]=-1 (batch) must be non-negative", [](MergeFixture& f) { f.p.o.dims[0] = -1; }},
      {"o_parts[1].strides[2]=-8 must be non-negative", [](MergeFixture& f) { f.parts[1].strides[2] = -8; }},
      {"o_parts[0].dims[3]=4611686018427387905 (head_dim) exceeds FMHA_MAX_DIM",
       [](MergeFixture& f) { f.parts[0].dims[3] = FMHA_MAX_DIM + 1; }},
      {"o.data=", [](MergeFixture& f) { f.p.o.data = reinterpret_cast<char*>(f.o()) + 2; }},
      {"o: dims x strides overflows int64", [](MergeFixture& f) { f.p.o.strides[0] = INT64_MAX; }},
      {"o: extent of 4611686018427388022 + 1 elements of 4 bytes overflows",
       [](MergeFixture& f) { f.p.o.strides[0] = INT64_MAX / 2; }},
      {"lse_parts[1] is NULL", [](MergeFixture& f) { f.lses[1] = nullptr; }},
      {"lse_parts[0]=", [](MergeFixture& f) { f.lses[0] = reinterpret_cast<const float*>(reinterpret_cast<const char*>(f.lse_part(0)) + 1); }},
      {"lse=", [](MergeFixture& f) { f.p.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(f.lse()) + 2); }},
      {"makes o overlap itself", [](MergeFixture& f) { f.p.o.strides[2] = 4; }},
      {"o overlaps o_parts[1]", [](MergeFixture& f) { f.p.o.data = f.part(1) + 3; }},
      {"o overlaps o_parts[0]", [](MergeFixture& f) { f.p.o.data = f.part(0) + 1; }},
      // Same data as o_parts[0] but other strides: not "o_parts[0] itself".
      {"o overlaps o_parts[0]", [](MergeFixture& f) {
         f.p.o.data = f.part(0);
         f.p.o.strides[0] = 2 * MergeFixture::kElems / MergeFixture::B;
       }},
      // Same address, other dtype: a different view of the bytes.
      {"o overlaps o_parts[0]", [](MergeFixture& f) {
         f.p.o.data = f.part(0);
         f.p.o.dtype = FMHA_DTYPE_F16;
       }},
      {"o overlaps lse_parts[0]", [](MergeFixture& f) { f.lses[0] = f.o() + 16; }},
      {"lse overlaps o", [](MergeFixture& f) { f.p.lse = f.o() + 8; }},
      {"lse overlaps o_parts[1]", [](MergeFixture& f) { f.p.lse = f.part(1) + 64; }},
      {"lse overlaps lse_parts[1]", [](MergeFixture& f) { f.p.lse = f.lse_part(1) + 1; }},
      {"lse overlaps lse_parts[0]", [](MergeFixture& f) { f.p.lse = f.lse_part(0) + 1; }},
      {"lse overlaps lse_parts[1]", [](MergeFixture& f) {  // lse_parts[0] itself, but also part 1's
         f.lses[1] = f.lse_part(0);
         f.p.lse = f.lse_part(0);
       }},
  };
  for (const Bad& c : cases) {
    const std::string needle = c.needle;
    CAPTURE(needle);
    MergeFixture f;
    c.mutate(f);
    f.expect_failure(FMHA_ERROR_INVALID_ARGUMENT, c.needle);
  }
  // The legal aliases (o = o_parts[0], lse = lse_parts[0]) pass.
  MergeFixture f;
  f.p.o = f.parts[0];
  f.p.lse = f.lse_part(0);
  CHECK_MESSAGE(fmha_merge(f.h, &f.p) == FMHA_SUCCESS, fmha_last_error_message());
}

namespace {

// The byte offsets (in an arena) a [B, H, N, D] view covers.
std::vector<int64_t> view_bytes(int64_t base, const int64_t dims[4], const int64_t strides[4], int64_t esize) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t h = 0; h < dims[1]; ++h)
      for (int64_t n = 0; n < dims[2]; ++n)
        for (int64_t d = 0; d < dims[3]; ++d)
          for (int64_t e = 0; e < esize; ++e)
            out.push_back(base + (b * strides[0] + h * strides[1] + n * strides[2] + d * strides[3]) * esize + e);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool intersect(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return !both.empty();
}

}  // namespace

TEST_CASE("merge: random placements in one arena: overlap verdicts, outputs and nothing else written") {
  // Parts, lse arrays, o and lse at random places and layouts in one F32
  // arena, sometimes aliasing. fmha_merge must accept exactly the placements
  // a byte-by-byte comparison allows (o disjoint from everything but
  // o_parts[0] itself, lse from everything but lse_parts[0]), then write o
  // and lse only, with the float64 merge's values; refuse the others and
  // write nothing.
  fmha_test::Rng rng(20261130);
  fmha_handle h = nullptr;
  REQUIRE(fmha_create(&h, FMHA_DEVICE_CPU, 0) == FMHA_SUCCESS);
  constexpr int64_t kArena = 600;
  int accepted = 0, refused = 0;
  for (int iter = 0; iter < 400; ++iter) {
    CAPTURE(iter);
    const int64_t dims[4] = {1 + static_cast<int64_t>(rng.below(2)), 1 + static_cast<int64_t>(rng.below(2)),
                             1 + static_cast<int64_t>(rng.below(3)), 1 + static_cast<int64_t>(rng.below(4))};
    const int64_t rows = dims[0] * dims[1] * dims[2], elems = rows * dims[3];
    const int n = 1 + static_cast<int>(rng.below(3));
    auto layout = [&](int64_t strides[4]) {
      switch (rng.below(3)) {
        case 0: {  // BHND
          const int64_t s[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
          std::memcpy(strides, s, sizeof s);
          break;
        }
        case 1: {  // BNHD
          const int64_t s[4] = {dims[2] * dims[1] * dims[3], dims[3], dims[1] * dims[3], 1};
          std::memcpy(strides, s, sizeof s);
          break;
        }
        default: {  // rows padded: every other element (interleavable with another view)
          const int64_t s[4] = {2 * dims[1] * dims[2] * dims[3], 2 * dims[2] * dims[3], 2 * dims[3], 2};
          std::memcpy(strides, s, sizeof s);
        }
      }
    };
    auto place = [&](int64_t span) { return static_cast<int64_t>(rng.below(static_cast<uint64_t>(kArena - span))); };
    const int64_t span = 2 * elems;  // the padded layout's reach
    std::vector<float> arena(kArena);
    for (float& x : arena) x = static_cast<float>(rng.normal());
    std::vector<fmha_tensor> parts(static_cast<size_t>(n));
    std::vector<const float*> lses(static_cast<size_t>(n));
    std::vector<int64_t> part_at(static_cast<size_t>(n)), lse_at(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      fmha_tensor& t = parts[i];
      part_at[i] = place(span);
      t.data = arena.data() + part_at[i];
      t.dtype = FMHA_DTYPE_F32;
      std::memcpy(t.dims, dims, sizeof dims);
      layout(t.strides);
      lse_at[i] = place(rows);
      lses[i] = arena.data() + lse_at[i];
      for (int64_t r = 0; r < rows; ++r)  // some parts see no key of a row
        if (rng.below(5) == 0) arena[lse_at[i] + r] = kNegInf;
    }
    fmha_tensor o = parts[0];
    int64_t o_at = part_at[0];
    if (rng.below(3) != 0) {
      o_at = place(span);
      o.data = arena.data() + o_at;
      layout(o.strides);
    }
    int64_t out_lse_at = rng.below(3) == 0 ? lse_at[0] : place(rows);
    const bool with_lse = rng.below(4) != 0;

    // The byte-level verdict.
    const std::vector<int64_t> o_bytes = view_bytes(o_at * 4, dims, o.strides, 4);
    const int64_t lse_dims[4] = {1, 1, 1, rows}, unit[4] = {0, 0, 0, 1};
    const std::vector<int64_t> out_lse_bytes = view_bytes(out_lse_at * 4, lse_dims, unit, 4);
    bool legal = o_bytes.size() == static_cast<size_t>(elems * 4);  // o does not overlap itself
    for (int i = 0; i < n; ++i) {
      const std::vector<int64_t> pb = view_bytes(part_at[i] * 4, dims, parts[i].strides, 4);
      const std::vector<int64_t> lb = view_bytes(lse_at[i] * 4, lse_dims, unit, 4);
      bool o_is_part0 = i == 0 && o.data == parts[0].data;  // same elements: strides of size-1 dims do not matter
      for (int d = 0; d < 4; ++d) o_is_part0 = o_is_part0 && (dims[d] == 1 || o.strides[d] == parts[0].strides[d]);
      if (!o_is_part0 && intersect(o_bytes, pb)) legal = false;
      if (intersect(o_bytes, lb)) legal = false;
      if (with_lse) {
        if (intersect(out_lse_bytes, pb) || intersect(out_lse_bytes, o_bytes)) legal = false;
        if (!(i == 0 && out_lse_at == lse_at[0]) && intersect(out_lse_bytes, lb)) legal = false;
      }
    }

    // The expected values, from the arena before the call.
    std::vector<double> want_o(static_cast<size_t>(elems)), want_lse(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nn = r % dims[2], hh = r / dims[2] % dims[1], bb = r / dims[2] / dims[1];
      double m = -INFINITY;
      for (int i = 0; i < n; ++i) m = std::max<double>(m, arena[lse_at[i] + r]);
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += m == -INFINITY ? 0 : std::exp(arena[lse_at[i] + r] - m);
      want_lse[r] = m == -INFINITY ? -INFINITY : m + std::log(sum);
      for (int64_t d = 0; d < dims[3]; ++d) {
        double acc = 0;
        for (int i = 0; i < n; ++i)
          if (arena[lse_at[i] + r] != kNegInf)
            acc += std::exp(arena[lse_at[i] + r] - m) / sum *
                   arena[part_at[i] + bb * parts[i].strides[0] + hh * parts[i].strides[1] + nn * parts[i].strides[2] +
                         d * parts[i].strides[3]];
        want_o[r * dims[3] + d] = acc;
      }
    }

    const std::vector<float> before = arena;
    fmha_merge_params mp;
    fmha_merge_params_init(&mp);
    mp.num_parts = n;
    mp.o_parts = parts.data();
    mp.lse_parts = lses.data();
    mp.o = o;
    mp.lse = with_lse ? arena.data() + out_lse_at : nullptr;
    const fmha_status s = fmha_merge(h, &mp);
    CHECK_MESSAGE((s == FMHA_SUCCESS) == legal, fmha_last_error_message());
    if (s != FMHA_SUCCESS) {
      ++refused;
      CHECK(std::string(fmha_last_error_message()).find("overlap") != std::string::npos);
      CHECK(std::memcmp(before.data(), arena.data(), arena.size() * sizeof(float)) == 0);
      continue;
    }
    ++accepted;
    std::vector<bool> written(static_cast<size_t>(kArena), false);
    for (int64_t byte : o_bytes) written[byte / 4] = true;
    if (with_lse)
      for (int64_t byte : out_lse_bytes) written[byte / 4] = true;
    int64_t outside = 0;
    for (int64_t e = 0; e < kArena; ++e)
      if (!written[e]) outside += std::memcmp(&before[e], &arena[e], sizeof(float)) != 0;
    CHECK(outside == 0);
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nn = r % dims[2], hh = r / dims[2] % dims[1], bb = r / dims[2] / dims[1];
      for (int64_t d = 0; d < dims[3]; ++d) {
        const float got = arena[o_at + bb * o.strides[0] + hh * o.strides[1] + nn * o.strides[2] + d * o.strides[3]];
        worst = std::max(worst, std::fabs(got - want_o[r * dims[3] + d]));
      }
      if (with_lse) {
        const float got = arena[out_lse_at + r];
        if (want_lse[r] == -INFINITY)
          CHECK(got == kNegInf);
        else
          worst = std::max(worst, std::fabs(got - want_lse[r]));
      }
    }
    CHECK(worst <= 1e-5);
  }
  CHECK(accepted > 20);  // both verdicts are exercised
  CHECK(refused > 20);
  fmha_destroy(h);
}
