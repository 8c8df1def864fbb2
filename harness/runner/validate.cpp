#include "validate.hpp"

#include <exception>
#include <new>
#include <stdexcept>

#include "byte_size.hpp"
#include "diagnostics.hpp"
#include "timing.hpp"

namespace meshgate::runner {

const std::vector<std::string>& common_case_keys() {
  static const std::vector<std::string> keys = {"name",         "kind", "tags",        "matrix",
                                                "expect_error", "perf", "memory_limit"};
  return keys;
}

bool valid_kind_name(std::string_view name) {
  const auto is_letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (name.empty() || !is_letter(name.front())) return false;
  for (const char c : name) {
    const bool digit = c >= '0' && c <= '9';
    if (!is_letter(c) && !digit && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

void reject_value(const CaseNode& at, std::string_view key, std::string_view message) {
  try {
    at.fail(key, message);
  } catch (const InputError& e) {
    throw ValueRejection(e.what());
  }
}

void reject_value_at(const CaseNode& at, const YAML::Node& value, std::string_view key,
                     std::string_view message) {
  try {
    at.fail_at(value, key, message);
  } catch (const InputError& e) {
    throw ValueRejection(e.what());
  }
}

namespace {

// A case with expect_error whose values validation rejected: it runs nothing and reports the
// rejection, which the runner judges against expect_error like one raised by the library.
class RejectedCase final : public PreparedCase {
 public:
  explicit RejectedCase(std::string message) : message_(std::move(message)) {}
  MemoryEstimate memory_estimate() const override { return {}; }
  nlohmann::json params() const override { return {{"rejected_at", "validation"}}; }
  Outcome run(RunContext&) override {
    Outcome outcome;
    outcome.rejection = message_;
    return outcome;
  }
  double time_calls(RunContext&, std::int64_t) override { return 0; }
  // The values never became a request: no implementation can be asked about them.
  std::optional<nlohmann::json> impl_request(const std::filesystem::path&,
                                             std::string& why) override {
    why = "meshgate rejects the case's values while reading the case file, before any "
          "implementation runs: " + message_;
    return std::nullopt;
  }

 private:
  std::string message_;
};

// The limit that applies to this case and where it comes from, for the rejection message.
struct MemoryLimit {
  std::int64_t bytes;
  std::string source;
};

MemoryLimit read_memory_limit(CaseNode& node, const ValidationOptions& options) {
  MemoryLimit limit{options.memory_limit.value_or(kDefaultMemoryLimit),
                    options.memory_limit ? "set by --memory-limit" : "the default"};
  const YAML::Node value = node.raw("memory_limit");
  if (!value.IsDefined() || value.IsNull()) return limit;
  const std::optional<std::int64_t> bytes =
      value.IsScalar() ? parse_byte_size(value.Scalar()) : std::nullopt;
  if (!bytes || *bytes < 1) {
    node.fail("memory_limit",
              "expected a size such as 32GiB or a number of bytes, got " + describe_node(value));
  }
  return {*bytes, "set by the case's memory_limit"};
}

// Rejects the case when its estimate is above its limit, at the key the estimate grows with
// ("tensor.shape" is the key shape of the mapping tensor).
void check_memory(CaseNode& node, const PreparedCase& prepared, const MemoryLimit& limit) {
  const MemoryEstimate estimate = prepared.memory_estimate();
  if (estimate.bytes <= static_cast<double>(limit.bytes)) return;
  std::string message =
      "needs an estimated " + format_byte_size(estimate.bytes) + " of host memory";
  if (!estimate.detail.empty()) message += " (" + estimate.detail + ")";
  message += ", above the memory limit of " + format_byte_size(static_cast<double>(limit.bytes)) +
             " (" + limit.source +
             "): make the case smaller, or raise the limit with memory_limit: in the case or "
             "--memory-limit on the runner";
  std::string_view path = estimate.key.empty() ? "kind" : std::string_view(estimate.key);
  CaseNode at = node;
  for (std::size_t dot = path.find('.'); dot != std::string_view::npos; dot = path.find('.')) {
    at = at.child(path.substr(0, dot));
    path.remove_prefix(dot + 1);
  }
  reject_value(at, path, message);
}

std::optional<PerfSpec> read_perf(CaseNode& node) {
  if (!node.has("perf")) return std::nullopt;
  const YAML::Node value = node.raw("perf");
  if (value.IsNull()) return std::nullopt;
  CaseNode perf = node.child("perf");
  PerfSpec spec;
  // Known up front, so a typo next to a bad value still gets its suggestion.
  for (const char* key : {"warmup", "iters", "runs", "min_sample_time"}) perf.has(key);
  const auto read_count = [&](std::string_view key, int& out, int minimum) {
    if (const std::optional<int> v = perf.optional<int>(key)) {
      if (*v < minimum) {
        perf.fail(key,
                  "must be at least " + std::to_string(minimum) + ", got " + std::to_string(*v));
      }
      out = *v;
    }
  };
  read_count("warmup", spec.warmup, 0);
  read_count("iters", spec.iters, 1);
  read_count("runs", spec.runs, 1);
  const YAML::Node min_sample_time = perf.raw("min_sample_time");
  if (min_sample_time.IsDefined() && !min_sample_time.IsNull()) {
    // A bare number is seconds.
    const std::optional<double> seconds =
        min_sample_time.IsScalar() ? parse_duration(min_sample_time.Scalar()) : std::nullopt;
    if (!seconds) {
      perf.fail("min_sample_time", "expected a duration >= 0 such as 1ms, 200us, 0.5s or 0 (one "
                                   "call per sample), got " + describe_node(min_sample_time));
    }
    spec.min_sample_time_s = *seconds;
  }
  return spec;
}

void read_expect_error(CaseNode& node, PlannedCase& planned) {
  const YAML::Node value = node.raw("expect_error");
  if (!value.IsDefined() || value.IsNull()) return;
  if (!value.IsScalar()) {
    node.fail("expect_error", "expected true, false or a substring of the error message, got " +
                                  describe_node(value));
  }
  // A plain true/false is a flag; anything else (including a quoted "true") is a substring.
  bool flag = false;
  if (value.Tag() != "!" && YAML::convert<bool>::decode(value, flag)) {
    planned.expect_error = flag;
    return;
  }
  // An unquoted number is neither a flag nor meant as text: `expect_error: 5` would look for
  // the substring "5" in every message.
  double number = 0;
  if (value.Tag() != "!" && YAML::convert<double>::decode(value, number)) {
    node.fail("expect_error", "expected true, false or a substring of the error message, got the "
                              "number " + value.Scalar() + "; quote it (\"" + value.Scalar() +
                              "\") if the message should contain that text");
  }
  if (value.Scalar().empty())
    node.fail("expect_error", "an empty substring matches anything; write true");
  planned.expect_error = true;
  planned.expected_message = value.Scalar();
}

// A case says what correct means one way: the kind's `expect`, or a rejection.
void check_one_expectation(CaseNode& node, const PlannedCase& planned) {
  if (!planned.expect_error || !node.has("expect")) return;
  const YAML::Node expect = node.raw("expect");
  if (!expect.IsNull()) node.fail_at(expect, "expect", "give either expect or expect_error, not both");
}

}  // namespace

PlannedCases prepare_cases(std::vector<CaseSpec> specs, const std::vector<KindEntry>& kinds,
                           const ValidationOptions& options) {
  PlannedCases out;
  for (const CaseSpec& spec : specs) {
    CaseNode node(spec.node, spec.file, spec.id);
    // Constructed, not assigned: assigning a YAML::Node rewrites the node it refers to.
    PlannedCase planned{spec, false, {}, std::nullopt, nullptr, 0, {}};
    // Whether the kind read every key it knows, i.e. did not stop early at a bad one.
    bool read_every_key = false;
    const KindEntry* entry = nullptr;
    try {
      // Already checked while loading; reading them marks them known.
      node.raw("name");
      node.raw("tags");
      node.raw("matrix");
      node.raw("kind");
      for (const KindEntry& k : kinds) {
        if (k.name == spec.kind) entry = &k;
      }
      if (entry == nullptr) {
        std::vector<std::string> names;
        std::string known;
        for (const KindEntry& k : kinds) {
          names.emplace_back(k.name);
          known += (known.empty() ? "" : ", ") + std::string(k.name);
        }
        node.fail("kind", "unknown kind '" + spec.kind + "'" + did_you_mean(spec.kind, names) +
                              "; known kinds: " + (known.empty() ? "none" : known));
      }
      read_expect_error(node, planned);
      check_one_expectation(node, planned);
      planned.perf = read_perf(node);
      const MemoryLimit limit = read_memory_limit(node, options);
      std::unique_ptr<PreparedCase> prepared;
      try {
        prepared = entry->parse(node, planned.expect_error);
      } catch (const InputError&) {
        throw;
      } catch (const std::bad_alloc&) {
        node.fail("kind", "the " + spec.kind +
                              " kind ran out of host memory while reading the case "
                              "(std::bad_alloc): its sizes are too large for this machine");
      } catch (const std::exception& e) {
        // The kind let a library error escape while reading its keys.
        node.fail("kind", std::string("the ") + spec.kind + " kind rejected the case: " + e.what());
      }
      if (!prepared) node.fail("kind", "the " + spec.kind + " kind prepared no case");
      read_every_key = true;
      check_memory(node, *prepared, limit);
      planned.prepared = std::move(prepared);
    } catch (const ValueRejection& e) {
      if (planned.expect_error) {
        planned.prepared = std::make_unique<RejectedCase>(e.what());
      } else {
        out.errors.emplace_back(e.what());
      }
    } catch (const InputError& e) {
      out.errors.emplace_back(e.what());
    }
    // After an early stop the kind never asked for its later keys: only likely typos of the
    // keys it knows are reported then, never one of those keys itself.
    const std::vector<std::string> unknown =
        read_every_key ? node.unknown_key_errors()
                       : node.unknown_key_errors(
                             true, entry != nullptr ? entry->keys : std::vector<std::string>{});
    out.errors.insert(out.errors.end(), unknown.begin(), unknown.end());
    if (planned.prepared && unknown.empty()) out.cases.push_back(std::move(planned));
  }
  return out;
}

}  // namespace meshgate::runner
