// The one translation unit of a compile-once program that defines the machine
// layer (Note [Compile-once mode] in gpusel/detail/compile_once.hpp):
//
//   // gpusel_implementation.cpp, compiled with -DGPUSEL_COMPILE_ONCE like every other file
//   #include <gpusel/implementation.hpp>
//
// Include it first, before any other gpusel header, in exactly one file of the
// program. It defines GPUSEL_IMPLEMENTATION and includes the machine layer, so
// that file compiles the inventory, explain(), pick, leases, local ranks, the
// CUDA_VISIBLE_DEVICES parser and text escaping, once, for the whole program.
// Like them it includes no CUDA header, so a program that links no CUDA
// runtime (the gpusel command) can use it.
#pragma once

#if defined(GPUSEL_API)
#error "gpusel/implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif

#define GPUSEL_IMPLEMENTATION

#include "gpusel/detail/nvml.hpp"
#include "gpusel/inventory.hpp"
#include "gpusel/lease.hpp"
#include "gpusel/local_rank.hpp"
#include "gpusel/select.hpp"
#include "gpusel/text.hpp"
#include "gpusel/visibility.hpp"
#include "gpusel/visible_devices.hpp"
