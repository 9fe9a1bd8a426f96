// Problems too large for a full host reference: long sequences, a single
// (batch, head) with N = 65536, K/V tensors past 2^31 elements (64-bit
// offsets), and key tiles outside the mask never being read. Inputs
// are hashed on the device (gpu_support.h); a sample of rows is compared
// with the float64 reference, and every element of o must be written
// (o and lse start as NaN). Skipped under FMHA_TEST_QUICK.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/numeric_types.h"
#include "common/tolerance.h"
#include "gpu/gpu_support.h"

namespace {

using fmha_gpu_test::CudaBuffer;
using fmha_gpu_test::GpuHandle;
using fmha_gpu_test::HashedProblem;

// Device buffers for a hashed problem, filled once, run on any kernel.
class HashedBuffers {
 public:
  HashedBuffers(const HashedProblem& hp, bool with_lse)
      : hp_(hp),
        esize_(fmha_test::dtype_bytes(hp.dtype)),
        q_(hp.q.extent() * esize_),
        k_(hp.k.extent() * esize_),
        v_(hp.v.extent() * esize_),
        o_(hp.batch * hp.heads_q * hp.seq_q * hp.head_dim * esize_),
        lse_(with_lse ? hp.batch * hp.heads_q * hp.seq_q * sizeof(float) : 0) {
    ok_ = q_.ok() && k_.ok() && v_.ok() && o_.ok() && lse_.ok() &&
          fmha_gpu_test::fill_hashed(q_.get(), hp.dtype, hp.q.extent(), hp.q.seed, nullptr) == cudaSuccess &&
          fmha_gpu_test::fill_hashed(k_.get(), hp.dtype, hp.k.extent(), hp.k.seed, nullptr) == cudaSuccess &&
          fmha_gpu_test::fill_hashed(v_.get(), hp.dtype, hp.v.extent(), hp.v.seed, nullptr) == cudaSuccess &&
          cudaDeviceSynchronize() == cudaSuccess;
  }
  bool ok() const { return ok_; }

  fmha_forward_params params(const char* kernel, int32_t splits) const {
    fmha_forward_params p;
    fmha_forward_params_init(&p);
    auto tensor = [&](void* data, const fmha_gpu_test::HashedOperand& op) {
      fmha_tensor t{};
      t.data = data;
      t.dtype = hp_.dtype;
      std::copy(op.dims, op.dims + 4, t.dims);
      std::copy(op.strides, op.strides + 4, t.strides);
      return t;
    };
    p.q = tensor(q_.get(), hp_.q);
    p.k = tensor(k_.get(), hp_.k);
    p.v = tensor(v_.get(), hp_.v);
    p.o = tensor(o_.get(), hp_.q);
    const int64_t D = hp_.head_dim;
    const int64_t o_strides[4] = {hp_.heads_q * hp_.seq_q * D, hp_.seq_q * D, D, 1};
    std::copy(o_strides, o_strides + 4, p.o.strides);
    p.lse = static_cast<float*>(lse_.get());
    p.mask_flags = hp_.mask_flags;
    p.window_left = hp_.window_left;
    p.window_right = hp_.window_right;
    p.softcap = hp_.softcap;
    p.scale = hp_.scale;
    p.kernel = kernel;
    p.num_splits = splits;
    return p;
  }

  // Poisons o and lse, runs, copies both back. Returns the status.
  fmha_status run(fmha_handle h, const char* kernel, int32_t splits, std::vector<unsigned char>* o,
                  std::vector<float>* lse, std::string* message) {
    const fmha_forward_params p = params(kernel, splits);
    size_t ws_bytes = 0;
    fmha_status s = fmha_forward_workspace_size(h, &p, &ws_bytes);
    if (s != FMHA_SUCCESS) {
      *message = fmha_last_error_message();
      return s;
    }
    CudaBuffer ws(ws_bytes);
    REQUIRE(ws.ok());
    REQUIRE(cudaMemset(o_.get(), 0xff, o_.bytes()) == cudaSuccess);
    if (lse_.bytes() > 0) REQUIRE(cudaMemset(lse_.get(), 0xff, lse_.bytes()) == cudaSuccess);
    s = fmha_forward(h, &p, ws.get(), ws_bytes);
    *message = fmha_last_error_message();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    o->resize(o_.bytes());
    REQUIRE(cudaMemcpy(o->data(), o_.get(), o_.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    lse->resize(lse_.bytes() / sizeof(float));
    if (!lse->empty())
      REQUIRE(cudaMemcpy(lse->data(), lse_.get(), lse_.bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return s;
  }

  // Overwrites keys [k0, k1) of K and V (or V alone) in every (batch, head)
  // with NaN (0xff bytes are NaN in F16, BF16 and F32). Contiguous
  // [B, H, N, D] only.
  void poison_keys(int64_t k0, int64_t k1, bool v_only = false) {
    for (CudaBuffer* buf : {&k_, &v_}) {
      if (v_only && buf == &k_) continue;
      const fmha_gpu_test::HashedOperand& op = buf == &k_ ? hp_.k : hp_.v;
      REQUIRE(op.strides[3] == 1);
      REQUIRE(op.strides[2] == hp_.head_dim);
      for (int64_t b = 0; b < hp_.batch; ++b)
        for (int64_t h = 0; h < hp_.heads_kv; ++h) {
          char* base = static_cast<char*>(buf->get()) +
                       (b * op.strides[0] + h * op.strides[1] + k0 * op.strides[2]) * esize_;
          REQUIRE(cudaMemset(base, 0xff, (k1 - k0) * op.strides[2] * esize_) == cudaSuccess);
        }
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }

 private:
  HashedProblem hp_;
  size_t esize_;
  CudaBuffer q_, k_, v_, o_, lse_;
  bool ok_ = false;
};

// Runs hp on every CUDA kernel and checks sampled rows and every element.
void check_all_kernels(const HashedProblem& hp, const char* label, int random_rows) {
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  HashedBuffers buf(hp, true);
  REQUIRE_MESSAGE(buf.ok(), "could not allocate or fill " << std::string(label));
  const std::vector<int64_t> rows = fmha_gpu_test::sample_rows(hp, random_rows, 0x5eed);
  const fmha_test::Tolerance tol = fmha_test::tolerance_for(hp.dtype);
  for (const std::string& name : fmha_gpu_test::cuda_kernel_names()) {
    std::vector<unsigned char> o;
    std::vector<float> lse;
    std::string msg;
    const fmha_status s = buf.run(h.get(), name.c_str(), 0, &o, &lse, &msg);
    if (s == FMHA_ERROR_UNSUPPORTED) {
      MESSAGE(std::string(label) << ": " << name << " unsupported: " << msg);
      continue;
    }
    REQUIRE_MESSAGE(s == FMHA_SUCCESS, std::string(label) << ": " << name << ": " << msg);
    int64_t nonfinite = 0;
    const int64_t n = static_cast<int64_t>(o.size() / fmha_test::dtype_bytes(hp.dtype));
    for (int64_t e = 0; e < n; ++e)
      if (!std::isfinite(fmha_test::load_element(o.data(), hp.dtype, e))) ++nonfinite;
    int64_t bad_lse = 0;
    for (float x : lse)
      if (std::isnan(x)) ++bad_lse;
    const fmha_gpu_test::RowCheck rc = fmha_gpu_test::check_rows(hp, rows, o, lse);
    char line[320];
    std::snprintf(line, sizeof line,
                  "%s: %s: %lld sampled rows, rel-L2 %.3g (bound %.3g), max |err| %.3g at %s, lse err %.3g "
                  "(bound %.3g), %lld o elements and %lld lse rows unwritten",
                  label, name.c_str(), static_cast<long long>(rc.rows), rc.o_rel_l2, tol.o_rel_l2,
                  rc.o_max_abs, rc.worst.c_str(), rc.lse_max_err, tol.lse_abs, static_cast<long long>(nonfinite),
                  static_cast<long long>(bad_lse));
    MESSAGE(line);
    CHECK(nonfinite == 0);
    CHECK(bad_lse == 0);
    CHECK(rc.o_rel_l2 <= tol.o_rel_l2);
    CHECK(rc.lse_max_err <= tol.lse_abs);
  }
}


// fmha.h's NaN rule on one kernel: `hp` run clean, then with V of key `key`
// NaN (HashedBuffers::poison_keys), and every output row compared: a row
// that does not see the key (sees(row) false; rows in o's order, [B, Hq,
// Nq]) must come out as without the NaN, finite and within 2e-2, one that
// does must be NaN in every column; lse never changes (V is not in it).
// ran false: the kernel declined the problem.
struct NanRuleCounts {
  bool ran = false;
  int64_t leaked = 0, missed = 0, drift = 0, lse_changed = 0, seen = 0;
};
template <class Sees>
NanRuleCounts nan_rule_counts(fmha_handle h, const HashedProblem& hp, const std::string& name, int32_t splits,
                              int64_t key, Sees&& sees) {
  NanRuleCounts n;
  HashedBuffers buf(hp, true);
  REQUIRE(buf.ok());
  std::vector<unsigned char> o_clean, o_nan;
  std::vector<float> lse_clean, lse_nan;
  std::string msg;
  fmha_status s = buf.run(h, name.c_str(), splits, &o_clean, &lse_clean, &msg);
  if (s == FMHA_ERROR_UNSUPPORTED) return n;
  REQUIRE_MESSAGE(s == FMHA_SUCCESS, name << ": " << msg);
  buf.poison_keys(key, key + 1, /*v_only=*/true);
  s = buf.run(h, name.c_str(), splits, &o_nan, &lse_nan, &msg);
  REQUIRE_MESSAGE(s == FMHA_SUCCESS, name << ": " << msg);
  n.ran = true;
  const int64_t rows = hp.batch * hp.heads_q * hp.seq_q, d = hp.head_dim;
  for (int64_t row = 0; row < rows; ++row) {
    const bool seen = sees(row);
    n.seen += seen;
    for (int64_t c = 0; c < d; ++c) {
      const float clean = fmha_test::load_element(o_clean.data(), hp.dtype, row * d + c);
      const float got = fmha_test::load_element(o_nan.data(), hp.dtype, row * d + c);
      if (!seen) {
        if (!std::isfinite(got)) ++n.leaked;
        else if (std::fabs(got - clean) > 2e-2f * (1.f + std::fabs(clean))) ++n.drift;
      } else if (!std::isnan(got)) {
        ++n.missed;
      }
    }
    if (!(std::fabs(lse_nan[row] - lse_clean[row]) <= 1e-3f)) ++n.lse_changed;
  }
  return n;
}

}  // namespace

TEST_CASE("N = 32768, causal, GQA") {
  if (fmha_gpu_test::quick_mode()) return;
  HashedProblem hp;
  hp.dtype = FMHA_DTYPE_F16;
  hp.batch = 1;
  hp.heads_q = 2;
  hp.heads_kv = 1;
  hp.seq_q = hp.seq_k = 32768;
  hp.head_dim = 128;
  hp.mask_flags = FMHA_MASK_CAUSAL;
  hp.set_contiguous(32768);
  check_all_kernels(hp, "N=32768 F16 D128 causal H2/1", 24);
}

TEST_CASE("one (batch, head) with N = 65536, no mask") {
  if (fmha_gpu_test::quick_mode()) return;
  HashedProblem hp;
  hp.dtype = FMHA_DTYPE_BF16;
  hp.seq_q = hp.seq_k = 65536;
  hp.head_dim = 64;
  hp.set_contiguous(65536);
  check_all_kernels(hp, "N=65536 BF16 D64 B*H=1", 24);
}

TEST_CASE("K and V past 2^31 elements: 64-bit offsets") {
  // K, V: [1, 1, 2^24 + 4096, 128] F16 = 2^31 + 2^19 elements (4.3 GB each).
  // 256 queries, bottom-right causal with window_left = 3000: every row's
  // keys lie past element 2^31 of K and V, so a 32-bit offset anywhere reads
  // the wrong keys. Q is laid out BNHD-style with a seq stride of 3 D to
  // check strided Q as well.
  if (fmha_gpu_test::quick_mode()) return;
  HashedProblem hp;
  hp.dtype = FMHA_DTYPE_F16;
  hp.seq_q = 256;
  hp.seq_k = (int64_t{1} << 24) + 4096;
  hp.head_dim = 128;
  hp.mask_flags = FMHA_MASK_CAUSAL;
  hp.window_left = 3000;
  hp.set_contiguous(31);
  hp.q.strides[2] = 3 * hp.head_dim;
  hp.q.strides[1] = hp.q.strides[0] = hp.seq_q * 3 * hp.head_dim;
  REQUIRE(hp.k.extent() > (int64_t{1} << 31));
  check_all_kernels(hp, "K/V 2^31+ elements F16 D128 window", 8);
}

TEST_CASE("key tiles outside every row's band are never read") {
  // Nq << Nk: all rows see only a narrow band of keys; the keys well outside
  // it (more than a tile away) are overwritten with NaN. A kernel that loaded
  // and used such a tile, even fully masked, would turn 0 * NaN into NaN in
  // P V (or in the split combine), so a finite, correct output shows the
  // tiles were skipped. Both edges: a left window (bottom-right causal) and
  // the causal diagonal (top-left), with and without key splits.
  constexpr int64_t kNq = 256, kNk = 8192, kMargin = 256;  // margin > any key tile
  struct Band {
    const char* label;
    uint32_t mask;
    int32_t window_left;
    int64_t poison_lo, poison_hi;
  };
  const Band bands[] = {
      // Rows see [Nk - Nq - 300, Nk): poison everything left of that.
      {"bottom-right causal, window_left 300", FMHA_MASK_CAUSAL, 300, 0, kNk - kNq - 300 - kMargin},
      // Rows see [0, i] with i < Nq: poison everything right of that.
      {"top-left causal", FMHA_MASK_CAUSAL_TOP_LEFT, -1, kNq + kMargin, kNk},
  };
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  for (const Band& band : bands)
    for (int64_t d : {64, 128}) {
      HashedProblem hp;
      hp.dtype = FMHA_DTYPE_F16;
      hp.batch = 2;
      hp.heads_q = 8;
      hp.heads_kv = 2;
      hp.seq_q = kNq;
      hp.seq_k = kNk;
      hp.head_dim = d;
      hp.mask_flags = band.mask;
      hp.window_left = band.window_left;
      hp.set_contiguous(41 + d);
      HashedBuffers buf(hp, true);
      REQUIRE(buf.ok());
      buf.poison_keys(band.poison_lo, band.poison_hi);
      const std::vector<int64_t> rows = fmha_gpu_test::sample_rows(hp, 8, 0xba1d);
      const fmha_test::Tolerance tol = fmha_test::tolerance_for(hp.dtype);
      for (const std::string& name : fmha_gpu_test::cuda_kernel_names())
        for (int32_t splits : {0, 1, 4}) {
          CAPTURE(band.label);
          CAPTURE(d);
          CAPTURE(name);
          CAPTURE(splits);
          std::vector<unsigned char> o;
          std::vector<float> lse;
          std::string msg;
          const fmha_status s = buf.run(h.get(), name.c_str(), splits, &o, &lse, &msg);
          if (s == FMHA_ERROR_UNSUPPORTED) continue;
          REQUIRE_MESSAGE(s == FMHA_SUCCESS, msg);
          int64_t nonfinite = 0;
          const int64_t n = static_cast<int64_t>(o.size() / fmha_test::dtype_bytes(hp.dtype));
          for (int64_t e = 0; e < n; ++e)
            if (!std::isfinite(fmha_test::load_element(o.data(), hp.dtype, e))) ++nonfinite;
          CHECK(nonfinite == 0);
          const fmha_gpu_test::RowCheck rc = fmha_gpu_test::check_rows(hp, rows, o, lse);
          CHECK(rc.o_rel_l2 <= tol.o_rel_l2);
          CHECK(rc.lse_max_err <= tol.lse_abs);
        }
    }
}

TEST_CASE("a NaN in V reaches exactly the rows that see its key (fmha.h's NaN rule)") {
  // Causal N=300: key 200 is seen by rows 200.. only. Rows below must come
  // out as without the NaN (its weight there is an exact 0, and 0 x NaN
  // must not happen), rows from 200 on must be NaN in every column. Tile
  // 128..255 straddles the diagonal for some query block of every kernel,
  // so the masked-edge path is the one under test.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  for (fmha_dtype dt : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16})
    for (int64_t d : {64, 128}) {
      HashedProblem hp;
      hp.dtype = dt;
      hp.batch = 1;
      hp.heads_q = hp.heads_kv = 2;
      hp.seq_q = hp.seq_k = 300;
      hp.head_dim = d;
      hp.mask_flags = FMHA_MASK_CAUSAL;
      hp.set_contiguous(1000 + d);
      constexpr int64_t kKey = 200;
      for (const std::string& name : fmha_gpu_test::cuda_kernel_names())
        for (int32_t splits : {0, 4}) {
          // Row r is query r % Nq of head r / Nq (B = 1).
          const NanRuleCounts n =
              nan_rule_counts(h.get(), hp, name, splits, kKey, [&](int64_t row) { return row % hp.seq_q >= kKey; });
          if (!n.ran) continue;
          CAPTURE(name);
          CAPTURE(splits);
          CAPTURE(d);
          CAPTURE(static_cast<int>(dt));
          CHECK(n.leaked == 0);
          CHECK(n.lse_changed == 0);
          CHECK(n.missed == 0);
          CHECK(n.drift == 0);
        }
    }
}

TEST_CASE("a NaN in V reaches exactly the rows that see its key: decode over key-warp shares, windows") {
  // GQA 32/8 D=128 decode, Nq = 1 and Nq = 4 (causal), a left window of 300
  // keys over Nk = 1000: row i (query i of Nq) sees keys [d(i) - 300, d(i)],
  // d(i) = i + Nk - Nq. The window's left edge falls inside the 128-key
  // tile 640..767 of cuda_sm80_tc's key-warp decode tile (4 key warps of 32
  // keys: 640-671, 672-703, 704-735, 736-767), an edge tile whose V holds a
  // NaN: in a key no row sees (660, first share), in a key only some rows
  // see (697, second share: rows 0 and 1 of Nq = 4, as the 4 query heads of
  // each), and in a key every row sees (720, third share). Rows that do not
  // see it must come out as without it; rows that do, NaN in every column.
  GpuHandle h;
  REQUIRE(h.status() == FMHA_SUCCESS);
  constexpr int64_t kNk = 1000, kWindow = 300, kD = 128;
  for (fmha_dtype dt : {FMHA_DTYPE_F16, FMHA_DTYPE_BF16})
    for (int64_t nq : {1, 4}) {
      HashedProblem hp;
      hp.dtype = dt;
      hp.batch = 2;
      hp.heads_q = 32;
      hp.heads_kv = 8;
      hp.seq_q = nq;
      hp.seq_k = kNk;
      hp.head_dim = kD;
      hp.mask_flags = nq > 1 ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
      hp.window_left = static_cast<int32_t>(kWindow);
      hp.set_contiguous(2000 + nq);
      for (int64_t key : {660, 697, 720})
        for (const std::string& name : fmha_gpu_test::cuda_kernel_names())
          for (int32_t splits : {0, 3, 7}) {
            // Row r is query i = r % Nq, diagonal d(i) = i + Nk - Nq.
            const NanRuleCounts n = nan_rule_counts(h.get(), hp, name, splits, key, [&](int64_t row) {
              const int64_t diag = row % nq + kNk - nq;
              return key >= diag - kWindow && key <= diag;
            });
            if (!n.ran) continue;
            CAPTURE(name);
            CAPTURE(splits);
            CAPTURE(nq);
            CAPTURE(key);
            CAPTURE(static_cast<int>(dt));
            const int64_t rows_seeing = key == 660 ? 0 : key == 720 ? nq : nq > 1 ? 2 : 0;  // of Nq, per head
            CHECK(n.seen == hp.batch * hp.heads_q * rows_seeing);
            CHECK(n.leaked == 0);
            CHECK(n.lse_changed == 0);
            CHECK(n.missed == 0);
            CHECK(n.drift == 0);
          }
    }
}
