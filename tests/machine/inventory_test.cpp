// Specification of the NVML inventory (include/gpusel/machine/inventory.hpp), against
// the fake NVML in tests/fake_nvml. A pure test: no CUDA runtime is linked.
#include "gpusel/machine/inventory.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/machine/visibility.hpp"
#include "text_checks.hpp"

// InventoryFork.ChildrenForkedWhileAnotherThreadQueriesNeverHang forks while
// another thread allocates. GCC 12's AddressSanitizer takes no lock of its
// allocator around fork(), so such a child can hang inside ASan's own malloc:
// seen in CI, the child blocked in SizeClassAllocator64::GetFromAllocator on a
// lock the parent's other thread held, in 3 of 5 and then every run, once the
// tests before it changed. Glibc's malloc and TSan's allocator lock around
// fork(); the test runs in those builds.
#if defined(__SANITIZE_ADDRESS__)
#define GPUSEL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPUSEL_TEST_ASAN 1
#endif
#endif

// A setuid program cannot be run by a test, so this binary stands in for glibc's
// secure_getenv (which answers nullptr for every variable when the process runs
// with AT_SECURE, as a setuid one does): while `simulate_secure_execution`, it
// answers as glibc would there; otherwise it asks glibc.
namespace {
bool simulate_secure_execution = false;
}  // namespace
extern "C" char* secure_getenv(const char* name) noexcept {
  if (simulate_secure_execution) return nullptr;
  using Real = char* (*)(const char*);
  static const auto real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "secure_getenv"));
  return real(name);
}

namespace {

using gpusel::InventoryStatus;
using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;

using gpusel_test::contains;

const char* kTwoH200 = R"(
driver 580.159.04
cuda_driver 13000
gpu uuid=GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9 pci=00000000:17:00.0 memory_mib=143771 used_mib=1024 utilization=35 memory_utilization=12
gpu uuid=GPU-948e02bd-d547-dd13-8fac-9694a9f10034 pci=00000000:18:00.0 processes=unsupported
)";

TEST(InventoryWithoutNvml, IsAReportedStateNotAnError) {
  gpusel::InventoryOptions options;
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  const gpusel::Inventory inventory = gpusel::query_inventory(options);
  EXPECT_FALSE(inventory.ok());
  EXPECT_EQ(inventory.status, InventoryStatus::library_not_found);
  EXPECT_TRUE(contains(inventory.reason, "/nonexistent/libnvidia-ml.so.1")) << inventory.reason;
  EXPECT_TRUE(inventory.gpus.empty());
  // A path given on purpose that does not load says so, and why (dlerror), not that there is no driver.
  EXPECT_TRUE(contains(inventory.reason, "could not be loaded: /nonexistent/libnvidia-ml.so.1: cannot open shared"))
      << inventory.reason;
  EXPECT_TRUE(contains(inventory.reason, "the library InventoryOptions::nvml_library names")) << inventory.reason;
  EXPECT_FALSE(contains(inventory.reason, "no NVIDIA driver")) << inventory.reason;
  ScopedEnvironment variable("GPUSEL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  const gpusel::Inventory from_environment = gpusel::query_inventory();
  EXPECT_TRUE(contains(from_environment.reason, "the library GPUSEL_NVML_LIBRARY names")) << from_environment.reason;
  EXPECT_FALSE(contains(from_environment.reason, "no NVIDIA driver")) << from_environment.reason;
}

TEST(InventoryWithoutNvml, WithoutTheDefaultLibraryThereIsNoDriver) {
  ScopedEnvironment unset("GPUSEL_NVML_LIBRARY", std::nullopt);
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(nvml);
    GTEST_SKIP() << "this machine has NVML";
  }
  const gpusel::Inventory inventory = gpusel::query_inventory();
  EXPECT_EQ(inventory.status, InventoryStatus::library_not_found);
  EXPECT_TRUE(contains(inventory.reason, "NVML (libnvidia-ml.so.1) could not be loaded")) << inventory.reason;
  EXPECT_TRUE(contains(inventory.reason, "no NVIDIA driver")) << inventory.reason;
}

// GPUSEL_NVML_LIBRARY names code to load: a setuid program must not let its
// caller choose it, so the variable is read with secure_getenv.
TEST(InventoryWithoutNvml, ASetuidProcessIgnoresGpuselNvmlLibrary) {
  ScopedEnvironment variable("GPUSEL_NVML_LIBRARY", "/tmp/not-nvml.so");
  EXPECT_EQ(gpusel::detail::nvml_library_path({}), "/tmp/not-nvml.so") << "an ordinary process reads it";
  simulate_secure_execution = true;
  const std::string secure = gpusel::detail::nvml_library_path({});
  simulate_secure_execution = false;
  EXPECT_EQ(secure, "libnvidia-ml.so.1") << "a setuid process loads only the default NVML";
}

TEST(InventoryWithoutNvml, CanBeDisabledThroughTheEnvironment) {
  ScopedEnvironment none("GPUSEL_NVML_LIBRARY", "none");
  const gpusel::Inventory inventory = gpusel::query_inventory();
  EXPECT_EQ(inventory.status, InventoryStatus::disabled);
  EXPECT_EQ(inventory.reason, "NVML is disabled (GPUSEL_NVML_LIBRARY=none)");
}

TEST(InventoryWithoutNvml, ALibraryThatIsNotNvmlIsUnusable) {
  gpusel::InventoryOptions options;
  options.nvml_library = "libm.so.6";
  const gpusel::Inventory inventory = gpusel::query_inventory(options);
  EXPECT_EQ(inventory.status, InventoryStatus::library_unusable);
  EXPECT_TRUE(contains(inventory.reason, "lacks nvmlInit_v2")) << inventory.reason;
  EXPECT_TRUE(contains(inventory.reason, "libm.so.6 is not an NVML library")) << inventory.reason;
  EXPECT_FALSE(contains(inventory.reason, "too old")) << inventory.reason;
}

TEST(InventoryWithoutNvml, AFailedInitSaysWhy) {
  FakeNvmlMachine machine("init_error 9\n");
  gpusel::InventoryOptions options;
  // Another spelling of the fake's path: a library that initialized once stays
  // initialized under its name, and this test needs a first initialization.
  options.nvml_library = FakeNvmlMachine::library();
  options.nvml_library.insert(options.nvml_library.rfind('/'), "/.");
  const gpusel::Inventory inventory = gpusel::query_inventory(options);
  EXPECT_EQ(inventory.status, InventoryStatus::init_failed);
  EXPECT_TRUE(contains(inventory.reason, "nvmlInit failed: Driver Not Loaded (NVML status 9)")) << inventory.reason;
}

TEST(Inventory, ReadsEveryGpuInNvidiaSmiOrder) {
  FakeNvmlMachine machine(kTwoH200);
  const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  EXPECT_EQ(inventory.nvml_library, FakeNvmlMachine::library());
  EXPECT_EQ(inventory.driver_version, "580.159.04");
  EXPECT_EQ(inventory.cuda_driver_version, 13000);
  ASSERT_EQ(inventory.gpus.size(), 2u);
  const gpusel::Gpu& first = inventory.gpus[0];
  EXPECT_EQ(first.nvml_index, 0);
  EXPECT_EQ(first.uuid, "GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9");
  EXPECT_EQ(first.name, "NVIDIA H200");
  EXPECT_EQ(first.pci_bus_id, "00000000:17:00.0");
  EXPECT_EQ(first.compute_capability_major, 9);
  EXPECT_EQ(first.memory_total_bytes, std::uint64_t{143771} << 20);
  EXPECT_EQ(first.memory_used_bytes, std::uint64_t{1024} << 20);
  EXPECT_EQ(first.memory_free_bytes, std::uint64_t{143771 - 1024} << 20);
  EXPECT_EQ(first.utilization_percent, 35);
  EXPECT_EQ(first.memory_utilization_percent, 12);
  ASSERT_TRUE(first.processes.has_value());
  EXPECT_TRUE(first.processes->empty());
  EXPECT_FALSE(inventory.gpus[1].processes.has_value()) << "NVML could not list them: unknown, not none";
}

TEST(Inventory, ReadsEachGpusComputeModeWithItsUsage) {
  FakeNvmlMachine machine(R"(
gpu compute_mode=exclusive_process
gpu compute_mode=prohibited
gpu
gpu compute_mode=unsupported
)");
  const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  ASSERT_EQ(inventory.gpus.size(), 4u);
  EXPECT_EQ(inventory.gpus[0].compute_mode, gpusel::ComputeMode::exclusive_process);
  EXPECT_EQ(inventory.gpus[1].compute_mode, gpusel::ComputeMode::prohibited);
  EXPECT_EQ(inventory.gpus[2].compute_mode, gpusel::ComputeMode::default_mode);
  EXPECT_FALSE(inventory.gpus[3].compute_mode.has_value()) << "NVML could not tell: unknown, not Default";
  EXPECT_FALSE(gpusel::query_inventory().gpus[0].compute_mode.has_value()) << "identity only reads no usage";
}

TEST(Inventory, ListsTheMigInstancesOfAGpuInMigModeWithTheirUuidsAndMemory) {
  FakeNvmlMachine machine(R"(
gpu
gpu mig=1
mig gpu=1 uuid=MIG-4a5b6c7d-0000-4000-8000-000000000000 gi=1 ci=0 memory_mib=71680 used_mib=1024
mig gpu=1 uuid=MIG-5b6c7d8e-0000-4000-8000-000000000001 gi=2 ci=1 memory_mib=35840 slot=4
process gpu=1 mig=0 pid=1 used_mib=1000
)");
  const gpusel::Inventory identity = gpusel::query_inventory();
  ASSERT_TRUE(identity.ok()) << identity.reason;
  EXPECT_TRUE(identity.gpus[0].mig_instances.empty()) << "not in MIG mode";
  ASSERT_EQ(identity.gpus[1].mig_instances.size(), 2u) << "the empty slots between them left out";
  const gpusel::MigInstance& first = identity.gpus[1].mig_instances[0];
  EXPECT_EQ(first.uuid, "MIG-4a5b6c7d-0000-4000-8000-000000000000");
  EXPECT_EQ(first.gpu_instance_id, 1u);
  EXPECT_EQ(first.compute_instance_id, 0u);
  EXPECT_FALSE(first.memory_total_bytes.has_value()) << "memory is usage";
  EXPECT_EQ(identity.gpus[1].mig_instances[1].compute_instance_id, 1u);

  const gpusel::Inventory usage = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  const gpusel::MigInstance& read = usage.gpus[1].mig_instances[0];
  EXPECT_EQ(read.memory_total_bytes, std::uint64_t{71680} << 20);
  EXPECT_EQ(read.memory_used_bytes, std::uint64_t{1024} << 20);
  EXPECT_EQ(read.memory_free_bytes, std::uint64_t{71680 - 1024} << 20);
  ASSERT_TRUE(read.processes.has_value());
  ASSERT_EQ(read.processes->size(), 1u);
  EXPECT_EQ((*read.processes)[0].pid, 1u);
  EXPECT_TRUE(usage.gpus[1].mig_instances[1].processes->empty()) << "each instance's own processes";
}

TEST(Inventory, ListsComputeProcessesWithTheirUsers) {
  FakeNvmlMachine machine("gpu\nprocess gpu=0 pid=" + std::to_string(getpid()) +
                          " used_mib=512\nprocess gpu=0 pid=999999999 used_mib=na\n");
  const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  ASSERT_TRUE(inventory.gpus[0].processes.has_value());
  const auto& processes = *inventory.gpus[0].processes;
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0].pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(processes[0].used_memory_bytes, std::uint64_t{512} << 20);
  EXPECT_EQ(processes[0].user, gpusel::detail::process_user(static_cast<unsigned>(getpid())));
  EXPECT_FALSE(processes[0].user.empty()) << "this process is visible in /proc";
  EXPECT_FALSE(processes[0].command.empty());
  EXPECT_EQ(processes[1].used_memory_bytes, std::nullopt) << "NVML_VALUE_NOT_AVAILABLE";
  EXPECT_EQ(processes[1].user, "") << "a process this PID namespace cannot see has no known user";
}

TEST(Inventory, ReadsIdentityOnlyUnlessUsageIsAskedFor) {
  FakeNvmlMachine machine(kTwoH200);
  gpusel::InventoryOptions options;
  options.usage = false;
  const gpusel::Inventory inventory = gpusel::query_inventory(options);
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  EXPECT_EQ(inventory.gpus[0].uuid, "GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9");
  EXPECT_FALSE(inventory.gpus[0].memory_total_bytes.has_value());
  EXPECT_FALSE(inventory.gpus[0].processes.has_value());

  const gpusel::Inventory by_default = gpusel::query_inventory();
  EXPECT_FALSE(gpusel::InventoryOptions().usage) << "the default is the same everywhere: identity only";
  EXPECT_EQ(by_default.gpus[0].uuid, "GPU-f9ee9551-5061-9acc-ea2a-e3926e258ba9");
  EXPECT_FALSE(by_default.gpus[0].memory_total_bytes.has_value());
  EXPECT_TRUE(gpusel::InventoryOptions::with_usage().usage);
  EXPECT_TRUE(gpusel::query_inventory(gpusel::InventoryOptions::with_usage()).gpus[0].memory_total_bytes.has_value());
}

TEST(Inventory, SeesTheMachineChange) {
  FakeNvmlMachine machine("gpu\n");
  EXPECT_EQ(gpusel::query_inventory().gpus.size(), 1u);
  machine.rewrite("gpu\ngpu\ngpu\n");
  EXPECT_EQ(gpusel::query_inventory().gpus.size(), 3u);
}

TEST(Inventory, FindsGpusByUuidAndByPciBusIdInEitherSpelling) {
  FakeNvmlMachine machine(kTwoH200);
  const gpusel::Inventory inventory = gpusel::query_inventory();
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  EXPECT_EQ(inventory.find_uuid("GPU-948e02bd-d547-dd13-8fac-9694a9f10034"), &inventory.gpus[1]);
  EXPECT_EQ(inventory.find_uuid("GPU-948e02bd"), nullptr) << "whole UUIDs only";
  EXPECT_EQ(inventory.find_pci_bus_id("0000:18:00.0"), &inventory.gpus[1]) << "CUDA's spelling of NVML's address";
  EXPECT_EQ(inventory.find_pci_bus_id("00000000:19:00.0"), nullptr);
  EXPECT_EQ(inventory.find_pci_bus_id("garbage"), nullptr);
}

// NVML's strings are meant to end in NUL; one that fills the whole buffer must
// not be read past its end (ASan: stack-buffer-overflow), and the text stops
// at the buffer's length (96 bytes: NVML_DEVICE_UUID_V2_BUFFER_SIZE).
TEST(Inventory, ReadsStringsThatFillTheirBufferWithoutATerminator) {
  FakeNvmlMachine machine("unterminated_strings\ndriver 580.159.04\ngpu uuid=GPU-f9ee9551 name=\"NVIDIA H200\"\n");
  const gpusel::Inventory inventory = gpusel::query_inventory();
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  ASSERT_EQ(inventory.gpus.size(), 1u);
  const auto padded = [](std::string text) {
    text.resize(96, 'x');
    return text;
  };
  EXPECT_EQ(inventory.gpus[0].uuid, padded("GPU-f9ee9551"));
  EXPECT_EQ(inventory.gpus[0].name, padded("NVIDIA H200"));
  EXPECT_EQ(inventory.driver_version, padded("580.159.04"));
}

// Readings that cannot be true are not believed: utilization above 100% (4294967295
// once read as -1294967296%), more memory free or used than there is, and more
// compute processes than gpusel reads (it would allocate room for them all).
TEST(Inventory, DoesNotBelieveImpossibleReadings) {
  FakeNvmlMachine machine(
      "gpu utilization=4294967295 memory_utilization=12\n"
      "gpu memory_mib=1024 used_mib=2048 utilization=101\n"
      "gpu process_count=100000\n"
      "gpu utilization=100 memory_mib=1024 used_mib=1024\n");
  const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  ASSERT_EQ(inventory.gpus.size(), 4u);
  const gpusel::Gpu& huge_utilization = inventory.gpus[0];
  EXPECT_EQ(huge_utilization.utilization_percent, std::nullopt);
  EXPECT_EQ(huge_utilization.memory_utilization_percent, std::nullopt) << "one impossible sample taints both";
  EXPECT_TRUE(contains(huge_utilization.impossible_readings, "4294967295% utilization"))
      << huge_utilization.impossible_readings;
  const gpusel::Gpu& overfull = inventory.gpus[1];
  EXPECT_EQ(overfull.memory_free_bytes, std::nullopt) << "free > total";
  EXPECT_EQ(overfull.memory_used_bytes, std::nullopt);
  EXPECT_EQ(overfull.memory_total_bytes, std::nullopt);
  EXPECT_EQ(overfull.utilization_percent, std::nullopt);
  EXPECT_TRUE(contains(overfull.impossible_readings, "of 1.0 GiB total memory")) << overfull.impossible_readings;
  EXPECT_TRUE(contains(overfull.impossible_readings, "101% utilization")) << overfull.impossible_readings;
  const gpusel::Gpu& crowded = inventory.gpus[2];
  EXPECT_EQ(crowded.processes, std::nullopt);
  EXPECT_TRUE(contains(crowded.impossible_readings, "100000 compute processes")) << crowded.impossible_readings;
  EXPECT_TRUE(contains(crowded.impossible_readings, std::to_string(gpusel::detail::kMaxComputeProcesses)));
  const gpusel::Gpu& full = inventory.gpus[3];
  EXPECT_EQ(full.impossible_readings, "") << "100% and a full GPU are possible";
  EXPECT_EQ(full.utilization_percent, 100);
  EXPECT_EQ(full.memory_free_bytes, 0u);
}

// An NVML that reports more GPUs than any machine has (2^32 - 1 once ended in
// std::bad_alloc, 10 000 took seconds) is refused, saying so, as too many compute
// processes are.
TEST(Inventory, RefusesAnNvmlThatReportsMoreGpusThanItReads) {
  for (const std::string& count :
       std::vector<std::string>{"4294967295", "100000", std::to_string(gpusel::detail::kMaxGpus + 1)}) {
    FakeNvmlMachine machine("device_count " + count + "\ngpu\n");
    const gpusel::Inventory inventory = gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
    EXPECT_EQ(inventory.status, gpusel::InventoryStatus::query_failed) << count;
    EXPECT_EQ(inventory.reason, "nvmlDeviceGetCount reports " + count + " GPUs, more than the 1024 gpusel reads");
    EXPECT_TRUE(inventory.gpus.empty());
  }
  std::string at_the_cap;
  for (unsigned i = 0; i < gpusel::detail::kMaxGpus; ++i) at_the_cap += "gpu\n";
  FakeNvmlMachine machine(at_the_cap);
  gpusel::InventoryOptions options = gpusel::InventoryOptions::with_usage();
  options.links = false;
  const gpusel::Inventory inventory = gpusel::query_inventory(options);
  ASSERT_TRUE(inventory.ok()) << inventory.reason;
  EXPECT_EQ(inventory.gpus.size(), gpusel::detail::kMaxGpus);
}

// The test machine's file is made where no one else can plant a symlink: it
// once went to /tmp/gpusel_fake_nvml_<pid>_<n>.txt, through a writer that
// follows symlinks, so another user could make tests overwrite any file of theirs.
TEST(FakeNvmlMachine, WritesItsFileInAPrivateDirectoryAndFollowsNoSymlink) {
  char directory[] = "/tmp/gpusel_victim_XXXXXX";
  ASSERT_NE(mkdtemp(directory), nullptr);
  const std::string victim = std::string(directory) + "/victim";
  std::ofstream(victim) << "precious\n";
  std::vector<std::string> planted;  // every name the old scheme would have used soon
  for (int n = 0; n < 256; ++n) {
    planted.push_back("/tmp/gpusel_fake_nvml_" + std::to_string(getpid()) + "_" + std::to_string(n) + ".txt");
    if (symlink(victim.c_str(), planted.back().c_str()) != 0) planted.pop_back();
  }
  {
    FakeNvmlMachine machine("gpu\n");
    machine.rewrite("gpu\ngpu\n");
    struct stat parent {};
    const std::string path = machine.path();
    ASSERT_EQ(stat(path.substr(0, path.rfind('/')).c_str(), &parent), 0) << path;
    EXPECT_EQ(parent.st_mode & 0777, 0700u) << path << " is not in a private directory";
    EXPECT_EQ(parent.st_uid, geteuid());
    EXPECT_EQ(gpusel::query_inventory().gpus.size(), 2u);
  }
  std::ifstream in(victim);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const std::string& link : planted) std::remove(link.c_str());
  std::remove(victim.c_str());
  rmdir(directory);
  EXPECT_EQ(content, "precious\n") << "the test wrote through a planted symlink";
}

// --- fork (Note [Loading NVML without a lock]) -----------------------------------------

// How `child` ended within `deadline`: its exit status, or -1 (killed) when it hung.
int exit_status_within(pid_t child, std::chrono::seconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A process forks workers while another thread loads NVML for the first time
// (nvmlInit takes hundreds of ms): each child must still read the GPUs, and
// count them as device_count() does before CUDA starts. The loader once held
// its lock across dlopen and nvmlInit, and the children waited for it forever.
TEST(InventoryFork, AChildForkedDuringTheFirstLoadStillReadsTheGpus) {
  // nvmlInit loads the driver library, as the real one does: NVML's GPUs count only where it loads
  // (Note [NVML without the driver library]).
  FakeNvmlMachine machine("libcuda " GPUSEL_FAKE_LIBCUDA "\ninit_delay_ms 300\ngpu\ngpu\n");
  for (int round = 0; round < 3; ++round) {
    // A spelling of the fake's path not loaded before, so this round's load is a first one.
    gpusel::InventoryOptions options;
    options.nvml_library = FakeNvmlMachine::library();
    for (int dots = 0; dots < round + 2; ++dots) options.nvml_library.insert(options.nvml_library.rfind('/'), "/.");
    std::thread loader([&options] { EXPECT_TRUE(gpusel::query_inventory(options).ok()); });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the loader is inside nvmlInit now
    const pid_t child = fork();
    if (child == 0) {
      const gpusel::Inventory inventory = gpusel::query_inventory(options);
      const std::optional<int> count = gpusel::detail::count_devices_without_cuda(12000);
      _exit(inventory.ok() && inventory.gpus.size() == 2 && count == 2 ? 0 : 1);
    }
    ASSERT_GT(child, 0);
    loader.join();
    const int status = exit_status_within(child, std::chrono::seconds(5));
    ASSERT_NE(status, -1) << "round " << round << ": the child hung (a lock held across the fork)";
    EXPECT_EQ(status, 0) << "round " << round << ": the child could not read the GPUs";
  }
}

// Forks in a loop while another thread queries all the time: a child must never
// inherit a lock held, neither gpusel's nor the fake NVML's own (the fake takes
// its lock in a pthread_atfork handler, so fork() waits until it is free).
TEST(InventoryFork, ChildrenForkedWhileAnotherThreadQueriesNeverHang) {
#if defined(GPUSEL_TEST_ASAN)
  GTEST_SKIP()
      << "AddressSanitizer's allocator is not fork-safe: a child can hang in its malloc (see the top of this file)";
#endif
  FakeNvmlMachine machine("gpu\ngpu\ngpu\n");
  ASSERT_TRUE(gpusel::query_inventory().ok());
  std::atomic<bool> stop{false};
  std::thread querier([&stop] {
    while (!stop.load()) (void)gpusel::query_inventory(gpusel::InventoryOptions::with_usage());
  });
  int hung = 0, failed = 0;
  for (int round = 0; round < 20 && hung == 0; ++round) {
    const pid_t child = fork();
    if (child == 0) _exit(gpusel::query_inventory().gpus.size() == 3 ? 0 : 1);
    if (child < 0) break;
    const int status = exit_status_within(child, std::chrono::seconds(5));
    hung += status == -1;
    failed += status > 0;
  }
  stop = true;
  querier.join();
  EXPECT_EQ(hung, 0) << "a child hung";
  EXPECT_EQ(failed, 0) << "a child could not read the GPUs";
}

}  // namespace
