// What the two files of dlpack_official_header_test give its test: each
// includes gpusel/dlpack.hpp and an official dlpack.h in one order.
#pragma once

#include "gpusel/dlpack.hpp"
#include "spec_dlpack.h"

namespace dlpack_official_header {

DLManagedTensorVersioned* export_official_first(gpusel::Buffer<float>&& buffer);
gpusel::Buffer<float> import_official_first(DLManagedTensorVersioned* tensor);
DLManagedTensor* export_unversioned_official_first(gpusel::Buffer<float>&& buffer);
gpusel::Buffer<float> import_unversioned_official_first(DLManagedTensor* tensor);
DLManagedTensorVersioned* export_official_last(gpusel::Buffer<float>&& buffer);
gpusel::Buffer<float> import_official_last(DLManagedTensorVersioned* tensor);
gpusel::dlpack::ManagedTensorVersioned* export_gpusel_struct(gpusel::Buffer<float>&& buffer);

}  // namespace dlpack_official_header
