// The gpusel command's commands, one function each (main.cpp runs the one named on
// the command line), and the exit statuses they return.
#pragma once

#include "arguments.hpp"

namespace gpusel_tool {

// Exit statuses, documented in kUsage and the README.
constexpr int kExitOk = 0;
constexpr int kExitNothingFits = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDriver = 3;
constexpr int kExitNvmlFailed = 4;
constexpr int kExitInternalError = 5;
constexpr int kExitWriteFailed = 6;
// run's own failures, as env(1) and timeout(1) give them, so they cannot be taken for the command's.
constexpr int kExitRunFailed = 125;
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;

int run_list(const Arguments& arguments);
int run_explain(const Arguments& arguments);
int run_pick(const Arguments& arguments);
int run_run(const Arguments& arguments);
int run_help(const Arguments& arguments);
int run_version(const Arguments& arguments);

}  // namespace gpusel_tool
