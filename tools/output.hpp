// What the commands share of their output: errors in words and as JSON, and a
// GPU's members in JSON (output.cpp).
#pragma once

#include <gpusel/error.hpp>
#include <gpusel/machine/inventory.hpp>
#include <gpusel/machine/lease.hpp>
#include <gpusel/machine/pick.hpp>
#include <gpusel/machine/topology.hpp>
#include <gpusel/machine/visibility.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "arguments.hpp"
#include "json_writer.hpp"

namespace gpusel_tool {

// What an Error says, for a line the command begins with "gpusel: " itself: without the
// library's own "gpusel: " where a message begins with it (the leases' do), nor the name of
// the function that threw ("gpusel::pick: "), so that the command speaks as itself and no
// line reads "gpusel: gpusel: ..." or "gpusel: gpusel::pick: ...".
// A message of several lines (pick's verdicts, one GPU a line) escaped line by line
// (Note [Hostile text]): control bytes within a line are shown, the line breaks stay.
std::string escape_lines(std::string_view text);

std::string error_text(const gpusel::Error& error);
std::string error_text(std::string_view message);

template <class Value>
void optional_value(JsonWriter& json, const char* key, const std::optional<Value>& value) {
  json.key(key);
  if (value)
    json.value(*value);
  else
    json.null();
}

// A string member, null when `text` is empty (a problem that did not happen, no reading).
inline void text_or_null(JsonWriter& json, const char* key, const std::string& text) {
  json.key(key);
  if (text.empty())
    json.null();
  else
    json.value(text);
}

// A GpuLink in JSON: the enumerator's name.
const char* link_name(gpusel::GpuLink link);

// Each GPU's and MIG instance's lease by UUID, for list; a UUID missing: unknown (null).
using LeaseStates = std::map<std::string, gpusel::LeaseState>;

// The members of one MIG instance's object (its "lease" with `leases`).
void mig_members(JsonWriter& json, const gpusel::MigInstance& instance, const LeaseStates* leases = nullptr);

// The members of one GPU's object; its links to the other GPUs only with `links` (null
// without: N of them for each of N GPUs, so only `list --links` gives them); its "lease" and
// its instances' with `leases` (list's).
void gpu_members(JsonWriter& json, const gpusel::DeviceMap& map, int physical_index, const gpusel::Gpu& gpu,
                 bool links = false, const LeaseStates* leases = nullptr);

// Processes as a JSON array, or null when unknown.
void process_array(JsonWriter& json, const std::optional<std::vector<gpusel::GpuProcess>>& processes);

// The exit status for GPUs that cannot be seen: 4 when NVML was loaded but
// failed (nvmlInit, or while reading the GPUs), else 3 (no usable NVML: no driver).
int no_gpus_status(const gpusel::Inventory& inventory);

// A failure as the JSON document of a --json run: every --json run prints one,
// errors included. `error` is a code ("usage", "no_driver", "nvml_failed",
// "internal", "leases"), `reason` the message (docs/reference.md).
void print_error_json(std::string_view error, const std::string& reason, int status);

// Says why no GPU can be seen (on stderr, and as JSON on stdout for --json); returns the exit status.
int report_no_gpus(const gpusel::DeviceMap& map, bool json);

// The member "allotment": what Slurm and the container runtime gave, their variables as they
// are (Slurm's names, never mapped to GPUs), and Allotment::describe()'s text.
void allotment_member(JsonWriter& json, const gpusel::DeviceMap& map);

// Allotment::describe() of `map`: nothing outside Slurm and containers.
void print_allotment(const gpusel::DeviceMap& map);

// On stderr, what the picks' value cannot say: how --connected's GPUs are joined, and
// that CUDA shows one process one MIG instance only (Note [MIG instances as picks]).
void say_what_was_chosen(const Arguments& arguments, const std::vector<gpusel::Candidate>& picked);

}  // namespace gpusel_tool
