/* Calls the C API the way a C caller may: with any int in an enum-typed
 * argument or field (C converts an int to an enum type without complaint;
 * in C++ the same values would already be undefined behaviour in the
 * caller). test_reliability.cpp checks that the library rejects them. */
#include <fmha/fmha.h>

#include "c_callers.h"

fmha_status c_create_with_kind(fmha_handle* handle, int kind, int device_ordinal) {
  return fmha_create(handle, (fmha_device_kind)kind, device_ordinal);
}

const char* c_status_string(int status) { return fmha_status_string((fmha_status)status); }

void c_set_dtype(fmha_tensor* t, int dtype) { t->dtype = (fmha_dtype)dtype; }
