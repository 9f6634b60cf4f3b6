// Specification of assessing GPUs (include/gpusel/machine/pick.hpp: assess, and the checks
// of machine/detail/picking/candidate_checks.hpp): each GPU or MIG instance and the reasons it
// does not fit, from its memory, utilization, processes (Note [Whose process is it]) and
// compute mode to CUDA_VISIBLE_DEVICES, exclusions and a UUID reported twice. Pure: each
// machine is written down here (pick_machines.hpp).
#include "gpusel/machine/pick.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pick_criteria_builders.hpp"
#include "pick_machines.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::alice;
using gpusel_test::contains;
using gpusel_test::count;
using gpusel_test::error_from;
using gpusel_test::gpu;
using gpusel_test::indices;
using gpusel_test::kGiB;
using gpusel_test::machine;
using gpusel_test::process_of;
using gpusel_test::reasons;
using gpusel_test::uuids;
using gpusel_test::whole_and_mig;

// --- what a GPU's own readings say -----------------------------------------------------

TEST(Pick, RejectsGpusWithTooLittleFreeMemoryWrittenAsBytesOrText) {
  const auto map = machine({gpu(0, 7, 0), gpu(1, 8, 0), gpu(2, 100, 0)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.min_free_memory = "8GiB";
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), (std::vector<int>{2, 1}));
  criteria.min_free_memory = 9 * kGiB;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), std::vector<int>{2});
  const auto verdicts = gpusel::assess(criteria, map, alice);
  EXPECT_EQ(reasons(verdicts[0]), std::vector<std::string>{"only 7.0 GiB free, 9.0 GiB needed"});
}

TEST(Pick, RejectsBusyGpus) {
  const auto map = machine({gpu(0, 100, 11), gpu(1, 100, 10), gpu(2, 100, 95)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.max_utilization = 10;
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), std::vector<int>{1});
  EXPECT_EQ(reasons(gpusel::assess(criteria, map, alice)[2]),
            std::vector<std::string>{"95% utilized, at most 10% allowed"});
}

TEST(Pick, RejectsGpusWhereAnotherUserRunsAComputeProcess) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0), gpu(2, 90, 0)};
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[1].processes->push_back(process_of("alice"));
  const auto map = machine(gpus);
  gpusel::PickCriteria own = count(1, gpusel::PickCriteria::all);
  own.share_own = true;
  EXPECT_EQ(indices(gpusel::pick(own, map, alice)), (std::vector<int>{1, 2}))
      << "with share_own, alice's own process does not disqualify GPU 1";
  EXPECT_EQ(reasons(gpusel::assess({}, map, alice)[0]),
            std::vector<std::string>{"another user's compute process runs on it (pid 777 of bob (python3), 2.0 GiB)"});

  gpusel::PickCriteria sharing = count(3);
  sharing.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, alice)), (std::vector<int>{0, 1, 2}));
}

TEST(Pick, AGpuWhereThisUsersOwnProcessRunsIsBusyUnlessSharingOwnGpusIsAsked) {
  // alice's own job keeps GPU 0 busy (130 of 141 GiB free is beside the point: the job may grow).
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, alice)), std::vector<int>{1});
  EXPECT_EQ(
      reasons(gpusel::assess({}, map, alice)[0]),
      std::vector<std::string>{"this user's own compute process runs on it (pid 4242 of alice (python3), 2.0 GiB)"});
  gpusel::PickCriteria sharing;
  sharing.share_own = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, alice)), std::vector<int>{0});
  EXPECT_TRUE(contains(gpusel::describe(gpusel::PickCriteria{}), "no compute process (this user's own included)"));
  EXPECT_TRUE(contains(gpusel::describe(sharing), "no other user's compute process"));
}

TEST(Pick, TheCallingProcessItselfNeverMakesItsGpuBusy) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, gpusel::Caller{"alice", 4242})), std::vector<int>{0})
      << "pid 4242 is the caller";
  EXPECT_TRUE(gpusel::assess({}, map, gpusel::Caller{"alice", 4242})[0].fits());
  EXPECT_FALSE(gpusel::assess({}, map, gpusel::Caller{"alice", 4243})[0].fits());
}

// --- the driver's own exclusivity: compute modes (Note [Compute modes in picking]) ----

TEST(Pick, NeverPicksAProhibitedGpu) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::prohibited;
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, alice)), std::vector<int>{1});
  EXPECT_EQ(reasons(gpusel::assess({}, map, alice)[0]),
            std::vector<std::string>{"its compute mode is Prohibited: CUDA creates no context on it"});
  gpusel::PickCriteria anything = count(2);
  anything.allow_other_users = true;
  EXPECT_THROW((void)gpusel::pick(anything, map, alice), gpusel::Error) << "only one GPU fits";
}

TEST(Pick, AnExclusiveProcessGpuWithAnyComputeProcessIsNeverPickedEvenWhenSharingIsAllowed) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 100, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[1].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[1].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  gpusel::PickCriteria sharing = count(1, gpusel::PickCriteria::all);
  sharing.share_own = true;
  sharing.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(sharing, map, alice)), std::vector<int>{2});
  EXPECT_EQ(reasons(gpusel::assess(sharing, map, alice)[0]),
            std::vector<std::string>{"its compute mode is Exclusive_Process and a compute process runs on it (pid 777 "
                                     "of bob (python3), 2.0 GiB): CUDA would refuse this process a context, shared "
                                     "or not"});
}

TEST(Pick, AnIdleExclusiveGpuFitsAndSoDoesOneWhoseOnlyProcessIsTheCaller) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[1].compute_mode = gpusel::ComputeMode::exclusive_thread;
  gpus[1].processes->push_back(process_of("alice", 4242));
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick(count(2), map, gpusel::Caller{"alice", 4242})), (std::vector<int>{0, 1}));
  EXPECT_FALSE(gpusel::assess({}, map, gpusel::Caller{"alice", 99})[1].fits()) << "pid 4242 is not the caller here";
}

TEST(Pick, AnExclusiveGpuWhoseProcessesAreUnknownIsNeverPicked) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0)};
  gpus[0].compute_mode = gpusel::ComputeMode::exclusive_process;
  gpus[0].processes.reset();
  const auto map = machine(gpus);
  gpusel::PickCriteria sharing;
  sharing.allow_other_users = true;  // which skips the process check itself
  EXPECT_EQ(reasons(gpusel::assess(sharing, map, alice)[0]),
            std::vector<std::string>{"its compute mode is Exclusive_Process and its compute processes are unknown "
                                     "(NVML could not list them)"});
}

TEST(ComputeMode, IsDescribedInNvidiaSmisWords) {
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::default_mode), "Default");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::exclusive_thread), "Exclusive_Thread");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::prohibited), "Prohibited");
  EXPECT_STREQ(gpusel::describe(gpusel::ComputeMode::exclusive_process), "Exclusive_Process");
}

TEST(Assess, SaysWhichProcessesMadeAGpuBusy) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("alice", 4242));
  gpus[0].processes->push_back(process_of("bob", 777));
  gpus[0].processes->push_back(process_of("alice", 99));  // the caller
  const auto map = machine(gpus);
  const auto verdicts = gpusel::assess({}, map, gpusel::Caller{"alice", 99});
  ASSERT_EQ(verdicts[0].busy_processes.size(), 2u);
  EXPECT_EQ(verdicts[0].busy_processes[0].pid, 4242u);
  EXPECT_EQ(verdicts[0].busy_processes[1].pid, 777u);
  EXPECT_TRUE(verdicts[1].busy_processes.empty());
  gpusel::PickCriteria sharing;
  sharing.share_own = true;
  ASSERT_EQ(gpusel::assess(sharing, map, gpusel::Caller{"alice", 99})[0].busy_processes.size(), 1u);
  EXPECT_EQ(gpusel::assess(sharing, map, gpusel::Caller{"alice", 99})[0].busy_processes[0].pid, 777u);
}

TEST(Pick, AProcessWhoseOwnerCannotBeSeenCountsAsAnotherUsers) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].processes->push_back(process_of("", 31337));  // in another container
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, alice)), std::vector<int>{1});
  EXPECT_EQ(reasons(gpusel::assess({}, map, alice)[0]),
            std::vector<std::string>{
                "another user's compute process runs on it (pid 31337, owner unknown: not visible from this PID "
                "namespace, 2.0 GiB)"});
}

TEST(Pick, RejectsWhatNvmlCouldNotTellOnlyWhenACriterionNeedsIt) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].memory_free_bytes.reset();
  gpus[0].utilization_percent.reset();
  gpus[0].processes.reset();
  const auto map = machine(gpus);
  gpusel::PickCriteria criteria;
  criteria.min_free_memory = "1GiB";
  criteria.max_utilization = 50;
  EXPECT_EQ(reasons(gpusel::assess(criteria, map, alice)[0]),
            (std::vector<std::string>{"its free memory is unknown (NVML could not tell)",
                                      "its utilization is unknown (NVML could not tell)",
                                      "its compute processes are unknown (NVML could not list them)"}));
  gpusel::PickCriteria lenient = count(2);
  lenient.allow_other_users = true;
  EXPECT_EQ(indices(gpusel::pick(lenient, map, alice)), (std::vector<int>{1, 0})) << "unknown free memory sorts last";
}

TEST(Pick, NeverPicksAGpuInMigModeWhole) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 100, 0)};
  gpus[0].mig_enabled = true;  // and no MIG instance on it
  const auto map = machine(gpus);
  EXPECT_EQ(indices(gpusel::pick({}, map, alice)), std::vector<int>{1});
  ASSERT_EQ(reasons(gpusel::assess({}, map, alice)[0]).size(), 1u);
  EXPECT_TRUE(contains(reasons(gpusel::assess({}, map, alice)[0])[0],
                       "MIG mode is enabled and NVML lists no MIG instance on it"));
}

TEST(Assess, EachRejectionIsAReasonToSwitchOnWithItsSentence) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 2, 97), gpu(2, 100, 0), gpu(3, 100, 0), gpu(4, 90, 0)};
  gpus[2].processes->push_back(process_of("bob", 777));
  gpus[3].compute_mode = gpusel::ComputeMode::prohibited;
  gpus[4].uuid = gpus[0].uuid;
  gpusel::PickCriteria criteria;
  criteria.min_free_memory = "8GiB";
  criteria.max_utilization = 10;
  criteria.exclude = {"smi:0"};
  const auto verdicts = gpusel::assess(criteria, machine(gpus), alice);
  using Reason = gpusel::RejectReason;
  const auto reasons_of = [](const gpusel::Candidate& candidate) {
    std::vector<Reason> result;
    for (const gpusel::Rejection& rejection : candidate.rejections) result.push_back(rejection.reason);
    return result;
  };
  EXPECT_EQ(reasons_of(verdicts[0]), std::vector<Reason>{Reason::excluded});
  EXPECT_EQ(reasons_of(verdicts[1]), (std::vector<Reason>{Reason::free_memory, Reason::utilization}));
  EXPECT_EQ(verdicts[1].rejections[0], (gpusel::Rejection{Reason::free_memory, "only 2.0 GiB free, 8.0 GiB needed"}));
  EXPECT_EQ(reasons_of(verdicts[2]), std::vector<Reason>{Reason::compute_process});
  EXPECT_EQ(reasons_of(verdicts[3]), std::vector<Reason>{Reason::compute_mode});
  EXPECT_EQ(reasons_of(verdicts[4]), std::vector<Reason>{Reason::duplicate_uuid});
  EXPECT_TRUE(verdicts[2].rejected_for(Reason::compute_process));
  EXPECT_FALSE(verdicts[2].rejected_for(Reason::leased));
  EXPECT_STREQ(gpusel::describe(Reason::free_memory), "free_memory");
  EXPECT_STREQ(gpusel::describe(Reason::cannot_be_leased), "cannot_be_leased");
  EXPECT_STREQ(gpusel::describe(static_cast<Reason>(99)), "?");
}

TEST(Caller, ThisProcessIsItsUserAndPid) {
  const gpusel::Caller caller = gpusel::Caller::this_process();
  EXPECT_EQ(caller.user, gpusel::current_user());
  EXPECT_EQ(caller.pid, static_cast<unsigned>(getpid()));
  EXPECT_EQ(gpusel::Caller{}.pid, 0u) << "no process of the machine is a default caller's";
}

// --- MIG instances (Note [MIG instances as picks]) ------------------------------------

TEST(Pick, EachMigInstanceIsOneGpuForTheCountNamedByItsMigUuid) {
  const auto map = machine(whole_and_mig());
  EXPECT_EQ(gpusel::assess({}, map, alice).size(), 3u) << "GPU 0, and GPU 1's two instances in its place";
  const auto picked = gpusel::pick(count(3), map, alice);
  EXPECT_EQ(uuids(picked), (std::vector<std::string>{"MIG-120bbbbb-0000-0000-0000-000000000000",
                                                     "MIG-110bbbbb-0000-0000-0000-000000000000",
                                                     "GPU-0aaaaaaa-0000-0000-0000-000000000000"}))
      << "most free memory first, the instances' own";
  ASSERT_TRUE(picked[0].mig_instance.has_value());
  EXPECT_EQ(picked[0].physical_index, 1) << "its GPU's";
  EXPECT_FALSE(picked[2].mig_instance.has_value());
  EXPECT_TRUE(contains(gpusel::describe(picked[0]),
                       "MIG instance MIG-120bbbbb-0000-0000-0000-000000000000 (GI 2, CI 0) of GPU 1 (nvidia-smi 1, "
                       "NVIDIA H200, GPU-1aaaaaaa-0000-0000-0000-000000000000), 30.0 GiB free"))
      << gpusel::describe(picked[0]);
}

TEST(Pick, JudgesAMigInstanceByItsOwnMemoryAndProcesses) {
  std::vector<gpusel::Gpu> gpus = whole_and_mig();
  gpus[1].mig_instances[1].processes->push_back(process_of("bob"));
  const auto map = machine(gpus);
  gpusel::PickCriteria criteria = count(1);
  criteria.min_free_memory = "15GiB";
  const auto assessed = gpusel::assess(criteria, map, alice);
  EXPECT_EQ(reasons(assessed[0]), (std::vector<std::string>{"only 10.0 GiB free, 15.0 GiB needed"}));
  EXPECT_TRUE(assessed[1].fits());
  ASSERT_EQ(reasons(assessed[2]).size(), 1u);
  EXPECT_TRUE(contains(reasons(assessed[2])[0], "another user's compute process runs on it (pid 4242 of bob"));
  criteria.max_utilization = 50;
  EXPECT_TRUE(contains(reasons(gpusel::assess(criteria, map, alice)[1]).back(),
                       "its utilization is unknown (NVML does not measure MIG instances)"));
}

TEST(Pick, AMigInstanceIsVisibleWhenCudaVisibleDevicesNamesItOrItsGpu) {
  const auto by_uuid = machine(whole_and_mig(), "MIG-110bbbbb");
  EXPECT_EQ(uuids(gpusel::pick(count(1, gpusel::PickCriteria::all), by_uuid, alice)),
            std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000"});
  const auto by_gpu = machine(whole_and_mig(), "1");
  EXPECT_EQ(gpusel::pick(count(1, gpusel::PickCriteria::all), by_gpu, alice).size(), 2u)
      << "both instances of GPU 1: which one CUDA shows is CUDA's to decide";
}

TEST(Pick, ExcludesAMigInstanceByItsUuidPrefixAndAllOfThemByTheirGpu) {
  const auto map = machine(whole_and_mig());
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.exclude = {"MIG-120b"};
  EXPECT_EQ(uuids(gpusel::pick(criteria, map, alice)),
            (std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000",
                                      "GPU-0aaaaaaa-0000-0000-0000-000000000000"}));
  criteria.exclude = {"1"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), std::vector<int>{0});
  criteria.exclude = {"MIG-9"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::assess(criteria, map, alice); }), "no MIG instance has that UUID"));
}

// --- which GPUs are candidates: exclusions, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER -----

TEST(Pick, ExcludesGpusByNvidiaSmiNumberOrUuidPrefix) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 110, 0), gpu(3, 100, 0)});
  gpusel::PickCriteria criteria = count(1, gpusel::PickCriteria::all);
  criteria.exclude = {"0", "GPU-2AAA"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), (std::vector<int>{1, 3})) << "UUID prefixes ignore case";
  EXPECT_EQ(reasons(gpusel::assess(criteria, map, alice)[0]), std::vector<std::string>{"excluded (\"0\" names it)"});
  EXPECT_EQ(reasons(gpusel::assess(criteria, map, alice)[2]),
            std::vector<std::string>{"excluded (\"GPU-2AAA\" names it)"});
}

TEST(Pick, AnExclusionOfAGpuThisProcessCannotSeeIsAnError) {
  // CUDA_VISIBLE_DEVICES=2,3: GPU 1 is no candidate, so "--exclude 1" is a mistake (a typo, or CUDA's numbers
  // taken for this process's cuda:N), not a no-op.
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0), gpu(2, 110, 0), gpu(3, 100, 0)}, "2,3");
  gpusel::PickCriteria criteria;
  for (const std::string name : {"1", "GPU-1aaa", "smi:0"}) {
    criteria.exclude = {name};
    const std::string message = error_from([&] { (void)gpusel::assess(criteria, map, alice); });
    EXPECT_TRUE(contains(message, "cannot exclude \"" + name + "\": it names GPU ")) << message;
    EXPECT_TRUE(contains(message, "which CUDA_VISIBLE_DEVICES=2,3 hides, so it is no candidate anyway")) << message;
  }
  criteria.exclude = {"2"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), std::vector<int>{3});
  criteria.only_visible = false;  // the whole machine: every GPU is a candidate, so each may be excluded
  criteria.exclude = {"1"};
  EXPECT_EQ(indices(gpusel::pick(criteria, map, alice)), std::vector<int>{0});
  // A MIG instance that CUDA_VISIBLE_DEVICES hides, likewise.
  const auto mig = machine(whole_and_mig(), "0,MIG-110bbbbb");
  gpusel::PickCriteria instance;
  instance.exclude = {"MIG-120b"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::assess(instance, mig, alice); }),
                       "which CUDA_VISIBLE_DEVICES=0,MIG-110bbbbb hides"));
  instance.exclude = {"MIG-110b"};
  EXPECT_EQ(reasons(gpusel::assess(instance, mig, alice)[1]),
            std::vector<std::string>{"excluded (\"MIG-110b\" names it)"});
}

TEST(Pick, AnExclusionThatNamesNoGpuIsAnError) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0)});
  gpusel::PickCriteria criteria;
  for (const std::string name : {"2", "GPU-9", "gpu-0", "", "-1", "GPU-"}) {
    criteria.exclude = {name};
    const std::string message = error_from([&] { (void)gpusel::pick(criteria, map, alice); });
    EXPECT_TRUE(contains(message, "gpusel::pick: cannot exclude \"" + name + "\"")) << message;
  }
  criteria.exclude = {"2"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(criteria, map, alice); }),
                       "there is no GPU with that number (2 GPUs)"));
  criteria.exclude = {"GPU-"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, map, alice); }), "neither a number nor a GPU UUID"));
}

TEST(Pick, ExcludesByTheNumbersPickPrintsAndNvidiaSmisWrittenSmi) {
  // nvidia-smi 0 is an A100, 1 an H200; under FASTEST_FIRST CUDA's physical 0 is the H200.
  const auto map = machine({gpu(0, 70, 0, "NVIDIA A100-SXM4-80GB", 80), gpu(1, 130, 0)});
  const auto printed = gpusel::pick({}, map, alice);
  ASSERT_EQ(indices(printed), std::vector<int>{0});
  gpusel::PickCriteria criteria;
  criteria.exclude = {std::to_string(printed[0].physical_index)};
  const auto next = gpusel::pick(criteria, map, alice);
  EXPECT_EQ(next[0].gpu.name, "NVIDIA A100-SXM4-80GB") << "excluding what pick printed excludes that GPU";
  criteria.exclude = {"smi:0"};
  EXPECT_EQ(gpusel::pick(criteria, map, alice)[0].gpu.name, "NVIDIA H200") << "smi:0 is nvidia-smi's 0, the A100";
  criteria.exclude = {"smi:2"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(criteria, map, alice); }), "nvidia-smi numbers no GPU so"));
  criteria.exclude = {"smi:"};
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::pick(criteria, map, alice); }), "cannot exclude \"smi:\""));
}

TEST(Pick, FailsUnderAnInvalidCudaDeviceOrderAsTheRuntimeWould) {
  const auto map = machine({gpu(0, 130, 0), gpu(1, 120, 0)}, std::nullopt, "pci_bus_id");
  const std::string message = error_from([&] { (void)gpusel::pick({}, map, alice); });
  EXPECT_TRUE(contains(message, "0 of 2 GPUs fit")) << message;
  EXPECT_TRUE(
      contains(message,
               "CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID, so the CUDA runtime fails "
               "with cudaErrorInvalidDevice"))
      << message;
  gpusel::PickCriteria whole_machine;
  whole_machine.only_visible = false;
  EXPECT_FALSE(error_from([&] { (void)gpusel::pick(whole_machine, map, alice); }).empty())
      << "the order matters on the whole machine too";
}

TEST(Pick, AnAmbiguousUuidPrefixIsAnError) {
  std::vector<gpusel::Gpu> gpus = {gpu(0, 130, 0), gpu(1, 120, 0)};
  gpus[1].uuid = "GPU-0aaaaaab-0000-0000-0000-000000000000";
  gpusel::PickCriteria criteria;
  criteria.exclude = {"GPU-0aaa"};
  EXPECT_TRUE(
      contains(error_from([&] { (void)gpusel::pick(criteria, machine(gpus), alice); }), "the prefix matches 2 GPUs"));
}

TEST(Pick, ChoosesOnlyAmongTheGpusCudaVisibleDevicesShows) {
  // Slurm gave this job GPUs 1 and 3.
  const auto map = machine({gpu(0, 140, 0), gpu(1, 100, 0), gpu(2, 140, 0), gpu(3, 120, 0)}, "1,3");
  EXPECT_EQ(indices(gpusel::pick(count(1, gpusel::PickCriteria::all), map, alice)), (std::vector<int>{3, 1}));
  EXPECT_EQ(reasons(gpusel::assess({}, map, alice)[0]), std::vector<std::string>{"hidden by CUDA_VISIBLE_DEVICES=1,3"});
  gpusel::PickCriteria whole_machine = count(1, gpusel::PickCriteria::all);
  whole_machine.only_visible = false;
  EXPECT_EQ(indices(gpusel::pick(whole_machine, map, alice)), (std::vector<int>{0, 2, 3, 1}));
}

TEST(Pick, ReportsCudasPhysicalIndexWhichOnMixedModelsIsNotNvidiaSmis) {
  // nvidia-smi (PCI order): 0 is an A100 (8.0), 1 an H200 (9.0). CUDA's default
  // FASTEST_FIRST order puts the H200 first; with PCI_BUS_ID it is second.
  const std::vector<gpusel::Gpu> gpus = {gpu(0, 70, 0, "NVIDIA A100-SXM4-80GB", 80), gpu(1, 130, 0)};
  const auto fastest_first = gpusel::pick({}, machine(gpus), alice);
  ASSERT_EQ(fastest_first.size(), 1u);
  EXPECT_EQ(fastest_first[0].gpu.nvml_index, 1);
  EXPECT_EQ(fastest_first[0].physical_index, 0);
  const auto pci_order = gpusel::pick({}, machine(gpus, std::nullopt, "PCI_BUS_ID"), alice);
  EXPECT_EQ(pci_order[0].physical_index, 1);
}

// --- one UUID, one GPU (Note [One UUID, one GPU]) --------------------------------------

TEST(Assess, KeepsEachGpuItsOwnRecordWhenNvmlReportsDuplicateOrEmptyUuids) {
  // A broken or virtualized NVML can report one UUID twice, or none at all:
  // each GPU must still be described by its own record, not by the first
  // one that shares its UUID; the second of a UUID is that GPU counted again
  // (Note [One UUID, one GPU]), so only the first is picked.
  std::vector<gpusel::Gpu> gpus = {gpu(0, 10, 0), gpu(1, 20, 0), gpu(2, 30, 0), gpu(3, 40, 0)};
  gpus[1].uuid = gpus[0].uuid;
  gpus[2].uuid = "";
  gpus[3].uuid = "";
  const auto map = machine(gpus);
  const auto verdicts = gpusel::assess({}, map, alice);
  ASSERT_EQ(verdicts.size(), 4u);
  for (std::size_t i = 0; i < verdicts.size(); ++i) {
    EXPECT_EQ(verdicts[i].physical_index, static_cast<int>(i));
    EXPECT_EQ(verdicts[i].gpu.nvml_index, static_cast<int>(i));
    EXPECT_EQ(verdicts[i].gpu.pci_bus_id, gpus[i].pci_bus_id);
    EXPECT_EQ(verdicts[i].gpu.memory_free_bytes, gpus[i].memory_free_bytes);
  }
  EXPECT_EQ(indices(gpusel::pick(count(3), map, alice)), (std::vector<int>{3, 2, 0}));
  EXPECT_EQ(
      reasons(verdicts[1]),
      std::vector<std::string>{"NVML reports the UUID of GPU 0 for it too (GPU-0aaaaaaa-0000-0000-0000-000000000000), "
                               "so gpusel counts the two as one GPU, GPU 0"});
  EXPECT_TRUE(verdicts[2].fits() && verdicts[3].fits()) << "an empty UUID names no GPU, so it is no duplicate";
}

TEST(Assess, AMigInstanceNvmlReportsTwiceIsOneGpu) {
  std::vector<gpusel::Gpu> gpus = whole_and_mig();
  gpus[1].mig_instances[1].uuid = gpus[1].mig_instances[0].uuid;
  const auto map = machine(gpus);
  const auto picked = gpusel::pick(count(1, gpusel::PickCriteria::all), map, alice);
  EXPECT_EQ(uuids(picked), (std::vector<std::string>{"MIG-110bbbbb-0000-0000-0000-000000000000",
                                                     "GPU-0aaaaaaa-0000-0000-0000-000000000000"}))
      << "printed once, not MIG-110b...,MIG-110b...";
  EXPECT_TRUE(contains(reasons(gpusel::assess({}, map, alice)[2]).at(0),
                       "NVML reports the UUID of MIG instance MIG-110bbbbb-0000-0000-0000-000000000000 (GI 1, CI 0) "
                       "for it too"));
}

}  // namespace
