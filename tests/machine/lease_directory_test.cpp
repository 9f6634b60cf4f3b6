// Specification of the lease directory (include/gpusel/machine/lease_directory.hpp):
// GPUSEL_LEASE_DIR, /run/gpusel-leases or /tmp, trusted only when it and every
// directory above it belong to root or the caller and are sticky where others
// may write (Note [Who can break a lease]), never on a network filesystem. What
// another local user could do is staged with other uids in forked children, and
// in a private mount namespace for /tmp itself: those tests need root.
#include "gpusel/machine/lease_directory.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "gpusel/machine/lease.hpp"
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

TEST(LeaseDirectory, ARelativeLeaseDirectoryIsRefusedNamingTheVariable) {
  const ScopedEnvironment relative("GPUSEL_LEASE_DIR", std::string("leases"));
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(contains(refused, "GPUSEL_LEASE_DIR=\"leases\" is a relative path")) << refused;
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_directory(); }), "GPUSEL_LEASE_DIR"));
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_holder(kGpu); }), "give an absolute one"));
}

TEST(LeaseDirectory, ADirectoryAboveTheLeasesThatOthersCouldChangeIsRefused) {
  ScopedLeaseDirectory directory;
  ASSERT_EQ(chmod(directory.parent().c_str(), 0777), 0);  // anyone could rename the lease directory away
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(
      contains(refused, "cannot be trusted: " + directory.parent() + " is writable by other users but not sticky"))
      << refused;
  ASSERT_EQ(chmod(directory.parent().c_str(), 01777), 0);
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()) << "sticky, as /tmp is: only its owner and root rename";
}

TEST(LeaseDirectory, ALeaseDirectoryOnANetworkFilesystemIsRefused) {
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

// Note [Leases against cleaners]: a lease locks no directory, so a process that holds the lease
// directory locked exclusively (as any user who may read it could) keeps no lease from being taken.
TEST(LeaseDirectory, ALeaseLocksNoDirectorySoALockOnItStopsNoLease) {
  ScopedLeaseDirectory directory;
  { const gpusel::GpuLease first = gpusel::lease_gpu(kOtherGpu); }  // makes the directory
  const int locker = open(directory.leases().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_EQ(flock(locker, LOCK_EX | LOCK_NB), 0);
  const auto start = std::chrono::steady_clock::now();
  std::optional<gpusel::GpuLease> lease;
  EXPECT_EQ(error_from([&] { lease = gpusel::try_lease_gpu(kGpu); }), "");
  EXPECT_TRUE(lease.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << "waited on the directory's lock";
  EXPECT_TRUE(gpusel::lease_holder(kGpu).has_value());
  close(locker);
  struct stat status {};
  ASSERT_EQ(stat((directory.leases() + "/gpusel-" + kGpu + "." + std::to_string(geteuid()) + ".lock").c_str(), &status),
            0);
  EXPECT_EQ(status.st_mode & 07777, 01644u) << "sticky: systemd-tmpfiles never ages it";
}

TEST(LeaseDirectoryAgainstAnotherUser, ASymlinkAnotherUserOwnsOnTheWayToTheLeasesIsRefusedNamingItsOwner) {
  SKIP_UNLESS_ROOT();
  ScopedLeaseDirectory directory;
  const std::string parent = directory.parent();
  ASSERT_EQ(chmod(parent.c_str(), 01777), 0);                                                    // as /tmp is
  for (const char* each : {"/one", "/two"}) ASSERT_EQ(mkdir((parent + each).c_str(), 0755), 0);  // root's
  const std::string link = parent + "/link";
  as_user(kMallory, [&] { EXPECT_EQ(symlink("one", link.c_str()), 0); });  // Mallory may point it at /two later
  const ScopedEnvironment through("GPUSEL_LEASE_DIR", link + "/leases");
  const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
  EXPECT_TRUE(contains(refused, "cannot be trusted: " + link + " is a symlink that belongs to uid 4101")) << refused;
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::check_lease_directory(); }), "symlink that belongs to uid 4101"));
  // Mallory's symlink further on, reached through a trusted one, is refused as well.
  ASSERT_EQ(unlink(link.c_str()), 0);
  ASSERT_EQ(symlink((parent + "/two/on").c_str(), link.c_str()), 0);
  as_user(kMallory, [&] { EXPECT_EQ(symlink("../one", (parent + "/two/on").c_str()), -1) << "two is root's"; });
  ASSERT_EQ(symlink("../one", (parent + "/two/on").c_str()), 0);
  ASSERT_EQ(lchown((parent + "/two/on").c_str(), kMallory, kMallory), 0);
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kGpu); }),
                       parent + "/two/on is a symlink that belongs to uid 4101"));
  // Symlinks of root's or the caller's lead to the leases: only they could change them.
  ASSERT_EQ(lchown((parent + "/two/on").c_str(), 0, 0), 0);
  EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value());
  struct stat status {};
  EXPECT_EQ(stat((parent + "/one/leases").c_str(), &status), 0) << "made where the symlinks lead";
}

TEST(LeaseDirectoryAgainstAnotherUser, RootsRunGpuselLeasesIsFoundWithoutAVariableAfterGpuselLeaseDir) {
  SKIP_UNLESS_ROOT();
  std::fflush(stdout);
  const pid_t child = fork();  // a private mount namespace with a /run and a /tmp of its own
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0 || mount("tmpfs", "/run", "tmpfs", 0, "mode=755") != 0)
      _exit(77);
    const ScopedEnvironment unset("GPUSEL_LEASE_DIR", std::nullopt);
    EXPECT_EQ(gpusel::lease_directory(), "/tmp") << "where root made none";
    EXPECT_EQ(symlink("/tmp", "/run/gpusel-leases"), 0);
    EXPECT_EQ(gpusel::lease_directory(), "/tmp") << "a symlink is not one";
    EXPECT_EQ(unlink("/run/gpusel-leases"), 0);
    EXPECT_EQ(mkdir("/run/gpusel-leases", 0755), 0);
    EXPECT_EQ(chmod("/run/gpusel-leases", 01777), 0);  // as the tmpfiles.d line of docs/choosing-gpus.md makes it
    EXPECT_EQ(gpusel::lease_directory(), "/run/gpusel-leases");
    {
      const LeaseHeldBy alice(kAlice, kGpu);
      EXPECT_TRUE(alice.held());
      as_user(kBob, [] { EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "Alice's, in /run"; });
    }
    struct stat status {};
    EXPECT_EQ(stat(("/run/gpusel-leases/gpusel-" + kGpu + ".4102.lock").c_str(), &status), 0);
    EXPECT_NE(stat(("/tmp/gpusel-" + kGpu + ".4102.lock").c_str(), &status), 0) << "none made in /tmp";
    {
      const ScopedEnvironment named("GPUSEL_LEASE_DIR", std::string("/tmp/mine"));
      EXPECT_EQ(gpusel::lease_directory(), "/tmp/mine") << "GPUSEL_LEASE_DIR comes first";
    }
    std::fflush(stdout);
    _exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "no private mount namespace here (unshare -m)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// Note [The lease directory]: with nothing set up, leases live in /tmp, root's, which no user can
// own first or have aged away; and no user can stop them by locking it.
TEST(LeaseDirectoryAgainstAnotherUser, WithNothingSetUpEveryUserLeasesInTmpAndNoOneStopsThem) {
  SKIP_UNLESS_ROOT();
  std::fflush(stdout);
  const pid_t child = fork();  // a private mount namespace with a /tmp of its own
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0)
      _exit(77);
    const ScopedEnvironment unset("GPUSEL_LEASE_DIR", std::nullopt);
    as_user(kMallory, [] {
      EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value());  // leases first
      EXPECT_EQ(mkdir("/tmp/gpusel-leases", 0700), 0);            // and makes what gpusel once used
    });
    // Mallory holds /tmp locked exclusively, as any user may.
    const int locker = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    EXPECT_EQ(flock(locker, LOCK_EX | LOCK_NB), 0);
    {
      const LeaseHeldBy alice(kAlice, kGpu);
      EXPECT_TRUE(alice.held()) << "refused, or stopped by the lock on /tmp";
      as_user(kBob, [] {
        EXPECT_EQ(error_from([] { EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "Alice's"; }), "");
        EXPECT_TRUE(gpusel::try_lease_gpu(kOtherGpu).has_value());
      });
    }
    close(locker);
    struct stat status {};
    EXPECT_EQ(stat(("/tmp/gpusel-" + kGpu + ".4102.lock").c_str(), &status), 0);
    EXPECT_EQ(status.st_mode & 07777, 01644u);
    std::fflush(stdout);
    _exit(testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "no private mount namespace here (unshare -m)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(LeaseDirectoryAgainstAnotherUser, ANamedDirectoryIsItsMakersAndAnotherUserIsToldHowToShareOne) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  ASSERT_EQ(chmod(shared.parent().c_str(), 01777), 0);  // as /tmp is: anyone may make the directory
  as_user(kAlice, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()); });
  as_user(kBob, [&] {
    const std::string refused = error_from([] { (void)gpusel::try_lease_gpu(kGpu); });
    EXPECT_TRUE(contains(refused, shared.leases() + " belongs to uid 4102")) << refused;
    EXPECT_TRUE(contains(refused, "a tmpfiles.d line 'd " + shared.leases() + " 1777 root root -'")) << refused;
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
