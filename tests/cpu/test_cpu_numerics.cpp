// Numerics of the CPU backend: kernel "cpu_tiled", forced by name and chosen
// automatically, against the float64 reference over the case matrix of
// tests/common/attention_case.h (the same matrix the GPU tests run every
// CUDA kernel over). Every output element is checked, outputs are poisoned
// before each run, and each case gets its own seeded random data; a failure
// prints the case, the seed and the worst element.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/cpu_handle.h"
#include "common/numerics.h"

namespace ft = fmha_test;

namespace {

using fmha_test::CpuHandle;

constexpr const char* kKernel = "cpu_tiled";

// Runs one prepared case with `kernel` (null = automatic) and checks it.
ft::CaseResult check_run(const CpuHandle& handle, const ft::PreparedCase& pc, const char* kernel,
                         ft::RunOptions options = {}) {
  static ft::HostMemory memory;
  options.kernel = kernel;
  ft::CaseResult r = pc.run(handle.get(), memory, options);
  CHECK_MESSAGE(r.ok(), r.report());
  return r;
}

// Every case of `cases` with cpu_tiled forced and with the automatic choice.
// `extra` runs further per-case checks on each result.
template <class Extra>
void check_cases(const std::vector<ft::AttentionCase>& cases, Extra&& extra) {
  CpuHandle handle;
  for (const ft::AttentionCase& c : cases) {
    const ft::PreparedCase pc(c);
    for (const char* kernel : {kKernel, static_cast<const char*>(nullptr)}) {
      INFO("case ", c.name(), ", kernel ", std::string(kernel ? kernel : "(automatic)"));
      extra(check_run(handle, pc, kernel));
    }
  }
}

void check_cases(const std::vector<ft::AttentionCase>& cases) {
  check_cases(cases, [](const ft::CaseResult&) {});
}

// Decode shapes: Hq=32 query heads over Hk=8 kv heads at Nq = 1 (the
// decode step), the same group of 4 as Hq=8 over Hk=2 at Nq = 2..8 (a
// quarter of the reference's and the kernel's work: this group was 329 of
// test_cpu's ~480 s per path under qemu, 2026-12-02), and Nk long enough
// that the backend cuts each kv group's keys into several splits (it does
// from 16 key tiles of 64 up: 1100 keys give 2 splits of a group for B=1
// Hk=8, 4100 keys give 8; Hk=2 more). Causal bottom-right (the decode step),
// left windows whose band still spans several splits, a two-sided window
// without causal, every dtype; head dims 128, 64 and 80 (80: the padded dot
// product), softcap, lse on and off, a BNHD layout, a batch of 2 and a split
// with no keys.
std::vector<ft::AttentionCase> cases_decode() {
  std::vector<ft::AttentionCase> out;
  ft::AttentionCase base;
  base.heads_q = 32;
  base.heads_kv = 8;
  base.head_dim = 128;
  base.mask_flags = FMHA_MASK_CAUSAL;
  int n = 0;
  for (fmha_dtype t : {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16})
    for (int64_t nq : {1, 2, 3, 4, 5, 8}) {
      ft::AttentionCase c = base;
      c.dtype = t;
      c.seq_q = nq;
      if (nq > 1) {
        c.heads_q = 8;
        c.heads_kv = 2;
      }
      c.seq_k = (n % 3 == 0) ? 4100 : 1100;
      c.with_lse = (n % 2) == 0;
      ++n;
      out.push_back(c);
      c.window_left = 1100;  // left window: a band of ~18 tiles, 2 splits
      c.seq_k = 2500;
      out.push_back(c);
    }
  for (fmha_dtype t : {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16}) {
    ft::AttentionCase c = base;
    c.dtype = t;
    c.seq_q = 8;
    c.seq_k = 2000;
    c.mask_flags = FMHA_MASK_NONE;  // both window sides, no causal flag
    c.window_left = 1500;
    c.window_right = 50;
    out.push_back(c);
    c = base;
    c.dtype = t;
    c.seq_q = 1;
    c.seq_k = 1300;
    c.head_dim = t == FMHA_DTYPE_F16 ? 80 : 64;
    c.batch = 2;
    out.push_back(c);
    c.seq_q = 3;
    c.softcap = 2.f;
    c.layout = ft::Layout::kBNHD;
    out.push_back(c);
  }
  // Empty trailing splits: B x Hk = 2 asks for 64 splits; a dot-product
  // block streams 32-key tiles (kDotTileKeys), and 1281 of them cut 64 ways
  // are 61 runs of 21 and three of none.
  ft::AttentionCase c = base;
  c.dtype = FMHA_DTYPE_F16;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.seq_k = 1281 * 32;
  out.push_back(c);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("cpu_tiled: F32, F16, BF16 x head_dim 16, 32, 64, 80, 96, 128, 256") {
  check_cases(ft::cases_dtypes_head_dims());
}

TEST_CASE("cpu_tiled: sequence lengths 1..257, Nq != Nk both ways, both causal alignments") {
  check_cases(ft::cases_seq_lengths());
}

TEST_CASE("cpu_tiled: sliding windows (left, right, both, zero-width), with and without causal") {
  check_cases(ft::cases_windows());
}

TEST_CASE("cpu_tiled: left windows that start query blocks at an odd key") {
  // The amx path's packed V pairs keys (2i, 2i + 1) in its VNNI rows, so a
  // block whose first visible key is odd starts its tiles one key early
  // and masks that key. Left windows 37 and 101 put the first key of the
  // second and third 128-row blocks at odd keys; F16 and BF16 (the amx
  // path's dtypes), head_dim 128 and 64, causal and not; 700 keys span
  // two of the packing's 512-key chunks.
  std::vector<ft::AttentionCase> cases;
  for (fmha_dtype t : {FMHA_DTYPE_BF16, FMHA_DTYPE_F16})
    for (int32_t left : {37, 101}) {
      ft::AttentionCase c;
      c.dtype = t;
      c.heads_q = 2;
      c.heads_kv = 1;
      c.seq_q = c.seq_k = 700;
      c.head_dim = left == 37 ? 128 : 64;
      c.mask_flags = left == 37 ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
      c.window_left = left;
      c.window_right = left == 37 ? -1 : 20;
      cases.push_back(c);
    }
  check_cases(cases);
}

TEST_CASE("cpu_tiled: GQA groups 1, 4, 8 and MQA") { check_cases(ft::cases_gqa()); }

TEST_CASE("cpu_tiled: BNHD, packed QKV and head_dim stride 2") { check_cases(ft::cases_layouts()); }

// Odd head dims (the matrix has even ones only): the avx512bf16 path pads a
// BF16 row to whole element pairs, the F16 conversions have a tail past
// their vector width, the padded product has columns past head_dim. Every
// dtype, contiguous and head_dim stride 2, causal and not, more rows than
// one block and keys across several tiles, and decode-shaped packed blocks.
TEST_CASE("cpu_tiled: odd head dims") {
  std::vector<ft::AttentionCase> cases;
  for (fmha_dtype dt : {FMHA_DTYPE_BF16, FMHA_DTYPE_F16, FMHA_DTYPE_F32})
    for (int64_t d : {1, 7, 33, 127})
      for (ft::Layout layout : {ft::Layout::kBHND, ft::Layout::kStridedHeadDim}) {
        ft::AttentionCase c;
        c.dtype = dt;
        c.heads_q = 2;
        c.heads_kv = 1;
        c.seq_q = 150;
        c.seq_k = 140;
        c.head_dim = d;
        c.mask_flags = d == 7 ? FMHA_MASK_NONE : FMHA_MASK_CAUSAL;
        c.layout = layout;
        cases.push_back(c);
        // Decode-shaped: a GQA group of 4 x Nq = 2 packed into one
        // dot-product block, keys across several tiles.
        c.heads_q = 8;
        c.heads_kv = 2;
        c.seq_q = 2;
        c.seq_k = 300;
        cases.push_back(c);
      }
  check_cases(cases);
}

TEST_CASE("cpu_tiled: rows that see no key give O = 0 exactly and lse = -inf") {
  check_cases(ft::cases_fully_masked_rows(), [](const ft::CaseResult& r) {
    // The case must really have such rows, or it tests nothing.
    CHECK(r.masked_rows > 0);
    CHECK(r.masked_rows < r.batch * r.heads_q * r.seq_q);
    CHECK(r.masked_rows_not_zero == 0);
    CHECK(r.lse_checked);
    CHECK(r.lse.wrong_masked == 0);
  });
}

TEST_CASE("cpu_tiled: empty work (Nk = 0, B = 0, Nq = 0)") {
  check_cases(ft::cases_empty(), [](const ft::CaseResult& r) {
    // Nk = 0: every row is a masked row; no rows: nothing to check but the guards.
    CHECK(r.masked_rows == r.batch * r.heads_q * r.seq_q);
    CHECK(r.masked_rows_not_zero == 0);
    CHECK(r.lse.wrong_masked == 0);
  });
}

TEST_CASE("cpu_tiled: logits around 1e4 neither overflow nor lose accuracy") {
  check_cases(ft::cases_large_logits(), [](const ft::CaseResult& r) {
    CHECK(r.max_abs_logit > 5e3);
    CHECK(r.max_abs_logit < 2e4);
    CHECK(r.o.all_finite());
  });
}

TEST_CASE("cpu_tiled: a running max that jumps by up to 128 nats from one block of keys to the next") {
  check_cases(ft::cases_rising_logits(), [](const ft::CaseResult& r) {
    CHECK(r.max_abs_logit > 380);  // the q[i, 0] = 4 rows, last visible block: 384 x 4 / 4 and more
    CHECK(r.o.all_finite());
  });
}

TEST_CASE("cpu_tiled: softcap and explicit scale") { check_cases(ft::cases_softcap_scale()); }

TEST_CASE("cpu_tiled: decode, GQA 32/8 and 8/2, Nq 1..8, keys split, causal and windows") { check_cases(cases_decode()); }

TEST_CASE("cpu_tiled: lse matches the reference, and o does not depend on asking for it") {
  CpuHandle handle;
  for (fmha_dtype t : {FMHA_DTYPE_F32, FMHA_DTYPE_F16, FMHA_DTYPE_BF16})
    for (uint32_t mask : {FMHA_MASK_NONE, FMHA_MASK_CAUSAL, FMHA_MASK_CAUSAL_TOP_LEFT}) {
      ft::AttentionCase c;
      c.dtype = t;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.seq_q = 100;
      c.seq_k = 70;
      c.head_dim = 64;
      c.mask_flags = mask;
      c.with_lse = true;
      const ft::PreparedCase with(c);
      c.with_lse = false;
      const ft::PreparedCase without(c);
      INFO("case ", with.spec().name());
      ft::RunOptions keep;
      keep.keep_outputs = true;
      const ft::CaseResult a = check_run(handle, with, kKernel, keep);
      const ft::CaseResult b = check_run(handle, without, kKernel, keep);
      CHECK(a.lse_checked);
      CHECK(a.lse.count == c.rows());
      CHECK(a.lse.max_err <= ft::tolerance_for(t).lse_abs);
      CHECK(!b.lse_checked);
    }
}

TEST_CASE("cpu_tiled: 1, 2 and 3 threads give bitwise identical o and lse") {
  std::vector<ft::AttentionCase> cases;
  {
    ft::AttentionCase c;  // several query tiles per head, causal, GQA
    c.dtype = FMHA_DTYPE_F16;
    c.batch = 2;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.seq_q = 129;
    c.seq_k = 257;
    c.head_dim = 64;
    c.mask_flags = FMHA_MASK_CAUSAL;
    cases.push_back(c);
    c.dtype = FMHA_DTYPE_F32;  // a window, odd head count, head_dim 80
    c.batch = 1;
    c.heads_q = 3;
    c.heads_kv = 1;
    c.seq_q = c.seq_k = 200;
    c.head_dim = 80;
    c.mask_flags = FMHA_MASK_NONE;
    c.window_left = 31;
    c.window_right = 9;
    cases.push_back(c);
    c.dtype = FMHA_DTYPE_BF16;  // strided layout, rows 0..89 fully masked
    c.heads_q = c.heads_kv = 2;
    c.seq_q = 150;
    c.seq_k = 60;
    c.head_dim = 32;
    c.mask_flags = FMHA_MASK_CAUSAL;
    c.window_left = 20;
    c.window_right = -1;
    c.layout = ft::Layout::kStridedHeadDim;
    cases.push_back(c);
    c = ft::AttentionCase{};  // decode: GQA group packed, keys split 8 ways
    c.dtype = FMHA_DTYPE_BF16;
    c.heads_q = 32;
    c.heads_kv = 8;
    c.seq_q = 2;
    c.seq_k = 4100;
    c.head_dim = 128;
    c.mask_flags = FMHA_MASK_CAUSAL;
    cases.push_back(c);
  }
  CpuHandle handle;
  ft::RunOptions keep;
  keep.keep_outputs = true;
  for (const ft::AttentionCase& c : cases) {
    const ft::PreparedCase pc(c);
    std::vector<unsigned char> o1;
    std::vector<float> lse1;
    for (int threads : {1, 2, 3}) {
      INFO("case ", c.name(), ", threads ", threads);
      handle.set_threads(threads);
      const ft::CaseResult r = check_run(handle, pc, kKernel, keep);
      if (threads == 1) {
        o1 = r.o_bytes;
        lse1 = r.lse_values;
        CHECK(!o1.empty());
        CHECK(!lse1.empty());
      } else {
        CHECK(r.o_bytes == o1);
        CHECK(same_bits(r.lse_values, lse1));
      }
    }
  }
}

TEST_CASE("cpu_tiled: a workspace larger than needed changes nothing") {
  CpuHandle handle;
  for (const ft::AttentionCase& c : {ft::cases_gqa().at(4), ft::cases_windows().at(7), ft::cases_layouts().at(3)}) {
    const ft::PreparedCase pc(c);
    ft::RunOptions exact;
    exact.keep_outputs = true;
    ft::RunOptions larger = exact;
    larger.extra_workspace_bytes = (1u << 20) + 48;
    INFO("case ", c.name());
    const ft::CaseResult a = check_run(handle, pc, kKernel, exact);
    const ft::CaseResult b = check_run(handle, pc, kKernel, larger);
    CHECK(b.workspace_bytes == a.workspace_bytes);
    CHECK(b.o_bytes == a.o_bytes);
    CHECK(same_bits(b.lse_values, a.lse_values));
  }
}
