/* A downstream program: one small causal forward on the CPU backend,
 * checked against a float64 reference. Built by tests/package through
 * find_package(fmha), pkg-config and add_subdirectory(). */
#include <fmha/fmha.h>

#include <math.h>
#include <stdio.h>

enum { H = 2, N = 33, D = 16 };

static void view(fmha_tensor* t, float* data) {
  t->data = data;
  t->dtype = FMHA_DTYPE_F32;
  t->dims[0] = 1; t->dims[1] = H; t->dims[2] = N; t->dims[3] = D;
  t->strides[0] = H * N * D; t->strides[1] = N * D; t->strides[2] = D; t->strides[3] = 1;
}

int main(void) {
  static float q[H * N * D], k[H * N * D], v[H * N * D], o[H * N * D];
  unsigned x = 12345u;
  for (int i = 0; i < H * N * D; ++i) {
    x = x * 1664525u + 1013904223u; q[i] = (float)(x >> 8) / 16777216.f - 0.5f;
    x = x * 1664525u + 1013904223u; k[i] = (float)(x >> 8) / 16777216.f - 0.5f;
    x = x * 1664525u + 1013904223u; v[i] = (float)(x >> 8) / 16777216.f - 0.5f;
    o[i] = NAN;
  }
  fmha_handle h;
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  view(&p.q, q); view(&p.k, k); view(&p.v, v); view(&p.o, o);
  p.mask_flags = FMHA_MASK_CAUSAL;
  size_t ws = 0;
  static unsigned char workspace[1 << 20] __attribute__((aligned(64)));
  if (fmha_create(&h, FMHA_DEVICE_CPU, 0) != FMHA_SUCCESS ||
      fmha_forward_workspace_size(h, &p, &ws) != FMHA_SUCCESS || ws > sizeof workspace ||
      fmha_forward(h, &p, workspace, sizeof workspace) != FMHA_SUCCESS) {
    fprintf(stderr, "fmha failed: %s\n", fmha_last_error_message());
    return 1;
  }
  fmha_destroy(h);
  double err = 0, ref2 = 0;
  for (int hh = 0; hh < H; ++hh)
    for (int i = 0; i < N; ++i) {
      double s[N], m = -INFINITY, l = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += (double)q[(hh * N + i) * D + d] * k[(hh * N + j) * D + d];
        s[j] = dot / sqrt((double)D);
        m = s[j] > m ? s[j] : m;
      }
      for (int j = 0; j <= i; ++j) l += (s[j] = exp(s[j] - m));
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int j = 0; j <= i; ++j) acc += s[j] * v[(hh * N + j) * D + d];
        const double got = o[(hh * N + i) * D + d], ref = acc / l;
        err += (got - ref) * (got - ref);
        ref2 += ref * ref;
      }
    }
  const double rel = sqrt(err / ref2);
  printf("consumer: fmha %u, rel_l2=%.2e\n", fmha_version(), rel);
  return rel < 1e-5 ? 0 : 1;
}
