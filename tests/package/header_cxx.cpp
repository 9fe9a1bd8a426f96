// The public header alone, as C++ (-pedantic -Werror), linked as C symbols.
#include <fmha/fmha.h>

#include <cstdio>
#include <type_traits>

static_assert(std::is_standard_layout<fmha_forward_params>::value, "C layout");
static_assert(std::is_trivially_copyable<fmha_tensor>::value, "C layout");
static_assert(FMHA_ERROR_NOT_AVAILABLE == 6, "pinned");

int main() {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  if (p.window_left != -1 || p.window_right != -1 || p.kernel != nullptr) return 1;
  std::printf("C++ header check passed (%d kernels)\n", fmha_kernel_count());
  return fmha_kernel_count() > 0 ? 0 : 2;
}
