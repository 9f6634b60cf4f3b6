// Specification of gpusel::Module (include/gpusel/module.hpp): buffers moved
// in place, together, as one transaction. Built against the emulated and the
// real runtime (gpusel_test.hpp).
#include "gpusel/module.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusel/copy_engine_options.hpp"
#include "gpusel/guard.hpp"
#include "gpusel_test.hpp"
#include "text_checks.hpp"

namespace {

using gpusel_test::contains;

std::optional<std::string> machine_with(int devices) {
  gpusel::release_cached_resources();
  return gpusel_test::need_devices(devices);
}

struct Linear : gpusel::Module {
  gpusel::Buffer<float> weight;
  gpusel::Buffer<std::int32_t> bias;
  Linear(std::size_t in, std::size_t out) : weight(in * out, gpusel::cpu()), bias(out, gpusel::cpu()) {
    for (std::size_t i = 0; i < weight.size(); ++i) weight.data()[i] = static_cast<float>(i) * 0.5f;
    for (std::size_t i = 0; i < bias.size(); ++i) bias.data()[i] = static_cast<std::int32_t>(i) - 7;
    register_buffer("weight", weight);
    register_buffer("bias", bias);
  }
};

// `size` bytes with no period, so a piece copied to the wrong offset shows;
// `seed` gives another sequence. Each is computed once and copied: the
// fault-injection tests make a model for every failure they inject.
void fill_without_period(std::uint8_t* bytes, std::size_t size, std::uint64_t seed) {
  static std::map<std::pair<std::size_t, std::uint64_t>, std::vector<std::uint8_t>> made;
  std::vector<std::uint8_t>& pattern = made[{size, seed}];
  if (pattern.empty()) {
    pattern.resize(size);
    for (std::size_t k = 0; k < size; ++k) {
      const std::uint64_t x = (k + seed * 0x10001) * 0x9E3779B97F4A7C15u;
      pattern[k] = static_cast<std::uint8_t>((x ^ (x >> 31)) >> 24);
    }
  }
  std::memcpy(bytes, pattern.data(), size);
}

// Several buffers of different types, one large enough for the staged copy
// path (more than 1 MiB), and a child module.
struct Model : gpusel::Module {
  gpusel::Buffer<double> scale{{0.25, 0.5, 0.75}, gpusel::cpu()};
  gpusel::Buffer<std::uint8_t> table;
  Linear head{3, 2};
  Model() : table((std::size_t{6} << 20) + 3, gpusel::cpu()) {
    fill_without_period(table.data(), table.size(), 0);
    register_buffer("scale", scale);
    register_buffer("table", table);
    register_module("head", head);
  }
};

// What the model holds, read back to the host, to compare before and after.
struct Snapshot {
  std::vector<double> scale;
  std::vector<std::uint8_t> table;
  std::vector<float> weight;
  std::vector<std::int32_t> bias;
  bool operator==(const Snapshot& o) const {
    return scale == o.scale && table == o.table && weight == o.weight && bias == o.bias;
  }
};
Snapshot snapshot(const Model& m) {
  return {m.scale.to_vector(), m.table.to_vector(), m.head.weight.to_vector(), m.head.bias.to_vector()};
}

static_assert(!std::is_copy_constructible_v<gpusel::Module>, "a copy would point at the original's buffers");
static_assert(!std::is_move_constructible_v<gpusel::Module>, "a move would point at the original's buffers");

TEST(ModuleOnCpu, NamesItsBuffersLikeNamedBuffers) {
  Model m;
  std::vector<std::string> names;
  for (const auto& info : m.named_buffers()) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "table", "head.weight", "head.bias"}));
  const auto infos = m.named_buffers();
  EXPECT_EQ(infos[2].size, 6u);
  EXPECT_EQ(infos[2].bytes, 24u);
  EXPECT_EQ(*infos[2].element_type, typeid(float));
  EXPECT_EQ(infos[2].device, gpusel::cpu());
  EXPECT_EQ(m.device(), gpusel::cpu());
}

TEST(ModuleOnCpu, FindsABufferByNameAndType) {
  Model m;
  EXPECT_EQ(&m.buffer<float>("head.weight"), &m.head.weight);
  EXPECT_THROW(m.buffer<double>("head.weight"), gpusel::Error) << "wrong element type";
  EXPECT_THROW(m.buffer<float>("head.missing"), gpusel::Error);
}

TEST(ModuleOnCpu, RejectsBadRegistrations) {
  struct Bad : gpusel::Module {
    gpusel::Buffer<int> a, b;
    Linear child{1, 1};
    void try_all() {
      register_buffer("a", a);
      EXPECT_THROW(register_buffer("", b), gpusel::Error);
      EXPECT_THROW(register_buffer("x.y", b), gpusel::Error);
      EXPECT_THROW(register_buffer("a", b), gpusel::Error) << "the name is taken";
      EXPECT_THROW(register_buffer("again", a), gpusel::Error) << "the buffer is registered";
      register_module("child", child);
      EXPECT_THROW(register_module("child", child), gpusel::Error);
      EXPECT_THROW(register_module("other", child), gpusel::Error);
      EXPECT_THROW(register_module("me", *this), gpusel::Error);
    }
  } bad;
  bad.try_all();
  EXPECT_EQ(bad.named_buffers().size(), 3u);
}

// Note [A module graph is a tree with shared nodes]: A registers B, then B
// registers A; and a longer loop through a grandchild.
struct Node : gpusel::Module {
  gpusel::Buffer<int> w{1, 2, 3};
  Node() { register_buffer("w", w); }
  using gpusel::Module::register_module;
};

TEST(ModuleOnCpu, RejectsACycleNamingBothPaths) {
  Node a, b, c;
  a.register_module("b", b);
  try {
    b.register_module("a", a);
    FAIL() << "a cycle was registered";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "gpusel::Module::register_module(\"a\")")) << e.what();
    EXPECT_TRUE(contains(e.what(), "as \"a.b\"")) << e.what();
    EXPECT_TRUE(contains(e.what(), "cycle")) << e.what();
  }
  b.register_module("c", c);
  try {
    c.register_module("top", a);  // a.b.c.top would be a again
    FAIL() << "a longer cycle was registered";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "register_module(\"top\")")) << e.what();
    EXPECT_TRUE(contains(e.what(), "as \"top.b.c\"")) << e.what();
  }
  EXPECT_THROW(a.register_module("me", a), gpusel::Error);
  // Nothing was registered by the rejected calls: every walk ends.
  std::vector<std::string> names;
  for (const auto& info : a.named_buffers()) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "b.w", "b.c.w"}));
  EXPECT_EQ(a.device(), gpusel::cpu());
  EXPECT_EQ(&a.to(gpusel::cpu()), &a);
}

// One leaf reached as x.leaf and y.leaf, and one Buffer registered by two modules.
struct Shared : gpusel::Module {
  Node leaf;
  struct Holder : gpusel::Module {
    explicit Holder(Node& leaf) { register_module("leaf", leaf); }
  } x{leaf}, y{leaf};
  struct Alias : gpusel::Module {
    explicit Alias(gpusel::Buffer<int>& w) { register_buffer("again", w); }
  } alias{leaf.w};
  Shared() {
    register_module("x", x);
    register_module("y", y);
    register_module("alias", alias);
  }
};

TEST(ModuleOnCpu, ListsASharedBufferOnceUnderItsFirstPath) {
  Shared m;
  std::vector<std::string> names;
  for (const auto& info : m.named_buffers()) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x.leaf.w"})) << "PyTorch's remove_duplicate=True";
  names.clear();
  for (const auto& info : m.named_buffers(gpusel::SharedBuffers::every_path)) names.push_back(info.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x.leaf.w", "y.leaf.w", "alias.again"}));
  EXPECT_EQ(&m.buffer<int>("y.leaf.w"), &m.leaf.w) << "found by any path";
  EXPECT_EQ(&m.buffer<int>("alias.again"), &m.leaf.w);
  EXPECT_THROW(m.buffer<int>("y.leaf"), gpusel::Error);
  EXPECT_THROW(m.buffer<int>("z.w"), gpusel::Error);
}

TEST(ModuleOnCpu, ToTheDeviceItIsOnCopiesNothing) {
  Model m;
  const void* memory = m.table.data();
  EXPECT_EQ(&m.to(gpusel::cpu()), &m);
  EXPECT_EQ(m.table.data(), memory);
}

TEST(ModuleOnCpu, ReportsMixedDevicesAsAnError) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  Model m;
  m.head.bias = m.head.bias.to(gpusel::cuda(0));
  try {
    (void)m.device();
    FAIL() << "mixed devices gave one device";
  } catch (const gpusel::Error& e) {
    EXPECT_TRUE(contains(e.what(), "\"head.bias\" on cuda:0")) << e.what();
  }
}

TEST(ModuleWithoutDriver, ToCudaFailsClearlyAndMovesNothing) {
  if (auto why = gpusel_test::need_no_driver()) GTEST_SKIP() << *why;
  Model m;
  const Snapshot before = snapshot(m);
  try {
    m.to(gpusel::cuda());
    FAIL() << "to(cuda) succeeded without a driver";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorInsufficientDriver);
    EXPECT_TRUE(contains(e.what(), "gpusel::Module::to(cuda)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no NVIDIA driver was found")) << e.what();
  }
  EXPECT_EQ(m.device(), gpusel::cpu());
  EXPECT_TRUE(snapshot(m) == before);
}

TEST(Module, ToMovesEveryBufferInPlaceAndReturnsTheSameObject) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  Model m;
  const Snapshot before = snapshot(m);
  gpusel::Buffer<float>& weight = m.head.weight;  // a reference taken before the move
  gpusel::Module& returned = m.to(gpusel::cuda(0));
  EXPECT_EQ(&returned, &m) << "module.cuda() returns the module itself";
  EXPECT_EQ(m.device(), gpusel::cuda(0));
  for (const auto& info : m.named_buffers()) EXPECT_EQ(info.device, gpusel::cuda(0)) << info.name;
  EXPECT_EQ(weight.device(), gpusel::cuda(0)) << "the reference sees the moved data";
  EXPECT_TRUE(snapshot(m) == before);
  EXPECT_EQ(&m.to(gpusel::cpu()).to(gpusel::cuda(0)), &m) << "calls chain";
  EXPECT_TRUE(snapshot(m) == before);
}

TEST(Module, CudaWithoutAnIndexIsTheCurrentDevice) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  Model m;
  gpusel::DeviceGuard guard(1);
  m.to(gpusel::cuda());
  EXPECT_EQ(m.device(), gpusel::cuda(1));
  EXPECT_EQ(m.head.bias.device(), gpusel::cuda(1));
}

TEST(Module, CudaAndCpuArePyTorchsSpellingsOfToAndReturnTheModule) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  Model m;
  const Snapshot before = snapshot(m);
  EXPECT_EQ(&m.cuda(1), &m) << "model.cuda(1) moves in place and returns the model";
  EXPECT_EQ(m.device(), gpusel::cuda(1));
  EXPECT_EQ(&m.cpu(), &m);
  EXPECT_EQ(m.device(), gpusel::cpu());
  {
    gpusel::DeviceGuard guard(1);
    m.cuda();  // model.cuda(): the current device
  }
  EXPECT_EQ(m.device(), gpusel::cuda(1));
  EXPECT_TRUE(snapshot(m) == before);
}

TEST(Module, MovesBetweenGpus) {
  if (auto why = machine_with(2)) GTEST_SKIP() << *why;
  Model m;
  const Snapshot before = snapshot(m);
  m.to(gpusel::cuda(0)).to(gpusel::cuda(1));
  EXPECT_EQ(m.device(), gpusel::cuda(1));
  EXPECT_TRUE(snapshot(m) == before);
}

TEST(Module, WithoutBuffersReportsItsLastDevice) {
  if (auto why = machine_with(1)) GTEST_SKIP() << *why;
  struct Empty : gpusel::Module {
  } empty;
  EXPECT_EQ(empty.device(), gpusel::cpu());
  empty.to(gpusel::cuda(0));
  EXPECT_EQ(empty.device(), gpusel::cuda(0));
}

#if GPUSEL_TEST_EMULATED

TEST(ModuleEmulated, BuffersAlreadyOnTheTargetAreNotCopied) {
  machine_with(2);
  Model m;
  m.to(gpusel::cuda(1));
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(1));
  EXPECT_EQ(gpusel_emulated::calls("cudaMallocFromPoolAsync"), 0);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
}

TEST(ModuleEmulated, FreesTheOldMemoryOnItsDevice) {
  machine_with(2);
  Model m;
  m.to(gpusel::cuda(0));
  const std::size_t on_0 = gpusel_emulated::bytes_in_use(0);
  EXPECT_GT(on_0, std::size_t{6} << 20);
  m.to(gpusel::cuda(1));
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(1), on_0);
}

TEST(ModuleEmulated, RunningOutOfDeviceMemoryIsAnOutOfMemoryAndMovesNothing) {
  gpusel::release_cached_resources();
  gpusel_emulated::reset(gpusel_emulated::devices(1, std::size_t{1} << 20));
  Model m;  // "table" alone is 6 MiB
  const Snapshot before = snapshot(m);
  try {
    m.to(gpusel::cuda(0));
    FAIL() << "6 MiB fit in 1 MiB";
  } catch (const gpusel::OutOfMemory& e) {
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation);
    EXPECT_TRUE(contains(e.what(),
                         "gpusel::Module::to(cuda:0): moving buffer \"table\" (6291459 bytes on cpu) "
                         "failed, so no buffer was moved: gpusel::Buffer::to(cuda:0)"))
        << e.what();
    EXPECT_TRUE(contains(e.what(), "MiB free of 1 MiB")) << e.what() << ": \"scale\" was copied already";
  }
  EXPECT_EQ(m.device(), gpusel::cpu());
  EXPECT_TRUE(snapshot(m) == before);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
}

// The issue's case: 4 MiB reachable as x.leaf.w and y.leaf.w fit on a 6 MiB
// GPU, moved once, as PyTorch moves a shared parameter once.
TEST(ModuleEmulated, MovesASharedBufferOnce) {
  gpusel::release_cached_resources();
  gpusel_emulated::reset(gpusel_emulated::devices(1, std::size_t{6} << 20));
  Shared m;
  m.leaf.w = gpusel::Buffer<int>(std::size_t{1} << 20, gpusel::cpu());  // 4 MiB
  m.leaf.w.fill(7);
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel_emulated::calls("cudaMallocFromPoolAsync"), 1);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), std::size_t{4} << 20);
  EXPECT_EQ(m.device(), gpusel::cuda(0));
  const std::vector<int> back = m.leaf.w.to_vector();
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](int v) { return v == 7; }));
  m.to(gpusel::cpu());
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
  EXPECT_EQ(m.leaf.w.to_vector(), back);
}

// A Model whose head is reached by a second path too, and whose table is
// registered by a second module: each is moved once, also when to() fails.
struct SharedModel : Model {
  struct Holder : gpusel::Module {
    Holder(Linear& head, gpusel::Buffer<std::uint8_t>& table) {
      register_module("head", head);
      register_buffer("table", table);
    }
  } again{head, table};
  SharedModel() { register_module("again", again); }
};

// Makes the `nth` call of `function` fail as out of memory. A pool allocation
// that runs out is retried once, after the queued frees (Note [Device memory
// from a pool]), so for it every call from the nth on fails.
void fail_as_out_of_memory(const char* function, int nth) {
  if (std::string(function) == "cudaMallocFromPoolAsync")
    gpusel_emulated::fail_calls_from(function, nth, cudaErrorMemoryAllocation);
  else
    gpusel_emulated::fail_call(function, nth, cudaErrorMemoryAllocation);
}

// The memory the emulated machine counts as used: on cuda:0, on cuda:1, pinned host.
std::array<std::size_t, 3> memory_in_use() {
  return {gpusel_emulated::bytes_in_use(0), gpusel_emulated::bytes_in_use(1),
          gpusel_emulated::pinned_host_bytes_in_use()};
}

// Note [Module::to is a transaction], proved: every allocation and copy point
// of every path (host->GPU, GPU->host, GPU->GPU with and without peer access)
// fails in turn, and each time every buffer is where it was, intact, nothing
// stays allocated, and the Error says which buffer and device; for a model
// without shared buffers and for one with them.
TEST(ModuleEmulated, ToIsATransactionWhereverItFails) {
  const auto& functions = gpusel_test::kFallibleDataCalls;
  struct Path {
    gpusel::Device from, to;
    bool peer;
  };
  const Path paths[] = {{gpusel::cpu(), gpusel::cuda(1), true},
                        {gpusel::cuda(0), gpusel::cpu(), true},
                        {gpusel::cuda(0), gpusel::cuda(1), true},
                        {gpusel::cuda(0), gpusel::cuda(1), false}};
  int failures_seen = 0;
  for (const bool shared : {false, true}) {
    for (const Path& path : paths) {
      for (const char* function : functions) {
        for (int nth = 1;; ++nth) {
          gpusel::release_cached_resources();
          gpusel_emulated::Config config = gpusel_emulated::devices(2);
          if (!path.peer) config.peer_access = {{false, false}, {false, false}};
          gpusel_emulated::reset(config);
          const std::unique_ptr<Model> owner = shared ? std::make_unique<SharedModel>() : std::make_unique<Model>();
          Model& m = *owner;
          m.to(path.from);
          const Snapshot before = snapshot(m);
          std::vector<const void*> memory;
          for (const auto* pointer :
               {static_cast<const void*>(m.scale.data()), static_cast<const void*>(m.table.data()),
                static_cast<const void*>(m.head.weight.data()), static_cast<const void*>(m.head.bias.data())})
            memory.push_back(pointer);
          gpusel::release_cached_resources();
          const std::array<std::size_t, 3> used_before = memory_in_use();
          const int device_before = gpusel::current_device();

          fail_as_out_of_memory(function, nth);
          bool failed = false;
          try {
            m.to(path.to);
          } catch (const gpusel::Error& e) {
            failed = true;
            ++failures_seen;
            EXPECT_EQ(e.code(), cudaErrorMemoryAllocation) << e.what();
            const bool allocation =
                std::string(function) == "cudaMalloc" || std::string(function) == "cudaMallocHost" ||
                std::string(function) == "cudaMallocFromPoolAsync" || std::string(function) == "cudaMemPoolCreate";
            EXPECT_EQ(dynamic_cast<const gpusel::OutOfMemory*>(&e) != nullptr, allocation)
                << function << ": only an allocation that ran out is an OutOfMemory: " << e.what();
            EXPECT_TRUE(contains(e.what(), "gpusel::Module::to(" + path.to.str() + "): moving buffer \"")) << e.what();
            EXPECT_TRUE(contains(e.what(), "no buffer was moved")) << e.what();
          }
          gpusel_emulated::clear_failures();
          const std::string where = std::string(function) + " #" + std::to_string(nth) + " " + path.from.str() + "->" +
                                    path.to.str() + (path.peer ? "" : " (no peer access)") +
                                    (shared ? " (shared)" : "");
          if (!failed) {
            EXPECT_EQ(m.device(), path.to) << where;
            EXPECT_TRUE(snapshot(m) == before) << where;
            if (!path.to.is_cpu()) {
              const std::size_t moved = m.scale.bytes() + m.table.bytes() + m.head.weight.bytes() + m.head.bias.bytes();
              EXPECT_EQ(gpusel_emulated::bytes_in_use(path.to.index()), moved) << where << ": each buffer once";
            }
            break;
          }
          EXPECT_EQ(m.device(), path.from) << where;
          const void* after[] = {m.scale.data(), m.table.data(), m.head.weight.data(), m.head.bias.data()};
          EXPECT_TRUE(std::equal(memory.begin(), memory.end(), std::begin(after))) << where;
          EXPECT_TRUE(snapshot(m) == before) << where;
          gpusel::release_cached_resources();
          EXPECT_EQ(memory_in_use(), used_before) << where;
          EXPECT_EQ(gpusel_emulated::live_streams(), 0) << where;
          EXPECT_EQ(gpusel_emulated::live_events(), 0) << where;
          EXPECT_EQ(gpusel_emulated::operations_left_to_stream_destroy(), 0)
              << where << ": a staging chunk was reused early";
          EXPECT_EQ(gpusel::current_device(), device_before) << where;
          ASSERT_LT(nth, 200) << where << ": the failures never stopped";
        }
      }
    }
  }
  EXPECT_GT(failures_seen, 80);
}

// Note [Moving many buffers at once] (detail/data/buffer/batched_copy.hpp), tested: a
// model of many small buffers of several element types, and optionally large
// ones, whose bytes have no period (a piece staged at the wrong offset shows).
struct ManyBuffers : gpusel::Module {
  std::vector<std::unique_ptr<gpusel::Buffer<float>>> floats;
  std::vector<std::unique_ptr<gpusel::Buffer<std::uint8_t>>> bytes;  // odd sizes: no piece ends aligned
  std::vector<std::unique_ptr<gpusel::Buffer<std::uint8_t>>> large;  // above the batching threshold

  enum class Memory { pageable, pinned };
  ManyBuffers(int small, int large_count, Memory memory = Memory::pageable) {
    const auto make = [memory](std::size_t size) {
      return std::make_unique<gpusel::Buffer<std::uint8_t>>(memory == Memory::pinned
                                                                ? gpusel::Buffer<std::uint8_t>::pinned(size)
                                                                : gpusel::Buffer<std::uint8_t>(size, gpusel::cpu()));
    };
    for (int i = 0; i < small; ++i) {
      const std::size_t size = 1 + static_cast<std::size_t>(i) * 977 % 3000;
      auto f = std::make_unique<gpusel::Buffer<float>>(
          memory == Memory::pinned ? gpusel::Buffer<float>::pinned(size) : gpusel::Buffer<float>(size, gpusel::cpu()));
      for (std::size_t k = 0; k < size; ++k) f->data()[k] = static_cast<float>(i) + static_cast<float>(k) * 0.25f;
      register_buffer("f" + std::to_string(i), *f);
      floats.push_back(std::move(f));
      auto b = make(size * 3 + 1);
      fill(*b, static_cast<std::uint64_t>(i) + 1);
      register_buffer("b" + std::to_string(i), *b);
      bytes.push_back(std::move(b));
    }
    for (int i = 0; i < large_count; ++i) {
      auto b = make((std::size_t{1} << 20) + 7 + static_cast<std::size_t>(i));
      fill(*b, static_cast<std::uint64_t>(i) + 1000);
      register_buffer("large" + std::to_string(i), *b);
      large.push_back(std::move(b));
    }
  }
  static void fill(gpusel::Buffer<std::uint8_t>& buffer, std::uint64_t seed) {
    fill_without_period(buffer.data(), buffer.size(), seed);
  }
  std::size_t buffer_count() const { return floats.size() + bytes.size() + large.size(); }
  std::size_t total_bytes() const {
    std::size_t total = 0;
    for (const auto& info : named_buffers()) total += info.bytes;
    return total;
  }
  // Every buffer's elements, read back to the host.
  std::vector<std::vector<std::uint8_t>> contents() const {
    std::vector<std::vector<std::uint8_t>> all;
    for (const auto& f : floats) {
      const std::vector<float> values = f->to_vector();
      const auto* first = reinterpret_cast<const std::uint8_t*>(values.data());
      all.emplace_back(first, first + values.size() * sizeof(float));
    }
    for (const auto& b : bytes) all.push_back(b->to_vector());
    for (const auto& b : large) all.push_back(b->to_vector());
    return all;
  }
  std::vector<const void*> memory() const {
    std::vector<const void*> all;
    for (const auto& f : floats) all.push_back(f->data());
    for (const auto& b : bytes) all.push_back(b->data());
    for (const auto& b : large) all.push_back(b->data());
    return all;
  }
};

// Calls that copy, and calls that wait, since the last clear_calls().
int copy_calls() {
  return gpusel_emulated::calls("cudaMemcpy") + gpusel_emulated::calls("cudaMemcpyAsync") +
         gpusel_emulated::calls("cudaMemcpyPeerAsync") + gpusel_emulated::calls("cudaMemcpyBatchAsync");
}
int waits() {
  return gpusel_emulated::calls("cudaStreamSynchronize") + gpusel_emulated::calls("cudaEventSynchronize") +
         gpusel_emulated::calls("cudaDeviceSynchronize");
}

// Copy engine options for one test, restored after it.
struct EngineOptionsForTest {
  explicit EngineOptionsForTest(const gpusel::CopyEngineOptions& options) { gpusel::set_copy_engine_options(options); }
  ~EngineOptionsForTest() { gpusel::set_copy_engine_options({}); }
  EngineOptionsForTest(const EngineOptionsForTest&) = delete;
  EngineOptionsForTest& operator=(const EngineOptionsForTest&) = delete;
};

// 300 small pageable buffers, 1.6 MiB in all: one batch (one 4 MiB staging
// chunk) and one wait, where one copy per buffer made 300 cudaMemcpy and 300 waits.
TEST(ModuleBatched, ManySmallBuffersGoToTheGpuInOneBatchAndOneWait) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  ManyBuffers m(150, 0);
  const auto before = m.contents();
  ASSERT_LT(m.total_bytes(), std::size_t{4} << 20) << "one staging chunk";
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1);
  EXPECT_EQ(copy_calls(), 1);
  EXPECT_EQ(waits(), 1);
  EXPECT_EQ(m.device(), gpusel::cuda(0));
  EXPECT_EQ(m.contents(), before);
  EXPECT_EQ(gpusel_emulated::pending_operations(), 0);
}

TEST(ModuleBatched, ManySmallBuffersComeBackToTheCpuInOneBatchAndOneWait) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  ManyBuffers m(150, 0);
  const auto before = m.contents();
  m.to(gpusel::cuda(0));
  gpusel_emulated::clear_calls();
  m.to(gpusel::cpu());
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1);
  EXPECT_EQ(copy_calls(), 1);
  EXPECT_EQ(waits(), 1);
  EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
  for (const auto& info : m.named_buffers()) EXPECT_FALSE(info.pinned) << info.name;
  EXPECT_EQ(m.contents(), before);
}

TEST(ModuleBatched, ManySmallBuffersMoveBetweenGpusInOneBatchWithAndWithoutPeerAccess) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  for (const bool peer : {true, false}) {
    gpusel::release_cached_resources();
    gpusel_emulated::Config config = gpusel_emulated::devices(2);
    if (!peer) config.peer_access = {{false, false}, {false, false}};
    gpusel_emulated::reset(config);
    ManyBuffers m(60, 2);
    const auto before = m.contents();
    m.to(gpusel::cuda(0));
    gpusel_emulated::clear_calls();
    m.to(gpusel::cuda(1));
    EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1) << "large device buffers need no staging: batched too";
    EXPECT_EQ(copy_calls(), 1);
    EXPECT_EQ(waits(), 1);
    EXPECT_EQ(gpusel_emulated::peer_copies() > 0, peer);
    EXPECT_EQ(gpusel_emulated::bytes_allocated(0), 0u);
    EXPECT_EQ(m.device(), gpusel::cuda(1));
    EXPECT_EQ(m.contents(), before);
  }
}

TEST(ModuleBatched, PinnedBuffersGoInOneBatchWithoutStagingAndStayPinnedOnTheCpu) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  ManyBuffers m(40, 2, ManyBuffers::Memory::pinned);
  const auto before = m.contents();
  const auto memory = m.memory();
  gpusel::release_cached_resources();
  gpusel_emulated::clear_calls();
  m.to(gpusel::cpu());
  EXPECT_EQ(m.memory(), memory) << "already on the cpu: nothing moves, pinned stays pinned";
  EXPECT_EQ(copy_calls(), 0);
  m.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel_emulated::calls("cudaMallocHost"), 0) << "no staging chunk is pinned for pinned buffers";
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1);
  EXPECT_EQ(copy_calls(), 1);
  EXPECT_EQ(waits(), 1);
  EXPECT_EQ(gpusel_emulated::pinned_host_bytes_in_use(), 0u) << "the pinned memory was freed";
  EXPECT_EQ(m.contents(), before);
}

// Small buffers are batched, large pageable ones go through the copy engine's
// parallel path, each its own copy: 2 + 2 large ones, 1 batch.
TEST(ModuleBatched, LargePageableBuffersStillGoThroughTheCopyEngine) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  ManyBuffers m(50, 2);
  const auto before = m.contents();
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1);
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpy"), 0) << "nothing went one by one";
  EXPECT_GT(gpusel_emulated::calls("cudaMemcpyAsync"), 0) << "the engine's staged pipelines";
  EXPECT_EQ(m.contents(), before);
  gpusel_emulated::clear_calls();
  m.to(gpusel::cpu());
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyBatchAsync"), 1);
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpy"), 0);
  EXPECT_EQ(m.contents(), before);
}

// With 64 KiB chunks and 2 slots, 1.6 MiB take about 26 chunks in 13 rounds: each
// chunk reused only after its round's wait (the emulation runs a batch only when
// waited for, so a chunk refilled early would corrupt a buffer).
TEST(ModuleBatched, MoreThanTheStagingChunksHoldGoesInRoundsOneWaitEach) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  const EngineOptionsForTest options({0, 0, 2, std::size_t{64} << 10});
  ManyBuffers m(150, 0);
  const auto before = m.contents();
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(0));
  const int chunks = gpusel_emulated::calls("cudaMemcpyBatchAsync");
  EXPECT_GE(chunks, static_cast<int>(m.total_bytes() / (std::size_t{64} << 10)));
  EXPECT_EQ(waits(), (chunks + 1) / 2);
  EXPECT_EQ(m.contents(), before);
  gpusel_emulated::clear_calls();
  m.to(gpusel::cpu());
  EXPECT_EQ(waits(), (gpusel_emulated::calls("cudaMemcpyBatchAsync") + 1) / 2);
  EXPECT_EQ(m.contents(), before);
}

// Where the runtime has no cudaMemcpyBatchAsync (Note [Batched copies where
// the runtime has them]): a loop of asynchronous copies on the one stream, one wait.
TEST(ModuleBatched, WithoutBatchCallsTheCopiesGoOneByOneOnOneStreamWithOneWait) {
  machine_with(2);
  ManyBuffers m(40, 0);
  const auto before = m.contents();
  gpusel_emulated::fail_calls_from("cudaMemcpyBatchAsync", 1, cudaErrorNotSupported);
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(0));
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyAsync"), 80);
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpy"), 0);
  EXPECT_EQ(waits(), 1);
  gpusel_emulated::clear_calls();
  m.to(gpusel::cuda(1));
  EXPECT_EQ(gpusel_emulated::calls("cudaMemcpyPeerAsync"), 80);
  EXPECT_EQ(waits(), 1);
  m.to(gpusel::cpu());
  gpusel_emulated::clear_failures();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the refused batch call left no error behind";
  EXPECT_EQ(m.contents(), before);
}

TEST(ModuleBatched, AFailedBatchNamesItsFirstBufferTheDevicesAndHowManyShareIt) {
  GPUSEL_SKIP_WITHOUT_BATCHED_COPIES();
  machine_with(1);
  ManyBuffers m(10, 0);
  gpusel_emulated::fail_call("cudaMemcpyBatchAsync", 1, cudaErrorLaunchFailure);
  try {
    m.to(gpusel::cuda(0));
    FAIL() << "the batch failed";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code(), cudaErrorLaunchFailure);
    EXPECT_TRUE(contains(e.what(),
                         "gpusel::Module::to(cuda:0): moving buffer \"f0\" (4 bytes on cpu) and 19 other "
                         "buffers batched with it failed, so no buffer was moved: gpusel copy engine: "
                         "cudaMemcpyBatchAsync(20 copies ("))
        << e.what();
    EXPECT_TRUE(contains(e.what(), " bytes from cpu to cuda:0)): unspecified launch failure")) << e.what();
  }
  EXPECT_EQ(m.device(), gpusel::cpu());
}

// Note [Module::to is a transaction] with batching, proved: every call of
// every path fails in turn (the batch call included, and with the loop that
// replaces it where the runtime has none); each time every buffer is where it
// was, intact, nothing stays allocated, no stream, event or staging chunk is
// left, and the Error names a buffer and the devices.
TEST(ModuleBatched, ToIsATransactionWhereverABatchedMoveFails) {
  const auto& functions = gpusel_test::kFallibleDataCalls;
  struct Path {
    gpusel::Device from, to;
    ManyBuffers::Memory memory;
  };
  const Path paths[] = {{gpusel::cpu(), gpusel::cuda(1), ManyBuffers::Memory::pageable},
                        {gpusel::cpu(), gpusel::cuda(1), ManyBuffers::Memory::pinned},
                        {gpusel::cuda(0), gpusel::cpu(), ManyBuffers::Memory::pageable},
                        {gpusel::cuda(0), gpusel::cuda(1), ManyBuffers::Memory::pageable}};
  int failures_seen = 0;
  for (const bool batch_calls : {true, false}) {
    for (const Path& path : paths) {
      for (const char* function : functions) {
        for (int nth = 1;; ++nth) {
          gpusel::release_cached_resources();
          gpusel_emulated::reset(gpusel_emulated::devices(2));
          // 32 small buffers fill 3 chunks of 64 KiB, in 2 slots: a second
          // round, so a failure can come while a chunk is in flight.
          const EngineOptionsForTest options({0, 0, 2, std::size_t{64} << 10});
          ManyBuffers m(16, 1, path.memory);
          ASSERT_GT(m.total_bytes() - m.large[0]->bytes(), std::size_t{2} * (64 << 10));
          m.to(path.from);
          const auto before = m.contents();
          const auto memory = m.memory();
          gpusel::release_cached_resources();
          const std::array<std::size_t, 3> used_before = memory_in_use();
          if (!batch_calls) gpusel_emulated::fail_calls_from("cudaMemcpyBatchAsync", 1, cudaErrorNotSupported);
          fail_as_out_of_memory(function, nth);
          bool failed = false;
          try {
            m.to(path.to);
          } catch (const gpusel::Error& e) {
            failed = true;
            ++failures_seen;
            EXPECT_EQ(e.code(), cudaErrorMemoryAllocation) << e.what();
            EXPECT_TRUE(contains(e.what(), "gpusel::Module::to(" + path.to.str() + "): moving buffer \"")) << e.what();
            EXPECT_TRUE(contains(e.what(), "on " + path.from.str())) << e.what();
            EXPECT_TRUE(contains(e.what(), "no buffer was moved")) << e.what();
          }
          gpusel_emulated::clear_failures();
          const std::string where = std::string(function) + " #" + std::to_string(nth) + " " + path.from.str() + "->" +
                                    path.to.str() + (path.memory == ManyBuffers::Memory::pinned ? " (pinned)" : "") +
                                    (batch_calls ? "" : " (no batch calls)");
          if (!failed) {
            EXPECT_EQ(m.device(), path.to) << where;
            EXPECT_EQ(m.contents(), before) << where;
            break;
          }
          EXPECT_EQ(m.device(), path.from) << where;
          EXPECT_EQ(m.memory(), memory) << where;
          EXPECT_EQ(m.contents(), before) << where;
          gpusel::release_cached_resources();
          EXPECT_EQ(memory_in_use(), used_before) << where;
          EXPECT_EQ(gpusel_emulated::live_streams(), 0) << where;
          EXPECT_EQ(gpusel_emulated::live_events(), 0) << where;
          EXPECT_EQ(gpusel_emulated::operations_left_to_stream_destroy(), 0)
              << where << ": a stream was destroyed with copies in flight";
          EXPECT_EQ(gpusel_emulated::pending_operations(), 0) << where;
          ASSERT_LT(nth, 200) << where << ": the failures never stopped";
        }
      }
    }
  }
  EXPECT_GT(failures_seen, 100);
}

#endif

}  // namespace
