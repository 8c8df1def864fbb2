#include "filter.hpp"

#include <algorithm>

namespace meshgate::runner {

namespace {
// Matches a bracket expression at pattern[p] against c; returns the index after ']' or npos
// when the bracket is unterminated (then '[' is an ordinary character).
std::size_t match_bracket(std::string_view pattern, std::size_t p, char c, bool& matched) {
  std::size_t i = p + 1;
  const bool negate = i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^');
  if (negate) ++i;
  bool any = false;
  bool first = true;
  for (; i < pattern.size() && (pattern[i] != ']' || first); ++i, first = false) {
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      any = any || (pattern[i] <= c && c <= pattern[i + 2]);
      i += 2;
    } else {
      any = any || pattern[i] == c;
    }
  }
  if (i >= pattern.size()) return std::string_view::npos;
  matched = any != negate;
  return i + 1;
}
}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative matching with one backtrack point for the last '*'.
  std::size_t p = 0, t = 0;
  std::size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = p++;
      star_t = t;
      continue;
    }
    if (p < pattern.size()) {
      if (pattern[p] == '?') {
        ++p;
        ++t;
        continue;
      }
      if (pattern[p] == '[') {
        bool matched = false;
        const std::size_t next = match_bracket(pattern, p, text[t], matched);
        if (next != std::string_view::npos) {
          if (matched) {
            p = next;
            ++t;
            continue;
          }
        } else if (text[t] == '[') {
          ++p;
          ++t;
          continue;
        }
      } else if (pattern[p] == text[t]) {
        ++p;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool selects(const CaseFilter& filter, const CaseSpec& spec) {
  const auto contains = [](const std::vector<std::string>& list, const std::string& value) {
    return std::find(list.begin(), list.end(), value) != list.end();
  };
  if (!filter.suites.empty() && !contains(filter.suites, spec.suite)) return false;
  if (!filter.tags.empty() &&
      std::none_of(spec.tags.begin(), spec.tags.end(),
                   [&](const std::string& tag) { return contains(filter.tags, tag); })) {
    return false;
  }
  if (!filter.case_patterns.empty() &&
      std::none_of(filter.case_patterns.begin(), filter.case_patterns.end(),
                   [&](const std::string& pattern) {
                     return pattern == spec.id || glob_match(pattern, spec.id);
                   })) {
    return false;
  }
  return true;
}

std::vector<CaseSpec> select_cases(const CaseFilter& filter, std::vector<CaseSpec> cases) {
  std::vector<CaseSpec> selected;
  for (CaseSpec& spec : cases) {
    if (selects(filter, spec)) selected.push_back(std::move(spec));
  }
  return selected;
}

}  // namespace meshgate::runner
