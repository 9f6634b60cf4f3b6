"""python -m gpusel --includes | --cmakedir: the paths for build lines, spelled as pybind11 spells them."""

import argparse
import sys

from . import get_cmake_dir, get_include


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m gpusel", description=__doc__)
    parser.add_argument("--includes", action="store_true", help="the compiler flag for gpusel's headers (-I...)")
    parser.add_argument("--cmakedir", action="store_true", help="the directory of gpuselConfig.cmake (gpusel_DIR)")
    arguments = parser.parse_args()
    if not (arguments.includes or arguments.cmakedir):
        parser.print_help()
        return 2
    if arguments.includes:
        print(f"-I{get_include()}")
    if arguments.cmakedir:
        print(get_cmake_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
