// The one translation unit of a compile-once program that defines gpusel
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp):
//
//   // gpusel_implementation.cpp, compiled with -DGPUSEL_COMPILE_ONCE like every other file
//   #include <gpusel/implementation.hpp>
//
// Include it first, before any other gpusel header, in exactly one file of the
// program. It defines GPUSEL_IMPLEMENTATION and includes every header whose
// functions the mode compiles once: the machine layer (inventory, topology,
// explain(), pick, leases, local ranks; <gpusel/machine_implementation.hpp>,
// which a program without the CUDA runtime includes instead), the cuda layer's error
// paths (the messages that explain a failed CUDA call or device switch, and
// synchronize(device)), and the data layer's engine (allocation, the copy
// engine, its options and caches, and Module's functions), and
// local_rank_device() (launcher.hpp), which joins the two.
// Layer: top (docs/layers.md).
#pragma once

#if defined(GPUSEL_API)
#error "gpusel/implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif

#include "gpusel/machine_implementation.hpp"
// The cuda layer's error paths.
#include "gpusel/current_device.hpp"
#include "gpusel/detail/cuda/cuda_status.hpp"
#include "gpusel/detail/cuda/device_switch.hpp"
// The data layer's engine.

#include "gpusel/cached_resources.hpp"
#include "gpusel/copy_engine_options.hpp"
#include "gpusel/detail/data/batched_copy.hpp"
#include "gpusel/detail/data/copy_engine.hpp"
#include "gpusel/detail/data/device_pool.hpp"
#include "gpusel/detail/data/host_block_cache.hpp"
#include "gpusel/detail/data/host_prefault.hpp"
#include "gpusel/detail/data/memory.hpp"
#include "gpusel/detail/data/stream_uses.hpp"
#include "gpusel/detail/data/streaming_copy.hpp"
#include "gpusel/detail/data/untyped_buffer.hpp"
#include "gpusel/module.hpp"
// The top layer's start-up: local_rank_device().
#include "gpusel/launcher.hpp"
