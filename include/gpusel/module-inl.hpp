// The definitions of gpusel/module.hpp's out-of-line functions (Note
// [Compile-once mode] in gpusel/detail/core/compile_once.hpp): header-only,
// the header includes this file; compiled once, an implementation header does.
// Layer: data (docs/layers.md).
#pragma once

#include "gpusel/module.hpp"

#include <algorithm>

#include "gpusel/detail/cuda/resolve_device.hpp"
#include "gpusel/detail/data/buffer/batched_copy.hpp"

namespace gpusel {

// What a walk has met already, each list sorted by address.
struct Module::Walked {
  std::vector<const void*> buffers;
  std::vector<const Module*> modules;
};

namespace detail {

// Adds `item` to the sorted `seen`; false when it was there already.
template <class P>
bool first_meeting(std::vector<P>& seen, P item) {
  const auto at = std::lower_bound(seen.begin(), seen.end(), item);
  if (at != seen.end() && *at == item) return false;
  seen.insert(at, item);
  return true;
}

}  // namespace detail

template <class Visit>
void Module::for_each_buffer(const Visit& visit, SharedBuffers listing) const {
  Walked walked;
  walk(visit, std::string(), listing == SharedBuffers::once ? &walked : nullptr);
}

// for_each_buffer's walk below `prefix`; `walked` is null when every path counts.
template <class Visit>
void Module::walk(const Visit& visit, const std::string& prefix, Walked* walked) const {
  for (const Entry& entry : buffers_)
    if (walked == nullptr || detail::first_meeting(walked->buffers, entry.entry->address()))
      visit(prefix + entry.name, *entry.entry);
  for (const Child& child : children_)
    if (walked == nullptr || detail::first_meeting(walked->modules, static_cast<const Module*>(child.module)))
      child.module->walk(visit, prefix + child.name + ".", walked);
}

GPUSEL_API Module& Module::to(const Device& device) {
  const Device target = device.is_cpu() ? gpusel::cpu() : gpusel::cuda(detail::resolve_cuda_index(device, [&] {
    return "gpusel::Module::to(" + device.str() + ")";
  }));
  std::vector<std::string> names;
  std::vector<detail::BufferEntry*> entries;
  for_each_buffer([&](const std::string& name, detail::BufferEntry& entry) {
    if (entry.device() == target) return;
    names.push_back(name);
    entries.push_back(&entry);
  });
  if (!entries.empty()) move_entries(target, names, entries);
  set_last_device(target);
  return *this;
}

GPUSEL_API void Module::move_entries(const Device& target, const std::vector<std::string>& names,
                                     const std::vector<detail::BufferEntry*>& entries) {
  const auto what = [&target] { return "gpusel::Module::to(" + target.str() + ")"; };
  std::vector<detail::BufferMove> moves(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    moves[i].source = &entries[i]->memory();
    moves[i].target = detail::target_place(target, moves[i].source->place(), what);
    moves[i].elements = entries[i]->size();
  }
  detail::MoveFailure failure;
  try {
    detail::move_buffers(moves.data(), moves.size(), failure);
  } catch (const Error& error) {  // an OutOfMemory stays one; `moves` frees every copy made
    // The Error names the buffer ("child.weight") and the devices, and how many others shared the failed batch.
    const detail::BufferEntry& entry = *entries[failure.first];
    std::string prefix = what() + ": moving buffer \"" + names[failure.first] + "\" (" + std::to_string(entry.bytes()) +
                         " bytes on " + entry.device().str() + ")";
    if (failure.together > 1)
      prefix += " and " + std::to_string(failure.together - 1) + " other buffers batched with it";
    detail::rethrow_with_prefix(error, prefix + " failed, so no buffer was moved");
  }
  for (std::size_t i = 0; i < entries.size(); ++i)
    entries[i]->replace(std::move(moves[i].copy));  // frees the old memory
}

GPUSEL_API Device Module::device() const {
  std::optional<Device> first;
  std::string first_name;
  for_each_buffer([&](const std::string& name, const detail::BufferEntry& entry) {
    const Device here = entry.device();
    if (!first) {
      first = here;
      first_name = name;
    } else if (here != *first) {
      throw Error("gpusel::Module::device(): the buffers are on different devices: \"" + first_name + "\" on " +
                  first->str() + ", \"" + name + "\" on " + here.str());
    }
  });
  return first ? *first : last_device_;
}

GPUSEL_API std::vector<Module::BufferInfo> Module::named_buffers(SharedBuffers listing) const {
  std::vector<BufferInfo> infos;
  for_each_buffer(
      [&infos](const std::string& name, const detail::BufferEntry& entry) {
        infos.push_back(
            BufferInfo{name, entry.device(), entry.size(), entry.bytes(), entry.is_pinned(), &entry.element_type()});
      },
      listing);
  return infos;
}

GPUSEL_API std::optional<std::string> Module::path_to(const Module* target, Walked& walked) const {
  for (const Child& child : children_) {
    if (child.module == target) return child.name;
    if (!detail::first_meeting(walked.modules, static_cast<const Module*>(child.module))) continue;
    if (std::optional<std::string> below = child.module->path_to(target, walked)) return child.name + "." + *below;
  }
  return std::nullopt;
}

GPUSEL_API void Module::check_new_child(const std::string& name, const Module& child) const {
  if (&child == this)
    throw Error("gpusel::Module::register_module(\"" + name + "\"): a module cannot be its own child");
  check_new_name(name, &child, "register_module");
  Walked walked;
  if (std::optional<std::string> back = child.path_to(this, walked)) {
    throw Error("gpusel::Module::register_module(\"" + name + "\"): the module to register as \"" + name +
                "\" contains this module already, as \"" + name + "." + *back +
                "\", so the two would contain each other without end; a module graph cannot have cycles");
  }
}

GPUSEL_API detail::BufferEntry* Module::find_entry(std::string_view name) const {
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos) {
    for (const Entry& entry : buffers_)
      if (entry.name == name) return entry.entry.get();
    return nullptr;
  }
  for (const Child& child : children_)
    if (child.name == name.substr(0, dot)) return child.module->find_entry(name.substr(dot + 1));
  return nullptr;
}

GPUSEL_API void Module::check_new_name(const std::string& name, const void* object, const char* function) const {
  const auto reject = [&](const std::string& why) {
    return Error(std::string("gpusel::Module::") + function + "(\"" + name + "\"): " + why);
  };
  if (name.empty()) throw reject("the name is empty");
  if (name.find('.') != std::string::npos) throw reject("a name cannot contain '.', which separates a child's name");
  for (const Entry& entry : buffers_) {
    if (entry.name == name) throw reject("a buffer of this module already has this name");
    if (entry.entry->address() == object) throw reject("this buffer is already registered as \"" + entry.name + "\"");
  }
  for (const Child& child : children_) {
    if (child.name == name) throw reject("a child module already has this name");
    if (child.module == object) throw reject("this module is already registered as \"" + child.name + "\"");
  }
}

}  // namespace gpusel
