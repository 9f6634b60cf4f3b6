// The definitions of gpusel/machine/detail/system/explain_parts.hpp's out-of-line functions
// (Note [Compile-once mode] in gpusel/detail/core/compile_once.hpp).
#pragma once

#include "gpusel/machine/detail/system/explain_parts.hpp"

#include <cstddef>
#include <optional>
#include <vector>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/machine/inventory.hpp"
#include "gpusel/machine/local_rank.hpp"
#include "gpusel/machine/slurm_numbering.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/text.hpp"
#include "gpusel/visible_devices.hpp"

namespace gpusel::detail {

GPUSEL_API const VisibleToken* mig_token_ending_list(const VisibleDevices& visible) noexcept {
  for (const VisibleToken& token : visible.tokens())
    if (!token.kept())
      return token.outcome == TokenOutcome::unknown_uuid && token.text.rfind("MIG-", 0) == 0 ? &token : nullptr;
  return nullptr;
}

// Escaped for a terminal (Note [Hostile text]), as all of explain() is.
inline std::string describe_gpu(int physical, const Gpu& gpu) {
  std::string text = "physical " + std::to_string(physical) + "  nvidia-smi " + std::to_string(gpu.nvml_index) + "  ";
  if (!gpu.name.empty()) text += escape_for_terminal(gpu.name) + "  ";
  return text + escape_for_terminal(gpu.uuid) + "  " + escape_for_terminal(gpu.pci_bus_id);
}

GPUSEL_API std::string explain_variables(const VisibleDevices& visible) {
  return escape_for_terminal(describe_value("CUDA_VISIBLE_DEVICES", visible.variable())) + "  " +
         escape_for_terminal(describe_value("CUDA_DEVICE_ORDER", visible.device_order())) +
         (visible.device_order() ? "" : " (FASTEST_FIRST)") + "\n";
}

GPUSEL_API std::string explain_cuda_started() {
  return cuda_started() ? "CUDA has started in this process: changing these variables now has no effect here.\n"
                        : "CUDA has not started in this process: the variables can still be changed.\n";
}

GPUSEL_API std::string explain_nvml(const Inventory& inventory) {
  std::string text = "NVML (" + escape_for_terminal(inventory.nvml_library) + ") sees " +
                     std::to_string(inventory.gpus.size()) + (inventory.gpus.size() == 1 ? " GPU" : " GPUs");
  if (!inventory.driver_version.empty()) text += ", driver " + escape_for_terminal(inventory.driver_version);
  if (inventory.cuda_driver_version > 0)
    text += " (CUDA " + std::to_string(inventory.cuda_driver_version / 1000) + "." +
            std::to_string(inventory.cuda_driver_version % 1000 / 10) + ")";
  return text + ".\n";
}

GPUSEL_API MigEnd find_mig_end(const DeviceMap& map) {
  MigEnd end;
  end.token = mig_token_ending_list(map.visible);
  if (end.token == nullptr) return end;
  for (int physical = 0; physical < map.order.count(); ++physical) {
    const Gpu& gpu = map.order.gpu(map.inventory, physical);
    for (const MigInstance& instance : gpu.mig_instances) {
      if (!starts_with_ignoring_case(instance.uuid, end.token->text)) continue;
      const std::string ids =
          "GI " + std::to_string(instance.gpu_instance_id) + ", CI " + std::to_string(instance.compute_instance_id);
      end.owner = physical;
      end.owner_text = ", an instance of physical GPU " + std::to_string(physical) + " (nvidia-smi " +
                       std::to_string(gpu.nvml_index) + "; " + ids + ")";
      end.why = "ends gpusel's list: MIG instance (" + ids + ") of physical GPU " + std::to_string(physical) +
                "; what CUDA shows from this token on is CUDA's to decide";
      return end;
    }
  }
  return end;
}

GPUSEL_API std::string explain_mig_end(const VisibleDevices& visible, const MigEnd& end) {
  return "CUDA_VISIBLE_DEVICES names a MIG instance (" + escape_for_terminal(quote(end.token->text)) +
         (end.owner_text.empty() ? std::string("), which is none of the GPUs or MIG instances NVML lists")
                                 : ")" + end.owner_text) +
         ": what CUDA shows from that token on is CUDA's to decide (nvidia-smi -L lists the instances; "
         "CUDA 11 and 12 show a process one MIG instance). Known before it: " +
         (visible.ok() ? visible_count_text(visible.count()) : std::string("nothing")) + ".\n";
}

// Where CUDA_VISIBLE_DEVICES's list ends: the token that ends it, and its position.
struct ListEnd {
  std::size_t position;
  VisibleToken token;
};

// Where the list ends on every machine, whatever its GPUs, read as the driver reads it: at a
// token with no digit, a negative one or a UUID in an index list, at an index in a UUID list
// (Note [How the driver reads CUDA_VISIBLE_DEVICES]); nullopt when only the GPUs can tell.
inline std::optional<ListEnd> list_end_on_every_machine(const VisibleDevices& visible) {
  const std::vector<VisibleToken>& tokens = visible.tokens();
  for (std::size_t position = 0; position < tokens.size(); ++position) {
    VisibleToken token = tokens[position];
    if (is_uuid_token(token.text) != is_uuid_token(tokens.front().text)) {
      token.outcome = TokenOutcome::other_kind;
      return ListEnd{position, token};
    }
    const std::optional<int> index = is_uuid_token(token.text) ? 0 : read_index_token(token.text);
    if (index && *index >= 0) continue;
    token.outcome = index ? TokenOutcome::negative : TokenOutcome::no_digits;
    token.value = index.value_or(0);
    return ListEnd{position, token};
  }
  return std::nullopt;
}

// Where the list ends on this machine, when devices are visible and the tokens from there on are
// ignored: not after a GPU named twice (the value is an error) nor at a MIG instance (CUDA decides).
inline std::optional<ListEnd> list_end_on_this_machine(const DeviceMap& map, const MigEnd& mig_end) {
  const std::vector<VisibleToken>& tokens = map.visible.tokens();
  if (!map.visible.ok()) return std::nullopt;
  for (std::size_t position = 0; position < tokens.size(); ++position) {
    const VisibleToken& token = tokens[position];
    if (token.kept()) continue;
    if (token.outcome == TokenOutcome::duplicate || &token == mig_end.token) return std::nullopt;
    return ListEnd{position, token};
  }
  return std::nullopt;
}

GPUSEL_API std::string explain_ignored(const DeviceMap& map, const MigEnd& mig_end) {
  const std::optional<ListEnd> end =
      map.known() ? list_end_on_this_machine(map, mig_end) : list_end_on_every_machine(map.visible);
  if (!end || end->position == 0) return {};
  const std::vector<VisibleToken>& tokens = map.visible.tokens();
  std::string ignored;
  for (std::size_t i = end->position; i < tokens.size(); ++i)
    ignored += (i == end->position ? "" : ",") + tokens[i].text;
  std::string why = end->token.why(map.visible.physical_count());  // "ignored: ends the list: it is ..."
  why.erase(0, why.find(": ") + 2);
  if (!map.known()) why.insert(why.find(':'), " on any machine");
  return "CUDA ignores " + std::string(map.known() ? "" : "at least ") + escape_for_terminal(quote(ignored)) +
         " of CUDA_VISIBLE_DEVICES: token " + std::to_string(end->position + 1) + ", " +
         escape_for_terminal(quote(end->token.text)) + ", " + escape_for_terminal(why) + ".\n";
}

GPUSEL_API std::string explain_visible_devices(const DeviceMap& map) {
  const VisibleDevices& visible = map.visible;
  // A GPU in MIG mode is not a CUDA device: CUDA shows its instances instead
  // and numbers the devices from there on itself, so it gets no cuda:N, nor do those after it.
  int first_mig = -1;
  for (int logical = 0; logical < visible.count() && first_mig < 0; ++logical)
    if (map.device(logical)->mig_enabled) first_mig = logical;
  std::string text = first_mig < 0
                         ? visible_count_text(visible.count()) + ":\n"
                         : std::to_string(visible.count()) + (visible.count() == 1 ? " GPU is" : " GPUs are") +
                               " visible; CUDA shows the MIG instances of a GPU in MIG mode instead, and "
                               "numbers the devices from cuda:" +
                               std::to_string(first_mig) + " on itself:\n";
  // As wide as the widest label and two blanks: "cuda:1000" needs more than "cuda:0".
  const std::size_t width = std::string("cuda:").size() + std::to_string(visible.count() - 1).size() + 2;
  for (int logical = 0; logical < visible.count(); ++logical) {
    const Gpu& gpu = *map.device(logical);
    const std::string label = first_mig < 0 || logical < first_mig ? "cuda:" + std::to_string(logical)
                              : gpu.mig_enabled                    ? std::string("MIG")
                                                                   : std::string("cuda:?");
    text += "  " + pad(label, width < 8 ? 8 : width) +
            describe_gpu(visible.physical_indices()[static_cast<std::size_t>(logical)], gpu) + "\n";
  }
  return text;
}

GPUSEL_API std::string explain_hidden(const DeviceMap& map, int mig_owner) {
  std::string hidden;
  for (int physical = 0; physical < map.order.count(); ++physical)
    if (!map.visible.logical(physical) && physical != mig_owner)
      hidden += "  " + describe_gpu(physical, map.order.gpu(map.inventory, physical)) + "\n";
  return hidden.empty() ? hidden : "Hidden from this process:\n" + hidden;
}

// What CUDA_VISIBLE_DEVICES gives this task of its step's `gpus_on_node` GPUs: whether they are
// its own or shared, and their cuda:N and UUIDs, which only the driver's reading of it gives;
// where `slurm` (its reading in Slurm's numbers) names other GPUs, whose they are.
inline std::string explain_task_gpus(const DeviceMap& map, int gpus_on_node, const SlurmList& slurm) {
  const VisibleDevices& visible = map.visible;
  std::string text = "This task's CUDA_VISIBLE_DEVICES is unset";
  if (visible.variable()) {
    const int listed = static_cast<int>(visible.tokens().size());  // entries, as Slurm writes them
    text = listed < gpus_on_node ? "This task has GPUs of its own, " + std::to_string(listed) + " of the step's " +
                                       std::to_string(gpus_on_node)
                                 : std::string("This task sees the step's GPUs");
    text += " (CUDA_VISIBLE_DEVICES lists " + std::to_string(listed) + ")";
  }
  for (int logical = 0; map.known() && logical < visible.count(); ++logical)
    text += (logical == 0 ? (slurm.agrees() ? ": " : "; as CUDA reads it, not Slurm: ") : ", ") + std::string("cuda:") +
            std::to_string(logical) + " is " + escape_for_terminal(map.device(logical)->uuid);
  return text + ".\n";
}

// Which physical GPU each of Slurm's numbers in CUDA_VISIBLE_DEVICES is, and whether CUDA
// reads them so (Note [Slurm's GPU numbers]); "" where Slurm did not write the variable.
inline std::string explain_slurm_numbers(const SlurmList& slurm) {
  if (!slurm.from_slurm || slurm.physical.empty()) return {};
  return "Slurm numbers this node's GPUs " + escape_for_terminal(slurm.rule) + ":\n" + slurm.described +
         (slurm.agrees() ? "CUDA reads CUDA_VISIBLE_DEVICES as the same GPUs.\n" : "Caution: " + slurm.problem + ".\n");
}

GPUSEL_API std::string explain_allotment(const DeviceMap& map) {
  const Allotment allotment = gpusel::allotment(map.known() && map.visible.ok() ? map.visible.count() : 0);
  std::string text = allotment.describe();            // escaped, a line each
  if (allotment.known() && allotment.gpus_on_node) {  // under Slurm's line, which comes first
    const SlurmList slurm = slurm_list(map);
    text.insert(text.find('\n') + 1,
                explain_task_gpus(map, *allotment.gpus_on_node, slurm) + explain_slurm_numbers(slurm));
  }
  return text;
}

GPUSEL_API std::string explain_tokens(const DeviceMap& map, const MigEnd& mig_end) {
  const VisibleDevices& visible = map.visible;
  if (visible.tokens().empty()) return {};
  std::string text = "How CUDA reads CUDA_VISIBLE_DEVICES (split on ','; the first token not kept ends the list):\n";
  for (const VisibleToken& token : visible.tokens())
    text +=
        "  " + pad(escape_for_terminal(quote(token.text)), 14) + " " +
        (!map.known()                                      ? std::string("not checked: the GPUs are unknown")
         : &token == mig_end.token && !mig_end.why.empty() ? mig_end.why
                                                           : escape_for_terminal(token.why(visible.physical_count()))) +
        "\n";
  return text;
}

}  // namespace gpusel::detail
