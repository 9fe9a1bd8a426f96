# install(): headers, the library, the CMake package (fmha::fmha) and fmha.pc.
# Paths are fmha's own (PROJECT_SOURCE_DIR, PROJECT_BINARY_DIR), so this works
# the same when a parent vendors fmha with FMHA_INSTALL=ON. Components:
# fmha_runtime (the shared library) and fmha_development (the rest).
include(CMakePackageConfigHelpers)

set(FMHA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fmha)

install(TARGETS fmha EXPORT fmhaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT fmha_runtime NAMELINK_COMPONENT fmha_development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT fmha_development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT fmha_runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/fmha DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT fmha_development)
install(EXPORT fmhaTargets NAMESPACE fmha:: DESTINATION ${FMHA_CMAKE_DIR} COMPONENT fmha_development)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fmhaConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fmhaConfig.cmake INSTALL_DESTINATION ${FMHA_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fmhaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fmhaConfig.cmake ${PROJECT_BINARY_DIR}/fmhaConfigVersion.cmake
  DESTINATION ${FMHA_CMAKE_DIR} COMPONENT fmha_development)

# pkg-config: a static libfmha also needs the thread library (and the CUDA
# runtime, which pkg-config cannot locate; use the CMake package then).
set(FMHA_PC_LIBS_PRIVATE "-lstdc++ -lpthread -lm")
if(NOT FMHA_BUILD_SHARED)
  set(FMHA_PC_CFLAGS "-DFMHA_STATIC_DEFINE")
endif()
# Relocatable: prefix is found from the .pc file's own location.
file(RELATIVE_PATH FMHA_PC_PREFIX_FROM_PCDIR
  ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" FMHA_PC_PREFIX_FROM_PCDIR "${FMHA_PC_PREFIX_FROM_PCDIR}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fmha.pc.in ${PROJECT_BINARY_DIR}/fmha.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/fmha.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT fmha_development)
