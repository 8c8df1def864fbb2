#include "results_writer.hpp"

#include <stdexcept>
#include <system_error>

namespace meshgate::runner {

Row make_row(const CaseSpec& spec, const Outcome& outcome, const nlohmann::json& params,
             const nlohmann::json& samples, double seconds, const std::string& impl) {
  return {{"id", spec.id},
          {"suite", spec.suite},
          {"name", spec.name},
          {"kind", spec.kind},
          {"impl", impl},
          {"tags", spec.tags},
          {"file", spec.file},
          {"line", spec.mark.line + 1},
          {"status", std::string(to_string(outcome.status))},
          {"message", outcome.message},
          {"params", nlohmann::ordered_json(params)},
          {"plan", outcome.plan},
          {"metrics", nlohmann::ordered_json(outcome.metrics)},
          {"samples", nlohmann::ordered_json(samples)},
          {"seconds", seconds}};
}

nlohmann::json count_statuses(const std::vector<nlohmann::ordered_json>& rows) {
  nlohmann::json counts = {{"pass", 0}, {"fail", 0}, {"error", 0}, {"skip", 0}};
  for (const nlohmann::ordered_json& row : rows) {
    const std::string status = row.value("status", "error");
    if (counts.contains(status)) {
      counts[status] = counts[status].get<int>() + 1;
    } else {
      counts["error"] = counts["error"].get<int>() + 1;
    }
  }
  return counts;
}

int exit_code_for(const nlohmann::json& counts) {
  if (counts.value("error", 0) > 0) return 2;
  if (counts.value("fail", 0) > 0) return 1;
  return 0;
}

ResultsWriter::ResultsWriter(std::filesystem::path dir, bool resume) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    throw std::runtime_error("cannot create the output directory " + dir_.string() + ": " +
                             ec.message());
  }
  const std::filesystem::path jsonl = dir_ / "results.jsonl";
  if (resume) {
    std::ifstream in(jsonl);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::ordered_json row =
          nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (row.is_discarded() || !row.is_object() || !row.contains("id") || !row["id"].is_string()) {
        ++dropped_lines_;
        continue;
      }
      const std::string id = row["id"].get<std::string>();
      keep(std::move(row), id);
    }
  }
  // Rewriting the kept rows also drops a torn last line, so appends start on a fresh line.
  jsonl_.open(jsonl, std::ios::out | std::ios::trunc);
  if (!jsonl_) throw std::runtime_error("cannot write " + jsonl.string());
  for (const std::optional<nlohmann::ordered_json>& row : rows_) {
    if (row) jsonl_ << row->dump(-1, ' ', false, Row::error_handler_t::replace) << '\n';
  }
  jsonl_.flush();
}

void ResultsWriter::keep(nlohmann::ordered_json row, const std::string& id) {
  const auto [slot, inserted] = row_of_.try_emplace(id, rows_.size());
  if (!inserted) {
    rows_[slot->second].reset();
    slot->second = rows_.size();
  }
  rows_.emplace_back(std::move(row));
}

bool ResultsWriter::has_row(const std::string& id) const {
  return row_of_.contains(id);
}

void ResultsWriter::append(const nlohmann::ordered_json& row) {
  keep(row, row.at("id").get<std::string>());
  jsonl_ << row.dump(-1, ' ', false, Row::error_handler_t::replace) << '\n';
  jsonl_.flush();
}

std::vector<nlohmann::ordered_json> ResultsWriter::ordered_rows(
    const std::vector<std::string>& case_order) const {
  std::vector<nlohmann::ordered_json> ordered;
  ordered.reserve(row_of_.size());
  std::vector<bool> used(rows_.size(), false);
  for (const std::string& id : case_order) {
    const auto slot = row_of_.find(id);
    if (slot == row_of_.end() || used[slot->second]) continue;
    ordered.push_back(*rows_[slot->second]);
    used[slot->second] = true;
  }
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i] && !used[i]) ordered.push_back(*rows_[i]);
  }
  return ordered;
}

void ResultsWriter::write_final(const nlohmann::ordered_json& run,
                                const std::vector<std::string>& case_order) const {
  const nlohmann::ordered_json results = {
      {"schema", kResultsSchema}, {"run", run}, {"cases", ordered_rows(case_order)}};
  const std::filesystem::path target = dir_ / "results.json";
  const std::filesystem::path temporary = dir_ / "results.json.tmp";
  {
    std::ofstream out(temporary, std::ios::out | std::ios::trunc);
    out << results.dump(2, ' ', false, Row::error_handler_t::replace) << '\n';
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temporary.string());
  }
  std::filesystem::rename(temporary, target);
}

}  // namespace meshgate::runner
