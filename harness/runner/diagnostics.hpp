#pragma once
// Shared pieces of input-error messages: where (file:line:column) and "did you mean".
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace meshgate::runner {

// "<file>:<line>:<column>" with 1-based line and column (YAML::Mark is 0-based); a node
// without a position (built in memory) prints as "<file>".
std::string location(std::string_view file, const YAML::Mark& mark);

// The candidate closest to `word` when it is close enough to be a likely typo (edit distance
// with transpositions, at most a third of the word's length, at least 1).
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// "a list", "a mapping", "null" or the scalar quoted: what a node is, for type errors.
std::string describe_node(const YAML::Node& node);

}  // namespace meshgate::runner
