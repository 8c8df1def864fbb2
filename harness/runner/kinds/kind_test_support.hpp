#pragma once
// Shared by the kinds' tests: one case written as YAML text (a mapping on one line, e.g.
// "{name: a, kind: mesh, ...}") in a suite 's' of a file 't.yaml', loaded and validated.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "case_file.hpp"
#include "validate.hpp"

namespace meshgate::runner {

inline PlannedCases plan_case(const std::string& case_yaml, const std::vector<KindEntry>& kinds) {
  LoadedCases loaded;
  load_case_text("suite: s\ncases:\n  - " + case_yaml + "\n", "t.yaml", loaded);
  EXPECT_TRUE(loaded.errors.empty()) << loaded.errors.front();
  return prepare_cases(std::move(loaded.cases), kinds);
}

}  // namespace meshgate::runner
