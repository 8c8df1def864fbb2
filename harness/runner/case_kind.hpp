#pragma once
// The contract between the runner and a case kind. A kind is one file (kinds/<kind>_kind.cpp)
// plus one entry in kinds/registry.cpp: `parse` validates the case's keys before anything runs
// and returns a prepared case; `run` executes it and checks it against its expectation.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace meshgate::runner {

// A bad case file: the message names file:line:column, the case and the key.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One case's expanded YAML mapping (defaults merged, matrix values substituted) that validates
// while it is read. Every getter records the key as known; finish() rejects the rest.
class CaseNode {
 public:
  CaseNode(YAML::Node node, std::string file, std::string case_id, std::string key_path = "");

  bool has(std::string_view key) const;
  YAML::Node raw(std::string_view key);          // marks the key read; null node when absent
  template <class T> T required(std::string_view key);                  // InputError if absent/wrong type
  template <class T> std::optional<T> optional(std::string_view key);   // InputError if wrong type
  CaseNode child(std::string_view key);          // nested mapping, e.g. "expect"; InputError if not a map
  // An InputError for this key: "<file>:<line>:<col>: case '<id>': key '<path.key>': <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  [[noreturn]] void fail_at(const YAML::Node& node, std::string_view key, std::string_view message) const;
  // InputError naming the first key that was never read (with a close known key if any).
  void finish() const;

  const std::string& file() const;
  const std::string& case_id() const;
  const YAML::Node& node() const;

 private:
  YAML::Node node_;
  std::string file_;
  std::string case_id_;
  std::string key_path_;
  std::shared_ptr<std::vector<std::string>> read_keys_;
};

enum class Status { pass, fail, error, skip };
std::string_view to_string(Status s);

// What one case produced. `plan` and `metrics` follow the results CONTRACT.
struct Outcome {
  Status status = Status::pass;
  std::string message;               // why it failed/errored/skipped; expected vs actual on fail
  std::vector<std::string> plan;     // issued collectives / chosen algorithm, when the kind has one
  nlohmann::json metrics = nlohmann::json::object();
};

// What a kind may ask of the runner while running a case.
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual std::string_view backend() const = 0;  // "threads", "mpi", "nccl"
  virtual int world_size() const = 0;            // ranks available to this case
  // Runs fn(rank) on `ranks` concurrent rank threads (threads backend) and waits for all.
  // A rank that throws does not stop the others; the first failure is rethrown as
  // RankFailure naming the rank and its message.
  virtual void run_on_ranks(int ranks, const std::function<void(int rank)>& fn) = 0;
};

class RankFailure : public std::runtime_error {
 public:
  RankFailure(int rank, const std::string& message)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + message), rank_(rank) {}
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

class PreparedCase {
 public:
  virtual ~PreparedCase() = default;
  // Ranks the case needs (its mesh size); 1 for host-only kinds.
  virtual int ranks() const { return 1; }
  // Resolved parameters for the result row (enough to reproduce the case).
  virtual nlohmann::json params() const = 0;
  // Runs the op and compares with `expect`. A meshgate::Error thrown from the library means
  // "the op was rejected": the runner turns it into pass (expect_error) or fail (otherwise).
  virtual Outcome run(RunContext& ctx) = 0;
  // One timed iteration of the measured work, for perf cases (warm-up and timing are the
  // runner's). Returns the iteration's seconds: for multi-rank work, the max over ranks.
  virtual double time_iteration(RunContext& ctx) = 0;
};

struct KindEntry {
  std::string_view name;
  // Reads and validates the kind's own keys (the common keys name/kind/tags/matrix/expect_error/
  // perf are consumed by the runner before). `expect_error` tells whether the case expects a
  // rejection: then library-level parsing of arguments (e.g. malformed layout text) must be
  // deferred to run() so that the rejection itself is what the case tests.
  std::unique_ptr<PreparedCase> (*parse)(CaseNode& node, bool expect_error);
};

// All kinds, in registry order (kinds/registry.cpp).
const std::vector<KindEntry>& case_kinds();

}  // namespace meshgate::runner
