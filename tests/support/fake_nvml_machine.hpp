// Test helpers: describe a machine to the fake NVML (tests/fake_nvml) and set
// environment variables for the length of a test.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#if GPUSEL_TEST_EMULATED
#include "emulated_runtime.hpp"
#endif

namespace gpusel_test {

// Sets (or, with nullopt, unsets) an environment variable until destroyed.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
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
// the fake library until destroyed. On the emulated runtime the fake nvmlInit
// also loads the emulation's stand-in libcuda.so.1, as the real one loads the
// driver (measured on the H200), so every
// test that queries NVML checks that a loaded but uninitialized driver does not
// count as CUDA having started.
class FakeNvmlMachine {
 public:
  explicit FakeNvmlMachine(const std::string& config)
      : path_(write(config)), config_("GPUSEL_FAKE_NVML_CONFIG", path_), library_("GPUSEL_NVML_LIBRARY", library()) {}
  ~FakeNvmlMachine() { std::remove(path_.c_str()); }
  FakeNvmlMachine(const FakeNvmlMachine&) = delete;
  FakeNvmlMachine& operator=(const FakeNvmlMachine&) = delete;

  // The fake NVML beside this test binary (<build>/tests/fake_nvml/), so a build
  // copied to another machine (tests/gpu/check.sh) finds it; else where it was built.
  static std::string library() {
    char executable[4096] = {};
    const ssize_t length = readlink("/proc/self/exe", executable, sizeof executable - 1);
    if (length > 0) {
      std::string beside(executable, static_cast<std::size_t>(length));
      beside = beside.substr(0, beside.rfind('/') + 1) + "fake_nvml/" + file_name(GPUSEL_FAKE_NVML);
      if (access(beside.c_str(), R_OK) == 0) return beside;
    }
    return GPUSEL_FAKE_NVML;
  }
  const std::string& path() const { return path_; }
  // Describes another machine from now on (the fake reads its file on every count).
  void rewrite(const std::string& config) const { std::ofstream(path_) << as_written(config); }

 private:
  static std::string write(const std::string& config) {
    std::string path = "/tmp/gpusel_fake_nvml_" + std::to_string(getpid()) + "_" + std::to_string(counter()++) + ".txt";
    std::ofstream(path) << as_written(config);
    return path;
  }
  static std::string file_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }
  static std::string as_written(const std::string& config) {
#if GPUSEL_TEST_EMULATED
    return "libcuda " + gpusel_emulated::fake_libcuda_path() + "\n" + config;
#else
    return config;
#endif
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
