// A library of the mixed consumer compiled header-only (it links gpusel::gpusel),
// linked into a program whose own files are compiled once (gpusel::compiled):
// its copies of gpusel's functions are other symbols than the compiled ones
// (Note [Compile-once mode]), so both work, and agree.
#include <gpusel/gpusel.hpp>

#include <string>

#if defined(GPUSEL_COMPILE_ONCE)
#error "header_only_part.cpp must be compiled header-only"
#endif

std::string header_only_view();

std::string header_only_view() {
  return gpusel::preferred_device().str() + "; " + std::to_string(gpusel::query_inventory().gpus.size()) + " GPUs";
}
