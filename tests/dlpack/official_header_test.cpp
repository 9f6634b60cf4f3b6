// gpusel/dlpack.hpp beside an official dlpack.h (spec_dlpack.h stands for
// one), included in either order: the official structs are taken and given
// without a cast, and the layouts are the same.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "official_header.hpp"

namespace {

using namespace dlpack_official_header;

static_assert(sizeof(DLManagedTensorVersioned) == sizeof(gpusel::dlpack::ManagedTensorVersioned));
static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) ==
              offsetof(gpusel::dlpack::ManagedTensorVersioned, dl_tensor));
static_assert(sizeof(DLManagedTensor) == sizeof(gpusel::dlpack::ManagedTensor));
static_assert(gpusel::detail::has_dlpack_layout<DLManagedTensorVersioned>());
static_assert(gpusel::detail::has_dlpack_layout<DLManagedTensor>());

// A struct with DLPack's names in another layout is refused at compile time
// (has_dlpack_layout is what export_dlpack and import_dlpack static_assert).
struct LooksAlike {
  DLPackVersion version;
  std::uint64_t flags;  // swapped with manager_ctx
  void (*deleter)(LooksAlike*);
  void* manager_ctx;
  DLTensor dl_tensor;
};
static_assert(!gpusel::detail::has_dlpack_layout<LooksAlike>());

TEST(DlpackBesideAnOfficialHeader, ItsVersionedStructGoesOutAndComesBackInEitherIncludeOrder) {
  gpusel::Buffer<float> buffer{1, 2, 3, 4};
  const float* address = buffer.data();
  DLManagedTensorVersioned* tensor = export_official_first(std::move(buffer));
  EXPECT_EQ(tensor->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(tensor->version.major, static_cast<std::uint32_t>(DLPACK_MAJOR_VERSION));
  gpusel::Buffer<float> back = import_official_last(tensor);
  EXPECT_EQ(back.data(), address);

  DLManagedTensorVersioned* shaped = export_official_last(std::move(back));
  EXPECT_EQ(shaped->dl_tensor.ndim, 2);
  gpusel::Buffer<float> again = import_official_first(shaped);
  EXPECT_EQ(again.to_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(DlpackBesideAnOfficialHeader, ItsUnversionedStructGoesOutAndComesBack) {
  DLManagedTensor* tensor = export_unversioned_official_first(gpusel::Buffer<float>{5, 6});
  EXPECT_EQ(tensor->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(import_unversioned_official_first(tensor).to_vector(), (std::vector<float>{5, 6}));
}

TEST(DlpackBesideAnOfficialHeader, GpuselsOwnStructIsOneTypeWhicheverHeaderCameFirst) {
  gpusel::dlpack::ManagedTensorVersioned* tensor = export_gpusel_struct(gpusel::Buffer<float>{7});
  EXPECT_EQ(gpusel::from_dlpack<float>(tensor).to_vector(), std::vector<float>{7});
}

}  // namespace
