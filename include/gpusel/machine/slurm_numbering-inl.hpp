// The definitions of gpusel/machine/slurm_numbering.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
#pragma once

#include "gpusel/machine/slurm_numbering.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "gpusel/detail/core/environment.hpp"
#include "gpusel/error.hpp"
#include "gpusel/machine/physical_order.hpp"
#include "gpusel/machine/visibility.hpp"
#include "gpusel/text.hpp"

namespace gpusel {

namespace detail {

// Slurm's names as gres.conf writes them, expanded: "/dev/nvidia[0-1],/dev/nvidia3" is three,
// "n[1-2]" two. Commas inside brackets separate numbers and ranges; a range keeps the first
// number's width ("[08-10]": 08, 09, 10).
inline std::vector<std::string> expand_slurm_names(std::string_view text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t at = 0; at <= text.size(); ++at) {
    const char c = at < text.size() ? text[at] : ',';
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c != ',' || (depth > 0 && at < text.size())) continue;
    const std::string_view name = text.substr(start, at - start);
    start = at + 1;
    const std::size_t open = name.find('['), close = name.find(']');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
      if (!name.empty()) names.emplace_back(name);
      continue;
    }
    const std::string head(name.substr(0, open)), tail(name.substr(close + 1));
    for (const std::string& item : expand_slurm_names(name.substr(open + 1, close - open - 1))) {
      const std::size_t dash = item.find('-');
      const std::string first = item.substr(0, dash);
      const long from = std::strtol(first.c_str(), nullptr, 10);
      const long to = dash == std::string::npos ? from : std::strtol(item.c_str() + dash + 1, nullptr, 10);
      for (long number = from; number <= to && number - from < 4096; ++number) {
        std::string digits = std::to_string(number);
        if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
        digits.insert(0, head);
        names.push_back(digits.append(tail));
      }
    }
  }
  return names;
}

// One gres.conf line's value of `key` (keys are case-insensitive), nullopt when it has none.
inline std::optional<std::string> gres_value(std::string_view line, std::string_view key) {
  for (std::size_t at = 0; at < line.size();) {
    while (at < line.size() && std::isspace(static_cast<unsigned char>(line[at]))) ++at;
    std::size_t end = at;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    const std::string_view word = line.substr(at, end - at);
    at = end;
    if (word.size() <= key.size() || word[key.size()] != '=') continue;
    bool same = true;
    for (std::size_t i = 0; i < key.size(); ++i)
      same = same && std::tolower(static_cast<unsigned char>(word[i])) == key[i];
    if (same) return std::string(word.substr(key.size() + 1));
  }
  return std::nullopt;
}

// The trailing number of a device file's name: the N of /dev/nvidiaN; -1 when it ends in none.
inline int device_file_number(const std::string& file) {
  std::size_t digits = file.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(file[digits - 1]))) --digits;
  if (digits == file.size() || file.size() - digits > 6) return -1;
  return std::atoi(file.c_str() + digits);
}

// The whole of the file at `path`, nullopt when it cannot be read.
inline std::optional<std::string> read_text_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return std::nullopt;
  std::string text;
  char buffer[4096];
  for (std::size_t read = 0; (read = std::fread(buffer, 1, sizeof buffer, file)) > 0 && text.size() < (1u << 20);)
    text.append(buffer, read);
  std::fclose(file);
  return text;
}

// Whether one of Slurm's lines (gres.conf's or slurm.conf's) is for node `node`: it names no
// NodeName, or one that expands to `node`.
inline bool for_node(std::string_view line, std::string_view node) {
  const std::optional<std::string> nodes = gres_value(line, "nodename");
  if (!nodes) return true;
  for (const std::string& name : expand_slurm_names(*nodes))
    if (name == node) return true;
  return false;
}

// The GPU types of node `node`'s Gres= in slurm.conf's `text`, in the order written: "a100", "h100"
// of Gres=gpu:a100:2,gpu:h100:2; none for untyped GPUs.
inline std::vector<std::string> node_gpu_types(std::string_view text, std::string_view node) {
  std::vector<std::string> types;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, std::min(text.find('#', start), end) - start);
    start = end + 1;
    const std::optional<std::string> gres = gres_value(line, "gres");
    if (!gres || !gres_value(line, "nodename") || !for_node(line, node)) continue;
    for (const std::string& item : expand_slurm_names(*gres)) {
      const std::size_t first = item.find(':'), second = item.find(':', first + 1);
      if (item.compare(0, first, "gpu") == 0 && second != std::string::npos)
        types.push_back(item.substr(first + 1, second - first - 1));
    }
  }
  return types;
}

}  // namespace detail

GPUSEL_API SlurmNumbering parse_gres_conf(std::string_view text, std::string_view node, std::string_view path,
                                          const std::vector<std::string>& node_types) {
  SlurmNumbering numbering;
  std::vector<std::vector<std::string>> typed(node_types.size());  // each type's files, in Gres= order
  bool autodetect = false;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, std::min(text.find('#', start), end) - start);
    start = end + 1;
    if (!detail::for_node(line, node)) continue;
    if (const std::optional<std::string> detect = detail::gres_value(line, "autodetect"))
      autodetect = *detect == "nvml";
    const std::optional<std::string> files = detail::gres_value(line, "file");
    if (detail::gres_value(line, "name") != std::optional<std::string>("gpu") || !files) continue;
    const std::string type = detail::gres_value(line, "type").value_or("");
    const auto group = std::find(node_types.begin(), node_types.end(), type);
    std::vector<std::string>& into = group == node_types.end()
                                         ? numbering.device_files
                                         : typed[static_cast<std::size_t>(group - node_types.begin())];
    for (std::string& file : detail::expand_slurm_names(*files)) into.push_back(std::move(file));
  }
  std::vector<std::string> untyped = std::move(numbering.device_files);  // typed first, as Gres= lists the types
  numbering.device_files.clear();
  for (std::vector<std::string>& files : typed)
    numbering.device_files.insert(numbering.device_files.end(), files.begin(), files.end());
  numbering.device_files.insert(numbering.device_files.end(), untyped.begin(), untyped.end());
  const std::string where = " (" + std::string(path) + ")";
  if (autodetect || numbering.device_files.empty()) {
    numbering.device_files.clear();
    numbering.rule = std::string("by PCI bus ID, as Slurm's documentation says of ") +
                     (autodetect ? "AutoDetect=nvml" : "a node whose gres.conf gives its GPUs no File=") + where;
  } else {
    numbering.rule = "by gres.conf's File= lines for node " + std::string(node) + ", in the order written" + where;
  }
  return numbering;
}

GPUSEL_API SlurmNumbering slurm_numbering(const ReadVariable& read) {
  std::string path = "/etc/slurm/gres.conf";
  if (const std::optional<std::string> conf = read("SLURM_CONF"); conf && conf->find('/') != std::string::npos)
    path = conf->substr(0, conf->rfind('/') + 1) + "gres.conf";
  std::string node;
  if (const std::optional<std::string> name = read("SLURMD_NODENAME")) {
    node = *name;
  } else {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) node = std::string(host).substr(0, std::string(host).find('.'));
  }
  const std::optional<std::string> text = detail::read_text_file(path);
  if (!text)
    return {{}, "by PCI bus ID, as Slurm's documentation says of AutoDetect=nvml (" + path + " cannot be read)"};
  const std::string folder = path.substr(0, path.rfind('/') + 1);
  const std::optional<std::string> node_lines =
      detail::read_text_file(read("SLURM_CONF").value_or(folder + "slurm.conf"));
  SlurmNumbering numbering = parse_gres_conf(*text, node, path, detail::node_gpu_types(node_lines.value_or(""), node));
  const std::string cgroup = detail::read_text_file(folder + "cgroup.conf").value_or("");
  for (std::size_t start = 0; start < cgroup.size();) {  // Note [Slurm's GPU numbers]: numbers inside the task
    const std::size_t end = std::min(cgroup.find('\n', start), cgroup.size());
    const std::optional<std::string> constrain =
        detail::gres_value(cgroup.substr(start, end - start), "constraindevices");
    numbering.task_local = numbering.task_local || (constrain && (*constrain == "yes" || *constrain == "Yes"));
    start = end + 1;
  }
  if (numbering.task_local) numbering.rule += "; ConstrainDevices=yes numbers them inside the task";
  return numbering;
}

namespace detail {

// Physical GPU (CUDA's physical index in `map`) at `position` of its inventory; -1 when none.
inline int physical_at(const DeviceMap& map, std::size_t position) {
  for (int physical = 0; physical < map.order.count(); ++physical)
    if (map.order.positions[static_cast<std::size_t>(physical)] == position) return physical;
  return -1;
}

// The physical GPU that is Slurm's `number` under `numbering`, its device file in `file`; -1 when none is known.
inline int slurm_gpu(const DeviceMap& map, const SlurmNumbering& numbering, int number, std::string& file) {
  const std::vector<std::size_t> pci = cuda_physical_order(map.inventory, std::string_view("PCI_BUS_ID")).positions;
  if (numbering.device_files.empty())
    return number < static_cast<int>(pci.size()) ? physical_at(map, pci[static_cast<std::size_t>(number)]) : -1;
  if (number >= static_cast<int>(numbering.device_files.size())) return -1;
  file = numbering.device_files[static_cast<std::size_t>(number)];
  const int minor = device_file_number(file);
  for (std::size_t position = 0; position < map.inventory.gpus.size() && minor >= 0; ++position)
    if (map.inventory.gpus[position].minor_number == minor) return physical_at(map, position);
  return -1;
}

// "GPU-... (NVIDIA A100, 00000000:17:00.0)", escaped; physical GPU `physical` of `map`.
inline std::string slurm_gpu_text(const DeviceMap& map, int physical) {
  const Gpu* gpu = map.physical_device(physical);
  if (gpu == nullptr) return "no GPU NVML shows";
  return escape_for_terminal(gpu->uuid + " (" + gpu->name + ", " + gpu->pci_bus_id + ")");
}

// Why CUDA's reading of `list` (its physical GPUs found) may not be Slurm's, with what to set; "" when it is.
inline std::string slurm_list_problem(const DeviceMap& map, const SlurmList& list, const std::vector<int>& numbers) {
  const std::string value = "CUDA_VISIBLE_DEVICES=" + escape_for_terminal(list.value);
  std::string uuids, slurms;
  bool same = map.visible.ok() && map.visible.count() == static_cast<int>(numbers.size());
  bool pci_reads_it = true;  // whether CUDA_DEVICE_ORDER=PCI_BUS_ID would read Slurm's GPUs
  const std::vector<std::size_t> pci = cuda_physical_order(map.inventory, std::string_view("PCI_BUS_ID")).positions;
  for (std::size_t i = 0; i < numbers.size(); ++i) {
    const int physical = list.physical[i];
    if (physical < 0)
      return "Slurm's " + std::to_string(numbers[i]) + " in " + value +
             " names no GPU that NVML shows (Slurm numbers " + escape_for_terminal(list.rule) +
             "), so which GPUs are this task's is unknown";
    same = same && map.visible.physical(static_cast<int>(i)) == physical;
    const auto n = static_cast<std::size_t>(numbers[i]);
    pci_reads_it = pci_reads_it && n < pci.size() && physical_at(map, pci[n]) == physical;
    uuids += (uuids.empty() ? "" : ",") + map.physical_device(physical)->uuid;
    slurms += (slurms.empty() ? "" : ", ") + slurm_gpu_text(map, physical);
  }
  // CUDA's order is a guess where models differ and CUDA_DEVICE_ORDER is not PCI_BUS_ID (Note [CUDA's physical order]).
  const bool pci_set = map.visible.device_order() == std::optional<std::string>("PCI_BUS_ID");
  bool models_differ = false;
  for (const Gpu& gpu : map.inventory.gpus)
    models_differ = models_differ || gpu.name != map.inventory.gpus.front().name;
  const bool guessed = models_differ && !pci_set;
  if (same && !guessed) return {};
  std::string text = "Slurm wrote " + value + " in its own numbers (" + escape_for_terminal(list.rule) +
                     "), which name " + slurms + ", but CUDA ";
  if (guessed) {
    text +=
        "may read them as other GPUs: this node has GPUs of different models and CUDA_DEVICE_ORDER is not "
        "PCI_BUS_ID, so CUDA counts them FASTEST_FIRST, by a heuristic NVML cannot reproduce exactly";
  } else {
    std::string cuda;
    for (int logical = 0; map.visible.ok() && logical < map.visible.count(); ++logical)
      cuda += (cuda.empty() ? "" : ", ") + slurm_gpu_text(map, map.visible.physical(logical));
    text += "reads them as " + (cuda.empty() ? std::string("no GPU") : cuda);
  }
  text += pci_reads_it && !pci_set
              ? "; export CUDA_DEVICE_ORDER=PCI_BUS_ID where the program starts (Slurm never sets it)"
              : "; name Slurm's GPUs by UUID (CUDA_VISIBLE_DEVICES=" + escape_for_terminal(uuids) + ")";
  return text + ", or start the program under gpusel run, which reads Slurm's numbers";
}

// The numbers of a list Slurm writes ("0,2"); nullopt for any other text.
inline std::optional<std::vector<int>> slurm_numbers(const std::string& value) {
  std::vector<int> numbers;
  for (const std::string& token : expand_slurm_names(value)) {
    if (token.empty() || token.size() > 6 || token.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    numbers.push_back(std::atoi(token.c_str()));
  }
  if (numbers.empty()) return std::nullopt;
  return numbers;
}

}  // namespace detail

GPUSEL_API SlurmList find_slurm_list(const DeviceMap& map, const ReadVariable& read, const SlurmNumbering& numbering) {
  SlurmList list;
  const std::optional<std::string>& value = map.visible.variable();
  if (!value || !read("SLURM_JOB_ID")) return list;
  const std::optional<std::vector<int>> numbers = detail::slurm_numbers(*value);
  if (!numbers || numbering.task_local) return list;  // inside the task, CUDA's numbers: left to CUDA
  for (const char* name : {"GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"})
    list.from_slurm = list.from_slurm || read(name) == value;
  if (!list.from_slurm) return list;
  list.value = *value;
  list.rule = numbering.rule;
  if (!map.known()) return list;  // no GPU to name: CUDA's reading is CUDA's
  for (const int number : *numbers) {
    std::string file;
    const int physical = detail::slurm_gpu(map, numbering, number, file);
    list.physical.push_back(physical);
    list.described += "Slurm's " + std::to_string(number) +
                      (file.empty() ? std::string() : " (" + escape_for_terminal(file) + ")") + " is " +
                      detail::slurm_gpu_text(map, physical) + ".\n";
  }
  list.problem = detail::slurm_list_problem(map, list, *numbers);
  return list;
}

GPUSEL_API SlurmList slurm_list(const DeviceMap& map) {
  const ReadVariable read = [](const char* name) { return detail::environment_variable(name); };
  if (!map.visible.variable() || !read("SLURM_JOB_ID")) return {};  // outside Slurm: no gres.conf to read
  return find_slurm_list(map, read, slurm_numbering(read));
}

GPUSEL_API void SlurmList::require(std::string_view who) const {
  if (!agrees()) throw Error(std::string(who) + ": " + problem);
}

GPUSEL_API DeviceMap in_slurm_numbers(const DeviceMap& map, const SlurmList& list) {
  if (!list.from_slurm || list.agrees()) return map;
  std::string uuids;
  for (const int physical : list.physical) {
    if (physical < 0) throw Error("gpusel::in_slurm_numbers: " + list.problem);
    uuids += (uuids.empty() ? "" : ",") + map.physical_device(physical)->uuid;
  }
  DeviceMap resolved = map;
  std::optional<std::string_view> order;  // CUDA_DEVICE_ORDER as it was: an invalid one stays an error
  if (map.visible.device_order()) order = *map.visible.device_order();
  resolved.visible = parse_visible_devices(uuids, resolved.order.uuids(resolved.inventory), order);
  return resolved;
}

}  // namespace gpusel
