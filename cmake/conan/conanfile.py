# The Conan 2 recipe of gpusel:
#   conan create cmake/conan                           (from a gpusel checkout; works offline: gpusel requires no package)
#   conan create cmake/conan -o "gpusel/*:compiled=True"   (with gpusel compiled once: gpusel::compiled and friends)
#
# Like the vcpkg overlay port (cmake/vcpkg/ports/gpusel), this recipe lives in
# gpusel's own repository and packages the checkout it lives in, two directories
# up. It installs with gpusel's own CMake install, so the package holds what
# `cmake --install` gives: the headers, gpuselConfig.cmake with the targets
# gpusel::gpusel, gpusel::gpusel_static and gpusel::headers, the pkg-config
# files and the docs; with the option compiled, also libgpusel.a and
# libgpusel_machine.a behind gpusel::compiled, gpusel::compiled_static,
# gpusel::compiled_no_runtime and gpusel::machine_compiled (docs/compiled.md). Consumers find it with find_package(gpusel CONFIG): the
# package's own config, not one CMakeDeps writes, so the targets link the CUDA
# runtime exactly as they do everywhere else (the CUDA Toolkit is found on the
# consumer's machine; Conan does not provide CUDA).
import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load


class GpuselConan(ConanFile):
    name = "gpusel"
    description = ("Choose your GPU and move your data, PyTorch-style, in C++: Device values, device guards, "
                   "CUDA_VISIBLE_DEVICES explained, Buffer and Module transfers")
    license = "MIT"
    topics = ("cuda", "gpu", "cuda-visible-devices", "nvml", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    # compiled: the package also holds gpusel compiled once, for one compiler and build type.
    options = {"compiled": [True, False]}
    default_options = {"compiled": False}
    no_copy_source = True

    def _source_root(self):
        return os.path.join(self.recipe_folder, "..", "..")

    def set_version(self):
        header = load(self, os.path.join(self._source_root(), "include", "gpusel", "version.hpp"))
        self.version = re.search(r'#define GPUSEL_VERSION_STRING "([^"]+)"', header).group(1)

    def export_sources(self):
        root = self._source_root()
        for pattern in ("CMakeLists.txt", "LICENSE", "README.md", "CHANGELOG.md", "include/*", "src/*", "cmake/*.in",
                        "cmake/*.cmake", "docs/*.md", "examples/machines/*.machine"):
            copy(self, pattern, root, self.export_sources_folder)

    def validate(self):
        if self.settings.os != "Linux":
            from conan.errors import ConanInvalidConfiguration
            raise ConanInvalidConfiguration("gpusel supports Linux only")

    def configure(self):
        if self.options.compiled:
            self.package_type = "static-library"

    def layout(self):
        cmake_layout(self, src_folder=".")

    def generate(self):
        toolchain = CMakeToolchain(self)
        for option in ("GPUSEL_BUILD_TESTS", "GPUSEL_BUILD_EXAMPLES", "GPUSEL_BUILD_BENCHMARKS", "GPUSEL_BUILD_TOOLS"):
            toolchain.cache_variables[option] = False
        toolchain.cache_variables["GPUSEL_INSTALL"] = True
        # Header-only (the default), gpusel's compiled libraries are left out, so the package stays one for every
        # compiler and build type (package_id below).
        toolchain.cache_variables["GPUSEL_INSTALL_COMPILED"] = bool(self.options.compiled)
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        if self.options.compiled:
            cmake.build()

    def package(self):
        CMake(self).install()

    def package_id(self):
        if not self.info.options.compiled:
            self.info.clear()  # headers: one package for every compiler and build type

    def package_info(self):
        # find_package(gpusel CONFIG) finds share/gpusel/gpuselConfig.cmake below the package root.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = ["."]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = ["lib"] if self.options.compiled else []
        self.cpp_info.set_property("pkg_config_name", "none")  # the package installs its own gpusel.pc
