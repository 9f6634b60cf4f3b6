// An official dlpack.h included before gpusel/dlpack.hpp: both compile, and
// its structs go to gpusel and come back without a cast.
#include "spec_dlpack.h"  // first, as a program that includes ATen/dlpack.h first does

#include "gpusel/dlpack.hpp"  // NOLINT(llvm-include-order): the order is what this file tests

#include "official_header.hpp"

namespace dlpack_official_header {

DLManagedTensorVersioned* export_official_first(gpusel::Buffer<float>&& buffer) {
  DLManagedTensorVersioned* tensor = gpusel::to_dlpack<DLManagedTensorVersioned>(std::move(buffer));
  return tensor;
}

gpusel::Buffer<float> import_official_first(DLManagedTensorVersioned* tensor) {
  return gpusel::from_dlpack<float>(tensor);
}

DLManagedTensor* export_unversioned_official_first(gpusel::Buffer<float>&& buffer) {
  return gpusel::to_dlpack_unversioned<DLManagedTensor>(std::move(buffer));
}

gpusel::Buffer<float> import_unversioned_official_first(DLManagedTensor* tensor) {
  return gpusel::from_dlpack<float>(tensor);
}

}  // namespace dlpack_official_header
