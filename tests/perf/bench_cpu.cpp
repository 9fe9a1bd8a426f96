// bench_cpu: time the CPU backend through the public API.
//
//   bench_cpu [--b 1] [--h 8] [--n 2048] [--d 128] [--dtype f16|bf16|f32]
//             [--threads 1,2] [--no-causal] [--warmup 1] [--reps 7] [--rows 16]
//
// Random inputs (N(0,1), fixed seed), one warm-up forward (or --warmup),
// then --reps timed forwards per thread count; prints the median and the
// fastest time, GFLOP/s from the median with FLOPs = 4 * D * (visible
// (i, j) pairs) * B * H (QK^T and PV, one multiply-add = 2 FLOPs; a causal
// mask halves the pairs), and the relative L2 error of --rows sampled rows
// against a float64 reference computed here.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmha/fmha.h>

#include "core/numeric.h"  // header-only FP16/BF16 conversions

namespace {

struct Options {
  int64_t b = 1, h = 8, n = 2048, d = 128;
  fmha_dtype dtype = FMHA_DTYPE_F16;
  std::vector<int> threads = {1, 2};
  bool causal = true;
  int warmup = 1, reps = 7, rows = 16;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "%s\nusage: bench_cpu [--b B] [--h H] [--n N] [--d D] [--dtype f16|bf16|f32] "
               "[--threads 1,2,...] [--no-causal] [--warmup W] [--reps R] [--rows K]\n",
               msg);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--b") o.b = std::atoll(value());
    else if (a == "--h") o.h = std::atoll(value());
    else if (a == "--n") o.n = std::atoll(value());
    else if (a == "--d") o.d = std::atoll(value());
    else if (a == "--warmup") o.warmup = std::atoi(value());
    else if (a == "--reps") o.reps = std::atoi(value());
    else if (a == "--rows") o.rows = std::atoi(value());
    else if (a == "--no-causal") o.causal = false;
    else if (a == "--dtype") {
      const std::string t = value();
      if (t == "f16") o.dtype = FMHA_DTYPE_F16;
      else if (t == "bf16") o.dtype = FMHA_DTYPE_BF16;
      else if (t == "f32") o.dtype = FMHA_DTYPE_F32;
      else usage(("bad --dtype " + t).c_str());
    } else if (a == "--threads") {
      o.threads.clear();
      std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        o.threads.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.b < 1 || o.h < 1 || o.n < 1 || o.d < 1 || o.reps < 1 || o.warmup < 0 || o.rows < 0)
    usage("sizes must be positive");
  return o;
}

const char* dtype_label(fmha_dtype t) {
  return t == FMHA_DTYPE_F16 ? "f16" : t == FMHA_DTYPE_BF16 ? "bf16" : "f32";
}

// Storage <-> double for the reference and the error.
double get(const std::vector<uint8_t>& buf, int64_t i, fmha_dtype t) {
  if (t == FMHA_DTYPE_F32) {
    float f;
    std::memcpy(&f, buf.data() + 4 * i, 4);
    return f;
  }
  uint16_t u;
  std::memcpy(&u, buf.data() + 2 * i, 2);
  return t == FMHA_DTYPE_F16 ? fmha::half_to_float(u) : fmha::bf16_to_float(u);
}

void put(std::vector<uint8_t>& buf, int64_t i, fmha_dtype t, float v) {
  if (t == FMHA_DTYPE_F32) {
    std::memcpy(buf.data() + 4 * i, &v, 4);
    return;
  }
  const uint16_t u = t == FMHA_DTYPE_F16 ? fmha::float_to_half(v) : fmha::float_to_bf16(v);
  std::memcpy(buf.data() + 2 * i, &u, 2);
}

fmha_tensor tensor(std::vector<uint8_t>& buf, const Options& o) {
  fmha_tensor t;
  t.data = buf.data();
  t.dtype = o.dtype;
  const int64_t dims[4] = {o.b, o.h, o.n, o.d};
  const int64_t strides[4] = {o.h * o.n * o.d, o.n * o.d, o.d, 1};  // BHND contiguous
  std::memcpy(t.dims, dims, sizeof dims);
  std::memcpy(t.strides, strides, sizeof strides);
  return t;
}

// Keys query row i sees (Nq = Nk, so both causal alignments agree).
int64_t visible_keys(int64_t i, const Options& o) { return o.causal ? i + 1 : o.n; }

// Relative L2 error of `rows` sampled rows of o (first and last row of the
// sequence included) against a float64 reference.
double sampled_error(const Options& o, const std::vector<uint8_t>& q, const std::vector<uint8_t>& k,
                     const std::vector<uint8_t>& v, const std::vector<uint8_t>& out) {
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(o.d)));
  double num = 0, den = 0;
  std::vector<double> s(o.n), acc(o.d);
  for (int r = 0; r < o.rows; ++r) {
    const int64_t bh = (r * 7) % (o.b * o.h);
    const int64_t i = o.rows == 1 ? o.n - 1 : r * (o.n - 1) / (o.rows - 1);
    const int64_t qrow = (bh * o.n + i) * o.d;
    const int64_t keys = visible_keys(i, o);
    double m = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t krow = (bh * o.n + j) * o.d;
      double dot = 0;
      for (int64_t x = 0; x < o.d; ++x) dot += get(q, qrow + x, o.dtype) * get(k, krow + x, o.dtype);
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < keys; ++j) {
      const double e = std::exp(s[j] - m);
      l += e;
      const int64_t vrow = (bh * o.n + j) * o.d;
      for (int64_t x = 0; x < o.d; ++x) acc[x] += e * get(v, vrow + x, o.dtype);
    }
    for (int64_t x = 0; x < o.d; ++x) {
      const double ref = acc[x] / l;
      const double diff = get(out, qrow + x, o.dtype) - ref;
      num += diff * diff;
      den += ref * ref;
    }
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int64_t elems = o.b * o.h * o.n * o.d;
  const int esize = o.dtype == FMHA_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> q(elems * esize), k(elems * esize), v(elems * esize), out(elems * esize);
  std::mt19937_64 rng(20261129);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* buf : {&q, &k, &v})
    for (int64_t i = 0; i < elems; ++i) put(*buf, i, o.dtype, normal(rng));

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.mask_flags = o.causal ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
  p.q = tensor(q, o);
  p.k = tensor(k, o);
  p.v = tensor(v, o);
  p.o = tensor(out, o);

  double pairs = 0;  // visible (i, j) pairs of one head
  for (int64_t i = 0; i < o.n; ++i) pairs += static_cast<double>(visible_keys(i, o));
  const double flops = 4.0 * static_cast<double>(o.d) * pairs * static_cast<double>(o.b * o.h);

  fmha_handle handle = nullptr;
  fmha_status st = fmha_create(&handle, FMHA_DEVICE_CPU, 0);
  if (st != FMHA_SUCCESS) {
    std::fprintf(stderr, "fmha_create: %s\n", fmha_last_error_message());
    return 1;
  }
  char explain[512];
  fmha_forward_explain(handle, &p, explain, sizeof explain);
  const char* chosen = std::strstr(explain, "chosen: ");
  std::printf("bench_cpu: B=%" PRId64 " H=%" PRId64 " N=%" PRId64 " D=%" PRId64 " %s %s, %.3f GFLOP per forward\n",
              o.b, o.h, o.n, o.d, dtype_label(o.dtype), o.causal ? "causal" : "no mask", flops * 1e-9);
  if (chosen) std::printf("%.*s\n", static_cast<int>(std::strcspn(chosen, "\n")), chosen);
  std::printf("%8s %12s %12s %10s %12s %12s\n", "threads", "median ms", "min ms", "GFLOP/s", "workspace", "rel-L2");

  int rc = 0;
  for (int threads : o.threads) {
    if ((st = fmha_set_num_threads(handle, threads)) != FMHA_SUCCESS) {
      std::fprintf(stderr, "fmha_set_num_threads(%d): %s\n", threads, fmha_last_error_message());
      rc = 1;
      continue;
    }
    size_t ws_bytes = 0;
    if ((st = fmha_forward_workspace_size(handle, &p, &ws_bytes)) != FMHA_SUCCESS) {
      std::fprintf(stderr, "workspace_size: %s\n", fmha_last_error_message());
      rc = 1;
      break;
    }
    std::vector<uint8_t> ws_store(ws_bytes + 64);
    void* ws = ws_store.data() + (64 - reinterpret_cast<uintptr_t>(ws_store.data()) % 64) % 64;
    std::memset(out.data(), 0xff, out.size());  // poison: NaN in every dtype
    std::vector<double> times;
    for (int r = 0; r < o.warmup + o.reps; ++r) {
      const double t0 = now_ms();
      st = fmha_forward(handle, &p, ws, ws_bytes);
      const double t1 = now_ms();
      if (st != FMHA_SUCCESS) {
        std::fprintf(stderr, "fmha_forward: %s\n", fmha_last_error_message());
        return 1;
      }
      if (r >= o.warmup) times.push_back(t1 - t0);
    }
    std::sort(times.begin(), times.end());
    const double median = times.size() % 2 ? times[times.size() / 2]
                                           : 0.5 * (times[times.size() / 2 - 1] + times[times.size() / 2]);
    const double err = sampled_error(o, q, k, v, out);
    std::printf("%8d %12.2f %12.2f %10.1f %10.1f KB %12.2e\n", threads, median, times.front(),
                flops / (median * 1e-3) * 1e-9, ws_bytes / 1024.0, err);
  }
  fmha_destroy(handle);
  return rc;
}
