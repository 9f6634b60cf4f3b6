// help and version: the usage text (kUsage), which documents every option and exit status.
#include <gpusel/version.hpp>

#include <iostream>

#include "commands.hpp"

namespace gpusel_tool {
namespace {

constexpr const char* kUsage = R"(usage: gpusel <command> [options]

Commands (none of them starts CUDA or creates a context on any GPU):
  list      the machine's GPUs: this process's cuda:N, CUDA's physical index,
            nvidia-smi's number, name, UUID, PCI bus id, memory used/total,
            utilization, NUMA node and CPUs (where NVML tells them) and compute
            processes; a GPU in MIG mode, its MIG instances under it
  explain   how CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER map cuda:N to the
            physical GPUs here, and what was ignored and why
  run       choose free GPUs, lease them and run a command on exactly those:
              gpusel run -n 2 --min-free 8GiB -- ./train --epochs 10
            the command's CUDA_VISIBLE_DEVICES names the GPUs chosen, in order;
            the lease lasts until the last process of the command ends; gpusel
            waits for it, passes on the signals sent to it, and exits with its
            status, or dies of the signal that killed it
  pick      choose free GPUs and print them, for scripts (fails, printing
            nothing, when too few fit; takes no lease)
  help      this text (also -h, --help after any command)
  version   gpusel's version (also --version)

Options of every command:
  -h, --help             this text
  --version              gpusel's version

Options of list, explain and pick:
  --json                 machine-readable output: always one JSON document,
                         valid UTF-8, errors included

Options of list only:
  --links                also how each pair of GPUs is joined (NVLink, PCIe
                         switch, ...): N(N-1)/2 pairs, so read only when asked

Options of pick and run (by default: 1 GPU, no compute process on it, this
user's own included, no other job's lease, most free memory first, among the GPUs
CUDA_VISIBLE_DEVICES already shows). A GPU in MIG mode counts as its MIG
instances, each one GPU for -n, leased apart; it is never picked whole:
  -n, --count N          exactly N GPUs
  --at-least N           at least N GPUs, N >= 1 (fewer is a failure) ...
  --at-most M            ... and at most M of them
  --all                  every GPU that fits (at least 1, or --at-least N)
  --min-free SIZE        free memory each needs: 8GiB, 512MiB, 10GB, 1.5GiB
  --max-util PERCENT     highest utilization allowed, 0-100
  --share-own            GPUs where only this user's own compute processes run may
                         be picked (by default any compute process makes a GPU busy)
  --allow-other-users    GPUs where another user's compute process runs may be picked
  --exclude LIST         never these, comma-separated, named as pick prints them:
                         CUDA's physical index (2), a UUID or prefix (GPU-8d2a,
                         MIG-4a5b); nvidia-smi's numbers are written smi:2. A name
                         for no GPU, or one CUDA_VISIBLE_DEVICES hides, is an error
  --order free|util|index  most free memory, least utilized, or CUDA's order first
  --connected            prefer GPUs joined by NVLink, else under one PCIe switch,
                         else one host bridge, else one NUMA node; when no such set
                         fits, the best-connected set that does, said on stderr
  --format index|uuid    pick: print CUDA's physical indices (default) or UUIDs;
                         UUIDs are exact even where CUDA's order is a guess.
                         A MIG instance is always its MIG- UUID (no index names it).
                         run: give the command UUIDs (default) or indices, with
                         CUDA_DEVICE_ORDER=PCI_BUS_ID set so that they are exact
  --whole-machine        choose among all GPUs, whatever CUDA_VISIBLE_DEVICES says

Options of run only:
  --wait[=DURATION]      until enough GPUs fit: forever, or at most DURATION
                         (30s, 5m, 1h; a bare number is seconds); waiting
                         jobs are served in arrival order; what no wait can
                         fix (an unusable lease directory) fails at once
  --no-lease             take no lease (other jobs may then get the same GPUs)
  --local-rank           this process's GPU as a rank of a job (torchrun, mpirun,
                         srun): local rank i gets the i-th GPU CUDA_VISIBLE_DEVICES
                         shows, leased; a GPU another job leases or a compute
                         process keeps busy is an error, not a reason to take
                         another. Without a launcher variable: local rank 0 of 1,
                         said on stderr. Takes no pick option but --format,
                         --share-own and --allow-other-users.
  --round-robin          with --local-rank: with more ranks than GPUs, rank i gets
                         GPU i % count, ranks sharing their GPUs
  -- COMMAND [ARGS...]   the command (the first word that is no option starts it too)

An option's value follows it (--count 2, -n 2) or is attached (--count=2, -n2);
an option that takes no value takes none (--json=false is a usage error).

Environment: CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, GPUSEL_NVML_LIBRARY (the
NVML library to load; default libnvidia-ml.so.1), GPUSEL_NVML_TIMEOUT (how long
NVML may take to answer: 30s by default, as --wait takes it; 0: no limit) and
GPUSEL_LEASE_DIR (where leases are kept; default /run/gpusel-leases where root
made it, with the tmpfiles.d line 'd /run/gpusel-leases 1777 root root -', else
/tmp, shared by every user with nothing to set up).

Exit status:
  0  success
  1  pick: fewer GPUs fit than asked for (each GPU and why, on stderr);
     explain: CUDA would fail with these variables (a GPU named twice, an
     invalid CUDA_DEVICE_ORDER, every GPU hidden)
  2  usage error: unknown command or option, malformed value, extra argument
  3  no NVIDIA driver: NVML could not be loaded (explain still prints what it can)
  4  NVML failed: it was loaded, but could not start or read the GPUs, or did not answer in time
  5  internal error: a bug in gpusel (the message says what failed; please report it)
  6  the output could not be written (stdout closed, full or broken)
run exits with the command's status, or with its own:
  125  nothing fits (each GPU and why, on stderr), or gpusel failed (NVML too): the command was not started
  126  the command cannot be run
  127  the command is not found
)";

}  // namespace

int run_help(const Arguments&) {
  std::cout << kUsage;
  return kExitOk;
}

int run_version(const Arguments&) {
  std::cout << "gpusel " << gpusel::version() << "\n";
  return kExitOk;
}

}  // namespace gpusel_tool
