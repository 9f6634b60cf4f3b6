// The layout test (tests/state/CMakeLists.txt): two copies of gpusel of one
// version whose shared records differ in layout (state_c is built with
// GPUSEL_DETAIL_TEST_LAYOUT_CHANGE, which adds a field to nvml::Library). Both
// are loaded with RTLD_GLOBAL, so that they would share one state under g++
// and clang alike. They must share what has one layout (the default device)
// and never what has two (the loaded NVML: a copy reading the other's
// nvml::Library reads past its end, as ASan showed in read_numa_node).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

template <typename Function>
Function get(void* handle, const std::string& symbol) {
  void* found = dlsym(handle, symbol.c_str());
  if (found == nullptr) {
    std::fprintf(stderr, "layout_host: %s not found: %s\n", symbol.c_str(), dlerror());
    std::exit(2);
  }
  return reinterpret_cast<Function>(found);
}

void* open(const char* path) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "layout_host: %s\n", dlerror());
    std::exit(2);
  }
  return handle;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: layout_host <libstate_a.so> <libstate_c.so (another layout)> <fake NVML>\n");
    return 2;
  }
  void* a = open(argv[1]);
  void* c = open(argv[2]);
  const char* nvml = argv[3];

  get<void (*)(int)>(a, "state_a_set_default_device")(1);
  check(get<int (*)()>(c, "state_c_default_device")() == 1,
        "C, whose nvml::Library differs, still shares A's default device (the process state has one layout)");

  const void* nvml_a = get<const void* (*)(const char*)>(a, "state_a_nvml_library")(nvml);
  const void* nvml_c = get<const void* (*)(const char*)>(c, "state_c_nvml_library")(nvml);
  check(nvml_a != nullptr && nvml_c != nullptr && nvml_a != nvml_c,
        "A and C keep different loaded NVML libraries (two layouts of nvml::Library)");
  check(get<int (*)(const char*)>(c, "state_c_nvml_device_count")(nvml) >= 0,
        "C reads its NVML library with its own layout");

  std::printf("%s\n", failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
