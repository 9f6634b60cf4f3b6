// Runs a test's check in a forked child process and reports how it ended.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace gpusel_test {

// Forks, runs `child()` (returning the child's exit status; an exception is
// 99) in the child, and returns that status, or -1 when the fork failed or the
// child did not exit normally. The child leaves by _exit: it runs no atexit
// handler or static destructor of the parent's state.
template <class Child>
int in_forked_child(const Child& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    int status = 1;
    try {
      status = child();
    } catch (...) {
      status = 99;
    }
    std::fflush(nullptr);
    _exit(status);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace gpusel_test
