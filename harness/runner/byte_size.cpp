#include "byte_size.hpp"

#include <charconv>
#include <cmath>
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

std::string format_byte_size(double bytes, ByteSizeStyle style) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  char text[48];
  if (style == ByteSizeStyle::approximate) {
    while (unit + 1 < std::size(units) && bytes >= 1024) {
      bytes /= 1024;
      ++unit;
    }
    // Three significant digits, but whole numbers from 1000 (1000 to 1023 B) as they are:
    // %.3g would write them as 1e+03.
    std::snprintf(text, sizeof text, bytes >= 1000 ? "%.0f %s" : "%.3g %s", bytes, units[unit]);
    return text;
  }
  auto value = static_cast<std::int64_t>(std::llround(bytes));
  while (unit + 1 < std::size(units) && value >= 1024 && value % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  return std::to_string(value) + (style == ByteSizeStyle::label ? "" : " ") + units[unit];
}

}  // namespace meshgate::runner
