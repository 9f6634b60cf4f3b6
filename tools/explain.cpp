// gpusel explain: how CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER map cuda:N to the physical GPUs.
#include <gpusel/machine/visibility.hpp>
#include <gpusel/text.hpp>

#include <iostream>
#include <string>

#include "commands.hpp"
#include "devices.hpp"
#include "output.hpp"

namespace gpusel_tool {
namespace {

void print_explain_json(const gpusel::DeviceMap& map) {
  JsonWriter json;
  json.begin_object();
  optional_value(json, "cuda_visible_devices", map.visible.variable());
  json.key("cuda_visible_devices_hex");  // the exact bytes, where the text above had to replace some
  if (map.visible.variable())
    json.value(hex_bytes(*map.visible.variable()));
  else
    json.null();
  optional_value(json, "cuda_device_order", map.visible.device_order());
  json.key("gpus_known").value(map.known());
  json.key("reason").value(map.inventory.reason);
  json.key("ok").value(map.known() && map.visible.ok());
  json.key("error").value(map.visible.error_name());
  json.key("error_reason").value(map.visible.reason());
  json.key("visible").begin_array();
  for (int logical = 0; map.known() && logical < map.visible.count(); ++logical) {
    json.begin_object();
    gpu_members(json, map, map.visible.physical(logical), *map.device(logical));
    json.end_object();
  }
  json.end_array();
  json.key("tokens").begin_array();
  for (const gpusel::VisibleToken& token : map.visible.tokens()) {
    json.begin_object();
    json.key("text").value(token.text);
    json.key("text_hex").value(hex_bytes(token.text));
    json.key("kept").value(token.kept());
    json.key("why").value(map.known() ? token.why(map.visible.physical_count()) : std::string("not checked"));
    json.end_object();
  }
  json.end_array();
  json.key("order_exact").value(map.order.exact);
  json.key("caveat").value(map.order.caveat);
  allotment_member(json, map);
  json.key("text").value(gpusel::explain(map));
  json.end_object();
  std::cout << json.str();
}

}  // namespace

int run_explain(const Arguments& arguments) {
  const std::optional<gpusel::DeviceMap> read = read_devices({}, arguments.nvml_timeout);  // identity is all it shows
  if (!read) return report_nvml_hung(arguments, kExitNvmlFailed);
  const gpusel::DeviceMap& map = *read;
  if (arguments.json)
    print_explain_json(map);
  else
    std::cout << gpusel::explain(map);
  if (!map.known()) return no_gpus_status(map.inventory);
  return map.cuda_would_fail() ? kExitNothingFits : kExitOk;  // so a job script can test its environment
}

}  // namespace gpusel_tool
