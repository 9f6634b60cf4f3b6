// The C side of dlpack_numpy (numpy_peer.py): a shared library that Python
// loads with ctypes, which exports gpusel Buffers as DLPack tensors and takes
// numpy's tensors into Buffers. The two capsule functions it calls are
// declared here and found in the Python process that loads it: no Python
// header is needed to build it.
#include <cstdint>
#include <optional>
#include <string>

#include "gpusel/buffer.hpp"
#include "gpusel/dlpack.hpp"

extern "C" {
int PyCapsule_IsValid(void* capsule, const char* name);
void* PyCapsule_GetPointer(void* capsule, const char* name);
}

namespace {

using Managed = gpusel::dlpack::ManagedTensorVersioned;

constexpr const char* kUnusedName = "dltensor_versioned";  // the capsule's name until a consumer takes it
constexpr const char* kUsedName = "used_dltensor_versioned";

// gpusel's deleter of the last export, wrapped to count its calls.
void (*exported_deleter)(Managed*) = nullptr;
int deleter_calls = 0;
const void* exported_address = nullptr;

std::optional<gpusel::Buffer<double>> imported;
std::string last_error;

void counting_deleter(Managed* self) {
  ++deleter_calls;
  exported_deleter(self);
}

}  // namespace

extern "C" {

const char* peer_unused_name() { return kUnusedName; }
const char* peer_used_name() { return kUsedName; }

// The capsule's destructor, as the DLPack Python specification has it: a
// capsule no consumer took (still "dltensor_versioned") deletes its tensor.
void peer_capsule_destructor(void* capsule) {
  if (PyCapsule_IsValid(capsule, kUnusedName) == 0) return;  // taken: the consumer deletes it
  auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(capsule, kUnusedName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

// A cpu Buffer<double> of `count` values start, start + 1, ..., exported.
void* peer_export(std::int64_t count, double start) {
  gpusel::Buffer<double> buffer(static_cast<std::size_t>(count), gpusel::cpu());
  for (std::int64_t i = 0; i < count; ++i) buffer.data()[i] = start + static_cast<double>(i);
  exported_address = buffer.data();
  Managed* managed = gpusel::to_dlpack(std::move(buffer));
  exported_deleter = managed->deleter;
  managed->deleter = &counting_deleter;
  return managed;
}

const void* peer_exported_address() { return exported_address; }
int peer_deleter_calls() { return deleter_calls; }

// Takes the tensor into a Buffer<double> (float32 when `as_float` is set, to
// see the Error); 0 on success, -1 with peer_error() on an Error.
int peer_import(void* managed, int as_float) {
  try {
    if (as_float != 0) {
      (void)gpusel::from_dlpack<float>(static_cast<Managed*>(managed));
    } else {
      imported = gpusel::from_dlpack<double>(static_cast<Managed*>(managed));
    }
    return 0;
  } catch (const gpusel::Error& error) {
    last_error = error.what();
    return -1;
  }
}

const char* peer_error() { return last_error.c_str(); }
const void* peer_imported_address() { return imported ? imported->data() : nullptr; }
std::int64_t peer_imported_size() { return imported ? static_cast<std::int64_t>(imported->size()) : -1; }
double peer_imported_sum() {
  double sum = 0;
  for (const double value : imported->to_vector()) sum += value;
  return sum;
}
// The Buffer dies: numpy's deleter runs.
void peer_release_import() { imported.reset(); }

}  // extern "C"
