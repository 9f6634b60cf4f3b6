# Installs gpusel into a temporary prefix and builds a program with nothing but
# `pkg-config --cflags --libs gpusel`, as a Makefile user would; then moves the
# prefix and checks that the .pc file still points into it.
#
#   cmake -DGPUSEL_SOURCE_DIR=... -DCONSUMER_SOURCE=main.cpp -DWORK_DIR=... -DEXPECTED_VERSION=...
#         -DCMAKE_CXX_COMPILER=... -DCMAKE_GENERATOR=... [-DNVCC=... -DCUDA_SOURCE=main.cu -DREADELF=... -DNM=...]
#         -P pkg_config_check.cmake
# With NVCC, it also builds CUDA_SOURCE with nvcc and each package, and checks
# from the binaries (tests/consumer/nvcc/check_runtimes.cmake) that each has
# exactly the CUDA runtime it asked for.
# With -DPART=compiled it checks the compiled packages instead (gpusel_compiled,
# gpusel_compiled_static, gpusel_machine_compiled; docs/compiled.md), in a test
# of its own so that the two run side by side.
# A source is compiled once for each compiler and set of --cflags (the packages
# of one prefix share them) and linked once for each package's --libs.
cmake_minimum_required(VERSION 3.21)
file(REMOVE_RECURSE "${WORK_DIR}")

function(run output_variable)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${output}\n${errors}")
  endif()
  set(${output_variable} "${output}" PARENT_SCOPE)
endfunction()

if(NOT PKG_CONFIG)
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
endif()

set(compiled OFF)
if(PART STREQUAL "compiled")
  set(compiled ON)
endif()
run(ignored ${CMAKE_COMMAND} -S "${GPUSEL_SOURCE_DIR}" -B "${WORK_DIR}/gpusel-build" -G "${CMAKE_GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}" -DGPUSEL_BUILD_TESTS=OFF -DGPUSEL_BUILD_EXAMPLES=OFF
    -DGPUSEL_BUILD_BENCHMARKS=OFF -DGPUSEL_BUILD_TOOLS=OFF -DGPUSEL_INSTALL_COMPILED=${compiled}
    "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix" -DCMAKE_INSTALL_LIBDIR=lib)
if(compiled)
  run(ignored ${CMAKE_COMMAND} --build "${WORK_DIR}/gpusel-build")  # libgpusel.a and libgpusel_machine.a
endif()
run(ignored ${CMAKE_COMMAND} --install "${WORK_DIR}/gpusel-build")

# Builds and runs the consumer from the prefix `prefix`, with pkg-config alone.
function(build_with_pkg_config prefix)
  set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
  set(ENV{PKG_CONFIG_LIBDIR} "${prefix}/lib/pkgconfig")  # nothing else: not a system-wide gpusel.pc
  run(version ${PKG_CONFIG} --modversion gpusel)
  if(NOT version STREQUAL EXPECTED_VERSION)
    message(FATAL_ERROR "pkg-config --modversion gpusel says ${version}, the project is ${EXPECTED_VERSION}")
  endif()
  run(flags ${PKG_CONFIG} --cflags --libs gpusel)
  message(STATUS "pkg-config --cflags --libs gpusel: ${flags}")
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(names_prefix FALSE)
  foreach(flag IN LISTS flags)
    if(flag MATCHES "^-I(.+)$")
      get_filename_component(directory "${CMAKE_MATCH_1}" REALPATH)
      if(directory STREQUAL "${prefix}/include")
        set(names_prefix TRUE)
      endif()
    endif()
  endforeach()
  if(NOT names_prefix)
    message(FATAL_ERROR "the flags do not name ${prefix}/include: ${flags}")
  endif()
  run(cflags ${PKG_CONFIG} --cflags gpusel)
  run(libs ${PKG_CONFIG} --libs gpusel)
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  separate_arguments(libs UNIX_COMMAND "${libs}")
  set(cxx ${CMAKE_CXX_COMPILER} -std=c++17)
  compile(object "${CONSUMER_SOURCE}" cxx cflags)
  run(ignored ${cxx} "${object}" -o "${WORK_DIR}/consumer" ${libs})
  run(output "${WORK_DIR}/consumer")
  message(STATUS "${output}")
endfunction()

# The object of `source` compiled with the command in the list named `compiler_list`
# and the flags in the list named `cflag_list`, into `result`: compiled the first
# time, then reused (WORK_DIR starts empty).
function(compile result source compiler_list cflag_list)
  string(MD5 key "${source};${${compiler_list}};${${cflag_list}}")
  get_filename_component(name "${source}" NAME_WE)
  set(object "${WORK_DIR}/${name}-${key}.o")
  if(NOT EXISTS "${object}")
    run(ignored ${${compiler_list}} -c "${source}" -o "${object}" ${${cflag_list}})
  endif()
  set(${result} "${object}" PARENT_SCOPE)
endfunction()

if(NOT compiled)
  build_with_pkg_config("${WORK_DIR}/prefix")
endif()

# Flags of `package` (and `extra` pkg-config options) as a list.
function(package_flags result package)
  run(flags ${PKG_CONFIG} ${ARGN} --cflags --libs ${package})
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${result} "${flags}" PARENT_SCOPE)
endfunction()

# Builds the consumer `name` from `source` with the command in the list `compiler`
# and the pkg-config flags in the list `flags` (a --cflags --libs list: the -I and
# -D flags compile, the rest link, after the object), and checks that it carries
# `runtime` alone. Arguments after `flags` are added to the link (nvcc's -cudart).
function(build_and_check name runtime source compiler flags)
  set(cflags "")
  set(libs "")
  foreach(flag IN LISTS ${flags})
    if(flag MATCHES "^-[ID]")
      list(APPEND cflags "${flag}")
    else()
      list(APPEND libs "${flag}")
    endif()
  endforeach()
  compile(object "${source}" ${compiler} cflags)
  run(ignored ${${compiler}} "${object}" -o "${WORK_DIR}/${name}" ${libs} ${ARGN})
  run(ignored ${CMAKE_COMMAND} -DREADELF=${READELF} -DNM=${NM} -DBINARY=${WORK_DIR}/${name} -DEXPECTED=${runtime}
      -P ${GPUSEL_SOURCE_DIR}/tests/consumer/nvcc/check_runtimes.cmake)
  run(output "${WORK_DIR}/${name}")
  message(STATUS "${name}: the ${runtime} CUDA runtime alone; ${output}")
  set(last_output "${output}" PARENT_SCOPE)
endfunction()

set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/prefix/lib/pkgconfig")
set(ENV{PKG_CONFIG_LIBDIR} "${WORK_DIR}/prefix/lib/pkgconfig")
if(compiled)
  if(READELF AND NM)
    set(cxx ${CMAKE_CXX_COMPILER} -std=c++17)
    # gpusel compiled once (docs/compiled.md): libgpusel.a, GPUSEL_COMPILE_ONCE, and each runtime.
    package_flags(compiled_flags gpusel_compiled)
    package_flags(compiled_static_flags gpusel_compiled_static --static)
    if(NOT compiled_flags MATCHES "(^|;)-DGPUSEL_COMPILE_ONCE(;|$)" OR NOT compiled_flags MATCHES "(^|;)-lgpusel(;|$)")
      message(FATAL_ERROR "pkg-config gpusel_compiled should name -DGPUSEL_COMPILE_ONCE and -lgpusel: ${compiled_flags}")
    endif()
    build_and_check(cxx_gpusel_compiled shared "${CONSUMER_SOURCE}" cxx compiled_flags)
    build_and_check(cxx_gpusel_compiled_static static "${CONSUMER_SOURCE}" cxx compiled_static_flags)
    if(NOT last_output MATCHES "compiled once")
      message(FATAL_ERROR "the consumer built with gpusel_compiled_static is not in compile-once mode: ${last_output}")
    endif()
  endif()
  # The machine layer compiled once, CUDA-free: a program of the inventory alone, with no CUDA include or runtime.
  package_flags(machine_flags gpusel_machine_compiled)
  if(machine_flags MATCHES "cuda")
    message(FATAL_ERROR "pkg-config gpusel_machine_compiled names CUDA: ${machine_flags}")
  endif()
  file(WRITE "${WORK_DIR}/machine.cpp"
    "#include <gpusel/machine/inventory.hpp>\n#include <iostream>\nint main() { std::cout << gpusel::query_inventory().gpus.size() << \" GPUs\\n\"; }\n")
  run(ignored ${CMAKE_CXX_COMPILER} -std=c++17 "${WORK_DIR}/machine.cpp" -o "${WORK_DIR}/machine" ${machine_flags})
  run(output "${WORK_DIR}/machine")
  message(STATUS "gpusel_machine_compiled: ${output}")
  file(RENAME "${WORK_DIR}/prefix" "${WORK_DIR}/moved-prefix")
  set(ENV{PKG_CONFIG_PATH} "${WORK_DIR}/moved-prefix/lib/pkgconfig")
  set(ENV{PKG_CONFIG_LIBDIR} "${WORK_DIR}/moved-prefix/lib/pkgconfig")
  package_flags(machine_flags gpusel_machine_compiled)
  run(ignored ${CMAKE_CXX_COMPILER} -std=c++17 "${WORK_DIR}/machine.cpp" -o "${WORK_DIR}/machine" ${machine_flags})
  run(output "${WORK_DIR}/machine")
  message(STATUS "gpusel_machine_compiled from the moved prefix: ${output}")
  return()
endif()
# `--static` cannot take the shared runtime's -lcudart away: the static runtime is its own package.
package_flags(static_flags gpusel_static --static)
if(NOT static_flags MATCHES "(^|;)-lcudart_static(;|$)" OR static_flags MATCHES "(^|;)-lcudart(;|$)")
  message(FATAL_ERROR "pkg-config --static gpusel_static should name -lcudart_static and not -lcudart: ${static_flags}")
endif()
if(READELF AND NM)
  package_flags(shared_flags gpusel)
  set(cxx ${CMAKE_CXX_COMPILER} -std=c++17)
  build_and_check(cxx_gpusel shared "${CONSUMER_SOURCE}" cxx shared_flags)
  build_and_check(cxx_gpusel_static static "${CONSUMER_SOURCE}" cxx static_flags)
endif()
if(NVCC)
  # nvcc links its own runtime (static unless -cudart shared), so with nvcc the
  # package is gpusel_headers, or gpusel with -cudart shared, or gpusel_static.
  set(nvcc ${NVCC} -std=c++17 -arch=sm_90 -ccbin ${CMAKE_CXX_COMPILER})
  package_flags(header_flags gpusel_headers)
  build_and_check(nvcc_gpusel_headers static "${CUDA_SOURCE}" nvcc header_flags)
  build_and_check(nvcc_gpusel_shared shared "${CUDA_SOURCE}" nvcc shared_flags -cudart shared)
  build_and_check(nvcc_gpusel_static static "${CUDA_SOURCE}" nvcc static_flags)
endif()
file(RENAME "${WORK_DIR}/prefix" "${WORK_DIR}/moved-prefix")
build_with_pkg_config("${WORK_DIR}/moved-prefix")
