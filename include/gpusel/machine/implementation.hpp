// The definitions of gpusel's core and machine layers, compiled once (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): the inventory, its
// topology and CUDA's physical order, explain(), pick (with its criteria and
// connected-set search), leases and the wait line, local ranks, the
// CUDA_VISIBLE_DEVICES parser and text escaping. src/gpusel_machine.cpp is this
// file; it goes into libgpusel_machine.a (gpusel::machine_compiled, for programs
// that link no CUDA runtime, as the gpusel command) and into libgpusel.a.
//
//   // gpusel_machine.cpp, compiled with -DGPUSEL_COMPILE_ONCE like every other file
//   #include <gpusel/machine/implementation.hpp>
//
// In exactly one file of the program, before any other gpusel header. Like the
// headers it defines, it includes no CUDA header.
#pragma once

#if defined(GPUSEL_API) && !defined(GPUSEL_COMPILE_ONCE)
#error \
    "gpusel/machine/implementation.hpp must come before every other gpusel header of its file (Note [Compile-once mode])"
#endif
#ifndef GPUSEL_COMPILE_ONCE
#define GPUSEL_COMPILE_ONCE
#endif

#include "gpusel/detail/core/pci_address-inl.hpp"
#include "gpusel/detail/core/visible_tokens-inl.hpp"
#include "gpusel/machine/detail/leases/job_lease-inl.hpp"
#include "gpusel/machine/detail/leases/lease_states-inl.hpp"
#include "gpusel/machine/detail/leases/lock_files-inl.hpp"
#include "gpusel/machine/detail/picking/candidate_checks-inl.hpp"
#include "gpusel/machine/detail/picking/choosing-inl.hpp"
#include "gpusel/machine/detail/picking/connected_sets-inl.hpp"
#include "gpusel/machine/detail/picking/criteria_checks-inl.hpp"
#include "gpusel/machine/detail/picking/wait_line-inl.hpp"
#include "gpusel/machine/detail/system/explain_parts-inl.hpp"
#include "gpusel/machine/detail/system/nvml-inl.hpp"
#include "gpusel/machine/detail/system/nvml_topology-inl.hpp"
#include "gpusel/machine/detail/system/process_files-inl.hpp"
#include "gpusel/machine/detail/system/system_text-inl.hpp"
#include "gpusel/machine/inventory-inl.hpp"
#include "gpusel/machine/lease-inl.hpp"
#include "gpusel/machine/lease_directory-inl.hpp"
#include "gpusel/machine/local_rank-inl.hpp"
#include "gpusel/machine/physical_order-inl.hpp"
#include "gpusel/machine/pick-inl.hpp"
#include "gpusel/machine/pick_criteria-inl.hpp"
#include "gpusel/machine/rank_gpu-inl.hpp"
#include "gpusel/machine/slurm_numbering-inl.hpp"
#include "gpusel/machine/topology-inl.hpp"
#include "gpusel/machine/visibility-inl.hpp"
#include "gpusel/machine/wait_for_gpus-inl.hpp"
#include "gpusel/text-inl.hpp"
#include "gpusel/visible_devices-inl.hpp"
