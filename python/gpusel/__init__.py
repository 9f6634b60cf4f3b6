"""Where pip put gpusel's headers and CMake package, for building a C++ or CUDA extension against them.

    include_dirs=[gpusel.get_include()]                 # setuptools, torch.utils.cpp_extension
    cmake -Dgpusel_DIR="$(python -m gpusel --cmakedir)"  # find_package(gpusel CONFIG)

The gpusel command itself is installed beside python (the environment's scripts).
"""

from pathlib import Path

__all__ = ["get_include", "get_cmake_dir"]

_HERE = Path(__file__).resolve().parent


def get_include() -> str:
    """The directory that holds gpusel/*.hpp: the include path of a program that uses gpusel."""
    return str(_HERE / "include")


def get_cmake_dir() -> str:
    """The directory of gpuselConfig.cmake: gpusel_DIR, or an entry of CMAKE_PREFIX_PATH."""
    return str(_HERE / "share" / "gpusel")
