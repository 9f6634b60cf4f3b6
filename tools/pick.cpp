// gpusel pick: free GPUs chosen and printed, for scripts.
#include <gpusel/machine/physical_order.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/text.hpp>

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "devices.hpp"
#include "output.hpp"

namespace gpusel_tool {
namespace {

// A candidate's members: its GPU's, and the MIG instance it is (null: the whole GPU).
void candidate_members(JsonWriter& json, const gpusel::DeviceMap& map, const gpusel::Candidate& candidate) {
  json.key("cuda_visible_devices_token").value(candidate.uuid());
  json.key("mig_instance");
  if (candidate.mig_instance) {
    json.begin_object();
    mig_members(json, *candidate.mig_instance);
    json.end_object();
  } else {
    json.null();
  }
  gpu_members(json, map, candidate.physical_index, candidate.gpu);
}

void print_pick_json(const Arguments& arguments, const gpusel::DeviceMap& map,
                     const std::vector<gpusel::Candidate>& assessed, const std::vector<gpusel::Candidate>& picked,
                     const std::string& value, const std::string& failure) {
  JsonWriter json;
  json.begin_object();
  json.key("criteria").value(gpusel::describe(arguments.criteria));
  json.key("ok").value(failure.empty());
  json.key("error").value(failure.empty() ? "" : "nothing_fits");  // a code, as in every error document
  json.key("reason").value(failure);
  json.key("cuda_visible_devices");
  if (failure.empty())
    json.value(value);
  else
    json.null();  // nothing fitted: no value to set, rather than an empty one that hides every GPU
  json.key("connection");
  if (const auto weakest = gpusel::weakest_link(picked)) {
    json.begin_object();
    json.key("weakest_link").value(link_name(*weakest));
    json.key("text").value(gpusel::describe_connection(picked, arguments.criteria));
    json.end_object();
  } else {
    json.null();
  }
  json.key("picked").begin_array();
  for (const gpusel::Candidate& candidate : picked) {
    json.begin_object();
    candidate_members(json, map, candidate);
    json.end_object();
  }
  json.end_array();
  json.key("assessed").begin_array();
  for (const gpusel::Candidate& candidate : assessed) {
    json.begin_object();
    candidate_members(json, map, candidate);
    json.key("fits").value(candidate.fits());
    json.key("rejected_because").begin_array();
    for (const gpusel::Rejection& rejection : candidate.rejections) json.value(rejection.text);
    json.end_array();
    json.key("rejected_for").begin_array();  // the same reasons as codes, to switch on
    for (const gpusel::Rejection& rejection : candidate.rejections) json.value(gpusel::describe(rejection.reason));
    json.end_array();
    json.key("busy_processes");  // the compute processes that made it busy
    process_array(json, candidate.busy_processes);
    json.end_object();
  }
  json.end_array();
  allotment_member(json, map);
  json.end_object();
  std::cout << json.str();
}

// What the order's caveat says of GPUs printed by their index: not its parts on GPUs in
// MIG mode, whose instances pick prints by their MIG- UUIDs, exact whatever the order.
std::string index_caveat(const gpusel::CudaPhysicalOrder& order) {
  std::string kept;
  std::string_view rest = order.caveat;
  while (!rest.empty()) {
    const std::size_t end = std::min(rest.find("; "), rest.size());
    const std::string_view part = rest.substr(0, end);
    if (part.find(" is in MIG mode: ") == std::string_view::npos)
      kept += (kept.empty() ? "" : "; ") + std::string(part);
    rest.remove_prefix(std::min(end + 2, rest.size()));
  }
  return kept;
}

// Whether this process may choose among `map`'s GPUs; says why not (Note [The GPUs this
// process may choose among]), for instance where the scheduler gave GPUs without saying which,
// and says where Slurm gave this step no GPU, so that pick chooses as outside Slurm. Reads the
// CUDA_VISIBLE_DEVICES Slurm wrote in Slurm's numbers into `map` (Note [Slurm's GPU numbers]).
bool may_choose(const Arguments& arguments, gpusel::DeviceMap& map) {
  try {
    map = in_slurm_numbers(map);  // Note [Slurm's GPU numbers]
    const gpusel::Allotment allotment = allotment_of(map);
    require_allotment(map, "pick", choosing_of(arguments));
    if (!allotment.scheduler.empty() && !allotment.gpus_on_node) {
      const std::string text = allotment.describe();  // escaped; Slurm's line comes first
      std::cerr << "gpusel: " << text.substr(0, text.find('\n')) << "\n";
    }
    if (allotment.engine.known() && allotment.engine.name != "Slurm")  // Note [Naming the engine]
      std::cerr << "gpusel: " + allotment.engine.describe();           // escaped, a line, one write
    const std::string job = allotment.describe_job();                  // inside gpusel run: the job's GPUs (escaped)
    for (std::size_t start = 0; start < job.size(); start = job.find('\n', start) + 1)
      std::cerr << "gpusel: " << job.substr(start, job.find('\n', start) + 1 - start);
    return true;
  } catch (const gpusel::Error& error) {
    std::cerr << "gpusel: " << escape_lines(error_text(error)) << "\n";
    if (arguments.json) print_error_json("allotment", error_text(error), kExitNothingFits);
    return false;
  }
}

}  // namespace

int run_pick(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read =
      read_devices(usage(arguments.criteria.placement == gpusel::PickPlacement::connected), arguments.nvml_timeout);
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  gpusel::DeviceMap map = *read;
  if (!map.known()) return report_no_gpus(map, arguments.json);
  if (!may_choose(arguments, map)) return kExitNothingFits;
  std::vector<gpusel::Candidate> assessed;
  try {
    assessed = gpusel::assess(arguments.criteria, map);
  } catch (const gpusel::Error& error) {  // criteria that make no sense here, e.g. an --exclude naming no GPU
    std::cerr << "gpusel: " << gpusel::escape_for_terminal(error_text(error)) << "\nTry 'gpusel help'.\n";
    if (arguments.json) print_error_json("usage", error_text(error), kExitUsage);
    return kExitUsage;
  }
  try {
    gpusel::reject_leased_gpus(assessed);  // another job's lease makes a GPU busy
  } catch (const gpusel::Error& error) {   // the lease directory or a lease file cannot be used
    std::cerr << escape_lines(error.what()) << "\n";
    if (arguments.json) print_error_json("leases", error.what(), kExitNothingFits);
    return kExitNothingFits;
  }
  std::vector<gpusel::Candidate> picked;
  std::string failure;
  try {
    picked =
        gpusel::choose(arguments.criteria, assessed);  // assess checked the criteria: this fails only when too few fit
  } catch (const gpusel::Error& error) {
    failure = error_text(error);
  }
  std::string value;
  for (const gpusel::Candidate& candidate : picked)
    value +=
        (value.empty() ? "" : ",") +
        (arguments.print_uuids || candidate.mig_instance ? candidate.uuid() : std::to_string(candidate.physical_index));

  if (arguments.json)
    print_pick_json(arguments, map, assessed, picked, value, failure);
  else if (failure.empty())
    std::cout << gpusel::escape_for_terminal(value) << "\n";
  if (!failure.empty()) {
    std::cerr << "gpusel: " << escape_lines(failure) << "\n";
    return kExitNothingFits;
  }
  say_what_was_chosen(arguments, picked);
  const bool printed_an_index =
      !arguments.print_uuids && std::any_of(picked.begin(), picked.end(), [](const gpusel::Candidate& candidate) {
        return !candidate.mig_instance;  // a MIG instance is printed as its UUID, exact whatever the order
      });
  const std::string caveat = index_caveat(map.order);
  if (printed_an_index && !map.order.exact && !caveat.empty())
    std::cerr << "gpusel: caution: " << gpusel::escape_for_terminal(caveat)
              << "; --format uuid names the GPUs exactly\n";
  return kExitOk;
}

}  // namespace gpusel_tool
