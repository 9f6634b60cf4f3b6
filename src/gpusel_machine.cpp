// The machine layer compiled once, CUDA-free (Note [Compile-once mode] in
// gpusel/detail/core/compile_once.hpp): libgpusel_machine.a, behind
// gpusel::machine_compiled, for programs that link no CUDA runtime, as the gpusel
// command does; libgpusel.a holds the same object.
#include <gpusel/machine/implementation.hpp>
