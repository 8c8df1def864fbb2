#pragma once
// Sizes in bytes: the one reader of sizes as case files and options write them ("8MiB",
// "1 GiB", "4096") and the one formatter of sizes in messages, tables and labels.
//
// 0 bytes is a size ("0", "0B", "0 MiB" all parse); what it means is the reading key's:
//  - a gemm `workspace` of 0 is no workspace at all (cuBLASLt then picks algorithms that need
//    none): ZeroBytes::allowed;
//  - a collective's `bytes` (and a sweep's from and to) name buffers, which hold at least one
//    element: 0 is a value the case cannot run with, ZeroBytes::rejected (a ValueRejection that
//    expect_error can match);
//  - a memory limit (`memory_limit:`, --memory-limit) of 0 would refuse every case: validate.cpp
//    and the command line read it with parse_byte_size and call 0 malformed.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace YAML {
class Node;
}

namespace meshgate::runner {

class CaseNode;

// A non-negative integer with an optional unit: B, KiB (or K), MiB (M), GiB (G), TiB (T), with or
// without a space before it. nullopt for anything else, and for sizes beyond 2^62 bytes.
std::optional<std::int64_t> parse_byte_size(std::string_view text);

enum class ZeroBytes { allowed, rejected };

// The size a case key holds at `value` (a key of `at`): parse_byte_size of the scalar. An
// InputError at the value when it is not a size; with ZeroBytes::rejected, a ValueRejection
// "sizes must be at least 1 B, got 0" for 0. Defined in read_byte_size.cpp (it needs yaml-cpp,
// which meshgate-plan, using the rest of this header, does without).
std::int64_t read_byte_size(const CaseNode& at, const YAML::Node& value, std::string_view key,
                            ZeroBytes zero);

// How format_byte_size writes a size; units are binary (B, KiB, MiB, GiB, TiB, PiB, EiB).
enum class ByteSizeStyle {
  // "512 B", "1.5 KiB", "74.5 GiB": three significant digits in the largest unit that holds at
  // least 1 (estimates, limits, plan tables).
  approximate,
  // "1536 B", "8 MiB": the largest unit that divides the size, so no size reads like another
  // (the sizes a case lists, in its messages).
  exact,
  // "1536B", "32MiB": exact, without the blank, as a case file writes it (configuration labels,
  // which parse back with parse_byte_size).
  label,
};

// `bytes` written in `style`; the exact styles expect a whole number of bytes.
std::string format_byte_size(double bytes, ByteSizeStyle style = ByteSizeStyle::approximate);

}  // namespace meshgate::runner
