// libFuzzer target over DLPack's exchange (gpusel/dlpack.hpp), on the emulated
// runtime's 2 GPUs: from_dlpack of any tensor, through either struct, on the
// CPU, pinned memory or an emulated GPU; and to_dlpack with any shape, taken
// back. Besides "no crash, no sanitizer report" it checks, for every input:
//  - a tensor is taken exactly when a reference reading, computed here in 128
//    bits, says it fits a Buffer (Note [DLPack sizes that fit]): dtype, version,
//    flags, device, shape, contiguity, data, byte_offset and alignment;
//  - a Buffer taken has the tensor's element count, starts at data + byte_offset
//    and calls the deleter once when it dies; a refusal is a gpusel::Error naming
//    from_dlpack, and the deleter is not called;
//  - an export is accepted exactly when its shape counts the Buffer's elements
//    and its strides fit int64_t; they are row-major; taking it back gives the
//    same address; a refused export leaves the Buffer whole.
// Input (bytes past the end read as 0):
//   [0]     bit 0: the versioned struct; bit 1: strides given; bits 2-3: T (double,
//           float, int8_t, complex<double>); bit 4: the dtype from [6..9], else T's;
//           bit 5: data from [18..25], else a real array; bit 6: read-only; bit 7: export
//   [1]     ndim (signed); an export's element count is [1] % 65
//   [2]     device: 0 kDLCPU, 1 kDLCUDA, 2 kDLCUDAHost, 3 kDLVulkan (low 2 bits)
//   [3]     device_id (signed)
//   [4] [5] version major, minor
//   [6..9]  dtype code, bits, lanes (16 bits, little-endian)
//   [10..17] byte_offset; [18..25] data; then ndim shape extents, then ndim strides (int64, LE)
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "emulated_runtime.hpp"
#include "gpusel/buffer.hpp"
#include "gpusel/dlpack.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

using Wide = unsigned __int128;

struct Input {
  const std::uint8_t* data;
  std::size_t size;
  std::uint8_t byte(std::size_t at) const { return at < size ? data[at] : 0; }
  std::uint64_t u64(std::size_t at) const {
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < 8; ++i) value |= std::uint64_t{byte(at + i)} << (8 * i);
    return value;
  }
};

int deleted = 0;  // the producer's deleter's calls

template <class M>
void count_deletion(M* /*self*/) {
  ++deleted;
}

alignas(16) unsigned char real_array[256];

// The reference reading: whether a Buffer<T> may take `t`, and its element count.
template <class T>
bool fits_buffer(const gpusel::dlpack::Tensor& t, bool versioned, const gpusel::dlpack::PackVersion& version,
                 std::uint64_t flags, Wide& count) {
  const auto wanted = gpusel::detail::dlpack_data_type<T>();
  if (versioned && (version.major != 1 || (flags & gpusel::dlpack::kFlagBitmaskReadOnly) != 0)) return false;
  if (t.dtype.code != wanted.code || t.dtype.bits != wanted.bits || t.dtype.lanes != wanted.lanes) return false;
  if (t.ndim < 0) return false;
  count = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return false;
    count = count > (Wide{1} << 64) ? count : count * static_cast<std::uint64_t>(t.shape[i]);  // saturates
  }
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) count = 0;
  if (t.device.device_type == gpusel::dlpack::kDLCUDA && (t.device.device_id < 0 || t.device.device_id >= 2))
    return false;
  if (t.device.device_type != gpusel::dlpack::kDLCPU && t.device.device_type != gpusel::dlpack::kDLCUDA &&
      t.device.device_type != gpusel::dlpack::kDLCUDAHost)
    return false;
  if (count == 0) return true;
  const Wide bytes = count * sizeof(T);
  if (count > (Wide{1} << 64) || bytes > static_cast<Wide>(std::numeric_limits<std::ptrdiff_t>::max())) return false;
  if (t.strides != nullptr) {
    Wide expected = 1;
    for (int i = t.ndim; i-- > 0;) {
      if (t.shape[i] != 1 && static_cast<Wide>(static_cast<std::uint64_t>(t.strides[i])) != expected) return false;
      expected *= static_cast<std::uint64_t>(t.shape[i]);
    }
  }
  const auto address = reinterpret_cast<std::uintptr_t>(t.data);
  if (address == 0 || Wide{address} + t.byte_offset + bytes > std::numeric_limits<std::uintptr_t>::max()) return false;
  return (address + t.byte_offset) % alignof(T) == 0;
}

template <class T, class M>
void import_tensor(const Input& in) {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  M managed{};
  auto& t = managed.dl_tensor;
  const std::uint8_t mode = in.byte(0);
  t.ndim = static_cast<std::int8_t>(in.byte(1)) % 7;
  for (int i = 0; i < t.ndim; ++i) shape.push_back(static_cast<std::int64_t>(in.u64(26 + 8 * i)));
  for (int i = 0; i < t.ndim; ++i) strides.push_back(static_cast<std::int64_t>(in.u64(26 + 8 * (t.ndim + i))));
  t.shape = shape.data();
  t.strides = (mode & 2) != 0 ? strides.data() : nullptr;
  constexpr gpusel::dlpack::DeviceType types[] = {gpusel::dlpack::kDLCPU, gpusel::dlpack::kDLCUDA,
                                                  gpusel::dlpack::kDLCUDAHost, gpusel::dlpack::kDLVulkan};
  t.device = {types[in.byte(2) % 4], static_cast<std::int8_t>(in.byte(3))};
  t.dtype = gpusel::detail::dlpack_data_type<T>();
  if ((mode & 16) != 0) t.dtype = {in.byte(6), in.byte(7), static_cast<std::uint16_t>(in.byte(8) | in.byte(9) << 8)};
  t.byte_offset = in.u64(10);
  t.data = (mode & 32) != 0 ? reinterpret_cast<void*>(in.u64(18)) : real_array;  // NOLINT(performance-no-int-to-ptr)
  gpusel::dlpack::PackVersion version{1, 0};
  std::uint64_t flags = 0;
  if constexpr (gpusel::dlpack::is_managed_tensor_versioned<M>::value) {
    managed.version = {in.byte(4), in.byte(5)};
    managed.flags = (mode & 64) != 0 ? gpusel::dlpack::kFlagBitmaskReadOnly : 0;
    version = {managed.version.major, managed.version.minor};
    flags = managed.flags;
  }
  managed.deleter = &count_deletion<M>;
  Wide count = 0;
  const bool fits = fits_buffer<T>(t, gpusel::dlpack::is_managed_tensor_versioned<M>::value, version, flags, count);
  deleted = 0;
  try {
    gpusel::Buffer<T> buffer = gpusel::from_dlpack<T>(&managed);
    check(fits && buffer.size() == count);
    if (count != 0)
      check(reinterpret_cast<std::uintptr_t>(buffer.data()) ==
            reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset);
    check(buffer.is_cuda() == (t.device.device_type == gpusel::dlpack::kDLCUDA));
    check(buffer.is_pinned() == (t.device.device_type == gpusel::dlpack::kDLCUDAHost));
  } catch (const gpusel::Error& error) {
    check(!fits && deleted == 0 && std::strncmp(error.what(), "gpusel::from_dlpack(", 20) == 0);
    return;
  }
  check(deleted == 1);
}

// The reference reading of an export's shape: it counts `size` and its strides fit int64_t.
bool fits_export(const std::vector<std::int64_t>& shape, std::size_t size) {
  Wide count = 1;
  Wide span = 1;
  for (const std::int64_t extent : shape) {
    if (extent < 0) return false;
    count *= static_cast<std::uint64_t>(extent);
    if (extent > 1) span *= static_cast<std::uint64_t>(extent);
    if (span > static_cast<Wide>(std::numeric_limits<std::int64_t>::max())) return false;
  }
  return count == size;
}

template <class T, class M>
void export_and_take_back(const Input& in) {
  const std::size_t size = in.byte(1) % 65;
  std::vector<std::int64_t> shape;
  for (int i = 0; i < in.byte(3) % 5; ++i) shape.push_back(static_cast<std::int64_t>(in.u64(26 + 8 * i)));
  const bool on_gpu = in.byte(2) % 2 == 1;
  gpusel::Buffer<T> buffer(size, on_gpu ? gpusel::cuda(0) : gpusel::cpu());
  const T* address = buffer.data();
  M* tensor = nullptr;
  try {
    if constexpr (gpusel::dlpack::is_managed_tensor_versioned<M>::value) {
      tensor = on_gpu ? gpusel::to_dlpack(std::move(buffer), gpusel::dlpack::no_synchronize, shape)
                      : gpusel::to_dlpack(std::move(buffer), shape);
    } else {
      tensor = on_gpu ? gpusel::to_dlpack_unversioned(std::move(buffer), gpusel::dlpack::no_synchronize, shape)
                      : gpusel::to_dlpack_unversioned(std::move(buffer), shape);
    }
  } catch (const gpusel::Error& error) {
    check(!fits_export(shape, size) && buffer.data() == address && buffer.size() == size);  // NOLINT
    check(std::strstr(error.what(), "gpusel::to_dlpack") == error.what());
    return;
  }
  check(fits_export(shape, size));
  const auto& t = tensor->dl_tensor;
  check(t.ndim == static_cast<std::int32_t>(shape.size()) && t.data == address);
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    check(t.shape[i] == shape[i] && t.strides[i] == stride);
    stride *= shape[i] > 1 ? shape[i] : 1;
  }
  gpusel::Buffer<T> back = gpusel::from_dlpack<T>(tensor);
  check(back.size() == size && (size == 0 || back.data() == address));
}

template <class T>
void one_input(const Input& in) {
  const bool versioned = (in.byte(0) & 1) != 0;
  if ((in.byte(0) & 128) != 0) {
    if (versioned) export_and_take_back<T, gpusel::dlpack::ManagedTensorVersioned>(in);
    if (!versioned) export_and_take_back<T, gpusel::dlpack::ManagedTensor>(in);
  } else {
    if (versioned) import_tensor<T, gpusel::dlpack::ManagedTensorVersioned>(in);
    if (!versioned) import_tensor<T, gpusel::dlpack::ManagedTensor>(in);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  gpusel_emulated::reset(gpusel_emulated::devices(2));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Input in{data, size};
  switch ((in.byte(0) >> 2) % 4) {
    case 0:
      one_input<double>(in);
      break;
    case 1:
      one_input<float>(in);
      break;
    case 2:
      one_input<std::int8_t>(in);
      break;
    default:
      one_input<std::complex<double>>(in);
      break;
  }
  return 0;
}
