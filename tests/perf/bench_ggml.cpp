// bench_ggml: fmha's CPU forward beside ggml's ggml_flash_attn_ext (llama.cpp's
// CPU flash attention) on the same inputs, the same thread count, in one run.
//
//   bench_ggml [--threads 1,2] [--reps 7] [--mt-reps R] [--warmup 1] [--rows 16]
//              [--dtypes f16,bf16] [--shapes prefill,decode] [--nk 4096,16384,65536]
//
// Not part of the default build: it needs ggml's sources, which the project
// does not carry. tools/bench_vs_ggml.sh builds ggml's CPU backend and this
// file against libfmha; see there.
//
// Shapes (D = 128, B = 1):
//   prefill: H = 8, N = 2048, causal and not causal;
//   decode:  Hq = 32, Hk = 8, Nq = 1, Nk from --nk (causal bottom-right:
//            every key is visible to the one query).
// Inputs: N(0, 1) from a fixed seed, rounded to the dtype. K and V are one
// buffer each, shared by both libraries: ggml's K [D, Nk, Hk, B] and V
// (not transposed) are, row for row, fmha's [B, Hk, Nk, D]. ggml takes q as
// F32 (its CPU kernel converts each q row to K's dot-product type); it gets
// the same values as fmha's 16-bit q. Both write F32 outputs (fmha through
// its 0.3 o dtype), so the comparison carries no output rounding.
//
// ggml gets its best case: a mask only where some key is masked (causal
// prefill: F16 0 / -inf, [Nk, Nq]); none for decode or non-causal prefill
// (llama.cpp passes its KV-cache mask always; reading it costs ggml 2 bytes
// per key and row, and lets it skip masked keys), a persistent ggml
// threadpool of the same thread count, and the default precision
// (GGML_PREC_DEFAULT: F16 V accumulates in F16 on its vector path, F32 on
// its tiled prefill path).
//
// Timing: --warmup calls of each, then --reps rounds (--mt-reps, default 3 x
// --reps, with more than one thread, where a round is short and the spread
// wide), each timing one ggml
// graph compute and one fmha_forward, in alternating order (ggml first on
// even rounds), so both see the same machine state; with more than one
// thread each timed call follows an untimed one of the same side, so
// neither is timed while the other's idle threads still spin (ggml's OpenMP
// workers do after a graph) or while its own threads wake. Printed per row: each
// side's median and min ms, speed = ggml median / fmha median (> 1: fmha
// faster) and the same of the minima, the K+V read rate of each (decode: the bytes of K and V once,
// over the median) and each side's relative L2 error on --rows sampled
// query rows against a float64 reference from the same rounded inputs.
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
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Options {
  std::vector<int> threads = {1, 2};
  std::vector<std::string> dtypes = {"f16", "bf16"};
  std::vector<std::string> shapes = {"prefill", "decode"};
  std::vector<int64_t> nk = {4096, 16384, 65536};
  int warmup = 1, reps = 7, mt_reps = 0, rows = 16;  // mt_reps 0: 3 x reps
};

struct Shape {
  const char* name;
  int64_t hq, hk, nq, nk, d;
  bool causal;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "%s\nusage: bench_ggml [--threads 1,2] [--reps R] [--mt-reps R] [--warmup W] [--rows K] "
               "[--dtypes f16,bf16] [--shapes prefill,decode] [--nk 4096,16384,65536]\n",
               msg);
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads.clear();
      for (const auto& s : split_list(value())) o.threads.push_back(std::atoi(s.c_str()));
    } else if (a == "--nk") {
      o.nk.clear();
      for (const auto& s : split_list(value())) o.nk.push_back(std::atoll(s.c_str()));
    } else if (a == "--dtypes") {
      o.dtypes = split_list(value());
    } else if (a == "--shapes") {
      o.shapes = split_list(value());
    } else if (a == "--reps") {
      o.reps = std::atoi(value().c_str());
    } else if (a == "--mt-reps") {
      o.mt_reps = std::atoi(value().c_str());
    } else if (a == "--warmup") {
      o.warmup = std::atoi(value().c_str());
    } else if (a == "--rows") {
      o.rows = std::atoi(value().c_str());
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  if (o.reps < 1 || o.mt_reps < 0 || o.warmup < 0 || o.rows < 1 || o.threads.empty())
    usage("--reps, --rows must be positive");
  if (o.mt_reps == 0) o.mt_reps = 3 * o.reps;
  for (int t : o.threads)
    if (t < 1) usage("--threads must be positive");
  for (const auto& d : o.dtypes)
    if (d != "f16" && d != "bf16") usage(("unknown dtype " + d).c_str());
  for (const auto& s : o.shapes)
    if (s != "prefill" && s != "decode") usage(("unknown shape " + s).c_str());
  return o;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The 16-bit storage of one dtype, both ways.
float to_float(uint16_t u, fmha_dtype t) {
  return t == FMHA_DTYPE_F16 ? fmha::half_to_float(u) : fmha::bf16_to_float(u);
}
uint16_t from_float(float f, fmha_dtype t) {
  return t == FMHA_DTYPE_F16 ? fmha::float_to_half(f) : fmha::float_to_bf16(f);
}

fmha_tensor bhnd(void* data, fmha_dtype t, int64_t h, int64_t n, int64_t d) {
  fmha_tensor x;
  std::memset(&x, 0, sizeof x);
  x.data = data;
  x.dtype = t;
  const int64_t dims[4] = {1, h, n, d};
  const int64_t strides[4] = {h * n * d, n * d, d, 1};
  std::memcpy(x.dims, dims, sizeof dims);
  std::memcpy(x.strides, strides, sizeof strides);
  return x;
}

// One (shape, dtype): the inputs, both libraries' calls and outputs.
struct Case {
  Shape s;
  fmha_dtype dt;
  std::vector<uint16_t> q16, k, v;  // q rounded to the dtype; K and V shared
  std::vector<float> q32;           // ggml's q: the same values as F32
  std::vector<uint16_t> mask;       // ggml's F16 mask [Nq, Nk] (causal prefill only)
  std::vector<float> o_fmha;        // [H, Nq, D]
  std::vector<float> o_ggml;        // [Nq, H, D] (ggml's permuted result)

  // Keys query row i sees: [0, visible(i)), causal bottom-right.
  int64_t visible(int64_t i) const { return s.causal ? std::clamp<int64_t>(i + 1 + s.nk - s.nq, 0, s.nk) : s.nk; }
};

void fill(Case& c, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  const Shape& s = c.s;
  c.q16.resize(s.hq * s.nq * s.d);
  c.q32.resize(c.q16.size());
  c.k.resize(s.hk * s.nk * s.d);
  c.v.resize(c.k.size());
  for (size_t i = 0; i < c.q16.size(); ++i) {
    c.q16[i] = from_float(normal(rng), c.dt);
    c.q32[i] = to_float(c.q16[i], c.dt);
  }
  for (auto* buf : {&c.k, &c.v})
    for (auto& x : *buf) x = from_float(normal(rng), c.dt);
  if (s.causal && s.nq > 1) {
    c.mask.resize(s.nq * s.nk);
    const uint16_t zero = fmha::float_to_half(0.f), minus_inf = fmha::float_to_half(-INFINITY);
    for (int64_t i = 0; i < s.nq; ++i)
      for (int64_t j = 0; j < s.nk; ++j) c.mask[i * s.nk + j] = j < c.visible(i) ? zero : minus_inf;
  }
  c.o_fmha.assign(c.q16.size(), NAN);
  c.o_ggml.assign(c.q16.size(), NAN);
}

// Relative L2 error of sampled rows (first and last query included) of
// both outputs against float64. Returns {fmha, ggml}.
std::pair<double, double> sampled_errors(const Case& c, int rows) {
  const Shape& s = c.s;
  const double scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
  const int64_t group = s.hq / s.hk;
  double num_f = 0, num_g = 0, den = 0;
  std::vector<double> sc(s.nk), acc(s.d);
  for (int r = 0; r < rows; ++r) {
    const int64_t h = (r * 7) % s.hq;
    const int64_t hk = h / group;
    const int64_t i = rows == 1 ? s.nq - 1 : r * (s.nq - 1) / (rows - 1);
    const int64_t keys = c.visible(i);
    const uint16_t* qr = c.q16.data() + (h * s.nq + i) * s.d;
    double m = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      const uint16_t* kr = c.k.data() + (hk * s.nk + j) * s.d;
      double dot = 0;
      for (int64_t x = 0; x < s.d; ++x) dot += static_cast<double>(to_float(qr[x], c.dt)) * to_float(kr[x], c.dt);
      sc[j] = dot * scale;
      m = std::max(m, sc[j]);
    }
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < keys; ++j) {
      const double e = std::exp(sc[j] - m);
      l += e;
      const uint16_t* vr = c.v.data() + (hk * s.nk + j) * s.d;
      for (int64_t x = 0; x < s.d; ++x) acc[x] += e * to_float(vr[x], c.dt);
    }
    const float* of = c.o_fmha.data() + (h * s.nq + i) * s.d;
    const float* og = c.o_ggml.data() + (i * s.hq + h) * s.d;
    for (int64_t x = 0; x < s.d; ++x) {
      const double ref = acc[x] / l;
      num_f += (of[x] - ref) * (of[x] - ref);
      num_g += (og[x] - ref) * (og[x] - ref);
      den += ref * ref;
    }
  }
  return {std::sqrt(num_f / den), std::sqrt(num_g / den)};
}

// ggml's side of one case at one thread count: a graph of one
// ggml_flash_attn_ext over the case's buffers, its work buffer, a threadpool.
struct GgmlRun {
  ggml_context* ctx = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_threadpool* pool = nullptr;
  ggml_cplan plan{};
  std::vector<uint8_t> work;

  GgmlRun(Case& c, int threads) {
    const Shape& s = c.s;
    ggml_init_params ip = {16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ctx = ggml_init(ip);
    const ggml_type kv_type = c.dt == FMHA_DTYPE_F16 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
    ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.d, s.nq, s.hq, 1);
    ggml_tensor* k = ggml_new_tensor_4d(ctx, kv_type, s.d, s.nk, s.hk, 1);
    ggml_tensor* v = ggml_new_tensor_4d(ctx, kv_type, s.d, s.nk, s.hk, 1);
    ggml_tensor* mask = nullptr;
    q->data = c.q32.data();
    k->data = c.k.data();
    v->data = c.v.data();
    if (!c.mask.empty()) {
      mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, s.nk, s.nq, 1, 1);
      mask->data = c.mask.data();
    }
    ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, static_cast<float>(1.0 / std::sqrt(double(s.d))),
                                           0.f, 0.f);
    out->data = c.o_ggml.data();  // F32 [D, H, Nq, 1]
    graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    ggml_threadpool_params tp = ggml_threadpool_params_default(threads);
    pool = ggml_threadpool_new(&tp);
    plan = ggml_graph_plan(graph, threads, pool);
    work.resize(plan.work_size + 64);
    plan.work_data = work.data();
  }
  ~GgmlRun() {
    ggml_threadpool_free(pool);
    ggml_free(ctx);
  }
  bool run() { return ggml_graph_compute(graph, &plan) == GGML_STATUS_SUCCESS; }
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  ggml_cpu_init();
  fmha_handle handle = nullptr;
  if (fmha_create(&handle, FMHA_DEVICE_CPU, 0) != FMHA_SUCCESS) {
    std::fprintf(stderr, "fmha_create: %s\n", fmha_last_error_message());
    return 1;
  }
  std::vector<Shape> shapes;
  for (const auto& name : o.shapes) {
    if (name == "prefill") {
      shapes.push_back({"prefill H8 N2048 causal", 8, 8, 2048, 2048, 128, true});
      shapes.push_back({"prefill H8 N2048 nomask", 8, 8, 2048, 2048, 128, false});
    } else {
      for (int64_t nk : o.nk) shapes.push_back({"decode Hq32/Hk8 Nq1", 32, 8, 1, nk, 128, true});
    }
  }
  const uint32_t fv = fmha_version();
  std::printf("bench_ggml: ggml %s (%s; ggml_flash_attn_ext, GGML_PREC_DEFAULT) vs fmha %u.%u.%u; "
              "median of %d interleaved rounds (%d with several threads) after %d warm-up\n",
              ggml_version(), ggml_commit(), fv / 10000, fv / 100 % 100, fv % 100, o.reps, o.mt_reps, o.warmup);
  std::printf("%-26s %5s %7s %7s %10s %10s %10s %10s %7s %9s %9s %9s %10s %10s\n", "shape", "dtype", "Nk",
              "threads", "ggml ms", "fmha ms", "ggml min", "fmha min", "speed", "speed min", "ggml GB/s", "fmha GB/s",
              "ggml rL2", "fmha rL2");
  std::mt19937_64 rng(20261201);
  int rc = 0;
  for (const Shape& s : shapes) {
    for (const auto& dname : o.dtypes) {
      Case c;
      c.s = s;
      c.dt = dname == "f16" ? FMHA_DTYPE_F16 : FMHA_DTYPE_BF16;
      fill(c, rng);
      fmha_forward_params p;
      fmha_forward_params_init(&p);
      p.mask_flags = s.causal ? FMHA_MASK_CAUSAL : FMHA_MASK_NONE;
      p.q = bhnd(c.q16.data(), c.dt, s.hq, s.nq, s.d);
      p.k = bhnd(c.k.data(), c.dt, s.hk, s.nk, s.d);
      p.v = bhnd(c.v.data(), c.dt, s.hk, s.nk, s.d);
      p.o = bhnd(c.o_fmha.data(), FMHA_DTYPE_F32, s.hq, s.nq, s.d);
      const double kv_bytes = 2.0 * static_cast<double>(c.k.size() * sizeof(uint16_t));
      for (int threads : o.threads) {
        size_t ws_bytes = 0;
        if (fmha_set_num_threads(handle, threads) != FMHA_SUCCESS ||
            fmha_forward_workspace_size(handle, &p, &ws_bytes) != FMHA_SUCCESS) {
          std::fprintf(stderr, "fmha: %s\n", fmha_last_error_message());
          rc = 1;
          continue;
        }
        std::vector<uint8_t> ws_store(ws_bytes + 64);
        void* ws = ws_store.data() + (64 - reinterpret_cast<uintptr_t>(ws_store.data()) % 64) % 64;
        GgmlRun g(c, threads);
        std::fill(c.o_fmha.begin(), c.o_fmha.end(), NAN);  // poison both outputs
        std::fill(c.o_ggml.begin(), c.o_ggml.end(), NAN);
        std::vector<double> tg, tf;
        bool ok = true;
        const int reps = threads > 1 ? o.mt_reps : o.reps;
        for (int r = 0; r < o.warmup + reps && ok; ++r) {
          double ms_g = 0, ms_f = 0;
          for (int side = 0; side < 2; ++side) {
            const bool ggml_now = (side == 0) == (r % 2 == 0);
            auto call = [&]() -> bool {
              if (ggml_now) return g.run();
              if (fmha_forward(handle, &p, ws, ws_bytes) == FMHA_SUCCESS) return true;
              std::fprintf(stderr, "fmha_forward: %s\n", fmha_last_error_message());
              return false;
            };
            // With several threads, one untimed call first: the other side's
            // idle threads may still spin (ggml's OpenMP workers do for a
            // while after a graph), and this side's own wake up.
            if (threads > 1) ok = ok && call();
            const double t0 = now_ms();
            ok = ok && call();
            (ggml_now ? ms_g : ms_f) = now_ms() - t0;
          }
          if (r >= o.warmup) {
            tg.push_back(ms_g);
            tf.push_back(ms_f);
          }
        }
        if (!ok) {
          std::fprintf(stderr, "%s %s: a forward failed\n", s.name, dname.c_str());
          rc = 1;
          continue;
        }
        const auto err = sampled_errors(c, o.rows);
        const double mg = median(tg), mf = median(tf);
        const double ng = *std::min_element(tg.begin(), tg.end()), nf = *std::min_element(tf.begin(), tf.end());
        // The K+V read rate means something for decode only (prefill reuses
        // each K/V tile across many query rows).
        char rate_g[16] = "-", rate_f[16] = "-";
        if (s.nq == 1) {
          std::snprintf(rate_g, sizeof rate_g, "%.1f", kv_bytes / (mg * 1e6));
          std::snprintf(rate_f, sizeof rate_f, "%.1f", kv_bytes / (mf * 1e6));
        }
        std::printf("%-26s %5s %7" PRId64 " %7d %10.3f %10.3f %10.3f %10.3f %7.2f %9.2f %9s %9s %10.2e %10.2e\n",
                    s.name, dname.c_str(), s.nk, threads, mg, mf, ng, nf, mg / mf, ng / nf, rate_g, rate_f,
                    err.second, err.first);
        std::fflush(stdout);
      }
    }
  }
  fmha_destroy(handle);
  return rc;
}
