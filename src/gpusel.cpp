// gpusel compiled once (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp):
// the layers on the CUDA runtime. libgpusel.a, behind the CMake targets gpusel::compiled,
// gpusel::compiled_static and gpusel::compiled_no_runtime and the pkg-config package
// gpusel_compiled, holds this file's object and src/gpusel_machine.cpp's.
#include <gpusel/runtime_implementation.hpp>
