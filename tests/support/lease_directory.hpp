// A private lease directory (GPUSEL_LEASE_DIR) for the length of a test, so that
// tests neither see nor take the machine's shared leases.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "fake_nvml_machine.hpp"

namespace gpusel_test {

class ScopedLeaseDirectory {
 public:
  ScopedLeaseDirectory() : path_(make()), variable_("GPUSEL_LEASE_DIR", path_ + "/leases") {}
  ~ScopedLeaseDirectory() { (void)std::system(("rm -rf '" + path_ + "'").c_str()); }
  ScopedLeaseDirectory(const ScopedLeaseDirectory&) = delete;
  ScopedLeaseDirectory& operator=(const ScopedLeaseDirectory&) = delete;
  // The directory that holds the lease directory ($path/leases), which the test may replace.
  const std::string& parent() const { return path_; }
  std::string leases() const { return path_ + "/leases"; }

 private:
  static std::string make() {
    char name[] = "/tmp/gpusel_lease_test_XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    return name;
  }
  std::string path_;
  ScopedEnvironment variable_;
};

}  // namespace gpusel_test
