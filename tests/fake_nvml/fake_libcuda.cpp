// A stand-in for the driver library: a shared library whose file name and SONAME are
// libcuda.so.1 (in the build's tests/fake_nvml/fake_driver/), loaded by the emulated
// runtime when it initializes (and by the fake NVML when a test asks it to, as the
// real NVML loads the driver), so that a process built on the emulation shows the
// driver library loaded exactly when a real one would; and found by a program on the
// fake machine with fake_driver/ on LD_LIBRARY_PATH (docs/trying-without-a-gpu.md),
// whose CUDA runtime it does not start. It answers the one driver call gpusel makes itself,
// cuDeviceGetCount, which tells whether the driver is initialized
// (Note [Knowing whether CUDA has started] in gpusel/machine/visibility-inl.hpp).
#include <atomic>

namespace {
constexpr int kSuccess = 0;                     // CUDA_SUCCESS
constexpr int kErrorInvalidValue = 1;           // CUDA_ERROR_INVALID_VALUE
constexpr int kErrorNotInitialized = 3;         // CUDA_ERROR_NOT_INITIALIZED
std::atomic<int> initialized_device_count{-1};  // -1: cuInit has not run
}  // namespace

// The emulated runtime's initialization: what cuInit does in a real process.
extern "C" void gpusel_fake_libcuda_initialize(int device_count) { initialized_device_count = device_count; }
// The emulated runtime's reset: a new process, whose driver is not initialized.
extern "C" void gpusel_fake_libcuda_forget() { initialized_device_count = -1; }

// As documented for the driver API: CUDA_ERROR_NOT_INITIALIZED before cuInit.
extern "C" int cuDeviceGetCount(int* count) {
  const int devices = initialized_device_count.load();
  if (devices < 0) return kErrorNotInitialized;
  if (count == nullptr) return kErrorInvalidValue;
  *count = devices;
  return kSuccess;
}
