// The umbrella header: everything gpusel offers (docs/layers.md shows which
// header to include for less; docs/reference.md lists every name).
// Layer: top (docs/layers.md).
#pragma once

#include "gpusel/current_device.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/runtime.hpp"
#include "gpusel/version.hpp"
// Which GPUs this process sees, and why
#include "gpusel/inventory.hpp"
#include "gpusel/physical_order.hpp"
#include "gpusel/topology.hpp"
#include "gpusel/visibility.hpp"
#include "gpusel/visible_devices.hpp"
// Scoped devices
#include "gpusel/guard.hpp"
// Data that knows its device
#include "gpusel/buffer.hpp"
#include "gpusel/default_device.hpp"
#include "gpusel/module.hpp"
#include "gpusel/stream.hpp"
// Choosing GPUs, and one per rank
#include "gpusel/launcher.hpp"
#include "gpusel/local_rank.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/pick_criteria.hpp"
#include "gpusel/select.hpp"
#include "gpusel/wait_for_gpus.hpp"
