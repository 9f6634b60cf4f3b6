// The umbrella header: everything gpusel offers.
#pragma once

#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/runtime.hpp"
#include "gpusel/version.hpp"
// -- issue 3: visible_devices.hpp, inventory.hpp --
#include "gpusel/inventory.hpp"
#include "gpusel/visibility.hpp"
#include "gpusel/visible_devices.hpp"
// -- issue 4: guard.hpp --
#include "gpusel/guard.hpp"
// -- issue 5: stream.hpp, buffer.hpp, module.hpp --
#include "gpusel/default_device.hpp"
#include "gpusel/stream.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/module.hpp"
// -- issue 6: select.hpp, launcher.hpp --
#include "gpusel/launcher.hpp"
#include "gpusel/memory_size.hpp"
#include "gpusel/select.hpp"
