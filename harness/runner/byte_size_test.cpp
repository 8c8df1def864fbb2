// byte_size.hpp: sizes as case files write them, and as messages, tables and labels show them.
#include "byte_size.hpp"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "case_kind.hpp"

namespace meshgate::runner {
namespace {

TEST(ByteSize, ParsesIntegersWithAnOptionalBinaryUnit) {
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("16B"), 16);
  EXPECT_EQ(parse_byte_size("8MiB"), 8 << 20);
  EXPECT_EQ(parse_byte_size("1 GiB"), std::int64_t{1} << 30);
  EXPECT_EQ(parse_byte_size("2K"), 2048);
  EXPECT_EQ(parse_byte_size("3T"), std::int64_t{3} << 40);
  // 0 is a size; the key that reads it says what it means.
  EXPECT_EQ(parse_byte_size("0"), 0);
  EXPECT_EQ(parse_byte_size("0 MiB"), 0);
  for (const char* bad : {"", "MiB", "-1", "8 MB", "8  MiB", "1.5GiB", "8mib", "4194305TiB"}) {
    EXPECT_EQ(parse_byte_size(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(parse_byte_size("4194304TiB"), std::int64_t{1} << 62);
}

TEST(ByteSize, ApproximateHasThreeSignificantDigitsInTheLargestUnit) {
  EXPECT_EQ(format_byte_size(0), "0 B");
  EXPECT_EQ(format_byte_size(512), "512 B");
  EXPECT_EQ(format_byte_size(1536), "1.5 KiB");
  EXPECT_EQ(format_byte_size(16.0 * (1 << 30)), "16 GiB");
  EXPECT_EQ(format_byte_size(74.5 * (1 << 30)), "74.5 GiB");
  EXPECT_EQ(format_byte_size(1025), "1 KiB");
  // From 1000 to 1023 of a unit the whole number, not 1e+03.
  EXPECT_EQ(format_byte_size(1000), "1000 B");
  EXPECT_EQ(format_byte_size(1023.0 * 1024), "1023 KiB");
}

TEST(ByteSize, ExactUsesTheLargestUnitThatDivides) {
  EXPECT_EQ(format_byte_size(0, ByteSizeStyle::exact), "0 B");
  EXPECT_EQ(format_byte_size(8, ByteSizeStyle::exact), "8 B");
  EXPECT_EQ(format_byte_size(1000, ByteSizeStyle::exact), "1000 B");
  EXPECT_EQ(format_byte_size(1024, ByteSizeStyle::exact), "1 KiB");
  EXPECT_EQ(format_byte_size(1536, ByteSizeStyle::exact), "1536 B");
  EXPECT_EQ(format_byte_size(6 << 20, ByteSizeStyle::exact), "6 MiB");
  EXPECT_EQ(format_byte_size(1536.0 * (1 << 20), ByteSizeStyle::exact), "1536 MiB");
  EXPECT_EQ(format_byte_size(double(std::int64_t{1} << 40), ByteSizeStyle::exact), "1 TiB");
}

TEST(ByteSize, LabelsAreExactWithoutTheBlankAndParseBack) {
  EXPECT_EQ(format_byte_size(0, ByteSizeStyle::label), "0B");
  EXPECT_EQ(format_byte_size(32 << 20, ByteSizeStyle::label), "32MiB");
  EXPECT_EQ(format_byte_size(1 << 20, ByteSizeStyle::label), "1MiB");
  EXPECT_EQ(format_byte_size(1536, ByteSizeStyle::label), "1536B");
  for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000},
                             std::int64_t{3} << 10, std::int64_t{5} << 30,
                             std::int64_t{7} << 40}) {
    const std::string label = format_byte_size(static_cast<double>(bytes), ByteSizeStyle::label);
    EXPECT_EQ(parse_byte_size(label), bytes) << label;
  }
}

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const ValueRejection& e) {
    return std::string("rejection: ") + e.what();
  } catch (const InputError& e) {
    return std::string("input error: ") + e.what();
  }
  return "no error";
}

TEST(ReadByteSize, ZeroIsAllowedOrRejectedAsTheKeySays) {
  CaseNode node(YAML::Load("{a: 0, b: 8MiB, c: 8 MB, d: [1]}"), "f.yaml", "s/x");
  EXPECT_EQ(read_byte_size(node, node.raw("a"), "a", ZeroBytes::allowed), 0);
  EXPECT_EQ(read_byte_size(node, node.raw("b"), "b", ZeroBytes::rejected), 8 << 20);
  EXPECT_EQ(error_of([&] { read_byte_size(node, node.raw("a"), "a", ZeroBytes::rejected); }),
            "rejection: f.yaml:1:5: case 's/x': key 'a': sizes must be at least 1 B, got 0");
  for (const char* key : {"c", "d"}) {
    const std::string error =
        error_of([&] { read_byte_size(node, node.raw(key), key, ZeroBytes::allowed); });
    EXPECT_EQ(error.rfind("input error: ", 0), 0u) << error;
    EXPECT_NE(error.find(std::string("key '") + key + "': expected a size in bytes up to 2^62"),
              std::string::npos)
        << error;
  }
}

}  // namespace
}  // namespace meshgate::runner
