// Other local users for tests of what they can and cannot do to leases (Note [Who
// can break a lease]): staged with setresuid in forked children, so they need root.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpusel/machine/lease.hpp"
#include "lease_directory.hpp"

namespace gpusel_test::staged {

// Three local users for the staged attacks: no passwd entries, so they show as "uid N".
constexpr uid_t kMallory = 4101;
constexpr uid_t kAlice = 4102;
constexpr uid_t kBob = 4103;

// Runs `body` in a forked child as `uid` (its group too, no others); the child's
// failed expectations fail the test (the child prints them, and exits 1).
inline void as_user(uid_t uid, const std::function<void()>& body) {
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

// A child running as `uid` that takes something with `take` (a lock, a lease) and holds it until
// destroyed: `take` runs in the child and returns whether it took it; what it took is never released
// there, since the child ends with _exit.
class HeldByChild {
 public:
  HeldByChild(uid_t uid, const std::function<bool()>& take) {
    int ready[2], done[2];
    if (pipe(ready) != 0 || pipe(done) != 0) throw std::runtime_error("pipe failed");
    std::fflush(stdout);
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(done[1]);
      if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(3);
      char answer = take() ? 'y' : 'n';
      (void)!write(ready[1], &answer, 1);
      (void)!read(done[0], &answer, 1);  // holds until the parent closes its end
      _exit(0);
    }
    close(ready[1]);
    close(done[0]);
    done_ = done[1];
    char answer = 'n';
    held_ = read(ready[0], &answer, 1) == 1 && answer == 'y';
    close(ready[0]);
  }
  ~HeldByChild() {
    close(done_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  HeldByChild(const HeldByChild&) = delete;  // one child, waited for once
  HeldByChild& operator=(const HeldByChild&) = delete;
  bool held() const { return held_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int done_ = -1;
  bool held_ = false;
};

// A lease of `uuid` held by a child running as `uid` until destroyed.
class LeaseHeldBy : public HeldByChild {
 public:
  LeaseHeldBy(uid_t uid, const std::string& uuid) : HeldByChild(uid, [&uuid] { return take_lease(uuid); }) {}

 private:
  static bool take_lease(const std::string& uuid) {
    try {
      static std::optional<gpusel::GpuLease> kept;  // the child's, held until it exits
      kept = gpusel::try_lease_gpu(uuid);
      return kept.has_value();
    } catch (const gpusel::Error& error) {
      std::fprintf(stderr, "LeaseHeldBy: %s\n", error.what());
      return false;
    }
  }
};

// A flock(LOCK_EX) on `file`, opened with `flags`, held by a child running as `uid` until destroyed.
class LockHeldBy : public HeldByChild {
 public:
  LockHeldBy(uid_t uid, const std::string& file, int flags = O_RDONLY)
      : HeldByChild(uid, [&file, flags] {
          const int fd = open(file.c_str(), flags, 0644);
          return fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
        }) {}
};

// Whether this process may become another user (root with CAP_SETUID and CAP_SETGID), tried in a child.
inline bool can_become_another_user() {
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
  // The lease directory, made as root provisions it: mode 1777, root's (a tmpfiles.d 'd' line).
  void provision() const {
    mkdir(leases().c_str(), 0700);
    chmod(leases().c_str(), 01777);
  }
  const std::string& parent() const { return directory_.parent(); }

 private:
  ScopedLeaseDirectory directory_;
};

// Unlinks every entry of `directory` this user may unlink (what a hostile user tries).
inline void remove_what_can_be_removed(const std::string& directory) {
  DIR* entries = opendir(directory.c_str());
  if (entries == nullptr) return;
  while (const dirent* entry = readdir(entries)) (void)unlink((directory + "/" + entry->d_name).c_str());
  closedir(entries);
}

}  // namespace gpusel_test::staged
