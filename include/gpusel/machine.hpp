// The machine component's umbrella: every GPU this machine has and which this
// process sees (NVML, loaded with dlopen), picking free GPUs, leases, the wait
// line and local ranks, with no CUDA header and no CUDA runtime. It is what the
// gpusel command is built on; a program that links no CUDA runtime includes it
// and links gpusel::machine_compiled (or compiles the definitions once itself,
// gpusel/machine/implementation.hpp).
// Layer: machine (docs/layers.md).
#pragma once

#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/lease.hpp"
#include "gpusel/machine/lease_directory.hpp"
#include "gpusel/machine/local_rank.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/machine/pick_criteria.hpp"
#include "gpusel/machine/rank_gpu.hpp"
#include "gpusel/machine/slurm_numbering.hpp"
#include "gpusel/machine/topology.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/machine/wait_for_gpus.hpp"
