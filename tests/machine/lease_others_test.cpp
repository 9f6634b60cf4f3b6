// What other processes' lock files and locks may do to a lease, and what they may not
// (include/gpusel/machine/lease.hpp; Note [One lock file at a time], Note [Lease files]):
// many readable files of a GPU leave it leasable at the usual descriptor limit, and the
// holder a look names is the process that holds the lock and its user, never the lock
// file's owner. Other users are staged with setresuid in forked children: those need root.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "forked_child.hpp"
#include "gpusel/machine/lease.hpp"
#include "lease_directory.hpp"
#include "staged_users.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;
using gpusel_test::ScopedLeaseDirectory;
using namespace gpusel_test::staged;

const std::string kGpu = "GPU-1b2c3d4e-0000-4000-8000-000000000001";
const std::string kOtherGpu = "GPU-2c3d4e5f-0000-4000-8000-000000000002";

// The lock file of `uuid` that user `uid` leases it through, in the lease directory `leases`.
std::string lock_file_of(const std::string& leases, const std::string& uuid, uid_t uid) {
  return leases + "/gpusel-" + uuid + "." + std::to_string(uid) + ".lock";
}

// Note [One lock file at a time]: any user may make readable files of a GPU; so many that
// every one open at once would pass the soft limit of descriptors must not make it unusable.
TEST(LeaseLockFiles, ManyReadableUnlockedFilesOfAGpuLeaveItLeasableAtASoftLimitOf1024Files) {
  ScopedLeaseDirectory directory;
  { const gpusel::GpuLease first = gpusel::lease_gpu(kOtherGpu); }  // makes the lease directory
  for (uid_t named = 50000; named < 51100; ++named) {               // 1100 files, as another job's names
    const int fd = open(lock_file_of(directory.leases(), kGpu, named).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_GE(fd, 0) << named;
    close(fd);
  }
  const int status = gpusel_test::in_forked_child([] {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 10;
    limit.rlim_cur = std::min<rlim_t>(1024, limit.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 11;
    try {
      const std::optional<gpusel::GpuLease> lease = gpusel::try_lease_gpu(kGpu);
      if (!lease) return 2;
      const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
      if (!holder || !contains(*holder, "leased by another job (pid " + std::to_string(getpid()))) return 3;
    } catch (const gpusel::Error& error) {
      std::fprintf(stderr, "%s\n", error.what());
      return 1;
    }
    return 0;
  });
  EXPECT_EQ(status, 0) << "1: an Error (printed above); 2: refused as held; 3: the look did not see the lease";
}

// Lock files are readable by every user, so that anyone may look: anyone may therefore lock
// another user's idle file. The holder named is who holds the lock, as /proc shows it.
TEST(LeaseHolder, IsTheProcessThatHoldsTheLockAndItsUserNeverTheFilesOwner) {
  SKIP_UNLESS_ROOT();
  const SharedParent shared;
  shared.provision();
  as_user(kAlice, [] { EXPECT_TRUE(gpusel::try_lease_gpu(kGpu).has_value()); });  // her file stays, idle
  const LockHeldBy mallory(kMallory, lock_file_of(shared.leases(), kGpu, kAlice));
  ASSERT_TRUE(mallory.held()) << "Mallory could not lock Alice's idle file";
  const std::string pid = "pid " + std::to_string(mallory.pid());
  as_user(kBob, [&] {
    EXPECT_FALSE(gpusel::try_lease_gpu(kGpu).has_value()) << "a held lock is a lease, whoever holds it";
    const std::optional<std::string> holder = gpusel::lease_holder(kGpu);
    EXPECT_TRUE(holder && contains(*holder, "leased by another job (" + pid)) << holder.value_or("free");
    EXPECT_TRUE(holder && contains(*holder, ", uid 4101, lock ")) << holder.value_or("free");
    EXPECT_FALSE(holder && contains(*holder, "4102,")) << "named the file's owner: " << holder.value_or("free");
  });
  const gpusel::LeaseState seen_by_root = gpusel::lease_states({kGpu}).front();
  EXPECT_TRUE(seen_by_root.held);
  EXPECT_EQ(seen_by_root.user, std::optional<uid_t>(kMallory)) << seen_by_root.describe();
  EXPECT_EQ(seen_by_root.user_text(), "uid 4101");
}

}  // namespace
