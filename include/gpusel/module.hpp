// gpusel::Module: a base class for objects that own Buffers and move them all
// at once, in place, like torch.nn.Module.
//
//   struct Linear : gpusel::Module {
//     gpusel::Buffer<float> weight, bias;
//     Linear(std::size_t in, std::size_t out) : weight(in * out), bias(out) {
//       register_buffer("weight", weight);
//       register_buffer("bias", bias);
//     }
//   };
//   Linear layer(4, 2);
//   layer.to(gpusel::cuda(0));           // layer.to("cuda:0"): the same object, returned
//   layer.weight.device()                // cuda:0
// Layer: data (docs/layers.md).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "gpusel/buffer.hpp"
#include "gpusel/detail/core/compile_once.hpp"
#include "gpusel/detail/data/buffer/module_entries.hpp"
#include "gpusel/device.hpp"
#include "gpusel/error.hpp"

namespace gpusel {

// Note [Module::to is a transaction]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// nn.Module.to moves parameters one by one, so a failure midway leaves some
// moved and some not. gpusel's to(device) is all or nothing:
//  1. it copies every buffer (of the module and its children) that is not yet
//     on `device` there, allocating every copy first (Note [Moving many
//     buffers at once]): the only step that can fail, and a failure frees the
//     copies made and leaves every Buffer exactly as it was;
//  2. only then it swaps each copy into its Buffer (a swap cannot fail, and a
//     reference taken before to() sees the moved data), and frees the old memory.
// The price: old and new memory exist together for a moment, so a move between
// GPUs needs room on the target for everything, as a one-by-one move would, and
// no host memory.

// Note [A module graph is a tree with shared nodes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A child module, or a Buffer, may be reached by several paths: two layers
// that register one shared embedding, one Buffer registered in two modules.
// As in PyTorch, each distinct Buffer counts once: to() moves it once (a
// 4 MiB buffer reachable as "x.leaf.w" and "y.leaf.w" needs 4 MiB on the
// target, not 8), device() looks at it once, and named_buffers() lists it
// once, under the first path a depth-first walk in registration order meets
// (PyTorch's named_buffers(remove_duplicate=True)); a child already walked is
// not walked again. named_buffers(SharedBuffers::every_path) lists every path.
// A cycle (A registers B, B registers A) would make every walk endless, so
// register_module rejects the registration that would close one.

// Which paths named_buffers() lists for a Buffer reached by several
// (Note [A module graph is a tree with shared nodes]).
enum class SharedBuffers {
  once,        // the first path only, as PyTorch's named_buffers() does by default
  every_path,  // every path, so a shared Buffer appears once per path
};

class Module {
 public:
  // What named_buffers() reports of one buffer.
  struct BufferInfo {
    std::string name;  // "weight", "child.weight"
    Device device;
    std::size_t size;  // elements
    std::size_t bytes;
    bool pinned;
    const std::type_info* element_type;
  };

  Module() = default;
  virtual ~Module() = default;

  // Copying and moving are deleted: the module keeps pointers to its own
  // members (registered Buffers and children), which a copy or a move would
  // leave pointing into the original object.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // Moves every buffer of this module and its children to `device`, in place,
  // as one transaction (Note [Module::to is a transaction]), and returns
  // *this, so that `&m.to(d) == &m` and calls chain. `cuda` means the current
  // device. Buffers already there are not copied (pinned host buffers stay
  // pinned on to(cpu())); a buffer reached by several paths is copied once
  // (Note [A module graph is a tree with shared nodes]). Throws OutOfMemory when the copies do not fit, and
  // Error for any other failure; either way no buffer was moved.
  GPUSEL_API Module& to(const Device& device);

  // PyTorch's spellings: model.cuda() (the current device), model.cuda(1),
  // model.cpu(). The same as to(gpusel::cuda()), to(gpusel::cuda(1)) and
  // to(gpusel::cpu()): in place, all or nothing, and they return the module.
  Module& cuda() { return to(gpusel::cuda()); }
  Module& cuda(Device::Index index) { return to(gpusel::cuda(index)); }
  Module& cpu() { return to(gpusel::cpu()); }

  // The device every buffer is on. A module without buffers reports the
  // device of its last to() (cpu before). Throws Error when the buffers are
  // on different devices (one was moved by hand), naming two of them.
  GPUSEL_API Device device() const;

  // Every buffer of the module and its children, in registration order, own
  // buffers first, named like PyTorch's named_buffers(): "weight", "child.weight".
  // A Buffer reached by several paths is listed once, under its first path,
  // unless `listing` is SharedBuffers::every_path (Note [A module graph is a
  // tree with shared nodes]).
  [[nodiscard]] GPUSEL_API std::vector<BufferInfo> named_buffers(SharedBuffers listing = SharedBuffers::once) const;

  // The buffer registered as `name` ("child.weight"), by any of its paths.
  // Throws Error when there is none or its element type is not T.
  template <class T>
  Buffer<T>& buffer(std::string_view name) {
    detail::BufferEntry* found = find_entry(name);
    if (found == nullptr) throw Error("gpusel::Module::buffer(\"" + std::string(name) + "\"): no buffer has this name");
    if (found->element_type() != typeid(T))
      throw Error("gpusel::Module::buffer(\"" + std::string(name) + "\"): the buffer holds another element type");
    return *static_cast<Buffer<T>*>(found->buffer());
  }

 protected:
  // Registers `buffer` (usually a member of the subclass) under `name`, which
  // must be non-empty, contain no '.', and be new in this module.
  template <class T>
  Buffer<T>& register_buffer(std::string name, Buffer<T>& buffer) {
    check_new_name(name, &buffer, "register_buffer");
    buffers_.push_back(Entry{std::move(name), std::make_unique<detail::TypedBufferEntry<T>>(buffer)});
    return buffer;
  }

  // Registers a child module (usually a member of the subclass) under `name`;
  // its buffers are named "<name>.<buffer>" and move with this module. The
  // child may be another module's child too (Note [A module graph is a tree
  // with shared nodes]), but may not contain this module: that would be a cycle.
  template <class M>
  M& register_module(std::string name, M& child) {
    static_assert(std::is_base_of_v<Module, M>,
                  "gpusel::Module::register_module: the child must derive from gpusel::Module");
    Module& base = child;
    check_new_child(name, base);
    children_.push_back(Child{std::move(name), &base});
    return child;
  }

 private:
  // Steps 1 and 2 of Note [Module::to is a transaction] for the buffers not
  // yet on `target` (a resolved cuda:N or cpu), named by `names`. Between the
  // steps the copies wait in a list of detail::BufferMove, beside the entries.
  GPUSEL_API static void move_entries(const Device& target, const std::vector<std::string>& names,
                                      const std::vector<detail::BufferEntry*>& entries);

  struct Entry {
    std::string name;
    std::unique_ptr<detail::BufferEntry> entry;
  };
  struct Child {
    std::string name;
    Module* module;
  };
  // Calls visit(name, entry) for every distinct buffer of this module and its
  // children, in registration order, own buffers first, under its first path;
  // with SharedBuffers::every_path, once per path (Note [A module graph is a
  // tree with shared nodes]). Defined, with the walk beneath it, where the
  // functions that call it are: a file that only declares modules compiles none of it.
  template <class Visit>
  void for_each_buffer(const Visit& visit, SharedBuffers listing = SharedBuffers::once) const;
  struct Walked;
  template <class Visit>
  void walk(const Visit& visit, const std::string& prefix, Walked* walked) const;

  // register_module's checks: `name` is new in this module, and `child` is not
  // this module and does not contain it (that would close a cycle).
  GPUSEL_API void check_new_child(const std::string& name, const Module& child) const;

  // The path from this module to `target` ("b.c"), if this module contains it;
  // `walked` keeps the modules searched already, so a shared child is searched once.
  GPUSEL_API std::optional<std::string> path_to(const Module* target, Walked& walked) const;

  // The entry at the path `name` ("child.weight"), or nullptr.
  GPUSEL_API detail::BufferEntry* find_entry(std::string_view name) const;

  // Sets the module and everything below it (a shared child once per path:
  // a repeated store; there are no cycles, so it ends).
  void set_last_device(const Device& device) noexcept {
    last_device_ = device;
    for (const Child& child : children_) child.module->set_last_device(device);
  }

  GPUSEL_API void check_new_name(const std::string& name, const void* object, const char* function) const;

  std::vector<Entry> buffers_;
  std::vector<Child> children_;
  Device last_device_ = gpusel::cpu();
};

}  // namespace gpusel

#if GPUSEL_HEADER_ONLY  // Note [Compile-once mode]
#include "gpusel/module-inl.hpp"
#endif
