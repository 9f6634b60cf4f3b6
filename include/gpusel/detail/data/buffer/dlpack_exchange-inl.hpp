// The definitions of gpusel/detail/data/buffer/dlpack_exchange.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/dlpack.hpp"  // the structs, then dlpack_exchange.hpp (which needs them first)

#include <cuda_runtime_api.h>

#include <limits>
#include <string>

#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/resolve_device.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

// "float64", "int32", "complex128", "bool", or "code 9, 16 bits" for what gpusel does not name.
inline std::string describe_dlpack_dtype(const dlpack::DataType& dtype) {
  const char* name = nullptr;
  switch (dtype.code) {
    case dlpack::kDLInt:
      name = "int";
      break;
    case dlpack::kDLUInt:
      name = "uint";
      break;
    case dlpack::kDLFloat:
      name = "float";
      break;
    case dlpack::kDLBfloat:
      name = "bfloat";
      break;
    case dlpack::kDLComplex:
      name = "complex";
      break;
    case dlpack::kDLBool:
      name = "bool";
      break;
    default:
      break;
  }
  std::string text = name != nullptr
                         ? std::string(name) + std::to_string(dtype.bits)
                         : "code " + std::to_string(dtype.code) + ", " + std::to_string(dtype.bits) + " bits";
  if (dtype.code == dlpack::kDLBool && dtype.bits == 8) text = "bool";
  if (dtype.lanes != 1) text += "x" + std::to_string(dtype.lanes) + " (" + std::to_string(dtype.lanes) + " lanes)";
  return text;
}

// "kDLCPU", "kDLCUDA:1", or "device type 10, id 0" for one gpusel has no name for.
inline std::string describe_dlpack_device(std::int32_t type, std::int32_t id) {
  switch (type) {
    case dlpack::kDLCPU:
      return "kDLCPU";
    case dlpack::kDLCUDAHost:
      return "kDLCUDAHost";
    case dlpack::kDLCUDA:
      return "kDLCUDA:" + std::to_string(id);
    case dlpack::kDLCUDAManaged:
      return "kDLCUDAManaged:" + std::to_string(id);
    case dlpack::kDLROCM:
      return "kDLROCM:" + std::to_string(id);
    default:
      return "device type " + std::to_string(type) + ", id " + std::to_string(id);
  }
}

// Note [DLPack sizes that fit]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A tensor's fields come from another library, or from bytes nobody checked:
// the product of its extents, that times the element size, data plus
// byte_offset, and the row-major strides may each overflow, and a Buffer
// built on a wrapped number is a Buffer of the wrong size at the wrong
// address ({2^61 + 1} doubles is 8 bytes mod 2^64). So import counts in
// checked steps, each refused before it overflows: the element count must
// fit size_t, its bytes must fit ptrdiff_t (the largest object C++ can index,
// and then every stride, a product of extents, fits int64_t), and the first
// byte past the elements, data + byte_offset + bytes, must fit the address
// space; the address is computed as an integer, never as a pointer past its
// object. Each refusal is an Error thrown before ownership passes. Export
// checks what it writes the same way: a shape with a zero extent counts no
// element, whatever its other extents, but its strides must still fit int64_t.

// "{2, 3}", the tensor's shape (its first 8 extents, then "...").
inline std::string describe_dlpack_shape(const DlpackTensorFields& tensor) {
  std::string text;
  for (std::int32_t i = 0; i < tensor.ndim && i < 8; ++i)
    text += (i == 0 ? "" : ", ") + std::to_string(tensor.shape[i]);
  return "{" + text + (tensor.ndim > 8 ? ", ...}" : "}");
}

// "0x7f3a2c001004".
inline std::string hex_address(std::uintptr_t address) {
  std::string digits;
  do {
    digits.insert(digits.begin(), "0123456789abcdef"[address % 16]);
    address /= 16;
  } while (address != 0);
  return "0x" + digits;
}

// The tensor's element count, checking its shape, that its bytes fit (Note
// [DLPack sizes that fit]), and whether it is compact row-major (strides NULL,
// or each stride the product of the sizes after it; a dimension of size 1 may
// have any stride, and no element means no layout).
inline std::size_t dlpack_element_count(const DlpackTensorFields& tensor, std::size_t element_bytes,
                                        const std::string& what) {
  if (tensor.ndim < 0) throw Error(what + ": ndim is " + std::to_string(tensor.ndim));
  if (tensor.ndim > 0 && tensor.shape == nullptr) throw Error(what + ": shape is NULL");
  constexpr auto most_bytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t count = 1;
  bool fits = true;
  bool empty = false;
  for (std::int32_t i = 0; i < tensor.ndim; ++i) {
    const std::int64_t extent = tensor.shape[i];
    if (extent < 0) throw Error(what + ": shape[" + std::to_string(i) + "] is " + std::to_string(extent));
    if (extent == 0) empty = true;
    if (empty || !fits) continue;
    if (count > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(extent)) fits = false;
    if (fits) count *= static_cast<std::size_t>(extent);
  }
  if (empty) return 0;  // no element, whatever the other extents say: no layout to check
  if (!fits || count > most_bytes / element_bytes) {
    throw Error(what + ": the shape " + describe_dlpack_shape(tensor) + " counts more than " +
                std::to_string(most_bytes / element_bytes) + " elements of " + std::to_string(element_bytes) +
                " bytes, the most one object can hold");
  }
  if (tensor.strides == nullptr) return count;
  std::int64_t expected = 1;  // at most count: it fits (above)
  for (std::int32_t i = tensor.ndim; i-- > 0;) {
    if (tensor.shape[i] != 1 && tensor.strides[i] != expected) {
      throw Error(what + ": the tensor is not contiguous: strides[" + std::to_string(i) + "] is " +
                  std::to_string(tensor.strides[i]) + ", row-major needs " + std::to_string(expected) +
                  " (gpusel takes contiguous tensors only; make it contiguous first)");
    }
    expected *= tensor.shape[i];
  }
  return count;
}

// Where the tensor's memory is, as a Buffer holds it.
inline MemoryPlace dlpack_place(const DlpackTensorFields& tensor, const std::string& what) {
  switch (tensor.device_type) {
    case dlpack::kDLCPU:
      return MemoryPlace{};
    case dlpack::kDLCUDAHost:
      return kPinnedHost;
    case dlpack::kDLCUDA: {
      if (tensor.device_id < 0)
        throw Error(what + ": device_id is " + std::to_string(tensor.device_id) + ", which names no CUDA device");
      const int index = resolve_cuda_index(cuda(tensor.device_id), [&] { return what; });
      return MemoryPlace{MemoryKind::device, index};
    }
    default:
      throw Error(what + ": the tensor is on " + describe_dlpack_device(tensor.device_type, tensor.device_id) +
                  ", which gpusel cannot use (it takes kDLCPU, kDLCUDAHost and kDLCUDA)");
  }
}

// The address of the first element, data + byte_offset, once the elements'
// `bytes` after it fit the address space and it is aligned (Note [DLPack sizes that fit]).
inline void* dlpack_start(const DlpackTensorFields& tensor, std::size_t bytes, std::size_t alignment,
                          const std::string& what) {
  if (tensor.data == nullptr) throw Error(what + ": data is NULL");
  const auto data = reinterpret_cast<std::uintptr_t>(tensor.data);
  const std::uint64_t offset = tensor.byte_offset;
  constexpr auto most = std::numeric_limits<std::uintptr_t>::max();
  if (offset > most - data || bytes > most - data - offset) {
    throw Error(what + ": data (" + hex_address(data) + ") + byte_offset (" + std::to_string(offset) + ") + the " +
                std::to_string(bytes) + " bytes of its elements pass the end of the address space");
  }
  const std::uintptr_t start = data + offset;
  if (start % alignment != 0) {
    throw Error(what + ": data + byte_offset (" + hex_address(data) + " + " + std::to_string(offset) + " = " +
                hex_address(start) + ") is not aligned to " + std::to_string(alignment) +
                " bytes, as the element type needs");
  }
  return reinterpret_cast<void*>(start);  // NOLINT(performance-no-int-to-ptr): the producer's address
}

GPUSEL_API DlpackImport check_dlpack_import(const DlpackTensorFields& tensor, const dlpack::DataType& wanted,
                                            std::size_t alignment, const char* function) {
  const std::string what = std::string(function) + "(" + describe_dlpack_dtype(tensor.dtype) + " tensor on " +
                           describe_dlpack_device(tensor.device_type, tensor.device_id) + ")";
  if (tensor.versioned && tensor.version.major != dlpack::kMajorVersion) {
    throw Error(what + ": DLPack version " + std::to_string(tensor.version.major) + "." +
                std::to_string(tensor.version.minor) + "; gpusel speaks DLPack " +
                std::to_string(dlpack::kMajorVersion) + ".x");
  }
  if (tensor.dtype.code != wanted.code || tensor.dtype.bits != wanted.bits || tensor.dtype.lanes != wanted.lanes)
    throw Error(what + ": the Buffer's element type is " + describe_dlpack_dtype(wanted));
  if ((tensor.flags & dlpack::kFlagBitmaskReadOnly) != 0)
    throw Error(what + ": the tensor is read-only, and a Buffer's elements are writable");
  // T's size, as its dtype (the same as the tensor's, above) says: bits per lane times lanes.
  const std::size_t element_bytes = std::size_t{wanted.bits} / 8 * wanted.lanes;
  DlpackImport taken;
  taken.size = dlpack_element_count(tensor, element_bytes, what);
  taken.place = dlpack_place(tensor, what);
  if (taken.size == 0) return taken;  // no element: no address to take
  taken.data = dlpack_start(tensor, taken.size * element_bytes, alignment, what);
  return taken;
}

GPUSEL_API std::vector<std::int64_t> dlpack_export_shape(std::size_t size, const MemoryPlace& place,
                                                         const std::vector<std::int64_t>* shape, bool with_stream,
                                                         const char* function) {
  const std::string device = place.kind == MemoryKind::pinned_host ? "cpu (pinned)" : place.as_device().str();
  if (place.kind == MemoryKind::device && !with_stream) {
    throw Error(std::string(function) + "(" + std::to_string(size) + " elements on " + device +
                "): a CUDA Buffer is exported on the consumer's stream: pass its StreamView");
  }
  if (shape == nullptr) return {static_cast<std::int64_t>(size)};
  // The product of the extents but zeros bounds each stride export writes: it must fit int64_t
  // (Note [DLPack sizes that fit]), and is the count unless an extent is 0.
  std::int64_t span = 1;
  bool negative = false;
  bool overflows = false;
  bool empty = false;
  for (const std::int64_t extent : *shape) {
    negative = negative || extent < 0;
    empty = empty || extent == 0;
    if (negative || overflows || extent <= 1) continue;
    overflows = span > std::numeric_limits<std::int64_t>::max() / extent;
    if (!overflows) span *= extent;
  }
  const std::size_t count = empty ? 0 : static_cast<std::size_t>(span);
  if (negative || overflows || count != size) {
    std::string text;
    for (const std::int64_t extent : *shape) text += (text.empty() ? "" : ", ") + std::to_string(extent);
    throw Error(std::string(function) + "(" + std::to_string(size) + " elements on " + device + "): the shape {" +
                text +
                (!negative && overflows && empty ? "} gives strides past int64_t's range"
                                                 : "} does not count " + std::to_string(size) + " elements"));
  }
  return *shape;
}

GPUSEL_API void order_export(const UntypedBuffer& memory, const dlpack::ConsumerStream& consumer,
                             const char* function) {
  if (!consumer.stream()) return;
  const StreamView stream = *consumer.stream();
  const auto what = [&] {
    return std::string(function) + "(" + std::to_string(memory.bytes()) + " bytes on " +
           memory.place().as_device().str() + ")";
  };
  if (stream.device_index() != memory.place().device) {
    throw Error(what() + ": the consumer's stream is a stream of " + stream.device().str() +
                ", not of the Buffer's GPU");
  }
  memory.order_before(stream.handle(), what);
}

GPUSEL_API void order_import(const DlpackImport& taken, StreamView producer, const char* function) {
  if (taken.place.kind != MemoryKind::device) return;
  const auto what = [&] {
    return std::string(function) + "(" + std::to_string(taken.size) + " elements on " + taken.place.as_device().str() +
           ")";
  };
  if (producer.device_index() != taken.place.device)
    throw Error(what() + ": the producer's stream is a stream of " + producer.device().str() +
                ", not of the tensor's GPU");
  DeviceGuard guard(taken.place.device);
  cudaEvent_t queued = nullptr;
  cudaError_t status = cudaEventCreateWithFlags(&queued, cudaEventDisableTiming);
  if (status != cudaSuccess) throw cuda_error(status, what() + ": cudaEventCreateWithFlags", producer.device());
  status = cudaEventRecord(queued, producer.handle());
  if (status == cudaSuccess) status = cudaStreamWaitEvent(cudaStreamLegacy, queued, 0);
  if (cudaEventDestroy(queued) != cudaSuccess) (void)cudaGetLastError();  // the wait is queued: it may go
  if (status != cudaSuccess)
    throw cuda_error(status, what() + ": waiting for the producer's stream", producer.device());
}

// Note [Freeing an exported Buffer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An exported Buffer's memory goes back to gpusel's pool as the Buffer's own
// would: on its GPU's legacy stream, after the recorded uses. The consumer
// queues its work on the stream it gave at export, after the export, so the
// deleter, not the export, orders the free after it: an event recorded on
// that stream when the deleter runs, which the legacy stream waits for (the
// host waits instead when the event cannot be made). Work the consumer queued
// on other streams must be done before it drops the tensor, PyTorch's
// record_stream rule. The deleter may run on any thread, with any device
// current (the switch is a guard's: it restores without creating a context),
// at exit, when the runtime is unloading (the free is refused and the process
// takes the memory), and in a child forked after CUDA started, which cannot
// use CUDA: there device and pinned memory is left to leak, and nothing throws.
GPUSEL_API void prepare_exported_free(UntypedBuffer& memory, const dlpack::ConsumerStream& consumer) noexcept {
  if (memory.place().kind == MemoryKind::pageable_host || memory.data() == nullptr) return;
  if (forked_after_cuda()) {
    memory.abandon();
    return;
  }
  if (!consumer.stream() || memory.place().kind != MemoryKind::device) return;
  cudaStream_t stream = consumer.stream()->handle();
  release_on_device(memory.place().device, "gpusel freeing an exported Buffer", [stream]() noexcept {
    cudaEvent_t queued = nullptr;
    if (cudaEventCreateWithFlags(&queued, cudaEventDisableTiming) == cudaSuccess) {
      const bool ordered = cudaEventRecord(queued, stream) == cudaSuccess &&
                           cudaStreamWaitEvent(cudaStreamLegacy, queued, 0) == cudaSuccess;
      if (cudaEventDestroy(queued) != cudaSuccess) (void)cudaGetLastError();
      if (ordered) return;
    }
    (void)cudaGetLastError();
    if (cudaStreamSynchronize(stream) != cudaSuccess) (void)cudaGetLastError();  // waited here instead
  });
}

GPUSEL_API dlpack::Device dlpack_device_of(const MemoryPlace& place) noexcept {
  switch (place.kind) {
    case MemoryKind::pageable_host:
      return {dlpack::kDLCPU, 0};
    case MemoryKind::pinned_host:
      return {dlpack::kDLCUDAHost, 0};
    case MemoryKind::device:
      break;
  }
  return {dlpack::kDLCUDA, place.device};
}

}  // namespace gpusel::detail
