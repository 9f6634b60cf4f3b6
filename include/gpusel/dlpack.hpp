// DLPack: a Buffer handed to another library (numpy, PyTorch, CuPy, JAX) and
// a tensor of theirs taken into a Buffer, zero copy.
//
//   auto* tensor = gpusel::to_dlpack(std::move(buffer));           // tensor.__dlpack__(): buffer is left empty
//   gpusel::Buffer<float> x = gpusel::from_dlpack<float>(tensor);  // torch.from_dlpack(t): x owns the tensor
//
// gpusel declares the DLPack 1.x structs itself (gpusel::dlpack), ABI-identical
// to those of the specification's dlpack.h, and every function here takes the
// official structs as well (Note [DLPack structs of any header]).
// Layer: data (docs/layers.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "gpusel/buffer.hpp"
#include "gpusel/stream.hpp"

namespace gpusel {

// What the functions below name: the structs follow them, and the exchange
// that implements them (detail/data/buffer/dlpack_exchange.hpp) follows the structs.
namespace dlpack {
struct ManagedTensorVersioned;
struct ManagedTensor;
class ConsumerStream;
template <class M, class = void>
struct is_managed_tensor;
}  // namespace dlpack
namespace detail {
template <class M, class T>
M* export_dlpack(Buffer<T>& buffer, const std::vector<std::int64_t>* shape, const dlpack::ConsumerStream* consumer,
                 const char* function);
template <class T, class M>
Buffer<T> import_dlpack(M* managed, const StreamView* producer, const char* function);
}  // namespace detail

// Hands a Buffer's memory to a DLPack tensor, zero copy, like
// tensor.__dlpack__(): the tensor owns the memory and *buffer is left empty.
// The tensor is 1-D ({size}; an empty Buffer gives {0}), or has `shape`, which
// must count size() elements; its strides are always filled. Its deleter frees
// the memory as the Buffer would have: callable once, from any thread. On an
// Error (a shape of another count, the managed struct not allocated, a CUDA
// Buffer without the consumer's stream) the Buffer is unchanged. M is
// dlpack::ManagedTensorVersioned or any struct of DLPack's layout, such as an
// official header's DLManagedTensorVersioned (Note [DLPack structs of any header]).
template <class M = dlpack::ManagedTensorVersioned, class T>
[[nodiscard]] M* to_dlpack(Buffer<T>&& buffer) {
  return detail::export_dlpack<M>(buffer, nullptr, nullptr, "gpusel::to_dlpack");
}
template <class M = dlpack::ManagedTensorVersioned, class T>
[[nodiscard]] M* to_dlpack(Buffer<T>&& buffer, const std::vector<std::int64_t>& shape) {
  return detail::export_dlpack<M>(buffer, &shape, nullptr, "gpusel::to_dlpack");
}

// The same for a Buffer of any device; a CUDA Buffer needs these. `consumer`
// is the stream the consumer will use the tensor on (a stream of the Buffer's
// GPU), made to wait for gpusel's pending work on the memory with events, or
// dlpack::no_synchronize. The deleter frees the memory on its GPU, back to
// gpusel's pool, ordered after the work queued on `consumer` when it runs:
// the consumer's stream must outlive the tensor, and its work on other
// streams must be done (or recorded, as PyTorch's record_stream) before it
// drops the tensor (Note [Freeing an exported Buffer]).
template <class M = dlpack::ManagedTensorVersioned, class T>
[[nodiscard]] M* to_dlpack(Buffer<T>&& buffer, const dlpack::ConsumerStream& consumer) {
  return detail::export_dlpack<M>(buffer, nullptr, &consumer, "gpusel::to_dlpack");
}
template <class M = dlpack::ManagedTensorVersioned, class T>
[[nodiscard]] M* to_dlpack(Buffer<T>&& buffer, const dlpack::ConsumerStream& consumer,
                           const std::vector<std::int64_t>& shape) {
  return detail::export_dlpack<M>(buffer, &shape, &consumer, "gpusel::to_dlpack");
}

// The same, as DLPack's unversioned struct (DLManagedTensor), which consumers
// older than DLPack 1.0 take (PyTorch's at::fromDLPack before 2.6, for one).
template <class M = dlpack::ManagedTensor, class T>
[[nodiscard]] M* to_dlpack_unversioned(Buffer<T>&& buffer) {
  static_assert(dlpack::is_managed_tensor<M>::value, "gpusel::to_dlpack_unversioned<M>: M is DLManagedTensor's kind");
  return detail::export_dlpack<M>(buffer, nullptr, nullptr, "gpusel::to_dlpack_unversioned");
}
template <class M = dlpack::ManagedTensor, class T>
[[nodiscard]] M* to_dlpack_unversioned(Buffer<T>&& buffer, const std::vector<std::int64_t>& shape) {
  static_assert(dlpack::is_managed_tensor<M>::value, "gpusel::to_dlpack_unversioned<M>: M is DLManagedTensor's kind");
  return detail::export_dlpack<M>(buffer, &shape, nullptr, "gpusel::to_dlpack_unversioned");
}
template <class M = dlpack::ManagedTensor, class T>
[[nodiscard]] M* to_dlpack_unversioned(Buffer<T>&& buffer, const dlpack::ConsumerStream& consumer) {
  static_assert(dlpack::is_managed_tensor<M>::value, "gpusel::to_dlpack_unversioned<M>: M is DLManagedTensor's kind");
  return detail::export_dlpack<M>(buffer, nullptr, &consumer, "gpusel::to_dlpack_unversioned");
}
template <class M = dlpack::ManagedTensor, class T>
[[nodiscard]] M* to_dlpack_unversioned(Buffer<T>&& buffer, const dlpack::ConsumerStream& consumer,
                                       const std::vector<std::int64_t>& shape) {
  static_assert(dlpack::is_managed_tensor<M>::value, "gpusel::to_dlpack_unversioned<M>: M is DLManagedTensor's kind");
  return detail::export_dlpack<M>(buffer, &shape, &consumer, "gpusel::to_dlpack_unversioned");
}

// Takes a DLPack tensor into a Buffer<T>, zero copy, like torch.from_dlpack:
// the Buffer owns the tensor and calls its deleter exactly once when it dies.
// N-D tensors are taken flattened when they are contiguous (row-major; strides
// NULL is contiguous). Throws Error, naming what differs, for nullptr, a dtype
// other than T's (code, bits, lanes), a device gpusel cannot use (kDLCPU,
// kDLCUDAHost: a pinned Buffer, kDLCUDA with an index of this process), a
// layout that is not contiguous, a byte_offset that misaligns T (the Error
// gives the address), a size or address whose arithmetic overflows (Note
// [DLPack sizes that fit]), a read-only tensor, or a major version other than 1. Every check and allocation comes
// before ownership passes: on an Error the caller keeps the tensor, and its
// deleter is not called. M is deduced: gpusel's structs or an official header's.
template <class T, class M>
[[nodiscard]] Buffer<T> from_dlpack(M* tensor) {
  return detail::import_dlpack<T>(tensor, nullptr, "gpusel::from_dlpack");
}

// The same, for a tensor whose producer's work on it is queued on `producer`
// (a stream of the tensor's GPU): gpusel's work on the Buffer is ordered after
// it (its GPU's legacy stream waits for an event of `producer`; a
// non-blocking stream of yours must wait for the legacy stream, as for any
// new Buffer). Host tensors need no stream: it is ignored for them.
template <class T, class M>
[[nodiscard]] Buffer<T> from_dlpack(M* tensor, StreamView producer) {
  return detail::import_dlpack<T>(tensor, &producer, "gpusel::from_dlpack");
}

namespace dlpack {

// The structs of the DLPack specification 1.x (dmlc/dlpack's dlpack.h), with
// its field and enumerator names, in gpusel's namespace.
inline constexpr std::uint32_t kMajorVersion = 1;  // DLPACK_MAJOR_VERSION: the one gpusel speaks
inline constexpr std::uint32_t kMinorVersion = 1;  // DLPACK_MINOR_VERSION

struct PackVersion {  // DLPackVersion
  std::uint32_t major;
  std::uint32_t minor;
};

enum DeviceType : std::int32_t {  // DLDeviceType
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
};

struct Device {  // DLDevice
  DeviceType device_type;
  std::int32_t device_id;
};

enum DataTypeCode : std::uint8_t {  // DLDataTypeCode
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DataType {  // DLDataType
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct Tensor {  // DLTensor
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; NULL means compact row-major
  std::uint64_t byte_offset;
};

struct ManagedTensor {  // DLManagedTensor: the unversioned struct of DLPack before 1.0
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

// DLPACK_FLAG_BITMASK_*: the bits of ManagedTensorVersioned::flags.
inline constexpr std::uint64_t kFlagBitmaskReadOnly = std::uint64_t{1} << 0;
inline constexpr std::uint64_t kFlagBitmaskIsCopied = std::uint64_t{1} << 1;
inline constexpr std::uint64_t kFlagBitmaskIsSubbyteTypePadded = std::uint64_t{1} << 2;

struct ManagedTensorVersioned {  // DLManagedTensorVersioned
  PackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  std::uint64_t flags;
  Tensor dl_tensor;
};

// The specification's layout, as C lays it out on every platform gpusel runs on (LP64).
static_assert(sizeof(void*) == 8, "gpusel::dlpack assumes 64-bit pointers (LP64)");
static_assert(sizeof(PackVersion) == 8 && sizeof(Device) == 8 && sizeof(DataType) == 4);
static_assert(offsetof(Device, device_id) == 4 && offsetof(DataType, bits) == 1 && offsetof(DataType, lanes) == 2);
static_assert(sizeof(Tensor) == 48 && offsetof(Tensor, device) == 8 && offsetof(Tensor, ndim) == 16 &&
              offsetof(Tensor, dtype) == 20 && offsetof(Tensor, shape) == 24 && offsetof(Tensor, strides) == 32 &&
              offsetof(Tensor, byte_offset) == 40);
static_assert(sizeof(ManagedTensor) == 64 && offsetof(ManagedTensor, manager_ctx) == 48 &&
              offsetof(ManagedTensor, deleter) == 56);
static_assert(sizeof(ManagedTensorVersioned) == 80 && offsetof(ManagedTensorVersioned, manager_ctx) == 8 &&
              offsetof(ManagedTensorVersioned, deleter) == 16 && offsetof(ManagedTensorVersioned, flags) == 24 &&
              offsetof(ManagedTensorVersioned, dl_tensor) == 32);

// Note [DLPack structs of any header]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program may include an official dlpack.h too (PyTorch's ATen/dlpack.h,
// CuPy's, TVM's): its DLManagedTensorVersioned is another type with the same
// layout, in the global namespace, so the two headers never collide, in either
// order. gpusel's functions take both without a cast: each is a template over
// the managed struct, accepted when it has the specification's field names
// (is_managed_tensor_versioned, is_managed_tensor below) and then held by
// static_assert to the specification's layout, field by field. gpusel reads and
// writes the fields by name, makes the exported struct as the caller's type and
// gives it a deleter of exactly the caller's deleter type, so no pointer is
// ever reinterpreted: no aliasing rule is bent, and a struct that only looks
// alike (same names, other layout) does not compile. Export names its type:
// to_dlpack<DLManagedTensorVersioned>(std::move(buffer)); import deduces it.

// Whether M has the field names of DLManagedTensorVersioned / DLManagedTensor.
template <class M, class = void>
struct is_managed_tensor_versioned : std::false_type {};
template <class M>
struct is_managed_tensor_versioned<M, std::void_t<decltype(&M::version), decltype(&M::manager_ctx),
                                                  decltype(&M::deleter), decltype(&M::flags), decltype(&M::dl_tensor)>>
    : std::true_type {};
template <class M, class>
struct is_managed_tensor : std::false_type {};  // declared above, with its default
template <class M>
struct is_managed_tensor<M, std::void_t<decltype(&M::manager_ctx), decltype(&M::deleter), decltype(&M::dl_tensor)>>
    : std::bool_constant<!is_managed_tensor_versioned<M>::value> {};

// What an exported CUDA Buffer's consumer gives for its stream when it orders
// its work itself: gpusel makes no stream wait (DLPack's stream -1, "no
// synchronization"), and the memory's free waits only for what the Buffer's
// own would have (Note [When freed device memory is reused]).
struct NoSynchronize {
  explicit constexpr NoSynchronize(int /*unused*/) noexcept {}
};
inline constexpr NoSynchronize no_synchronize{0};

// The stream on which the consumer of an exported CUDA Buffer will use it (a
// StreamView: the consumer's own, such as PyTorch's current stream, or a
// Stream), or no_synchronize. There is no default: see to_dlpack.
class ConsumerStream {
 public:
  // Implicit, from a StreamView or anything that converts to one (a Stream):
  // to_dlpack(std::move(x), stream).
  template <class S, std::enable_if_t<std::is_convertible_v<const S&, StreamView>, int> = 0>
  ConsumerStream(const S& stream)  // NOLINT(google-explicit-constructor): a stream is what the call takes
      : stream_(static_cast<StreamView>(stream)) {}
  ConsumerStream(NoSynchronize /*unused*/) noexcept {}  // NOLINT(google-explicit-constructor): no_synchronize

  // The consumer's stream; nullopt for no_synchronize.
  const std::optional<StreamView>& stream() const noexcept { return stream_; }

 private:
  std::optional<StreamView> stream_;
};

}  // namespace dlpack

}  // namespace gpusel

// Below the structs, which it reads (it says why there).
#include "gpusel/detail/data/buffer/dlpack_exchange.hpp"
