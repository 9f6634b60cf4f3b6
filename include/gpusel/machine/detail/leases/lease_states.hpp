// Who holds a GPU's lease, as `gpusel list` and a pick's reasons say it: the lease
// directory read once, and each GPU's lock files tried with a shared look, naming a live
// process of the job that holds one (Note [Lease files] in gpusel/machine/lease.hpp).
// lease.hpp's lease_states, lease_holder and detail::lease_holders answer with them.
// This header includes no CUDA header and makes no CUDA call.
#pragma once

#include <string>
#include <string_view>

#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/machine/detail/leases/lock_files.hpp"
#include "gpusel/machine/lease_directory.hpp"

namespace gpusel {
struct LeaseState;  // gpusel/machine/lease.hpp
}  // namespace gpusel

namespace gpusel::detail {

// The lease directory opened for a look, and its listing; `none` where it does not exist (only
// a lease makes it: a look that made it would make it its caller's). Throws Error when it cannot be used.
struct LeaseLook {
  bool none = false;
  FileDescriptor directory;
  LeaseListing listing;
  std::string path;
};

GPUSEL_API LeaseLook look_at_leases();

// Who holds `uuid` (and `parent`), or why it cannot be leased, from `listing` of the opened
// lease directory.
GPUSEL_API LeaseState state_in(const FileDescriptor& directory, const std::string& path, const LeaseListing& listing,
                               std::string_view uuid, std::string_view parent);

}  // namespace gpusel::detail

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/machine/detail/leases/lease_states-inl.hpp"
#endif
