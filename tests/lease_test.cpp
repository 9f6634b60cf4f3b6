// Specification of leases (include/gpusel/lease.hpp): a GPU leased once cannot be
// leased again until the lease ends, whoever asks; the lease directory and its
// files are made and checked safely. flock locks belong to open files, so two
// leases in one process exclude each other as two processes' do (the command's
// tests, tests/tool, check it across processes). The attacks of another local
// user (Note [Who can break a lease]) are staged with other uids in forked
// children, and in a private mount namespace for /tmp itself: they need root.
#include "gpusel/lease.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lease_directory.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;
using gpusel_test::error_from;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;

const std::string kGpu = "GPU-1b2c3d4e-0000-4000-8000-000000000001";
const std::string kOtherGpu = "GPU-2c3d4e5f-0000-4000-8000-000000000002";
const std::string kInstanceA = "MIG-aaaaaaaa-0000-4000-8000-000000000001";
const std::string kInstanceB = "MIG-bbbbbbbb-0000-4000-8000-000000000002";

// This user's lock file of `uuid` in `directory` (Note [Who can break a lease]).
std::string own_file(const std::string& directory, const std::string& uuid) {
  return directory + "/" + uuid + "." + std::to_string(geteuid()) + ".lock";
}

// Three local users for the staged attacks: no passwd entries, so they show as "uid N".
constexpr uid_t kMallory = 4101;
constexpr uid_t kAlice = 4102;
constexpr uid_t kBob = 4103;

// Runs `body` in a forked child as `uid` (its group too, no others); the child's
// failed expectations fail the test (the child prints them, and exits 1).
void as_user(uid_t uid, const std::function<void()>& body) {
  std::fflush(stdout);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
    body();
    std::fflush(stdout);
    _exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child as uid " << uid << " failed: " << status;
}

// A lease of `uuid` held by a child running as `uid` until destroyed.
class LeaseHeldBy {
 public:
  LeaseHeldBy(uid_t uid, const std::string& uuid) {
    int ready[2], done[2];
    if (pipe(ready) != 0 || pipe(done) != 0) throw std::runtime_error("pipe failed");
    std::fflush(stdout);
    child_ = fork();
    if (child_ == 0) {
      close(ready[0]);
      close(done[1]);
      if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
      char answer = 'n';
      try {
        if (std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(uuid)) {
          answer = 'y';
          (void)!write(ready[1], &answer, 1);
          (void)!read(done[0], &answer, 1);  // holds the lease until the parent closes its end
          _exit(0);
        }
      } catch (const gpusel::Error& error) {
        std::fprintf(stderr, "LeaseHeldBy: %s\n", error.what());
      }
      (void)!write(ready[1], &answer, 1);
      _exit(1);
    }
    close(ready[1]);
    close(done[0]);
    done_ = done[1];
    char answer = 'n';
    held_ = read(ready[0], &answer, 1) == 1 && answer == 'y';
    close(ready[0]);
  }
  ~LeaseHeldBy() {
    close(done_);
    if (child_ > 0) waitpid(child_, nullptr, 0);
  }
  LeaseHeldBy(const LeaseHeldBy&) = delete;
  LeaseHeldBy& operator=(const LeaseHeldBy&) = delete;
  bool held() const { return held_; }

 private:
  pid_t child_ = -1;
  int done_ = -1;
  bool held_ = false;
};

// Whether this process may become another user (root with CAP_SETUID and CAP_SETGID), tried in a child.
bool can_become_another_user() {
  if (geteuid() != 0) return false;
  const pid_t child = fork();
  if (child == 0)
    _exit(setgroups(0, nullptr) == 0 && setresgid(kBob, kBob, kBob) == 0 && setresuid(kBob, kBob, kBob) == 0 ? 0 : 1);
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Skips the test unless this process can stage other local users (root: CI runs as root).
#define SKIP_UNLESS_ROOT()        \
  if (!can_become_another_user()) \
  GTEST_SKIP() << "stages other local users with setresuid: needs root with CAP_SETUID (CI runs as root)"

// A lease directory `leases` under a directory every staged user may enter.
class SharedParent {
 public:
  SharedParent() { chmod(directory_.parent().c_str(), 0755); }
  std::string leases() const { return directory_.leases(); }
  // The lease directory, made as root provisions it: install -d -m 1777 -o root.
  void provision() const {
    mkdir(leases().c_str(), 0700);
    chmod(leases().c_str(), 01777);
  }
  const std::string& parent() const { return directory_.parent(); }

 private:
  ScopedLeaseDirectory directory_;
};

// Unlinks every entry of `directory` this user may unlink (what a hostile user tries).
void remove_what_can_be_removed(const std::string& directory) {
  DIR* entries = opendir(directory.c_str());
  if (entries == nullptr) return;
  while (const dirent* entry = readdir(entries)) (void)unlink((directory + "/" + entry->d_name).c_str());
  closedir(entries);
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
  EXPECT_EQ(status.st_mode & 0777, 0644u) << "past the umask: every user may open it to look";
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

// What `gpusel run` hands its command (Note [The job holds the lease]): a copy of the
// descriptors holds the lease on its own once the lease itself has ended.
TEST(Lease, ACopyOfItsDescriptorsHoldsTheLeaseAfterTheLeaseEnds) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(kInstanceA, kGpu);
  ASSERT_TRUE(lease.has_value());
  const std::vector<int> descriptors = lease->file_descriptors();
  ASSERT_EQ(descriptors.size(), 2u) << "the instance's file and its GPU's";
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

TEST(Lease, ARelativeLeaseDirectoryIsRefusedNamingTheVariable) {
  const ScopedEnvironment relative("GPUSEL_LEASE_DIR", std::string("leases"));
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(contains(refused, "GPUSEL_LEASE_DIR=\"leases\" is a relative path")) << refused;
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_directory(); }), "GPUSEL_LEASE_DIR"));
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_holder(kGpu); }), "give an absolute one"));
}

TEST(Lease, ADirectoryAboveTheLeasesThatOthersCouldChangeIsRefused) {
  ScopedLeaseDirectory directory;
  ASSERT_EQ(chmod(directory.parent().c_str(), 0777), 0);  // anyone could rename the lease directory away
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(
      contains(refused, "cannot be trusted: " + directory.parent() + " is writable by other users but not sticky"))
      << refused;
  ASSERT_EQ(chmod(directory.parent().c_str(), 01777), 0);
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "sticky, as /tmp is: only its owner and root rename";
}

TEST(Lease, ALeaseDirectoryOnANetworkFilesystemIsRefused) {
  EXPECT_STREQ(gpusel::detail::network_filesystem(0x6969u), "NFS");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0xFF534D42u), "CIFS");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0xFE534D42u), "SMB2");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0x517Bu), "SMB");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0x0BD00BD0u), "Lustre");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0x47504653u), "GPFS");
  EXPECT_STREQ(gpusel::detail::network_filesystem(0x00C36400u), "CephFS");
  for (const std::uint32_t local : {0x01021994u /* tmpfs */, 0xEF53u /* ext4 */, 0x58465342u /* xfs */,
                                    0x9123683Eu /* btrfs */, 0x794C7630u /* overlayfs */})
    EXPECT_EQ(gpusel::detail::network_filesystem(local), nullptr) << std::hex << local;
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

TEST(LeaseAgainstAnotherUser, TheDefaultDirectoryMadeByAnotherUserIsRefusedNamingItsOwner) {
  SKIP_UNLESS_ROOT();
  std::fflush(stdout);
  const pid_t child = fork();  // a private mount namespace with a /tmp of its own
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0)
      _exit(77);
    const ScopedEnvironment unset("GPUSEL_LEASE_DIR", std::nullopt);
    as_user(kMallory, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value()); });  // makes it first
    struct stat status {};
    EXPECT_EQ(stat("/tmp/gpusel-leases", &status), 0);
    EXPECT_EQ(status.st_uid, kMallory);
    for (const uid_t user : {kAlice, kBob})
      as_user(user, [] {
        const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
        EXPECT_TRUE(contains(refused, "/tmp/gpusel-leases cannot be trusted: it belongs to uid 4101")) << refused;
        EXPECT_TRUE(contains(refused, "install -d -m 1777 -o root /tmp/gpusel-leases")) << refused;
        EXPECT_TRUE(contains(refused, "or set GPUSEL_LEASE_DIR to a directory of your own")) << refused;
      });
    as_user(kMallory, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "its owner may use it"; });
    // Provisioned by root, it serves everyone.
    EXPECT_EQ(std::system("rm -rf /tmp/gpusel-leases && install -d -m 1777 -o root /tmp/gpusel-leases"), 0);
    for (const uid_t user : {kMallory, kAlice, kBob})
      as_user(user, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()); });
    std::fflush(stdout);
    _exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "no private mount namespace here (unshare -m)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

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
    const std::string planted = shared.leases() + "/" + kGpu + "." + std::to_string(kBob) + ".lock";
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
    EXPECT_EQ(chmod((shared.leases() + "/" + kOtherGpu + "." + std::to_string(kAlice) + ".lock").c_str(), 0), 0);
  });
  as_user(kBob, [] {
    const std::optional<std::string> reason = gpusel::lease_holder(kOtherGpu);
    EXPECT_TRUE(reason && contains(*reason, "of uid 4102 cannot be opened")) << reason.value_or("free");
    EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kOtherGpu); }), "of uid 4102 cannot be opened"));
  });
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

TEST(LeaseAgainstAnotherUser, ANamedDirectoryIsItsMakersAndAnotherUserIsToldHowToShareOne) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  ASSERT_EQ(chmod(shared.parent().c_str(), 01777), 0);  // as /tmp is: anyone may make the directory
  as_user(kAlice, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()); });
  as_user(kBob, [&] {
    const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
    EXPECT_TRUE(contains(refused, shared.leases() + " belongs to uid 4102")) << refused;
    EXPECT_TRUE(contains(refused, "install -d -m 1777 -o root " + shared.leases())) << refused;
  });
  // A directory above the leases that another user owns could be swapped: refused too.
  const std::string above = shared.parent() + "/mallorys";
  ASSERT_EQ(mkdir(above.c_str(), 0755), 0);
  ASSERT_EQ(chown(above.c_str(), kMallory, kMallory), 0);
  const ScopedEnvironment inside("GPUSEL_LEASE_DIR", above + "/leases");
  as_user(kAlice, [&] {
    const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
    EXPECT_TRUE(contains(refused, "cannot be trusted: " + above + " belongs to uid 4101")) << refused;
  });
}

}  // namespace
