// The fake NVML's session, as NVML documents it: nvmlInit_v2, nvmlInitWithFlags and
// nvmlInit each add one to a reference count, nvmlShutdown takes one away (NVML_ERROR_UNINITIALIZED
// when it is already 0), and while it is 0 every other call fails with NVML_ERROR_UNINITIALIZED.
// Also nvmlErrorString, and the calls that tools built on NVML's Python binding
// (nvidia-ml-py's pynvml, nvitop's nvisel) make on their way to choosing GPUs beyond what
// gpusel reads: each answers Not Supported (a field such a tool shows as N/A), as a real NVML
// does where a GPU lacks the feature. docs/trying-without-a-gpu.md says how to run such a tool.
#include <atomic>

#include "fake_nvml.hpp"

namespace {
constexpr int kSuccess = 0;
constexpr int kErrorUninitialized = 1;
constexpr int kErrorNotSupported = 3;
std::atomic<int> init_count{0};
}  // namespace

void fake_nvml::count_init() { ++init_count; }
bool fake_nvml::initialized() { return init_count.load() > 0; }

extern "C" int nvmlInit_v2();  // fake_nvml.cpp: reads the machine file

// As NVML: the flags (NVML_INIT_FLAG_NO_GPUS, NVML_INIT_FLAG_NO_ATTACH) change nothing here.
extern "C" int nvmlInitWithFlags(unsigned /*flags*/) { return nvmlInit_v2(); }
extern "C" int nvmlInit() { return nvmlInit_v2(); }

extern "C" int nvmlShutdown() {
  int count = init_count.load();
  do {
    if (count == 0) return kErrorUninitialized;
  } while (!init_count.compare_exchange_weak(count, count - 1));
  return kSuccess;
}

extern "C" const char* nvmlErrorString(int status) {
  switch (status) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 7:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    case 999:
      return "Unknown Error";
    default:
      return "Fake NVML error";
  }
}

// --- what NVML-based tools call besides, answered Not Supported ---------------
// The calls nvitop 1.7.2's nvisel (on nvidia-ml-py 13) makes on its way to a selection that a
// machine file does not describe, as tests/fake_nvml/check_python_tools.py finds them: every
// argument is a pointer or an integer, passed in registers, and none is read or written.
#define FAKE_NVML_NOT_SUPPORTED(name)                                           \
  extern "C" int name(void*, void*, void*, void*) {                             \
    return fake_nvml::initialized() ? kErrorNotSupported : kErrorUninitialized; \
  }
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetClockInfo)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetMaxClockInfo)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetDecoderUtilization)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetEncoderUtilization)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetDisplayActive)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetDisplayMode)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetDriverModel)  // Windows' driver models: Not Supported on Linux
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetDriverModel_v2)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetFanSpeed)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetPcieThroughput)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetPerformanceState)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetPersistenceMode)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetPowerManagementLimit)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetPowerUsage)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetTemperature)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetTemperatureV)
FAKE_NVML_NOT_SUPPORTED(nvmlDeviceGetTotalEccErrors)
