/* C helpers of the API tests (c_callers.c): enum arguments from plain ints. */
#ifndef FMHA_TESTS_API_C_CALLERS_H_
#define FMHA_TESTS_API_C_CALLERS_H_

#include <fmha/fmha.h>

#ifdef __cplusplus
extern "C" {
#endif

fmha_status c_create_with_kind(fmha_handle* handle, int kind, int device_ordinal);
const char* c_status_string(int status);
void c_set_dtype(fmha_tensor* t, int dtype);

#ifdef __cplusplus
}
#endif

#endif /* FMHA_TESTS_API_C_CALLERS_H_ */
