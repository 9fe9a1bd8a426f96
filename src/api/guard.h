// The C boundary: every extern "C" entry point runs its body in guard(),
// which clears the thread's message on success and maps any escaping C++
// exception to a status, so none crosses into C callers.
#pragma once

#include <new>
#include <exception>

#include "core/error.h"

namespace fmha {

template <class Body>
fmha_status guard(const char* entry, Body&& body) noexcept {
  try {
    const fmha_status s = body();
    if (s == FMHA_SUCCESS) clear_error();
    return s;
  } catch (const std::bad_alloc&) {
    return fail(FMHA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", entry);
  } catch (const CallerError& e) {
    return fail(e.status, "%s: %s", entry, e.what);
  } catch (const DeviceError& e) {
    return fail(FMHA_ERROR_DEVICE, "%s: CUDA error %d: %s", entry, e.code, e.what);
  } catch (const std::exception& e) {
    return fail(FMHA_ERROR_INTERNAL, "%s: %s", entry, e.what());
  } catch (...) {
    return fail(FMHA_ERROR_INTERNAL, "%s: unknown exception", entry);
  }
}

}  // namespace fmha
