// Starting run's command, passing on the signals sent to run, and ending as it ended.
#include "job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpusel/text.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"

namespace gpusel_tool {
namespace {

// Note [The job holds the lease]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A lease lasts as long as the job, whatever happens to `gpusel run`. The command
// starts with a copy of each lock file's descriptor, named in GPUSEL_JOB_LEASE so that
// picks and leases inside the job reuse it (Note [The job's lease], in the library's
// leases), and a flock lock ends only when
// the last descriptor on its open file description closes (Note [Lease files]). So
// `kill -9` of run (the OOM killer, a scheduler's cleanup) leaves the GPU leased while
// the command lives, and a command that puts its work in the background
// (`sh -c 'train &'`) keeps it while that work runs. The costs: whatever the job
// leaves running keeps the GPU until it ends, and a command that closes descriptors
// it did not open leaves the lease to run alone. Otherwise run stands in for the
// command, as env does: it passes on the signals sent to it whose default would end
// it (forwarded_signals), and ends as the command ended.

volatile sig_atomic_t g_child = 0;  // the command while it runs: where the signals go
static_assert(sizeof(pid_t) <= sizeof(sig_atomic_t), "a pid must fit where a signal handler reads it");

// Passes a signal sent to gpusel (kill, a scheduler) on to the command. Not one the
// kernel sends (si_code > 0: the terminal's Ctrl-C, which the command has too), nor
// one run's own writes raise (SIGPIPE, sent by the kernel as from run itself).
void forward_signal(int signal_number, siginfo_t* info, void*) {
  const int saved = errno;
  const bool sent = info == nullptr || (info->si_code <= 0 && info->si_pid != getpid());
  const pid_t child = g_child;
  if (child > 0 && sent) {
    if (info != nullptr && info->si_code == SI_QUEUE)
      (void)sigqueue(child, signal_number, info->si_value);  // with its value
    else
      (void)kill(child, signal_number);
  }
  errno = saved;
}

// The signals run passes on (Note [The job holds the lease]): every one whose default
// would end it, but the faults of its own code (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGTRAP, SIGSYS, SIGABRT).
std::vector<int> forwarded_signals() {
  std::vector<int> signals = {SIGHUP,  SIGINT,    SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
                              SIGPIPE, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO};
#ifdef SIGPWR
  signals.push_back(SIGPWR);
#endif
#ifdef SIGSTKFLT
  signals.push_back(SIGSTKFLT);
#endif
  for (int number = SIGRTMIN; number <= SIGRTMAX; ++number) signals.push_back(number);
  return signals;
}

// Ends run as signal `signal_number` ended the command. A core dump of run would
// replace the command's, so run makes none. Returns 128+N should the signal not end it.
int die_of(int signal_number) {
  std::cout.flush();
  struct rlimit core {};
  if (getrlimit(RLIMIT_CORE, &core) == 0) {
    core.rlim_cur = 0;
    (void)setrlimit(RLIMIT_CORE, &core);
  }
  (void)signal(signal_number, SIG_DFL);
  sigset_t just_this;
  sigemptyset(&just_this);
  sigaddset(&just_this, signal_number);
  (void)sigprocmask(SIG_UNBLOCK, &just_this, nullptr);
  (void)raise(signal_number);
  return 128 + signal_number;
}

// The signals run passes on, blocked until the command's pid is known (so none is
// lost), and the dispositions the command inherits instead of run's.
struct ForwardedSignals {
  sigset_t forwarded{};
  sigset_t previous{};              // run's mask when it started: the command's
  std::vector<int> caught;          // set to forward_signal: those not ignored when run started
  struct sigaction child_ended {};  // SIGCHLD as run found it
  bool child_ended_ignored = false;
};

struct sigaction default_action() {
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  sigemptyset(&by_default.sa_mask);
  return by_default;
}

ForwardedSignals catch_forwarded_signals() {
  ForwardedSignals set;
  const std::vector<int> signals = forwarded_signals();
  sigemptyset(&set.forwarded);
  for (const int signal_number : signals) sigaddset(&set.forwarded, signal_number);
  // Blocked until the child's pid is known, so none is lost.
  sigprocmask(SIG_BLOCK, &set.forwarded, &set.previous);
  struct sigaction action {};
  action.sa_sigaction = forward_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  // A signal ignored when run starts stays ignored in the command (`nohup gpusel run`,
  // as `nohup env`), and in run too, but for SIGCHLD (below), which run must see.
  for (const int signal_number : signals) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) continue;  // stays ignored
    if (sigaction(signal_number, &action, nullptr) == 0) set.caught.push_back(signal_number);
  }
  // SIGCHLD ignored would have the kernel reap the command before run could wait for it:
  // run takes the default, and the command gets the ignored SIGCHLD it would have inherited.
  set.child_ended_ignored = sigaction(SIGCHLD, nullptr, &set.child_ended) == 0 &&
                            (set.child_ended.sa_flags & SA_SIGINFO) == 0 && set.child_ended.sa_handler == SIG_IGN;
  const struct sigaction by_default = default_action();
  if (set.child_ended_ignored) (void)sigaction(SIGCHLD, &by_default, nullptr);
  return set;
}

// The command-to-be, in the forked child: async-signal-safe calls only, until execvp;
// execvp's errno goes to `report` when it fails.
[[noreturn]] void exec_command(const ForwardedSignals& signals, const struct sigaction& by_default,
                               const std::vector<int>& lease_copies, char* const* argv, int report) {
  for (const int signal_number : signals.caught) (void)sigaction(signal_number, &by_default, nullptr);
  if (signals.child_ended_ignored) (void)sigaction(SIGCHLD, &signals.child_ended, nullptr);
  for (const int descriptor : lease_copies) (void)fcntl(descriptor, F_SETFD, 0);  // the command keeps them
  (void)sigprocmask(SIG_SETMASK, &signals.previous, nullptr);
  execvp(argv[0], argv);
  const int error = errno;
  (void)!write(report, &error, sizeof error);
  _exit(kExitCannotRun);
}

// How the command ended: its wait status, or execvp's errno when it could not be run.
struct Ending {
  int status = 0;
  bool exec_failed = false;
  int exec_error = 0;
};

// Waits for `child`, passing signals on meanwhile; nullopt when waiting failed (said).
std::optional<Ending> wait_for_command(pid_t child, int report, const ForwardedSignals& signals) {
  g_child = child;
  sigprocmask(SIG_SETMASK, &signals.previous, nullptr);
  Ending ending;
  ssize_t got = 0;
  while ((got = read(report, &ending.exec_error, sizeof ending.exec_error)) < 0 && errno == EINTR) {
  }
  close(report);
  // Waits without reaping, then stops forwarding before the pid is freed: no signal reaches a stranger.
  siginfo_t ended{};
  while (waitid(P_PID, static_cast<id_t>(child), &ended, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) {
      std::cerr << "gpusel: waiting for the command failed: " << std::strerror(errno) << "\n";
      return std::nullopt;
    }
  }
  sigprocmask(SIG_BLOCK, &signals.forwarded, nullptr);
  g_child = 0;
  while (waitpid(child, &ending.status, 0) < 0 && errno == EINTR) {
  }
  ending.exec_failed = got == static_cast<ssize_t>(sizeof ending.exec_error);
  return ending;
}

// Says that `command` cannot be run, and why (execvp's `error`); returns run's exit status for it.
int cannot_run(const std::string& command, int error) {
  std::cerr << "gpusel: cannot run \"" << gpusel::escape_for_terminal(command) << "\": " << std::strerror(error)
            << "\n";
  return error == ENOENT ? kExitNotFound : kExitCannotRun;
}

// Whether execve could start the file at `path`: 0, or the errno it would fail with first.
int exec_error_of_file(const std::string& path) {
  struct stat status {};
  if (stat(path.c_str(), &status) != 0) return errno;
  if (!S_ISREG(status.st_mode)) return EACCES;  // a directory, a device: execve says EACCES
  return faccessat(AT_FDCWD, path.c_str(), X_OK, AT_EACCESS) == 0 ? 0 : errno;
}

// What execvp(command, ...) would fail with before running anything: 0 when it finds a
// file it may run; ENOENT (not found), EACCES (not executable)...
int exec_error(const std::string& command) {
  if (command.empty()) return ENOENT;
  if (command.find('/') != std::string::npos) return exec_error_of_file(command);
  // As glibc's execvp searches: PATH, or /bin:/usr/bin when unset; an empty entry is the current
  // directory; a file found but not executable is EACCES unless a later entry runs.
  const char* path = std::getenv("PATH");
  const std::string directories = path != nullptr ? path : "/bin:/usr/bin";
  bool denied = false;
  for (std::size_t start = 0; start <= directories.size();) {
    std::size_t colon = directories.find(':', start);
    if (colon == std::string::npos) colon = directories.size();
    const std::string directory = directories.substr(start, colon - start);
    const int error = exec_error_of_file(directory.empty() ? command : directory + "/" + command);
    if (error == 0) return 0;
    denied = denied || error == EACCES;
    start = colon + 1;
  }
  return denied ? EACCES : ENOENT;
}

}  // namespace

LentLease::LentLease(const gpusel::GpuLease& lease) {
  const std::vector<int> descriptors = lease.file_descriptors();
  for (const int descriptor : descriptors) {
    copies_.push_back(fcntl(descriptor, F_DUPFD_CLOEXEC, 10));
    if (copies_.back() < 0 && failure_.empty()) failure_ = std::string("fcntl: ") + std::strerror(errno);
  }
  // GPUSEL_JOB_LEASE: "UUID:descriptor,..." for each GPU and the copy that holds it exclusively
  const std::vector<int> exclusive = lease.exclusive_descriptors();
  for (std::size_t i = 0; i < exclusive.size(); ++i)
    for (std::size_t copy = 0; copy < descriptors.size(); ++copy)
      if (descriptors[copy] == exclusive[i] && copies_[copy] >= 0) {
        variable_ += (variable_.empty() ? "" : ",") + lease.uuids()[i] + ":" + std::to_string(copies_[copy]);
        struct stat status {};
        if (fstat(copies_[copy], &status) == 0)
          locks_variable_ +=
              (locks_variable_.empty() ? "" : ",") + lease.uuids()[i] + ":" + std::to_string(status.st_ino);
      }
}

LentLease::~LentLease() {
  for (const int copy : copies_)
    if (copy >= 0) close(copy);
}

std::optional<int> refuse_unrunnable(const std::vector<std::string>& command_line) {
  const int error = exec_error(command_line.at(0));
  if (error == 0) return std::nullopt;
  return cannot_run(command_line[0], error);
}

int start_and_wait(const std::vector<std::string>& command_line, const LentLease& lent) {
  const ForwardedSignals signals = catch_forwarded_signals();
  const struct sigaction by_default = default_action();
  std::vector<char*> argv;
  for (const std::string& word : command_line) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  int report[2];  // the child writes execvp's errno here; exec closes it
  if (pipe2(report, O_CLOEXEC) != 0) {
    sigprocmask(SIG_SETMASK, &signals.previous, nullptr);
    std::cerr << "gpusel: cannot start the command: pipe2: " << std::strerror(errno) << "\n";
    return kExitRunFailed;
  }
  // fork and execvp, not posix_spawnp: a file without #! then runs through /bin/sh,
  // as execvp runs it (posix_spawnp fails with ENOEXEC).
  const pid_t child = fork();
  if (child == 0) exec_command(signals, by_default, lent.copies(), argv.data(), report[1]);
  const int fork_error = errno;
  close(report[1]);
  if (child < 0) {
    close(report[0]);
    sigprocmask(SIG_SETMASK, &signals.previous, nullptr);
    std::cerr << "gpusel: cannot start the command: fork: " << std::strerror(fork_error) << "\n";
    return kExitRunFailed;
  }
  const std::optional<Ending> ending = wait_for_command(child, report[0], signals);
  if (!ending) return kExitRunFailed;
  if (ending->exec_failed) {
    sigprocmask(SIG_SETMASK, &signals.previous, nullptr);
    return cannot_run(command_line[0], ending->exec_error);
  }
  if (WIFEXITED(ending->status)) return WEXITSTATUS(ending->status);
  if (WIFSIGNALED(ending->status)) return die_of(WTERMSIG(ending->status));
  return kExitRunFailed;
}

}  // namespace gpusel_tool
