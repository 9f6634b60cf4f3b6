// The machine layer compiled once, CUDA-free (Note [Compile-once mode] in
// gpusel/detail/core/compile_once.hpp): the translation unit of
// libgpusel_machine.a, behind gpusel::machine_compiled, for programs that link no
// CUDA runtime, as the gpusel command does.
#include <gpusel/machine_implementation.hpp>
