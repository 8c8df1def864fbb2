#pragma once
// Sizes in bytes as case files and options write them ("8MiB", "1 GiB", "4096") and as messages
// print them ("74.5 GiB").
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace meshgate::runner {

// A non-negative integer with an optional unit: B, KiB (or K), MiB (M), GiB (G), TiB (T), with or
// without a space before it. nullopt for anything else, and for sizes beyond 2^62 bytes.
std::optional<std::int64_t> parse_byte_size(std::string_view text);

// "512 B", "1.5 KiB", "74.5 GiB": three significant digits in the largest unit that fits.
std::string format_byte_size(double bytes);

}  // namespace meshgate::runner
