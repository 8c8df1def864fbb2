#include "console.hpp"

#include <cstdio>

#include "diagnostics.hpp"

namespace meshgate::runner {


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
          {"message", message},
          {"file", row.value("file", "")},
          {"line", row.value("line", 0)}});
    return;
  }
  const int width = static_cast<int>(std::to_string(total).size());
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "[%*zu/%zu] %-6s ", width, index, total, status.c_str());
  // Ids and messages carry text from case files and libraries: escaped, never raw, on a terminal.
  out_ << prefix << printable(row.value("id", "")) << "  (" << human_duration(seconds) << ")\n";
  if (status != "pass" && !message.empty()) {
    const std::string safe_message = message_text(message);
    // Multi-line messages (expected vs actual) stay readable under their case.
    std::size_t start = 0;
    while (start <= safe_message.size()) {
      const std::size_t newline = safe_message.find('\n', start);
      out_ << "      " << safe_message.substr(start, newline - start) << '\n';
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
