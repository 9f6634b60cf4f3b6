# Runs the vcpkg port (cmake/vcpkg/ports/gpusel/portfile.cmake) with plain
# CMake, the way vcpkg would, since CI machines have no vcpkg; then builds a
# consumer against what it installed.
#
#   cmake -DGPUSEL_SOURCE_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... [-DFEATURES=core;tool]
#         -DCMAKE_CXX_COMPILER=... -DCMAKE_GENERATOR=... -P vcpkg_port_check.cmake
#
# The vcpkg helpers the portfile calls are defined below with the steps vcpkg
# takes for them (scripts/cmake and ports/vcpkg-cmake*/ in microsoft/vcpkg):
# the same cache variables on configure, the "install" target, and the checks
# its post-build lint would make. The portfile itself runs unchanged, so its
# options and steps are what is tested.
cmake_minimum_required(VERSION 3.21)

foreach(required GPUSEL_SOURCE_DIR CONSUMER_SOURCE_DIR WORK_DIR CMAKE_CXX_COMPILER CMAKE_GENERATOR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "vcpkg_port_check.cmake: pass -D${required}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")

# What vcpkg sets before it includes a portfile.
if(NOT DEFINED FEATURES)
  set(FEATURES core)
endif()
set(PORT gpusel)
set(TARGET_TRIPLET x64-linux)
set(VCPKG_TARGET_TRIPLET ${TARGET_TRIPLET})
set(CURRENT_PORT_DIR "${GPUSEL_SOURCE_DIR}/cmake/vcpkg/ports/gpusel")
set(CURRENT_BUILDTREES_DIR "${WORK_DIR}/buildtrees/${PORT}")
set(CURRENT_PACKAGES_DIR "${WORK_DIR}/packages/${PORT}_${TARGET_TRIPLET}")
file(READ "${CURRENT_PORT_DIR}/vcpkg.json" manifest)
string(JSON VERSION GET "${manifest}" version)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${output}")
  endif()
  set(run_output "${output}" PARENT_SCOPE)
endfunction()

function(port_error message)
  message(FATAL_ERROR "the vcpkg port: ${message}")
endfunction()

# vcpkg_cmake_configure: one build directory per configuration; with
# VCPKG_BUILD_TYPE release only the release one. These are the cache
# variables vcpkg passes to every CMake port that matter off Windows.
function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "SOURCE_PATH" "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG;MAYBE_UNUSED_VARIABLES")
  if(NOT VCPKG_BUILD_TYPE STREQUAL "release")
    port_error("a header-only port builds release only: set(VCPKG_BUILD_TYPE release) before vcpkg_cmake_configure")
  endif()
  set(build_dir "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel")
  message(STATUS "vcpkg_cmake_configure: ${arg_OPTIONS} ${arg_OPTIONS_RELEASE}")
  run(${CMAKE_COMMAND} -S "${arg_SOURCE_PATH}" -B "${build_dir}" -G "${CMAKE_GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}"
      -DCMAKE_BUILD_TYPE=Release
      "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}"
      -DFETCHCONTENT_FULLY_DISCONNECTED=ON
      -DCMAKE_EXPORT_NO_PACKAGE_REGISTRY=ON
      -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
      -DCMAKE_INSTALL_LIBDIR:STRING=lib
      -DCMAKE_INSTALL_BINDIR:STRING=bin
      -DBUILD_SHARED_LIBS=OFF
      "-DVCPKG_TARGET_TRIPLET=${TARGET_TRIPLET}"
      ${arg_OPTIONS} ${arg_OPTIONS_RELEASE})
  # vcpkg warns about the port's options that the project never read: a
  # misspelt or retired option silently does nothing. CMake lists them after
  # "Manually-specified variables were not used by the project:".
  string(REGEX MATCH "Manually-specified variables were not used by the project:[\r\n]+([ \t]+[A-Za-z0-9_]+[\r\n]+)+"
         unused "${run_output}")
  foreach(option IN LISTS arg_OPTIONS arg_OPTIONS_RELEASE)
    if(option MATCHES "^-D([A-Za-z0-9_]+)")
      set(name ${CMAKE_MATCH_1})
      if(NOT name IN_LIST arg_MAYBE_UNUSED_VARIABLES AND unused MATCHES "[ \t]${name}[\r\n]")
        port_error("the option ${name} was not used by gpusel: misspelt, or no longer exists")
      endif()
    endif()
  endforeach()
  set(GPUSEL_PORT_BUILD_DIR "${build_dir}" PARENT_SCOPE)
endfunction()

# vcpkg_cmake_install: builds the "install" target of each configuration.
function(vcpkg_cmake_install)
  if(NOT GPUSEL_PORT_BUILD_DIR)
    port_error("vcpkg_cmake_install before vcpkg_cmake_configure")
  endif()
  run(${CMAKE_COMMAND} --build "${GPUSEL_PORT_BUILD_DIR}" --target install)
endfunction()

# vcpkg_cmake_config_fixup: moves CONFIG_PATH to share/<port> and rewrites
# absolute paths. gpusel's config is already there and must need no rewriting.
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "CONFIG_PATH;PACKAGE_NAME" "")
  if(NOT arg_CONFIG_PATH STREQUAL "share/${PORT}")
    port_error("CONFIG_PATH is ${arg_CONFIG_PATH}; gpusel installs its config to share/${PORT}")
  endif()
  foreach(file gpuselConfig.cmake gpuselConfigVersion.cmake gpuselTargets.cmake)
    if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}/${file}")
      port_error("${arg_CONFIG_PATH}/${file} was not installed")
    endif()
  endforeach()
  file(GLOB config_files "${CURRENT_PACKAGES_DIR}/${arg_CONFIG_PATH}/*.cmake")
  foreach(file IN LISTS config_files)
    file(READ "${file}" text)
    string(FIND "${text}" "${CURRENT_PACKAGES_DIR}" where)
    if(NOT where EQUAL -1)
      port_error("${file} names the staging directory: the installed config is not relocatable")
    endif()
  endforeach()
endfunction()

# vcpkg_fixup_pkgconfig: makes each .pc relocatable and validates it.
function(vcpkg_fixup_pkgconfig)
  find_program(pkg_config NAMES pkgconf pkg-config)
  file(GLOB pc_files "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/*.pc" "${CURRENT_PACKAGES_DIR}/share/pkgconfig/*.pc")
  if(NOT pc_files)
    port_error("vcpkg_fixup_pkgconfig found no .pc file in lib/pkgconfig or share/pkgconfig")
  endif()
  foreach(file IN LISTS pc_files)
    file(READ "${file}" text)
    if(NOT text MATCHES "(^|\n)prefix=\\\${pcfiledir}/")
      port_error("${file}: prefix is not relative to \${pcfiledir}, so the package cannot be moved")
    endif()
    if(pkg_config)
      run(${pkg_config} --validate "${file}")
    endif()
  endforeach()
endfunction()

# vcpkg_install_copyright: the licence, as share/<port>/copyright.
function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "FILE_LIST")
  set(text "")
  foreach(file IN LISTS arg_FILE_LIST)
    file(READ "${file}" content)
    string(APPEND text "${content}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

# vcpkg_copy_tools: moves programs from bin/ to tools/<port>/; AUTO_CLEAN
# then removes bin/ when nothing else is left in it.
function(vcpkg_copy_tools)
  cmake_parse_arguments(PARSE_ARGV 0 arg "AUTO_CLEAN" "SEARCH_DIR;DESTINATION" "TOOL_NAMES")
  if(NOT arg_SEARCH_DIR)
    set(arg_SEARCH_DIR "${CURRENT_PACKAGES_DIR}/bin")
  endif()
  if(NOT arg_DESTINATION)
    set(arg_DESTINATION "${CURRENT_PACKAGES_DIR}/tools/${PORT}")
  endif()
  file(MAKE_DIRECTORY "${arg_DESTINATION}")
  foreach(tool IN LISTS arg_TOOL_NAMES)
    if(NOT EXISTS "${arg_SEARCH_DIR}/${tool}")
      port_error("vcpkg_copy_tools: ${arg_SEARCH_DIR}/${tool} was not installed")
    endif()
    file(RENAME "${arg_SEARCH_DIR}/${tool}" "${arg_DESTINATION}/${tool}")
  endforeach()
  if(arg_AUTO_CLEAN)
    file(GLOB left "${CURRENT_PACKAGES_DIR}/bin/*")
    if(NOT left)
      file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/bin")
    endif()
  endif()
endfunction()

# vcpkg_check_features: FEATURES <feature> <option> ... gives -D<option>=ON for
# each feature asked for and OFF for the others.
function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "OUT_FEATURE_OPTIONS" "FEATURES")
  set(options)
  list(LENGTH arg_FEATURES length)
  math(EXPR last "${length} - 1")
  foreach(index RANGE 0 ${last} 2)
    list(GET arg_FEATURES ${index} feature)
    math(EXPR option_index "${index} + 1")
    list(GET arg_FEATURES ${option_index} option)
    if(feature IN_LIST FEATURES)
      list(APPEND options "-D${option}=ON")
    else()
      list(APPEND options "-D${option}=OFF")
    endif()
  endforeach()
  set(${arg_OUT_FEATURE_OPTIONS} "${options}" PARENT_SCOPE)
endfunction()

function(vcpkg_from_github)
  port_error("the overlay port builds its own checkout (Note [Where the port's source comes from])")
endfunction()

include("${CURRENT_PORT_DIR}/portfile.cmake")

# What vcpkg's post-build lint would reject.
foreach(file share/${PORT}/copyright share/${PORT}/usage include/gpusel/gpusel.hpp)
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/${file}")
    port_error("${file} is missing from the package")
  endif()
endforeach()
if(EXISTS "${CURRENT_PACKAGES_DIR}/debug")
  port_error("a release-only port installed a debug/ tree")
endif()
file(GLOB_RECURSE installed RELATIVE "${CURRENT_PACKAGES_DIR}" "${CURRENT_PACKAGES_DIR}/*")
foreach(file IN LISTS installed)
  if(NOT file MATCHES "^(include/gpusel/|share/${PORT}/|lib/pkgconfig/|tools/${PORT}/)" AND
     NOT ("compiled" IN_LIST FEATURES AND file MATCHES "^lib/libgpusel(_machine)?\\.a$"))
    port_error("${file} is outside the places a vcpkg package installs to")
  endif()
  if(file MATCHES "^include/" AND NOT file MATCHES "\\.hpp$")
    port_error("${file} is not a header: only headers belong in include/")
  endif()
endforeach()
message(STATUS "the port installed ${CURRENT_PACKAGES_DIR}:\n   ${installed}")
if("compiled" IN_LIST FEATURES)
  if(NOT EXISTS "${CURRENT_PACKAGES_DIR}/lib/libgpusel.a" OR NOT EXISTS "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/gpusel_compiled.pc")
    port_error("the \"compiled\" feature did not install lib/libgpusel.a and lib/pkgconfig/gpusel_compiled.pc")
  endif()
  set(consumer_compiled ON)
elseif(EXISTS "${CURRENT_PACKAGES_DIR}/lib/libgpusel.a")
  port_error("lib/libgpusel.a was installed without the \"compiled\" feature")
else()
  set(consumer_compiled OFF)
endif()
if("tool" IN_LIST FEATURES)
  run("${CURRENT_PACKAGES_DIR}/tools/${PORT}/gpusel" --help)
elseif(EXISTS "${CURRENT_PACKAGES_DIR}/tools")
  port_error("the gpusel command was installed without the \"tool\" feature")
endif()

# A consumer, with only the package on its prefix path and no downloads.
set(consumer_build "${WORK_DIR}/consumer-build")
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${CMAKE_GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=${CURRENT_PACKAGES_DIR}" -DGPUSEL_CONSUMER_MODE=find_package
    -DGPUSEL_CONSUMER_COMPILED=${consumer_compiled}
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
file(STRINGS "${consumer_build}/CMakeCache.txt" found_at REGEX "^gpusel_DIR:")
if(NOT found_at STREQUAL "gpusel_DIR:PATH=${CURRENT_PACKAGES_DIR}/share/gpusel")
  message(FATAL_ERROR "the consumer found gpusel elsewhere than in the vcpkg package: ${found_at}")
endif()
run(${CMAKE_COMMAND} --build "${consumer_build}")
execute_process(COMMAND "${consumer_build}/consumer" RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the consumer built against the vcpkg package failed (${result}):\n${output}")
endif()
message(STATUS "${output}")
if(consumer_compiled)
  run("${consumer_build}/consumer_compiled")
  if(NOT run_output MATCHES "compiled once")
    message(FATAL_ERROR "consumer_compiled is not in compile-once mode: ${run_output}")
  endif()
  run("${consumer_build}/consumer_mixed")
endif()
