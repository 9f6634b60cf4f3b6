// gpusel/dlpack.hpp included before an official dlpack.h: both compile, and
// gpusel's enumerators and the official ones (kDLCPU in the global namespace)
// stay apart.
#include "gpusel/dlpack.hpp"

#include "spec_dlpack.h"  // NOLINT(llvm-include-order): the order is what this file tests

#include "official_header.hpp"

namespace dlpack_official_header {

static_assert(static_cast<int>(kDLCUDAHost) == static_cast<int>(gpusel::dlpack::kDLCUDAHost));
static_assert(DLPACK_MAJOR_VERSION == gpusel::dlpack::kMajorVersion);

DLManagedTensorVersioned* export_official_last(gpusel::Buffer<float>&& buffer) {
  return gpusel::to_dlpack<DLManagedTensorVersioned>(std::move(buffer), {2, 2});
}

gpusel::Buffer<float> import_official_last(DLManagedTensorVersioned* tensor) {
  return gpusel::from_dlpack<float>(tensor);
}

// gpusel's own struct, from a file that sees both.
gpusel::dlpack::ManagedTensorVersioned* export_gpusel_struct(gpusel::Buffer<float>&& buffer) {
  return gpusel::to_dlpack(std::move(buffer));
}

}  // namespace dlpack_official_header
