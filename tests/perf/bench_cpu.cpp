// bench_cpu: time the CPU backend through the public API.
//
//   bench_cpu [--b 1] [--h 8] [--n 2048] [--d 128] [--dtype f16|bf16|f32]
//             [--threads 1,2] [--no-causal] [--warmup 1] [--reps 7] [--rows 16]
//             [--hk Hk] [--nq Nq] [--nk Nk] [--decode]
//
// --h and --n set the query and the kv head count and both sequence lengths;
// --hk, --nq and --nk override one of them (GQA, decode). --decode is the
// Llama decode step: Hq=32 Hk=8 Nq=1 Nk=4096 D=128 causal (bottom-right), with
// a memory-bandwidth line (below); later flags still override it.
//
// Random inputs (N(0,1), fixed seed), one warm-up forward (or --warmup),
// then --reps timed forwards per thread count; prints the median and the
// fastest time, GFLOP/s from the median with FLOPs = 4 * D * (visible
// (i, j) pairs) * B * Hq (QK^T and PV, one multiply-add = 2 FLOPs; a causal
// mask halves the pairs), and the relative L2 error of --rows sampled rows
// against a float64 reference computed here.
//
// With --decode (or --bandwidth) it also prints, per thread count, the K+V
// bytes of one forward divided by its median time, beside two plain
// bandwidths measured in the same run with the same threads over a buffer of
// the K+V size (at least 64 MiB, so it is not cache-resident): memcpy (bytes
// read / time, i.e. half of the STREAM "copy" figure, which counts the write
// too) and a read-only sum. The attention reads K and V once per forward.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmha/fmha.h>

#include "core/numeric.h"  // header-only FP16/BF16 conversions

namespace {

struct Options {
  int64_t b = 1, hq = 8, hk = 8, nq = 2048, nk = 2048, d = 128;
  bool bandwidth = false;
  fmha_dtype dtype = FMHA_DTYPE_F16;
  std::vector<int> threads = {1, 2};
  bool causal = true;
  int warmup = 1, reps = 7, rows = 16;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "%s\nusage: bench_cpu [--b B] [--h H] [--n N] [--d D] [--dtype f16|bf16|f32] "
               "[--threads 1,2,...] [--no-causal] [--warmup W] [--reps R] [--rows K] [--hk Hk] [--nq Nq] "
               "[--nk Nk] [--decode] [--bandwidth]\n",
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
    else if (a == "--h") o.hq = o.hk = std::atoll(value());
    else if (a == "--n") o.nq = o.nk = std::atoll(value());
    else if (a == "--hk") o.hk = std::atoll(value());
    else if (a == "--nq") o.nq = std::atoll(value());
    else if (a == "--nk") o.nk = std::atoll(value());
    else if (a == "--bandwidth") o.bandwidth = true;
    else if (a == "--decode") {
      o.hq = 32;
      o.hk = 8;
      o.nq = 1;
      o.nk = 4096;
      o.d = 128;
      o.causal = true;
      o.bandwidth = true;
    }
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
  if (o.b < 1 || o.hq < 1 || o.hk < 1 || o.nq < 1 || o.nk < 1 || o.d < 1 || o.reps < 1 || o.warmup < 0 ||
      o.rows < 0)
    usage("sizes must be positive");
  if (o.hq % o.hk != 0) usage("--h must be a multiple of --hk");
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

fmha_tensor tensor(std::vector<uint8_t>& buf, const Options& o, int64_t h, int64_t n) {
  fmha_tensor t;
  t.data = buf.data();
  t.dtype = o.dtype;
  const int64_t dims[4] = {o.b, h, n, o.d};
  const int64_t strides[4] = {h * n * o.d, n * o.d, o.d, 1};  // BHND contiguous
  std::memcpy(t.dims, dims, sizeof dims);
  std::memcpy(t.strides, strides, sizeof strides);
  return t;
}

// Keys query row i sees: [0, this), causal aligned bottom-right (FMHA_MASK_CAUSAL).
int64_t visible_keys(int64_t i, const Options& o) {
  return o.causal ? std::clamp<int64_t>(i + 1 + o.nk - o.nq, 0, o.nk) : o.nk;
}

// Relative L2 error of `rows` sampled rows of o (first and last row of the
// sequence included) against a float64 reference.
double sampled_error(const Options& o, const std::vector<uint8_t>& q, const std::vector<uint8_t>& k,
                     const std::vector<uint8_t>& v, const std::vector<uint8_t>& out) {
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(o.d)));
  double num = 0, den = 0;
  std::vector<double> s(o.nk), acc(o.d);
  const int64_t group = o.hq / o.hk;
  for (int r = 0; r < o.rows; ++r) {
    const int64_t bh = (r * 7) % (o.b * o.hq);
    const int64_t bhk = bh / o.hq * o.hk + bh % o.hq / group;
    const int64_t i = o.rows == 1 ? o.nq - 1 : r * (o.nq - 1) / (o.rows - 1);
    const int64_t qrow = (bh * o.nq + i) * o.d;
    const int64_t keys = visible_keys(i, o);
    double m = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      const int64_t krow = (bhk * o.nk + j) * o.d;
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
      const int64_t vrow = (bhk * o.nk + j) * o.d;
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

// Bytes per second of `threads` threads each copying (memcpy) or summing
// (read only) its share of `src`: the fastest of `reps` passes, bytes read
// / time.
double plain_bandwidth(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src, int threads, bool copy,
                       int reps) {
  const size_t n = src.size();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<std::thread> pool;
    std::vector<uint64_t> sums(threads);
    const double t0 = now_ms();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t a = n / threads * t, z = t + 1 == threads ? n : n / threads * (t + 1);
        if (copy) {
          std::memcpy(dst.data() + a, src.data() + a, z - a);
        } else {
          const uint64_t* p = reinterpret_cast<const uint64_t*>(src.data() + a);
          uint64_t acc[8] = {};
          for (size_t i = 0; i + 8 <= (z - a) / 8; i += 8)
            for (int x = 0; x < 8; ++x) acc[x] += p[i + x];
          for (int x = 0; x < 8; ++x) sums[t] += acc[x];
        }
      });
    for (auto& th : pool) th.join();
    const double t1 = now_ms();
    best = std::max(best, static_cast<double>(n) / ((t1 - t0) * 1e-3));
    volatile uint64_t sink = sums[0];
    (void)sink;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const int64_t q_elems = o.b * o.hq * o.nq * o.d;
  const int64_t kv_elems = o.b * o.hk * o.nk * o.d;
  const int esize = o.dtype == FMHA_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> q(q_elems * esize), k(kv_elems * esize), v(kv_elems * esize), out(q_elems * esize);
  std::mt19937_64 rng(20261129);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (auto* buf : {&q, &k, &v})
    for (int64_t i = 0; i < static_cast<int64_t>(buf->size()) / esize; ++i) put(*buf, i, o.dtype, normal(rng));

  fmha_forward_params p;
  fmha_forward_params_init(&p);
  p.mask_flags = o.causal ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
  p.q = tensor(q, o, o.hq, o.nq);
  p.k = tensor(k, o, o.hk, o.nk);
  p.v = tensor(v, o, o.hk, o.nk);
  p.o = tensor(out, o, o.hq, o.nq);

  double pairs = 0;  // visible (i, j) pairs of one head
  for (int64_t i = 0; i < o.nq; ++i) pairs += static_cast<double>(visible_keys(i, o));
  const double flops = 4.0 * static_cast<double>(o.d) * pairs * static_cast<double>(o.b * o.hq);
  const double kv_bytes = 2.0 * static_cast<double>(kv_elems * esize);

  fmha_handle handle = nullptr;
  fmha_status st = fmha_create(&handle, FMHA_DEVICE_CPU, 0);
  if (st != FMHA_SUCCESS) {
    std::fprintf(stderr, "fmha_create: %s\n", fmha_last_error_message());
    return 1;
  }
  char explain[512];
  fmha_forward_explain(handle, &p, explain, sizeof explain);
  const char* chosen = std::strstr(explain, "chosen: ");
  std::printf("bench_cpu: B=%" PRId64 " Hq=%" PRId64 " Hk=%" PRId64 " Nq=%" PRId64 " Nk=%" PRId64 " D=%" PRId64
              " %s %s, %.3f GFLOP, %.1f MiB of K+V per forward\n",
              o.b, o.hq, o.hk, o.nq, o.nk, o.d, dtype_label(o.dtype), o.causal ? "causal" : "no mask", flops * 1e-9,
              kv_bytes / (1 << 20));
  if (chosen) std::printf("%.*s\n", static_cast<int>(std::strcspn(chosen, "\n")), chosen);
  std::printf("%8s %12s %12s %10s %12s %12s", "threads", "median ms", "min ms", "GFLOP/s", "workspace", "rel-L2");
  if (o.bandwidth) std::printf(" %10s %10s %10s %8s", "KV GB/s", "memcpy", "read", "KV/memcpy");
  std::printf("\n");
  std::vector<uint8_t> bw_src, bw_dst;
  if (o.bandwidth) {
    bw_src.assign(std::max<size_t>(static_cast<size_t>(kv_bytes), size_t{64} << 20), 1);
    bw_dst.assign(bw_src.size(), 0);
  }

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
    std::printf("%8d %12.2f %12.2f %10.1f %10.1f KB %12.2e", threads, median, times.front(),
                flops / (median * 1e-3) * 1e-9, ws_bytes / 1024.0, err);
    if (o.bandwidth) {
      const double kv_rate = kv_bytes / (median * 1e-3);
      const double copy = plain_bandwidth(bw_dst, bw_src, threads, true, 5);
      const double read = plain_bandwidth(bw_dst, bw_src, threads, false, 5);
      std::printf(" %10.1f %10.1f %10.1f %7.0f%%", kv_rate * 1e-9, copy * 1e-9, read * 1e-9, 100 * kv_rate / copy);
    }
    std::printf("\n");
  }
  fmha_destroy(handle);
  return rc;
}
