// Specification of the CUDA_VISIBLE_DEVICES parser (include/gpusel/visible_devices.hpp).
//
// A pure test: this binary links no CUDA runtime at all, so a parser that made
// a CUDA call would not link (explain_test also checks, with the emulated
// runtime's counters, that parsing calls nothing).
#include "gpusel/visible_devices.hpp"

#include "gpusel/detail/core/decimal.hpp"
#include "gpusel/text.hpp"  // detail::quote

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include "text_checks.hpp"

namespace {

using gpusel::parse_visible_devices;
using gpusel::TokenOutcome;

using gpusel_test::contains;

// A machine as the parser sees it: its GPUs' UUIDs, in CUDA's physical order.
std::vector<std::string> machine(const std::vector<std::string>& uuids) { return uuids; }

std::vector<std::string> gpus(int count) {
  std::vector<std::string> uuids;
  for (int i = 0; i < count; ++i)
    uuids.push_back("GPU-" + std::to_string(10000000 + i) + "-0000-0000-0000-000000000000");
  return uuids;
}

// What cudaGetDeviceCount would have seen, in the oracle tables' notation:
// "0,2" (physical indices), "none" (cudaErrorNoDevice) or "error:<name>".
std::string outcome(const gpusel::VisibleDevices& map) {
  if (map.error_code() == gpusel::VisibleDevices::kNoDevice) return "none";
  if (!map.ok()) return std::string("error:") + map.error_name();
  std::string text;
  for (int physical : map) text += (text.empty() ? "" : ",") + std::to_string(physical);
  return text;
}

// --- the driver's observed behaviour: every row of the oracle tables ------------

struct OracleRow {
  std::string file;
  int line = 0;
  std::optional<std::string> order;
  std::optional<std::string> visible;
  std::string expected;
};

std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && (text[i + 1] == 't' || text[i + 1] == 'n')) {
      out += text[++i] == 't' ? '\t' : '\n';
    } else {
      out += text[i];
    }
  }
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> columns;
  std::size_t start = 0;
  while (true) {
    const std::size_t tab = line.find('\t', start);
    columns.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return columns;
    start = tab + 1;
  }
}

// Reads one table; its header names the machine's only GPU ("uuid GPU-...").
std::vector<OracleRow> read_oracle(const std::string& file, std::string& uuid) {
  std::ifstream in(std::string(GPUSEL_TEST_DATA_DIR) + "/" + file);
  EXPECT_TRUE(in) << "cannot open tests/data/" << file;
  std::vector<OracleRow> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind('#', 0) == 0) {
      const std::size_t at = line.find("uuid GPU-");
      if (at != std::string::npos) uuid = line.substr(at + 5, 40);
      continue;
    }
    const std::vector<std::string> columns = split_tabs(line);
    EXPECT_EQ(columns.size(), 3u) << file << ":" << number << " is not three tab-separated columns";
    if (columns.size() != 3) continue;
    OracleRow row{file, number, std::nullopt, std::nullopt, columns[2]};
    if (columns[0] != "-") row.order = columns[0];  // '-' = unset, nothing = set but empty
    if (columns[1] != "<unset>") row.visible = unescape(columns[1]);
    rows.push_back(row);
  }
  return rows;
}

void expect_every_row_matches(const std::string& file, std::size_t expected_rows) {
  std::string uuid;
  const std::vector<OracleRow> rows = read_oracle(file, uuid);
  ASSERT_EQ(uuid.size(), 40u) << "the table's header names its GPU";
  ASSERT_EQ(rows.size(), expected_rows) << "every row of " << file << " is read";
  const std::vector<std::string> physical = machine({uuid});
  for (const OracleRow& row : rows) {
    const auto map = parse_visible_devices(row.visible, physical, row.order);
    EXPECT_EQ(outcome(map), row.expected)
        << row.file << ":" << row.line << ": CUDA_DEVICE_ORDER=" << (row.order ? "\"" + *row.order + "\"" : "<unset>")
        << " CUDA_VISIBLE_DEVICES=" << (row.visible ? gpusel::detail::quote(*row.visible) : "<unset>");
  }
}

TEST(VisibleDevicesOracle, MatchesEveryRowObservedOnTheFirstH200) {
  expect_every_row_matches("visible_devices_h200.tsv", 36);
}

TEST(VisibleDevicesOracle, MatchesEveryRowObservedOnTheSecondH200) {
  expect_every_row_matches("visible_devices_h200_b.tsv", 31);
}

// --- the integer rules, beyond the one-GPU tables ------------------------------

TEST(VisibleDevices, IndicesAreCutTo32BitsAndReadAsSignedInts) {
  const auto four = gpus(4);
  EXPECT_EQ(outcome(parse_visible_devices("4294967296", four)), "0");
  EXPECT_EQ(outcome(parse_visible_devices("4294967299", four)), "3");
  EXPECT_EQ(outcome(parse_visible_devices("-4294967296", four)), "0") << "-2^32 is 0 modulo 2^32";
  EXPECT_EQ(outcome(parse_visible_devices("-4294967295", four)), "1");
  EXPECT_EQ(outcome(parse_visible_devices("2147483648", four)), "none") << "2^31 reads as INT_MIN";
  EXPECT_EQ(outcome(parse_visible_devices("-99999999999999999999", four)), "none")
      << "overflow saturates, sign dropped";
  EXPECT_EQ(outcome(parse_visible_devices("18446744073709551616", four)), "none") << "2^64 overflows to ULONG_MAX";
}

TEST(VisibleDevices, MapsLogicalToPhysicalAndBack) {
  const auto map = parse_visible_devices("2,0", gpus(3));
  ASSERT_TRUE(map.ok());
  EXPECT_EQ(map.count(), 2);
  EXPECT_EQ(map.physical(0), 2);
  EXPECT_EQ(map.physical(1), 0);
  EXPECT_EQ(map.logical(2), 0);
  EXPECT_EQ(map.logical(0), 1);
  EXPECT_EQ(map.logical(1), std::nullopt) << "physical GPU 1 is hidden";
  EXPECT_EQ(map.physical_indices(), (std::vector<int>{2, 0}));
  EXPECT_EQ(map.error_name(), std::string());
}

TEST(VisibleDevices, UnsetShowsEveryGpuInPhysicalOrder) {
  const auto map = parse_visible_devices(std::nullopt, gpus(3));
  EXPECT_EQ(outcome(map), "0,1,2");
  EXPECT_TRUE(map.tokens().empty());
  EXPECT_FALSE(map.variable().has_value());
}

TEST(VisibleDevices, UnsetOnAMachineWithoutGpusIsNoDevice) {
  const auto map = parse_visible_devices(std::nullopt, {});
  EXPECT_EQ(map.error_name(), std::string("cudaErrorNoDevice"));
  EXPECT_EQ(map.error_code(), 100);
  EXPECT_EQ(map.count(), 0);
}

TEST(VisibleDevices, AskingForAHiddenLogicalDeviceThrowsAnErrorThatNamesTheMap) {
  const auto map = parse_visible_devices("1", gpus(2));
  try {
    (void)map.physical(1);
    FAIL() << "physical(1) succeeded with one visible device";
  } catch (const gpusel::Error& e) {
    EXPECT_EQ(e.code_name(), "cudaErrorInvalidDevice");
    EXPECT_TRUE(contains(e.what(), "there is no cuda:1")) << e.what();
    EXPECT_TRUE(
        contains(e.what(), "1 CUDA device is visible (cuda:0): cuda:0 is physical GPU 1 (CUDA_VISIBLE_DEVICES=1)"))
        << e.what();
  }
}

// --- explanations ----------------------------------------------------------------

TEST(VisibleDevicesTokens, SayWhyEachTokenWasKeptOrIgnored) {
  const auto map = parse_visible_devices("1,0,7,2", gpus(3));
  ASSERT_EQ(map.tokens().size(), 4u);
  EXPECT_EQ(map.tokens()[0].outcome, TokenOutcome::kept);
  EXPECT_EQ(map.tokens()[0].why(3), "kept: physical GPU 1");
  EXPECT_EQ(map.tokens()[2].outcome, TokenOutcome::out_of_range);
  EXPECT_EQ(map.tokens()[2].why(3),
            "ignored: ends the list: it is out of range (7; this machine has 3 GPUs, indices 0..2)");
  EXPECT_EQ(map.tokens()[3].outcome, TokenOutcome::not_read);
  EXPECT_EQ(map.tokens()[3].why(3), "ignored: after the end of the list");
  EXPECT_EQ(outcome(map), "1,0");
}

TEST(VisibleDevicesTokens, NameEveryWayAListEnds) {
  const auto two = gpus(2);
  EXPECT_EQ(parse_visible_devices("x", two).tokens()[0].outcome, TokenOutcome::no_digits);
  EXPECT_EQ(parse_visible_devices("-1", two).tokens()[0].outcome, TokenOutcome::negative);
  EXPECT_EQ(parse_visible_devices("-1", two).tokens()[0].value, -1);
  EXPECT_EQ(parse_visible_devices("GPU-ff", two).tokens()[0].outcome, TokenOutcome::unknown_uuid);
  EXPECT_EQ(parse_visible_devices("GPU-1000000", two).tokens()[0].outcome, TokenOutcome::ambiguous_uuid);
  EXPECT_EQ(parse_visible_devices("0,GPU-10000001", two).tokens()[1].outcome, TokenOutcome::other_kind);
  EXPECT_EQ(parse_visible_devices("GPU-10000001,0", two).tokens()[1].outcome, TokenOutcome::other_kind);
  const auto twice = parse_visible_devices("1,01", two);
  EXPECT_EQ(twice.tokens()[1].outcome, TokenOutcome::duplicate);
  EXPECT_EQ(twice.tokens()[1].physical, 1);
}

TEST(VisibleDevicesTokens, ErrorsSayWhyInWords) {
  const auto two = gpus(2);
  EXPECT_EQ(parse_visible_devices("0,1,0", two).reason(),
            "CUDA_VISIBLE_DEVICES=0,1,0 names physical GPU 0 twice (the second time as \"0\")");
  EXPECT_EQ(parse_visible_devices("abc", two).reason(),
            "CUDA_VISIBLE_DEVICES=abc selects no GPU: its first token \"abc\" is not a number");
  EXPECT_EQ(parse_visible_devices("", two).reason(),
            "CUDA_VISIBLE_DEVICES=\"\" (set but empty) selects no GPU: its first token \"\" is not a number");
  EXPECT_EQ(parse_visible_devices("0", two, "pci_bus_id").reason(),
            "CUDA_DEVICE_ORDER=pci_bus_id is neither FASTEST_FIRST nor PCI_BUS_ID (exactly so: upper case, no blanks)");
  EXPECT_TRUE(contains(parse_visible_devices("5", two).summary(), "no CUDA device is visible"));
}

TEST(VisibleDevicesTokens, RuntimeMapIsReadFromTheValueAlone) {
  using gpusel::detail::describe_runtime_map;
  EXPECT_EQ(describe_runtime_map(std::string("1"), 1), "cuda:0 is physical GPU 1");
  EXPECT_EQ(describe_runtime_map(std::string(" 3,+1,junk"), 2), "cuda:0 is physical GPU 3, cuda:1 is physical GPU 1");
  EXPECT_EQ(describe_runtime_map(std::string("GPU-948e02bd"), 1), "cuda:0 is GPU-948e02bd");
  EXPECT_EQ(describe_runtime_map(std::nullopt, 2), "");
  EXPECT_EQ(describe_runtime_map(std::string("abc"), 1), "") << "a runtime that disagrees with the model gets no guess";
}

TEST(VisibleDevices, ThePitfallsTheReadmeNames) {
  const auto four = gpus(4);
  for (const char* value : {"0,1,5,2", "0,1,x,2", "0,1,-1,2"})
    EXPECT_EQ(outcome(parse_visible_devices(value, four)), "0,1") << value;
  EXPECT_EQ(outcome(parse_visible_devices(",0", four)), "none");
  for (const char* value : {" 1", "+1", "1abc", "1.5", "1 2", "4294967297"})
    EXPECT_EQ(outcome(parse_visible_devices(value, four)), "1") << value;
  for (const char* value : {"0,00", "0,-0", "0,+0"})
    EXPECT_EQ(outcome(parse_visible_devices(value, four)), "error:cudaErrorInvalidDevice") << value;
  for (const char* value : {"NoDevFiles", "", "all"})
    EXPECT_EQ(outcome(parse_visible_devices(value, four)), "none") << value;
  EXPECT_EQ(outcome(parse_visible_devices("0", four, "PCI_BUS_ID ")), "error:cudaErrorInvalidDevice");
}

// Rules chosen where the driver was not observed (Note [Rules chosen where the driver was not observed]).
TEST(VisibleDevicesUnobserved, AnInvalidDeviceOrderWinsOverAnEmptyList) {
  EXPECT_EQ(outcome(parse_visible_devices("", gpus(1), "fastest_first")), "error:cudaErrorInvalidDevice");
}

TEST(VisibleDevicesUnobserved, NothingIsReadAfterADeviceNamedTwice) {
  const auto map = parse_visible_devices("0,0,x", gpus(1));
  EXPECT_EQ(outcome(map), "error:cudaErrorInvalidDevice");
  EXPECT_EQ(map.tokens()[2].outcome, TokenOutcome::not_read);
}

// --- UUIDs however NVML reports them, and machines of any size ----------------

TEST(VisibleDevicesUuids, TheShorterOfTokenAndUuidMustBeAPrefixOfTheLonger) {
  const std::vector<std::string> two = {"GPU-ab12", "GPU-AbCd34"};
  EXPECT_EQ(outcome(parse_visible_devices("GPU-ab", two)), "none") << "a prefix of both: ambiguous";
  EXPECT_EQ(outcome(parse_visible_devices("GPU-ABC", two)), "1") << "case is ignored";
  EXPECT_EQ(outcome(parse_visible_devices("GPU-ab1", two)), "0");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-ab12junk", two)), "0") << "the whole UUID, then junk";
  EXPECT_EQ(outcome(parse_visible_devices("MIG-abcd34x", two)), "1");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-x", two)), "none");
  // Both directions at once: GPU-ab is a prefix of the token, the token one of GPU-abcd.
  const std::vector<std::string> nested = {"GPU-ab", "GPU-abcd"};
  EXPECT_EQ(outcome(parse_visible_devices("GPU-abc", nested)), "none") << "ambiguous";
  EXPECT_EQ(outcome(parse_visible_devices("GPU-abcdx", nested)), "none") << "ambiguous";
  EXPECT_EQ(outcome(parse_visible_devices("GPU-abx", nested)), "0");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-abcd", nested)), "none") << "GPU-ab is a prefix of it too";
}

TEST(VisibleDevicesUuids, AUuidReportedTwiceIsAmbiguousAndAnEmptyOneSelectsNothing) {
  const std::vector<std::string> odd = {"GPU-same", "GPU-same", "", "GPU-", "GPU-other"};
  EXPECT_EQ(parse_visible_devices("GPU-same", odd).tokens()[0].outcome, TokenOutcome::ambiguous_uuid);
  EXPECT_EQ(outcome(parse_visible_devices("GPU-other", odd)), "4");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-o", odd)), "4") << "the empty UUIDs are no prefix of anything";
  EXPECT_EQ(outcome(parse_visible_devices("2,3,0", odd)), "2,3,0") << "indices need no UUID";
}

TEST(VisibleDevices, MapsThousandsOfGpusByUuidAndByIndex) {
  constexpr int kCount = 4000;
  const std::vector<std::string> many = gpus(kCount);
  std::string by_uuid, by_index;  // every GPU, last first
  for (int i = kCount - 1; i >= 0; --i) {
    by_uuid += (by_uuid.empty() ? "" : ",") + many[static_cast<std::size_t>(i)];
    by_index += (by_index.empty() ? "" : ",") + std::to_string(i);
  }
  for (const std::string* value : {&by_uuid, &by_index}) {
    const auto map = parse_visible_devices(*value, many);
    ASSERT_EQ(map.count(), kCount) << map.reason();
    for (int logical = 0; logical < kCount; ++logical) {
      ASSERT_EQ(map.physical(logical), kCount - 1 - logical);
      ASSERT_EQ(map.logical(kCount - 1 - logical), logical);
    }
  }
  const auto twice = parse_visible_devices(by_index + ",0", many);
  EXPECT_EQ(twice.error_name(), std::string("cudaErrorInvalidDevice")) << "the last token names GPU 0 again";
  EXPECT_EQ(twice.tokens().back().outcome, TokenOutcome::duplicate);
}

// --- the decimal reader the parsers share (gpusel/detail/core/decimal.hpp) ----------

using gpusel::detail::DecimalGrammar;
using gpusel::detail::read_decimal;

TEST(DecimalReader, TheStrtoulGrammarIsCsStrtoulExactly) {
  for (const char* text : {"0",
                           "42",
                           " \t\n\v\f\r7",
                           "+5",
                           "-5",
                           "-0",
                           "12abc",
                           "1.5",
                           "1 2",
                           "  -  1",
                           "18446744073709551615",
                           "18446744073709551616",
                           "-18446744073709551615",
                           "-99999999999999999999",
                           "",
                           " ",
                           "-",
                           "+",
                           "abc",
                           "0x10",
                           "007"}) {
    char* end = nullptr;
    errno = 0;
    const unsigned long expected = std::strtoul(text, &end, 10);
    const auto read = read_decimal(text, DecimalGrammar::strtoul);
    EXPECT_EQ(read.ok, end != text) << '"' << text << '"';
    EXPECT_EQ(read.value, expected) << '"' << text << '"';
    EXPECT_EQ(read.overflow, errno == ERANGE) << '"' << text << '"';
    if (read.ok) {
      EXPECT_EQ(read.end, static_cast<std::size_t>(end - text)) << '"' << text << '"';
    }
  }
}

TEST(DecimalReader, TheWholeTextGrammarTakesDigitsAndNothingElse) {
  EXPECT_EQ(read_decimal("0", DecimalGrammar::whole_text).value, 0u);
  EXPECT_EQ(read_decimal("007", DecimalGrammar::whole_text).value, 7u) << "leading zeros are the caller's to refuse";
  EXPECT_TRUE(read_decimal("18446744073709551615", DecimalGrammar::whole_text).ok);
  EXPECT_FALSE(read_decimal("18446744073709551615", DecimalGrammar::whole_text).overflow);
  EXPECT_TRUE(read_decimal("18446744073709551616", DecimalGrammar::whole_text).overflow);
  for (const char* text : {"", " 1", "1 ", "+1", "-1", "1x", "x1", "1.0"})
    EXPECT_FALSE(read_decimal(text, DecimalGrammar::whole_text).ok) << '"' << text << '"';
}

TEST(DecimalReader, TheLeadingDigitsGrammarSaysWhereTheDigitsEnd) {
  const auto read = read_decimal("128GiB", DecimalGrammar::leading_digits);
  EXPECT_TRUE(read.ok);
  EXPECT_EQ(read.value, 128u);
  EXPECT_EQ(read.end, 3u);
  EXPECT_FALSE(read_decimal("GiB", DecimalGrammar::leading_digits).ok);
  EXPECT_FALSE(read_decimal(" 1", DecimalGrammar::leading_digits).ok) << "no blanks";
  EXPECT_FALSE(read_decimal("+1", DecimalGrammar::leading_digits).ok) << "no sign";
}

// --- PyTorch's published cases (test/test_cuda_nvml_based_avail.py) -------------
//
// PyTorch's `_parse_visible_devices` returns the raw tokens (ordinals or UUID
// strings) and `_transform_uuid_to_ordinals` resolves UUIDs against NVML's list;
// gpusel does both in one step against a machine, here PyTorch's eight GPUs.
// Where the two differ the expectation is the driver's, with the reason inline.

const std::vector<std::string> kPyTorchUuids = {
    "GPU-9942190a-aa31-4ff1-4aa9-c388d80f85f1", "GPU-9e8d35e3-a134-0fdd-0e01-23811fdbd293",
    "GPU-e429a63e-c61c-4795-b757-5132caeb8e70", "GPU-eee1dfbc-0a0f-6ad8-5ff6-dc942a8b9d98",
    "GPU-bbcd6503-5150-4e92-c266-97cc4390d04e", "GPU-472ea263-58d7-410d-cc82-f7fdece5bd28",
    "GPU-e56257c4-947f-6a5b-7ec9-0f45567ccf4e", "GPU-1c20e77d-1c1a-d9ed-fe37-18b8466a78ad",
};

TEST(VisibleDevicesPyTorchCases, EnvVarParsing) {
  const auto eight = machine(kPyTorchUuids);
  EXPECT_EQ(outcome(parse_visible_devices("1gpu2,2ampere", eight)), "1,2") << "the rest of a token is ignored";
  EXPECT_EQ(outcome(parse_visible_devices("0, 1, 2, -1, 3", eight)), "0,1,2") << "a negative ends the list";
  // PyTorch: [] (no device). The driver fails with cudaErrorInvalidDevice: a device named twice
  // is an error for the whole value (observed: "0,0", "0,0,1").
  EXPECT_EQ(outcome(parse_visible_devices("0, 1, 2, 1", eight)), "error:cudaErrorInvalidDevice");
  EXPECT_EQ(outcome(parse_visible_devices("2, +3, -0, 5", eight)), "2,3,0,5") << "unary plus and minus";
  EXPECT_EQ(outcome(parse_visible_devices("one,two,3,4", eight)), "none") << "a word first: no device";
  EXPECT_EQ(outcome(parse_visible_devices("4,3,two,one", eight)), "4,3") << "a word ends the list";
  // PyTorch returns the token "GPU-9e8d35e3" unresolved; on these eight GPUs it is GPU 1.
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3", eight)), "1");
  // PyTorch: ["GPU-123"] then [] once resolved; the driver agrees that "GPU-123" selects no
  // GPU (no device). That ordinals do not join a UUID list shows with a UUID that exists:
  EXPECT_EQ(outcome(parse_visible_devices("GPU-123, 2", eight)), "none");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3, 2", eight)), "1");
  // PyTorch keeps "MIG-89c850dc" as a MIG UUID; no GPU here has that prefix, so nothing
  // is selected. The driver matches "MIG-" tokens against GPU UUIDs too (observed:
  // "MIG-948e02bd" selected the H200 GPU-948e02bd-...):
  EXPECT_EQ(outcome(parse_visible_devices("MIG-89c850dc", eight)), "none");
  EXPECT_EQ(outcome(parse_visible_devices("MIG-9e8d35e3", eight)), "1");
}

TEST(VisibleDevicesPyTorchCases, PartialUuidResolver) {
  const auto eight = machine(kPyTorchUuids);
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3", eight)), "1");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-e4,GPU-9e8d35e3", eight)), "2,1");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3,GPU-1,GPU-47", eight)), "1,7,5");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-123,GPU-9e8d35e3", eight)), "none")
      << "the first unknown UUID ends the list";
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3,GPU-123,GPU-47", eight)), "1");
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3,GPU-e,GPU-47", eight)), "1")
      << "an ambiguous prefix ends the list";
  // PyTorch: [] (no device). The driver fails with cudaErrorInvalidDevice: "GPU-9e8" names
  // GPU 1 again (observed: a UUID and a prefix of it, "GPU-948e02bd,GPU-948e").
  EXPECT_EQ(outcome(parse_visible_devices("GPU-9e8d35e3,GPU-47,GPU-9e8", eight)), "error:cudaErrorInvalidDevice");
}

TEST(VisibleDevicesPyTorchCases, OrdinalParseVisibleDevices) {
  // PyTorch counts with NVML reporting two GPUs.
  EXPECT_EQ(parse_visible_devices("1, 0", gpus(2)).count(), 2);
  EXPECT_EQ(parse_visible_devices("1, 5, 0", gpus(2)).count(), 1) << "an ordinal out of range ends the list";
}

}  // namespace
