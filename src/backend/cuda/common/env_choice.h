// Which of a list of names an environment variable holds: the measurement
// switches of experiment builds (candidate tile configs picked at run time).
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

}  // namespace fmha::cuda
