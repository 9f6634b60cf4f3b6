// DLPack's exchange, behind gpusel/dlpack.hpp: a Buffer's memory made a
// tensor (export_dlpack), a tensor checked and adopted by a Buffer (import_dlpack).
//
// Included only by gpusel/dlpack.hpp, below the structs it reads
// (gpusel::dlpack). They are API and stay in that header, which this one
// cannot include: dlpack.hpp is built on detail/data/ (detail/ lies beneath
// what it serves, docs/layers.md). Buffer<T> is declared here, as in
// module_entries.hpp.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/data/buffer/untyped_buffer.hpp"
#include "gpusel/error.hpp"
#include "gpusel/stream.hpp"

namespace gpusel {
template <class T>
class Buffer;  // gpusel/buffer.hpp, which dlpack.hpp includes before this header
}  // namespace gpusel

namespace gpusel::detail {

// Whether M's layout is the specification's, field by field (Note [DLPack structs of any header]).
template <class M>
constexpr bool has_dlpack_tensor_layout() {
  using T = decltype(M::dl_tensor);
  using D = decltype(T::device);
  using DT = decltype(T::dtype);
  return std::is_standard_layout_v<M> && sizeof(T) == 48 && offsetof(T, data) == 0 && offsetof(T, device) == 8 &&
         offsetof(T, ndim) == 16 && offsetof(T, dtype) == 20 && offsetof(T, shape) == 24 &&
         offsetof(T, strides) == 32 && offsetof(T, byte_offset) == 40 && sizeof(D) == 8 &&
         sizeof(D::device_type) == 4 && offsetof(D, device_id) == 4 && sizeof(DT) == 4 && sizeof(DT::code) == 1 &&
         sizeof(DT::bits) == 1 && offsetof(DT, bits) == 1 && sizeof(DT::lanes) == 2 && offsetof(DT, lanes) == 2 &&
         std::is_same_v<decltype(T::shape), std::int64_t*> && std::is_same_v<decltype(T::strides), std::int64_t*> &&
         sizeof(T::byte_offset) == 8 && std::is_same_v<decltype(M::deleter), void (*)(M*)>;
}
template <class M>
constexpr bool has_dlpack_layout() {
  if constexpr (dlpack::is_managed_tensor_versioned<M>::value) {
    return has_dlpack_tensor_layout<M>() && sizeof(M) == 80 && offsetof(M, version) == 0 && sizeof(M::version) == 8 &&
           offsetof(M, manager_ctx) == 8 && offsetof(M, deleter) == 16 && offsetof(M, flags) == 24 &&
           sizeof(M::flags) == 8 && offsetof(M, dl_tensor) == 32;
  } else {
    return has_dlpack_tensor_layout<M>() && sizeof(M) == 64 && offsetof(M, dl_tensor) == 0 &&
           offsetof(M, manager_ctx) == 48 && offsetof(M, deleter) == 56;
  }
}
template <class M>
inline constexpr bool is_dlpack_struct_v =
    dlpack::is_managed_tensor_versioned<M>::value || dlpack::is_managed_tensor<M>::value;

// The DLPack dtype of T: bool, the integers (no character types), float,
// double, std::complex<float|double>. Any other T does not compile.
template <class T>
constexpr dlpack::DataType dlpack_data_type() {
  constexpr auto bits = static_cast<std::uint8_t>(8 * sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    return {dlpack::kDLBool, bits, 1};
  } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return {dlpack::kDLFloat, bits, 1};
  } else if constexpr (std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>) {
    return {dlpack::kDLComplex, bits, 1};
  } else {
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, char> && !std::is_same_v<T, wchar_t> &&
                      !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t>,
                  "gpusel DLPack: T must be bool, a fixed-width integer, float, double or std::complex<float|double>");
    return {std::is_signed_v<T> ? dlpack::kDLInt : dlpack::kDLUInt, bits, 1};
  }
}

// A DLPack tensor's fields, read by name from whichever struct holds them.
struct DlpackTensorFields {
  void* data = nullptr;
  std::int32_t device_type = 0;
  std::int32_t device_id = 0;
  std::int32_t ndim = 0;
  dlpack::DataType dtype{};
  const std::int64_t* shape = nullptr;
  const std::int64_t* strides = nullptr;
  std::uint64_t byte_offset = 0;
  bool versioned = false;
  dlpack::PackVersion version{};
  std::uint64_t flags = 0;
};

// What from_dlpack takes: the elements' address, their count, and where they live.
struct DlpackImport {
  void* data = nullptr;
  std::size_t size = 0;
  MemoryPlace place;
};

// Checks a tensor against T (its dtype `wanted`, `alignment`) and says where
// its elements are; throws Error naming what differs (`function` leads it).
[[nodiscard]] GPUSEL_API DlpackImport check_dlpack_import(const DlpackTensorFields& tensor,
                                                          const dlpack::DataType& wanted, std::size_t alignment,
                                                          const char* function);

// The shape an export gives `size` elements in `place`: {size} when `shape` is
// null, else *shape once it counts `size` elements; throws Error naming both
// otherwise, and for device memory exported without the consumer's stream.
[[nodiscard]] GPUSEL_API std::vector<std::int64_t> dlpack_export_shape(std::size_t size, const MemoryPlace& place,
                                                                       const std::vector<std::int64_t>* shape,
                                                                       bool with_stream, const char* function);

// Where `place` is, in DLPack's terms.
[[nodiscard]] GPUSEL_API dlpack::Device dlpack_device_of(const MemoryPlace& place) noexcept;

template <class M>
DlpackTensorFields dlpack_fields(const M& managed) {
  const auto& t = managed.dl_tensor;
  DlpackTensorFields fields;
  fields.data = t.data;
  fields.device_type = static_cast<std::int32_t>(t.device.device_type);
  fields.device_id = static_cast<std::int32_t>(t.device.device_id);
  fields.ndim = static_cast<std::int32_t>(t.ndim);
  fields.dtype = {static_cast<std::uint8_t>(t.dtype.code), static_cast<std::uint8_t>(t.dtype.bits),
                  static_cast<std::uint16_t>(t.dtype.lanes)};
  fields.shape = t.shape;
  fields.strides = t.strides;
  fields.byte_offset = static_cast<std::uint64_t>(t.byte_offset);
  if constexpr (dlpack::is_managed_tensor_versioned<M>::value) {
    fields.versioned = true;
    fields.version = {static_cast<std::uint32_t>(managed.version.major),
                      static_cast<std::uint32_t>(managed.version.minor)};
    fields.flags = static_cast<std::uint64_t>(managed.flags);
  }
  return fields;
}

// Makes `memory` (device memory) wait, before it is freed, for the work the
// consumer queued on its stream (Note [Freeing an exported Buffer]); when CUDA
// cannot be used (a forked child) leaves it to leak. Never throws.
GPUSEL_API void prepare_exported_free(UntypedBuffer& memory, const dlpack::ConsumerStream& consumer) noexcept;

// Makes the consumer's stream wait for the work pending on `memory` and
// checks that it is a stream of the memory's GPU; throws Error naming `function`.
GPUSEL_API void order_export(const UntypedBuffer& memory, const dlpack::ConsumerStream& consumer, const char* function);

// The memory of an exported Buffer, with the shape and strides its tensor
// points to, the consumer's stream, and the managed struct itself, all freed
// by its deleter.
template <class M>
struct ExportedTensor {
  UntypedBuffer memory;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  dlpack::ConsumerStream consumer{dlpack::no_synchronize};
  M managed{};

  static void deleter(M* self) noexcept {
    auto* const exported = static_cast<ExportedTensor*>(self->manager_ctx);
    prepare_exported_free(exported->memory, exported->consumer);
    delete exported;
  }
};

// Gives Buffer<T>'s memory to DLPack and back (Note [A Buffer never aliases another]).
struct DlpackAccess {
  template <class T>
  static UntypedBuffer& memory(Buffer<T>& buffer) noexcept {
    return buffer.memory_;
  }
  template <class T>
  static Buffer<T> adopt(UntypedBuffer memory) noexcept {
    return Buffer<T>(std::move(memory));
  }
};

template <class M, class T>
M* export_dlpack(Buffer<T>& buffer, const std::vector<std::int64_t>* shape, const dlpack::ConsumerStream* consumer,
                 const char* function) {
  static_assert(is_dlpack_struct_v<M>, "gpusel::to_dlpack<M>: M must be a DLPack managed tensor struct");
  static_assert(has_dlpack_layout<M>(), "gpusel::to_dlpack<M>: M has DLPack's field names but not its layout");
  constexpr dlpack::DataType dtype = dlpack_data_type<T>();
  UntypedBuffer& memory = DlpackAccess::memory(buffer);
  // Everything that may throw comes first: on an Error the Buffer is unchanged.
  auto exported = std::make_unique<ExportedTensor<M>>();
  exported->shape = dlpack_export_shape(buffer.size(), memory.place(), shape, consumer != nullptr, function);
  exported->strides.assign(exported->shape.size(), 1);
  for (std::size_t i = exported->shape.size(); i-- > 1;)
    exported->strides[i - 1] = exported->strides[i] * (exported->shape[i] > 1 ? exported->shape[i] : 1);
  const dlpack::Device device = dlpack_device_of(memory.place());
  auto& t = exported->managed.dl_tensor;
  t.data = memory.data();
  t.device.device_type = static_cast<decltype(t.device.device_type)>(device.device_type);
  t.device.device_id = device.device_id;
  t.ndim = static_cast<std::int32_t>(exported->shape.size());
  t.dtype.code = static_cast<decltype(t.dtype.code)>(dtype.code);
  t.dtype.bits = dtype.bits;
  t.dtype.lanes = dtype.lanes;
  t.shape = exported->shape.data();
  t.strides = exported->strides.data();
  t.byte_offset = 0;
  if constexpr (dlpack::is_managed_tensor_versioned<M>::value) {
    exported->managed.version.major = dlpack::kMajorVersion;
    exported->managed.version.minor = dlpack::kMinorVersion;
    exported->managed.flags = 0;
  }
  if (consumer != nullptr && memory.place().kind == MemoryKind::device) {
    order_export(memory, *consumer, function);
    exported->consumer = *consumer;
  }
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = &ExportedTensor<M>::deleter;
  exported->memory = std::move(memory);  // noexcept: the memory is the tensor's now
  return &exported.release()->managed;
}

// Calls a foreign tensor's deleter (once, when the Buffer that owns it dies).
template <class M>
void release_dlpack_tensor(void* owner) noexcept {
  M* const managed = static_cast<M*>(owner);
  if (managed->deleter != nullptr) managed->deleter(managed);
}

// Makes the legacy stream of the imported memory's GPU wait for the work the
// producer queued on `producer` (an event); nothing for host memory. Throws
// Error naming `function` (a stream of another GPU, a failed wait).
GPUSEL_API void order_import(const DlpackImport& taken, StreamView producer, const char* function);

template <class T, class M>
Buffer<T> import_dlpack(M* managed, const StreamView* producer, const char* function) {
  static_assert(is_dlpack_struct_v<M>, "gpusel::from_dlpack: the argument must point to a DLPack managed tensor");
  static_assert(has_dlpack_layout<M>(), "gpusel::from_dlpack: the struct has DLPack's field names but not its layout");
  if (managed == nullptr) throw Error(std::string(function) + ": the tensor is nullptr");
  const DlpackImport taken = check_dlpack_import(dlpack_fields(*managed), dlpack_data_type<T>(), alignof(T), function);
  auto owner = std::make_unique<ForeignOwner>(ForeignOwner{managed, &release_dlpack_tensor<M>});
  if (producer != nullptr) order_import(taken, *producer, function);
  // Nothing below throws: from here the Buffer owns the tensor.
  return DlpackAccess::adopt<T>(UntypedBuffer::adopt(taken.data, taken.size * sizeof(T), taken.place, owner.release()));
}

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/detail/data/buffer/dlpack_exchange-inl.hpp"
#endif
