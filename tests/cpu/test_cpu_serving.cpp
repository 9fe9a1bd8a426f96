// The CPU backend on the serving layouts (fmha.h 0.2): packed queries and
// keys, seqused_k, paged K/V, against reference_forward_serving (which
// gathers the pages and derives every sequence's extent itself), over
// tests/common/serving_case.h's matrix; then bitwise determinism over
// thread counts, and garbage metadata that must stay in bounds.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/random.h"
#include "common/cpu_handle.h"
#include "common/serving_case.h"

namespace ft = fmha_test;

using fmha_test::CpuHandle;

TEST_CASE("cpu_tiled over the serving-layout matrix") {
  CpuHandle handle;
  ft::HostMemory memory;
  const std::vector<ft::ServingCase> cases = ft::serving_case_matrix();
  REQUIRE(cases.size() > 30);
  for (const ft::ServingCase& c : cases) {
    const ft::PreparedServingCase pc(c);
    for (const char* kernel : {"cpu_tiled", static_cast<const char*>(nullptr)}) {
      ft::RunOptions opt;
      opt.kernel = kernel;
      const ft::CaseResult r = pc.run(handle.get(), memory, opt);
      CHECK_MESSAGE(r.ok(), r.report());
    }
  }
}

TEST_CASE("serving layouts: the same bits for any thread count") {
  // A split paged decode (long sequences, few kv heads) and a packed prefill.
  ft::ServingCase decode;
  decode.dtype = FMHA_DTYPE_BF16;
  decode.heads_q = 8;
  decode.heads_kv = 2;
  decode.head_dim = 128;
  decode.len_q = {2, 2};
  decode.len_k = {3000, 700};
  decode.q_layout = ft::QLayout::kDense;
  decode.kv_layout = ft::KvLayout::kPaged;
  decode.page_size = 16;
  decode.storage = ft::PageStorage::kTokenMajor;
  ft::ServingCase prefill;
  prefill.heads_q = 4;
  prefill.heads_kv = 1;
  prefill.len_q = {300, 5, 129};
  prefill.len_k = {300, 400, 60};
  prefill.kv_layout = ft::KvLayout::kRagged;
  prefill.mask_flags = FMHA_MASK_CAUSAL;
  ft::HostMemory memory;
  for (const ft::ServingCase& c : {decode, prefill}) {
    const ft::PreparedServingCase pc(c);
    std::vector<unsigned char> first;
    for (int threads : {1, 2, 5}) {
      CpuHandle handle(threads);
      ft::RunOptions opt;
      opt.keep_outputs = true;
      const ft::CaseResult r = pc.run(handle.get(), memory, opt);
      CHECK_MESSAGE(r.ok(), r.report());
      if (first.empty())
        first = r.o_bytes;
      else
        CHECK_MESSAGE(r.o_bytes == first, c.name(), " differs with ", threads, " threads");
    }
  }
}

namespace {

void set_v1_size(fmha_forward_params* p) { p->struct_size = FMHA_FORWARD_PARAMS_SIZE_V1; }

}  // namespace

TEST_CASE("a V1-sized params struct is the dense layout") {
  // A caller compiled against 0.1: its struct ends at reserved_, so the
  // library must not read past FMHA_FORWARD_PARAMS_SIZE_V1 bytes (the copy
  // below sits in a heap block of exactly that size, which ASan guards).
  ft::ServingCase c;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.len_q = {33, 33};
  c.len_k = {70, 70};
  c.q_layout = ft::QLayout::kDense;
  c.mask_flags = FMHA_MASK_CAUSAL;
  const ft::PreparedServingCase pc(c);
  CpuHandle handle;
  ft::HostMemory memory;
  // Through the runner with struct_size = V1: same checks as any case.
  const ft::CaseResult r = pc.run(handle.get(), memory, {}, set_v1_size);
  CHECK_MESSAGE(r.ok(), r.report());

  // And from a buffer of exactly V1 bytes, against the V2 call's bits.
  fmha_forward_params p = pc.host_params();
  const int64_t rows = 2 * 4 * 33, D = c.head_dim;
  std::vector<float> o2(static_cast<size_t>(rows * D)), o1(o2.size(), -1.f), lse2(rows), lse1(rows, -1.f);
  p.o = p.q;
  p.o.data = o2.data();
  p.lse = lse2.data();
  size_t ws = 0;
  REQUIRE(fmha_forward_workspace_size(handle.get(), &p, &ws) == FMHA_SUCCESS);
  std::vector<unsigned char> workspace(ws + 64);
  void* w = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
  REQUIRE(fmha_forward(handle.get(), &p, w, ws) == FMHA_SUCCESS);
  p.o.data = o1.data();
  p.lse = lse1.data();
  p.struct_size = FMHA_FORWARD_PARAMS_SIZE_V1;
  std::vector<unsigned char> v1(FMHA_FORWARD_PARAMS_SIZE_V1);
  std::memcpy(v1.data(), &p, FMHA_FORWARD_PARAMS_SIZE_V1);
  const auto* pv1 = reinterpret_cast<const fmha_forward_params*>(v1.data());
  size_t ws1 = 0;
  CHECK(fmha_forward_workspace_size(handle.get(), pv1, &ws1) == FMHA_SUCCESS);
  CHECK(ws1 == ws);
  CHECK(fmha_forward(handle.get(), pv1, w, ws) == FMHA_SUCCESS);
  CHECK(std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(lse1.data(), lse2.data(), lse1.size() * sizeof(float)) == 0);
}

TEST_CASE("garbage metadata stays in bounds") {
  // Valid tensors, random metadata: cu_seqlens that decrease, start past
  // the end or are negative, seqused_k and page ids far outside, huge and
  // negative. Only the answer may be wrong: the library must not crash or
  // touch memory outside the tensors (ASan watches the exact-size input
  // vectors; guards around o and lse must keep their poison), and the
  // inputs must come back unchanged.
  const int64_t Hq = 4, Hk = 2, D = 32, total_q = 37, total_k = 53, pages = 6, ps = 8, stride = 5;
  const int32_t seqs = 4;
  ft::Rng rng(ft::case_seed("metadata fuzz", ft::base_seed()));
  auto garbage = [&]() -> int32_t {
    switch (rng.below(6)) {
      case 0: return static_cast<int32_t>(rng.below(8));
      case 1: return static_cast<int32_t>(rng.below(80));
      case 2: return -static_cast<int32_t>(rng.below(100)) - 1;
      case 3: return INT32_MAX - static_cast<int32_t>(rng.below(4));
      case 4: return INT32_MIN + static_cast<int32_t>(rng.below(4));
      default: return static_cast<int32_t>(rng.next_u64());
    }
  };
  CpuHandle handle(3);
  constexpr size_t kGuard = 64;
  for (int trial = 0; trial < 300; ++trial) {
    const int kind = trial % 4;  // packed q+k, packed q + paged, dense q + paged, dense q + dense k seqused
    const bool ragged_q = kind <= 1;
    const bool paged = kind == 1 || kind == 2;
    const bool ragged_k = kind == 0;
    const int64_t qb = ragged_q ? 1 : seqs, nq = ragged_q ? total_q : 3;
    const int64_t kb = ragged_k ? 1 : paged ? pages : seqs, nk = ragged_k ? total_k : paged ? ps : 11;
    std::vector<float> q(static_cast<size_t>(qb * Hq * nq * D)), k(static_cast<size_t>(kb * Hk * nk * D)),
        v(k.size());
    for (auto* t : {&q, &k, &v})
      for (float& x : *t) x = static_cast<float>(rng.normal());
    const std::vector<float> q0 = q, k0 = k, v0 = v;
    std::vector<float> o(q.size() + 2 * kGuard), lse(static_cast<size_t>(qb * Hq * nq) + 2 * kGuard);
    ft::fill_poison(o.data(), FMHA_DTYPE_F32, o.size());
    ft::fill_poison(lse.data(), FMHA_DTYPE_F32, lse.size());
    std::vector<int32_t> cu_q(seqs + 1), cu_k(seqs + 1), used(seqs), table(seqs * stride);
    for (auto* a : {&cu_q, &cu_k, &used, &table})
      for (int32_t& x : *a) x = garbage();

    fmha_forward_params p;
    fmha_forward_params_init(&p);
    auto view = [&](fmha_tensor* t, float* data, int64_t b, int64_t h, int64_t n) {
      t->data = data;
      t->dtype = FMHA_DTYPE_F32;
      const int64_t dims[4] = {b, h, n, D}, strides[4] = {h * n * D, n * D, D, 1};
      std::memcpy(t->dims, dims, sizeof dims);
      std::memcpy(t->strides, strides, sizeof strides);
    };
    view(&p.q, q.data(), qb, Hq, nq);
    view(&p.k, k.data(), kb, Hk, nk);
    view(&p.v, v.data(), kb, Hk, nk);
    view(&p.o, o.data() + kGuard, qb, Hq, nq);
    p.lse = lse.data() + kGuard;
    p.mask_flags = trial % 3 == 0 ? FMHA_MASK_CAUSAL : trial % 3 == 1 ? FMHA_MASK_CAUSAL_TOP_LEFT : 0;
    if (trial % 5 == 0) p.window_left = 4;
    if (ragged_q || ragged_k) p.num_seqs = seqs;
    if (ragged_q) {
      p.cu_seqlens_q = cu_q.data();
      p.max_seqlen_q = static_cast<int32_t>(rng.below(total_q + 1));
    }
    if (ragged_k) {
      p.cu_seqlens_k = cu_k.data();
      p.max_seqlen_k = static_cast<int32_t>(rng.below(total_k + 1));
    }
    p.seqused_k = trial % 8 == 0 && !paged ? nullptr : used.data();
    if (paged) {
      p.block_table = table.data();
      p.block_table_stride = stride;
      p.max_seqlen_k = static_cast<int32_t>(rng.below(stride * ps + 1));
    }
    size_t ws = 0;
    REQUIRE_MESSAGE(fmha_forward_workspace_size(handle.get(), &p, &ws) == FMHA_SUCCESS, fmha_last_error_message());
    std::vector<unsigned char> workspace(ws + 64);
    void* w = workspace.data() + (64 - reinterpret_cast<uintptr_t>(workspace.data()) % 64) % 64;
    REQUIRE_MESSAGE(fmha_forward(handle.get(), &p, w, ws) == FMHA_SUCCESS, fmha_last_error_message());
    int64_t outside = 0;
    for (size_t e = 0; e < kGuard; ++e) {
      outside += !ft::is_poison(o.data(), FMHA_DTYPE_F32, static_cast<int64_t>(e));
      outside += !ft::is_poison(o.data(), FMHA_DTYPE_F32, static_cast<int64_t>(o.size() - 1 - e));
      outside += !ft::is_poison(lse.data(), FMHA_DTYPE_F32, static_cast<int64_t>(e));
      outside += !ft::is_poison(lse.data(), FMHA_DTYPE_F32, static_cast<int64_t>(lse.size() - 1 - e));
    }
    CHECK_MESSAGE(outside == 0, "trial ", trial);
    CHECK(q == q0);
    CHECK(k == k0);
    CHECK(v == v0);
  }
}
