// The one translation unit that defines the machine layer, in a compile-once
// program that links no CUDA runtime (Note [Compile-once mode] in
// gpusel/detail/core/compile_once.hpp), as the gpusel command does:
//
//   // gpusel_implementation.cpp, compiled with -DGPUSEL_COMPILE_ONCE like every other file
//   #include <gpusel/machine_implementation.hpp>
//
// Include it first, before any other gpusel header, in exactly one file of the
// program. It defines GPUSEL_IMPLEMENTATION and includes the machine layer, so
// that file compiles the inventory, its topology and CUDA's physical order,
// explain(), pick (with its criteria and connected-set search), leases, local
// ranks, the CUDA_VISIBLE_DEVICES parser and text escaping, once, for the whole
// program.
// Like them it includes no CUDA header. A program that uses the CUDA runtime
// includes <gpusel/implementation.hpp> instead, which defines every layer.
// Layer: machine (docs/layers.md).
#pragma once

#if defined(GPUSEL_API)
#error \
    "gpusel/machine_implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif

#define GPUSEL_IMPLEMENTATION

#include "gpusel/detail/machine/connected_sets.hpp"
#include "gpusel/detail/machine/nvml.hpp"
#include "gpusel/detail/machine/wait_line.hpp"
#include "gpusel/inventory.hpp"
#include "gpusel/lease.hpp"
#include "gpusel/lease_directory.hpp"
#include "gpusel/local_rank.hpp"
#include "gpusel/physical_order.hpp"
#include "gpusel/pick_criteria.hpp"
#include "gpusel/select.hpp"
#include "gpusel/text.hpp"
#include "gpusel/topology.hpp"
#include "gpusel/visibility.hpp"
#include "gpusel/visible_devices.hpp"
