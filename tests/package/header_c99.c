/* The public header alone, as strict C99 (-std=c99 -pedantic -Werror). */
#include <fmha/fmha.h>

#include <stdio.h>
#include <string.h>

/* C99 has no _Static_assert: a negative array size fails the build. */
#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]
STATIC_CHECK(success, FMHA_SUCCESS == 0);
STATIC_CHECK(internal, FMHA_ERROR_INTERNAL == 7);
STATIC_CHECK(f16, FMHA_DTYPE_F16 == 1 && FMHA_DTYPE_BF16 == 2 && FMHA_DTYPE_F32 == 3);
STATIC_CHECK(fp8, FMHA_DTYPE_F8E4M3 == 4 && FMHA_DTYPE_F8E5M2 == 5);
STATIC_CHECK(cuda, FMHA_DEVICE_CPU == 0 && FMHA_DEVICE_CUDA == 1);
STATIC_CHECK(version, FMHA_VERSION_NUMBER ==
                          FMHA_VERSION_MAJOR * 10000 + FMHA_VERSION_MINOR * 100 + FMHA_VERSION_PATCH);

int main(void) {
  fmha_forward_params p;
  fmha_forward_params_init(&p);
  if (p.struct_size != FMHA_FORWARD_PARAMS_SIZE_V3) return 1;
  if (fmha_version() != FMHA_VERSION_NUMBER) return 2;
  if (strcmp(fmha_status_string(FMHA_ERROR_UNSUPPORTED), "no kernel supports this problem") != 0) return 3;
  printf("C99 header check passed (fmha %u)\n", fmha_version());
  return 0;
}
