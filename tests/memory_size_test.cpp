// Specification of memory sizes as people write them (include/gpusel/memory_size.hpp).
#include "gpusel/memory_size.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

constexpr std::uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;

std::string error_for(const std::string& text) {
  try {
    (void)gpusel::parse_memory_size(text);
  } catch (const gpusel::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParseMemorySize, ReadsBinaryUnitsAsNvidiaSmiReportsMemory) {
  EXPECT_EQ(gpusel::parse_memory_size("8GiB"), 8 * GiB);
  EXPECT_EQ(gpusel::parse_memory_size("512MiB"), 512 * MiB);
  EXPECT_EQ(gpusel::parse_memory_size("64KiB"), 64 * KiB);
  EXPECT_EQ(gpusel::parse_memory_size("2TiB"), 2 * TiB);
  EXPECT_EQ(gpusel::parse_memory_size("141GiB"), 141 * GiB);
}

TEST(ParseMemorySize, ReadsDecimalUnitsAsPowersOfAThousand) {
  EXPECT_EQ(gpusel::parse_memory_size("10GB"), 10'000'000'000u);
  EXPECT_EQ(gpusel::parse_memory_size("1KB"), 1000u);
  EXPECT_EQ(gpusel::parse_memory_size("3MB"), 3'000'000u);
  EXPECT_EQ(gpusel::parse_memory_size("1TB"), 1'000'000'000'000u);
}

TEST(ParseMemorySize, ReadsBytesWithOrWithoutAUnit) {
  EXPECT_EQ(gpusel::parse_memory_size("0"), 0u);
  EXPECT_EQ(gpusel::parse_memory_size("4096"), 4096u);
  EXPECT_EQ(gpusel::parse_memory_size("4096B"), 4096u);
  EXPECT_EQ(gpusel::parse_memory_size("18446744073709551615"), ~std::uint64_t{0});
}

TEST(ParseMemorySize, ReadsFractionsExactlyRoundingDownToWholeBytes) {
  EXPECT_EQ(gpusel::parse_memory_size("1.5GiB"), GiB + GiB / 2);
  EXPECT_EQ(gpusel::parse_memory_size("0.5KiB"), 512u);
  EXPECT_EQ(gpusel::parse_memory_size("0.001KiB"), 1u) << "1.024 bytes";
  EXPECT_EQ(gpusel::parse_memory_size("0.999999999KiB"), 1023u) << "1023.999999 bytes";
  EXPECT_EQ(gpusel::parse_memory_size("2.25GB"), 2'250'000'000u);
  EXPECT_EQ(gpusel::parse_memory_size("7.0GiB"), 7 * GiB);
}

TEST(ParseMemorySize, RejectsWhatItWouldHaveToGuessQuotingTheText) {
  const std::string message = error_for("8G");
  EXPECT_TRUE(message.find("gpusel::parse_memory_size(\"8G\"): the unit \"G\" is ambiguous (write GiB for powers "
                           "of 1024 or GB for powers of 1000") == 0)
      << message;
  EXPECT_NE(message.find("e.g. 8GiB, 512MiB, 10GB"), std::string::npos) << message;
  EXPECT_NE(error_for("8m").find("is ambiguous"), std::string::npos);
  EXPECT_NE(error_for("8gib").find("unknown unit \"gib\""), std::string::npos) << "units are case-sensitive";
  EXPECT_NE(error_for("8GIB").find("unknown unit \"GIB\""), std::string::npos);
  EXPECT_NE(error_for("8 GiB").find("a blank separates the number from the unit"), std::string::npos);
  EXPECT_NE(error_for("8GiBs").find("unknown unit \"GiBs\""), std::string::npos);
}

TEST(ParseMemorySize, RejectsMalformedNumbers) {
  EXPECT_NE(error_for("").find("the size is empty"), std::string::npos);
  for (const char* text : {"GiB", "-1GiB", "+1GiB", " 8GiB", ".5GiB", "0x10MiB"}) {
    EXPECT_FALSE(error_for(text).empty()) << text;
  }
  EXPECT_NE(error_for("-1GiB").find("does not start with a digit"), std::string::npos);
  EXPECT_NE(error_for("1.GiB").find("the '.' is not followed by a digit"), std::string::npos);
  EXPECT_NE(error_for("1e9").find("unknown unit \"e9\""), std::string::npos);
  EXPECT_NE(error_for("1.5").find("a size in bytes cannot have a fraction"), std::string::npos);
  EXPECT_NE(error_for("1.5B").find("a size in bytes cannot have a fraction"), std::string::npos);
  EXPECT_NE(error_for("1.0000000001GiB").find("more than 9 digits"), std::string::npos);
}

TEST(ParseMemorySize, RejectsSizesBeyondSixtyFourBits) {
  EXPECT_NE(error_for("18446744073709551616").find("too large"), std::string::npos);
  EXPECT_NE(error_for("16777216TiB").find("too large"), std::string::npos) << "2^64 bytes";
  EXPECT_EQ(gpusel::parse_memory_size("16777215TiB"), 16777215 * TiB);
  EXPECT_EQ(gpusel::parse_memory_size("16777215.999999999TiB"), 16777215 * TiB + 1099511626676u)
      << "0.999999999 TiB is 1099511626676.49 bytes";
}

TEST(FormatMemorySize, UsesTheLargestBinaryUnitWithOneDecimal) {
  EXPECT_EQ(gpusel::format_memory_size(0), "0 B");
  EXPECT_EQ(gpusel::format_memory_size(1023), "1023 B");
  EXPECT_EQ(gpusel::format_memory_size(1024), "1.0 KiB");
  EXPECT_EQ(gpusel::format_memory_size(1536), "1.5 KiB");
  EXPECT_EQ(gpusel::format_memory_size(8 * GiB), "8.0 GiB");
  EXPECT_EQ(gpusel::format_memory_size(143771 * MiB), "140.4 GiB");
  EXPECT_EQ(gpusel::format_memory_size(MiB - 1), "1.0 MiB") << "not 1024.0 KiB";
}

TEST(FormatMemorySize, ReadsBackAsParsed) { EXPECT_EQ(gpusel::parse_memory_size("8.0GiB"), 8 * GiB); }

}  // namespace
