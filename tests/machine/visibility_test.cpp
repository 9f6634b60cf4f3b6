// Specification of this process's view of its GPUs (include/gpusel/machine/visibility.hpp)
// and of what it changes in runtime.hpp: device_count() without starting CUDA, and
// errors that name the map. Built against the emulated runtime and the real one.
#include "gpusel/machine/visibility.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/launcher.hpp"
#include "gpusel/machine/pick.hpp"
#include "gpusel/runtime.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;

using gpusel_test::contains;

const char* kFourGpus = R"(
gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 pci=00000000:17:00.0
gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 pci=00000000:18:00.0
gpu uuid=GPU-22222222-aaaa-0000-0000-000000000000 pci=00000000:3A:00.0
gpu uuid=GPU-33333333-aaaa-0000-0000-000000000000 pci=00000000:3B:00.0
)";

// Tests that need CUDA not to have started yet: true on the emulated runtime after a
// reset, and on a real machine until its first CUDA call.
std::optional<std::string> need_cuda_not_started() {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(2));
#endif
  if (gpusel::cuda_started()) return std::string("CUDA has already started in this test process");
  return std::nullopt;
}

// Tests that count GPUs through NVML before CUDA starts: also the driver library
// must load (Note [NVML without the driver library]). The emulated fake NVML loads
// the stand-in libcuda.so.1; a real machine needs the driver's.
std::optional<std::string> need_counting_through_nvml() {
  if (auto why = need_cuda_not_started()) return why;
#if !GPUSEL_TEST_EMULATED
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return std::string("no libcuda.so.1 here: NVML's GPUs are not counted without it");
  dlclose(driver);
#endif
  return std::nullopt;
}

// --- with no NVML (no driver) ------------------------------------------------------

TEST(VisibilityWithoutNvml, ExplainSaysTheGpusAreUnknownAndStillReadsTheVariable) {
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1,x");
  const gpusel::DeviceMap map = gpusel::visible_devices();
  EXPECT_FALSE(map.known());
  EXPECT_EQ(map.inventory.status, gpusel::InventoryStatus::library_not_found);
  const std::string text = gpusel::explain(map);
  EXPECT_TRUE(contains(text, "CUDA_VISIBLE_DEVICES=1,x")) << text;
  EXPECT_TRUE(contains(text, "The physical GPUs are unknown")) << text;
  EXPECT_TRUE(contains(text, "could not be loaded")) << text;
  EXPECT_TRUE(contains(text, "(the library GPUSEL_NVML_LIBRARY names)")) << "a path given, not a missing driver:\n"
                                                                         << text;
  EXPECT_TRUE(contains(text, "\"x\"")) << "every token is listed:\n" << text;
}

TEST(VisibilityWithoutNvml, DeviceCountAsksTheRuntime) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(gpusel::device_count(), 0);
  EXPECT_FALSE(gpusel::cuda_started()) << "no driver: the runtime found no libcuda to load";
  EXPECT_TRUE(contains(gpusel::explain(), "CUDA has not started in this process"));
}

// --- with NVML, before CUDA starts ----------------------------------------------------

TEST(Visibility, MapsThisProcessFromTheEnvironmentAndNvml) {
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "GPU-33,1");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  const gpusel::DeviceMap map = gpusel::visible_devices();
  ASSERT_TRUE(map.known()) << map.inventory.reason;
  ASSERT_EQ(map.visible.count(), 1) << "the UUID list ends at the index";
  EXPECT_EQ(map.visible.physical(0), 3);
  ASSERT_NE(map.device(0), nullptr);
  EXPECT_EQ(map.device(0)->uuid, "GPU-33333333-aaaa-0000-0000-000000000000");
  EXPECT_EQ(map.device(0)->nvml_index, 3);
  EXPECT_EQ(map.device(1), nullptr);
}

TEST(Visibility, ExplainShowsEachVisibleDeviceTheHiddenOnesAndEachToken) {
  FakeNvmlMachine machine(std::string(kFourGpus) + "driver 580.159.04\ncuda_driver 13000\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "2,0,7,1");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "CUDA_VISIBLE_DEVICES=2,0,7,1  CUDA_DEVICE_ORDER is unset (FASTEST_FIRST)\n")) << text;
  EXPECT_TRUE(contains(text, "sees 4 GPUs, driver 580.159.04 (CUDA 13.0).\n")) << text;
  EXPECT_TRUE(contains(text, "2 CUDA devices are visible (cuda:0..cuda:1):\n")) << text;
  EXPECT_TRUE(contains(text,
                       "  cuda:0  physical 2  nvidia-smi 2  NVIDIA H200  GPU-22222222-aaaa-0000-0000-000000000000  "
                       "00000000:3A:00.0\n"))
      << text;
  EXPECT_TRUE(contains(text, "  cuda:1  physical 0  nvidia-smi 0")) << text;
  EXPECT_TRUE(contains(text, "Hidden from this process:\n  physical 1  nvidia-smi 1")) << text;
  EXPECT_TRUE(contains(text,
                       "\"7\"            ignored: ends the list: it is out of range (7; this machine has 4 GPUs, "
                       "indices 0..3)\n"))
      << text;
  EXPECT_TRUE(contains(text, "\"1\"            ignored: after the end of the list\n")) << text;
}

TEST(Visibility, ExplainWarnsWhenNvidiaSmiNumbersMayNotBeCudas) {
  FakeNvmlMachine machine("gpu name=\"Tesla T4\" cc=7.5\ngpu name=\"NVIDIA H200\" cc=9.0\n");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "Caution: this machine has GPUs of different models")) << text;
  EXPECT_TRUE(contains(text, "nvidia-smi's numbers may not be CUDA's")) << text;
  ScopedEnvironment pci("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  EXPECT_FALSE(contains(gpusel::explain(), "Caution")) << "PCI_BUS_ID order is exact";
}

// GPU 1 in MIG mode, with two instances, between two whole GPUs.
const char* kMigInTheMiddle = R"(
gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 pci=00000000:17:00.0
gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 pci=00000000:18:00.0 mig=1
gpu uuid=GPU-22222222-aaaa-0000-0000-000000000000 pci=00000000:3A:00.0
mig gpu=1 uuid=MIG-4a5b6c7d-0000-4000-8000-000000000000 gi=1 ci=0
mig gpu=1 uuid=MIG-5b6c7d8e-0000-4000-8000-000000000001 gi=2 ci=0
)";

TEST(Visibility, ExplainGivesAGpuInMigModeNoCudaNumber) {
  FakeNvmlMachine machine(kMigInTheMiddle);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "  cuda:0  physical 0  nvidia-smi 0")) << text;
  EXPECT_FALSE(contains(text, "cuda:1  physical 1")) << "CUDA shows GPU 1's instances, not GPU 1: " << text;
  EXPECT_TRUE(contains(text, "  MIG     physical 1  nvidia-smi 1")) << text;
  EXPECT_FALSE(contains(text, "cuda:2  physical 2")) << "after a MIG GPU the numbers are CUDA's: " << text;
  EXPECT_TRUE(contains(text, "  cuda:?  physical 2  nvidia-smi 2")) << text;
  EXPECT_FALSE(contains(text, "CUDA devices are visible (cuda:0..cuda:2)")) << text;
}

TEST(Visibility, ExplainOfAMigInstanceNvmlListsDoesNotCallItsGpuHidden) {
  FakeNvmlMachine machine(kMigInTheMiddle);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "MIG-5b");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "an instance of physical GPU 1 (nvidia-smi 1; GI 2, CI 0)")) << text;
  EXPECT_TRUE(contains(text, "Hidden from this process:\n  physical 0  nvidia-smi 0")) << text;
  EXPECT_FALSE(contains(text, "  physical 1  nvidia-smi 1")) << "GPU 1 holds the instance named: " << text;
  EXPECT_FALSE(contains(text, "gpusel does not see MIG instances")) << "it saw this one: " << text;
  EXPECT_TRUE(contains(text, "\"MIG-5b\"       ends gpusel's list: MIG instance (GI 2, CI 0) of physical GPU 1"))
      << text;
  ScopedEnvironment unknown("CUDA_VISIBLE_DEVICES", "MIG-77");
  EXPECT_TRUE(contains(gpusel::explain(), "gpusel does not see MIG instances")) << "an instance NVML does not list";
}

TEST(Visibility, ExplainSaysWhyNoDeviceIsVisible) {
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "0,0");
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "No CUDA device is visible: CUDA_VISIBLE_DEVICES=0,0 names physical GPU 0 twice")) << text;
  EXPECT_TRUE(contains(text, "cudaErrorInvalidDevice")) << text;
}

TEST(Visibility, LocalRankDeviceBeforeCudaStartsCountsThroughNvmlAndStartsNothing) {
  // local_rank_device() is documented safe before workers fork: it counts as device_count() does, and its
  // error text (which asks the runtime) is made only when there is an error.
  if (auto why = need_counting_through_nvml()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "3,1");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  ScopedEnvironment rank("LOCAL_RANK", "1");
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::clear_calls();
#endif
  EXPECT_EQ(gpusel::local_rank_device(), gpusel::cuda(1));
  EXPECT_FALSE(gpusel::cuda_started()) << "choosing the rank's device started CUDA";
#if GPUSEL_TEST_EMULATED
  EXPECT_TRUE(gpusel_emulated::call_log().empty()) << "the runtime was asked";
#endif
}

TEST(Visibility, DeviceCountBeforeCudaStartsComesFromNvmlAndTheEnvironment) {
  if (auto why = need_counting_through_nvml()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "3,1");
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::clear_calls();
#endif
  EXPECT_EQ(gpusel::device_count(), 2);
  EXPECT_TRUE(gpusel::is_available());
  EXPECT_FALSE(gpusel::cuda_started()) << "counting started nothing";
#if GPUSEL_TEST_EMULATED
  EXPECT_TRUE(gpusel_emulated::call_log().empty()) << "the runtime was not asked";
#endif
}

// Run in a new process: what a machine whose NVML sees four GPUs but which has
// no driver library (a container with NVIDIA_DRIVER_CAPABILITIES=utility)
// shows, as exit code bits (0: no GPU is available, and nothing started).
[[noreturn]] void exit_with_what_a_machine_without_the_driver_library_shows() {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::Config config;
  config.initialization_error = cudaErrorInsufficientDriver;
  gpusel_emulated::reset(config);
#endif
  FakeNvmlMachine machine(kFourGpus, FakeNvmlMachine::without_driver_library);
  int bits = gpusel::visible_devices().known() ? 0 : 32;
  if (gpusel::device_count() != 0) bits |= 1;
  if (gpusel::is_available()) bits |= 2;
  if (gpusel::preferred_device() != gpusel::cpu()) bits |= 4;
  if (gpusel::cuda_started()) bits |= 8;
#if GPUSEL_TEST_EMULATED
  if (!gpusel_emulated::call_log().empty()) bits |= 16;
#endif
  std::exit(bits);
}

// Note [NVML without the driver library]
TEST(VisibilityDeathTest, WithNvmlButNoDriverLibraryNoGpuIsAvailable) {
#if !GPUSEL_TEST_EMULATED
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
    dlclose(driver);
    GTEST_SKIP() << "this machine has the driver library; the emulated build tests a machine without it";
  }
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a new process: no earlier test loaded a libcuda
  EXPECT_EXIT(exit_with_what_a_machine_without_the_driver_library_shows(), ::testing::ExitedWithCode(0), "")
      << "exit code bits: 1 = device_count() is not 0, 2 = is_available(), 4 = preferred_device() is not cpu, "
         "8 = CUDA started, 16 = the runtime was asked, 32 = NVML did not see the GPUs";
}

TEST(Visibility, CudaWouldFailWhereTheRuntimeFailsNotWhereCudaDecides) {
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  for (const auto& [value, fails] : std::vector<std::pair<std::string, bool>>{
           {"0,0", true}, {"-1", true}, {"", true}, {"1,0", false}, {"MIG-4a5b6c7d", false}, {"1,MIG-4a5b", false}}) {
    ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", value);
    EXPECT_EQ(gpusel::visible_devices().cuda_would_fail(), fails) << "CUDA_VISIBLE_DEVICES=" << value;
  }
  ScopedEnvironment bad_order("CUDA_DEVICE_ORDER", "pci_bus_id");
  EXPECT_TRUE(gpusel::visible_devices().cuda_would_fail()) << "an invalid CUDA_DEVICE_ORDER";
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(gpusel::visible_devices().cuda_would_fail()) << "unknown GPUs: nothing is known to fail";
}

TEST(Visibility, DeviceCountIsZeroWhenTheDriverIsOlderThanTheRuntime) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine("gpu\ncuda_driver " + std::to_string((CUDART_VERSION / 1000 - 1) * 1000) + "\n");
  EXPECT_EQ(gpusel::device_count(), 0) << "the runtime would fail with cudaErrorInsufficientDriver";
}

// --- what CUDA ignores, said under the headline ---------------------------------------------

// Line `n` (from 0) of `text`, without its newline; "" when there is none.
std::string line_of(const std::string& text, std::size_t n) {
  std::size_t start = 0;
  for (; n > 0 && start != std::string::npos; --n) {
    start = text.find('\n', start);
    if (start != std::string::npos) ++start;
  }
  if (start == std::string::npos || start >= text.size()) return {};
  return text.substr(start, text.find('\n', start) - start);
}

TEST(Visibility, ExplainSaysWhatCudaIgnoresRightUnderTheHeadline) {
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1,,2");
  const std::string text = gpusel::explain();
  EXPECT_EQ(line_of(text, 1),
            "CUDA ignores \",2\" of CUDA_VISIBLE_DEVICES: token 2, \"\", ends the list: it is not a number.")
      << text;
  ScopedEnvironment out_of_range("CUDA_VISIBLE_DEVICES", "2,0,7,1");
  EXPECT_EQ(line_of(gpusel::explain(), 1),
            "CUDA ignores \"7,1\" of CUDA_VISIBLE_DEVICES: token 3, \"7\", ends the list: it is out of range (7; this "
            "machine has 4 GPUs, indices 0..3).");
  for (const char* whole : {"2,0", "7,1", "0,0"}) {  // nothing ignored; no GPU (said below); an error (said below)
    ScopedEnvironment value("CUDA_VISIBLE_DEVICES", whole);
    EXPECT_FALSE(contains(gpusel::explain(), "CUDA ignores")) << whole;
  }
}

TEST(VisibilityWithoutNvml, ExplainSaysWhereTheListEndsOnAnyMachine) {
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "none");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1,,2");
  const std::string text = gpusel::explain();
  EXPECT_EQ(line_of(text, 1),
            "CUDA ignores at least \",2\" of CUDA_VISIBLE_DEVICES: token 2, \"\", ends the list on any machine: it is "
            "not a number.")
      << text;
  ScopedEnvironment negative("CUDA_VISIBLE_DEVICES", "1,-1,2");
  EXPECT_TRUE(contains(gpusel::explain(), "CUDA ignores at least \"-1,2\"")) << gpusel::explain();
  ScopedEnvironment uuid("CUDA_VISIBLE_DEVICES", "1,GPU-948e");
  EXPECT_TRUE(contains(gpusel::explain(), "CUDA ignores at least \"GPU-948e\"")) << gpusel::explain();
  ScopedEnvironment machine_decides("CUDA_VISIBLE_DEVICES", "1,7,2");
  EXPECT_FALSE(contains(gpusel::explain(), "CUDA ignores")) << "only the GPUs can tell: " << gpusel::explain();
}

// --- the scheduler's part of the story ----------------------------------------------------

// Slurm's and the container runtime's variables, set (or unset) for the length of a test.
class SchedulerVariables {
 public:
  SchedulerVariables(std::initializer_list<std::pair<const char*, const char*>> set) {
    for (const char* name : {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS",
                             "SLURM_LOCALID", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}) {
      std::optional<std::string> value;
      for (const auto& [given, text] : set)
        if (std::string(given) == name) value = text;
      variables_.push_back(std::make_unique<ScopedEnvironment>(name, value));
    }
  }

 private:
  std::vector<std::unique_ptr<ScopedEnvironment>> variables_;
};

TEST(Visibility, ExplainSaysWhatSlurmGaveBesideWhatCudaShows) {
  FakeNvmlMachine machine(kFourGpus);
  // srun -n2 --gpus=2 while another job holds GPUs 0 and 1.
  SchedulerVariables slurm({{"SLURM_JOB_ID", "12"},
                            {"SLURM_STEP_ID", "0"},
                            {"SLURM_GPUS_ON_NODE", "2"},
                            {"SLURM_STEP_GPUS", "2,3"},
                            {"CUDA_VISIBLE_DEVICES", "2,3"}});
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text,
                       "Slurm gave this step (12.0) 2 GPUs on this node: SLURM_GPUS_ON_NODE=2, "
                       "SLURM_STEP_GPUS=2,3, in Slurm's names"))
      << text;
  EXPECT_TRUE(contains(text,
                       "This task sees the step's GPUs (CUDA_VISIBLE_DEVICES lists 2): "
                       "cuda:0 is GPU-22222222-aaaa-0000-0000-000000000000, cuda:1 is "
                       "GPU-33333333-aaaa-0000-0000-000000000000.\n"))
      << text;
}

TEST(Visibility, ExplainShowsSlurmsNamesAsTheyAreAndNeverMapsThem) {
  // Simulated (no cgroups here): under ConstrainDevices the task of srun --gpus-per-task=1 -n2 whose GPU
  // Slurm calls 2 sees it as CUDA_VISIBLE_DEVICES=0, and the driver reads that.
  FakeNvmlMachine machine(kFourGpus);
  SchedulerVariables slurm({{"SLURM_JOB_ID", "12"},
                            {"SLURM_STEP_ID", "0"},
                            {"SLURM_GPUS_ON_NODE", "2"},
                            {"SLURM_STEP_GPUS", "2"},
                            {"CUDA_VISIBLE_DEVICES", "0"}});
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "SLURM_STEP_GPUS=2, in Slurm's names")) << text;
  EXPECT_TRUE(contains(text,
                       "This task has GPUs of its own, 1 of the step's 2 (CUDA_VISIBLE_DEVICES lists 1): cuda:0 "
                       "is GPU-00000000-aaaa-0000-0000-000000000000.\n"))
      << text;
  EXPECT_FALSE(contains(text, "is GPU-22222222")) << "Slurm's 2 is not the driver's GPU 2: " << text;
  EXPECT_TRUE(contains(text, "Hidden from this process:\n  physical 1")) << text;
}

TEST(Visibility, ExplainSaysWhenSlurmGaveGpusWithoutSayingWhich) {
  FakeNvmlMachine machine(kFourGpus);
  // srun -n2 --gpus-per-task=1 --gpu-bind=none.
  SchedulerVariables slurm({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "0"}, {"SLURM_GPUS_ON_NODE", "2"}});
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "Slurm gave this step 2 GPUs on this node (SLURM_GPUS_ON_NODE=2) without saying which"))
      << text;
  EXPECT_TRUE(contains(text, "CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are unset in this task")) << text;
  EXPECT_FALSE(contains(text, "--gpu-bind")) << text;
  EXPECT_FALSE(contains(text, "This task")) << text;
}

TEST(Visibility, ExplainSaysWhenSlurmGaveTheStepNoGpu) {
  FakeNvmlMachine machine(kFourGpus);
  SchedulerVariables slurm({{"SLURM_JOB_ID", "12"}, {"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "1"}});  // srun -n2
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "\nSlurm gave this step (12.0) no GPU; choosing as outside Slurm.\n")) << text;
  EXPECT_TRUE(contains(text, "4 CUDA devices are visible")) << text;
}

TEST(Visibility, ExplainSaysWhatTheContainerRuntimeWasAskedFor) {
  FakeNvmlMachine machine(kFourGpus);
  SchedulerVariables container({{"NVIDIA_VISIBLE_DEVICES", "GPU-948e02bd,2"}});
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "NVIDIA_VISIBLE_DEVICES=GPU-948e02bd,2")) << text;
  EXPECT_FALSE(contains(text, "Slurm")) << text;
}

TEST(Visibility, ExplainOutsideSlurmAndContainersSaysNothingOfThem) {
  FakeNvmlMachine machine(kFourGpus);
  SchedulerVariables none({});
  const std::string text = gpusel::explain();
  EXPECT_FALSE(contains(text, "Slurm")) << text;
  EXPECT_FALSE(contains(text, "NVIDIA_VISIBLE_DEVICES")) << text;
}

TEST(VisibilityWithoutNvml, ExplainStillSaysWhatSlurmGave) {
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "none");
  SchedulerVariables slurm({{"SLURM_JOB_ID", "12"},
                            {"SLURM_STEP_ID", "0"},
                            {"SLURM_GPUS_ON_NODE", "4"},
                            {"SLURM_STEP_GPUS", "1"},
                            {"CUDA_VISIBLE_DEVICES", "1"}});
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "Slurm gave this step (12.0) 4 GPUs on this node")) << text;
  EXPECT_TRUE(contains(text, "This task has GPUs of its own, 1 of the step's 4 (CUDA_VISIBLE_DEVICES lists 1).\n"))
      << text;
}

// --- set_visible_devices -----------------------------------------------------------------

TEST(SetVisibleDevices, SetsTheVariableBeforeCudaStarts) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::set_visible_devices({2, 0});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "2,0");
  EXPECT_EQ(gpusel::visible_devices().visible.physical(0), 2);
  gpusel::set_visible_devices({"GPU-11111111"}, gpusel::VisibleScope::whole_machine);  // 2,0 hides it
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "GPU-11111111");
  gpusel::set_visible_devices(std::vector<int>{});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "") << "an empty list hides every GPU";
}

TEST(SetVisibleDevices, RejectsWhatCudaWouldNotShow) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "3");
  const auto message = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const gpusel::Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_TRUE(contains(message([] { gpusel::set_visible_devices({0, 0}); }), "physical GPU 0 is named twice"));
  EXPECT_TRUE(contains(message([] { gpusel::set_visible_devices({-1}); }), "cannot be negative"));
  EXPECT_TRUE(contains(message([] {
                         gpusel::set_visible_devices({1, 4});
                       }),
                       "\"4\" ignored: ends the list: it is out of range (4; this machine has 4 GPUs"));
  EXPECT_TRUE(contains(message([] { gpusel::set_visible_devices({"GPU-ff"}); }), "a UUID prefix that no GPU has"));
  EXPECT_TRUE(contains(message([] { gpusel::set_visible_devices({"948e02bd"}); }), "is not a GPU UUID"));
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "3") << "a rejected change changes nothing";
}

TEST(SetVisibleDevices, StaysWithinTheAllocationUnlessTheWholeMachineIsAskedFor) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "2,3");  // the job's allocation, as Slurm sets it
  const std::string message = gpusel_test::error_from([] { gpusel::set_visible_devices({1}); });
  EXPECT_TRUE(contains(message,
                       "physical GPU 1 (GPU-11111111-aaaa-0000-0000-000000000000) is hidden by "
                       "CUDA_VISIBLE_DEVICES=2,3, this job's allocation"))
      << message;
  EXPECT_TRUE(contains(gpusel_test::error_from([] { gpusel::set_visible_devices({"GPU-0000"}); }), "is hidden by"));
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "2,3") << "a rejected change changes nothing";
  gpusel::set_visible_devices({3});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "3") << "within the allocation";
  gpusel::set_visible_devices({1}, gpusel::VisibleScope::whole_machine);
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "1");
}

TEST(KeepVisibleDevices, NarrowsWhatIsVisibleByLogicalIndexAsTensorFlowDoes) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "2,3");
  gpusel::keep_visible_devices({1});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "3") << "cuda:1 of 2,3 is physical 3";
  EXPECT_TRUE(contains(gpusel_test::error_from([] { gpusel::keep_visible_devices({1}); }), "there is no cuda:1"));
  setenv("CUDA_VISIBLE_DEVICES", "GPU-3333,GPU-1111", 1);
  gpusel::keep_visible_devices({1, 0});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "GPU-1111,GPU-3333") << "UUIDs stay as written";
  unsetenv("CUDA_VISIBLE_DEVICES");
  gpusel::keep_visible_devices({2});
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "2");
  EXPECT_TRUE(contains(gpusel_test::error_from([] { gpusel::keep_visible_devices({0, 0}); }), "named twice"));
}

TEST(SetVisibleDevices, AcceptsMigInstancesAndExplainLeavesThemToCuda) {
  if (auto why = need_cuda_not_started()) GTEST_SKIP() << *why;
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  const std::string mig = "MIG-4a5b6c7d-0000-4000-8000-000000000000";
  gpusel::set_visible_devices({mig});
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), mig);
  const std::string text = gpusel::explain();
  EXPECT_TRUE(contains(text, "names a MIG instance (\"" + mig + "\")")) << text;
  EXPECT_TRUE(contains(text, "CUDA's to decide")) << text;
  EXPECT_FALSE(contains(text, "No CUDA device is visible")) << "not observed, so not stated: " << text;
  EXPECT_TRUE(contains(text, "whether CUDA shows that instance only CUDA can say")) << text;
}

// --- on a real machine: NVML's answer is the runtime's ------------------------------------

#if !GPUSEL_TEST_EMULATED
TEST(VisibilityOnThisMachine, NvmlMapAgreesWithTheRuntime) {
  if (gpusel::cuda_started()) GTEST_SKIP() << "CUDA has already started in this test process (run this test alone)";
  const gpusel::DeviceMap map = gpusel::visible_devices();
  if (!map.known()) GTEST_SKIP() << "no NVML here: " << map.inventory.reason;
  const int counted_without_cuda = gpusel::device_count();
  EXPECT_FALSE(gpusel::cuda_started()) << "device_count() started CUDA";
  int runtime_count = 0;
  if (cudaGetDeviceCount(&runtime_count) != cudaSuccess) runtime_count = 0;
  (void)cudaGetLastError();
  EXPECT_TRUE(gpusel::cuda_started()) << "the first runtime call loads libcuda.so.1";
  EXPECT_EQ(counted_without_cuda, runtime_count);
  EXPECT_EQ(gpusel::device_count(), runtime_count);
  if (!map.order.exact) GTEST_SKIP() << "the order is a guess here: " << map.order.caveat;
  for (int logical = 0; logical < runtime_count && logical < map.visible.count(); ++logical) {
    char pci[64] = {};
    ASSERT_EQ(cudaDeviceGetPCIBusId(pci, sizeof pci, logical), cudaSuccess);
    const gpusel::Gpu* gpu = map.inventory.find_pci_bus_id(pci);
    ASSERT_NE(gpu, nullptr) << "NVML has no GPU at " << pci;
    EXPECT_EQ(gpu->uuid, map.device(logical)->uuid) << "cuda:" << logical << " is the GPU gpusel's map says";
  }
}
#endif  // !GPUSEL_TEST_EMULATED

#if GPUSEL_TEST_EMULATED

// --- the parser and the map make no CUDA call --------------------------------------------

TEST(VisibilityEmulated, ParsingAndExplainingMakeNoCudaCall) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1,GPU-22,0,0");
  const std::vector<std::string> physical = {"GPU-a", "GPU-b"};
  for (const char* value : {"0", "1,0", "0,0", "GPU-a", "abc", "", "4294967296", " -0,+1"})
    (void)gpusel::parse_visible_devices(value, physical, "PCI_BUS_ID");
  (void)gpusel::visible_devices();
  (void)gpusel::explain();
  EXPECT_TRUE(gpusel_emulated::call_log().empty());
  EXPECT_EQ(gpusel_emulated::calls("cudaGetDeviceCount"), 0);
  EXPECT_FALSE(gpusel::cuda_started());
}

// --- once CUDA has started ----------------------------------------------------------------

TEST(VisibilityEmulated, CudaStartsWithTheFirstRuntimeCall) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  EXPECT_FALSE(gpusel::cuda_started());
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_TRUE(gpusel::cuda_started());
}

TEST(VisibilityEmulated, ADriverThatNvmlLoadedButNobodyInitializedHasNotStarted) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  FakeNvmlMachine machine(kFourGpus);
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "3,1");
  ASSERT_TRUE(gpusel::visible_devices().known());
  void* driver = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  ASSERT_NE(driver, nullptr) << "nvmlInit loaded the driver library, as on a GPU";
  dlclose(driver);
  EXPECT_FALSE(gpusel::cuda_started()) << "loaded is not initialized: the variables still matter";
  EXPECT_EQ(gpusel::device_count(), 2);
  EXPECT_TRUE(gpusel_emulated::call_log().empty()) << "counted from NVML, without the runtime";
  EXPECT_NO_THROW(gpusel::set_visible_devices({0}, gpusel::VisibleScope::whole_machine));  // 3,1 hides 0
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "0");
  gpusel::set_device(0);
  EXPECT_TRUE(gpusel::cuda_started());
}

TEST(VisibilityEmulated, DeviceCountAfterCudaStartedAsksTheRuntime) {
  gpusel_emulated::reset(gpusel_emulated::devices(3));
  FakeNvmlMachine machine(kFourGpus);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(gpusel::device_count(), 3) << "the runtime's answer, not NVML's 4";
}

TEST(VisibilityEmulated, DeviceCountWithAMigGpuAsksTheRuntime) {
  gpusel_emulated::reset(gpusel_emulated::devices(3));
  FakeNvmlMachine machine("gpu mig=1\n");
  EXPECT_EQ(gpusel::device_count(), 3) << "CUDA shows MIG instances, which NVML's GPU list does not count";
}

TEST(VisibilityEmulated, DeviceCountWithoutNvmlAsksTheRuntime) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  ScopedEnvironment nvml("GPUSEL_NVML_LIBRARY", "none");
  EXPECT_EQ(gpusel::device_count(), 2);
}

TEST(VisibilityEmulated, SetVisibleDevicesAfterCudaStartedThrowsAndChangesNothing) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1");
  gpusel::set_device(0);
  try {
    gpusel::set_visible_devices({0});
    FAIL() << "set_visible_devices succeeded after CUDA started";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(),
                         "gpusel::set_visible_devices({0}): CUDA has already started in this process "
                         "(the driver is initialized), so CUDA_VISIBLE_DEVICES=0 would have no effect here "
                         "(CUDA_VISIBLE_DEVICES=1 stays in force)"))
        << e.what();
  }
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_TRUE(contains(gpusel::explain(), "CUDA has started in this process"));
}

TEST(VisibilityEmulated, SetVisibleDevicesAfterCudaStartedSaysTheUnsetVariableStaysUnset) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::set_device(0);
  const std::string message = gpusel_test::error_from([] { gpusel::set_visible_devices({1}); });
  EXPECT_TRUE(contains(message, "would have no effect here (CUDA_VISIBLE_DEVICES stays unset)")) << message;
  EXPECT_FALSE(contains(message, "is unset stays")) << message;
  const std::string picking = gpusel_test::error_from([] { (void)gpusel::use_free_gpus(); });
  EXPECT_TRUE(contains(picking, "(CUDA_VISIBLE_DEVICES stays unset)")) << picking;
}

TEST(VisibilityEmulated, NoDriverMeansCudaNeverStarts) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  EXPECT_EQ(gpusel::device_count(), 0);
  EXPECT_FALSE(gpusel::cuda_started());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  EXPECT_NO_THROW(gpusel::set_visible_devices({0})) << "without a driver nothing has read the variable yet";
}

// --- errors about a device that is not there name the map ----------------------------------

TEST(VisibilityEmulated, AskingForCuda1UnderVisibleDevices1SaysCuda0IsPhysicalGpu1) {
  // The emulation shows the devices a test configures; here the one GPU that
  // CUDA_VISIBLE_DEVICES=1 leaves a two-GPU machine.
  gpusel_emulated::reset(gpusel_emulated::devices(1));
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "1");
  try {
    gpusel::set_device(1);
    FAIL() << "set_device(1) succeeded with one visible device";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInvalidDevice);
    EXPECT_TRUE(contains(e.what(),
                         "cudaSetDevice(cuda:1): invalid device ordinal (cudaErrorInvalidDevice); "
                         "1 CUDA device is visible (cuda:0); CUDA_VISIBLE_DEVICES=1: cuda:0 is physical GPU 1"))
        << e.what();
  }
}

TEST(VisibilityEmulated, ErrorsUnderAUuidListNameTheUuids) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", "GPU-948e02bd,GPU-f9ee");
  try {
    gpusel::set_device(2);
    FAIL() << "set_device(2) succeeded with two visible devices";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "cuda:0 is GPU-948e02bd, cuda:1 is GPU-f9ee")) << e.what();
  }
}

#endif  // GPUSEL_TEST_EMULATED

}  // namespace
