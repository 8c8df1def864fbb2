// Running a command case: every rank meets the others, runs its process, and hands its report
// to every rank, whose merge is the case's outcome; the deadline the processes run under.
#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "kinds/command/command_case.hpp"

namespace meshgate::runner::command_kind {
namespace {

std::string format_seconds(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

}  // namespace

Outcome CommandCase::run(RunContext& ctx) {
  const Deadline deadline = deadline_for(ctx.case_timeout_s());
  RankStopper stopper;
  std::vector<std::string> gathered;
  ctx.run_on_ranks(rank_count, [&](int rank, comm::Communicator& comm) {
    const Rendezvous meet = agree_on_rendezvous(comm);
    // Whatever happens to this rank becomes its report: a rank that threw before the next
    // exchange would leave its peers in other processes waiting there forever.
    nlohmann::json report;
    if (!meet.problem.empty()) {
      report = {{"error", meet.problem}};
    } else {
      try {
        report = run_rank(rank, rank_count, meet, command, env, deadline, stopper);
      } catch (const std::exception& e) {
        stopper.stop_others(rank);
        report = {{"error", std::string("the runner could not run it: ") + e.what()}};
      }
    }
    std::vector<std::string> all = all_gather_text(comm, report.dump());
    if (rank == ctx.lead_rank()) gathered = std::move(all);
  });
  std::vector<nlohmann::json> reports;
  for (const std::string& text : gathered) reports.push_back(nlohmann::json::parse(text));
  return merge_reports(reports, ctx.perf().has_value());
}

double CommandCase::time_calls(RunContext&, std::int64_t) {
  throw std::logic_error("a command case is timed by its program, not by time_calls");
}

Deadline CommandCase::deadline_for(double case_timeout_s) const {
  Deadline deadline;
  const Clock::time_point now = Clock::now();
  const auto after = [&](double seconds) {
    return now +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  if (timeout_s) {
    deadline = {after(*timeout_s), true,
                "timed out after " + format_seconds(*timeout_s) + " s (the case's timeout)"};
  }
  if (case_timeout_s > 0) {
    const double before_watchdog =
        case_timeout_s - std::min(kMaxWatchdogMargin, kWatchdogMargin * case_timeout_s);
    if (!timeout_s || before_watchdog < *timeout_s) {
      deadline = {after(before_watchdog), true,
                  "was still running at the runner's case timeout (--case-timeout " +
                      format_seconds(case_timeout_s) + " s)"};
    }
  }
  return deadline;
}

}  // namespace meshgate::runner::command_kind
