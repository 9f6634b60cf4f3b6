// gpusel compiled once (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp):
// the translation unit of libgpusel.a, behind the CMake targets gpusel::compiled,
// gpusel::compiled_static and gpusel::compiled_no_runtime and the pkg-config
// package gpusel_compiled. It defines every function the mode compiles once.
#include <gpusel/implementation.hpp>
