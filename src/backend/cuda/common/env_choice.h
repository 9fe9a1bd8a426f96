// The measurement switches read from the environment: which of a list of
// names a variable holds (candidate tile configs of experiment builds,
// picked at run time), or its integer value (A/B switches of default
// builds). Callers read them once, into a function-local static.
#pragma once

#include <cstdlib>
#include <cstring>

namespace fmha::cuda {

// 1 + the index of the variable's value in names; 0 when it is unset or
// names none of them.
template <int kCount>
inline int env_choice(const char* variable, const char* const (&names)[kCount]) {
  const char* v = std::getenv(variable);
  if (v == nullptr) return 0;
  for (int i = 0; i < kCount; ++i)
    if (std::strcmp(v, names[i]) == 0) return i + 1;
  return 0;
}

// The variable's integer value (atoll), or `fallback` when it is unset or
// empty.
inline long long env_int(const char* variable, long long fallback) {
  const char* v = std::getenv(variable);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

}  // namespace fmha::cuda
