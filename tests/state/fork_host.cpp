// The fork test (tests/state/CMakeLists.txt): as many shared objects as the
// process state tells runtimes apart (kMaxRuntimes), each with its own static
// CUDA runtime, all use their runtime's objects; a child forked then must
// have forgotten every one of them (Note [Caches across fork()]). A table of
// forgets too small for them left some copy engines believing their threads
// still ran, and a copy there waited on them forever.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "gpusel/detail/core/process_state.hpp"

int main(int argc, char** argv) {
  if (argc - 1 != gpusel::detail::kMaxRuntimes) {
    std::fprintf(stderr, "usage: fork_host <one fork plugin per runtime the state tells apart: %d>\n",
                 gpusel::detail::kMaxRuntimes);
    return 2;
  }
  using Count = std::size_t (*)();
  std::vector<Count> use, threads;
  for (int i = 1; i < argc; ++i) {
    void* handle = dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL);  // one process state, with clang too
    if (handle == nullptr) {
      std::fprintf(stderr, "fork_host: %s\n", dlerror());
      return 2;
    }
    use.push_back(reinterpret_cast<Count>(dlsym(handle, "fork_plugin_use_runtime")));
    threads.push_back(reinterpret_cast<Count>(dlsym(handle, "fork_plugin_engine_threads")));
    if (use.back() == nullptr || threads.back() == nullptr) return 2;
  }
  int failures = 0;
  for (std::size_t i = 0; i < use.size(); ++i) {
    const std::size_t kept = use[i]();
    std::printf("%s runtime %zu: the parent's copy engine keeps %zu thread(s)\n", kept == 1 ? "ok  " : "FAIL", i, kept);
    if (kept != 1) ++failures;
  }
  const pid_t child = fork();
  if (child == 0) {
    int forgotten = 0;
    for (const Count count : threads) forgotten += count() == 0 ? 1 : 0;
    _exit(forgotten == static_cast<int>(threads.size()) ? 0 : 10 + forgotten);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 2;
  const bool forgot_all = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (forgot_all) {
    std::printf("ok   the child forgot the copy engine of all %zu runtimes\n", threads.size());
  } else {
    std::printf("FAIL the child forgot the copy engine of %d of %zu runtimes\n",
                WIFEXITED(status) ? WEXITSTATUS(status) - 10 : -1, threads.size());
    ++failures;
  }
  std::printf("%s\n", failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
