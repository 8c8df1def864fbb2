#include "byte_size.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>

namespace meshgate::runner {

std::optional<std::int64_t> parse_byte_size(std::string_view text) {
  std::int64_t number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data() || number < 0) return std::nullopt;
  std::string_view unit = text.substr(static_cast<std::size_t>(end - text.data()));
  if (unit.starts_with(' ')) unit.remove_prefix(1);
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "KiB" || unit == "K") shift = 10;
  if (unit == "MiB" || unit == "M") shift = 20;
  if (unit == "GiB" || unit == "G") shift = 30;
  if (unit == "TiB" || unit == "T") shift = 40;
  if (shift < 0 || number > (std::int64_t{1} << 62 >> shift)) return std::nullopt;
  return number << shift;
}

std::string format_byte_size(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (unit + 1 < std::size(units) && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%.3g %s", bytes, units[unit]);
  return text;
}

}  // namespace meshgate::runner
