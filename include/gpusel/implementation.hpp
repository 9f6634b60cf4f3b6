// Every definition of gpusel, compiled once (Note [Compile-once mode] in
// gpusel/detail/core/compile_once.hpp), for a program that builds gpusel itself
// rather than link gpusel::compiled (docs/compiled.md):
//
//   // gpusel_implementation.cpp, compiled with -DGPUSEL_COMPILE_ONCE like every other file
//   #include <gpusel/implementation.hpp>
//
// In exactly one file of the program, before any other gpusel header. A program
// that links no CUDA runtime includes <gpusel/machine/implementation.hpp> instead.
// Layer: top (docs/layers.md).
#pragma once

#if defined(GPUSEL_API) && !defined(GPUSEL_COMPILE_ONCE)
#error "gpusel/implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif

#include "gpusel/machine/implementation.hpp"
#include "gpusel/runtime_implementation.hpp"
