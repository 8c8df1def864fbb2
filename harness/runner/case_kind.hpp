#pragma once
// The contract between the runner and a case kind. A kind is its folder kinds/<kind>/ (or one
// file, kinds/<kind>_kind.cpp) plus one entry in kinds/registry.cpp: `parse` validates the
// case's keys before anything runs and returns a prepared case; `run` executes it and checks it
// against its expectation.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "comm/communicator.hpp"

namespace meshgate::runner {

// A bad case file: the message names file:line:column, the case and the key.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value that the case file spells correctly but that cannot be run: a group naming a mesh dim
// the mesh lacks, a size that does not divide the group, a layout the library will not parse, an
// estimate above the memory limit. The case is rejected while it is validated: with expect_error
// the runner judges the rejection as it judges one raised while the case runs; without it, it is
// an input error like any other. Schema errors (unknown keys, wrong types, missing keys) stay
// plain InputErrors whatever the case expects.
class ValueRejection : public InputError {
 public:
  using InputError::InputError;
};

// One case's expanded YAML mapping (defaults merged, matrix values substituted) that validates
// while it is read. Every getter records the key as known; finish() rejects the rest.
class CaseNode {
 public:
  CaseNode(YAML::Node node, std::string file, std::string case_id, std::string key_path = "");
  // Copies share the record of read keys. Assignment rebinds to the other node: yaml-cpp's
  // own operator= would instead overwrite the node this one refers to, inside the case file.
  CaseNode(const CaseNode&) = default;
  CaseNode& operator=(const CaseNode& other);

  bool has(std::string_view key) const;
  YAML::Node raw(std::string_view key);  // marks the key read; null node when absent
  template <class T>
  T required(std::string_view key);  // InputError if absent/wrong type
  template <class T>
  std::optional<T> optional(std::string_view key);  // InputError if wrong type
  CaseNode child(std::string_view key);  // nested mapping, e.g. "expect"; InputError if not a map
  // An InputError for this key: "<file>:<line>:<col>: case '<id>': key '<path.key>': <message>".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  [[noreturn]] void fail_at(const YAML::Node& node, std::string_view key,
                            std::string_view message) const;
  // InputError naming the first key that was never read (with a close known key if any).
  void finish() const;

  // One message per key that was never read (finish() throws the first), so the runner can
  // report every unknown key of a case at once. With `close_only`, only keys that look like a
  // typo of a key that was asked for: used after parse() stopped early on another error. Keys
  // in `vocabulary` (dotted paths, as read) count as known whether or not they were read: after
  // an early stop the kind never asked for its later keys, and a valid one is no typo.
  std::vector<std::string> unknown_key_errors(
      bool close_only = false, const std::vector<std::string>& vocabulary = {}) const;

  const std::string& file() const;
  const std::string& case_id() const;
  const YAML::Node& node() const;

 private:
  YAML::Node value_of(std::string_view key) const;  // without recording; null node when absent
  void note_known(std::string_view key) const;
  void collect_unknown(bool close_only, const std::vector<std::string>& vocabulary,
                       std::vector<std::string>& out) const;
  [[noreturn]] void fail_wrong_type(const YAML::Node& value, std::string_view key,
                                    std::string_view expected) const;

  YAML::Node node_;
  std::string file_;
  std::string case_id_;
  std::string key_path_;
  // Full dotted paths ("expect.layout") of every key asked for, shared with child() nodes.
  std::shared_ptr<std::vector<std::string>> read_keys_;
  // Paths entered through child(): finish() checks their keys too.
  std::shared_ptr<std::vector<std::string>> child_paths_;
};

// ValueRejection for `key` of `at`, in the words and position of CaseNode::fail / fail_at.
[[noreturn]] void reject_value(const CaseNode& at, std::string_view key, std::string_view message);
[[noreturn]] void reject_value_at(const CaseNode& at, const YAML::Node& value, std::string_view key,
                                  std::string_view message);

namespace detail {
// "an integer", "a list of strings", ...: what a getter expected, for error messages.
template <class T>
std::string expected_type_name() {
  if constexpr (std::is_same_v<T, bool>) {
    return "a boolean";
  } else if constexpr (std::is_integral_v<T>) {
    return "an integer";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "a string";
  } else if constexpr (std::is_same_v<T, YAML::Node>) {
    return "a value";
  } else if constexpr (requires { typename T::value_type; }) {
    const std::string item = expected_type_name<typename T::value_type>();
    return "a list of " + item.substr(item.find(' ') + 1) + "s";
  } else {
    return "a value of another type";
  }
}

// Whether `text` is written as a whole number ("12", "-3", "+7"): a plain scalar that an integer
// getter could not read then was out of the type's range, not of another type.
bool is_integer_literal(const YAML::Node& value);

// Strict scalar reads: yaml-cpp would turn a list or a mapping into an error, but it also
// accepts any scalar as a string; a string key must not silently take a list.
template <class T>
bool decode_strict(const YAML::Node& value, T& out) {
  if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T>) {
    if (!value.IsScalar()) return false;
  }
  // A quoted scalar is text: yaml-cpp would read "2" as the number 2, and `shape: [2, "2"]`
  // would pass for `shape: [2, 2]`.
  if constexpr (std::is_arithmetic_v<T>) {
    if (value.Tag() == "!") return false;
  } else if constexpr (requires { typename T::value_type; }) {
    if constexpr (std::is_arithmetic_v<typename T::value_type>) {
      if (value.IsSequence()) {
        for (const YAML::Node& item : value) {
          if (item.Tag() == "!") return false;
        }
      }
    }
  }
  try {
    out = value.as<T>();
    return true;
  } catch (const YAML::Exception&) {
    return false;
  }
}
// For an integer type (or a list of them): the first value written as a whole number that
// the type cannot hold, with "N is out of range: expected an integer from MIN to MAX"; nullopt
// when the value failed for another reason.
template <class T>
std::optional<std::pair<YAML::Node, std::string>> out_of_range(const YAML::Node& value) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!is_integer_literal(value)) return std::nullopt;
    return std::pair{value, value.Scalar() + " is out of range: expected an integer from " +
                                std::to_string(std::numeric_limits<T>::min()) + " to " +
                                std::to_string(std::numeric_limits<T>::max())};
  } else if constexpr (requires { typename T::value_type; } &&
                       !std::is_same_v<T, std::string>) {
    if (!value.IsSequence()) return std::nullopt;
    for (const YAML::Node& item : value) {
      typename T::value_type decoded{};
      if (decode_strict(item, decoded)) continue;
      return out_of_range<typename T::value_type>(item);
    }
    return std::nullopt;
  } else {
    return std::nullopt;
  }
}

}  // namespace detail

template <class T>
T CaseNode::required(std::string_view key) {
  std::optional<T> value = optional<T>(key);
  if (!value) fail(key, "is required (" + detail::expected_type_name<T>() + ")");
  return *std::move(value);
}

template <class T>
std::optional<T> CaseNode::optional(std::string_view key) {
  YAML::Node value = raw(key);
  if (!value || value.IsNull()) return std::nullopt;
  T out{};
  if (!detail::decode_strict(value, out)) {
    if (const auto too_large = detail::out_of_range<T>(value)) {
      fail_at(too_large->first, key, too_large->second);
    }
    fail_wrong_type(value, key, detail::expected_type_name<T>());
  }
  return out;
}

enum class Status { pass, fail, error, skip };
std::string_view to_string(Status s);

// What one case produced. `plan` and `metrics` follow the results CONTRACT.
struct Outcome {
  Status status = Status::pass;
  std::string message;            // why it failed/errored/skipped; expected vs actual on fail
  std::vector<std::string> plan;  // issued collectives / chosen algorithm, when the kind has one
  nlohmann::json metrics = nlohmann::json::object();
  // The op was rejected with this message, but the kind has metrics worth keeping (e.g. the
  // model comparison of a mesh case). The runner judges it against expect_error exactly like a
  // thrown meshgate::Error, and keeps `metrics` and `plan`.
  std::optional<std::string> rejection;
  // Lines the human console prints under the case's status line (e.g. an nccl-tests-like
  // table); not part of the result row.
  std::string console_detail;
  // Seconds per timed iteration that run() measured itself, for a performance case whose timed
  // work happens inside run() (a command case's program times its own iterations, an isolated
  // case's child process times its own calls). The runner records these as the run's samples
  // and does not call time_calls().
  std::optional<std::vector<double>> measured_time_s;
  // How many calls each of those samples covers, when the kind knows (absent for a program
  // that times its own iterations).
  std::optional<std::int64_t> measured_calls_per_sample;
};

// The shortest a timed sample may take when neither the case (perf.min_sample_time) nor the
// runner (--min-sample-time) says. Long enough that the pair of clock reads (some 20-50 ns) is
// below 0.05 % of a sample; short enough that on a busy machine most samples run without being
// preempted, so that the median of a run's samples leaves the preempted ones out. Samples of
// 1 ms had a higher A/A noise floor than samples of 100 us on every perf-layout-mesh case of a
// loaded two-core machine (docs/cases.md, Performance).
inline constexpr double kDefaultMinSampleTimeS = 100e-6;

// How a performance case is measured (the `perf:` key).
struct PerfSpec {
  int warmup = 5;  // untimed samples
  int iters = 20;  // timed samples in this process
  int runs = 9;    // separate processes; the driver repeats, the runner makes one run
  // A sample times a batch of calls that takes at least this long and reports the time per
  // call (timing.hpp); 0: one call per sample. The case's own value, else the runner's.
  std::optional<double> min_sample_time_s;

  double min_sample_time() const { return min_sample_time_s.value_or(kDefaultMinSampleTimeS); }
};

// What a kind may ask of the runner while running a case. A case runs on the ranks its
// ranks() asks for; each rank gets a Communicator over exactly those ranks.
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual std::string_view backend() const = 0;  // "threads", "mpi", "nccl"
  virtual int world_size() const = 0;            // ranks available to this case
  // Runs fn(rank, comm) on ranks 0..ranks-1 of the case and waits for all; `comm` is that
  // rank's communicator over those `ranks` ranks. threads: one thread per rank in this process;
  // mpi/nccl: this process runs its own rank only (and nothing when its rank is >= ranks).
  // A rank that throws does not stop the others; every rank then learns the failure and the
  // same exception is raised everywhere: a meshgate::Error (a rejection by the library) as
  // itself, anything else as RankFailure naming the rank and its message.
  virtual void run_on_ranks(int ranks,
                            const std::function<void(int rank, comm::Communicator& comm)>& fn) = 0;
  // The rank whose per-rank results this process reads after run_on_ranks: 0 for threads
  // (every rank ran here), this process's own rank for mpi/nccl. Kinds reduce their checks
  // over the communicator, so every rank holds the same verdict.
  virtual int lead_rank() const = 0;
  // The case's `perf:` when it is a performance case; kinds that time inside run() (the
  // collective kind's per-size table) use the same warm-up, sample counts and minimum sample
  // time.
  virtual std::optional<PerfSpec> perf() const = 0;
  // Collective over the processes running this case: each passes a number of calls per sample
  // (or 0) and all get the largest, so that every rank times batches of the same size.
  virtual std::int64_t agree_on_calls(std::int64_t calls) { return calls; }
  // The run's --case-timeout in seconds, 0 when there is none. Past it the runner's watchdog
  // ends the whole run; a kind that starts processes of its own stops them before that, so the
  // case gets an error row of its own and the run goes on.
  virtual double case_timeout_s() const { return 0; }
  // A folder of the run's own (under its --out) where a case may keep what a resumed run of the
  // same folder continues from, e.g. a long sweep's progress; empty when the run has none. A
  // kind creates it when it first writes there and leaves nothing behind once its case is done.
  const std::string& state_dir() const { return state_dir_; }
  void set_state_dir(std::string dir) { state_dir_ = std::move(dir); }

 private:
  std::string state_dir_;
};

class RankFailure : public std::runtime_error {
 public:
  RankFailure(int rank, const std::string& message)
      : std::runtime_error("rank " + std::to_string(rank) + ": " + message), rank_(rank) {}
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

// The host memory a case allocates while it runs, estimated from its keys before anything runs:
// the allocations that grow with the case's sizes (buffers, tensors, enumerations), with every
// rank in this process as on the threads backend. The runner rejects a case whose estimate is
// above its memory limit (validate.hpp), naming `key`.
struct MemoryEstimate {
  double bytes = 0;
  std::string key;     // the key whose value the estimate grows with, e.g. "bytes", "tensor.shape"
  std::string detail;  // how it adds up, e.g. "8 ranks x (send 1 GiB + receive 1 GiB)"
};

class PreparedCase {
 public:
  virtual ~PreparedCase() = default;
  virtual MemoryEstimate memory_estimate() const = 0;
  // Ranks the case needs (its mesh size); 1 for host-only kinds.
  virtual int ranks() const { return 1; }
  // Resolved parameters for the result row (enough to reproduce the case).
  virtual nlohmann::json params() const = 0;
  // Runs the op and compares with `expect`. A meshgate::Error thrown from the library means
  // "the op was rejected": the runner turns it into pass (expect_error) or fail (otherwise).
  virtual Outcome run(RunContext& ctx) = 0;
  // Runs the measured work `calls` times back to back, for perf cases (how many calls, the
  // warm-up and the samples are the runner's, timing.hpp). Returns the seconds of all the calls
  // together: for multi-rank work, the max over ranks. May be called any number of times
  // between run() and release().
  virtual double time_calls(RunContext& ctx, std::int64_t calls) = 0;
  // Frees what the case holds (device buffers, library handles) once the runner is done with
  // it, so that one case's memory is not held while the next ones run.
  virtual void release() {}

  // For an implementation under test other than meshgate (external_impl.hpp, the protocol in
  // docs/impl-protocol.md): the request that hands this case to it, with any input tensors
  // written under `dir`. nullopt, with `why` set, when the case cannot be handed over (the row
  // is then a skip saying why).
  virtual std::optional<nlohmann::json> impl_request(const std::filesystem::path& dir,
                                                     std::string& why) {
    (void)dir;
    why = "this case cannot be handed to another implementation";
    return std::nullopt;
  }
  // Judges the observables another implementation answered exactly as run() judges the
  // library's own results: pass, or fail with expected against actual. Observables that are not
  // of the protocol's form throw ImplFailure (an error row naming the implementation).
  virtual Outcome check_observables(const nlohmann::json& observables,
                                    const std::filesystem::path& dir) {
    (void)observables;
    (void)dir;
    throw std::logic_error("check_observables without impl_request");
  }
};

struct KindEntry {
  std::string_view name;
  // Reads and validates the kind's own keys (the common keys name/kind/tags/matrix/expect_error/
  // perf/memory_limit are consumed by the runner before). A value the case cannot run with is a
  // ValueRejection (reject_value): the runner judges it against expect_error, so kinds validate
  // values here whether or not the case expects a rejection. `expect_error` tells the kind that
  // the case has no `expect:` to read.
  std::unique_ptr<PreparedCase> (*parse)(CaseNode& node, bool expect_error);
  // Every key the kind reads, dotted below the mappings it enters with child() ("expect.shape").
  // When parse stops at a bad value, none of them is reported as an unknown key.
  std::vector<std::string> keys = {};
  // The deterministic signals the kind's rows carry beyond the generic ones every kind may have
  // (status, plan, collective and byte counts, modeled costs): the names under which the gate
  // compares them with a baseline, with no statistics (docs/results.md, "Deterministic signals").
  // For the built-in kinds, harness/meshgate/gate/signals.py reads exactly these.
  std::vector<std::string> signals = {};
  // Whether the kind's prepared cases can be handed to another implementation under test
  // (`--impl`, docs/impl-protocol.md): they implement impl_request and check_observables.
  bool impl_protocol = false;
  // Set by the registry: true for meshgate's own kinds, false for any register_kind adds.
  bool built_in = false;
};

// All kinds, in registry order (kinds/registry.cpp): the built-in ones, then those registered.
const std::vector<KindEntry>& case_kinds();

// Kind names are what case files write after `kind:` and result rows record: a letter, then
// letters, digits, '_', '-' or '.' (results-1.schema.json holds rows to the same form).
bool valid_kind_name(std::string_view name);

}  // namespace meshgate::runner
