// Tests of the prefault decision and the prefault itself
// (include/gpusel/detail/data/memory/host_prefault.hpp): the rule from the system's
// transparent huge page setting, the GPUSEL_PREFAULT override (read once, at
// first use: checked in a child process started with the variable set), and
// MADV_POPULATE_WRITE with its fallback, through an injected madvise.
#include "gpusel/detail/data/memory/host_prefault.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpusel/error.hpp"

namespace {

using gpusel::detail::PrefaultPolicy;
using gpusel::detail::TransparentHugePages;

TEST(HostPrefault, ReadsTheBracketedWordOfTheSystemsSetting) {
  using gpusel::detail::parse_transparent_huge_pages;
  EXPECT_EQ(parse_transparent_huge_pages("always [madvise] never\n"), TransparentHugePages::madvise);
  EXPECT_EQ(parse_transparent_huge_pages("[always] madvise never\n"), TransparentHugePages::always);
  EXPECT_EQ(parse_transparent_huge_pages("always madvise [never]\n"), TransparentHugePages::never);
  EXPECT_EQ(parse_transparent_huge_pages("always madvise [never]"), TransparentHugePages::never);
  EXPECT_EQ(parse_transparent_huge_pages(""), TransparentHugePages::unknown);
  EXPECT_EQ(parse_transparent_huge_pages(nullptr), TransparentHugePages::unknown);
  EXPECT_EQ(parse_transparent_huge_pages("always madvise never"), TransparentHugePages::unknown);
  EXPECT_EQ(parse_transparent_huge_pages("[sometimes] never"), TransparentHugePages::unknown);
  EXPECT_EQ(parse_transparent_huge_pages("[never"), TransparentHugePages::unknown);
}

TEST(HostPrefault, PrefaultsOnlyWhereHugePagesAreNotGranted) {
  using gpusel::detail::should_prefault;
  EXPECT_FALSE(should_prefault(TransparentHugePages::always, PrefaultPolicy::automatic));
  EXPECT_FALSE(should_prefault(TransparentHugePages::madvise, PrefaultPolicy::automatic));
  EXPECT_TRUE(should_prefault(TransparentHugePages::never, PrefaultPolicy::automatic));
  EXPECT_TRUE(should_prefault(TransparentHugePages::unknown, PrefaultPolicy::automatic)) << "no THP in the kernel";
  for (const TransparentHugePages pages : {TransparentHugePages::always, TransparentHugePages::madvise,
                                           TransparentHugePages::never, TransparentHugePages::unknown}) {
    EXPECT_TRUE(should_prefault(pages, PrefaultPolicy::always));
    EXPECT_FALSE(should_prefault(pages, PrefaultPolicy::never));
  }
}

TEST(HostPrefault, TheOverrideIsAutoAlwaysOrNever) {
  PrefaultPolicy policy = PrefaultPolicy::never;
  EXPECT_TRUE(gpusel::detail::parse_prefault_policy("auto", policy));
  EXPECT_EQ(policy, PrefaultPolicy::automatic);
  EXPECT_TRUE(gpusel::detail::parse_prefault_policy("always", policy));
  EXPECT_EQ(policy, PrefaultPolicy::always);
  EXPECT_TRUE(gpusel::detail::parse_prefault_policy("never", policy));
  EXPECT_EQ(policy, PrefaultPolicy::never);
  for (const char* wrong : {"", "Always", "yes", "1", "never ", "auto,never"}) {
    EXPECT_FALSE(gpusel::detail::parse_prefault_policy(wrong, policy)) << wrong;
    EXPECT_EQ(policy, PrefaultPolicy::never) << "left alone";
  }
}

TEST(HostPrefault, DecidesFromTheSettingUnlessOverridden) {
  gpusel::detail::HostPrefaultSettings settings;
  gpusel::detail::decide_prefault(settings, nullptr, "always [madvise] never\n");
  EXPECT_FALSE(settings.prefault.load());
  EXPECT_EQ(settings.huge_pages, TransparentHugePages::madvise);
  gpusel::detail::decide_prefault(settings, nullptr, "always madvise [never]\n");
  EXPECT_TRUE(settings.prefault.load());
  gpusel::detail::decide_prefault(settings, nullptr, nullptr);
  EXPECT_TRUE(settings.prefault.load()) << "no setting to read: 4 KiB pages";
  gpusel::detail::decide_prefault(settings, "always", "[always] madvise never\n");
  EXPECT_TRUE(settings.prefault.load());
  gpusel::detail::decide_prefault(settings, "never", "always madvise [never]\n");
  EXPECT_FALSE(settings.prefault.load());
  gpusel::detail::decide_prefault(settings, "", "always madvise [never]\n");
  EXPECT_TRUE(settings.prefault.load()) << "set but empty counts as unset";
  EXPECT_STREQ(settings.environment_problem, "");
}

TEST(HostPrefault, AnUnusableOverrideIsAnErrorNamingIt) {
  gpusel::detail::HostPrefaultSettings settings;
  gpusel::detail::decide_prefault(settings, "sometimes", "always madvise [never]\n");
  EXPECT_STREQ(settings.environment_problem, "GPUSEL_PREFAULT=sometimes: expected auto, always or never");

  // The process's settings, as the copy engine asks for them: set the problem, then put back what was read.
  gpusel::detail::HostPrefaultSettings& process = gpusel::detail::host_prefault_settings();
  const std::string value = process.environment_value;
  const char* const pages[] = {"[always] madvise never", "always [madvise] never", "always madvise [never]", ""};
  const std::string huge_pages_text = pages[static_cast<int>(process.huge_pages)];
  gpusel::detail::decide_prefault(process, "sometimes", huge_pages_text.c_str());
  try {
    (void)gpusel::detail::prefault_fresh_host_memory();
    ADD_FAILURE() << "an unusable GPUSEL_PREFAULT must not be ignored";
  } catch (const gpusel::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPUSEL_PREFAULT=sometimes: expected auto, always or never"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(gpusel::detail::describe_prefault().find("error: GPUSEL_PREFAULT=sometimes"), std::string::npos);
  gpusel::detail::decide_prefault(process, value.empty() ? nullptr : value.c_str(),
                                  huge_pages_text.empty() ? nullptr : huge_pages_text.c_str());
  EXPECT_NO_THROW((void)gpusel::detail::prefault_fresh_host_memory());
}

// The test below, run again in a child started with GPUSEL_PREFAULT set (GPUSEL_TEST_PREFAULT_EXPECT says
// what the child must find); in this process it does nothing.
TEST(HostPrefaultChild, TheOverrideIsReadOnceAtFirstUse) {
  const char* expected = std::getenv("GPUSEL_TEST_PREFAULT_EXPECT");
  if (expected == nullptr) GTEST_SKIP() << "runs in the child of HostPrefault.TheOverrideIsReadOnceAtFirstUse";
  const std::string description = gpusel::detail::describe_prefault();
  if (std::string(expected) == "error") {
    EXPECT_THROW((void)gpusel::detail::prefault_fresh_host_memory(), gpusel::Error);
    EXPECT_NE(description.find("error: GPUSEL_PREFAULT="), std::string::npos) << description;
  } else {
    EXPECT_EQ(gpusel::detail::prefault_fresh_host_memory(), std::string(expected) == "yes") << description;
    EXPECT_NE(description.find(std::string("prefault=") + expected), std::string::npos) << description;
  }
  // Read once: changing the variable now changes nothing.
  setenv("GPUSEL_PREFAULT", std::string(expected) == "yes" ? "never" : "always", 1);
  const std::string again = gpusel::detail::describe_prefault();
  EXPECT_EQ(again, description);
}

std::string this_program() {
  std::vector<char> path(4096);
  const ssize_t length = readlink("/proc/self/exe", path.data(), path.size() - 1);
  return length > 0 ? std::string(path.data(), static_cast<std::size_t>(length)) : std::string();
}

TEST(HostPrefault, TheOverrideIsReadOnceAtFirstUse) {
  const std::string program = this_program();
  ASSERT_FALSE(program.empty());
  const auto run_child = [&](const std::string& value, const char* expect) {
    const std::string command = "GPUSEL_PREFAULT=" + value + " GPUSEL_TEST_PREFAULT_EXPECT=" + expect + " '" + program +
                                "' --gtest_filter=HostPrefaultChild.* > /dev/null 2>&1";
    return std::system(command.c_str());
  };
  EXPECT_EQ(run_child("always", "yes"), 0) << "GPUSEL_PREFAULT=always prefaults whatever the system's setting";
  EXPECT_EQ(run_child("never", "no"), 0);
  EXPECT_EQ(run_child("sometimes", "error"), 0);
  EXPECT_NE(run_child("always", "no"), 0) << "the child must fail when it finds what it was not told";
}

// A region of fresh 4 KiB pages, unmapped at the end.
class FreshPages {
 public:
  explicit FreshPages(std::size_t pages) : bytes_(pages * page_bytes()) {
    void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memory_ = memory == MAP_FAILED ? nullptr : static_cast<char*>(memory);
    if (memory_ != nullptr) (void)madvise(memory_, bytes_, MADV_NOHUGEPAGE);
  }
  ~FreshPages() {
    if (memory_ != nullptr) munmap(memory_, bytes_);
  }
  FreshPages(const FreshPages&) = delete;
  FreshPages& operator=(const FreshPages&) = delete;

  static std::size_t page_bytes() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }
  char* data() const { return memory_; }
  std::size_t bytes() const { return bytes_; }

  // How many of the region's pages are resident.
  std::size_t resident() const {
    std::vector<unsigned char> pages(bytes_ / page_bytes());
    if (mincore(memory_, bytes_, pages.data()) != 0) return 0;
    std::size_t count = 0;
    for (const unsigned char page : pages) count += page & 1;
    return count;
  }

 private:
  std::size_t bytes_;
  char* memory_ = nullptr;
};

int advise_calls = 0;
int advise_error = 0;
int answer_with_error(void*, std::size_t, int advice) noexcept {
  ++advise_calls;
  EXPECT_EQ(advice, gpusel::detail::kAdvisePopulateWrite);
  errno = advise_error;
  return -1;
}

TEST(HostPrefault, PopulatesWithTheKernelsHelpOrTouchesEachPage) {
  gpusel::detail::HostPrefaultSettings settings;
  settings.page_bytes = FreshPages::page_bytes();
  FreshPages region(64);
  ASSERT_NE(region.data(), nullptr);
  ASSERT_EQ(region.resident(), 0u);
  gpusel::detail::prefault_pages(region.data(), region.bytes(), settings,
                                 [](void* a, std::size_t n, int advice) noexcept { return madvise(a, n, advice); });
  EXPECT_EQ(region.resident(), 64u) << "MADV_POPULATE_WRITE, or pages touched where the kernel lacks it";
  EXPECT_EQ(settings.prefaulted_bytes.load(), region.bytes());
}

TEST(HostPrefault, FallsBackToTouchingWhereTheKernelLacksPopulateWrite) {
  gpusel::detail::HostPrefaultSettings settings;
  settings.page_bytes = FreshPages::page_bytes();
  const std::size_t page = FreshPages::page_bytes();
  FreshPages region(32);
  ASSERT_NE(region.data(), nullptr);
  std::memset(region.data() + 5 * page, 0x5a, page);  // contents the prefault must keep
  advise_calls = 0;
  advise_error = EINVAL;
  gpusel::detail::prefault_pages(region.data(), region.bytes(), settings, &answer_with_error);
  EXPECT_EQ(advise_calls, 1);
  EXPECT_TRUE(settings.populate_missing.load());
  EXPECT_EQ(region.resident(), 32u);
  EXPECT_EQ(settings.prefaulted_bytes.load(), region.bytes());
  for (std::size_t i = 0; i < region.bytes(); ++i)
    ASSERT_EQ(region.data()[i], i / page == 5 ? char{0x5a} : char{0}) << "byte " << i;

  // Remembered: the kernel is not asked again.
  FreshPages second(8);
  gpusel::detail::prefault_pages(second.data(), second.bytes(), settings, &answer_with_error);
  EXPECT_EQ(advise_calls, 1);
  EXPECT_EQ(second.resident(), 8u);
}

TEST(HostPrefault, LeavesThePagesToTheCopyWhenTheKernelFailsOtherwise) {
  gpusel::detail::HostPrefaultSettings settings;
  settings.page_bytes = FreshPages::page_bytes();
  FreshPages region(16);
  advise_calls = 0;
  advise_error = ENOMEM;
  gpusel::detail::prefault_pages(region.data(), region.bytes(), settings, &answer_with_error);
  EXPECT_EQ(advise_calls, 1);
  EXPECT_FALSE(settings.populate_missing.load());
  EXPECT_EQ(region.resident(), 0u) << "nothing touched: the copy faults as it would have";
  EXPECT_EQ(settings.prefaulted_bytes.load(), 0u);
}

TEST(HostPrefault, PrefaultsOnlyThePagesWhollyInsideTheRange) {
  gpusel::detail::HostPrefaultSettings settings;
  settings.page_bytes = FreshPages::page_bytes();
  settings.populate_missing.store(true);  // touch: the same rule, and no kernel call to ask
  const std::size_t page = FreshPages::page_bytes();
  FreshPages region(8);
  // From the middle of page 1 to the middle of page 6: pages 2 to 5.
  gpusel::detail::prefault_pages(region.data() + page + page / 2, 5 * page, settings, &answer_with_error);
  EXPECT_EQ(region.resident(), 4u);
  EXPECT_EQ(settings.prefaulted_bytes.load(), 4 * page);
  gpusel::detail::prefault_pages(region.data() + 10, page / 2, settings, &answer_with_error);
  EXPECT_EQ(region.resident(), 4u) << "no whole page inside";
  gpusel::detail::prefault_pages(region.data(), 0, settings, &answer_with_error);
  EXPECT_EQ(region.resident(), 4u);
}

}  // namespace
