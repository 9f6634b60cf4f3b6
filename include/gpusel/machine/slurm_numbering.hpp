// Slurm's numbers of a node's GPUs, and the physical GPUs they name: what an integer in the
// CUDA_VISIBLE_DEVICES that Slurm wrote means, read without starting CUDA.
//
//   const gpusel::DeviceMap map = gpusel::visible_devices();   // gpusel/machine/visibility.hpp
//   const gpusel::SlurmList slurm = gpusel::slurm_list(map);
//   if (!slurm.agrees()) std::cerr << slurm.problem << "\n";       // CUDA would read other GPUs
//   const gpusel::DeviceMap as_slurm = gpusel::in_slurm_numbers(map, slurm);  // Slurm's GPUs, by UUID
//
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/local_rank.hpp"

namespace gpusel {

// gpusel/machine/visibility.hpp, which its definitions include: explain() (visibility.hpp's) says
// what this header finds, so the two headers may not include each other's declarations.
struct DeviceMap;

// Note [Slurm's GPU numbers]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Slurm writes its own numbers of the node's GPUs into a step's CUDA_VISIBLE_DEVICES (the
// same in GPU_DEVICE_ORDINAL and SLURM_STEP_GPUS) and never sets CUDA_DEVICE_ORDER. With
// gres.conf's File= lines (Slurm 22.05, tried here) its number N is the N-th device file of
// the node's gpu lines in the order written, ranges expanded, typed lines grouped in the order
// of the node's Gres= in slurm.conf: with File=/dev/nvidia3 first,
// Slurm's 0 is /dev/nvidia3, whatever the PCI order. A device file's N is the GPU's minor
// number (nvmlDeviceGetMinorNumber), which names the GPU. With AutoDetect=nvml, or no File=,
// Slurm's documentation says it numbers the GPUs by PCI bus ID (not tried here: Debian's Slurm
// ships no gpu_nvml plugin). CUDA reads the same integers in CUDA_DEVICE_ORDER's order,
// FASTEST_FIRST unless set: on a node of GPUs of different models that is another order, and
// with File= lines out of PCI order PCI_BUS_ID is too. Where the two readings differ, or
// cannot be known to agree, the library refuses (it never changes the process's environment
// behind the caller's back: other libraries read it, and setenv is not thread-safe) and says
// what to set; `gpusel run`, which sets its command's environment, resolves Slurm's numbers
// (in_slurm_numbers) and gives the command Slurm's GPUs. Slurm wrote CUDA_VISIBLE_DEVICES
// where it equals GPU_DEVICE_ORDINAL, SLURM_STEP_GPUS or SLURM_JOB_GPUS in a Slurm job.
// Under ConstrainDevices (cgroups; not tried here) Slurm's numbers count from 0 inside the task,
// and CUDA sees only the task's GPUs: gpusel then leaves the list to CUDA.

// How Slurm numbers this node's GPUs.
struct SlurmNumbering {
  // Slurm's GPU N is device_files[N] ("/dev/nvidia3"); empty where it numbers by PCI bus ID.
  std::vector<std::string> device_files;
  // How, in words: "by gres.conf's File= lines, in the order written (/etc/slurm/gres.conf)".
  std::string rule;
  // Where cgroup.conf says ConstrainDevices=yes, Slurm's numbers count from 0 inside the task, which
  // CUDA reads (not tried here): gpusel then reads no list in Slurm's numbers.
  bool task_local = false;
};

// The numbering gres.conf's `text` gives node `node`'s GPUs, `path` naming the file in `rule`:
// typed lines grouped as the node's Gres= in slurm.conf lists `node_types` ("a100", "h100"). Pure.
[[nodiscard]] GPUSEL_API SlurmNumbering parse_gres_conf(std::string_view text, std::string_view node,
                                                        std::string_view path,
                                                        const std::vector<std::string>& node_types = {});

// This node's numbering: gres.conf beside SLURM_CONF (else /etc/slurm/gres.conf), the node's
// Gres= in slurm.conf and ConstrainDevices in cgroup.conf, for the node SLURMD_NODENAME names (else the host's name),
// read through `read` and the file system.
[[nodiscard]] GPUSEL_API SlurmNumbering slurm_numbering(const ReadVariable& read);

// The CUDA_VISIBLE_DEVICES of a map read in Slurm's numbers (Note [Slurm's GPU numbers]).
struct SlurmList {
  bool from_slurm = false;    // Slurm wrote it; nothing below is set otherwise
  std::string value;          // CUDA_VISIBLE_DEVICES
  std::string rule;           // SlurmNumbering::rule
  std::vector<int> physical;  // the physical GPU (CUDA's physical index) of each number listed; -1: none known
  // A line for each number: "Slurm's 0 (/dev/nvidia0) is GPU-... (NVIDIA A100, 00000000:17:00.0)", escaped.
  std::string described;
  // Why CUDA's reading of the list is not Slurm's, or may not be, and what to set; "" when it is.
  std::string problem;
  [[nodiscard]] bool agrees() const noexcept { return problem.empty(); }
  // Throws Error("<who>: <problem>") unless CUDA reads the list as Slurm's GPUs.
  GPUSEL_API void require(std::string_view who) const;
};

// `map`'s CUDA_VISIBLE_DEVICES in Slurm's numbers, judged by the variables `read` gives and
// `numbering`. Pure.
[[nodiscard]] GPUSEL_API SlurmList find_slurm_list(const DeviceMap& map, const ReadVariable& read,
                                                   const SlurmNumbering& numbering);

// The same from this process's environment and this node's gres.conf.
[[nodiscard]] GPUSEL_API SlurmList slurm_list(const DeviceMap& map);

// `map` with Slurm's list as its visible GPUs, named by UUID, in the list's order; `map` itself
// where the list is not Slurm's or CUDA reads it alike. Throws Error when a number names no GPU
// NVML shows.
[[nodiscard]] GPUSEL_API DeviceMap in_slurm_numbers(const DeviceMap& map, const SlurmList& list);

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/slurm_numbering-inl.hpp"
#endif
