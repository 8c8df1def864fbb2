// libFuzzer target: CuTe notation as lib/layout reads it from case files (parse_layout,
// parse_int_tuple), and the first things done with a parsed layout (size, cosize, coalesce).
// Findings: a crash or sanitizer report, an exception other than meshgate::Error, a value
// that does not print back to text parsing to the same value, and an error message that is
// not valid UTF-8 although the input was (a message cut inside a character).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "layout/int_tuple.hpp"
#include "layout/layout.hpp"

namespace {

[[noreturn]] void finding(std::string_view what, std::string_view input, std::string_view detail) {
  std::fprintf(stderr, "%.*s for input '%.*s': %.*s\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(input.size()), input.data(), static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

// Well-formed UTF-8: no stray continuation bytes, no truncated or overlong sequences.
bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    const std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
      return false;
    i += length;
  }
  return true;
}

void check_message(std::string_view input, const meshgate::Error& error) {
  if (valid_utf8(input) && !valid_utf8(error.what()))
    finding("error message is not valid UTF-8", input, error.what());
}

void check_layout(std::string_view text) {
  meshgate::Layout layout;
  try {
    layout = meshgate::parse_layout(text);
  } catch (const meshgate::Error& e) {
    check_message(text, e);
    return;
  }
  const std::string printed = meshgate::to_string(layout);
  meshgate::Layout reparsed;
  try {
    reparsed = meshgate::parse_layout(printed);
  } catch (const meshgate::Error& e) {
    finding("printed layout does not parse", text, printed + ": " + e.what());
  }
  if (!(reparsed == layout) || meshgate::to_string(reparsed) != printed)
    finding("printed layout parses to another value", text, printed);
  try {
    (void)meshgate::size(layout);
    (void)meshgate::cosize(layout);
    (void)meshgate::coalesce(layout);
  } catch (const meshgate::Error& e) {
    check_message(text, e);  // overflow and similar rejections are fine; they must read well
  }
}

void check_int_tuple(std::string_view text) {
  meshgate::IntTuple tuple;
  try {
    tuple = meshgate::parse_int_tuple(text);
  } catch (const meshgate::Error& e) {
    check_message(text, e);
    return;
  }
  const std::string printed = meshgate::to_string(tuple);
  meshgate::IntTuple reparsed;
  try {
    reparsed = meshgate::parse_int_tuple(printed);
  } catch (const meshgate::Error& e) {
    finding("printed tuple does not parse", text, printed + ": " + e.what());
  }
  if (!(reparsed == tuple)) finding("printed tuple parses to another value", text, printed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_layout(text);
  check_int_tuple(text);
  return 0;
}
