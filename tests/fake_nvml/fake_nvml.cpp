// A fake NVML: the libnvidia-ml functions gpusel's inventory calls, answering
// from a text file, so tests can describe any machine (several GPUs, busy ones,
// other users' processes, MIG, mixed models, a broken driver).
//
// GPUSEL_FAKE_NVML_CONFIG names the file; it is read again by nvmlInit_v2, by
// every nvmlDeviceGetCount_v2 and by the nvmlSystem* queries, so a test may
// rewrite it (or point the variable elsewhere) between queries.
// docs/trying-without-a-gpu.md documents this format for users: a new directive
// or key goes there too.
// Unset: a machine with no GPU. One directive per line, '#' starts a comment,
// values with blanks in double quotes:
//
//   driver 580.159.04             # nvmlSystemGetDriverVersion
//   cuda_driver 13000             # nvmlSystemGetCudaDriverVersion_v2 (13.0)
//   libcuda /path/to/libcuda.so.1 # nvmlInit_v2 loads it, without initializing it, and it
//                                 # stays loaded, as the real nvmlInit loads the driver library
//                                 # (measured on the H200, driver 580); none by default, or the
//                                 # one GPUSEL_FAKE_NVML_LIBCUDA names (for a machine file shared
//                                 # by builds, tests/data/example_machine.nvml)
//   init_error 9                  # nvmlInit_v2 fails with this NVML status (9: driver not loaded)
//   init_delay_ms 200             # nvmlInit_v2 takes this long, as the real one takes hundreds of ms
//                                 # (spent outside the fake's lock, so other threads' calls go on)
//   unterminated_strings          # the string queries fill the whole buffer, with no terminating NUL
//                                 # (the text, then 'x' up to the buffer's length), as a broken NVML may
//   device_count 4294967295       # nvmlDeviceGetCount_v2 reports this many GPUs, whatever the gpu lines
//                                 # (a handle beyond them is Invalid Argument), as a broken NVML may
//   hang init                     # this call never returns, as a wedged driver's: init (nvmlInit_v2),
//                                 # count (nvmlDeviceGetCount_v2) or processes
//                                 # (nvmlDeviceGetComputeRunningProcesses_v3); it holds no lock
//   gpu name="NVIDIA H200" uuid=GPU-... pci=00000000:17:00.0 memory_mib=143771 used_mib=1024
//       utilization=35 memory_utilization=12 cc=9.0 mig=1 processes=unsupported
//       uuid_error=999            # nvmlDeviceGetUUID fails with this NVML status
//       reserved_mib=615          # driver-reserved memory: nvmlDeviceGetMemoryInfo (v1) counts it
//                                 # in used, nvmlDeviceGetMemoryInfo_v2 apart (default 0)
//       memory_v2=unsupported     # nvmlDeviceGetMemoryInfo_v2 fails, as with drivers before 510
//       process_count=100000      # nvmlDeviceGetComputeRunningProcesses_v3 asks for room for this many
//       numa=1                    # nvmlDeviceGetNumaNodeId; without it the call is Not Supported
//       cpus=0-15,32-47           # nvmlDeviceGetCpuAffinity; without it the call is Not Supported
//       minor=3                   # nvmlDeviceGetMinorNumber: the N of its /dev/nvidiaN (default: the
//                                 # line's index, as the real driver's minors usually follow PCI order)
//       compute_mode=exclusive_process  # nvmlDeviceGetComputeMode: default (the default),
//                                 # exclusive_thread, prohibited, exclusive_process, or unsupported
//                                 # (the call fails with Not Supported)
//   process gpu=0 pid=4242 used_mib=512        # used_mib=na: NVML_VALUE_NOT_AVAILABLE
//   mig gpu=3 uuid=MIG-... gi=1 ci=0 memory_mib=71680 used_mib=0 slot=0
//                                 # a MIG instance of GPU 3 (which needs mig=1), behind MIG device
//                                 # handle `slot` (default: the next one); memory_mib is its GPU instance's
//   process gpu=3 mig=0 pid=4243 used_mib=512  # a process on the MIG instance in slot 0 of GPU 3
//   link a=0 b=1 nvlink=1 level=10
//                                 # GPUs 0 and 1: nvmlDeviceGetP2PStatus(NVLINK) OK with nvlink=1,
//                                 # nvmlDeviceGetTopologyCommonAncestor answers `level` (0, 10, 20, 30,
//                                 # 40, 50); a pair without a link line: NVLink Not Supported (status 5)
//                                 # and the ancestor call fails with Not Supported
//
// GPUSEL_FAKE_NVML_LOG, when set, names a file to which every nvmlDeviceGetCount_v2 appends a
// line, "nvmlDeviceGetCount_v2": gpusel counts the GPUs once per look at the machine
// (query_inventory), so a test counts its looks (Note [One look per attempt] in pick.hpp).
//
// nvmlInit_v2 (and nvmlInitWithFlags, nvmlInit) and nvmlShutdown are counted as NVML counts them
// (fake_nvml_session.cpp, with the calls other NVML tools make): outside them every other call is
// NVML_ERROR_UNINITIALIZED.
//
// gpu lines are in nvidia-smi's order (index 0, 1, ...); every key is optional:
// uuid defaults to GPU-fa4e0000-0000-0000-0000-00000000000N, pci to
// 00000000:(0x10+N):00.0, name to "NVIDIA H200", memory_mib to 143771, cc to 9.0, minor to N.
// The real NVML numbers GPUs by PCI bus id; the fake numbers them in the order of the lines,
// so a machine file lists its GPUs in PCI order to be one a real NVML could report.
// A line that does not parse makes nvmlInit_v2 fail with NVML_ERROR_UNKNOWN (999).
//
// Where this differs from the real NVML: a MIG device handle answers only the UUID,
// memory, process and GPU/compute instance id calls (the real one answers more,
// name and PCI info among them); nvmlDeviceGetMaxMigDeviceCount is 7, or more when a
// mig line names a higher slot; the parent GPU's process list holds only the process
// lines without mig= (the real one aggregates its instances' processes, and only for
// a privileged caller); the topology is what the link lines say, symmetric, with no
// NVML_TOPOLOGY_* level derived from PCI addresses; a GPU in MIG mode answers the
// topology calls like any other (the real NVLink P2P status is not OK in MIG mode).
#include <dlfcn.h>
#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_nvml.hpp"

namespace {

constexpr int kSuccess = 0;
constexpr int kErrorUninitialized = 1;
constexpr int kErrorInvalidArgument = 2;
constexpr int kErrorNotSupported = 3;
constexpr int kErrorNotFound = 6;
constexpr int kErrorInsufficientSize = 7;
constexpr int kErrorUnknown = 999;

struct Process {
  unsigned pid = 0;
  unsigned long long used_bytes = 0;
};

// What a device handle answers: a GPU's, or a MIG instance's.
struct Device {
  std::string uuid;
  unsigned long long memory_bytes = 143771ULL << 20;
  unsigned long long used_bytes = 0;
  bool processes_supported = true;
  int uuid_error = kSuccess;
  unsigned long long reserved_bytes = 0;
  bool memory_v2 = true;
  unsigned process_count = 0;  // at least this many are reported as needed
  std::vector<Process> processes;
};

struct Mig : Device {
  unsigned slot = 0;  // its MIG device handle's index
  unsigned gpu_instance = 0;
  unsigned compute_instance = 0;
};

struct Gpu : Device {
  std::string name = "NVIDIA H200";
  std::string pci;
  unsigned utilization = 0;
  unsigned memory_utilization = 0;
  int cc_major = 9;
  int cc_minor = 0;
  int minor_number = -1;  // nvmlDeviceGetMinorNumber; -1: the line's place (index N, /dev/nvidiaN)
  bool mig = false;
  int numa = -1;                        // -1: not supported
  std::vector<unsigned long> cpu_mask;  // empty: not supported
  int compute_mode = 0;                 // nvmlComputeMode_t; -1: not supported
  std::vector<Mig> migs;
};

struct Link {
  std::size_t a = 0, b = 0;
  bool nvlink = false;
  int level = 50;
};

struct Machine {
  std::string driver = "580.159.04";
  int cuda_driver = 13000;
  std::string libcuda;
  int init_error = kSuccess;
  int init_delay_ms = 0;
  bool unterminated_strings = false;
  long long device_count = -1;  // -1: as many as the gpu lines
  std::string hang;             // "init", "count", "processes" or ""
  std::vector<Gpu> gpus;
  std::vector<Link> links;
};

// Every call holds `mutex` while it reads or answers from `machine`. A fork while
// another thread holds it would leave it locked forever in the child, so fork
// takes it first and both sides release it (the handlers below); no call holds
// it across a wait of its own (nvmlInit's delay, its dlopen).
std::mutex mutex;
Machine machine;

[[maybe_unused]] const int fork_handlers =
    pthread_atfork([] { mutex.lock(); }, [] { mutex.unlock(); }, [] { mutex.unlock(); });

// Splits a line into words, keeping "quoted text" (without the quotes) as one.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> result;
  std::string word;
  bool quoted = false, any = false;
  for (const char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
      continue;
    }
    if (!quoted && (c == ' ' || c == '\t')) {
      if (any) result.push_back(word);
      word.clear();
      any = false;
      continue;
    }
    word += c;
    any = true;
  }
  if (any) result.push_back(word);
  return result;
}

unsigned long long mib(const std::string& value) { return std::stoull(value) << 20; }

// "0-15,32-47" as a cpu mask, nvmlDeviceGetCpuAffinity's unsigned longs.
std::vector<unsigned long> cpu_mask(const std::string& list) {
  constexpr unsigned kBits = sizeof(unsigned long) * 8;
  std::vector<unsigned long> mask;
  std::stringstream ranges(list);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    const std::size_t dash = range.find('-');
    const unsigned first = static_cast<unsigned>(std::stoul(range.substr(0, dash)));
    const unsigned last = dash == std::string::npos ? first : static_cast<unsigned>(std::stoul(range.substr(dash + 1)));
    for (unsigned cpu = first; cpu <= last; ++cpu) {
      if (mask.size() <= cpu / kBits) mask.resize(cpu / kBits + 1, 0);
      mask[cpu / kBits] |= 1UL << (cpu % kBits);
    }
  }
  return mask;
}

constexpr int kNoSuchMode = -2;

// nvmlComputeMode_t's value of a compute_mode= word (-1: the call is Not Supported).
int compute_mode(const std::string& name) {
  const char* const names[] = {"default", "exclusive_thread", "prohibited", "exclusive_process"};
  for (int mode = 0; mode < 4; ++mode)
    if (name == names[mode]) return mode;
  return name == "unsupported" ? -1 : kNoSuchMode;
}

// key=value words after the first, as pairs; false when one has no '='.
bool key_values(const std::vector<std::string>& parts, std::vector<std::pair<std::string, std::string>>& result) {
  result.clear();
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t equals = parts[i].find('=');
    if (equals == std::string::npos) return false;
    result.emplace_back(parts[i].substr(0, equals), parts[i].substr(equals + 1));
  }
  return true;
}

// Reads the config; false when a line does not parse.
bool read_machine(Machine& result) {
  result = Machine{};
  const char* path = std::getenv("GPUSEL_FAKE_NVML_CONFIG");
  if (path == nullptr) return true;
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  try {
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      const std::vector<std::string> parts = words(line);
      if (parts.empty()) continue;
      if (parts[0] == "driver" && parts.size() == 2)
        result.driver = parts[1];
      else if (parts[0] == "cuda_driver" && parts.size() == 2)
        result.cuda_driver = std::stoi(parts[1]);
      else if (parts[0] == "libcuda" && parts.size() == 2)
        result.libcuda = parts[1];
      else if (parts[0] == "init_error" && parts.size() == 2)
        result.init_error = std::stoi(parts[1]);
      else if (parts[0] == "init_delay_ms" && parts.size() == 2)
        result.init_delay_ms = std::stoi(parts[1]);
      else if (parts[0] == "unterminated_strings" && parts.size() == 1)
        result.unterminated_strings = true;
      else if (parts[0] == "device_count" && parts.size() == 2)
        result.device_count = std::stoll(parts[1]);
      else if (parts[0] == "hang" && parts.size() == 2 &&
               (parts[1] == "init" || parts[1] == "count" || parts[1] == "processes"))
        result.hang = parts[1];
      else if (parts[0] == "gpu") {
        Gpu gpu;
        const std::size_t n = result.gpus.size();
        char text[64];
        std::snprintf(text, sizeof text, "GPU-fa4e0000-0000-0000-0000-%012zx", n);
        gpu.uuid = text;
        std::snprintf(text, sizeof text, "00000000:%02zX:00.0", 0x10 + n);
        gpu.pci = text;
        for (std::size_t i = 1; i < parts.size(); ++i) {
          const std::size_t equals = parts[i].find('=');
          if (equals == std::string::npos) return false;
          const std::string key = parts[i].substr(0, equals), value = parts[i].substr(equals + 1);
          if (key == "name")
            gpu.name = value;
          else if (key == "uuid")
            gpu.uuid = value;
          else if (key == "pci")
            gpu.pci = value;
          else if (key == "memory_mib")
            gpu.memory_bytes = mib(value);
          else if (key == "used_mib")
            gpu.used_bytes = mib(value);
          else if (key == "utilization")
            gpu.utilization = static_cast<unsigned>(std::stoul(value));
          else if (key == "memory_utilization")
            gpu.memory_utilization = static_cast<unsigned>(std::stoul(value));
          else if (key == "cc") {
            if (std::sscanf(value.c_str(), "%d.%d", &gpu.cc_major, &gpu.cc_minor) != 2) return false;
          } else if (key == "minor")
            gpu.minor_number = std::stoi(value);
          else if (key == "mig")
            gpu.mig = value == "1";
          else if (key == "processes")
            gpu.processes_supported = value != "unsupported";
          else if (key == "uuid_error")
            gpu.uuid_error = std::stoi(value);
          else if (key == "reserved_mib")
            gpu.reserved_bytes = mib(value);
          else if (key == "memory_v2")
            gpu.memory_v2 = value != "unsupported";
          else if (key == "process_count")
            gpu.process_count = static_cast<unsigned>(std::stoul(value));
          else if (key == "numa")
            gpu.numa = std::stoi(value);
          else if (key == "cpus")
            gpu.cpu_mask = cpu_mask(value);
          else if (key == "compute_mode") {
            gpu.compute_mode = compute_mode(value);
            if (gpu.compute_mode == kNoSuchMode) return false;
          } else
            return false;
        }
        result.gpus.push_back(gpu);
      } else if (parts[0] == "process") {
        int gpu = -1, mig = -1;
        Process process;
        std::vector<std::pair<std::string, std::string>> pairs;
        if (!key_values(parts, pairs)) return false;
        for (const auto& [key, value] : pairs) {
          if (key == "gpu")
            gpu = std::stoi(value);
          else if (key == "mig")
            mig = std::stoi(value);
          else if (key == "pid")
            process.pid = static_cast<unsigned>(std::stoul(value));
          else if (key == "used_mib")
            process.used_bytes = value == "na" ? ~0ULL : mib(value);
          else
            return false;
        }
        if (gpu < 0 || gpu >= static_cast<int>(result.gpus.size())) return false;
        Gpu& owner = result.gpus[static_cast<std::size_t>(gpu)];
        if (mig < 0) {
          owner.processes.push_back(process);
          continue;
        }
        bool found = false;
        for (Mig& instance : owner.migs)
          if (static_cast<int>(instance.slot) == mig) {
            instance.processes.push_back(process);
            found = true;
          }
        if (!found) return false;
      } else if (parts[0] == "mig") {
        int gpu = -1;
        Mig mig;
        bool slot_given = false;
        std::vector<std::pair<std::string, std::string>> pairs;
        if (!key_values(parts, pairs)) return false;
        for (const auto& [key, value] : pairs) {
          if (key == "gpu")
            gpu = std::stoi(value);
          else if (key == "uuid")
            mig.uuid = value;
          else if (key == "gi")
            mig.gpu_instance = static_cast<unsigned>(std::stoul(value));
          else if (key == "ci")
            mig.compute_instance = static_cast<unsigned>(std::stoul(value));
          else if (key == "memory_mib")
            mig.memory_bytes = mib(value);
          else if (key == "used_mib")
            mig.used_bytes = mib(value);
          else if (key == "slot") {
            mig.slot = static_cast<unsigned>(std::stoul(value));
            slot_given = true;
          } else
            return false;
        }
        if (gpu < 0 || gpu >= static_cast<int>(result.gpus.size()) || mig.slot > 0xfffe) return false;
        Gpu& owner = result.gpus[static_cast<std::size_t>(gpu)];
        if (!slot_given) mig.slot = owner.migs.empty() ? 0 : owner.migs.back().slot + 1;
        owner.migs.push_back(mig);
      } else if (parts[0] == "link") {
        Link link;
        std::vector<std::pair<std::string, std::string>> pairs;
        if (!key_values(parts, pairs)) return false;
        for (const auto& [key, value] : pairs) {
          if (key == "a")
            link.a = std::stoul(value);
          else if (key == "b")
            link.b = std::stoul(value);
          else if (key == "nvlink")
            link.nvlink = value == "1";
          else if (key == "level")
            link.level = std::stoi(value);
          else
            return false;
        }
        if (link.a >= result.gpus.size() || link.b >= result.gpus.size()) return false;
        result.links.push_back(link);
      } else {
        return false;
      }
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// A GPU's handle is its index + 1, so handles stay valid when the config is read
// again; a MIG device handle is (GPU index + 1) << 16 | (slot + 1).
const Gpu* find(void* handle) {
  const auto index = reinterpret_cast<std::uintptr_t>(handle);
  if (index == 0 || index > machine.gpus.size()) return nullptr;
  return &machine.gpus[index - 1];
}

const Mig* find_mig(void* handle) {
  const auto value = reinterpret_cast<std::uintptr_t>(handle);
  const std::uintptr_t gpu = value >> 16, slot = value & 0xffff;
  if (gpu == 0 || gpu > machine.gpus.size() || slot == 0) return nullptr;
  for (const Mig& mig : machine.gpus[gpu - 1].migs)
    if (mig.slot + 1 == slot) return &mig;
  return nullptr;
}

// What a GPU's or a MIG instance's handle answers.
const Device* find_device(void* handle) {
  if (const Gpu* gpu = find(handle)) return gpu;
  return find_mig(handle);
}

std::size_t max_mig_slots(const Gpu& gpu) {
  std::size_t slots = 7;
  for (const Mig& mig : gpu.migs) slots = mig.slot + 1 > slots ? mig.slot + 1 : slots;
  return gpu.mig ? slots : 0;
}

int copy_text(const std::string& text, char* buffer, unsigned length) {
  if (buffer == nullptr) return kErrorInvalidArgument;
  if (machine.unterminated_strings) {  // every byte of the buffer, none of them NUL
    for (unsigned i = 0; i < length; ++i) buffer[i] = i < text.size() ? text[i] : 'x';
    return kSuccess;
  }
  if (text.size() + 1 > length) return kErrorInsufficientSize;
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return kSuccess;
}

struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct Memory {
  unsigned long long total, free, used;
};
struct MemoryV2 {
  unsigned version;
  unsigned long long total, reserved, free, used;
};
struct Utilization {
  unsigned gpu, memory;
};
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance, compute_instance;
};

// Never returns when the machine says `call` hangs; called without the lock held.
void hang_if(const std::string& hang, const char* call) {
  while (hang == call) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Appends `call` to the file GPUSEL_FAKE_NVML_LOG names, if any.
void log_call(const char* call) {
  const char* path = std::getenv("GPUSEL_FAKE_NVML_LOG");
  if (path == nullptr || *path == '\0') return;
  if (std::FILE* log = std::fopen(path, "a")) {
    std::fprintf(log, "%s\n", call);
    std::fclose(log);
  }
}

}  // namespace

extern "C" int nvmlInit_v2() {
  std::string libcuda, hang;
  int delay_ms = 0, status = kSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!read_machine(machine)) return kErrorUnknown;
    libcuda = machine.libcuda;
    delay_ms = machine.init_delay_ms;
    status = machine.init_error;
    hang = machine.hang;
  }
  hang_if(hang, "init");
  if (const char* from_environment = std::getenv("GPUSEL_FAKE_NVML_LIBCUDA"); libcuda.empty() && from_environment)
    libcuda = from_environment;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  // Loaded and never closed, not initialized: what the real nvmlInit leaves behind.
  if (!libcuda.empty()) (void)dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (status == kSuccess) fake_nvml::count_init();
  return status;
}

extern "C" int nvmlSystemGetDriverVersion(char* buffer, unsigned length) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (!read_machine(machine)) return kErrorUnknown;
  return copy_text(machine.driver, buffer, length);
}

extern "C" int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (version == nullptr) return kErrorInvalidArgument;
  if (!read_machine(machine)) return kErrorUnknown;
  *version = machine.cuda_driver;
  return kSuccess;
}

extern "C" int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::string hang;
  {
    std::lock_guard<std::mutex> lock(mutex);
    log_call("nvmlDeviceGetCount_v2");
    if (count == nullptr) return kErrorInvalidArgument;
    if (!read_machine(machine)) return kErrorUnknown;
    *count = machine.device_count >= 0 ? static_cast<unsigned>(machine.device_count)
                                       : static_cast<unsigned>(machine.gpus.size());
    hang = machine.hang;
  }
  hang_if(hang, "count");
  return kSuccess;
}

extern "C" int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** handle) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (handle == nullptr || index >= machine.gpus.size()) return kErrorInvalidArgument;
  *handle = reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) + 1);
  return kSuccess;
}

extern "C" int nvmlDeviceGetUUID(void* handle, char* buffer, unsigned length) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Device* gpu = find_device(handle);
  if (gpu == nullptr) return kErrorInvalidArgument;
  if (gpu->uuid_error != kSuccess) return gpu->uuid_error;
  return copy_text(gpu->uuid, buffer, length);
}

extern "C" int nvmlDeviceGetName(void* handle, char* buffer, unsigned length) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  return gpu == nullptr ? kErrorInvalidArgument : copy_text(gpu->name, buffer, length);
}

extern "C" int nvmlDeviceGetPciInfo_v3(void* handle, PciInfo* info) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || info == nullptr) return kErrorInvalidArgument;
  std::memset(info, 0, sizeof *info);
  std::snprintf(info->bus_id, sizeof info->bus_id, "%s", gpu->pci.c_str());
  std::sscanf(gpu->pci.c_str(), "%x:%x:%x", &info->domain, &info->bus, &info->device);
  return kSuccess;
}

extern "C" int nvmlDeviceGetMemoryInfo(void* handle, Memory* memory) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Device* gpu = find_device(handle);
  if (gpu == nullptr || memory == nullptr) return kErrorInvalidArgument;
  memory->total = gpu->memory_bytes;
  memory->used = gpu->used_bytes + gpu->reserved_bytes;  // v1 counts the driver's reservation as used
  memory->free = gpu->memory_bytes - memory->used;
  return kSuccess;
}

// As NVML: the caller sets `version` to nvmlMemory_v2; another is NVML_ERROR_ARGUMENT_VERSION_MISMATCH (25).
extern "C" int nvmlDeviceGetMemoryInfo_v2(void* handle, MemoryV2* memory) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Device* gpu = find_device(handle);
  if (gpu == nullptr || memory == nullptr) return kErrorInvalidArgument;
  if (!gpu->memory_v2) return kErrorNotSupported;
  if (memory->version != (static_cast<unsigned>(sizeof(MemoryV2)) | (2u << 24))) return 25;
  memory->total = gpu->memory_bytes;
  memory->reserved = gpu->reserved_bytes;
  memory->used = gpu->used_bytes;
  memory->free = gpu->memory_bytes - gpu->reserved_bytes - gpu->used_bytes;
  return kSuccess;
}

extern "C" int nvmlDeviceGetUtilizationRates(void* handle, Utilization* utilization) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || utilization == nullptr) return kErrorInvalidArgument;
  utilization->gpu = gpu->utilization;
  utilization->memory = gpu->memory_utilization;
  return kSuccess;
}

// As NVML: with *count too small, sets *count to the number needed and fails with Insufficient Size.
extern "C" int nvmlDeviceGetComputeRunningProcesses_v3(void* handle, unsigned* count, ProcessInfo* infos) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  {
    std::string hang;
    {
      std::lock_guard<std::mutex> lock(mutex);
      hang = machine.hang;
    }
    hang_if(hang, "processes");
  }
  std::lock_guard<std::mutex> lock(mutex);
  const Device* gpu = find_device(handle);
  if (gpu == nullptr || count == nullptr) return kErrorInvalidArgument;
  if (!gpu->processes_supported) return kErrorNotSupported;
  const auto needed = static_cast<unsigned>(gpu->processes.size());
  if (*count < needed || *count < gpu->process_count || (needed > 0 && infos == nullptr)) {
    *count = needed > gpu->process_count ? needed : gpu->process_count;
    return kErrorInsufficientSize;
  }
  const Mig* mig = find_mig(handle);
  for (unsigned i = 0; i < needed; ++i)
    infos[i] = {gpu->processes[i].pid, gpu->processes[i].used_bytes, mig ? mig->gpu_instance : ~0u,
                mig ? mig->compute_instance : ~0u};
  *count = needed;
  return kSuccess;
}

extern "C" int nvmlDeviceGetMigMode(void* handle, unsigned* current, unsigned* pending) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || current == nullptr || pending == nullptr) return kErrorInvalidArgument;
  *current = *pending = gpu->mig ? 1u : 0u;
  return kSuccess;
}

extern "C" int nvmlDeviceGetComputeMode(void* handle, int* mode) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || mode == nullptr) return kErrorInvalidArgument;
  if (gpu->compute_mode < 0) return kErrorNotSupported;
  *mode = gpu->compute_mode;
  return kSuccess;
}

extern "C" int nvmlDeviceGetCudaComputeCapability(void* handle, int* major, int* minor) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || major == nullptr || minor == nullptr) return kErrorInvalidArgument;
  *major = gpu->cc_major;
  *minor = gpu->cc_minor;
  return kSuccess;
}

extern "C" int nvmlDeviceGetMinorNumber(void* handle, unsigned* minor_number) {
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || minor_number == nullptr) return kErrorInvalidArgument;
  *minor_number = static_cast<unsigned>(gpu->minor_number >= 0 ? gpu->minor_number : gpu - machine.gpus.data());
  return kSuccess;
}

extern "C" int nvmlDeviceGetMaxMigDeviceCount(void* handle, unsigned* count) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || count == nullptr) return kErrorInvalidArgument;
  *count = static_cast<unsigned>(max_mig_slots(*gpu));
  return kSuccess;
}

// As NVML: a slot with no MIG instance is NVML_ERROR_NOT_FOUND.
extern "C" int nvmlDeviceGetMigDeviceHandleByIndex(void* handle, unsigned index, void** mig_handle) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || mig_handle == nullptr || index >= max_mig_slots(*gpu)) return kErrorInvalidArgument;
  for (const Mig& mig : gpu->migs)
    if (mig.slot == index) {
      const auto gpu_index = static_cast<std::uintptr_t>(gpu - machine.gpus.data());
      *mig_handle = reinterpret_cast<void*>((gpu_index + 1) << 16 | (static_cast<std::uintptr_t>(index) + 1));
      return kSuccess;
    }
  return kErrorNotFound;
}

// As NVML: whether the handle is a MIG device handle (nvitop asks before reading one).
extern "C" int nvmlDeviceIsMigDeviceHandle(void* handle, unsigned* is_mig) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (find_device(handle) == nullptr || is_mig == nullptr) return kErrorInvalidArgument;
  *is_mig = find_mig(handle) != nullptr ? 1u : 0u;
  return kSuccess;
}

extern "C" int nvmlDeviceGetGpuInstanceId(void* handle, unsigned* id) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Mig* mig = find_mig(handle);
  if (id == nullptr) return kErrorInvalidArgument;
  if (mig == nullptr) return kErrorNotSupported;  // not a MIG device handle
  *id = mig->gpu_instance;
  return kSuccess;
}

extern "C" int nvmlDeviceGetComputeInstanceId(void* handle, unsigned* id) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Mig* mig = find_mig(handle);
  if (id == nullptr) return kErrorInvalidArgument;
  if (mig == nullptr) return kErrorNotSupported;
  *id = mig->compute_instance;
  return kSuccess;
}

extern "C" int nvmlDeviceGetNumaNodeId(void* handle, unsigned* node) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || node == nullptr) return kErrorInvalidArgument;
  if (gpu->numa < 0) return kErrorNotSupported;
  *node = static_cast<unsigned>(gpu->numa);
  return kSuccess;
}

// As NVML: `size` unsigned longs of CPU mask, CPU n in bit n % 64 of word n / 64.
extern "C" int nvmlDeviceGetCpuAffinity(void* handle, unsigned size, unsigned long* mask) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  const Gpu* gpu = find(handle);
  if (gpu == nullptr || mask == nullptr) return kErrorInvalidArgument;
  if (gpu->cpu_mask.empty()) return kErrorNotSupported;
  for (unsigned i = 0; i < size; ++i) mask[i] = i < gpu->cpu_mask.size() ? gpu->cpu_mask[i] : 0;
  return kSuccess;
}

namespace {
const Link* find_link(void* first, void* second) {
  const Gpu* a = find(first);
  const Gpu* b = find(second);
  if (a == nullptr || b == nullptr) return nullptr;
  const auto ia = static_cast<std::size_t>(a - machine.gpus.data()),
             ib = static_cast<std::size_t>(b - machine.gpus.data());
  for (const Link& link : machine.links)
    if ((link.a == ia && link.b == ib) || (link.a == ib && link.b == ia)) return &link;
  return nullptr;
}
}  // namespace

extern "C" int nvmlDeviceGetTopologyCommonAncestor(void* first, void* second, int* level) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (find(first) == nullptr || find(second) == nullptr || level == nullptr) return kErrorInvalidArgument;
  const Link* link = find_link(first, second);
  if (link == nullptr) return kErrorNotSupported;
  *level = link->level;
  return kSuccess;
}

// Only the NVLink index (2) is modelled: OK (0) for a link line with nvlink=1, else Not Supported (5).
extern "C" int nvmlDeviceGetP2PStatus(void* first, void* second, int index, int* status) {
  if (!fake_nvml::initialized()) return kErrorUninitialized;
  std::lock_guard<std::mutex> lock(mutex);
  if (find(first) == nullptr || find(second) == nullptr || status == nullptr) return kErrorInvalidArgument;
  const Link* link = find_link(first, second);
  *status = index == 2 && link != nullptr && link->nvlink ? 0 : 5;
  return kSuccess;
}
