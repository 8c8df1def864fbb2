// The redistribute kind's words: placements as written, reduce ops, shapes and collectives in
// messages (redistribute_case.hpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kinds/redistribute/redistribute_case.hpp"

namespace meshgate::runner::redistribute_kind {

const std::vector<std::string>& reduce_ops() {
  static const std::vector<std::string> ops = {
      "sum",         "mean",        "amax", "amin", "vector_norm", "all", "any", "argmax",
      "argmin",      "max_indices", "min_indices", "add", "t", "mm", "full_tensor"};
  return ops;
}

bool is_reduction(const std::string& op) {
  return op != "add" && op != "t" && op != "mm" && op != "full_tensor";
}

bool needs_dim(const std::string& op) { return op == "max_indices" || op == "min_indices"; }

nlohmann::json scalar_json(double scalar) {
  const bool whole = std::nearbyint(scalar) == scalar && std::fabs(scalar) < 9.0e15;
  return whole ? nlohmann::json(static_cast<std::int64_t>(scalar)) : nlohmann::json(scalar);
}

// The op as called, for messages: torch.sum on a DTensor, DTensor.t(), torch.mm on DTensors,
// DTensor.full_tensor().
std::string op_call(const std::string& op) {
  if (op == "t") return "DTensor.t()";
  if (op == "full_tensor") return "DTensor.full_tensor()";
  if (op == "mm") return "torch.mm on DTensors";
  if (op == "add") return "a DTensor plus a scalar";
  if (needs_dim(op)) return "the indices of torch." + op.substr(0, 3) + " on a DTensor";
  return "torch." + op + " on a DTensor";
}

std::vector<std::string> split_placement_items(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& text : items) {
    int depth = 0;
    std::size_t start = 0;
    for (std::size_t i = 0; i <= text.size(); ++i) {
      if (i < text.size() && (text[i] == '(' || text[i] == '[')) ++depth;
      if (i < text.size() && (text[i] == ')' || text[i] == ']')) --depth;
      if (i == text.size() || (text[i] == ',' && depth == 0)) {
        std::string item = text.substr(start, i - start);
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        out.push_back(b == std::string::npos ? std::string() : item.substr(b, e - b + 1));
        start = i + 1;
      }
    }
  }
  return out;
}

std::optional<std::pair<std::int64_t, std::int64_t>> parse_strided(const std::string& item) {
  static const std::regex form(R"(^SS\(\s*(-?[0-9]+)\s*,\s*(-?[0-9]+)\s*\)$)");
  if (item.rfind("SS(", 0) != 0 && item.rfind("SS ", 0) != 0) return std::nullopt;
  std::smatch m;
  if (!std::regex_match(item, m, form)) {
    throw std::runtime_error("cannot parse '" + item +
                             "': a strided shard is written SS(dim, split_factor), e.g. SS(0,2)");
  }
  const std::int64_t dim = std::stoll(m[1].str());
  const std::int64_t factor = std::stoll(m[2].str());
  if (factor < 1) {
    throw std::runtime_error("'" + item + "': the split factor must be >= 1, got " +
                             std::to_string(factor));
  }
  return std::pair{dim, factor};
}

std::string join(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Expected vs issued collectives, entry by entry.
std::string comm_diff(const std::vector<std::string>& want, const std::vector<std::string>& got) {
  std::string out = "collectives differ: expected " + join(want) + ", issued " + join(got);
  const std::size_t n = std::max(want.size(), got.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::string w = i < want.size() ? want[i] : "(none)";
    const std::string g = i < got.size() ? got[i] : "(none)";
    if (w != g) out += "\n  #" + std::to_string(i) + ": - " + w + "\n      + " + g;
  }
  return out;
}

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (std::size_t i = 0; i < problems.size(); ++i) out += (i ? "; " : "") + problems[i];
  return out;
}

std::vector<std::string> read_placements_text(const YAML::Node& v, const CaseNode& at,
                                              std::string_view key) {
  std::vector<std::string> items;
  if (v.IsScalar()) {
    items.push_back(v.Scalar());
  } else if (v.IsSequence()) {
    for (const auto& item : v) {
      if (!item.IsScalar())
        at.fail_at(item, key, "each placement is a string such as S(0), R, P(sum)");
      items.push_back(item.Scalar());
    }
  } else {
    at.fail_at(v, key, "expected a list of placements such as [P(sum), R, S(0)]");
  }
  return items;
}

std::string placements_text(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
  return out;
}

}  // namespace meshgate::runner::redistribute_kind
