// Test helpers: describe a machine to the fake NVML (tests/fake_nvml) and set
// environment variables for the length of a test.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
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
// to a file of a directory of its own (mkdtemp, mode 0700: no other user can plant
// a symlink where it writes), and points GPUSEL_FAKE_NVML_CONFIG and GPUSEL_NVML_LIBRARY at it and at
// the fake library until destroyed. On the emulated runtime the fake nvmlInit
// also loads the emulation's stand-in libcuda.so.1, as the real one loads the
// driver (measured on the H200), so every
// test that queries NVML checks that a loaded but uninitialized driver does not
// count as CUDA having started.
class FakeNvmlMachine {
 public:
  // Whether the fake nvmlInit loads the stand-in libcuda.so.1 (the emulated
  // runtime only): without_driver_library is a machine whose NVML works but whose
  // driver library is missing (a container with NVIDIA_DRIVER_CAPABILITIES=utility).
  enum DriverLibrary { with_driver_library, without_driver_library };

  explicit FakeNvmlMachine(const std::string& config, DriverLibrary driver = with_driver_library)
      : directory_(make_directory()),
        path_(write(directory_, driver == with_driver_library ? as_written(config) : config)),
        config_("GPUSEL_FAKE_NVML_CONFIG", path_),
        library_("GPUSEL_NVML_LIBRARY", library()) {}
  ~FakeNvmlMachine() {
    std::remove(path_.c_str());
    rmdir(directory_.c_str());
  }
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
  // Describes another machine from now on (the fake reads its file on every count):
  // a new file, renamed over the old one, so a reader sees one machine or the other.
  void rewrite(const std::string& config) const {
    const std::string written = write(directory_, as_written(config));
    if (std::rename(written.c_str(), path_.c_str()) != 0) {
      std::remove(written.c_str());
      throw std::runtime_error("FakeNvmlMachine: cannot rename " + written + " to " + path_);
    }
  }

 private:
  static std::string make_directory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string name = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpusel_fake_nvml_XXXXXX";
    if (mkdtemp(name.data()) == nullptr) throw std::runtime_error("FakeNvmlMachine: mkdtemp failed for " + name);
    return name;
  }
  // A new file in `directory` (mkstemp: created, never opened through a symlink), holding `config`.
  static std::string write(const std::string& directory, const std::string& config) {
    std::string path = directory + "/machine_XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) throw std::runtime_error("FakeNvmlMachine: mkstemp failed in " + directory);
    const std::string& text = config;
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t written = ::write(fd, text.data() + done, text.size() - done);
      if (written <= 0) break;
      done += static_cast<std::size_t>(written);
    }
    close(fd);
    if (done != text.size()) throw std::runtime_error("FakeNvmlMachine: cannot write " + path);
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
  std::string directory_;
  std::string path_;
  ScopedEnvironment config_;
  ScopedEnvironment library_;
};

}  // namespace gpusel_test
