// What gpusel keeps between calls, and how to give it back: the copy engine's
// pinned staging memory and the table of GPU pairs with peer access enabled.
//
//   gpusel::release_cached_resources();   // torch.cuda.empty_cache(); before cudaDeviceReset
//
// <gpusel/buffer.hpp> includes this header.
#pragma once

#include "gpusel/detail/peer_access.hpp"
#include "gpusel/detail/staging_pool.hpp"

namespace gpusel {

// Frees the pinned staging memory the copy engine keeps between copies and
// forgets which GPU pairs have peer access enabled. Call it before
// cudaDeviceReset (which destroys both behind gpusel's back), or to give the
// pinned memory (up to 128 MiB) back to the system. Like torch.cuda.empty_cache().
inline void release_cached_resources() noexcept {
  detail::StagingPool::instance().release_idle();
  detail::PeerAccess::instance().forget();
}

}  // namespace gpusel
