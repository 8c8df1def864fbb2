#pragma once
// What the runner prints while it runs: human lines, or with --progress one JSON event per
// line for the driver (harness/README.md).
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshgate::runner {

class Console {
 public:
  Console(std::ostream& out, bool progress) : out_(out), progress_(progress) {}

  void plan(const std::vector<std::string>& ids);
  void start(const std::string& id, const std::string& kind, std::size_t index, std::size_t total,
             const nlohmann::json& params);
  // `row` is the result row just written; index is 1-based. `detail` (human mode only) is
  // printed as it is under the status line, e.g. a kind's table of sizes.
  void end(const nlohmann::ordered_json& row, std::size_t index, std::size_t total,
           const std::string& detail = "");
  void done(int exit_code, const nlohmann::json& counts, double seconds);

 private:
  void emit(const nlohmann::ordered_json& event);

  std::ostream& out_;
  bool progress_;
};

// "0.1 ms", "12.3 ms", "1.23 s": a case's duration for humans.
std::string human_duration(double seconds);


}  // namespace meshgate::runner
