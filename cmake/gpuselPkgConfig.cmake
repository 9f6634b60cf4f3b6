# The packages for pkg-config users (see cmake/gpusel.pc.in), one per CMake target,
# since a pkg-config file cannot choose the CUDA runtime (`--static` adds
# Libs.private; it cannot take -lcudart away):
#   gpusel         the shared CUDA runtime (-lcudart)
#   gpusel_static  the static CUDA runtime (-lcudart_static and what it needs)
#   gpusel_headers no runtime: for nvcc, which links its own (static unless -cudart shared)
# and, compiled once (GPUSEL_INSTALL_COMPILED): gpusel_compiled, gpusel_compiled_static, gpusel_machine_compiled.
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

set(GPUSEL_PC_LIBDIR_LINE "")
set(GPUSEL_PC_DEFINES "")
set(GPUSEL_PC_KIND "header-only")
set(GPUSEL_PC_CFLAGS_CUDA "${GPUSEL_PC_CUDA_CFLAGS}")
foreach(GPUSEL_PC_NAME IN ITEMS gpusel gpusel_static gpusel_headers)
  if(GPUSEL_PC_NAME STREQUAL "gpusel")
    set(GPUSEL_PC_WHAT "links the shared CUDA runtime")
    set(GPUSEL_PC_LIBS "-L\${cuda_libdir} -lcudart -ldl -lpthread")
  elseif(GPUSEL_PC_NAME STREQUAL "gpusel_static")
    set(GPUSEL_PC_WHAT "links the static CUDA runtime")
    set(GPUSEL_PC_LIBS "-L\${cuda_libdir} -lcudart_static -lrt -ldl -lpthread")
  else()
    set(GPUSEL_PC_WHAT "links no CUDA runtime: the program brings one, as nvcc does")
    set(GPUSEL_PC_LIBS "-ldl -lpthread")
  endif()
  configure_file(${CMAKE_CURRENT_LIST_DIR}/gpusel.pc.in ${PROJECT_BINARY_DIR}/${GPUSEL_PC_NAME}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${GPUSEL_PC_NAME}.pc DESTINATION ${GPUSEL_PKGCONFIG_DIR})
endforeach()

# The compiled forms (docs/compiled.md): libgpusel.a, or libgpusel_machine.a for
# the machine layer alone, with GPUSEL_COMPILE_ONCE for every file that uses them.
if(GPUSEL_INSTALL_COMPILED)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(GPUSEL_PC_LIBDIR_LINE "libdir=${CMAKE_INSTALL_LIBDIR}")
  else()
    set(GPUSEL_PC_LIBDIR_LINE "libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  set(GPUSEL_PC_DEFINES " -DGPUSEL_COMPILE_ONCE")
  set(GPUSEL_PC_KIND "compiled once")
  foreach(GPUSEL_PC_NAME IN ITEMS gpusel_compiled gpusel_compiled_static gpusel_machine_compiled)
    if(GPUSEL_PC_NAME STREQUAL "gpusel_compiled")
      set(GPUSEL_PC_WHAT "libgpusel.a; links the shared CUDA runtime")
      set(GPUSEL_PC_LIBS "-L\${libdir} -lgpusel -L\${cuda_libdir} -lcudart -ldl -lpthread")
    elseif(GPUSEL_PC_NAME STREQUAL "gpusel_compiled_static")
      set(GPUSEL_PC_WHAT "libgpusel.a; links the static CUDA runtime")
      set(GPUSEL_PC_LIBS "-L\${libdir} -lgpusel -L\${cuda_libdir} -lcudart_static -lrt -ldl -lpthread")
    else()
      set(GPUSEL_PC_WHAT "libgpusel_machine.a, the machine layer alone; CUDA-free")
      set(GPUSEL_PC_LIBS "-L\${libdir} -lgpusel_machine -ldl -lpthread")
      set(GPUSEL_PC_CUDA_CFLAGS "")
    endif()
    configure_file(${CMAKE_CURRENT_LIST_DIR}/gpusel.pc.in ${PROJECT_BINARY_DIR}/${GPUSEL_PC_NAME}.pc @ONLY)
    install(FILES ${PROJECT_BINARY_DIR}/${GPUSEL_PC_NAME}.pc DESTINATION ${GPUSEL_PKGCONFIG_DIR})
  endforeach()
  set(GPUSEL_PC_CUDA_CFLAGS "${GPUSEL_PC_CFLAGS_CUDA}")
endif()
