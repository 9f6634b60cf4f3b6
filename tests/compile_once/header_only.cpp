// The one file of the compile-once program compiled header-only, as a file of
// another library linked into it would be: its copies of gpusel's functions
// are other symbols than libgpusel.a's (the ABI tag of Note [Compile-once
// mode]), so both work, and agree (check.sh).
#undef GPUSEL_COMPILE_ONCE
#include <gpusel/gpusel.hpp>

#include <string>
#include <vector>

std::string header_only_view();

std::string header_only_view() {
  const gpusel::Inventory inventory = gpusel::query_inventory();
  gpusel::PickCriteria criteria;
  criteria.allow_other_users = true;
  const std::vector<gpusel::Candidate> picked = gpusel::pick(criteria);
  const std::vector<int> values =
      gpusel::Buffer<int>(std::vector<int>{4, 5, 6}).to(gpusel::cuda(1)).to(gpusel::cpu()).to_vector();
  return "header-only file: inventory " + std::to_string(inventory.gpus.size()) + " GPUs, picked GPU " +
         (picked.empty() ? std::string("none") : std::to_string(picked.front().physical_index)) + ", round trip " +
         (values == std::vector<int>{4, 5, 6} ? "same values" : "different values") + "\n";
}
