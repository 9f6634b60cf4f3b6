// The gpusel command: the machine's GPUs, this process's view of them, and
// free GPUs picked for CUDA_VISIBLE_DEVICES. It reads NVML only and never
// starts CUDA, so it is safe to run beside jobs and before them:
//   gpusel run -n 2 --min-free 8GiB -- ./train      (picks, leases, runs, returns ./train's status)
// `gpusel help` says everything. The program is a parser (arguments.cpp: kOptions,
// kCommands), one function per command (list.cpp, explain.cpp, pick.cpp, run.cpp with
// local_rank.cpp and job.cpp, help.cpp), and exit statuses that mean what kUsage says.
#include <gpusel/text.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "commands.hpp"
#include "devices.hpp"
#include "output.hpp"

namespace gpusel_tool {
namespace {

// GPUSEL_NVML_TIMEOUT: a duration as --wait takes it; unset or empty, the default; 0, no limit.
std::chrono::milliseconds nvml_timeout() {
  const char* text = std::getenv("GPUSEL_NVML_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultNvmlTimeout;
  return parse_duration("GPUSEL_NVML_TIMEOUT", text);
}

// `status`, once what was written to stdout is out: a write that failed (stdout
// closed, a full disk) is an error of its own, kExitWriteFailed, whatever the command did.
int flush_output(int status) {
  std::cout.flush();
  const bool failed = !std::cout.good() || std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!failed) return status;
  const int error = errno;  // set by the write that failed
  std::cerr << "gpusel: cannot write the output" << (error != 0 ? std::string(": ") + std::strerror(error) : "")
            << "\n";
  return kExitWriteFailed;
}

// The command, run: its exit status, errors included (they are said on stderr, and as JSON under --json).
int run_command_line(const std::vector<std::string>& words) {
  Arguments arguments;
  try {
    arguments = parse_arguments(words);
    arguments.nvml_timeout = nvml_timeout();
  } catch (const UsageError& error) {  // one line, quoting the arguments: escaped (Note [Hostile text])
    std::cerr << "gpusel: " << gpusel::escape_for_terminal(error.what()) << "\nTry 'gpusel help'.\n";
    // --json was asked for even if the line is wrong elsewhere: the caller reads stdout as JSON.
    if (std::find(words.begin(), words.end(), "--json") != words.end())
      print_error_json("usage", error.what(), kExitUsage);
    return kExitUsage;
  }
  // NVML failing is a state the commands report (3, 4); an exception here is a bug.
  std::string internal;
  try {
    return arguments.command->run(arguments);
  } catch (const std::exception& error) {
    internal = error.what();
  } catch (...) {
    internal = "an unknown exception";
  }
  std::cerr << "gpusel: internal error: " << gpusel::escape_for_terminal(internal) << " (please report it)\n";
  if (arguments.json) print_error_json("internal", internal, kExitInternalError);
  return kExitInternalError;
}

}  // namespace
}  // namespace gpusel_tool

int main(int argc, char** argv) {
  const int status =
      gpusel_tool::flush_output(gpusel_tool::run_command_line(std::vector<std::string>(argv + 1, argv + argc)));
  if (gpusel_tool::g_nvml_hung) {  // a thread is still inside NVML (Note [A hanging NVML])
    std::cerr.flush();
    std::_Exit(status);
  }
  return status;
}
