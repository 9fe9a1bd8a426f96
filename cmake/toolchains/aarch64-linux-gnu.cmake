# Cross-build for AArch64 Linux with Debian's g++-aarch64-linux-gnu
# (apt-get install g++-aarch64-linux-gnu qemu-user), CPU backend only:
#
#   cmake -S . -B build-arm64 -G Ninja -DFMHA_ENABLE_CUDA=OFF \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
#
# ctest runs the test programs through qemu-aarch64 with the cross sysroot
# (-L), so the suite runs on an x86-64 machine: correctness only, qemu's
# timings mean nothing. QEMU_CPU (qemu's own variable, default "max") picks
# the emulated core, e.g. cortex-a72 for one without FP16 arithmetic.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(FMHA_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${FMHA_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${FMHA_CROSS_TRIPLE}-g++)
set(CMAKE_FIND_ROOT_PATH /usr/${FMHA_CROSS_TRIPLE})

# Programs (ninja, python, doctest's header-only include) come from the
# host; libraries and packages only from the cross sysroot.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

find_program(FMHA_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(FMHA_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${FMHA_QEMU_AARCH64} -L /usr/${FMHA_CROSS_TRIPLE})
endif()
