// Peer access between two GPUs: enabled once per pair, remembered per process.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "gpusel/detail/cuda/runtime_state.hpp"
#include "gpusel/detail/data/memory/device_pool.hpp"
#include "gpusel/guard.hpp"

namespace gpusel::detail {

// Note [Peer copies]
// ~~~~~~~~~~~~~~~~~~
// A copy between two GPUs goes over NVLink or PCIe directly when the
// destination has mapped the source's memory (cudaDeviceEnablePeerAccess);
// otherwise the driver stages it through host memory, which cudaMemcpyPeer does
// by itself. Enabling is a property of the destination's context that lasts
// until the context is destroyed, so it is done once per ordered pair and the
// answer is remembered. cudaErrorPeerAccessAlreadyEnabled (the user or another
// library enabled it) means it is enabled. Failure to enable (unsupported
// topology, too many peers) is not an error: the copy is staged instead. Peer
// access does not reach memory-pool memory: an enabled pair also grants the
// destination access to the source's pool (Note [Device memory from a pool],
// detail/data/memory/device_pool.hpp).
class PeerAccess {
 public:
  // The table of the CUDA runtime the caller links, shared by every copy of
  // gpusel that calls it (Note [One state per runtime]).
  static PeerAccess& instance() noexcept {
    return runtime_object<PeerAccess>(RuntimeObject::peer_access,
                                      [](void* storage) noexcept { return new (storage) PeerAccess; });
  }

  // Whether `destination` can now read `source`'s memory directly. A mutex
  // guards the table; each pair costs one cudaDeviceCanAccessPeer and at most
  // one cudaDeviceEnablePeerAccess, ever. Never throws.
  bool enable(int destination, int source) noexcept {
    if (destination == source) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Pair& known : known_)
      if (known.destination == destination && known.source == source) return known.enabled;
    bool enabled = false;
    int can_access = 0;
    if (cudaDeviceCanAccessPeer(&can_access, destination, source) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;  // not remembered: asking may work later
    }
    if (can_access != 0) {
      try {
        DeviceGuard guard(destination);
        const cudaError_t status = cudaDeviceEnablePeerAccess(source, 0);
        enabled = status == cudaSuccess || status == cudaErrorPeerAccessAlreadyEnabled;
        if (status != cudaSuccess) (void)cudaGetLastError();
        if (enabled) DevicePools::instance().allow_peer(destination, source);
      } catch (...) {
        return false;  // the destination could not be made current: not remembered
      }
    }
    try {
      known_.push_back(Pair{destination, source, enabled});
    } catch (...) {  // could not remember: ask again next time
    }
    return enabled;
  }

  // Forgets the table: release_cached_resources() calls it, for use before
  // cudaDeviceReset.
  void forget() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    known_.clear();
  }

 private:
  PeerAccess() = default;
  struct Pair {
    int destination;
    int source;
    bool enabled;
  };

  std::mutex mutex_;
  // One entry per ordered pair asked about: a few dozen on an 8-GPU node, so a
  // list searched in order is all the table needs.
  std::vector<Pair> known_;
};

}  // namespace gpusel::detail
