#include "diagnostics.hpp"

#include <algorithm>
#include <limits>

namespace meshgate::runner {

std::string location(std::string_view file, const YAML::Mark& mark) {
  std::string out(file);
  if (mark.line >= 0 && mark.column >= 0) {
    out += ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }
  return out;
}

namespace {
// Optimal string alignment distance: a swapped pair of letters ("exepct") counts as one edit.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}
}  // namespace

std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const std::string& candidate : candidates) {
    if (candidate == word) continue;
    const std::size_t distance = edit_distance(word, candidate);
    if (distance <= limit && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::optional<std::string> match = closest_match(word, candidates);
  return match ? " (did you mean '" + *match + "'?)" : std::string();
}

std::string describe_node(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "'" + node.Scalar() + "'";
}

}  // namespace meshgate::runner
