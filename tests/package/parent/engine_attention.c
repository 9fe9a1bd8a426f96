/* A library of the parent's own that exports fmha::fmha as a dependency
 * (tests/package/parent/CMakeLists.txt, with FMHA_INSTALL=ON). */
#include <fmha/fmha.h>

unsigned engine_attention_version(void) { return fmha_version(); }
