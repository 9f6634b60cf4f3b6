// Specification of waiting for free GPUs (include/gpusel/machine/wait_for_gpus.hpp):
// lease_free_gpus(criteria, wait) and use_free_gpus(criteria, wait), end to end
// through the fake NVML, in line with other waiting processes (Note [Waiting in line]).
#include "gpusel/machine/wait_for_gpus.hpp"

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fake_nvml_machine.hpp"
#include "gpusel/machine/detail/picking/wait_line.hpp"
#include "gpusel_test.hpp"
#include "lease_directory.hpp"
#include "pick_criteria_builders.hpp"
#include "staged_users.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::FakeNvmlMachine;
using gpusel_test::ScopedEnvironment;
using gpusel_test::ScopedLeaseDirectory;

using gpusel_test::contains;
using gpusel_test::count;
using gpusel_test::error_from;
namespace staged = gpusel_test::staged;
using staged::can_become_another_user;

// Four H200s: 0 is busy, 1 runs a process of this very test (its own user), 2 a
// process nobody here can see, 3 is idle with the most free memory.
std::string four_gpus() {
  return "gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 used_mib=100000 utilization=90\n"
         "gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 used_mib=4096 utilization=5\n"
         "gpu uuid=GPU-22222222-aaaa-0000-0000-000000000000 used_mib=0\n"
         "gpu uuid=GPU-33333333-aaaa-0000-0000-000000000000 used_mib=1024\n"
         "process gpu=1 pid=" +
         std::to_string(getpid()) + " used_mib=4000\n" + "process gpu=2 pid=4000000000 used_mib=na\n";
}

// --- waiting for GPUs: lease_free_gpus(criteria, wait) -----------------------------

// The GPUs of four_gpus() that fit `idle` (1 and 3), leased by "another job" here: a
// lease of this process excludes another of its own as another process's would.
struct HeldByAnotherJob {
  gpusel::GpuLease one = gpusel::lease_gpu("GPU-11111111-aaaa-0000-0000-000000000000");
  gpusel::GpuLease three = gpusel::lease_gpu("GPU-33333333-aaaa-0000-0000-000000000000");
};

gpusel::PickCriteria idle_gpu() {
  gpusel::PickCriteria idle = count(1);
  idle.max_utilization = 10;  // GPU 0 is 90% utilized; GPU 2 runs a process nobody here can see
  return idle;
}

gpusel::WaitForGpus quick_wait(std::optional<std::chrono::milliseconds> at_most) {
  gpusel::WaitForGpus wait;
  wait.at_most = at_most;
  wait.interval = std::chrono::milliseconds(20);
  return wait;
}

// The files of the lease directory whose name starts with `prefix`.
std::vector<std::string> files_named(const std::string& directory, const std::string& prefix) {
  std::vector<std::string> names;
  if (DIR* entries = opendir(directory.c_str())) {
    while (const dirent* entry = readdir(entries))
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) names.emplace_back(entry->d_name);
    closedir(entries);
  }
  return names;
}

TEST(WaitForGpus, LeasesTheGpusOnceAnotherJobsLeaseEndsSayingOnceWhyItWaits) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  HeldByAnotherJob held;
  gpusel::WaitForGpus wait = quick_wait(std::chrono::seconds(30));
  std::vector<std::string> said;
  int looks = 0;
  wait.on_wait = [&said](const std::string& why) { said.push_back(why); };
  wait.read_devices = [&looks, &held] {
    if (++looks == 5) held.three.release();  // the other job ends
    return gpusel::visible_devices(gpusel::InventoryOptions::with_usage());
  };
  const gpusel::LeasedGpus leased = gpusel::lease_free_gpus(idle_gpu(), wait);
  EXPECT_EQ(leased.lease.uuids(), std::vector<std::string>{"GPU-33333333-aaaa-0000-0000-000000000000"});
  EXPECT_EQ(looks, 5);
  ASSERT_EQ(said.size(), 1u) << "said once, however long it waits";
  EXPECT_TRUE(contains(said[0], "0 of 4 GPUs fit")) << said[0];
  EXPECT_TRUE(files_named(leases.leases(), "gpusel-wait-").empty()) << "its place in line is given up once it leased";
}

TEST(WaitForGpus, GivesUpOnceTheTimeIsUpSayingWhyAndHoldingNothing) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  HeldByAnotherJob held;
  try {
    (void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(100)));
    ADD_FAILURE() << "expected WaitTimedOut";
  } catch (const gpusel::WaitTimedOut& error) {
    EXPECT_TRUE(contains(error.what(), "leased by another job")) << error.what();
  }
  EXPECT_TRUE(files_named(leases.leases(), "gpusel-wait-").empty()) << "its place in line is given up";
  EXPECT_THROW((void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(0))),
               gpusel::WaitTimedOut)
      << "no time to wait: one look";
}

TEST(WaitForGpus, FailsAtOnceOnWhatNoWaitCanFix) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::PickCriteria nothing_here = count(1);
  nothing_here.exclude = {"9"};
  const auto started = std::chrono::steady_clock::now();
  try {
    (void)gpusel::lease_free_gpus(nothing_here, quick_wait(std::chrono::seconds(10)));
    ADD_FAILURE() << "expected Error";
  } catch (const gpusel::WaitTimedOut& error) {
    ADD_FAILURE() << "waited for what no wait can fix: " << error.what();
  } catch (const gpusel::Error& error) {
    EXPECT_TRUE(contains(error.what(), "cannot exclude \"9\"")) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  FakeNvmlMachine no_uuid("gpu uuid=\n");
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_free_gpus(count(1), quick_wait(std::nullopt)); }),
                       "NVML reports no UUID for it"));
}

// Note [A GPU no wait can free]: a GPU whose lease file cannot be used is no GPU a lease's end frees.
TEST(WaitForGpus, FailsAtOnceWhenTooFewGpusRemainThatALeasesEndCouldFree) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(
      "gpu uuid=GPU-00000000-aaaa-0000-0000-000000000000 used_mib=0\n"
      "gpu uuid=GPU-11111111-aaaa-0000-0000-000000000000 used_mib=0\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  std::optional<gpusel::GpuLease> held(gpusel::lease_gpu("GPU-00000000-aaaa-0000-0000-000000000000"));  // another job
  // GPU 1's lock file is a directory (as another user's unreadable file would be): no lease can hold it.
  const std::string squatted =
      leases.leases() + "/gpusel-GPU-11111111-aaaa-0000-0000-000000000000." + std::to_string(geteuid()) + ".lock";
  ASSERT_EQ(mkdir(squatted.c_str(), 0700), 0);
  const auto started = std::chrono::steady_clock::now();
  try {
    (void)gpusel::lease_free_gpus(count(2), quick_wait(std::chrono::seconds(3)));
    ADD_FAILURE() << "expected Error";
  } catch (const gpusel::WaitTimedOut& error) {
    ADD_FAILURE() << "waited for a GPU no lease's end frees: " << error.what();
  } catch (const gpusel::Error& error) {
    EXPECT_TRUE(contains(error.what(), "no wait can meet this request")) << error.what();
    EXPECT_TRUE(contains(error.what(), "cannot be leased: its lease file " + squatted)) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  EXPECT_TRUE(files_named(leases.leases(), "gpusel-wait-").empty()) << "no place in line was kept";
  // One GPU can still serve a request for one: it waits for that GPU alone, and gets it once it is free.
  gpusel::WaitForGpus wait = quick_wait(std::chrono::seconds(10));
  int looks = 0;
  wait.read_devices = [&looks, &held] {
    if (++looks == 3) held.reset();  // the other job ends
    return gpusel::visible_devices(gpusel::InventoryOptions::with_usage());
  };
  EXPECT_EQ(error_from([&] { (void)gpusel::lease_free_gpus(count(1), wait); }), "");
  EXPECT_EQ(looks, 3);
}

TEST(WaitForGpus, AnEarlierWaiterGoesFirstButHoldsUpNoOneWhoDoesNotWait) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  std::optional<gpusel::detail::WaitLine> earlier(std::in_place);  // a job that arrived first and waits still
  earlier->join(1);
  const std::string message =
      error_from([] { (void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::milliseconds(100))); });
  EXPECT_TRUE(contains(message, "another job waits for GPUs first (pid " + std::to_string(getpid()) + ", waiting for "))
      << message;
  EXPECT_TRUE(contains(message, " s): waiting jobs are served in arrival order")) << message;
  EXPECT_EQ(gpusel::lease_free_gpus(idle_gpu()).gpus.size(), 1u) << "a job that does not wait takes what is free";
  earlier.reset();  // that job ended
  EXPECT_EQ(gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(10))).gpus.size(), 1u);
}

// --- nobody holds up the line (Note [Waiting in line]) ------------------------------

// A process that joined the line and waits, until killed: what the test does to it is a signal.
class WaiterProcess {
 public:
  WaiterProcess() {
    int ready[2];
    if (pipe(ready) != 0) throw std::runtime_error("pipe failed");
    std::fflush(stdout);
    pid_ = fork();
    if (pid_ == 0) {
      gpusel::detail::WaitLine line;
      line.join(1);
      (void)!write(ready[1], "y", 1);
      while (true) pause();
    }
    close(ready[1]);
    char answer = 'n';
    joined_ = read(ready[0], &answer, 1) == 1;
    close(ready[0]);
  }
  ~WaiterProcess() { end(); }
  WaiterProcess(const WaiterProcess&) = delete;
  WaiterProcess& operator=(const WaiterProcess&) = delete;
  bool joined() const { return joined_; }
  void signal(int number) const { kill(pid_, number); }
  void end() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  bool joined_ = false;
};

using Seconds = std::chrono::duration<double>;

TEST(WaitLine, AStoppedWaiterHoldsUpNoOne) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  WaiterProcess stopped;
  ASSERT_TRUE(stopped.joined());
  stopped.signal(SIGSTOP);  // Ctrl-Z
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_from([] { (void)gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(20))); }), "");
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - started).count(), 10.0) << "GPUs sat free behind it";
}

TEST(WaitLine, WhoeverFindsADeadWaitersTicketRemovesIt) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  WaiterProcess killed;
  ASSERT_TRUE(killed.joined());
  killed.end();  // kill -9: its ticket stays, unlocked
  ASSERT_EQ(files_named(leases.leases(), "gpusel-wait-").size(), 1u);
  EXPECT_EQ(gpusel::lease_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(10))).gpus.size(), 1u);
  EXPECT_TRUE(files_named(leases.leases(), "gpusel-wait-").empty()) << "the dead ticket stays";
}

// --- the line as `gpusel list` shows it (Note [The wait line shown]) ----------------

TEST(WaitLine, WaitingJobsAreTheLiveTicketsFirstArrivedFirstWithTheirCounts) {
  ScopedLeaseDirectory leases;
  EXPECT_TRUE(gpusel::waiting_jobs().empty()) << "no lease directory yet: nobody waits";
  const std::time_t before = std::time(nullptr) - 1;  // ctime comes from the kernel's coarse clock
  std::optional<gpusel::detail::WaitLine> first(std::in_place);
  first->join(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a later arrival, past the clock's tick
  WaiterProcess killed;                                        // waits for 1 GPU
  ASSERT_TRUE(killed.joined());
  std::vector<gpusel::WaitingJob> jobs = gpusel::waiting_jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].pid, std::optional<long>(getpid()));
  EXPECT_EQ(jobs[0].gpus, std::optional<int>(3));
  EXPECT_EQ(jobs[0].user, geteuid());
  EXPECT_FALSE(jobs[0].stopped);
  EXPECT_GE(jobs[0].since, before);
  EXPECT_LE(jobs[0].since, std::time(nullptr));
  EXPECT_TRUE(contains(jobs[0].describe(), "pid " + std::to_string(getpid()) + " of ")) << jobs[0].describe();
  EXPECT_TRUE(contains(jobs[0].describe(), " for 3 GPUs since ")) << jobs[0].describe();
  EXPECT_EQ(jobs[1].gpus, std::optional<int>(1));
  EXPECT_NE(jobs[1].pid, std::optional<long>(getpid()));
  killed.end();  // kill -9: its ticket stays, unlocked, and is not shown
  jobs = gpusel::waiting_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].gpus, std::optional<int>(3));
  EXPECT_EQ(files_named(leases.leases(), "gpusel-wait-").size(), 2u) << "a look removes nothing";
  first.reset();
  EXPECT_TRUE(gpusel::waiting_jobs().empty());
}

TEST(WaitLine, ATicketsContentsAreItsOwnersClaimReadStrictly) {
  ScopedLeaseDirectory leases;
  std::optional<gpusel::detail::WaitLine> line(std::in_place);
  line->join(1);  // makes the lease directory
  const std::string forged = leases.leases() + "/gpusel-wait-" + std::to_string(geteuid()) + "-00000000000000cc.ticket";
  std::ofstream(forged) << "gpus=\x1b]0;owned\x07\n";
  const int held = open(forged.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX), 0);  // its "waiter" lives
  const std::vector<gpusel::WaitingJob> jobs = gpusel::waiting_jobs();
  close(held);
  ASSERT_EQ(jobs.size(), 2u);
  const gpusel::WaitingJob& claim = jobs[0].ticket == forged.substr(forged.rfind('/') + 1) ? jobs[0] : jobs[1];
  EXPECT_FALSE(claim.gpus.has_value());
  EXPECT_TRUE(contains(claim.describe(), "for GPUs (how many, its ticket does not say)")) << claim.describe();
  EXPECT_FALSE(contains(claim.describe(), "\x1b")) << "a count is a number, never the ticket's text";
}

TEST(WaitLine, AWaiterNoLeaseCanServeHoldsUpNoOne) {
  ScopedLeaseDirectory leases;
  // GPU 1 runs another user's process, which no lease ends: a job that needs both waits for it.
  FakeNvmlMachine nvml("gpu\ngpu\nprocess gpu=1 pid=4000000000 used_mib=1000\n");
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  int said[2];
  ASSERT_EQ(pipe(said), 0);
  std::fflush(stdout);
  const pid_t both = fork();
  if (both == 0) {
    gpusel::WaitForGpus wait = quick_wait(std::chrono::seconds(60));
    wait.on_wait = [&said](const std::string&) { (void)!write(said[1], "y", 1); };
    try {
      (void)gpusel::lease_free_gpus(count(2), wait);
    } catch (...) {
    }
    _exit(0);
  }
  close(said[1]);
  char answer = 'n';
  ASSERT_EQ(read(said[0], &answer, 1), 1) << "the job that needs both GPUs does not wait";
  close(said[0]);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_from([] { (void)gpusel::lease_free_gpus(count(1), quick_wait(std::chrono::seconds(20))); }), "");
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - started).count(), 10.0) << "GPU 0 sat free behind it";
  kill(both, SIGKILL);
  waitpid(both, nullptr, 0);
}

TEST(WaitLine, AnotherUsersForgedTicketHoldsUpNoOneBeyondTheBound) {
  SKIP_UNLESS_ROOT();
  gpusel_test::staged::SharedParent shared;
  shared.provision();
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  // Mallory writes a ticket that claims to have arrived 1 ns after 1970, dated so, and holds it.
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  std::fflush(stdout);
  const pid_t mallory = fork();
  if (mallory == 0) {
    close(done[1]);
    if (setgroups(0, nullptr) != 0 || setresgid(staged::kMallory, staged::kMallory, staged::kMallory) != 0 ||
        setresuid(staged::kMallory, staged::kMallory, staged::kMallory) != 0)
      _exit(3);
    for (const std::string name : {"gpusel-wait-1-1.4101.ticket", "gpusel-wait-4101-0000000000000001.ticket"}) {
      const int ticket = open((shared.leases() + "/" + name).c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
      const timespec dawn[2] = {{0, 1}, {0, 1}};
      if (ticket < 0 || flock(ticket, LOCK_EX) != 0 || futimens(ticket, dawn) != 0) _exit(4);
    }
    (void)!write(ready[1], "y", 1);
    char held = 0;
    (void)!read(done[0], &held, 1);
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char answer = 'n';
  ASSERT_EQ(read(ready[0], &answer, 1), 1);
  gpusel::WaitForGpus wait = quick_wait(std::chrono::seconds(30));
  wait.yield_at_most = std::chrono::seconds(1);
  std::string said;
  wait.on_wait = [&said](const std::string& why) { said = why; };
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(error_from([&] { (void)gpusel::lease_free_gpus(idle_gpu(), wait); }), "");
  const double waited = Seconds(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(waited, 1.0) << "within the bound, an earlier waiter goes first";
  EXPECT_LT(waited, 15.0) << "GPUs sat free behind a forged ticket";
  EXPECT_TRUE(contains(said, "(pid " + std::to_string(mallory) + " of uid 4101, waiting for ")) << said;
  EXPECT_TRUE(contains(said, " s): waiting jobs are served in arrival order")) << said << ": its own time, not 1970's";
  close(done[1]);
  waitpid(mallory, nullptr, 0);
}

TEST(WaitLine, AnotherUserSquattingTemporaryNamesCannotKeepAWaiterOutOfLine) {
  SKIP_UNLESS_ROOT();
  gpusel_test::staged::SharedParent shared;
  shared.provision();
  // Mallory takes the names of the next 2000 pids, under the temporary ticket names once used.
  long last = 0;
  std::ifstream("/proc/sys/kernel/ns_last_pid") >> last;
  gpusel_test::staged::as_user(staged::kMallory, [&] {
    for (long pid = last + 1; pid <= last + 2000; ++pid)
      close(open((shared.leases() + "/.gpusel-wait-" + std::to_string(pid) + ".4102.new").c_str(), O_CREAT | O_RDONLY,
                 0644));
  });
  gpusel_test::staged::as_user(staged::kAlice, [] {
    gpusel::detail::WaitLine line;
    EXPECT_EQ(error_from([&] { line.join(1); }), "");
    EXPECT_EQ(line.ahead(), "");
  });
}

TEST(WaitForGpus, ARequestNoGpuHereCouldMeetEvenIdleFailsAtOnceSayingWhy) {
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  gpusel::PickCriteria huge = count(1);
  huge.min_free_memory = "500GiB";
  for (const gpusel::PickCriteria& impossible : {count(5), huge}) {
    const auto started = std::chrono::steady_clock::now();
    try {
      (void)gpusel::lease_free_gpus(impossible, quick_wait(std::chrono::seconds(10)));
      ADD_FAILURE() << "expected Error";
    } catch (const gpusel::WaitTimedOut& error) {
      ADD_FAILURE() << "waited for what no wait can bring: " << error.what();
    } catch (const gpusel::Error& error) {
      EXPECT_TRUE(contains(error.what(), "no wait can meet this request: even with every GPU idle, ")) << error.what();
    }
    EXPECT_LT(Seconds(std::chrono::steady_clock::now() - started).count(), 5.0);
  }
  EXPECT_TRUE(contains(error_from([] { (void)gpusel::lease_free_gpus(count(5), quick_wait(std::nullopt)); }),
                       "4 of 4 GPUs fit, 5 are needed"));
  EXPECT_TRUE(contains(error_from([&] { (void)gpusel::lease_free_gpus(huge, quick_wait(std::nullopt)); }),
                       ", 500.0 GiB needed"));
}

TEST(WaitLine, SaysHowLongInUnitsPeopleRead) {
  EXPECT_EQ(gpusel::detail::duration_text(0), "0 s");
  EXPECT_EQ(gpusel::detail::duration_text(45), "45 s");
  EXPECT_EQ(gpusel::detail::duration_text(125), "2 min 5 s");
  EXPECT_EQ(gpusel::detail::duration_text(3600), "1 h");
  EXPECT_EQ(gpusel::detail::duration_text(12000), "3 h 20 min");
  EXPECT_EQ(gpusel::detail::duration_text(1796321074), "20790 d 18 h");
}

TEST(WaitForGpus, UseFreeGpusWaitsThenMakesTheGpusVisible) {
#if GPUSEL_TEST_EMULATED
  gpusel_emulated::reset(gpusel_emulated::devices(4));
#endif
  ScopedLeaseDirectory leases;
  FakeNvmlMachine nvml(four_gpus());
  ScopedEnvironment visible("CUDA_VISIBLE_DEVICES", std::nullopt);
  ScopedEnvironment order("CUDA_DEVICE_ORDER", std::nullopt);
  if (gpusel::cuda_started()) {
    EXPECT_TRUE(contains(error_from([] { (void)gpusel::use_free_gpus(idle_gpu(), quick_wait(std::nullopt)); }),
                         "CUDA has already started"));
    return;
  }
  const auto picked = gpusel::use_free_gpus(idle_gpu(), quick_wait(std::chrono::seconds(10)));
  ASSERT_EQ(picked.gpus.size(), 1u);
  ASSERT_NE(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);
  EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), "GPU-33333333-aaaa-0000-0000-000000000000");
}

}  // namespace
