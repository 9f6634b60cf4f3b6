// The definitions of gpusel's layers on the CUDA runtime, compiled once (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): the cuda layer's
// error paths (the messages that explain a failed CUDA call or device switch, and
// synchronize(device)), the data layer's engine (allocation, the copy engine, its
// options and caches, and Module's functions), and local_rank_device(), which
// joins the machine and the runtime. src/gpusel.cpp is this file; libgpusel.a
// holds it beside the machine layer's (gpusel/machine/implementation.hpp).
//
// In exactly one file of the program, before any other gpusel header, and only
// beside gpusel/machine/implementation.hpp: <gpusel/implementation.hpp> includes both.
// Layer: top (docs/layers.md).
#pragma once

#if defined(GPUSEL_API) && !defined(GPUSEL_COMPILE_ONCE)
#error \
    "gpusel/runtime_implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif
#ifndef GPUSEL_COMPILE_ONCE
#define GPUSEL_COMPILE_ONCE
#endif

#include "gpusel/cached_resources-inl.hpp"
#include "gpusel/copy_engine_options-inl.hpp"
#include "gpusel/current_device-inl.hpp"
#include "gpusel/detail/cuda/cuda_status-inl.hpp"
#include "gpusel/detail/cuda/device_count-inl.hpp"
#include "gpusel/detail/cuda/device_switch-inl.hpp"
#include "gpusel/detail/data/buffer/batched_copy-inl.hpp"
#include "gpusel/detail/data/buffer/dlpack_exchange-inl.hpp"
#include "gpusel/detail/data/buffer/untyped_buffer-inl.hpp"
#include "gpusel/detail/data/engine/copy_engine-inl.hpp"
#include "gpusel/detail/data/memory/device_pool-inl.hpp"
#include "gpusel/detail/data/memory/host_block_cache-inl.hpp"
#include "gpusel/detail/data/memory/host_prefault-inl.hpp"
#include "gpusel/detail/data/memory/memory-inl.hpp"
#include "gpusel/detail/data/memory/stream_uses-inl.hpp"
#include "gpusel/detail/data/memory/streaming_copy-inl.hpp"
#include "gpusel/launcher-inl.hpp"
#include "gpusel/module-inl.hpp"
