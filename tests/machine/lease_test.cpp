// Specification of leases (include/gpusel/machine/lease.hpp): a GPU leased once cannot be
// leased again until the lease ends, whoever asks; its files are made and checked
// safely (the directory's own rules: lease_directory_test.cpp). flock locks belong to open files, so two
// leases in one process exclude each other as two processes' do (the command's
// tests, tests/tool, check it across processes). The attacks of another local
// user (Note [Who can break a lease]) are staged with other uids in forked
// children, and in a private mount namespace for /tmp itself: they need root.
#include "gpusel/machine/lease.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpusel/machine/local_rank.hpp"
#include "lease_directory.hpp"
#include "staged_users.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;
using gpusel_test::error_from;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;
using namespace gpusel_test::staged;

const std::string kGpu = "GPU-1b2c3d4e-0000-4000-8000-000000000001";
const std::string kOtherGpu = "GPU-2c3d4e5f-0000-4000-8000-000000000002";
const std::string kInstanceA = "MIG-aaaaaaaa-0000-4000-8000-000000000001";
const std::string kInstanceB = "MIG-bbbbbbbb-0000-4000-8000-000000000002";

// This user's lock file of `uuid` in `directory` (Note [Who can break a lease]).
std::string own_file(const std::string& directory, const std::string& uuid) {
  return directory + "/gpusel-" + uuid + "." + std::to_string(geteuid()) + ".lock";
}

TEST(Lease, AGpuLeasedOnceCannotBeLeasedAgainUntilTheLeaseEnds) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> first = gpusel::try_lease_gpu(kGpu);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->uuids(), std::vector<std::string>{kGpu});
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value());
  const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
  ASSERT_TRUE(holder.has_value());
  EXPECT_TRUE(contains(*holder, "leased by another job (pid " + std::to_string(getpid()))) << *holder;
  EXPECT_TRUE(contains(*holder, own_file(directory.leases(), kGpu))) << *holder;
  EXPECT_FALSE(gpusel::lease_holder(kOtherGpu).has_value()) << "other GPUs stay free";
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_gpus({kOtherGpu, kGpu}); }), kGpu + " is leased"));
  EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value()) << "all or none: the failed lease_gpus kept nothing";

  gpusel::GpuLease moved = std::move(*first);
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "a moved lease still holds";
  moved.release();
  EXPECT_TRUE(moved.empty());
  EXPECT_FALSE(gpusel::lease_holder(kGpu).has_value());
  {
    const gpusel::GpuLease again = gpusel::lease_gpu(kGpu);
    EXPECT_FALSE(gpusel::lease_holder(kGpu) == std::nullopt);
  }
  EXPECT_FALSE(gpusel::lease_holder(kGpu).has_value()) << "destroying the lease releases the GPU";
}

TEST(Lease, FilesAreMadeForEveryUserAndTheDirectoryIsPrivateWhenNamed) {
  ScopedLeaseDirectory directory;
  const gpusel::GpuLease lease = gpusel::lease_gpu(kGpu);
  struct stat status {};
  ASSERT_EQ(stat(own_file(directory.leases(), kGpu).c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 07777, 01644u) << "past the umask: every user may open it to look; sticky, so no "
                                               "cleaner ages it (Note [Leases against cleaners])";
  EXPECT_EQ(status.st_uid, geteuid()) << "each user locks a file of its own";
  ASSERT_EQ(stat(directory.leases().c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 07777, 0700u) << "a GPUSEL_LEASE_DIR made by gpusel is private";
  EXPECT_EQ(gpusel::lease_directory(), directory.leases());
}

TEST(Lease, RefusesASymlinkedOrUnstickySharedDirectoryAndOddNames) {
  ScopedLeaseDirectory directory;
  ASSERT_EQ(mkdir((directory.parent() + "/elsewhere").c_str(), 0700), 0);
  ASSERT_EQ(symlink("elsewhere", directory.leases().c_str()), 0);
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kGpu); }), "it is a symlink or not a directory"));
  ASSERT_EQ(unlink(directory.leases().c_str()), 0);
  ASSERT_EQ(mkdir(directory.leases().c_str(), 0700), 0);
  ASSERT_EQ(chmod(directory.leases().c_str(), 0777), 0);
  EXPECT_TRUE(
      contains(error_from([] { (void)gpusel::try_lease_gpu(kGpu); }), "writable by other users but not sticky"));
  ASSERT_EQ(chmod(directory.leases().c_str(), 01777), 0);
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "mode 1777 is what the shared directory has";
  EXPECT_TRUE(
      contains(error_from([] { (void)gpusel::try_lease_gpu("GPU-../../etc/passwd"); }), "not a GPU or MIG UUID"));
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(""); }), "without a UUID"));
  // A lock file that is a symlink is never followed.
  ASSERT_EQ(symlink("/etc/passwd", own_file(directory.leases(), kOtherGpu).c_str()), 0);
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kOtherGpu); }), "cannot be opened"));
}

TEST(Lease, MigInstancesOfOneGpuCoexistAndExcludeTheirWholeGpu) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> a = gpusel::try_lease_gpu(kInstanceA, kGpu);
  ASSERT_TRUE(a.has_value());
  std::optional<gpusel::GpuLease> b = gpusel::try_lease_gpu(kInstanceB, kGpu);
  EXPECT_TRUE(b.has_value()) << "another instance of the same GPU";
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "the whole GPU, while instances of it are leased";
  EXPECT_FALSE(gpusel::try_lease_gpu(kInstanceA, kGpu).has_value());
  a.reset();
  b.reset();
  const gpusel::GpuLease whole = gpusel::lease_gpu(kGpu);
  EXPECT_FALSE(gpusel::try_lease_gpu(kInstanceA, kGpu).has_value()) << "an instance, while its whole GPU is leased";
  EXPECT_TRUE(gpusel::lease_holder(kInstanceA, kGpu).has_value());
}

// Only taking a lease makes the lease directory: a look at who holds a GPU (pick's) finds
// none where there is no directory, and leaves none behind, so a user's read-only pick
// does not make the shared directory theirs.
TEST(Lease, LookingWhereNoLeaseDirectoryIsFindsNoHolderAndMakesNone) {
  ScopedLeaseDirectory directory;
  EXPECT_FALSE(gpusel::lease_holder(kGpu).has_value());
  EXPECT_FALSE(gpusel::lease_holder(kInstanceA, kGpu).has_value());
  struct stat status {};
  EXPECT_NE(stat(directory.leases().c_str(), &status), 0) << "a look made the lease directory";
  const gpusel::GpuLease lease = gpusel::lease_gpu(kGpu);
  EXPECT_EQ(stat(directory.leases().c_str(), &status), 0) << "a lease makes it";
  EXPECT_TRUE(gpusel::lease_holder(kGpu).has_value());
}

// A lease names its GPU by the whole UUID as NVML reports it: an upper-case UUID, a prefix
// or another spelling would be a lock file of its own, excluding no job that names the GPU
// as NVML does.
TEST(Lease, NamesItsGpuOnlyByTheCanonicalUuidElseAnErrorSaysWhatWasGiven) {
  ScopedLeaseDirectory directory;
  const std::string upper = "GPU-1B2C3D4E-0000-4000-8000-000000000001";
  for (const std::string& odd :
       {upper, std::string("GPU-1b2c3d4e"), std::string("GPU-1b2c3d4e-0000-4000-8000-00000000000"),
        std::string("GPU-1b2c3d4e-0000-4000-8000-0000000000011"), std::string("GPU-1b2c3d4e00004000800000000000001"),
        std::string("1b2c3d4e-0000-4000-8000-000000000001"), std::string("gpu-1b2c3d4e-0000-4000-8000-000000000001"),
        std::string("MIG-1b2c3d4e-0000-4000-8000-00000000000g"),
        std::string("GPU-1b2c3d4e-0000-4000-8000-00000000-001")}) {
    const std::string refused = error_from([&odd] { (void)gpusel::try_lease_gpu(odd); });
    EXPECT_TRUE(contains(refused, "cannot lease \"" + odd + "\": not a GPU or MIG UUID")) << odd << ": " << refused;
    EXPECT_TRUE(contains(refused, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx")) << refused;
    EXPECT_TRUE(contains(error_from([&odd] { (void)gpusel::lease_gpu(odd); }), "\"" + odd + "\"")) << odd;
    EXPECT_TRUE(contains(error_from([&odd] { (void)gpusel::lease_gpus({kGpu, odd}); }), "\"" + odd + "\"")) << odd;
  }
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "the failed lease_gpus kept nothing";
  EXPECT_TRUE(contains(error_from([&upper] { (void)gpusel::try_lease_gpu(kInstanceA, upper); }), upper))
      << "a MIG instance's GPU is named canonically too";
}

TEST(Lease, IsLeaseNameAsksWithoutThrowingWhatTryLeaseGpuRefuses) {
  static_assert(noexcept(gpusel::is_lease_name(std::string_view())), "a question, not a check that throws");
  EXPECT_TRUE(gpusel::is_lease_name(kGpu));
  EXPECT_TRUE(gpusel::is_lease_name(kInstanceA));
  for (const char* odd : {"", "GPU-1B2C3D4E-0000-4000-8000-000000000001", "GPU-1b2c3d4e", "../../etc/passwd",
                          "MIG-1b2c3d4e-0000-4000-8000-00000000000g", "GPU-1b2c3d4e-0000-4000-8000-00000000-001"}) {
    EXPECT_FALSE(gpusel::is_lease_name(odd)) << odd;
    EXPECT_FALSE(error_from([odd] { (void)gpusel::try_lease_gpu(odd); }).empty()) << odd;
  }
}

// What `gpusel run` hands its command (Note [The job holds the lease]): a copy of the
// descriptors holds the lease on its own once the lease itself has ended.
TEST(Lease, ACopyOfItsDescriptorsHoldsTheLeaseAfterTheLeaseEnds) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(kInstanceA, kGpu);
  ASSERT_TRUE(lease.has_value());
  const std::vector<int> descriptors = lease->file_descriptors();
  ASSERT_EQ(descriptors.size(), 2u)
      << "the instance's file and its GPU's: no directory (Note [Leases against cleaners])";
  std::vector<int> copies;
  for (const int descriptor : descriptors) {
    EXPECT_NE(fcntl(descriptor, F_GETFD) & FD_CLOEXEC, 0) << "a started command inherits none by accident";
    copies.push_back(fcntl(descriptor, F_DUPFD_CLOEXEC, 0));
    ASSERT_GE(copies.back(), 0);
  }
  lease->release();
  EXPECT_TRUE(lease->file_descriptors().empty());
  EXPECT_FALSE(gpusel::try_lease_gpu(kInstanceA, kGpu).has_value()) << "the copies hold the instance";
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "and its GPU, shared";
  EXPECT_TRUE(gpusel::try_lease_gpu(kInstanceB, kGpu).has_value()) << "shared: another instance is free";
  for (const int copy : copies) close(copy);
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "the last copy closed ends the lease";
}

// Inside `gpusel run` (Note [The job's lease]): the command inherits a copy of run's
// descriptor and GPUSEL_JOB_LEASE names it.
TEST(JobLease, AGpuTheJobHoldsIsLeasedAsTheJobsWithNoLockOfItsOwn) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> run = gpusel::try_lease_gpu(kInstanceA, kGpu);  // what gpusel run holds
  ASSERT_TRUE(run.has_value());
  ASSERT_EQ(run->exclusive_descriptors().size(), 1u);
  ASSERT_EQ(run->file_descriptors().size(), 2u) << "its GPU's shared lock and the instance's";
  EXPECT_EQ(run->exclusive_descriptors().front(), run->file_descriptors()[1]) << "the instance's, not its GPU's";
  const int inherited = fcntl(run->exclusive_descriptors().front(), F_DUPFD_CLOEXEC, 0);
  const ScopedEnvironment job("GPUSEL_JOB_LEASE", kInstanceA + ":" + std::to_string(inherited));
  EXPECT_EQ(gpusel::allotment(0).job_gpus, std::vector<std::string>{kInstanceA});
  EXPECT_TRUE(
      contains(gpusel::allotment(0).describe(), "gpusel run leased this job 1 GPU (GPUSEL_JOB_LEASE=" + kInstanceA +
                                                    ":" + std::to_string(inherited) + "); choosing among them.\n"));
  const std::optional<std::string> holder = gpusel::lease_holder(kInstanceA, kGpu);
  ASSERT_TRUE(holder.has_value());
  EXPECT_TRUE(contains(*holder, "leased by this job (pid " + std::to_string(getpid()))) << *holder;
  EXPECT_TRUE(gpusel::lease_states({kInstanceA}).front().this_job) << "what gpusel list shows inside the job";
  EXPECT_FALSE(gpusel::lease_states({kInstanceB}).front().this_job);
  std::optional<gpusel::GpuLease> inside = gpusel::try_lease_gpu(kInstanceA, kGpu);
  ASSERT_TRUE(inside.has_value()) << "the job's own lock is no other job's";
  EXPECT_NE(inside->exclusive_descriptors().front(), inherited) << "a copy of the job's descriptor";
  EXPECT_EQ(inside->job_uuids(), std::vector<std::string>{kInstanceA});
  EXPECT_EQ(inside->exclusive_descriptors().size(), 1u);
  run.reset();
  close(inherited);
  EXPECT_FALSE(gpusel::try_lease_gpu(kInstanceA, kGpu).has_value()) << "the lease inside holds while it lives";
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "the instance's GPU too, shared";
  inside->release();
  EXPECT_TRUE(gpusel::try_lease_gpu(kInstanceA, kGpu).has_value()) << "and the GPU is free once the job's is gone";
}

TEST(JobLease, TheVariableAloneLeasesNothingAndSaysWhy) {
  ScopedLeaseDirectory directory;
  gpusel::GpuLease other = gpusel::lease_gpu(kGpu);  // another job's
  const int unlocked = open(own_file(directory.leases(), kGpu).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(unlocked, 0);
  const auto problems = [](const std::string& value) {
    const ScopedEnvironment job("GPUSEL_JOB_LEASE", value);
    const gpusel::Allotment allotment = gpusel::allotment(0);
    EXPECT_TRUE(allotment.job_gpus.empty()) << value;
    EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << value;
    return allotment.job_lease_problems;
  };
  EXPECT_TRUE(contains(
      problems(kGpu + ":" + std::to_string(unlocked)),
      "another process holds " + own_file(directory.leases(), kGpu) + ", not descriptor " + std::to_string(unlocked)));
  EXPECT_TRUE(contains(problems(kGpu + ":1000"), "descriptor 1000 is not open in this process"));
  EXPECT_TRUE(contains(problems(kGpu + ":" + std::to_string(unlocked) + "x"), "is not UUID:descriptor"));
  const int elsewhere = open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_TRUE(contains(problems(kGpu + ":" + std::to_string(elsewhere)), "is not a lock file of " + kGpu));
  close(elsewhere);
  const int free_file = open(own_file(directory.leases(), kGpu).c_str(), O_RDONLY | O_CLOEXEC);
  close(unlocked);
  other.release();
  const ScopedEnvironment job("GPUSEL_JOB_LEASE", kGpu + ":" + std::to_string(free_file));
  EXPECT_TRUE(contains(gpusel::allotment(0).job_lease_problems, "holds no lock on"));
  close(free_file);
}

// What `gpusel list` shows (lease_states): free, or held, by whose file and a live process of
// the job, its name and start; once the process that took the lock has ended, one that holds it
// still (a job's command, after kill -9 of gpusel run) is named.
TEST(Lease, StatesNameALiveProcessOfTheJobThatHoldsEachGpu) {
  ScopedLeaseDirectory directory;
  EXPECT_EQ(gpusel::lease_states({kGpu}).front().describe(), "free") << "no lease directory: nothing is held";
  const gpusel::GpuLease lease = gpusel::lease_gpu(kGpu);
  const std::vector<gpusel::LeaseState> states = gpusel::lease_states({kGpu, kOtherGpu});
  ASSERT_EQ(states.size(), 2u);
  EXPECT_TRUE(states[0].held);
  EXPECT_EQ(states[0].pid, std::optional<long>(getpid()));
  std::string command;
  std::getline(std::ifstream("/proc/self/comm"), command);
  EXPECT_EQ(states[0].command, command);
  ASSERT_TRUE(states[0].started.has_value());
  EXPECT_LE(*states[0].started, static_cast<std::int64_t>(std::time(nullptr)));
  EXPECT_GE(*states[0].started, static_cast<std::int64_t>(std::time(nullptr)) - 600) << "this test started now";
  EXPECT_EQ(states[0].user, std::optional<uid_t>(geteuid())) << "the holding process's user";
  EXPECT_EQ(states[0].lock_file, own_file(directory.leases(), kGpu));
  EXPECT_TRUE(contains(states[0].describe(),
                       "leased by another job (pid " + std::to_string(getpid()) + " " + command + " since "))
      << states[0].describe();
  EXPECT_EQ(states[1].describe(), "free");

  int report[2], done[2];
  ASSERT_EQ(pipe(report), 0);
  ASSERT_EQ(pipe(done), 0);
  std::fflush(stdout);
  const pid_t locker = fork();  // takes the lease, starts a process that inherits it, and ends
  ASSERT_GE(locker, 0);
  if (locker == 0) {
    close(report[0]);
    close(done[1]);
    const gpusel::GpuLease inherited = gpusel::lease_gpu(kOtherGpu);
    if (fork() == 0) {  // the job's command: holds the lease until the test closes `done`
      const pid_t self = getpid();
      (void)!write(report[1], &self, sizeof self);
      char byte = 0;
      (void)!read(done[0], &byte, 1);
    }
    _exit(0);
  }
  close(report[1]);
  close(done[0]);
  pid_t command_pid = 0;
  ASSERT_EQ(read(report[0], &command_pid, sizeof command_pid), static_cast<ssize_t>(sizeof command_pid));
  ASSERT_EQ(waitpid(locker, nullptr, 0), locker);
  const gpusel::LeaseState held = gpusel::lease_states({kOtherGpu}).front();
  EXPECT_TRUE(held.held);
  EXPECT_EQ(held.pid, std::optional<long>(command_pid)) << held.describe() << " (the locker was " << locker << ")";
  close(done[1]);
  close(report[0]);
}

TEST(Lease, OneUnusableLockFileRejectsThatGpuAloneWithTheReason) {
  ScopedLeaseDirectory directory;
  const gpusel::GpuLease first = gpusel::lease_gpu(kOtherGpu);  // makes the directory
  // A directory where kGpu's lock file would be, under either name gpusel ever used.
  ASSERT_EQ(mkdir((directory.leases() + "/" + kGpu + ".lock").c_str(), 0700), 0);
  ASSERT_EQ(mkdir(own_file(directory.leases(), kGpu).c_str(), 0700), 0);
  std::optional<std::string> reason;
  EXPECT_EQ(error_from([&] { reason = gpusel::lease_holder(kGpu); }), "") << "a look says why, and throws nothing";
  ASSERT_TRUE(reason.has_value());
  EXPECT_TRUE(contains(*reason, "cannot be leased: its lease file " + own_file(directory.leases(), kGpu) +
                                    " is not a regular file (it belongs to "))
      << *reason;
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(contains(refused, "cannot lease " + kGpu + ": its lease file")) << refused;
  EXPECT_TRUE(gpusel::lease_holder(kOtherGpu).has_value()) << "other GPUs are looked at as before";
  EXPECT_TRUE(gpusel::try_lease_gpu(kInstanceA, kOtherGpu) == std::nullopt);
}

TEST(Lease, AMigInstanceLeasedByItsUuidAloneHoldsItsGpuShared) {
  const std::string parent = "GPU-3d4e5f60-0000-4000-8000-000000000003";
  const std::string instance = "MIG-5b6c7d8e-0000-4000-8000-000000000001";
  const gpusel_test::FakeNvmlMachine machine(
      "gpu uuid=GPU-0a1b2c3d-0000-4000-8000-000000000000\n"
      "gpu uuid=" +
      parent +
      " mig=1\n"
      "mig gpu=1 uuid=MIG-4a5b6c7d-0000-4000-8000-000000000000 gi=1 ci=0\n"
      "mig gpu=1 uuid=" +
      instance + " gi=2 ci=0\n");
  ScopedLeaseDirectory directory;
  const gpusel::GpuLease lease = gpusel::lease_gpu(instance);
  std::fflush(stdout);
  const pid_t child = fork();  // another process: a job that wants the whole GPU
  ASSERT_GE(child, 0);
  if (child == 0) _exit(gpusel::try_lease_gpu(parent).has_value() ? 1 : 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the whole GPU was leased beside its instance";
  EXPECT_FALSE(gpusel::try_lease_gpu(parent).has_value());
  EXPECT_TRUE(gpusel::try_lease_gpu("MIG-4a5b6c7d-0000-4000-8000-000000000000").has_value())
      << "another instance of the same GPU";
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_gpu("MIG-ffffffff-0000-4000-8000-000000000009"); }),
                       "NVML does not list it as a MIG instance"));
}

// --- another local user (Note [Who can break a lease]) ----------------------

TEST(LeaseAgainstAnotherUser, RemovingFilesCannotGiveASecondJobAHeldGpu) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  // Mallory makes the file a job would lock, before anyone (as gpusel once named it).
  as_user(kMallory, [&] {
    const std::string planted = shared.leases() + "/" + kGpu + ".lock";
    const int fd = open(planted.c_str(), O_RDONLY | O_CREAT | O_EXCL, 0666);
    EXPECT_GE(fd, 0);
    close(fd);
    chmod(planted.c_str(), 0666);
  });
  const LeaseHeldBy alice(kAlice, kGpu);
  ASSERT_TRUE(alice.held());
  // ... then removes every file she can, as the owner of the files (or of the directory) could.
  as_user(kMallory, [&] { remove_what_can_be_removed(shared.leases()); });
  as_user(kBob, [] {
    EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "a second job got the GPU another job holds";
    const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
    EXPECT_TRUE(holder && contains(*holder, "leased by another job (pid ") && contains(*holder, ", uid 4102, lock "))
        << holder.value_or("free");
  });
}

TEST(LeaseAgainstAnotherUser, AFileUnderAnotherUsersNameOrUnreadableBlocksThatGpuAloneNamingItsOwner) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  // Mallory squats Bob's file name for kGpu.
  as_user(kMallory, [&] {
    const std::string planted = shared.leases() + "/gpusel-" + kGpu + "." + std::to_string(kBob) + ".lock";
    const int fd = open(planted.c_str(), O_RDONLY | O_CREAT | O_EXCL, 0644);
    EXPECT_GE(fd, 0);
    close(fd);
  });
  as_user(kBob, [] {
    const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
    EXPECT_TRUE(contains(refused, "is not this user's: it belongs to uid 4101")) << refused;
    const std::optional<std::string> reason = gpusel::lease_holder(kGpu);
    EXPECT_TRUE(reason && contains(*reason, "cannot be leased: ")) << reason.value_or("free");
    EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value()) << "the other GPUs stay leasable";
  });
  // Alice leases kOtherGpu once, then makes her file unreadable: whether she holds it cannot be told.
  as_user(kAlice, [&] {
    EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value());
    EXPECT_EQ(chmod((shared.leases() + "/gpusel-" + kOtherGpu + "." + std::to_string(kAlice) + ".lock").c_str(), 0), 0);
  });
  as_user(kBob, [] {
    const std::optional<std::string> reason = gpusel::lease_holder(kOtherGpu);
    EXPECT_TRUE(reason && contains(*reason, "of uid 4102 cannot be opened")) << reason.value_or("free");
    EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kOtherGpu); }), "of uid 4102 cannot be opened"));
  });
}

// A rootless container's user writes uid 0 in its files' names, and the host sees them owned by
// that user (Note [Lease files]): a held file counts whatever uid its name gives.
TEST(LeaseAgainstAnotherUser, AHeldFileCountsWhateverUidItsNameGives) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  for (const uid_t named : {uid_t{0}, kMallory, uid_t{4199}}) {
    const std::string name = shared.leases() + "/gpusel-" + kGpu + "." + std::to_string(named) + ".lock";
    const LockHeldBy alice(kAlice, name, O_RDONLY | O_CREAT | O_EXCL);  // Alice's job, under another uid's name
    ASSERT_TRUE(alice.held());
    const pid_t child = alice.pid();
    as_user(kBob, [&] {
      EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "a file named for uid " << named << " was skipped";
      const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
      EXPECT_TRUE(holder && contains(*holder, "leased by another job (pid " + std::to_string(child)))
          << holder.value_or("free");
    });
    unlink(name.c_str());
  }
}

TEST(LeaseAgainstAnotherUser, JobsOfSeveralUsersLeasingAtOnceNeverHoldOneGpuTogether) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  const std::string marks = shared.parent() + "/marks";  // a winner's mark, made exclusively while it holds
  ASSERT_EQ(mkdir(marks.c_str(), 0700), 0);
  ASSERT_EQ(chmod(marks.c_str(), 01777), 0);
  std::vector<pid_t> children;
  const uid_t users[] = {kAlice, kBob, 0, kAlice, kBob, 0};
  for (const uid_t user : users) {
    std::fflush(stdout);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(user, user, user) != 0 || setresuid(user, user, user) != 0) _exit(3);
      int wins = 0;
      for (int round = 0; round < 40; ++round) {
        std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(kGpu);
        if (!lease) continue;
        const std::string mark = marks + "/held";
        const int fd = open(mark.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0) _exit(2);  // another job holds the GPU too
        close(fd);
        usleep(300);
        unlink(mark.c_str());
        ++wins;
      }
      _exit(wins > 0 ? 0 : 4);
    }
    children.push_back(child);
  }
  int won = 0;
  for (const pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 2) << "two jobs held the GPU at once";
    EXPECT_NE(WEXITSTATUS(status), 3);
    if (WEXITSTATUS(status) == 0) ++won;
  }
  EXPECT_GE(won, 1) << "no job ever got the GPU";
}

TEST(LeaseAgainstAnotherUser, AStaleFileOfAJobThatEndedBlocksNoOne) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  { const LeaseHeldBy alice(kAlice, kGpu); }  // ends, as a crashed job does: its file stays
  as_user(kBob, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()); });
  const LeaseHeldBy bob(kBob, kGpu);
  ASSERT_TRUE(bob.held());
  as_user(kAlice, [] { EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "Bob's lease holds against Alice"; });
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "and against root";
}

}  // namespace
