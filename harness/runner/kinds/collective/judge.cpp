// Judging a collective case, meshgate's run or another implementation's: wrong elements
// counted per rank, the verdict and the per-size table.

#include "kinds/collective/collective_case.hpp"

namespace meshgate::runner::collective_kind {

Outcome CollectiveCase::judge(const std::vector<SizeResult>& results) const {
  Outcome outcome;
  nlohmann::json table = nlohmann::json::array();
  std::int64_t total_wrong = 0;
  std::string wrong_sizes;
  const double factor = op->bus_factor(group_size);
  std::optional<SizeResult> largest;
  // The rows another implementation declined, by reason (in the order first seen), and how
  // many there are.
  std::vector<std::pair<std::string, std::string>> declined;
  std::size_t declined_rows = 0;
  for (const SizeResult& r : results) {
    if (r.unsupported) {
      table.push_back(skip_row(r));
      note_declined(declined, r);
      ++declined_rows;
      continue;
    }
    const double algbw = r.time_s > 0 ? static_cast<double>(r.bytes) / r.time_s / 1e9 : 0.0;
    table.push_back({{"bytes", r.bytes},
                     {"count", count_of(r.bytes)},
                     {"time_s", r.time_s},
                     {"algbw_GBps", algbw},
                     {"busbw_GBps", algbw * factor},
                     {"wrong", r.wrong},
                     {"inplace", r.inplace},
                     {"modeled_time_s", modeled(r.bytes)}});
    if (r.calls_per_sample) table.back()["calls_per_sample"] = *r.calls_per_sample;
    total_wrong += r.wrong;
    if (r.wrong > 0) {
      wrong_sizes +=
          (wrong_sizes.empty() ? "" : ", ") + row_name(r) + ": " + std::to_string(r.wrong);
    }
    if (!largest || r.bytes > largest->bytes) largest = r;
  }
  outcome.metrics["sizes"] = table;
  outcome.metrics["wrong"] = total_wrong;
  outcome.metrics["group_size"] = group_size;
  outcome.metrics["groups"] = groups.size();
  if (largest) {
    const double algbw =
        largest->time_s > 0 ? static_cast<double>(largest->bytes) / largest->time_s / 1e9 : 0.0;
    outcome.metrics["bytes"] = largest->bytes;
    outcome.metrics["modeled_time_s"] = modeled(largest->bytes);
    outcome.metrics["algbw_GBps"] = algbw;
    outcome.metrics["busbw_GBps"] = algbw * factor;
  }
  outcome.plan = {plan_line()};
  outcome.console_detail = console_table(results);
  if (total_wrong > 0) {
    outcome.status = Status::fail;
    outcome.message = std::to_string(total_wrong) + " wrong element(s) summed over the ranks (" +
                      wrong_sizes + "); expected exact results";
  }
  if (declined_rows > 0) add_declined(outcome, declined, declined_rows, results.size());
  return outcome;
}

std::string CollectiveCase::row_name(const SizeResult& r) {
  return format_byte_size(static_cast<double>(r.bytes), ByteSizeStyle::exact) +
         (r.inplace ? " in-place" : " out-of-place");
}

std::int64_t CollectiveCase::count_wrong(RankState& state, std::vector<std::byte>& host, const Codec& codec,
                         const Values& values, std::int64_t bytes, bool in_place, int g) const {
  comm::Communicator& group = *state.group;
  const std::size_t es = element_size();
  const Call call = call_buffers(state, bytes, in_place, g);
  group.copy_to_host(host.data(), call.recv, recv_bytes(bytes));
  std::int64_t wrong = wrong_in_output(host.data(), codec, values, bytes, g);
  if (checks_send(in_place, g)) {
    group.copy_to_host(host.data(), call.send, count_of(bytes) * es);
    wrong += wrong_in_send(host.data(), codec, values, bytes);
  }
  return wrong;
}

std::int64_t CollectiveCase::wrong_in_output(const std::byte* out, const Codec& codec, const Values& values,
                             std::int64_t bytes, int g) const {
  const std::size_t count = count_of(bytes);
  const std::size_t out_elements = recv_bytes(bytes) / element_size();
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < out_elements; ++i) {
    const ExpectedValue e = op->expected(i, count, g, root);
    const std::int64_t expected =
        e.reduced ? values.reduced(e.index) : values.input(e.rank, e.index);
    if (!codec.equals(out, i, expected)) ++wrong;
  }
  return wrong;
}

std::int64_t CollectiveCase::wrong_in_send(const std::byte* send, const Codec& codec, const Values& values,
                           std::int64_t bytes) const {
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < count_of(bytes); ++i) {
    if (!codec.equals(send, i, values.input(root, i))) ++wrong;
  }
  return wrong;
}

std::string CollectiveCase::console_table(const std::vector<SizeResult>& results) const {
  const double factor = op->bus_factor(group_size);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "      %12s %12s %8s %7s %5s  %10s %8s %8s %7s  %10s %8s %8s %7s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
  out += line;
  std::snprintf(line, sizeof line,
                "      %12s %12s %8s %7s %5s  %10s %8s %8s %7s  %10s %8s %8s %7s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
  out += line;
  out += "      " + std::string(62, ' ') + "out-of-place" + std::string(30, ' ') + "in-place\n";
  std::vector<std::int64_t> seen;
  for (const SizeResult& r : results) {
    if (std::find(seen.begin(), seen.end(), r.bytes) != seen.end()) continue;
    seen.push_back(r.bytes);
    std::string cells[2];
    for (const SizeResult& v : results) {
      if (v.bytes != r.bytes) continue;
      if (v.unsupported) {
        char skipped[96];
        std::snprintf(skipped, sizeof skipped, "  %10s %8s %8s %7s", "skip", "-", "-", "-");
        cells[v.inplace ? 1 : 0] = skipped;
        continue;
      }
      const double algbw = v.time_s > 0 ? static_cast<double>(v.bytes) / v.time_s / 1e9 : 0.0;
      char cell[96];
      std::snprintf(cell, sizeof cell, "  %10.2f %8.2f %8.2f %7lld", v.time_s * 1e6, algbw,
                    algbw * factor, static_cast<long long>(v.wrong));
      cells[v.inplace ? 1 : 0] = cell;
    }
    for (std::string& cell : cells) {
      if (cell.empty()) {
        char empty[96];
        std::snprintf(empty, sizeof empty, "  %10s %8s %8s %7s", "-", "-", "-", "-");
        cell = empty;
      }
    }
    std::snprintf(line, sizeof line, "      %12lld %12zu %8s %7s %5s",
                  static_cast<long long>(r.bytes), count_of(r.bytes),
                  std::string(comm::to_string(dtype)).c_str(),
                  reduce ? std::string(to_string(*reduce)).c_str() : "-",
                  op->has_root ? std::to_string(root).c_str() : "-");
    out += line + cells[0] + cells[1] + "\n";
  }
  return out;
}

// A row another implementation declined: the row's identity as meshgate's own run writes it,
// so that the table's shape (and the signals made from it) is the same whichever implementation
// ran; no measurement.
nlohmann::json CollectiveCase::skip_row(const SizeResult& r) const {
  return {{"bytes", r.bytes},
          {"count", count_of(r.bytes)},
          {"inplace", r.inplace},
          {"modeled_time_s", modeled(r.bytes)},
          {"status", "skip"},
          {"reason", *r.unsupported}};
}

// The declined rows by reason, in the order first seen: the row's name under its reason.
void CollectiveCase::note_declined(std::vector<std::pair<std::string, std::string>>& declined,
                                   const SizeResult& r) {
  const std::string row = row_name(r);
  const auto same = std::find_if(declined.begin(), declined.end(),
                                 [&](const auto& d) { return d.first == *r.unsupported; });
  if (same == declined.end()) {
    declined.emplace_back(*r.unsupported, row);
  } else {
    same->second += ", " + row;
  }
}

// The outcome of a case some of whose rows were declined: their reasons in the message, and a
// skip when nothing ran.
void CollectiveCase::add_declined(Outcome& outcome,
                                  const std::vector<std::pair<std::string, std::string>>& declined,
                                  std::size_t declined_rows, std::size_t row_count) {
  std::string text = std::to_string(declined_rows) + " of " + std::to_string(row_count) +
                     " rows not run by the implementation";
  for (const auto& [reason, rows] : declined) text += "; " + rows + ": " + reason;
  if (declined_rows == row_count) {
    // Nothing ran: nothing was judged (no count of wrong elements that would read as 0),
    // and the case is a skip that says why.
    outcome.status = Status::skip;
    outcome.message = std::move(text);
    outcome.metrics.erase("wrong");
  } else {
    outcome.message += (outcome.message.empty() ? "" : "; ") + text;
  }
}

}  // namespace meshgate::runner::collective_kind
