// The mixed consumer's program file, compiled once (gpusel::compiled), beside a
// library compiled header-only (header_only_part.cpp): the two agree.
#include <gpusel/gpusel.hpp>

#include <iostream>
#include <string>

#if !defined(GPUSEL_COMPILE_ONCE)
#error "mixed_main.cpp must be compiled once"
#endif

std::string header_only_view();  // header_only_part.cpp

int main() {
  const std::string compiled =
      gpusel::preferred_device().str() + "; " + std::to_string(gpusel::query_inventory().gpus.size()) + " GPUs";
  const std::string header_only = header_only_view();
  std::cout << "compiled: " << compiled << "\nheader-only: " << header_only << "\n";
  return compiled == header_only ? 0 : 1;
}
