// Test helpers: describe a machine to the fake NVML (tests/fake_nvml) and set
// environment variables for the length of a test.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

namespace gpusel_test {

// Sets (or, with nullopt, unsets) an environment variable until destroyed.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  // Restoring twice would be wrong: one owner per variable.
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A machine for the fake NVML: writes `config` (format in tests/fake_nvml/fake_nvml.cpp)
// to a file, and points GPUSEL_FAKE_NVML_CONFIG and GPUSEL_NVML_LIBRARY at it and at
// the fake library until destroyed.
class FakeNvmlMachine {
 public:
  explicit FakeNvmlMachine(const std::string& config)
      : path_(write(config)), config_("GPUSEL_FAKE_NVML_CONFIG", path_), library_("GPUSEL_NVML_LIBRARY", library()) {}
  ~FakeNvmlMachine() { std::remove(path_.c_str()); }
  FakeNvmlMachine(const FakeNvmlMachine&) = delete;
  FakeNvmlMachine& operator=(const FakeNvmlMachine&) = delete;

  static std::string library() { return GPUSEL_FAKE_NVML; }
  const std::string& path() const { return path_; }
  // Describes another machine from now on (the fake reads its file on every count).
  void rewrite(const std::string& config) const { std::ofstream(path_) << config; }

 private:
  static std::string write(const std::string& config) {
    std::string path = "/tmp/gpusel_fake_nvml_" + std::to_string(getpid()) + "_" + std::to_string(counter()++) + ".txt";
    std::ofstream(path) << config;
    return path;
  }
  static int& counter() {
    static int value = 0;
    return value;
  }
  std::string path_;
  ScopedEnvironment config_;
  ScopedEnvironment library_;
};

}  // namespace gpusel_test
