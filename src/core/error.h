// Errors inside fmha: a status value plus a thread-local message.
//
// Code below the C API returns fmha_status. A failure is reported with
// fail(status, "fmt", ...), which records the message naming the field and
// value at fault and returns the status, so call sites read
//   if (x < 0) return fail(FMHA_ERROR_INVALID_ARGUMENT, "x=%d must be >= 0", x);
// Exceptions never leave the library: api/c_api.cpp wraps every entry point
// in guard(), which maps them to a status.
#pragma once

#include "fmha/fmha.h"

namespace fmha {

#if defined(__GNUC__)
#define FMHA_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define FMHA_PRINTF_LIKE(fmt_index, first_arg)
#endif

// Records the message for the calling thread and returns status.
fmha_status fail(fmha_status status, const char* format, ...) FMHA_PRINTF_LIKE(2, 3);

// Clears the calling thread's message (every successful entry point does).
void clear_error();

// The calling thread's last message ("" if none).
const char* last_error();

// Thrown by backends for CUDA runtime failures deep inside helpers that
// cannot return a status; guard() maps it to FMHA_ERROR_DEVICE.
struct DeviceError {
  int code;
  const char* what;
};

// Thrown where something the caller supplied broke its contract deep inside a
// helper that cannot return a status (the parallel-for function of
// fmha_set_parallel_for); guard() maps it to `status` with this message.
struct CallerError {
  fmha_status status;
  char what[192];
};

}  // namespace fmha
