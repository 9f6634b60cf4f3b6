// The fake NVML's session, as NVML documents it (tests/fake_nvml/fake_nvml_session.cpp):
// nvmlInit_v2, nvmlInitWithFlags and nvmlInit counted, nvmlShutdown undoing one each, and
// every other call NVML_ERROR_UNINITIALIZED before the first init and after the last shutdown.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;

template <class F>
F* bound(void* library, const char* name) {
  return reinterpret_cast<F*>(dlsym(library, name));
}

TEST(FakeNvml, CountsInitsAndShutdownsAndRefusesCallsOutsideThem) {
  char path[] = "/tmp/gpusel_fake_nvml_session_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string machine = "gpu\ngpu\n";
  ASSERT_EQ(write(fd, machine.data(), machine.size()), static_cast<ssize_t>(machine.size()));
  close(fd);
  setenv("GPUSEL_FAKE_NVML_CONFIG", path, 1);
  void* library = dlopen(GPUSEL_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  auto* init_v2 = bound<int()>(library, "nvmlInit_v2");
  auto* init_with_flags = bound<int(unsigned)>(library, "nvmlInitWithFlags");
  auto* init = bound<int()>(library, "nvmlInit");
  auto* shutdown = bound<int()>(library, "nvmlShutdown");
  auto* count = bound<int(unsigned*)>(library, "nvmlDeviceGetCount_v2");
  auto* error_string = bound<const char*(int)>(library, "nvmlErrorString");
  ASSERT_TRUE(init_v2 && init_with_flags && init && shutdown && count && error_string);
  unsigned gpus = 0;
  EXPECT_EQ(count(&gpus), kUninitialized) << "before the first init";
  EXPECT_EQ(shutdown(), kUninitialized);
  EXPECT_EQ(init_with_flags(0), kSuccess);
  EXPECT_EQ(init_v2(), kSuccess);
  EXPECT_EQ(init(), kSuccess);
  for (int left = 2; left >= 0; --left) {
    EXPECT_EQ(count(&gpus), kSuccess) << left << " shutdowns to go";
    EXPECT_EQ(gpus, 2u);
    EXPECT_EQ(shutdown(), kSuccess);
  }
  EXPECT_EQ(count(&gpus), kUninitialized) << "after the last shutdown";
  EXPECT_EQ(shutdown(), kUninitialized);
  EXPECT_STREQ(error_string(kUninitialized), "Uninitialized");
  EXPECT_EQ(init_v2(), kSuccess) << "NVML may be initialized again";
  EXPECT_EQ(count(&gpus), kSuccess);
  EXPECT_EQ(shutdown(), kSuccess);
  std::remove(path);
}

}  // namespace
