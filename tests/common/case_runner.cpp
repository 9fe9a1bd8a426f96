#include "common/case_runner.h"

#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

#include "common/numeric_types.h"

namespace fmha_test {
namespace {

// Poisoned bytes before and after o and lse; a multiple of 256 so the views
// keep the allocation's alignment.
constexpr size_t kGuardBytes = 256;

void set4(int64_t* s, int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
  s[0] = s0;
  s[1] = s1;
  s[2] = s2;
  s[3] = s3;
}

// Calls fn(flat, offset) for every element of a [dims] view in [b, h, i, d]
// order: flat is the contiguous index, offset the strided one.
template <class Fn>
void for_each_element(const int64_t dims[4], const int64_t strides[4], int64_t base, Fn&& fn) {
  int64_t flat = 0;
  for (int64_t b = 0; b < dims[0]; ++b)
    for (int64_t h = 0; h < dims[1]; ++h)
      for (int64_t i = 0; i < dims[2]; ++i)
        for (int64_t d = 0; d < dims[3]; ++d)
          fn(flat++, base + b * strides[0] + h * strides[1] + i * strides[2] + d * strides[3]);
}

// Fills bytes with the 4-byte F32 poison pattern (a partial pattern at the
// end when bytes is not a multiple of 4).
void fill_poison_bytes(unsigned char* p, size_t bytes) {
  const uint32_t bits = kPoisonF32;
  for (size_t i = 0; i < bytes; i += 4) std::memcpy(p + i, &bits, bytes - i < 4 ? bytes - i : 4);
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

}  // namespace

// ---- PreparedCase ---------------------------------------------------------

PreparedCase::PreparedCase(const AttentionCase& c, uint64_t base) : case_(c) {
  if (const char* why = c.invalid_reason())
    throw std::invalid_argument("invalid case " + c.name() + ": " + why);
  base_seed_ = base;
  seed_ = case_seed(c.name(), base);
  const int64_t B = c.batch, Hq = c.heads_q, Hk = c.heads_kv, Nq = c.seq_q, Nk = c.seq_k, D = c.head_dim;
  set4(q_dims_, B, Hq, Nq, D);
  set4(kv_dims_, B, Hk, Nk, D);
  const size_t esize = dtype_bytes(c.dtype);
  auto add_buffer = [&](int64_t elements) {
    inputs_.emplace_back(static_cast<size_t>(elements) * esize);
    return static_cast<int>(inputs_.size()) - 1;
  };

  switch (c.layout) {
    case Layout::kBHND:
      q_.buffer = add_buffer(B * Hq * Nq * D);
      k_.buffer = add_buffer(B * Hk * Nk * D);
      v_.buffer = add_buffer(B * Hk * Nk * D);
      set4(q_.strides, Hq * Nq * D, Nq * D, D, 1);
      set4(k_.strides, Hk * Nk * D, Nk * D, D, 1);
      set4(v_.strides, Hk * Nk * D, Nk * D, D, 1);
      set4(o_.strides, Hq * Nq * D, Nq * D, D, 1);
      o_elements_ = B * Hq * Nq * D;
      break;
    case Layout::kBNHD:
      q_.buffer = add_buffer(B * Nq * Hq * D);
      k_.buffer = add_buffer(B * Nk * Hk * D);
      v_.buffer = add_buffer(B * Nk * Hk * D);
      set4(q_.strides, Nq * Hq * D, D, Hq * D, 1);
      set4(k_.strides, Nk * Hk * D, D, Hk * D, 1);
      set4(v_.strides, Nk * Hk * D, D, Hk * D, 1);
      set4(o_.strides, Nq * Hq * D, D, Hq * D, 1);
      o_elements_ = B * Nq * Hq * D;
      break;
    case Layout::kPackedQKV: {
      const int64_t W = Hq + 2 * Hk;  // heads per token in the packed buffer
      q_.buffer = k_.buffer = v_.buffer = add_buffer(B * Nq * W * D);
      q_.offset = 0;
      k_.offset = Hq * D;
      v_.offset = (Hq + Hk) * D;
      for (View* v : {&q_, &k_, &v_}) set4(v->strides, Nq * W * D, D, W * D, 1);
      set4(o_.strides, Nq * Hq * D, D, Hq * D, 1);
      o_elements_ = B * Nq * Hq * D;
      break;
    }
    case Layout::kStridedHeadDim: {
      const int64_t row = 2 * D + 3;  // head_dim stride 2, then 3 spare elements
      q_.buffer = add_buffer(B * Hq * Nq * row);
      k_.buffer = add_buffer(B * Hk * Nk * row);
      v_.buffer = add_buffer(B * Hk * Nk * row);
      set4(q_.strides, Hq * Nq * row, Nq * row, row, 2);
      set4(k_.strides, Hk * Nk * row, Nk * row, row, 2);
      set4(v_.strides, Hk * Nk * row, Nk * row, row, 2);
      set4(o_.strides, Hq * Nq * row, Nq * row, row, 2);
      o_elements_ = B * Hq * Nq * row;
      break;
    }
  }
  fill_inputs();

  std::vector<void*> host(inputs_.size());
  for (size_t b = 0; b < inputs_.size(); ++b) host[b] = inputs_[b].data();
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = tensor(q_, q_dims_, host.data());
  p.k = tensor(k_, kv_dims_, host.data());
  p.v = tensor(v_, kv_dims_, host.data());
  p.mask_flags = c.mask_flags;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.scale = c.scale;
  p.softcap = c.softcap;
  ref_ = reference_forward(p);
}

fmha_tensor PreparedCase::tensor(const View& v, const int64_t dims[4], void* const* buffers) const {
  fmha_tensor t;
  t.data = static_cast<unsigned char*>(buffers[v.buffer]) + v.offset * static_cast<int64_t>(dtype_bytes(case_.dtype));
  t.dtype = case_.dtype;
  for (int d = 0; d < 4; ++d) {
    t.dims[d] = dims[d];
    t.strides[d] = v.strides[d];
  }
  return t;
}

void PreparedCase::fill_inputs() {
  const fmha_dtype dt = case_.dtype;
  // Gaps (strided layout) hold NaN: a kernel that reads one poisons its row.
  for (auto& buf : inputs_) {
    const int64_t n = static_cast<int64_t>(buf.size() / dtype_bytes(dt));
    for (int64_t e = 0; e < n; ++e) store_element(buf.data(), dt, e, std::numeric_limits<float>::quiet_NaN());
  }
  Rng rng(seed_);
  auto normal = [&] {
    for (;;) {  // never exactly zero
      const float x = round_to_dtype(static_cast<float>(rng.normal()), dt);
      if (x != 0.f) return x;
    }
  };
  auto small_int = [&] {  // +-1 or +-2
    const float m = static_cast<float>(1 + rng.below(2));
    return rng.below(2) ? -m : m;
  };
  const bool large = case_.data == Data::kLargeLogits;
  const bool rising = case_.data == Data::kRisingLogits;
  static constexpr float kRisingQ[4] = {1.f, 4.f, 0.5f, -1.f};  // q[i, 0] by (i / 16) % 4
  struct {
    const View* view;
    const int64_t* dims;
    char role;
  } const tensors[] = {{&q_, q_dims_, 'q'}, {&k_, kv_dims_, 'k'}, {&v_, kv_dims_, 'v'}};
  for (const auto& t : tensors) {
    void* base = inputs_[static_cast<size_t>(t.view->buffer)].data();
    const int64_t D = t.dims[3];
    for_each_element(t.dims, t.view->strides, t.view->offset, [&](int64_t flat, int64_t offset) {
      float x;
      if (rising && t.role != 'v') {
        const int64_t row = flat / D % t.dims[2];  // query i or key j
        if (flat % D != 0) x = small_int();
        else if (t.role == 'q') x = kRisingQ[row / 16 % 4];
        else x = 128.f * static_cast<float>(row / 128);
      } else if (!large || t.role == 'v') {
        x = normal();
      } else if (flat % D != 0) {
        x = small_int();
      } else if (t.role == 'q') {  // +-odd in [129, 255]
        const float m = static_cast<float>(129 + 2 * rng.below(64));
        x = rng.below(2) ? -m : m;
      } else {
        x = 160.f;
      }
      store_element(base, dt, offset, x);
    });
  }
}

CaseResult PreparedCase::run(fmha_handle handle, DeviceMemory& memory, const RunOptions& options) const {
  const AttentionCase& c = case_;
  const fmha_dtype dt = c.dtype;
  const size_t esize = dtype_bytes(dt);
  CaseResult r;
  r.case_name = c.name();
  r.base_seed = base_seed_;
  r.seed = seed_;
  r.kernel = options.kernel ? options.kernel : "(automatic)";
  r.tolerance = tolerance_for(dt);
  r.max_abs_logit = ref_.max_abs_logit;
  r.batch = c.batch;
  r.heads_q = c.heads_q;
  r.seq_q = c.seq_q;
  r.head_dim = c.head_dim;

  // Inputs.
  std::vector<std::unique_ptr<DeviceBuffer>> in;
  std::vector<void*> in_ptrs;
  for (const auto& host : inputs_) {
    in.push_back(std::make_unique<DeviceBuffer>(memory, host.size()));
    if (!in.back()->ok() || (!host.empty() && !memory.to_device(in.back()->get(), host.data(), host.size()))) {
      r.harness_error = format("could not allocate or fill an input buffer of %zu bytes", host.size());
      return r;
    }
    in_ptrs.push_back(in.back()->get());
  }

  // o and lse, poisoned, with poisoned guards on both sides.
  const size_t o_bytes = static_cast<size_t>(o_elements_) * esize;
  std::vector<unsigned char> o_host(o_bytes + 2 * kGuardBytes);
  fill_poison(o_host.data(), dt, o_host.size() / esize);
  DeviceBuffer o_dev(memory, o_host.size());
  const int64_t rows = c.rows();
  std::vector<unsigned char> lse_host(c.with_lse ? static_cast<size_t>(rows) * 4 + 2 * kGuardBytes : 0);
  fill_poison(lse_host.data(), FMHA_DTYPE_F32, lse_host.size() / 4);
  DeviceBuffer lse_dev(memory, lse_host.size());
  if (!o_dev.ok() || !lse_dev.ok() || !memory.to_device(o_dev.get(), o_host.data(), o_host.size()) ||
      (c.with_lse && !memory.to_device(lse_dev.get(), lse_host.data(), lse_host.size()))) {
    r.harness_error = "could not allocate or poison o/lse";
    return r;
  }
  unsigned char* o_base = static_cast<unsigned char*>(o_dev.get()) + kGuardBytes;

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.q = tensor(q_, q_dims_, in_ptrs.data());
  p.k = tensor(k_, kv_dims_, in_ptrs.data());
  p.v = tensor(v_, kv_dims_, in_ptrs.data());
  void* o_buffers[1] = {o_base};
  View o_view = o_;
  o_view.buffer = 0;
  p.o = tensor(o_view, q_dims_, o_buffers);
  p.lse = c.with_lse ? reinterpret_cast<float*>(static_cast<unsigned char*>(lse_dev.get()) + kGuardBytes)
                     : nullptr;
  p.mask_flags = c.mask_flags;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.scale = c.scale;
  p.softcap = c.softcap;
  p.kernel = options.kernel;
  p.num_splits = options.num_splits;

  // Workspace: the queried size plus any extra, poisoned.
  r.status = fmha_forward_workspace_size(handle, &p, &r.workspace_bytes);
  if (r.status != FMHA_SUCCESS) {
    r.message = fmha_last_error_message();
    return r;
  }
  const size_t ws_bytes = r.workspace_bytes + options.extra_workspace_bytes;
  DeviceBuffer ws(memory, ws_bytes);
  if (ws_bytes > 0) {
    std::vector<unsigned char> ws_host(ws_bytes);
    fill_poison_bytes(ws_host.data(), ws_bytes);
    if (!ws.ok() || !memory.to_device(ws.get(), ws_host.data(), ws_bytes)) {
      r.harness_error = format("could not allocate or poison a workspace of %zu bytes", ws_bytes);
      return r;
    }
  }

  r.status = fmha_forward(handle, &p, ws.get(), ws_bytes);
  r.message = fmha_last_error_message();
  if (!memory.synchronize()) r.harness_error = "synchronize() failed after fmha_forward";
  if (r.status != FMHA_SUCCESS || !r.harness_error.empty()) return r;

  std::vector<unsigned char> o_back(o_host.size()), lse_back(lse_host.size());
  if (!memory.to_host(o_back.data(), o_dev.get(), o_back.size()) ||
      (c.with_lse && !memory.to_host(lse_back.data(), lse_dev.get(), lse_back.size()))) {
    r.harness_error = "could not copy o/lse back";
    return r;
  }

  // Guards: every guard element must still be poison.
  auto count_changed = [&](const std::vector<unsigned char>& before, const std::vector<unsigned char>& after,
                           size_t from, size_t to, size_t elem) {
    int64_t n = 0;
    for (size_t e = from; e < to; e += elem) n += std::memcmp(&before[e], &after[e], elem) != 0;
    return n;
  };
  r.outside_writes += count_changed(o_host, o_back, 0, kGuardBytes, esize);
  r.outside_writes += count_changed(o_host, o_back, kGuardBytes + o_bytes, o_back.size(), esize);
  if (c.with_lse) {
    r.outside_writes += count_changed(lse_host, lse_back, 0, kGuardBytes, 4);
    r.outside_writes += count_changed(lse_host, lse_back, lse_back.size() - kGuardBytes, lse_back.size(), 4);
  }

  // o: every element of the view, read back; the gaps must stay poison.
  const unsigned char* o_view_host = o_back.data() + kGuardBytes;
  const int64_t D = c.head_dim;
  std::vector<double> actual(static_cast<size_t>(rows * D));
  std::vector<uint8_t> unwritten(actual.size()), covered(static_cast<size_t>(o_elements_));
  for_each_element(q_dims_, o_.strides, 0, [&](int64_t flat, int64_t offset) {
    covered[static_cast<size_t>(offset)] = 1;
    unwritten[static_cast<size_t>(flat)] = is_poison(o_view_host, dt, offset);
    actual[static_cast<size_t>(flat)] = load_element(o_view_host, dt, offset);
  });
  for (int64_t e = 0; e < o_elements_; ++e)
    if (!covered[static_cast<size_t>(e)] && !is_poison(o_view_host, dt, e)) ++r.outside_writes;
  r.o = compare_values(actual.data(), unwritten.data(), ref_.o.data(), rows * D);
  if (r.o.worst >= 0) {
    r.o_worst_actual = actual[static_cast<size_t>(r.o.worst)];
    r.o_worst_expected = ref_.o[static_cast<size_t>(r.o.worst)];
  }

  // Rows that see no key: O exactly 0.
  for (int64_t row = 0; row < rows; ++row) {
    if (ref_.visible_keys[static_cast<size_t>(row)] != 0) continue;
    ++r.masked_rows;
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = static_cast<size_t>(row * D + d);
      if (unwritten[e] || actual[e] != 0.0) {
        ++r.masked_rows_not_zero;
        break;
      }
    }
  }

  if (c.with_lse) {
    r.lse_checked = true;
    std::vector<float> lse(static_cast<size_t>(rows));
    std::vector<uint8_t> lse_unwritten(lse.size());
    if (!lse.empty()) std::memcpy(lse.data(), lse_back.data() + kGuardBytes, lse.size() * 4);
    for (size_t e = 0; e < lse.size(); ++e)
      lse_unwritten[e] = is_poison(lse_back.data() + kGuardBytes, FMHA_DTYPE_F32, static_cast<int64_t>(e));
    r.lse = compare_lse(lse.data(), lse_unwritten.data(), ref_.lse.data(), rows);
    if (r.lse.worst >= 0) {
      r.lse_worst_actual = lse[static_cast<size_t>(r.lse.worst)];
      r.lse_worst_expected = ref_.lse[static_cast<size_t>(r.lse.worst)];
    }
    if (options.keep_outputs) r.lse_values = std::move(lse);
  }

  // The inputs must come back bit for bit.
  for (size_t b = 0; b < inputs_.size(); ++b) {
    std::vector<unsigned char> back(inputs_[b].size());
    if (!back.empty() && !memory.to_host(back.data(), in_ptrs[b], back.size())) {
      r.harness_error = "could not copy an input back";
      return r;
    }
    if (back != inputs_[b]) r.inputs_unchanged = false;
  }

  if (options.keep_outputs) r.o_bytes.assign(o_view_host, o_view_host + o_bytes);
  return r;
}

CaseResult run_case(fmha_handle handle, DeviceMemory& memory, const AttentionCase& c,
                    const RunOptions& options) {
  return PreparedCase(c).run(handle, memory, options);
}

std::vector<std::string> registered_kernels() {
  std::vector<std::string> names;
  for (int i = 0; i < fmha_kernel_count(); ++i)
    if (const char* name = fmha_kernel_name(i)) names.emplace_back(name);
  return names;
}

// ---- CaseResult -----------------------------------------------------------

bool CaseResult::ok() const {
  if (status != FMHA_SUCCESS || !harness_error.empty()) return false;
  if (!o.all_finite() || !(o.rel_l2 <= tolerance.o_rel_l2) || !(o.max_abs_rel() <= tolerance.o_max_abs_rel))
    return false;
  if (masked_rows_not_zero != 0 || outside_writes != 0 || !inputs_unchanged) return false;
  if (lse_checked && (!lse.all_valid() || !(lse.max_err <= tolerance.lse_abs))) return false;
  return true;
}

std::string CaseResult::report() const {
  std::string s = format("case   %s\nkernel %s, data seed 0x%016" PRIx64 " (FMHA_TEST_SEED=0x%" PRIx64 ")\n",
                         case_name.c_str(), kernel.c_str(), seed, base_seed);
  s += format("status %s%s%s\n", fmha_status_string(status), message.empty() ? "" : ": ", message.c_str());
  if (!harness_error.empty()) s += "harness error: " + harness_error + "\n";
  if (status != FMHA_SUCCESS || !harness_error.empty()) return s;
  auto where = [&](int64_t e, bool with_d) {
    const int64_t d = with_d ? e % head_dim : 0;
    const int64_t row = with_d ? e / head_dim : e;
    const int64_t i = row % seq_q, h = row / seq_q % heads_q, b = row / seq_q / heads_q;
    return with_d ? format("[b=%" PRId64 " h=%" PRId64 " i=%" PRId64 " d=%" PRId64 "]", b, h, i, d)
                  : format("[b=%" PRId64 " h=%" PRId64 " i=%" PRId64 "]", b, h, i);
  };
  s += format("o      rel_l2 %.3g (tol %.3g), max_abs %.3g = %.3g of max|ref| (tol %.3g), "
              "unwritten %" PRId64 ", non-finite %" PRId64 " of %" PRId64 "\n",
              o.rel_l2, tolerance.o_rel_l2, o.max_abs, o.max_abs_rel(), tolerance.o_max_abs_rel, o.unwritten,
              o.nonfinite, o.count);
  if (o.worst >= 0)
    s += format("       worst %s: got %.9g, want %.9g\n", where(o.worst, true).c_str(), o_worst_actual,
                o_worst_expected);
  s += format("masked rows %" PRId64 ", of them not exactly 0: %" PRId64 "\n", masked_rows, masked_rows_not_zero);
  if (lse_checked) {
    s += format("lse    max err %.3g (tol %.3g, |d| / max(1, |lse|)), unwritten %" PRId64 ", non-finite %" PRId64
                ", not -inf on a masked row %" PRId64 "\n",
                lse.max_err, tolerance.lse_abs, lse.unwritten, lse.nonfinite, lse.wrong_masked);
    if (lse.worst >= 0)
      s += format("       worst %s: got %.9g, want %.9g\n", where(lse.worst, false).c_str(), lse_worst_actual,
                  lse_worst_expected);
  }
  s += format("writes outside o/lse %" PRId64 ", inputs unchanged %s, workspace %zu bytes, max |logit| %.4g\n",
              outside_writes, inputs_unchanged ? "yes" : "NO", workspace_bytes, max_abs_logit);
  s += ok() ? "PASS\n" : "FAIL\n";
  return s;
}

}  // namespace fmha_test
