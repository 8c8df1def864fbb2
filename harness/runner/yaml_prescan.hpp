#pragma once
// Checks on a case file's raw text before yaml-cpp builds a node tree from it. yaml-cpp follows
// an alias that points into its own anchor and builds a cyclic graph (any walk over it recurses
// until the stack overflows), and it shares aliased nodes, so a few lines of nested aliases
// stand for billions of nodes. The pre-scan reads the parser's events only, which costs time
// linear in the text, and refuses such files with file:line:column before any tree exists.
// What aliases add is bounded separately from what is written out, so that a large generated
// file without aliases loads while a few lines of nested aliases do not.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace meshgate::runner {

// What one case file may ask of the loader (cases/README.md, "Limits", documents them).
struct CaseFileLimits {
  std::size_t max_file_bytes = 16u << 20;
  // YAML nodes that aliases add to the file: each alias counts every node of the value it
  // stands for (aliases inside that value expanded), the nodes written in the file do not.
  std::size_t max_alias_nodes = 100'000;
  // YAML nodes written in the file: as many as its cases may hold once expanded
  // (max_case_nodes), checked before yaml-cpp builds a tree of them.
  std::size_t max_written_nodes = 1'000'000;
  // Nesting of mappings and lists, aliases expanded.
  std::size_t max_depth = 64;
  // Combinations of one case's matrix.
  std::size_t max_matrix_combinations = 10'000;
  // YAML nodes of all the file's cases after defaults merging and matrix expansion: what the
  // loaded cases hold in memory.
  std::size_t max_case_nodes = 1'000'000;
};

// The problems of `text` that stop it from being loaded, as "file:line:column: ..." lines (empty
// when it may be parsed): not UTF-8 (UTF-16/32 are named), control characters, more than one
// YAML document, an alias to an anchor that is still open, duplicate or non-string keys, and
// expansions past `limits`. `file` names the text in the messages.
std::vector<std::string> prescan_case_text(std::string_view text, std::string_view file,
                                           const CaseFileLimits& limits);

}  // namespace meshgate::runner
