// Specification of leases (include/gpusel/lease.hpp): a GPU leased once cannot be
// leased again until the lease ends, whoever asks; the lease directory and its
// files are made and checked safely. flock locks belong to open files, so two
// leases in one process exclude each other as two processes' do (the command's
// tests, tests/tool, check it across processes).
#include "gpusel/lease.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
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

TEST(Lease, AGpuLeasedOnceCannotBeLeasedAgainUntilTheLeaseEnds) {
  ScopedLeaseDirectory directory;
  std::optional<gpusel::GpuLease> first = gpusel::try_lease_gpu(kGpu);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->uuids(), std::vector<std::string>{kGpu});
  EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value());
  const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
  ASSERT_TRUE(holder.has_value());
  EXPECT_TRUE(contains(*holder, "leased by another job (pid " + std::to_string(getpid()))) << *holder;
  EXPECT_TRUE(contains(*holder, directory.leases() + "/" + kGpu + ".lock")) << *holder;
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
  ASSERT_EQ(stat((directory.leases() + "/" + kGpu + ".lock").c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0666u) << "past the umask: every user may open it";
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
  ASSERT_EQ(symlink("/etc/passwd", (directory.leases() + "/" + kOtherGpu + ".lock").c_str()), 0);
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::try_lease_gpu(kOtherGpu); }), "cannot open the lease file"));
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

}  // namespace
