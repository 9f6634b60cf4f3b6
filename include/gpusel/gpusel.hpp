// The umbrella header: everything gpusel offers.
#pragma once

#include "gpusel/device.hpp"
#include "gpusel/error.hpp"
#include "gpusel/runtime.hpp"
#include "gpusel/version.hpp"
