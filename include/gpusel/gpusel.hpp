// The umbrella header: everything gpusel offers (docs/layers.md shows which
// header to include for less; docs/reference.md lists every name).
// Layer: top (docs/layers.md).
#pragma once

#include "gpusel/current_device.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/runtime.hpp"
#include "gpusel/version.hpp"
#include "gpusel/visible_devices.hpp"
// Scoped devices
#include "gpusel/guard.hpp"
// Data that knows its device
#include "gpusel/buffer.hpp"
#include "gpusel/default_device.hpp"
#include "gpusel/module.hpp"
#include "gpusel/stream.hpp"
// The machine: which GPUs this process sees and why, choosing free GPUs, leases,
// one GPU per rank (gpusel/machine.hpp, CUDA-free)
#include "gpusel/launcher.hpp"
#include "gpusel/machine.hpp"
