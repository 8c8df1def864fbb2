#pragma once
// Case selection from --suite, --tag and --case.
#include <string>
#include <string_view>
#include <vector>

#include "case_file.hpp"

namespace meshgate::runner {

struct CaseFilter {
  std::vector<std::string> suites;         // any of them; empty = all
  std::vector<std::string> tags;           // at least one of them; empty = all
  std::vector<std::string> case_patterns;  // exact ids or fnmatch patterns; empty = all
};

// fnmatch-style: '*' any run of characters (including '/'), '?' one character, [abc] / [!abc].
bool glob_match(std::string_view pattern, std::string_view text);

bool selects(const CaseFilter& filter, const CaseSpec& spec);

std::vector<CaseSpec> select_cases(const CaseFilter& filter, std::vector<CaseSpec> cases);

}  // namespace meshgate::runner
