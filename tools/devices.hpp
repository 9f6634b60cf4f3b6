// Reading the GPUs through NVML with a time limit (devices.cpp).
#pragma once

#include <gpusel/machine/inventory.hpp>
#include <gpusel/machine/local_rank.hpp>
#include <gpusel/machine/visibility.hpp>

#include <chrono>
#include <optional>
#include <string_view>

#include "arguments.hpp"

namespace gpusel_tool {

// Note [A hanging NVML]
// ~~~~~~~~~~~~~~~~~~~~~
// A wedged driver can leave an NVML call (nvmlInit, the device count, a process
// query) unanswered for good, and list, pick and run with it. The command reads
// the GPUs on a thread of its own and waits at most GPUSEL_NVML_TIMEOUT (30 s by
// default: nvmlInit on a machine of many GPUs without the persistence daemon
// takes seconds, never half a minute), then says so and exits 4 (run: 125, its
// own failures' status). The call cannot be cancelled, so the thread is left
// behind and the command ends with _Exit (g_nvml_hung): no destructor of a static
// object runs beside a thread still inside the driver's library. The library's
// own query_inventory has no timeout: a thread it could not end is the caller's
// decision.
constexpr std::chrono::milliseconds kDefaultNvmlTimeout{30000};
extern bool g_nvml_hung;  // a thread is left inside NVML: main ends with _Exit

// visible_devices(options), or nullopt when NVML did not answer within `timeout` (Note [A hanging NVML]).
std::optional<gpusel::DeviceMap> read_devices(const gpusel::InventoryOptions& options,
                                              std::chrono::milliseconds timeout);

// Says that NVML did not answer (on stderr, and as JSON for --json); returns `status`.
int report_nvml_hung(const Arguments& arguments, int status);

// What list, pick and run read: usage, and the N(N-1)/2 links between GPUs only when asked for.
gpusel::InventoryOptions usage(bool links);

// The GPUs this process may choose among, of `map`'s visible ones (Note [The GPUs this process may choose among]).
gpusel::Allotment allotment_of(const gpusel::DeviceMap& map);

// What a command chooses among: a rank's own GPU (run --local-rank), the visible GPUs, or,
// with --whole-machine, every GPU of the machine.
enum class Choosing { rank_gpu, within_visible, whole_machine };

// Choosing::whole_machine with --whole-machine, else within_visible.
Choosing choosing_of(const Arguments& arguments);

// Throws Error when this process may choose no GPU of `map` (Note [The GPUs this
// process may choose among]); `who` ("pick", "run") begins the message. Choosing among the
// whole machine is not refused for a process in no step of its job, and is offered to one.
void require_allotment(const gpusel::DeviceMap& map, std::string_view who, Choosing choosing);

// `map` with the CUDA_VISIBLE_DEVICES Slurm wrote read in Slurm's numbers (Note [Slurm's GPU
// numbers] in gpusel/machine/slurm_numbering.hpp), so that the command is given Slurm's GPUs;
// says so on stderr, once, where CUDA would have read other GPUs. Throws Error where a number
// names no GPU NVML shows.
gpusel::DeviceMap in_slurm_numbers(const gpusel::DeviceMap& map);

}  // namespace gpusel_tool
