#pragma once
// results.jsonl (one row per finished case, flushed at once) and results.json (the results
// CONTRACT, written at the end or when the watchdog gives up).
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_file.hpp"
#include "case_kind.hpp"

namespace meshgate::runner {

inline constexpr const char* kResultsSchema = "meshgate.results/1";

// Rows and results.json keep the key order of harness/README.md and the results CONTRACT
// (id first, schema first), which is what people read; parsers do not care.
using Row = nlohmann::ordered_json;

// The implementation that computes a case's observables unless --impl names another.
inline constexpr const char* kDefaultImpl = "meshgate";

// One result row as harness/README.md lists its fields; `impl` computed its observables.
Row make_row(const CaseSpec& spec, const Outcome& outcome, const nlohmann::json& params,
             const nlohmann::json& samples, double seconds,
             const std::string& impl = kDefaultImpl);

// Counts per status over rows: {"pass": n, "fail": n, "error": n, "skip": n}.
nlohmann::json count_statuses(const std::vector<nlohmann::ordered_json>& rows);

// 0 all pass/skip, 1 any fail, 2 any error.
int exit_code_for(const nlohmann::json& counts);

class ResultsWriter {
 public:
  // Creates `dir`. With `resume`, the rows of an existing results.jsonl are kept (a torn last
  // line from a crash is dropped); otherwise results.jsonl starts empty.
  ResultsWriter(std::filesystem::path dir, bool resume);

  bool has_row(const std::string& id) const;
  // Appends the row to results.jsonl and flushes it.
  void append(const nlohmann::ordered_json& row);
  // Rows for `case_order` first (in that order), then kept rows of other cases.
  std::vector<nlohmann::ordered_json> ordered_rows(
      const std::vector<std::string>& case_order) const;
  // Writes results.json through a temporary file and a rename, so it is never half written.
  void write_final(const nlohmann::ordered_json& run,
                   const std::vector<std::string>& case_order) const;

  const std::filesystem::path& dir() const { return dir_; }
  std::size_t dropped_lines() const { return dropped_lines_; }

 private:
  std::filesystem::path dir_;
  std::ofstream jsonl_;
  // Keeps the row of `id`; a later row for an id replaces the earlier one. Constant time, so
  // a run of n cases costs O(n) here, not O(n^2).
  void keep(nlohmann::ordered_json row, const std::string& id);

  // In arrival order; a replaced row leaves an empty slot, so positions in `row_of_` stay valid.
  std::vector<std::optional<nlohmann::ordered_json>> rows_;
  std::unordered_map<std::string, std::size_t> row_of_;  // case id -> its slot in rows_
  std::size_t dropped_lines_ = 0;
};

}  // namespace meshgate::runner
