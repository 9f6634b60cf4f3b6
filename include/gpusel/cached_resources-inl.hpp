// The definitions of gpusel/cached_resources.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: data (docs/layers.md).
#pragma once

#include "gpusel/cached_resources.hpp"

#include "gpusel/detail/core/fork_state.hpp"
#include "gpusel/detail/cuda/primary_context.hpp"
#include "gpusel/detail/data/engine/engine_cache.hpp"
#include "gpusel/detail/data/engine/peer_access.hpp"
#include "gpusel/detail/data/engine/staging_pool.hpp"
#include "gpusel/detail/data/memory/device_pool.hpp"
#include "gpusel/detail/data/memory/host_block_cache.hpp"

namespace gpusel {

GPUSEL_API void release_cached_resources() noexcept {
  if (detail::HostBlocks* blocks = detail::HostBlocks::find()) blocks->release_cached();
  if (detail::forked_after_cuda()) return;
  detail::EngineCache::instance().release();
  detail::StagingPool::instance().release_idle();
  detail::DevicePools::instance().release();
  detail::PeerAccess::instance().forget();
  detail::DeviceFacts::instance().forget_contexts();
}

}  // namespace gpusel
