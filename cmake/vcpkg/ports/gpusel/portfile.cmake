# The vcpkg port of gpusel:
#   vcpkg install gpusel --overlay-ports=<gpusel checkout>/cmake/vcpkg/ports
#
# Note [Where the port's source comes from]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# This is an overlay port kept inside gpusel's own repository, so it builds the
# checkout it lives in (four directories up from this file): what you install
# is exactly what you have checked out. A port for a registry fetches a
# tagged release instead, replacing the SOURCE_PATH lines with
#   vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO <owner>/gpusel
#                     REF "v${VERSION}" SHA512 <the release archive's SHA512>)
# tests/packaging/vcpkg_port_check.cmake runs this file with plain CMake, the
# way vcpkg would, since CI machines have no vcpkg.
#
# vcpkg's binary cache keys a package on the port's own files (this portfile,
# vcpkg.json, usage) and its dependencies, not on the checkout it builds: after
# changing the checkout, install with --no-binarycaching (or bump
# "port-version" in vcpkg.json), or vcpkg restores the package it built before.
get_filename_component(SOURCE_PATH "${CURRENT_PORT_DIR}/../../../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/include/gpusel/gpusel.hpp")
  message(FATAL_ERROR "gpusel's overlay port expects to live in a gpusel checkout at cmake/vcpkg/ports/gpusel; "
                      "${SOURCE_PATH} is not one")
endif()

# Header-only: a debug build would install the same files a second time. The
# "compiled" feature's libraries are built release only too, as the CUDA
# runtime is: a debug program links them all the same.
set(VCPKG_BUILD_TYPE release)

# The package is the headers, the CMake config, the pkg-config files and the
# docs; the feature "tool" adds the gpusel command (gpusel[tool], as
# sqlite3[tool]), and "compiled" the compiled targets (gpusel::compiled and
# friends, docs/compiled.md: libgpusel.a and libgpusel_machine.a). Tests, examples and benchmarks are gpusel's own checks: they
# need GoogleTest and Google Benchmark, which a consumer has no reason to build.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS FEATURES tool GPUSEL_BUILD_TOOLS compiled GPUSEL_INSTALL_COMPILED)
vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DGPUSEL_INSTALL=ON
    "-DGPUSEL_INSTALL_DOCDIR=share/${PORT}/doc"
    -DGPUSEL_BUILD_TESTS=OFF
    -DGPUSEL_BUILD_EXAMPLES=OFF
    -DGPUSEL_BUILD_BENCHMARKS=OFF
)
vcpkg_cmake_install()
if("tool" IN_LIST FEATURES)
  vcpkg_copy_tools(TOOL_NAMES gpusel AUTO_CLEAN)  # vcpkg keeps programs in tools/<port>/, not bin/
endif()

# gpusel installs its config to share/gpusel already, where vcpkg wants it.
vcpkg_cmake_config_fixup(CONFIG_PATH share/gpusel)
vcpkg_fixup_pkgconfig()

file(INSTALL "${CURRENT_PORT_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
