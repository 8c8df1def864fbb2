#include "results_writer.hpp"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>

namespace meshgate::runner {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

nlohmann::json row(const std::string& id, const std::string& status) {
  return {{"id", id}, {"status", status}};
}

class ResultsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("meshgate_results_writer_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ResultsWriterTest, StreamsEveryRowAtOnce) {
  ResultsWriter writer(dir_, false);
  writer.append(row("s/a", "pass"));
  // Readable before the writer is closed: a crash after this loses nothing.
  ASSERT_EQ(read_lines(dir_ / "results.jsonl").size(), 1u);
  writer.append(row("s/b", "fail"));
  const std::vector<std::string> lines = read_lines(dir_ / "results.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["id"], "s/b");
}

TEST_F(ResultsWriterTest, ResumeKeepsRowsAndDropsATornLine) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "results.jsonl") << row("s/a", "pass").dump() << "\n"
                                        << row("s/b", "error").dump() << "\n"
                                        << "{\"id\": \"s/c\", \"sta";
  ResultsWriter writer(dir_, true);
  EXPECT_TRUE(writer.has_row("s/a"));
  EXPECT_TRUE(writer.has_row("s/b"));
  EXPECT_FALSE(writer.has_row("s/c"));
  EXPECT_EQ(writer.dropped_lines(), 1u);
  writer.append(row("s/c", "pass"));
  EXPECT_EQ(read_lines(dir_ / "results.jsonl").size(), 3u);

  ResultsWriter fresh(dir_, false);
  EXPECT_FALSE(fresh.has_row("s/a"));
  EXPECT_TRUE(read_lines(dir_ / "results.jsonl").empty());
}

TEST_F(ResultsWriterTest, FinalRowsFollowCaseOrder) {
  ResultsWriter writer(dir_, false);
  writer.append(row("s/b", "pass"));
  writer.append(row("other/x", "skip"));
  writer.append(row("s/a", "fail"));
  writer.write_final({{"id", "r"}}, {"s/a", "s/b"});
  std::ifstream in(dir_ / "results.json");
  const nlohmann::json results = nlohmann::json::parse(in);
  EXPECT_EQ(results["schema"], "meshgate.results/1");
  EXPECT_EQ(results["run"]["id"], "r");
  ASSERT_EQ(results["cases"].size(), 3u);
  EXPECT_EQ(results["cases"][0]["id"], "s/a");
  EXPECT_EQ(results["cases"][1]["id"], "s/b");
  EXPECT_EQ(results["cases"][2]["id"], "other/x");
  EXPECT_FALSE(fs::exists(dir_ / "results.json.tmp"));
}

TEST_F(ResultsWriterTest, ALaterRowForAnIdReplacesTheEarlierOne) {
  ResultsWriter writer(dir_, false);
  writer.append(row("s/a", "error"));
  writer.append(row("s/b", "pass"));
  writer.append(row("s/a", "pass"));
  const std::vector<nlohmann::ordered_json> rows = writer.ordered_rows({});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["id"], "s/b");  // arrival order of the rows kept
  EXPECT_EQ(rows[1]["id"], "s/a");
  EXPECT_EQ(rows[1]["status"], "pass");

  ResultsWriter resumed(dir_, true);  // the same rule when the rows come from results.jsonl
  const std::vector<nlohmann::ordered_json> kept = resumed.ordered_rows({"s/a", "s/b"});
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0]["status"], "pass");
  EXPECT_EQ(read_lines(dir_ / "results.jsonl").size(), 2u);
}

// A run of n cases appends n rows, asks has_row n times and orders them once: linear work.
// 20k rows take well under a CPU second that way; the quadratic bookkeeping this replaced took
// minutes, so the generous bound (CPU time, which a busy machine does not inflate) catches a
// return of it without timing anything tightly.
TEST_F(ResultsWriterTest, TwentyThousandRowsStayLinear) {
  constexpr int kRows = 20000;
  std::vector<std::string> order;
  for (int i = 0; i < kRows; ++i) order.push_back("big/case-" + std::to_string(i));
  const std::clock_t start = std::clock();
  {
    ResultsWriter writer(dir_, false);
    for (auto id = order.rbegin(); id != order.rend(); ++id) {
      ASSERT_FALSE(writer.has_row(*id));
      writer.append({{"id", *id}, {"status", "pass"}, {"message", ""}, {"params", {{"n", 1}}}});
    }
    writer.write_final({{"id", "big"}}, order);
  }
  ResultsWriter resumed(dir_, true);
  for (const std::string& id : order) ASSERT_TRUE(resumed.has_row(id));
  const std::vector<nlohmann::ordered_json> rows = resumed.ordered_rows(order);
  const double cpu_seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  ASSERT_EQ(rows.size(), order.size());
  EXPECT_EQ(rows.front()["id"], order.front());
  EXPECT_EQ(rows.back()["id"], order.back());
  EXPECT_LT(cpu_seconds, 10.0) << "20k rows: the writer has gone quadratic again";
}

TEST(ResultCounts, ExitCodeFollowsTheWorstStatus) {
  EXPECT_EQ(exit_code_for(count_statuses({row("a", "pass"), row("b", "skip")})), 0);
  EXPECT_EQ(exit_code_for(count_statuses({row("a", "pass"), row("b", "fail")})), 1);
  EXPECT_EQ(exit_code_for(count_statuses({row("a", "fail"), row("b", "error")})), 2);
  const nlohmann::json counts = count_statuses({row("a", "pass"), row("b", "pass")});
  EXPECT_EQ(counts, (nlohmann::json{{"pass", 2}, {"fail", 0}, {"error", 0}, {"skip", 0}}));
}

}  // namespace
}  // namespace meshgate::runner
