# Conan's test of the package: a project that finds gpusel with find_package, builds against
# gpusel::gpusel and runs; on a machine without a GPU it runs on the CPU fallback.
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class GpuselTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeToolchain", "VirtualRunEnv"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        # With the package's compiled option, the test links gpusel::compiled.
        cmake.configure(variables={"GPUSEL_TEST_COMPILED": bool(self.dependencies["gpusel"].options.compiled)})
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
