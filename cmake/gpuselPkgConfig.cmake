# gpusel.pc: the package for pkg-config users (see cmake/gpusel.pc.in).
#
# gpusel is header-only, but its Libs name the CUDA runtime and the CUDA
# library directory of this machine, which are architecture-specific: so the
# file goes to <libdir>/pkgconfig rather than <datadir>/pkgconfig.
set(GPUSEL_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Paths relative to ${pcfiledir} keep the installed tree relocatable; an
# absolute install directory stays absolute.
if(IS_ABSOLUTE "${GPUSEL_PKGCONFIG_DIR}")
  set(GPUSEL_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH relative_prefix "/root/${GPUSEL_PKGCONFIG_DIR}" "/root")  # "../.." for lib/pkgconfig
  string(REGEX REPLACE "/$" "" relative_prefix "${relative_prefix}")
  set(GPUSEL_PC_PREFIX "\${pcfiledir}/${relative_prefix}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(GPUSEL_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(GPUSEL_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()

# The CUDA Toolkit this build found; CMake 3.25 gives one include directory,
# newer CMake may add CCCL's: each becomes an -I.
list(GET CUDAToolkit_INCLUDE_DIRS 0 GPUSEL_PC_CUDA_INCLUDEDIR)
set(GPUSEL_PC_CUDA_CFLAGS "-I\${cuda_includedir}")
foreach(directory IN LISTS CUDAToolkit_INCLUDE_DIRS)
  if(NOT directory STREQUAL GPUSEL_PC_CUDA_INCLUDEDIR)
    string(APPEND GPUSEL_PC_CUDA_CFLAGS " -I${directory}")
  endif()
endforeach()
set(GPUSEL_PC_CUDA_LIBDIR "${CUDAToolkit_LIBRARY_DIR}")

configure_file(${CMAKE_CURRENT_LIST_DIR}/gpusel.pc.in ${PROJECT_BINARY_DIR}/gpusel.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpusel.pc DESTINATION ${GPUSEL_PKGCONFIG_DIR})
