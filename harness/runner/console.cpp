#include "console.hpp"

#include <cstdio>

namespace meshgate::runner {

namespace {

// Code points a terminal would act on, or that reorder or break what a reader sees.
bool acts_instead_of_printing(char32_t code) {
  return code < 0x20 || (code >= 0x7F && code <= 0x9F) || code == 0x061C || code == 0x200E ||
         code == 0x200F || (code >= 0x2028 && code <= 0x202E) ||
         (code >= 0x2066 && code <= 0x2069) || code == 0xFFFE || code == 0xFFFF;
}

void append_escape(std::string& out, char32_t code) {
  char buffer[16];
  switch (code) {
    case U'\n':
      out += "\\n";
      return;
    case U'\r':
      out += "\\r";
      return;
    case U'\t':
      out += "\\t";
      return;
    default:
      break;
  }
  if (code < 0x100) {
    std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(code));
  } else {
    std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(code));
  }
  out += buffer;
}

// The length of the well-formed UTF-8 sequence at the start of `text` and its code point, or
// 0 when the first byte starts none (stray continuation, overlong form, surrogate, cut short).
std::size_t decode_utf8(std::string_view text, char32_t& code) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  char32_t minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code = lead & 0x1F, minimum = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, code = lead & 0x0F, minimum = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      if (acts_instead_of_printing(lead)) {
        append_escape(out, lead);
      } else {
        out += static_cast<char>(lead);
      }
      ++i;
      continue;
    }
    char32_t code = 0;
    const std::size_t length = decode_utf8(text.substr(i), code);
    if (length == 0) {
      append_escape(out, lead);  // not UTF-8: the byte itself, visibly
      ++i;
    } else if (acts_instead_of_printing(code)) {
      append_escape(out, code);
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string human_duration(double seconds) {
  char buffer[32];
  if (seconds < 1.0) {
    std::snprintf(buffer, sizeof buffer, "%.1f ms", seconds * 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f s", seconds);
  }
  return buffer;
}

// Events keep the key order of harness/README.md ("event" first), which reads better in logs.
void Console::emit(const nlohmann::ordered_json& event) {
  // Invalid UTF-8 in a message (e.g. from a library error) must not stop the stream.
  out_ << event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  out_.flush();
}

void Console::plan(const std::vector<std::string>& ids) {
  if (progress_) emit({{"event", "plan"}, {"total", ids.size()}, {"ids", ids}});
}

void Console::start(const std::string& id, const std::string& kind, std::size_t index,
                    std::size_t total, const nlohmann::json& params) {
  if (progress_) {
    emit({{"event", "start"},
          {"id", id},
          {"kind", kind},
          {"index", index},
          {"total", total},
          {"params", nlohmann::ordered_json(params)}});
  }
}

void Console::end(const nlohmann::ordered_json& row, std::size_t index, std::size_t total,
                  const std::string& detail) {
  const std::string status = row.value("status", "error");
  const std::string message = row.value("message", "");
  const double seconds = row.value("seconds", 0.0);
  if (progress_) {
    emit({{"event", "end"},
          {"id", row.value("id", "")},
          {"index", index},
          {"status", status},
          {"seconds", seconds},
          {"message", message}});
    return;
  }
  const int width = static_cast<int>(std::to_string(total).size());
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "[%*zu/%zu] %-6s ", width, index, total, status.c_str());
  out_ << prefix << printable(row.value("id", "")) << "  (" << human_duration(seconds) << ")\n";
  if (status != "pass" && !message.empty()) {
    // Multi-line messages (expected vs actual) stay readable under their case.
    std::size_t start = 0;
    while (start <= message.size()) {
      const std::size_t newline = message.find('\n', start);
      out_ << "      " << printable(std::string_view(message).substr(start, newline - start))
           << '\n';
      if (newline == std::string::npos) break;
      start = newline + 1;
    }
  }
  out_ << detail;
  if (!detail.empty() && detail.back() != '\n') out_ << '\n';
  out_.flush();
}

void Console::done(int exit_code, const nlohmann::json& counts, double seconds) {
  if (progress_) {
    const nlohmann::ordered_json ordered_counts = {{"pass", counts.value("pass", 0)},
                                                   {"fail", counts.value("fail", 0)},
                                                   {"error", counts.value("error", 0)},
                                                   {"skip", counts.value("skip", 0)}};
    emit({{"event", "done"}, {"exit_code", exit_code}, {"counts", ordered_counts}});
    return;
  }
  const int total = counts.value("pass", 0) + counts.value("fail", 0) + counts.value("error", 0) +
                    counts.value("skip", 0);
  out_ << total << (total == 1 ? " case: " : " cases: ") << counts.value("pass", 0) << " pass, "
       << counts.value("fail", 0) << " fail, " << counts.value("error", 0) << " error, "
       << counts.value("skip", 0) << " skip (" << human_duration(seconds) << ")\n";
  out_.flush();
}

}  // namespace meshgate::runner
