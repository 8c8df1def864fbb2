#pragma once
// Loading case files: finding them, merging `defaults`, expanding `matrix`, and checking the
// keys every case needs before it can even be named and filtered (name, kind, tags).
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "yaml_prescan.hpp"

namespace meshgate::runner {

// One case after defaults merging and matrix expansion.
struct CaseSpec {
  std::string file;  // as found from the command-line path
  YAML::Mark mark;   // the case's mapping in that file (0-based, as yaml-cpp gives it)
  std::string suite;
  std::string name;
  std::string id;    // "<suite>/<name>"
  std::string kind;  // as written; checked against the registry when the case is prepared
  std::vector<std::string> tags;
  // The case's own tree (defaults merged, matrix values substituted, the matrix itself left
  // out), positions of the original text kept; it shares no node with the file or other cases.
  YAML::Node node;

  // Assignment rebinds `node` (yaml-cpp's operator= would overwrite the node it refers to),
  // so CaseSpecs can be sorted and stored like any value.
  CaseSpec() = default;
  CaseSpec(const CaseSpec&) = default;
  CaseSpec& operator=(const CaseSpec& other);
};

struct LoadedCases {
  std::vector<CaseSpec> cases;      // file order, then case order, then matrix order
  std::vector<std::string> errors;  // "file:line:column: ..." lines
};

// The case files under `paths`: files as given, directories searched recursively for
// *.yaml / *.yml, each directory's files in sorted order. Missing paths are errors.
std::vector<std::string> find_case_files(const std::vector<std::string>& paths,
                                         std::vector<std::string>& errors);

// Parses one file's text (`file` names it in messages; its stem is the default suite) and
// appends its expanded cases or its errors. The entry point for untrusted text: any bytes give
// cases or printable "file:line:column: ..." errors within `limits`, never a crash or a hang.
void load_case_text(const std::string& text, const std::string& file, LoadedCases& out,
                    const CaseFileLimits& limits = {});

// Finds, reads and loads every case file, then rejects case ids defined twice.
LoadedCases load_cases(const std::vector<std::string>& paths, const CaseFileLimits& limits = {});

// Rejects ids defined more than once, naming both places.
void check_unique_ids(LoadedCases& loaded);

}  // namespace meshgate::runner
